package ec2api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/ec2api"
)

// What EC2's clients count on beyond muster's own provider (issue 16),
// with the SDK and the cloud's fake clock.

func (e *ec2Env) state(t *testing.T, id string) types.InstanceState {
	t.Helper()
	out, err := e.api.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.Reservations) != 1 || len(out.Reservations[0].Instances) != 1 {
		t.Fatalf("DescribeInstances %s: %+v, %v", id, out, err)
	}
	return *out.Reservations[0].Instances[0].State
}

func (e *ec2Env) statuses(t *testing.T, all bool, ids ...string) []string {
	t.Helper()
	out, err := e.api.DescribeInstanceStatus(context.Background(), &ec2.DescribeInstanceStatusInput{InstanceIds: ids, IncludeAllInstances: aws.Bool(all)})
	if err != nil {
		t.Fatalf("DescribeInstanceStatus: %v", err)
	}
	var got []string
	for _, s := range out.InstanceStatuses {
		got = append(got, aws.ToString(s.InstanceId)+"/"+string(s.InstanceState.Name)+"/"+string(s.InstanceStatus.Status))
	}
	return got
}

func wantState(t *testing.T, what string, got types.InstanceState, name types.InstanceStateName, code int32) {
	t.Helper()
	if got.Name != name || aws.ToInt32(got.Code) != code {
		t.Errorf("%s: got %s (%d), want %s (%d)", what, got.Name, aws.ToInt32(got.Code), name, code)
	}
}

func TestEC2PendingStopStart(t *testing.T) {
	e := newEC2Env(t, sim.Config{PendingTime: 5 * time.Second})
	ctx := context.Background()
	out := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil))
	id := aws.ToString(out.Instances[0].InstanceId)
	wantState(t, "RunInstances", *out.Instances[0].State, types.InstanceStateNamePending, 0)
	wantState(t, "at once", e.state(t, id), types.InstanceStateNamePending, 0)
	if got := e.statuses(t, false); len(got) != 0 {
		t.Errorf("status of a pending instance without IncludeAllInstances: %v", got)
	}
	if got, want := e.statuses(t, true), []string{id + "/pending/initializing"}; !reflect.DeepEqual(got, want) {
		t.Errorf("status while pending: got %v, want %v", got, want)
	}
	_, err := e.api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}, once)
	wantAPIError(t, "stop while pending", err, "IncorrectInstanceState", 400)
	e.clock.Advance(5 * time.Second)
	wantState(t, "after the pending time", e.state(t, id), types.InstanceStateNameRunning, 16)
	if got, want := e.statuses(t, false, id), []string{id + "/running/ok"}; !reflect.DeepEqual(got, want) {
		t.Errorf("status when running: got %v, want %v", got, want)
	}

	stop, err := e.api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, "StopInstances' current state", *stop.StoppingInstances[0].CurrentState, types.InstanceStateNameStopping, 64)
	_, err = e.api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}, once)
	wantAPIError(t, "start while stopping", err, "IncorrectInstanceState", 400)
	e.clock.Advance(5 * time.Second)
	wantState(t, "stopped", e.state(t, id), types.InstanceStateNameStopped, 80)
	if insts, err := e.c.Provider(testController, testModel).Instances(ctx); err != nil || len(insts) != 0 {
		t.Errorf("sim provider of another model lists %+v, %v", insts, err)
	}
	if all := e.c.AllInstances(); len(all) != 1 || all[0].State != "stopped" {
		t.Errorf("the cloud has %+v, want one stopped instance", all)
	}
	start, err := e.api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	wantState(t, "StartInstances' previous state", *start.StartingInstances[0].PreviousState, types.InstanceStateNameStopped, 80)
	e.clock.Advance(5 * time.Second)
	wantState(t, "started", e.state(t, id), types.InstanceStateNameRunning, 16)
	if _, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	_, err = e.api.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}, once)
	wantAPIError(t, "start a terminated instance", err, "IncorrectInstanceState", 400)
	_, err = e.api.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}, once)
	wantAPIError(t, "stop an unknown instance", err, "InvalidInstanceID.NotFound", 400)
	if s := e.c.Stats(); s.Calls[sim.CallModify] != 6 {
		t.Errorf("got %d modify calls, want 6", s.Calls[sim.CallModify])
	}
}

func TestEC2Tags(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	out := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 2, 2, instanceTags("team", "red")))
	a, b := aws.ToString(out.Instances[0].InstanceId), aws.ToString(out.Instances[1].InstanceId)
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	if _, err := e.api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{a}, Tags: []types.Tag{tag("role", "db"), tag("team", "blue")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{b}, Tags: []types.Tag{tag("team", "green")}}); err != nil {
		t.Fatal(err)
	}
	describe := func(filters ...types.Filter) []string {
		t.Helper()
		out, err := e.api.DescribeTags(ctx, &ec2.DescribeTagsInput{Filters: filters})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, td := range out.Tags {
			got = append(got, aws.ToString(td.ResourceId)+":"+aws.ToString(td.Key)+"="+aws.ToString(td.Value))
		}
		return got
	}
	want := []string{a + ":role=db", a + ":team=blue", b + ":team=red"}
	sort.Strings(want) // DescribeTags lists by resource id, then key
	if got := describe(filter("resource-id", a, b)); !reflect.DeepEqual(got, want) {
		t.Errorf("DescribeTags: got %v, want %v (a DeleteTags with another value deletes nothing)", got, want)
	}
	if _, err := e.api.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{b}, Tags: []types.Tag{{Key: aws.String("team")}}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.describeAll(t, filter("tag-value", "red", "blue")); !reflect.DeepEqual(ids(got), []string{a}) {
		t.Errorf("tag-value filter after DeleteTags: got %v, want %v", ids(got), []string{a})
	}
	_, err := e.api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{a, "i-0123456789abcdef0"}, Tags: []types.Tag{tag("x", "y")}}, once)
	wantAPIError(t, "CreateTags of an unknown instance", err, "InvalidInstanceID.NotFound", 400)
	if got := describe(filter("key", "x")); len(got) != 0 {
		t.Errorf("a failed CreateTags tagged %v", got)
	}
	_, err = e.api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{a}, Tags: []types.Tag{tag("aws:x", "y")}}, once)
	wantAPIError(t, "reserved key", err, "InvalidParameterValue", 400)

	// Tagging an instance with a model and launch token makes it that
	// launch's instance: the sim's own start adopts it.
	if _, err := e.api.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{b}, Tags: []types.Tag{
		tag(muster.TagController, testController), tag(muster.TagModel, testModel), tag(muster.TagMachine, "7"), tag(muster.TagLaunchToken, "tok-7"),
	}}); err != nil {
		t.Fatal(err)
	}
	res := mustStart(t, e.c.Provider(testController, testModel), startParams("7", "a"))
	if res.Instance.ID != b || e.c.Stats().InstancesStarted != 2 {
		t.Errorf("start with the tagged launch token: got %s (%d started), want %s and nothing started", res.Instance.ID, e.c.Stats().InstancesStarted, b)
	}
}

func TestEC2RunInstancesRefusesWhatTheSimDoesNotDo(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		edit func(*ec2.RunInstancesInput)
		code string
	}{
		{"key name", func(in *ec2.RunInstancesInput) { in.KeyName = aws.String("does-not-exist") }, "InvalidKeyPair.NotFound"},
		{"security group", func(in *ec2.RunInstancesInput) { in.SecurityGroupIds = []string{"sg-0123456789abcdef0"} }, "InvalidGroup.NotFound"},
		{"IAM profile", func(in *ec2.RunInstancesInput) {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String("admin")}
		}, "Unsupported"},
		{"spot", func(in *ec2.RunInstancesInput) {
			in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot}
		}, "Unsupported"},
		{"private IP", func(in *ec2.RunInstancesInput) { in.PrivateIpAddress = aws.String("10.1.0.9") }, "Unsupported"},
		{"monitoring", func(in *ec2.RunInstancesInput) {
			in.Monitoring = &types.RunInstancesMonitoringEnabled{Enabled: aws.Bool(true)}
		}, "Unsupported"},
		{"NIC in another zone", func(in *ec2.RunInstancesInput) {
			in.SubnetId = nil
			in.Placement = &types.Placement{AvailabilityZone: aws.String("b")}
			in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(sim.SubnetID("a", "alpha"))}}
		}, "InvalidParameterValue"},
		{"NIC and subnet", func(in *ec2.RunInstancesInput) {
			in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(sim.SubnetID("a", "alpha"))}}
		}, "InvalidParameterCombination"},
		{"second NIC", func(in *ec2.RunInstancesInput) {
			in.SubnetId = nil
			in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(sim.SubnetID("a", "alpha"))}, {DeviceIndex: aws.Int32(1), SubnetId: aws.String(sim.SubnetID("a", "beta"))}}
		}, "Unsupported"},
	} {
		in := e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil)
		tt.edit(in)
		_, err := e.api.RunInstances(ctx, in, once)
		wantAPIError(t, tt.name, err, tt.code, 400)
	}
	if n := len(e.c.AllInstances()); n != 0 {
		t.Errorf("refused starts left %d instances", n)
	}
	// One network interface is the instance's subnet.
	in := e.runIn(t, "", 1, 1, nil)
	in.SubnetId = nil
	in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(sim.SubnetID("b", "beta"))}}
	if out := e.run(t, in); aws.ToString(out.Instances[0].SubnetId) != sim.SubnetID("b", "beta") || aws.ToString(out.Instances[0].Placement.AvailabilityZone) != "b" {
		t.Errorf("NIC subnet: got subnet %s in %s", aws.ToString(out.Instances[0].SubnetId), aws.ToString(out.Instances[0].Placement.AvailabilityZone))
	}
}

func TestEC2StrictIdempotency(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	in := e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, instanceTags("team", "red"))
	in.ClientToken = aws.String("strict-1")
	in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte("one")))
	first := e.run(t, in)
	in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte("two")))
	if again := e.run(t, in); aws.ToString(again.ReservationId) != aws.ToString(first.ReservationId) {
		t.Errorf("repeat with other user data: got reservation %s, want %s", aws.ToString(again.ReservationId), aws.ToString(first.ReservationId))
	}
	in.TagSpecifications = instanceTags("team", "blue")
	_, err := e.api.RunInstances(ctx, in, once)
	wantAPIError(t, "repeat with other tags", err, "IdempotentParameterMismatch", 400)
	if n := len(e.c.AllInstances()); n != 1 {
		t.Errorf("got %d instances, want 1", n)
	}
}

func TestEC2RequestChecks(t *testing.T) {
	ctx := context.Background()
	e := newEC2EnvKeys(t, sim.Config{}, ec2api.Config{Clock: fakeclock.New(time.Now().Add(20 * time.Minute))})
	_, err := e.api.DescribeRegions(ctx, &ec2.DescribeRegionsInput{}, once)
	wantAPIError(t, "signed 20 minutes before the server's time", err, "RequestExpired", 400)
	e = newEC2EnvKeys(t, sim.Config{}, ec2api.Config{Clock: fakeclock.New(time.Now().Add(-20 * time.Minute))})
	_, err = e.api.DescribeRegions(ctx, &ec2.DescribeRegionsInput{}, once)
	wantAPIError(t, "signed 20 minutes after the server's time", err, "RequestExpired", 400)
	e = newEC2EnvKeys(t, sim.Config{}, ec2api.Config{Clock: fakeclock.New(time.Now().Add(10 * time.Minute))})
	regions, err := e.api.DescribeRegions(ctx, &ec2.DescribeRegionsInput{}, once)
	if err != nil || len(regions.Regions) != 1 || aws.ToString(regions.Regions[0].RegionName) != "us-east-1" {
		t.Errorf("signed 10 minutes off: got %+v, %v; want region us-east-1", regions, err)
	}
	status, r := doRaw(t, signedRequest(t, e.srv.URL, "Action=DescribeRegions", sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey))
	if status != 400 || r.Code != "MissingParameter" {
		t.Errorf("no Version: got %d %s, want 400 MissingParameter", status, r.Code)
	}
}

// A state file saved when subnet ids were "subnet-ZONE-SPACE" loads with
// the instances in today's subnet ids.
func TestEC2OldSubnetIDsInStateFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	e := newEC2Env(t, sim.Config{StateFile: file})
	id := aws.ToString(e.run(t, e.runIn(t, sim.SubnetID("b", "beta"), 1, 1, nil)).Instances[0].InstanceId)
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.ReplaceAll(b, []byte(sim.SubnetID("b", "beta")), []byte("subnet-b-beta"))
	if bytes.Equal(old, b) {
		t.Fatal("the state file does not name the subnet")
	}
	if err := os.WriteFile(file, old, 0o600); err != nil {
		t.Fatal(err)
	}
	e2 := newEC2Env(t, sim.Config{StateFile: file})
	got, _ := e2.describeAll(t, filter("subnet-id", sim.SubnetID("b", "beta")))
	if !reflect.DeepEqual(ids(got), []string{id}) {
		t.Errorf("instances of subnet %s after loading old ids: got %v, want %s", sim.SubnetID("b", "beta"), ids(got), id)
	}
}
