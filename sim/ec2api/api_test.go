package ec2api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/ec2api"
	"github.com/musterhq/muster/sim/simserver"
)

// ec2Env is a cloud served over HTTP with an EC2 client of the real SDK.
type ec2Env struct {
	c     *sim.Cloud
	clock *fakeclock.Clock
	srv   *httptest.Server
	api   *ec2.Client

	key, secret string // the API's key pair
}

func newEC2Env(t *testing.T, cfg sim.Config) *ec2Env {
	t.Helper()
	return newEC2EnvKeys(t, cfg, ec2api.Config{})
}

// newEC2EnvKeys is newEC2Env with an API that takes the keys of keys.
func newEC2EnvKeys(t *testing.T, cfg sim.Config, keys ec2api.Config) *ec2Env {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = newClock()
	}
	if cfg.Logger == nil {
		cfg.Logger = discardLogger()
	}
	c := openCloud(t, cfg)
	api := ec2api.New(c, keys)
	srv := httptest.NewServer(simserver.Handler(c, api))
	t.Cleanup(srv.Close)
	key, secret := api.Credentials()
	return &ec2Env{c: c, clock: cfg.Clock.(*fakeclock.Clock), srv: srv, api: ec2Client(srv.URL, key, secret), key: key, secret: secret}
}

// ec2Client returns an SDK client of the sim at url; it retries as the
// SDK does by default, without waiting long between attempts.
func ec2Client(url, key, secret string, opts ...func(*ec2.Options)) *ec2.Client {
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")}
	opts = append([]func(*ec2.Options){func(o *ec2.Options) {
		o.BaseEndpoint = aws.String(url + "/ec2/")
		o.Retryer = retry.AddWithMaxBackoffDelay(retry.NewStandard(), time.Millisecond)
	}}, opts...)
	return ec2.NewFromConfig(cfg, opts...)
}

// once makes a call try only once, so that a test sees the first error.
func once(o *ec2.Options) { o.Retryer = aws.NopRetryer{} }

// apiError returns the EC2 error code and HTTP status of err.
func apiError(err error) (string, int) {
	var ae smithy.APIError
	var re *awshttp.ResponseError
	code, status := "", 0
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func wantAPIError(t *testing.T, what string, err error, code string, status int) {
	t.Helper()
	gotCode, gotStatus := apiError(err)
	if gotCode != code || gotStatus != status {
		t.Errorf("%s: got %q (HTTP %d) from %v, want %s (HTTP %d)", what, gotCode, gotStatus, err, code, status)
	}
}

func instanceTags(kv ...string) []types.TagSpecification {
	var tags []types.Tag
	for i := 0; i+1 < len(kv); i += 2 {
		tags = append(tags, types.Tag{Key: aws.String(kv[i]), Value: aws.String(kv[i+1])})
	}
	return []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags}}
}

// modelTags are the tags the ec2 provider gives a machine's instance.
func modelTags(controller, model, machine string) []types.TagSpecification {
	return instanceTags(muster.TagController, controller, muster.TagModel, model, muster.TagMachine, machine, muster.TagLaunchToken, "tok-"+machine)
}

// image selects an image as the ec2 provider does.
func (e *ec2Env) image(t *testing.T, version, arch string) string {
	t.Helper()
	ec2arch := map[string]string{"amd64": "x86_64", "arm64": "arm64"}[arch]
	out, err := e.api.DescribeImages(context.Background(), &ec2.DescribeImagesInput{
		Owners: []string{"099720109477"},
		Filters: []types.Filter{
			{Name: aws.String("name"), Values: []string{"ubuntu/images/*ubuntu-*-" + version + "-" + arch + "-server-*"}},
			{Name: aws.String("architecture"), Values: []string{ec2arch}},
			{Name: aws.String("state"), Values: []string{"available"}},
		},
	})
	if err != nil {
		t.Fatalf("DescribeImages: %v", err)
	}
	if len(out.Images) != 1 {
		t.Fatalf("DescribeImages for %s/%s: got %d images, want 1", version, arch, len(out.Images))
	}
	return aws.ToString(out.Images[0].ImageId)
}

func (e *ec2Env) run(t *testing.T, in *ec2.RunInstancesInput) *ec2.RunInstancesOutput {
	t.Helper()
	out, err := e.api.RunInstances(context.Background(), in)
	if err != nil {
		t.Fatalf("RunInstances: %v", err)
	}
	return out
}

// runIn returns a RunInstances of n s1.small instances in subnet.
func (e *ec2Env) runIn(t *testing.T, subnet string, min, max int32, tags []types.TagSpecification) *ec2.RunInstancesInput {
	return &ec2.RunInstancesInput{
		ImageId: aws.String(e.image(t, "24.04", "amd64")), InstanceType: "s1.small",
		MinCount: aws.Int32(min), MaxCount: aws.Int32(max), SubnetId: aws.String(subnet), TagSpecifications: tags,
	}
}

func ids(insts []types.Instance) []string {
	var out []string
	for _, i := range insts {
		out = append(out, aws.ToString(i.InstanceId))
	}
	return out
}

// describeAll pages through DescribeInstances with page size 5.
func (e *ec2Env) describeAll(t *testing.T, filters ...types.Filter) (insts []types.Instance, pages int) {
	t.Helper()
	p := ec2.NewDescribeInstancesPaginator(e.api, &ec2.DescribeInstancesInput{Filters: filters, MaxResults: aws.Int32(5)})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("DescribeInstances page %d: %v", pages+1, err)
		}
		pages++
		for _, r := range out.Reservations {
			for _, i := range r.Instances {
				if aws.ToString(i.InstanceId) == "" || aws.ToString(r.ReservationId) == "" {
					t.Fatalf("page %d: instance or reservation without id", pages)
				}
				insts = append(insts, i)
			}
		}
	}
	return insts, pages
}

func filter(name string, values ...string) types.Filter {
	return types.Filter{Name: aws.String(name), Values: values}
}

// An EC2 endpoint is a host's root; the sim also answers at /ec2/, beside
// its own API, which keeps its paths.
func TestEC2EndpointPaths(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	key, secret := e.key, e.secret
	for _, path := range []string{"", "/", "/ec2", "/ec2/"} {
		api := ec2.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider(key, secret, "")},
			func(o *ec2.Options) { o.BaseEndpoint = aws.String(e.srv.URL + path); o.Retryer = aws.NopRetryer{} })
		zs, err := api.DescribeAvailabilityZones(context.Background(), &ec2.DescribeAvailabilityZonesInput{})
		if err != nil || len(zs.AvailabilityZones) != 3 {
			t.Errorf("endpoint %q: got %v zones, err %v; want 3 zones", e.srv.URL+path, zs, err)
		}
	}
	for _, tt := range []struct{ method, path string }{{"GET", "/"}, {"POST", "/v1/nothing"}, {"POST", "/other/"}} {
		req, _ := http.NewRequest(tt.method, e.srv.URL+tt.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: got status %d, want 404", tt.method, tt.path, res.StatusCode)
		}
	}
	if _, err := sim.NewClient(e.srv.URL, nil).Zones(context.Background()); err != nil {
		t.Errorf("the sim's own API beside the EC2 endpoint: %v", err)
	}
}

func TestEC2ZonesAndSubnets(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	no := false
	if _, err := e.c.SetZone("b", sim.ZoneUpdate{Available: &no}); err != nil {
		t.Fatal(err)
	}
	key, secret := e.key, e.secret
	west := ec2Client(e.srv.URL, key, secret, func(o *ec2.Options) { o.Region = "eu-west-2" })
	zs, err := west.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range zs.AvailabilityZones {
		got = append(got, fmt.Sprintf("%s/%s/%s/%s/%s", aws.ToString(z.ZoneName), z.State, aws.ToString(z.RegionName), aws.ToString(z.ZoneId), aws.ToString(z.ZoneType)))
	}
	want := []string{
		"a/available/eu-west-2/sim-az1/availability-zone",
		"b/impaired/eu-west-2/sim-az2/availability-zone",
		"c/available/eu-west-2/sim-az3/availability-zone",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("zones: got %v, want %v", got, want)
	}
	one, err := e.api.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"c"}})
	if err != nil || len(one.AvailabilityZones) != 1 || aws.ToString(one.AvailabilityZones[0].ZoneName) != "c" {
		t.Errorf("zone c by name: got %+v, %v", one, err)
	}
	if _, err := e.api.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{ZoneNames: []string{"z"}}); err == nil {
		t.Error("unknown zone name: no error")
	}

	// Subnets: two spaces × three zones, the first of each zone its default.
	p := ec2.NewDescribeSubnetsPaginator(e.api, &ec2.DescribeSubnetsInput{MaxResults: aws.Int32(5)})
	var subnets []types.Subnet
	pages := 0
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		subnets = append(subnets, out.Subnets...)
	}
	if len(subnets) != 6 || pages != 2 {
		t.Fatalf("got %d subnets in %d pages, want 6 in 2", len(subnets), pages)
	}
	sa := subnets[0]
	if aws.ToString(sa.SubnetId) != sim.SubnetID("a", "alpha") || aws.ToString(sa.CidrBlock) != "10.1.0.0/17" || aws.ToString(sa.AvailabilityZone) != "a" ||
		!aws.ToBool(sa.DefaultForAz) || sa.State != types.SubnetStateAvailable || !strings.HasPrefix(aws.ToString(sa.VpcId), "vpc-") ||
		aws.ToInt32(sa.AvailableIpAddressCount) != 32763 || len(sa.Tags) != 1 || aws.ToString(sa.Tags[0].Key) != "muster-space" || aws.ToString(sa.Tags[0].Value) != "alpha" {
		t.Errorf("first subnet: got %+v", sa)
	}
	if aws.ToBool(subnets[1].DefaultForAz) || aws.ToString(subnets[1].SubnetId) != sim.SubnetID("a", "beta") {
		t.Errorf("second subnet: got %s default %v, want subnet-a-beta, not default", aws.ToString(subnets[1].SubnetId), aws.ToBool(subnets[1].DefaultForAz))
	}
	def, err := e.api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{Filters: []types.Filter{filter("availability-zone", "c"), filter("default-for-az", "true")}})
	if err != nil || len(def.Subnets) != 1 || aws.ToString(def.Subnets[0].SubnetId) != sim.SubnetID("c", "alpha") {
		t.Errorf("zone c default subnet: got %+v, %v", def, err)
	}
	// An instance takes an address.
	e.run(t, e.runIn(t, sim.SubnetID("c", "beta"), 1, 1, nil))
	byID, err := e.api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{sim.SubnetID("c", "beta")}})
	if err != nil || len(byID.Subnets) != 1 || aws.ToInt32(byID.Subnets[0].AvailableIpAddressCount) != 32762 {
		t.Errorf("subnet-c-beta after a start: got %+v, %v, want 32762 free addresses", byID, err)
	}
	_, err = e.api.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: []string{"subnet-nope"}}, once)
	wantAPIError(t, "unknown subnet", err, "InvalidSubnetID.NotFound", 400)
	if s := e.c.Stats(); s.Calls[sim.CallZones] != 3 || s.Calls[sim.CallSubnets] != 5 {
		t.Errorf("got %d zones and %d subnets calls, want 3 and 5", s.Calls[sim.CallZones], s.Calls[sim.CallSubnets])
	}
}

func TestEC2Images(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	all, err := e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{})
	if err != nil || len(all.Images) != 4 {
		t.Fatalf("all images: got %+v, %v, want 4", all, err)
	}
	id := e.image(t, "24.04", "arm64")
	got, err := e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{id}})
	if err != nil || len(got.Images) != 1 {
		t.Fatalf("image by id: %+v, %v", got, err)
	}
	im := got.Images[0]
	if aws.ToString(im.Name) != "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-20261115" || im.Architecture != types.ArchitectureValuesArm64 ||
		aws.ToString(im.OwnerId) != "099720109477" || im.State != types.ImageStateAvailable || aws.ToString(im.CreationDate) == "" ||
		aws.ToString(im.RootDeviceName) != "/dev/sda1" || im.RootDeviceType != types.DeviceTypeEbs || im.VirtualizationType != types.VirtualizationTypeHvm {
		t.Errorf("got image %+v", im)
	}
	if id == e.image(t, "22.04", "arm64") || id == e.image(t, "24.04", "amd64") {
		t.Error("images of different bases or arches share an id")
	}
	q, err := e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: []types.Filter{filter("name", "ubuntu/images/hvm-ssd-gp3/ubuntu-jammy-22.04-amd6?-server-*")}})
	if err != nil || len(q.Images) != 1 || q.Images[0].Architecture != types.ArchitectureValuesX8664 {
		t.Errorf("? wildcard: got %+v, %v", q, err)
	}
	self, err := e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"self"}})
	if err != nil || len(self.Images) != 0 {
		t.Errorf("owner self: got %+v, %v, want none", self, err)
	}
	_, err = e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-0123456789abcdef0"}}, once)
	wantAPIError(t, "unknown image", err, "InvalidAMIID.NotFound", 400)
	_, err = e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ubuntu"}}, once)
	wantAPIError(t, "malformed image id", err, "InvalidAMIID.Malformed", 400)
	_, err = e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: []types.Filter{filter("kernel-id", "x")}}, once)
	wantAPIError(t, "unknown filter", err, "InvalidParameterValue", 400)
	if n := e.c.Stats().Calls[sim.CallDescribe]; n != 10 {
		t.Errorf("got %d describe calls, want 10", n)
	}
}

func TestEC2InstanceTypesPaginated(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	p := ec2.NewDescribeInstanceTypesPaginator(e.api, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(3)})
	var got []string
	pages := 0
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, it := range out.InstanceTypes {
			got = append(got, fmt.Sprintf("%s %d %d %v %v", it.InstanceType, aws.ToInt32(it.VCpuInfo.DefaultVCpus),
				aws.ToInt64(it.MemoryInfo.SizeInMiB), it.ProcessorInfo.SupportedArchitectures, aws.ToBool(it.CurrentGeneration)))
		}
	}
	want := []string{
		"s1.small 1 2048 [x86_64 arm64] true",
		"s1.medium 2 4096 [x86_64 arm64] true",
		"s1.large 4 16384 [x86_64 arm64] true",
		"s1.xlarge 8 32768 [x86_64 arm64] true",
	}
	if !reflect.DeepEqual(got, want) || pages != 2 {
		t.Errorf("got %q in %d pages, want %q in 2", got, pages, want)
	}
	whole, err := e.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(5)})
	if err != nil || len(whole.InstanceTypes) != 4 || whole.NextToken != nil {
		t.Errorf("MaxResults 5: got %+v, %v, want the 4 types and no token", whole, err)
	}
	one, err := e.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"s1.large"}})
	if err != nil || len(one.InstanceTypes) != 1 || one.InstanceTypes[0].InstanceType != "s1.large" {
		t.Errorf("s1.large: got %+v, %v", one, err)
	}
	arm, err := e.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{Filters: []types.Filter{filter("processor-info.supported-architecture", "arm64")}})
	if err != nil || len(arm.InstanceTypes) != 4 {
		t.Errorf("arm64 types: got %+v, %v", arm, err)
	}
	_, err = e.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []types.InstanceType{"m5.huge"}}, once)
	wantAPIError(t, "unknown type", err, "InvalidInstanceType", 400)
	_, err = e.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(101)}, once)
	wantAPIError(t, "MaxResults 101", err, "InvalidParameterValue", 400)
	_, err = e.api.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{NextToken: aws.String("nonsense")}, once)
	wantAPIError(t, "bad token", err, "InvalidParameterValue", 400)
}

func TestEC2RunInstancesDescribed(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	image := e.image(t, "22.04", "arm64")
	out := e.run(t, &ec2.RunInstancesInput{
		ImageId: aws.String(image), InstanceType: "s1.medium", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		SubnetId: aws.String(sim.SubnetID("b", "beta")), ClientToken: aws.String("token-1"),
		TagSpecifications: append(instanceTags("Name", "web-0", "team", "blue"),
			types.TagSpecification{ResourceType: types.ResourceTypeVolume, Tags: []types.Tag{{Key: aws.String("v"), Value: aws.String("1")}}}),
		BlockDeviceMappings: []types.BlockDeviceMapping{
			{DeviceName: aws.String("/dev/sda1"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(20), VolumeType: types.VolumeTypeGp3}},
			{DeviceName: aws.String("/dev/sdf"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(10), DeleteOnTermination: aws.Bool(false)}},
		},
	})
	if !strings.HasPrefix(aws.ToString(out.ReservationId), "r-") || aws.ToString(out.OwnerId) == "" || len(out.Instances) != 1 {
		t.Fatalf("got reservation %s of %s with %d instances", aws.ToString(out.ReservationId), aws.ToString(out.OwnerId), len(out.Instances))
	}
	in := out.Instances[0]
	id := aws.ToString(in.InstanceId)
	ip := aws.ToString(in.PrivateIpAddress)
	if !strings.HasPrefix(id, "i-") || aws.ToString(in.ImageId) != image || in.InstanceType != "s1.medium" ||
		in.State.Name != types.InstanceStateNameRunning || aws.ToInt32(in.State.Code) != 16 ||
		aws.ToString(in.Placement.AvailabilityZone) != "b" || in.Placement.Tenancy != types.TenancyDefault ||
		aws.ToString(in.SubnetId) != sim.SubnetID("b", "beta") || !strings.HasPrefix(aws.ToString(in.VpcId), "vpc-") ||
		!strings.HasPrefix(ip, "10.2.128.") || aws.ToString(in.PrivateDnsName) != "ip-"+strings.ReplaceAll(ip, ".", "-")+".ec2.internal" ||
		in.Architecture != types.ArchitectureValuesArm64 || in.RootDeviceType != types.DeviceTypeEbs || aws.ToString(in.RootDeviceName) != "/dev/sda1" ||
		aws.ToString(in.ClientToken) != "token-1" || aws.ToInt32(in.AmiLaunchIndex) != 0 || in.LaunchTime == nil || !in.LaunchTime.Equal(epoch) {
		t.Errorf("got instance %+v", in)
	}
	var devs []string
	for _, m := range in.BlockDeviceMappings {
		if !strings.HasPrefix(aws.ToString(m.Ebs.VolumeId), "vol-") || m.Ebs.Status != types.AttachmentStatusAttached {
			t.Errorf("device %s: got %+v", aws.ToString(m.DeviceName), m.Ebs)
		}
		devs = append(devs, fmt.Sprintf("%s:%v", aws.ToString(m.DeviceName), aws.ToBool(m.Ebs.DeleteOnTermination)))
	}
	if want := []string{"/dev/sda1:true", "/dev/sdf:false"}; !reflect.DeepEqual(devs, want) {
		t.Errorf("got devices %v, want %v", devs, want)
	}
	var tags []string
	for _, tg := range in.Tags {
		tags = append(tags, aws.ToString(tg.Key)+"="+aws.ToString(tg.Value))
	}
	if want := []string{"Name=web-0", "team=blue"}; !reflect.DeepEqual(tags, want) {
		t.Errorf("got tags %v, want %v", tags, want)
	}
	if len(in.NetworkInterfaces) != 1 || aws.ToString(in.NetworkInterfaces[0].PrivateIpAddress) != ip ||
		aws.ToString(in.NetworkInterfaces[0].SubnetId) != sim.SubnetID("b", "beta") || aws.ToInt32(in.NetworkInterfaces[0].Attachment.DeviceIndex) != 0 ||
		!strings.HasPrefix(aws.ToString(in.NetworkInterfaces[0].NetworkInterfaceId), "eni-") {
		t.Errorf("got network interfaces %+v", in.NetworkInterfaces)
	}
	// The cloud's own view: the type, disk and volume asked for.
	all := e.c.AllInstances()
	if len(all) != 1 || all[0].ID != id || all[0].Cores != 2 || all[0].Arch != "arm64" || all[0].Base != "ubuntu@22.04" ||
		all[0].RootDisk != 20<<10 || len(all[0].Volumes) != 1 || all[0].Volumes[0].Size != 10<<10 ||
		len(all[0].Attachments) != 1 || all[0].Attachments[0].DeviceName != "/dev/sdf" || all[0].EC2 == nil || all[0].EC2.ClientToken != "token-1" {
		t.Errorf("cloud has %+v", all)
	}
	// DescribeInstances by id shows the same.
	d, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(d.Reservations) != 1 || aws.ToString(d.Reservations[0].ReservationId) != aws.ToString(out.ReservationId) ||
		len(d.Reservations[0].Instances) != 1 || !reflect.DeepEqual(d.Reservations[0].Instances[0], in) {
		t.Errorf("DescribeInstances by id: got %+v, %v; want %+v", d, err, in)
	}
	// Placement.AvailabilityZone alone picks the zone's first subnet; no
	// placement picks the least used zone.
	az := e.run(t, &ec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: "s1.small", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		Placement: &types.Placement{AvailabilityZone: aws.String("c")}})
	if aws.ToString(az.Instances[0].SubnetId) != sim.SubnetID("c", "alpha") {
		t.Errorf("placement c: got subnet %s, want subnet-c-alpha", aws.ToString(az.Instances[0].SubnetId))
	}
	anyZone := e.run(t, &ec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: "s1.small", MinCount: aws.Int32(1), MaxCount: aws.Int32(1)})
	if z := aws.ToString(anyZone.Instances[0].Placement.AvailabilityZone); z != "a" {
		t.Errorf("no placement: got zone %s, want a (the only one without instances)", z)
	}
	if s := e.c.Stats(); s.Calls[sim.CallStart] != 3 || s.InstancesStarted != 3 || s.Calls[sim.CallList] != 1 {
		t.Errorf("got stats %+v, want 3 start calls, 3 instances, 1 list call", s)
	}
}

func TestEC2DescribeInstancesPagesAndFilters(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	mine := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 12, 12, modelTags(testController, testModel, "batch")))
	e.clock.Advance(time.Second)
	e.run(t, e.runIn(t, sim.SubnetID("b", "alpha"), 3, 3, modelTags(testController, "model-2", "other")))
	e.clock.Advance(time.Second)
	viaSim := mustStart(t, e.c.Provider(testController, testModel), startParams("9", "c"))
	e.clock.Advance(time.Second)
	e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 2, 2, instanceTags("Name", "untagged")))

	got, pages := e.describeAll(t, filter("tag:"+muster.TagController, testController), filter("tag:"+muster.TagModel, testModel))
	want := append(ids(mine.Instances), viaSim.Instance.ID)
	if !reflect.DeepEqual(ids(got), want) || pages != 3 {
		t.Fatalf("model-1: got %v in %d pages, want %v (launch order) in 3", ids(got), pages, want)
	}
	for i, in := range got[:12] {
		if aws.ToInt32(in.AmiLaunchIndex) != int32(i) {
			t.Errorf("instance %d: launch index %d", i, aws.ToInt32(in.AmiLaunchIndex))
		}
	}
	if in := got[12]; aws.ToString(in.ImageId) != e.image(t, "24.04", "amd64") || aws.ToString(in.SubnetId) != sim.SubnetID("c", "alpha") || aws.ToString(in.ClientToken) != "" {
		t.Errorf("the sim-started instance: got %+v", in)
	}
	everything, _ := e.describeAll(t)
	if len(everything) != 18 {
		t.Errorf("unfiltered: got %d instances, want 18", len(everything))
	}
	tagged, _ := e.describeAll(t, filter("tag-key", muster.TagModel))
	if len(tagged) != 16 {
		t.Errorf("tag-key %s: got %d, want 16", muster.TagModel, len(tagged))
	}
	wild, _ := e.describeAll(t, filter("tag:"+muster.TagModel, "model-*"), filter("availability-zone", "b", "c"))
	if len(wild) != 4 {
		t.Errorf("model-* in b or c: got %d, want 4", len(wild))
	}
	tok, _ := e.describeAll(t, filter("client-token", aws.ToString(mine.Instances[0].ClientToken)))
	if !reflect.DeepEqual(ids(tok), ids(mine.Instances)) {
		t.Errorf("client-token filter: got %v", ids(tok))
	}
	if _, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{filter("instance-state-name", "terminated")}}); err != nil {
		t.Error(err)
	}
	_, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{NextToken: aws.String("not-a-token!")}, once)
	wantAPIError(t, "bad token", err, "InvalidParameterValue", 400)
	_, err = e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{MaxResults: aws.Int32(4)}, once)
	wantAPIError(t, "MaxResults 4", err, "InvalidParameterValue", 400)
	_, err = e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{filter("owner-alias", "x")}}, once)
	wantAPIError(t, "unknown filter", err, "InvalidParameterValue", 400)
}

func TestEC2ErrorCodes(t *testing.T) {
	e := newEC2Env(t, sim.Config{Zones: []sim.ZoneConfig{
		{Name: "a", Available: true, Capacity: sim.Unlimited},
		{Name: "b", Available: true, Capacity: 0},
		{Name: "c", Available: false, Capacity: sim.Unlimited},
	}})
	ctx := context.Background()
	image := e.image(t, "24.04", "amd64")
	run := func(mod func(*ec2.RunInstancesInput)) error {
		in := &ec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: "s1.small", MinCount: aws.Int32(1), MaxCount: aws.Int32(1), SubnetId: aws.String(sim.SubnetID("a", "alpha"))}
		mod(in)
		_, err := e.api.RunInstances(ctx, in, once)
		return err
	}
	setFaults := func(f sim.Faults) {
		t.Helper()
		if err := e.c.SetFaults(f); err != nil {
			t.Fatal(err)
		}
	}
	first := e.run(t, &ec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: "s1.small", MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		SubnetId: aws.String(sim.SubnetID("a", "alpha")), ClientToken: aws.String("tok")})
	live := aws.ToString(first.Instances[0].InstanceId)
	tests := []struct {
		name   string
		call   func() error
		code   string
		status int
	}{
		{"request bucket empty", func() error {
			setFaults(sim.Faults{RateLimits: map[string]sim.Bucket{sim.CallList: {Burst: 1}}})
			defer setFaults(sim.Faults{})
			e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}, once)
			_, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}, once)
			return err
		}, "RequestLimitExceeded", 503},
		{"instance bucket empty", func() error {
			setFaults(sim.Faults{InstanceRate: sim.Bucket{Burst: 3}})
			defer setFaults(sim.Faults{})
			return run(func(in *ec2.RunInstancesInput) { in.MaxCount = aws.Int32(4) })
		}, "RequestLimitExceeded", 503},
		{"fail next", func() error {
			if err := e.c.FailNext("a", 1); err != nil {
				t.Fatal(err)
			}
			return run(func(*ec2.RunInstancesInput) {})
		}, "InsufficientInstanceCapacity", 500},
		{"zone full", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String(sim.SubnetID("b", "alpha")) })
		}, "InsufficientInstanceCapacity", 500},
		{"zone unavailable", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String(sim.SubnetID("c", "beta")) })
		}, "InsufficientInstanceCapacity", 500},
		{"injected call error", func() error {
			setFaults(sim.Faults{ErrorRate: map[string]float64{sim.CallDescribe: 1}})
			defer setFaults(sim.Faults{})
			_, err := e.api.DescribeImages(ctx, &ec2.DescribeImagesInput{}, once)
			return err
		}, "InternalError", 500},
		{"zone error rate", func() error {
			setFaults(sim.Faults{ZoneErrorRate: map[string]float64{"a": 1}})
			defer setFaults(sim.Faults{})
			return run(func(*ec2.RunInstancesInput) {})
		}, "Unavailable", 503},
		{"unknown image", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ami-0123456789abcdef0") })
		}, "InvalidAMIID.NotFound", 400},
		{"malformed image", func() error { return run(func(in *ec2.RunInstancesInput) { in.ImageId = aws.String("ubuntu") }) }, "InvalidAMIID.Malformed", 400},
		{"no image", func() error { return run(func(in *ec2.RunInstancesInput) { in.ImageId = nil }) }, "MissingParameter", 400},
		{"unknown type", func() error { return run(func(in *ec2.RunInstancesInput) { in.InstanceType = "m5.huge" }) }, "InvalidParameterValue", 400},
		{"unknown subnet", func() error { return run(func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String("subnet-zz") }) }, "InvalidSubnetID.NotFound", 400},
		{"subnet in another zone", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.Placement = &types.Placement{AvailabilityZone: aws.String("b")} })
		}, "InvalidParameterValue", 400},
		{"min above max", func() error { return run(func(in *ec2.RunInstancesInput) { in.MinCount = aws.Int32(2) }) }, "InvalidParameterValue", 400},
		{"user data too big", func() error {
			return run(func(in *ec2.RunInstancesInput) {
				in.UserData = aws.String(base64.StdEncoding.EncodeToString(make([]byte, 16385)))
			})
		}, "InvalidParameterValue", 400},
		{"user data not base64", func() error { return run(func(in *ec2.RunInstancesInput) { in.UserData = aws.String("%%%") }) }, "InvalidParameterValue", 400},
		{"client token too long", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.ClientToken = aws.String(strings.Repeat("x", 65)) })
		}, "InvalidParameterValue", 400},
		{"root disk too small", func() error {
			return run(func(in *ec2.RunInstancesInput) {
				in.BlockDeviceMappings = []types.BlockDeviceMapping{{DeviceName: aws.String("/dev/sda1"), Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(2)}}}
			})
		}, "InvalidBlockDeviceMapping", 400},
		{"reserved tag", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.TagSpecifications = instanceTags("aws:x", "1") })
		}, "InvalidParameterValue", 400},
		{"client token reused", func() error {
			return run(func(in *ec2.RunInstancesInput) { in.ClientToken, in.InstanceType = aws.String("tok"), "s1.large" })
		}, "IdempotentParameterMismatch", 400},
		{"dry run", func() error { return run(func(in *ec2.RunInstancesInput) { in.DryRun = aws.Bool(true) }) }, "DryRunOperation", 412},
		{"terminate unknown", func() error {
			_, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{live, "i-0123456789abcdef0"}}, once)
			return err
		}, "InvalidInstanceID.NotFound", 400},
		{"terminate malformed", func() error {
			_, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"machine-0"}}, once)
			return err
		}, "InvalidInstanceID.Malformed", 400},
		{"describe unknown", func() error {
			_, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}, once)
			return err
		}, "InvalidInstanceID.NotFound", 400},
		{"ids with MaxResults", func() error {
			_, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{live}, MaxResults: aws.Int32(5)}, once)
			return err
		}, "InvalidParameterCombination", 400},
		{"attribute of unknown", func() error {
			_, err := e.api.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String("i-0123456789abcdef0"), Attribute: types.InstanceAttributeNameUserData}, once)
			return err
		}, "InvalidInstanceID.NotFound", 400},
		{"other attribute", func() error {
			_, err := e.api.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(live), Attribute: types.InstanceAttributeNameKernel}, once)
			return err
		}, "InvalidParameterValue", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantAPIError(t, tt.name, tt.call(), tt.code, tt.status)
		})
	}
	// No failed call left anything behind, and the live instance is there.
	if all := e.c.AllInstances(); len(all) != 1 || all[0].ID != live {
		t.Errorf("instances after the failures: got %+v, want only %s", all, live)
	}
	// NotFound messages name the unknown ids.
	_, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}}, once)
	if !strings.Contains(err.Error(), "The instance ID 'i-0123456789abcdef0' does not exist") {
		t.Errorf("one unknown id: got %v", err)
	}
	_, err = e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-0123456789abcdef0", live, "i-00000000"}}, once)
	if !strings.Contains(err.Error(), "The instance IDs 'i-0123456789abcdef0, i-00000000' do not exist") {
		t.Errorf("two unknown ids: got %v", err)
	}
}

// signedRequest returns a POST of body to the sim's EC2 endpoint, signed
// with key and secret.
func signedRequest(t testing.TB, url, body, key, secret string) *http.Request {
	req, err := http.NewRequest(http.MethodPost, url+"/ec2/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256([]byte(body))
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}, req,
		hex.EncodeToString(sum[:]), "ec2", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// ec2Reply is the root element and error code of an EC2 API reply.
type ec2Reply struct {
	XMLName   xml.Name
	Code      string `xml:"Errors>Error>Code"`
	Message   string `xml:"Errors>Error>Message"`
	RequestID string `xml:"RequestID"`
}

func doRaw(t testing.TB, req *http.Request) (int, ec2Reply) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r ec2Reply
	if err := xml.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply is not XML: %v\n%s", err, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/xml;charset=UTF-8" {
		t.Errorf("Content-Type %q", ct)
	}
	return resp.StatusCode, r
}

func TestEC2Signatures(t *testing.T) {
	e := newEC2EnvKeys(t, sim.Config{}, ec2api.Config{AccessKey: "AKIATEST", SecretKey: "s3cret"})
	ctx := context.Background()
	if k, s := e.key, e.secret; k != "AKIATEST" || s != "s3cret" {
		t.Fatalf("credentials %s/%s", k, s)
	}
	if _, err := e.api.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{}); err != nil {
		t.Fatalf("correctly signed: %v", err)
	}
	wrongSecret := ec2Client(e.srv.URL, "AKIATEST", "guess", once)
	_, err := wrongSecret.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	wantAPIError(t, "wrong secret", err, "SignatureDoesNotMatch", 403)
	wrongKey := ec2Client(e.srv.URL, sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey, once)
	_, err = wrongKey.DescribeAvailabilityZones(ctx, &ec2.DescribeAvailabilityZonesInput{})
	wantAPIError(t, "unknown key", err, "AuthFailure", 401)

	body := "Action=DescribeAvailabilityZones&Version=2016-11-15"
	status, r := doRaw(t, signedRequest(t, e.srv.URL, body, "AKIATEST", "s3cret"))
	if status != 200 || r.XMLName.Local != "DescribeAvailabilityZonesResponse" || r.XMLName.Space != "http://ec2.amazonaws.com/doc/2016-11-15/" {
		t.Errorf("raw signed request: got %d %+v", status, r)
	}
	unsigned, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/ec2", strings.NewReader(body))
	status, r = doRaw(t, unsigned)
	if status != 401 || r.XMLName.Local != "Response" || r.Code != "AuthFailure" || len(r.RequestID) != 36 {
		t.Errorf("unsigned: got %d %+v", status, r)
	}
	tampered := signedRequest(t, e.srv.URL, body, "AKIATEST", "s3cret")
	tampered.Body = io.NopCloser(strings.NewReader(strings.Replace(body, "Zones", "Zonez", 1)))
	if status, r = doRaw(t, tampered); status != 403 || r.Code != "SignatureDoesNotMatch" {
		t.Errorf("tampered body: got %d %+v", status, r)
	}
	if status, r = doRaw(t, signedRequest(t, e.srv.URL, "Action=RebootInstances&Version=2016-11-15", "AKIATEST", "s3cret")); status != 400 || r.Code != "InvalidAction" {
		t.Errorf("unknown action: got %d %+v", status, r)
	}
	if status, r = doRaw(t, signedRequest(t, e.srv.URL, "Version=2016-11-15", "AKIATEST", "s3cret")); status != 400 || r.Code != "MissingParameter" {
		t.Errorf("no action: got %d %+v", status, r)
	}
	big := "Action=DescribeAvailabilityZones&X=" + strings.Repeat("a", 1<<20)
	if status, r = doRaw(t, signedRequest(t, e.srv.URL, big, "AKIATEST", "s3cret")); status != 400 || r.Code != "InvalidParameterValue" {
		t.Errorf("body over 1 MiB: got %d %+v", status, r)
	}
	if n := e.c.Stats().Calls[sim.CallZones]; n != 2 {
		t.Errorf("got %d zones calls, want 2 (refused requests are not calls)", n)
	}
}

func TestEC2ClientTokenIdempotency(t *testing.T) {
	e := newEC2Env(t, sim.Config{})
	ctx := context.Background()
	in := e.runIn(t, sim.SubnetID("a", "alpha"), 2, 2, modelTags(testController, testModel, "0"))
	in.ClientToken = aws.String("launch-1")
	first := e.run(t, in)
	again := e.run(t, in)
	if aws.ToString(again.ReservationId) != aws.ToString(first.ReservationId) || !reflect.DeepEqual(ids(again.Instances), ids(first.Instances)) {
		t.Fatalf("repeat: got %s %v, want %s %v", aws.ToString(again.ReservationId), ids(again.Instances), aws.ToString(first.ReservationId), ids(first.Instances))
	}
	if s := e.c.Stats(); s.InstancesStarted != 2 || s.Calls[sim.CallStart] != 2 {
		t.Errorf("got %d instances started in %d calls, want 2 in 2", s.InstancesStarted, s.Calls[sim.CallStart])
	}
	// Ended instances come back terminated, now and after their tombstones.
	if _, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: ids(first.Instances)[:1]}); err != nil {
		t.Fatal(err)
	}
	for _, wait := range []time.Duration{0, 2 * time.Hour} {
		e.clock.Advance(wait)
		later := e.run(t, in)
		if !reflect.DeepEqual(ids(later.Instances), ids(first.Instances)) ||
			later.Instances[0].State.Name != types.InstanceStateNameTerminated || later.Instances[1].State.Name != types.InstanceStateNameRunning {
			t.Errorf("after %v: got %v in states %s, %s; want the same, terminated and running", wait, ids(later.Instances), later.Instances[0].State.Name, later.Instances[1].State.Name)
		}
	}
	mismatch := []func(*ec2.RunInstancesInput){
		func(in *ec2.RunInstancesInput) { in.InstanceType = "s1.large" },
		func(in *ec2.RunInstancesInput) { in.ImageId = aws.String(e.image(t, "22.04", "amd64")) },
		func(in *ec2.RunInstancesInput) { in.MinCount = aws.Int32(1) },
		func(in *ec2.RunInstancesInput) { in.MaxCount = aws.Int32(3) },
		func(in *ec2.RunInstancesInput) { in.SubnetId = aws.String(sim.SubnetID("b", "alpha")) },
		func(in *ec2.RunInstancesInput) {
			in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte("#cloud-config\n# other\n")))
		},
	}
	for i, mod := range mismatch {
		other := *in
		mod(&other)
		_, err := e.api.RunInstances(ctx, &other, once)
		wantAPIError(t, fmt.Sprintf("mismatch %d", i), err, "IdempotentParameterMismatch", 400)
	}
	if s := e.c.Stats(); s.InstancesStarted != 2 {
		t.Errorf("got %d instances started, want still 2", s.InstancesStarted)
	}
}

func TestEC2MinMaxCount(t *testing.T) {
	e := newEC2Env(t, sim.Config{MaxBatch: 6, Zones: []sim.ZoneConfig{
		{Name: "a", Available: true, Capacity: 3},
		{Name: "b", Available: true, Capacity: sim.Unlimited},
		{Name: "c", Available: true, Capacity: 2},
	}})
	ctx := context.Background()
	// Partial: capacity for 3 of 5.
	part := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 1, 5, nil))
	if len(part.Instances) != 3 {
		t.Fatalf("capacity 3, MaxCount 5: got %d instances", len(part.Instances))
	}
	for i, in := range part.Instances {
		if aws.ToInt32(in.AmiLaunchIndex) != int32(i) {
			t.Errorf("instance %d: launch index %d", i, aws.ToInt32(in.AmiLaunchIndex))
		}
	}
	// All or nothing: the next two starts fail in b, so 2 of 3 cannot be.
	before := e.c.Stats()
	if err := e.c.FailNext("b", 2); err != nil {
		t.Fatal(err)
	}
	_, err := e.api.RunInstances(ctx, e.runIn(t, sim.SubnetID("b", "alpha"), 2, 3, nil), once)
	wantAPIError(t, "MinCount 2 with two failures in three", err, "InsufficientInstanceCapacity", 500)
	after := e.c.Stats()
	if after.InstancesStarted != before.InstancesStarted || after.InstancesByZone["b"] != 0 || len(e.c.AllInstances()) != 3 {
		t.Errorf("after the failed all-or-nothing start: %+v, want nothing new", after)
	}
	if zs := e.c.Zones(); zs[1].FailNext != 0 {
		t.Errorf("zone b: %d failures left, want none", zs[1].FailNext)
	}
	// Two starts succeed, the third finds zone c full: both rolled back.
	in := e.runIn(t, sim.SubnetID("c", "alpha"), 3, 3, nil)
	_, err = e.api.RunInstances(ctx, in, once)
	wantAPIError(t, "MinCount 3 with room for 2", err, "InsufficientInstanceCapacity", 500)
	if zs := e.c.Zones(); zs[2].Used != 0 || zs[2].Instances != 0 || e.c.Stats().InstancesStarted != before.InstancesStarted {
		t.Errorf("zone c after the rollback: %+v, %d started", zs[2], e.c.Stats().InstancesStarted)
	}
	three := 3
	if _, err := e.c.SetZone("c", sim.ZoneUpdate{Capacity: &three}); err != nil {
		t.Fatal(err)
	}
	if ok := e.run(t, in); len(ok.Instances) != 3 {
		t.Errorf("with room for 3: got %d instances", len(ok.Instances))
	}
	// MaxCount beyond the largest batch starts a batch; MinCount beyond it
	// is refused.
	big := e.run(t, e.runIn(t, sim.SubnetID("b", "alpha"), 1, 50, nil))
	if len(big.Instances) != 6 {
		t.Errorf("MaxCount 50 with MaxBatch 6: got %d instances", len(big.Instances))
	}
	_, err = e.api.RunInstances(ctx, e.runIn(t, sim.SubnetID("b", "alpha"), 7, 7, nil), once)
	wantAPIError(t, "MinCount above MaxBatch", err, "InvalidParameterValue", 400)
}

func TestEC2ListingLagAndTombstones(t *testing.T) {
	e := newEC2Env(t, sim.Config{Faults: sim.Faults{ListingLag: 10 * time.Second}})
	ctx := context.Background()
	out := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil))
	id := aws.ToString(out.Instances[0].InstanceId)
	if got, _ := e.describeAll(t); len(got) != 0 {
		t.Errorf("during the lag: listed %v", ids(got))
	}
	_, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}, once)
	wantAPIError(t, "by id during the lag", err, "InvalidInstanceID.NotFound", 400)
	e.clock.Advance(10 * time.Second)
	if got, _ := e.describeAll(t); !reflect.DeepEqual(ids(got), []string{id}) {
		t.Errorf("after the lag: listed %v, want %s", ids(got), id)
	}
	term, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(term.TerminatingInstances) != 1 || term.TerminatingInstances[0].PreviousState.Name != types.InstanceStateNameRunning ||
		term.TerminatingInstances[0].CurrentState.Name != types.InstanceStateNameShuttingDown || aws.ToInt32(term.TerminatingInstances[0].CurrentState.Code) != 32 {
		t.Fatalf("terminate: got %+v, %v", term, err)
	}
	again, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil || again.TerminatingInstances[0].PreviousState.Name != types.InstanceStateNameTerminated {
		t.Errorf("terminate again: got %+v, %v, want previous state terminated", again, err)
	}
	// A sim stop leaves a tombstone too.
	res := mustStart(t, e.c.Provider(testController, testModel), startParams("1", "b"))
	e.clock.Advance(10 * time.Second)
	if err := e.c.Provider(testController, testModel).StopInstances(ctx, res.Instance.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(59 * time.Minute)
	got, _ := e.describeAll(t, filter("instance-state-name", "terminated"))
	if !reflect.DeepEqual(ids(got), []string{id, res.Instance.ID}) || got[0].PrivateIpAddress != nil || got[0].State.Name != types.InstanceStateNameTerminated || aws.ToInt32(got[0].State.Code) != 48 {
		t.Errorf("59 minutes later: got %+v, want %s and %s terminated, without addresses", got, id, res.Instance.ID)
	}
	if running, _ := e.describeAll(t, filter("instance-state-name", "running")); len(running) != 0 {
		t.Errorf("running: got %v", ids(running))
	}
	e.clock.Advance(55 * time.Second)
	if got, _ := e.describeAll(t); !reflect.DeepEqual(ids(got), []string{res.Instance.ID}) {
		t.Errorf("an hour after the first termination: got %v, want only %s", ids(got), res.Instance.ID)
	}
	_, err = e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}, once)
	wantAPIError(t, "terminate an hour later", err, "InvalidInstanceID.NotFound", 400)
	if s := e.c.Stats(); s.InstancesStopped != 2 || s.Calls[sim.CallStop] != 4 {
		t.Errorf("got %d stopped in %d stop calls, want 2 in 4", s.InstancesStopped, s.Calls[sim.CallStop])
	}
}

func TestEC2UserData(t *testing.T) {
	var mu sync.Mutex
	type started struct {
		id, machine string
		index       int
		userData    []byte
	}
	var hooks []started
	e := newEC2Env(t, sim.Config{OnStart: func(inst sim.Instance, p muster.StartParams) {
		mu.Lock()
		defer mu.Unlock()
		idx := -1
		if inst.EC2 != nil {
			idx = inst.EC2.LaunchIndex
		}
		hooks = append(hooks, started{inst.ID, p.MachineID, idx, p.UserData})
	}})
	ctx := context.Background()
	data := append([]byte("#cloud-config\n"), 0, 0xff, '\n')
	in := e.runIn(t, sim.SubnetID("a", "alpha"), 2, 2, modelTags(testController, testModel, "7"))
	in.UserData = aws.String(base64.StdEncoding.EncodeToString(data))
	out := e.run(t, in)
	for _, id := range ids(out.Instances) {
		attr, err := e.api.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: types.InstanceAttributeNameUserData})
		if err != nil {
			t.Fatal(err)
		}
		got, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
		if err != nil || !bytes.Equal(got, data) || aws.ToString(attr.InstanceId) != id {
			t.Errorf("%s: got user data %q (%v), want %q", id, got, err, data)
		}
	}
	plain := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil))
	attr, err := e.api.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: plain.Instances[0].InstanceId, Attribute: types.InstanceAttributeNameUserData})
	if err != nil || attr.UserData == nil || aws.ToString(attr.UserData.Value) != "" {
		t.Errorf("no user data: got %+v, %v, want an empty userData", attr, err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []started{
		{aws.ToString(out.Instances[0].InstanceId), "7", 0, data},
		{aws.ToString(out.Instances[1].InstanceId), "7", 1, data},
		{aws.ToString(plain.Instances[0].InstanceId), "", 0, nil},
	}
	if !reflect.DeepEqual(hooks, want) {
		t.Errorf("OnStart got %+v, want %+v", hooks, want)
	}
}

func TestEC2LostReplyRetriedWithClientToken(t *testing.T) {
	e := newEC2Env(t, sim.Config{Faults: sim.Faults{LoseReplies: map[string]int{sim.CallStart: 1}}})
	in := e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil)
	in.ClientToken = aws.String("lost-1")
	out := e.run(t, in) // the SDK's retry gets the reply of the second try
	all := e.c.AllInstances()
	if len(out.Instances) != 1 || len(all) != 1 || all[0].ID != aws.ToString(out.Instances[0].InstanceId) {
		t.Fatalf("got %v, cloud has %+v; want the one instance", ids(out.Instances), all)
	}
	if s := e.c.Stats(); s.InstancesStarted != 1 || s.Calls[sim.CallStart] != 2 {
		t.Errorf("got %d instances started in %d calls, want 1 in 2", s.InstancesStarted, s.Calls[sim.CallStart])
	}
	if f := e.c.Faults(); len(f.LoseReplies) != 0 {
		t.Errorf("lose-replies left: %v", f.LoseReplies)
	}
	// Without retries the caller sees a connection error.
	if err := e.c.SetFaults(sim.Faults{LoseReplies: map[string]int{sim.CallList: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := e.api.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{}, once)
	var ae smithy.APIError
	if err == nil || errors.As(err, &ae) {
		t.Errorf("lost DescribeInstances reply: got %v, want a connection error", err)
	}
}

func TestReplyDelayHoldsTheReplyAfterTheWork(t *testing.T) {
	e := newEC2Env(t, sim.Config{Faults: sim.Faults{ReplyDelay: map[string]sim.Latency{sim.CallStart: {Fixed: 5 * time.Second}}}})
	in := e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil)
	done := make(chan error, 1)
	go func() {
		_, err := e.api.RunInstances(context.Background(), in, once)
		done <- err
	}()
	<-e.clock.WaitForTimers(1)
	if n := len(e.c.AllInstances()); n != 1 {
		t.Errorf("while the reply is held: %d instances, want 1 (the cloud has acted)", n)
	}
	select {
	case err := <-done:
		t.Fatalf("reply before the delay: %v", err)
	default:
	}
	e.clock.Advance(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// The sim's own start, in-process, is held alike.
	p := e.c.Provider(testController, testModel)
	go func() {
		_, err := p.StartInstance(context.Background(), startParams("0", "b"))
		done <- err
	}()
	<-e.clock.WaitForTimers(1)
	if n := len(e.c.AllInstances()); n != 2 {
		t.Errorf("while the in-process reply is held: %d instances, want 2", n)
	}
	e.clock.Advance(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestEC2AndSimProviderShareTheCloud(t *testing.T) {
	var mu sync.Mutex
	var stopped []string
	e := newEC2Env(t, sim.Config{OnStop: func(id string) {
		mu.Lock()
		defer mu.Unlock()
		stopped = append(stopped, id)
	}})
	ctx := context.Background()
	p := e.c.Provider(testController, testModel)
	viaSim := mustStart(t, p, startParams("0", "a"))
	e.clock.Advance(time.Second)
	viaEC2 := e.run(t, e.runIn(t, sim.SubnetID("b", "alpha"), 1, 1, modelTags(testController, testModel, "1")))
	ec2ID := aws.ToString(viaEC2.Instances[0].InstanceId)

	insts, err := p.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range insts {
		got = append(got, in.ID+"/"+in.MachineID+"/"+in.LaunchToken)
	}
	if want := []string{viaSim.Instance.ID + "/0/tok-0", ec2ID + "/1/tok-1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("sim provider lists %v, want %v", got, want)
	}
	listed, _ := e.describeAll(t, filter("tag:"+muster.TagModel, testModel))
	if !reflect.DeepEqual(ids(listed), []string{viaSim.Instance.ID, ec2ID}) {
		t.Errorf("EC2 lists %v", ids(listed))
	}
	// One request bucket for both.
	if err := e.c.SetFaults(sim.Faults{RateLimits: map[string]sim.Bucket{sim.CallList: {Burst: 2}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Instances(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}, once); err != nil {
		t.Fatal(err)
	}
	_, err = e.api.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}, once)
	wantAPIError(t, "third list call", err, "RequestLimitExceeded", 503)
	if _, err := p.Instances(ctx); muster.ProviderErrorKindOf(err) != muster.ErrThrottled {
		t.Errorf("fourth list call, in-process: got %v, want throttled", err)
	}
	if s := e.c.Stats(); s.Throttled[sim.CallList] != 2 {
		t.Errorf("got %d throttled list calls, want 2", s.Throttled[sim.CallList])
	}
	e.c.SetFaults(sim.Faults{})
	// EC2 terminates what the sim started, and the other way round.
	if _, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{viaSim.Instance.ID}}); err != nil {
		t.Fatal(err)
	}
	if err := p.StopInstances(ctx, ec2ID); err != nil {
		t.Fatal(err)
	}
	if insts, _ := p.Instances(ctx); len(insts) != 0 {
		t.Errorf("after both stops the sim provider lists %+v", insts)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{viaSim.Instance.ID, ec2ID}; !reflect.DeepEqual(stopped, want) {
		t.Errorf("OnStop got %v, want %v", stopped, want)
	}
}

func TestEC2StateSurvivesReopen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state.json")
	clock := newClock()
	e := newEC2Env(t, sim.Config{Clock: clock, StateFile: file})
	ctx := context.Background()
	data := []byte("agents: [a, b]")
	in := e.runIn(t, sim.SubnetID("c", "beta"), 2, 2, modelTags(testController, testModel, "batch"))
	in.ClientToken = aws.String("b-123")
	in.UserData = aws.String(base64.StdEncoding.EncodeToString(data))
	first := e.run(t, in)
	clock.Advance(time.Second)
	gone := e.run(t, e.runIn(t, sim.SubnetID("a", "alpha"), 1, 1, nil))
	goneID := aws.ToString(gone.Instances[0].InstanceId)
	if _, err := e.api.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{goneID}}); err != nil {
		t.Fatal(err)
	}
	before, _ := e.describeAll(t)
	e.c.Close()

	var mu sync.Mutex
	var restarted []string
	c2 := openCloud(t, sim.Config{Clock: clock, StateFile: file, OnStart: func(inst sim.Instance, p muster.StartParams) {
		mu.Lock()
		defer mu.Unlock()
		restarted = append(restarted, fmt.Sprintf("%s/%d/%s", inst.ID, inst.EC2.LaunchIndex, p.UserData))
	}})
	srv := httptest.NewServer(handler(c2))
	defer srv.Close()
	e2 := &ec2Env{c: c2, clock: clock, srv: srv, api: ec2Client(srv.URL, sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey)}
	after, _ := e2.describeAll(t)
	if !reflect.DeepEqual(after, before) {
		t.Errorf("after reopen DescribeInstances shows\n%+v\nwant\n%+v", after, before)
	}
	if len(after) != 3 || after[2].State.Name != types.InstanceStateNameTerminated {
		t.Errorf("after reopen: got %d instances, the last %s; want 3, the last terminated", len(after), after[len(after)-1].State.Name)
	}
	attr, err := e2.api.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: first.Instances[1].InstanceId, Attribute: types.InstanceAttributeNameUserData})
	if err != nil || aws.ToString(attr.UserData.Value) != base64.StdEncoding.EncodeToString(data) {
		t.Errorf("user data after reopen: got %+v, %v", attr, err)
	}
	replay := e2.run(t, in)
	if aws.ToString(replay.ReservationId) != aws.ToString(first.ReservationId) || !reflect.DeepEqual(ids(replay.Instances), ids(first.Instances)) || c2.Stats().InstancesStarted != 0 {
		t.Errorf("client token after reopen: got %s %v, want %s %v and nothing started",
			aws.ToString(replay.ReservationId), ids(replay.Instances), aws.ToString(first.ReservationId), ids(first.Instances))
	}
	// Once more, from the snapshot the second open wrote.
	c2.Close()
	c3 := openCloud(t, sim.Config{Clock: clock, StateFile: file})
	srv3 := httptest.NewServer(handler(c3))
	defer srv3.Close()
	e3 := &ec2Env{c: c3, clock: clock, srv: srv3, api: ec2Client(srv3.URL, sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey)}
	if again, _ := e3.describeAll(t); !reflect.DeepEqual(again, before) {
		t.Errorf("after the second reopen DescribeInstances shows\n%+v\nwant\n%+v", again, before)
	}
	if replay := e3.run(t, in); aws.ToString(replay.ReservationId) != aws.ToString(first.ReservationId) || c3.Stats().InstancesStarted != 0 {
		t.Errorf("client token after the second reopen: got %s, want %s and nothing started", aws.ToString(replay.ReservationId), aws.ToString(first.ReservationId))
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		aws.ToString(first.Instances[0].InstanceId) + "/0/" + string(data),
		aws.ToString(first.Instances[1].InstanceId) + "/1/" + string(data),
	}
	sort.Strings(want)
	if !reflect.DeepEqual(restarted, want) {
		t.Errorf("OnStart at reopen: got %v, want %v", restarted, want)
	}
}

// FuzzEC2Request sends arbitrary form bodies, correctly signed, to the
// EC2 API: every one must get a reply or an XML error document, never a
// panic.
func FuzzEC2Request(f *testing.F) {
	image := "ami-" + strings.Repeat("0", 17)
	for _, s := range []string{
		"Version=2016-11-15&Action=DescribeAvailabilityZones&Version=2016-11-15&ZoneName.1=a&Filter.1.Name=state&Filter.1.Value.1=available",
		"Version=2016-11-15&Action=DescribeSubnets&Version=2016-11-15&MaxResults=5&NextToken=o5&Filter.1.Name=tag:muster-space&Filter.1.Value.1=al*",
		"Version=2016-11-15&Action=DescribeImages&Owner.1=099720109477&Filter.1.Name=name&Filter.1.Value.1=ubuntu/*-24.04-*",
		"Version=2016-11-15&Action=DescribeInstanceTypes&MaxResults=2&InstanceType.1=s1.small",
		"Version=2016-11-15&Action=RunInstances&ImageId=" + image + "&InstanceType=s1.small&MinCount=1&MaxCount=3&SubnetId=subnet-a-alpha&ClientToken=x" +
			"&TagSpecification.1.ResourceType=instance&TagSpecification.1.Tag.1.Key=k&TagSpecification.1.Tag.1.Value=v" +
			"&BlockDeviceMapping.1.DeviceName=/dev/sdf&BlockDeviceMapping.1.Ebs.VolumeSize=2&UserData=aGk=",
		"Version=2016-11-15&Action=DescribeInstances&MaxResults=5&Filter.1.Name=tag-key&Filter.1.Value.1=k&NextToken=MTIzL3ItMS8wL2ktMQ",
		"Version=2016-11-15&Action=TerminateInstances&InstanceId.1=i-0123456789abcdef0&InstanceId.2=i-1",
		"Version=2016-11-15&Action=DescribeInstanceAttribute&InstanceId=i-0123456789abcdef0&Attribute=userData",
		"Version=2016-11-15&Action=RunInstances&MinCount=99999999999999999999&MaxCount=-1&Filter.0.Name=x&Filter.1.Value.99999=%zz",
		"Version=2016-11-15&Action=DescribeInstances&InstanceId.01=i-1&Filter.1.Name=&MaxResults=1000",
		"Version=2016-11-15&Action=StopInstances&InstanceId.1=i-0123456789abcdef0&Force=maybe",
		"Version=2016-11-15&Action=StartInstances&InstanceId.1=i-0123456789abcdef0",
		"Version=2016-11-15&Action=CreateTags&ResourceId.1=i-0123456789abcdef0&Tag.1.Key=k&Tag.1.Value=v",
		"Version=2016-11-15&Action=DeleteTags&ResourceId.1=i-0123456789abcdef0&Tag.1.Key=k",
		"Version=2016-11-15&Action=DescribeTags&Filter.1.Name=key&Filter.1.Value.1=k&MaxResults=5",
		"Version=2016-11-15&Action=DescribeInstanceStatus&IncludeAllInstances=true",
		"Version=2016-11-15&Action=DescribeVpcs&VpcId.1=vpc-1",
		"Version=2016-11-15&Action=DescribeRegions&RegionName.1=us-east-1",
		"Version=2016-11-15&Action=DescribeVolumes&Filter.1.Name=attachment.instance-id&Filter.1.Value.1=i-*",
		"Action=DescribeRegions",
		"",
		"&&&==&",
	} {
		f.Add(s)
	}
	// A new cloud for each input, so that instances do not pile up.
	newServer := func(tb testing.TB) http.Handler {
		c, err := sim.Open(sim.Config{Clock: newClock(), MaxBatch: 5, Logger: discardLogger()})
		if err != nil {
			tb.Fatal(err)
		}
		return handler(c)
	}
	// The seeds' image id is a placeholder for a real one.
	real := ""
	{
		rec := httptest.NewRecorder()
		newServer(f).ServeHTTP(rec, signedRequest(f, "http://sim.test", "Version=2016-11-15&Action=DescribeImages", sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey))
		var r struct {
			IDs []string `xml:"imagesSet>item>imageId"`
		}
		if err := xml.Unmarshal(rec.Body.Bytes(), &r); err != nil || len(r.IDs) == 0 {
			f.Fatalf("DescribeImages: %v %s", err, rec.Body)
		}
		real = r.IDs[0]
	}
	f.Fuzz(func(t *testing.T, body string) {
		body = strings.ReplaceAll(body, image, real)
		h := newServer(t)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, signedRequest(t, "http://sim.test", body, sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey))
		var r ec2Reply
		if err := xml.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("status %d, reply is not XML (%v): %q", rec.Code, err, rec.Body)
		}
		isErr := r.XMLName.Local == "Response"
		switch {
		case rec.Code == http.StatusOK && (isErr || !strings.HasSuffix(r.XMLName.Local, "Response")):
			t.Fatalf("status 200 with %s", r.XMLName.Local)
		case rec.Code != http.StatusOK && (!isErr || r.Code == "" || r.RequestID == ""):
			t.Fatalf("status %d without an error document: %q", rec.Code, rec.Body)
		}
		if form, err := url.ParseQuery(body); err == nil && form.Get("Action") == "" && rec.Code == http.StatusOK {
			t.Fatalf("no action, yet status 200")
		}
	})
}

// discardLogger keeps expected warnings out of test output.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

const (
	testController = "ctrl-1"
	testModel      = "model-1"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newClock() *fakeclock.Clock { return fakeclock.New(epoch) }

// handler serves c as `muster sim serve` does, with the default keys.
func handler(c *sim.Cloud) http.Handler { return simserver.Handler(c, ec2api.New(c, ec2api.Config{})) }

func openCloud(tb testing.TB, cfg sim.Config) *sim.Cloud {
	tb.Helper()
	c, err := sim.Open(cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func startParams(machine, zone string) muster.StartParams {
	return muster.StartParams{MachineID: machine, Zone: zone, Base: "ubuntu@24.04", LaunchToken: "tok-" + machine}
}

func mustStart(tb testing.TB, p muster.Provider, sp muster.StartParams) muster.StartResult {
	tb.Helper()
	res, err := p.StartInstance(context.Background(), sp)
	if err != nil {
		tb.Fatalf("StartInstance(%+v): %v", sp, err)
	}
	return res
}
