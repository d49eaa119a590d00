package ec2api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/simserver"
)

// Conformance with clients nobody here wrote: the AWS CLI and boto3 from
// Debian, and Terraform's hashicorp/aws provider where it is installed,
// run against a `muster sim serve` server (simserver.Run) on 127.0.0.1.

// needClients skips the test unless MUSTER_TEST_AWSCLI=1, and then fails
// it when a client is missing.
func needClients(t *testing.T, commands ...string) {
	t.Helper()
	if os.Getenv("MUSTER_TEST_AWSCLI") != "1" {
		t.Skip("set MUSTER_TEST_AWSCLI=1 to run the AWS CLI and boto3 against the sim (apt-get install awscli python3-boto3)")
	}
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("MUSTER_TEST_AWSCLI=1 but %s is not installed: %v", c, err)
		}
	}
}

// serve runs a sim server as `muster sim serve` does, with state file
// state ("" for none), until the test ends or stop is called; it returns
// its URL.
func serve(t *testing.T, state string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- simserver.Run(ctx, simserver.Config{
			Listen: "127.0.0.1:0",
			Cloud:  sim.Config{Zones: sim.ZoneConfigs("us-east-1a", "us-east-1b"), StateFile: state, PendingTime: time.Second, Logger: discardLogger()},
			Ready:  func(url, _, _ string) { urls <- url },
		})
	}()
	select {
	case url = <-urls:
	case err := <-done:
		cancel()
		t.Fatalf("sim server: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("sim server: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return url, stop
}

// clientEnv is the environment of a client process: the sim's keys, a
// region, and no configuration of the user running the tests.
func clientEnv(t *testing.T) []string {
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"),
		"AWS_ACCESS_KEY_ID=" + sim.DefaultEC2AccessKey, "AWS_SECRET_ACCESS_KEY=" + sim.DefaultEC2SecretKey,
		"AWS_DEFAULT_REGION=us-east-1", "AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true", "AWS_PAGER=",
		"AWS_CONFIG_FILE=" + filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "credentials"),
		"AWS_MAX_ATTEMPTS=1"}
	return env
}

// awsCLI runs the AWS CLI against the sim at url.
type awsCLI struct {
	t   *testing.T
	url string
	env []string
}

// run runs `aws --endpoint-url url ec2 args...` and decodes its JSON
// output into out (when not nil); it returns the error output of a
// failed command.
func (a awsCLI) run(out any, args ...string) (stderr string, ok bool) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "aws", append([]string{"--endpoint-url", a.url, "--output", "json", "ec2"}, args...)...)
	cmd.Env = a.env
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		return se.String(), false
	}
	if out != nil && so.Len() > 0 {
		if err := json.Unmarshal(so.Bytes(), out); err != nil {
			a.t.Fatalf("aws %s: output is not JSON (%v): %s", strings.Join(args, " "), err, so.String())
		}
	}
	return se.String(), true
}

// must runs a command that must succeed.
func (a awsCLI) must(out any, args ...string) {
	a.t.Helper()
	if se, ok := a.run(out, args...); !ok {
		a.t.Fatalf("aws ec2 %s: %s", strings.Join(args, " "), se)
	}
}

// fails runs a command that must fail with the EC2 error code code.
func (a awsCLI) fails(code string, args ...string) {
	a.t.Helper()
	se, ok := a.run(nil, args...)
	if ok || !strings.Contains(se, "("+code+")") {
		a.t.Errorf("aws ec2 %s: got success=%v, %q; want error %s", strings.Join(args, " "), ok, se, code)
	}
}

type cliInstance struct {
	InstanceId string
	State      struct {
		Code int
		Name string
	}
	Placement struct{ AvailabilityZone string }
	SubnetId  string
	Tags      []struct{ Key, Value string }
}

type cliReservations struct {
	Reservations []struct{ Instances []cliInstance }
}

func (r cliReservations) instances() []cliInstance {
	var out []cliInstance
	for _, res := range r.Reservations {
		out = append(out, res.Instances...)
	}
	return out
}

func TestAWSCLI(t *testing.T) {
	needClients(t, "aws")
	state := filepath.Join(t.TempDir(), "sim.json")
	url, stop := serve(t, state)
	cli := awsCLI{t: t, url: url, env: clientEnv(t)}

	var imgs struct {
		Images []struct{ ImageId, Name string }
	}
	cli.must(&imgs, "describe-images", "--owners", "099720109477", "--filters", "Name=name,Values=*noble-24.04-amd64*")
	if len(imgs.Images) != 1 {
		t.Fatalf("describe-images: got %+v, want the one noble amd64 image", imgs.Images)
	}
	var subnets struct {
		Subnets []struct{ SubnetId, AvailabilityZone string }
	}
	cli.must(&subnets, "describe-subnets", "--filters", "Name=availability-zone,Values=us-east-1b", "Name=default-for-az,Values=true")
	if len(subnets.Subnets) != 1 {
		t.Fatalf("describe-subnets: got %+v, want one default subnet", subnets.Subnets)
	}
	subnet := subnets.Subnets[0].SubnetId
	run := []string{"run-instances", "--image-id", imgs.Images[0].ImageId, "--instance-type", "s1.small", "--count", "2",
		"--subnet-id", subnet, "--client-token", "cli-1", "--tag-specifications", "ResourceType=instance,Tags=[{Key=team,Value=red}]"}
	var res struct{ Instances []cliInstance }
	cli.must(&res, run...)
	if len(res.Instances) != 2 || res.Instances[0].State.Name != "pending" || res.Instances[0].State.Code != 0 || res.Instances[0].Placement.AvailabilityZone != "us-east-1b" {
		t.Fatalf("run-instances: got %+v, want 2 pending instances in us-east-1b", res.Instances)
	}
	ids := []string{res.Instances[0].InstanceId, res.Instances[1].InstanceId}
	var again struct{ Instances []cliInstance }
	cli.must(&again, run...)
	if len(again.Instances) != 2 || again.Instances[0].InstanceId != ids[0] {
		t.Errorf("run-instances repeated with its client token: got %+v, want the same instances", again.Instances)
	}
	cli.fails("IdempotentParameterMismatch", append(run[:len(run)-1:len(run)-1], "ResourceType=instance,Tags=[{Key=team,Value=blue}]")...)
	for _, bad := range [][]string{
		{"--key-name", "does-not-exist"},
		{"--security-group-ids", "sg-0123456789abcdef0"},
		{"--iam-instance-profile", "Name=admin"},
		{"--instance-market-options", "MarketType=spot"},
		{"--private-ip-address", "10.2.0.9"},
	} {
		code := map[string]string{"--key-name": "InvalidKeyPair.NotFound", "--security-group-ids": "InvalidGroup.NotFound"}[bad[0]]
		if code == "" {
			code = "Unsupported"
		}
		cli.fails(code, append([]string{"run-instances", "--image-id", imgs.Images[0].ImageId, "--instance-type", "s1.small", "--count", "1"}, bad...)...)
	}
	cli.fails("InvalidParameterValue", "run-instances", "--image-id", imgs.Images[0].ImageId, "--instance-type", "s1.small", "--count", "1",
		"--placement", "AvailabilityZone=us-east-1a", "--network-interfaces", "DeviceIndex=0,SubnetId="+subnet)

	// Waiters poll until the instances run and pass their status checks.
	cli.must(nil, "wait", "instance-running", "--instance-ids", ids[0], ids[1])
	cli.must(nil, "wait", "instance-status-ok", "--instance-ids", ids[0])

	// Tags.
	cli.must(nil, "create-tags", "--resources", ids[0], "--tags", "Key=role,Value=db", "Key=Name,Value=one")
	cli.must(nil, "delete-tags", "--resources", ids[1], "--tags", "Key=team")
	var tags struct {
		Tags []struct{ ResourceId, Key, Value string }
	}
	cli.must(&tags, "describe-tags", "--filters", "Name=resource-id,Values="+ids[0])
	if len(tags.Tags) != 3 {
		t.Errorf("describe-tags of %s: got %+v, want Name, role and team", ids[0], tags.Tags)
	}
	for filter, want := range map[string][]string{
		"Name=tag:team,Values=red":                 {ids[0]},
		"Name=tag-key,Values=role":                 {ids[0]},
		"Name=tag-value,Values=d?":                 {ids[0]},
		"Name=instance-state-code,Values=16":       {ids[0], ids[1]},
		"Name=architecture,Values=x86_64":          {ids[0], ids[1]},
		"Name=vpc-id,Values=vpc-*":                 {ids[0], ids[1]},
		"Name=availability-zone,Values=us-east-1a": nil,
		"Name=subnet-id,Values=" + subnet:          {ids[0], ids[1]},
		"Name=instance-type,Values=s1.large":       nil,
	} {
		var out cliReservations
		cli.must(&out, "describe-instances", "--filters", filter)
		var got []string
		for _, inst := range out.instances() {
			got = append(got, inst.InstanceId)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("describe-instances --filters %s: got %v, want %v", filter, got, want)
		}
	}
	var attr struct{ InstanceType struct{ Value string } }
	cli.must(&attr, "describe-instance-attribute", "--instance-id", ids[1], "--attribute", "instanceType")
	if attr.InstanceType.Value != "s1.small" {
		t.Errorf("describe-instance-attribute instanceType: got %+v", attr)
	}
	var vols struct {
		Volumes []struct {
			VolumeId string
			Size     int
		}
	}
	cli.must(&vols, "describe-volumes", "--filters", "Name=attachment.instance-id,Values="+ids[0])
	if len(vols.Volumes) != 1 || vols.Volumes[0].Size != 8 {
		t.Errorf("describe-volumes: got %+v, want the 8 GiB root volume", vols.Volumes)
	}
	var vpcs struct {
		Vpcs []struct {
			VpcId     string
			IsDefault bool
		}
	}
	cli.must(&vpcs, "describe-vpcs")
	var regions struct{ Regions []struct{ RegionName string } }
	cli.must(&regions, "describe-regions")
	if len(vpcs.Vpcs) != 1 || !vpcs.Vpcs[0].IsDefault || len(regions.Regions) != 1 || regions.Regions[0].RegionName != "us-east-1" {
		t.Errorf("describe-vpcs, describe-regions: got %+v, %+v", vpcs, regions)
	}

	// Stop and start.
	cli.must(nil, "stop-instances", "--instance-ids", ids[1])
	cli.must(nil, "wait", "instance-stopped", "--instance-ids", ids[1])
	cli.must(nil, "start-instances", "--instance-ids", ids[1])
	cli.must(nil, "wait", "instance-running", "--instance-ids", ids[1])

	// Terminate.
	cli.must(nil, "terminate-instances", "--instance-ids", ids[0])
	cli.must(nil, "wait", "instance-terminated", "--instance-ids", ids[0])
	cli.fails("IncorrectInstanceState", "start-instances", "--instance-ids", ids[0])
	cli.fails("InvalidInstanceID.NotFound", "terminate-instances", "--instance-ids", "i-0123456789abcdef0")

	// After a restart from the state file, tag filters work, though one
	// instance has no tags left (issue 16).
	stop()
	url, _ = serve(t, state)
	cli.url = url
	var after cliReservations
	cli.must(&after, "describe-instances", "--filters", "Name=tag:role,Values=db")
	if got := after.instances(); len(got) != 1 || got[0].InstanceId != ids[0] {
		t.Errorf("describe-instances --filters Name=tag:role,Values=db after a restart: got %+v, want %s", got, ids[0])
	}
}

func TestBoto3(t *testing.T) {
	needClients(t, "python3")
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		t.Fatalf("MUSTER_TEST_AWSCLI=1 but python3 cannot import boto3 (apt-get install python3-boto3): %v", err)
	}
	url, _ := serve(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", filepath.Join("testdata", "boto3_check.py"), url)
	cmd.Env = clientEnv(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("boto3 check: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "boto3 check passed") {
		t.Fatalf("boto3 check said: %s", out)
	}
}

// terraformMirror returns a filesystem mirror of Terraform providers that
// holds hashicorp/aws: $MUSTER_TEST_TERRAFORM_MIRROR, or one of the usual
// places; "" when there is none.
func terraformMirror() string {
	dirs := []string{os.Getenv("MUSTER_TEST_TERRAFORM_MIRROR"), "/opt/tf-plugins", "/usr/share/terraform/plugins", "/usr/local/share/terraform/plugins"}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".terraform.d", "plugins"))
	}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(d, "registry.terraform.io", "hashicorp", "aws")); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// TestTerraform applies an aws_instance with data sources against the
// sim, checks that a plan then shows no change, and destroys it. It runs
// where terraform and a filesystem mirror of hashicorp/aws are installed
// (nothing is downloaded).
func TestTerraform(t *testing.T) {
	if os.Getenv("MUSTER_TEST_AWSCLI") != "1" {
		t.Skip("set MUSTER_TEST_AWSCLI=1 (and install terraform with a filesystem mirror of hashicorp/aws) to run Terraform against the sim")
	}
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("terraform is not installed: the Terraform suite does not run")
	}
	mirror := terraformMirror()
	if mirror == "" {
		t.Skip("no filesystem mirror with registry.terraform.io/hashicorp/aws (set MUSTER_TEST_TERRAFORM_MIRROR): the Terraform suite does not run")
	}
	url, _ := serve(t, "")
	dir := t.TempDir()
	main, err := os.ReadFile(filepath.Join("testdata", "terraform", "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	rc := filepath.Join(dir, "terraformrc")
	cfg := fmt.Sprintf("provider_installation {\n  filesystem_mirror {\n    path = %q\n  }\n}\n", mirror)
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), main, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(clientEnv(t), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1", "TF_VAR_endpoint="+url)
	tf := func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "terraform", append([]string{"-chdir=" + dir}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := tf(args...)
		if err != nil {
			t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	must("init", "-no-color")
	must("apply", "-auto-approve", "-no-color")
	id := strings.Trim(strings.TrimSpace(must("output", "-raw", "instance")), `"`)
	if zone := strings.TrimSpace(must("output", "-raw", "zone")); zone != "us-east-1b" || !strings.HasPrefix(id, "i-") {
		t.Errorf("terraform outputs: instance %q in zone %q, want an instance in us-east-1b", id, zone)
	}
	// -detailed-exitcode: 0 no changes, 2 changes.
	if out, err := tf("plan", "-detailed-exitcode", "-no-color"); err != nil {
		t.Errorf("plan after apply is not empty (%v):\n%s", err, out)
	}
	must("destroy", "-auto-approve", "-no-color")
	if out, err := tf("plan", "-destroy", "-detailed-exitcode", "-no-color"); err != nil {
		t.Errorf("plan -destroy after destroy is not empty (%v):\n%s", err, out)
	}
}
