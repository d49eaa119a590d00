package ec2

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

// crashAtTags serves a sim's EC2 API but "crashes" the caller at the
// CreateTags call number crashAt (1-based): it cancels the caller's
// context and fails the call, as a controller killed there would never
// make it.
type crashAtTags struct {
	next    http.Handler
	mu      sync.Mutex
	crashAt int
	tags    int
	cancel  context.CancelFunc
}

func (c *crashAtTags) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	form, _ := url.ParseQuery(string(body))
	if form.Get("Action") == "CreateTags" {
		c.mu.Lock()
		c.tags++
		crash := c.tags >= c.crashAt && c.cancel != nil
		if crash {
			c.cancel()
		}
		c.mu.Unlock()
		if crash {
			http.Error(w, "crashed", http.StatusServiceUnavailable)
			return
		}
	}
	c.next.ServeHTTP(w, r)
}

// A crash between a batch's RunInstances and its tagging, after the first
// instance was tagged: a restarted controller (a fresh provider) lists
// every instance with its machine (the untagged ones from the user data,
// one DescribeInstanceAttribute for the reservation), completes the tags,
// and repeating the start (the restart's retry of the in-flight launch)
// returns the same instances. Then DescribeInstances by tag:muster-machine
// finds each instance.
func TestBatchTagsAfterCrash(t *testing.T) {
	cloud, err := sim.Open(sim.Config{Zones: sim.ZoneConfigs(testZones...)})
	if err != nil {
		t.Fatal(err)
	}
	defer cloud.Close()
	crash := &crashAtTags{next: simHandler(cloud), crashAt: 2}
	srv := httptest.NewServer(crash)
	defer srv.Close()
	s := &simEC2{cloud: cloud, endpoint: srv.URL + "/ec2/"}
	ctx := testCtx(t)
	p := s.provider(t, muster.NewUUID(), muster.NewUUID())
	var ps []muster.StartParams
	for i := range 4 {
		ps = append(ps, withAgent(t, params(p, strconv.Itoa(i), "us-east-1a")))
	}
	runCtx, cancel := context.WithCancel(ctx)
	crash.mu.Lock()
	crash.cancel = cancel
	crash.mu.Unlock()
	p.StartInstances(runCtx, ps) // its outcomes die with the controller
	if n := cloud.Stats().InstancesStarted; n != 4 {
		t.Fatalf("the batch started %d instances, want 4", n)
	}
	tagged := 0
	for _, in := range cloud.AllInstances() {
		if in.Tags[muster.TagMachine] != "" {
			tagged++
		}
	}
	if tagged != 1 {
		t.Fatalf("%d instances tagged before the crash, want 1", tagged)
	}
	crash.mu.Lock()
	crash.cancel = nil
	crash.mu.Unlock()

	fresh := s.provider(t, p.controller, p.model)
	insts, err := fresh.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byMachine := map[string]muster.Instance{}
	for _, in := range insts {
		byMachine[in.MachineID] = in
	}
	for _, sp := range ps {
		if in := byMachine[sp.MachineID]; in.ID == "" || in.LaunchToken != sp.LaunchToken {
			t.Errorf("after the restart machine %s is listed as %+v, want its instance with token %s", sp.MachineID, in, sp.LaunchToken)
		}
	}
	if n := fresh.callCounts()["DescribeInstanceAttribute"]; n != 1 {
		t.Errorf("DescribeInstanceAttribute calls %d, want 1 (one reservation)", n)
	}
	if n := fresh.callCounts()["CreateTags"]; n != 3 {
		t.Errorf("CreateTags calls %d after the restart, want 3 (the untagged instances)", n)
	}
	again := fresh.StartInstances(ctx, ps)
	for i, o := range again {
		if o.Err != nil || o.Result.Instance.ID != byMachine[ps[i].MachineID].ID {
			t.Errorf("repeated start %d: %s, %v; want %s", i, o.Result.Instance.ID, o.Err, byMachine[ps[i].MachineID].ID)
		}
	}
	if n := cloud.Stats().InstancesStarted; n != 4 {
		t.Errorf("%d instances started in all, want 4: the restart launched duplicates", n)
	}
	for _, sp := range ps {
		out, err := fresh.client.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{
			{Name: aws.String("tag:" + muster.TagMachine), Values: []string{sp.MachineID}},
			{Name: aws.String("tag:" + muster.TagModel), Values: []string{p.model}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var found []types.Instance
		for _, r := range out.Reservations {
			found = append(found, r.Instances...)
		}
		if len(found) != 1 || aws.ToString(found[0].InstanceId) != byMachine[sp.MachineID].ID {
			t.Errorf("tag:%s=%s finds %d instances, want %s", muster.TagMachine, sp.MachineID, len(found), byMachine[sp.MachineID].ID)
			continue
		}
		got := fresh.instance(found[0]).Tags
		if got[muster.TagLaunchToken] != sp.LaunchToken || got[TagName] != p.machineName(sp.MachineID) {
			t.Errorf("machine %s's instance tags %v, want its launch token and Name", sp.MachineID, got)
		}
	}
	// Tagged now: a listing reads no more user data and tags nothing.
	third := s.provider(t, p.controller, p.model)
	if _, err := third.Instances(ctx); err != nil {
		t.Fatal(err)
	}
	if c := third.callCounts(); c["CreateTags"] != 0 || c["DescribeInstanceAttribute"] != 0 {
		t.Errorf("a listing of the tagged batch made calls %v, want no CreateTags or DescribeInstanceAttribute", c)
	}
}
