package controller

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/simserver"
)

// startSimServer runs `muster sim serve` in-process on 127.0.0.1:0 until
// the end of the test and returns its URL.
func startSimServer(tb testing.TB, cfg simserver.Config) string {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Listen = "127.0.0.1:0"
	cfg.Ready = func(url, _, _ string) { urls <- url }
	go func() { done <- simserver.Run(ctx, cfg) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("sim server: %v", err)
		}
	})
	select {
	case url := <-urls:
		return url
	case err := <-done:
		tb.Fatalf("sim server: %v", err)
		return ""
	}
}

// An ec2 model on an external sim: the sim server's simulated agents boot
// the instances' user data, so machines become started with the
// instances' hardware; a stopped instance's machine goes down and comes
// back when started; removal without --force completes (the agent makes
// its machine dead, the provisioner terminates the instance).
func TestEC2OnSimServerMachinesStart(t *testing.T) {
	ac := openAgentsController(t, Config{})
	// Started after the controller, so stopped (with its agents) before it.
	url := startSimServer(t, simserver.Config{SimAgents: true,
		Cloud: sim.Config{PendingTime: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}})
	ctx := context.Background()
	if _, err := ac.client.AddModel(ctx, api.AddModelRequest{Name: "aws", Provider: "ec2",
		Config: map[string]string{"region": "us-east-1", "endpoint": url}}); err != nil {
		t.Fatal(err)
	}
	ac.setConfig(t, "aws", map[string]string{"agent-heartbeat": "200ms"})
	ids := ac.addMachines(t, "aws", api.AddMachinesRequest{Count: 4, Constraints: "cores=2"})
	st := ac.waitMachines(t, "aws", "started", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	for _, id := range ids {
		if m := st.Machines[id]; !strings.Contains(m.Hardware, "cores=2") || len(m.Addresses) == 0 {
			t.Errorf("machine %s: hardware %q addresses %v, want the sim instance's", id, m.Hardware, m.Addresses)
		}
	}

	client := ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(url),
		Credentials: credentials.NewStaticCredentialsProvider(sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey, "")})
	// The batch's shared user data holds no machine's secret: the agents
	// enrolled with the batch token and their instances' identities.
	for _, id := range ids {
		ud := userDataOf(t, client, st.Machines[id].InstanceID)
		if !strings.Contains(ud, "enrol-token") || strings.Contains(ud, "password") || strings.Contains(ud, "nonce") {
			t.Fatalf("user data of machine %s's instance: want an enrolment token and no password or nonce:\n%s", id, ud)
		}
	}
	if n := countEvents(t, ac, "aws", "enrol"); n != len(ids) {
		t.Errorf("%d enrol events, want one per machine (%d)", n, len(ids))
	}
	inst := st.Machines[ids[0]].InstanceID
	if _, err := client.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{inst}}); err != nil {
		t.Fatal(err)
	}
	ac.waitMachines(t, "aws", "down", ids[:1], func(m api.MachineStatus) bool { return m.Status == string(muster.StatusDown) })
	if _, err := client.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{inst}}); err != nil {
		t.Fatal(err)
	}
	ac.waitMachines(t, "aws", "started again", ids[:1], func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })

	if err := ac.client.RemoveMachines(ctx, "aws", api.RemoveMachinesRequest{IDs: ids[1:3]}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, agentsDeadline, "the removed machines gone", func() bool {
		ms := ac.status(t, "aws").Machines
		_, ok1 := ms[ids[1]]
		_, ok2 := ms[ids[2]]
		return !ok1 && !ok2 && len(ms) == 2
	})
}

// userDataOf returns an instance's user data as EC2's
// DescribeInstanceAttribute gives it, decoded.
func userDataOf(tb testing.TB, client *ec2.Client, id string) string {
	tb.Helper()
	out, err := client.DescribeInstanceAttribute(context.Background(), &ec2.DescribeInstanceAttributeInput{
		InstanceId: aws.String(id), Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(aws.ToString(out.UserData.Value))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// countEvents counts a model's events of a kind.
func countEvents(tb testing.TB, ac *agentsController, model, kind string) int {
	tb.Helper()
	evs, err := ac.client.Events(context.Background(), model, api.EventQuery{})
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// A sim model on a served sim takes the sim's identity certificate at
// open (its agents, run by the sim server, enrol with documents it
// verifies); a sim that does not give one fails the open with an error
// naming it.
func TestRemoteSimModelTakesTheSimsIdentityCert(t *testing.T) {
	ctx := context.Background()
	env := func(ep string) ProviderEnv {
		return ProviderEnv{ControllerUUID: "c", Model: muster.Model{UUID: "u", Name: "m", Provider: "sim", Config: map[string]string{"endpoint": ep}},
			Logger: slog.New(slog.DiscardHandler)}
	}
	cloud, err := sim.Open(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cloud.Close()
	srv := httptest.NewServer(sim.NewServer(cloud))
	defer srv.Close()
	mp, err := openSimProvider(ctx, env(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Close()
	if string(mp.IdentityCert) != string(cloud.IdentityCert()) {
		t.Errorf("identity certificate %q, want the sim's", mp.IdentityCert)
	}
	notSim := httptest.NewServer(http.NotFoundHandler())
	defer notSim.Close()
	if _, err := openSimProvider(ctx, env(notSim.URL)); err == nil || !strings.Contains(err.Error(), "identity certificate") {
		t.Errorf("open on a server that is no sim: %v, want an error naming the identity certificate", err)
	}
}
