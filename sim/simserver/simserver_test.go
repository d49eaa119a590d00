package simserver_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/simserver"
)

func TestRunServesAndKeepsState(t *testing.T) {
	state := filepath.Join(t.TempDir(), "sim.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	urls := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- simserver.Run(ctx, simserver.Config{
			Listen: "127.0.0.1:0",
			Cloud:  sim.Config{Zones: sim.ZoneConfigs("x", "y"), StateFile: state},
			Ready: func(url, key, secret string) {
				if key != sim.DefaultEC2AccessKey || secret != sim.DefaultEC2SecretKey {
					t.Errorf("Ready got keys %s/%s, want the defaults", key, secret)
				}
				urls <- url
			},
		})
	}()
	var url string
	select {
	case url = <-urls:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("url %q, want one on 127.0.0.1", url)
	}
	client := sim.NewClient(url, nil)
	inst, err := client.AddInstance(ctx, "y", "ctrl", "model")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	c, err := sim.Open(sim.Config{StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	all := c.AllInstances()
	if len(all) != 1 || all[0].ID != inst.ID {
		t.Errorf("state file after Run: got %+v, want %s", all, inst.ID)
	}
	var zones []string
	for _, z := range c.Zones() {
		zones = append(zones, z.Name)
	}
	if !reflect.DeepEqual(zones, []string{"x", "y"}) {
		t.Errorf("zones from the state file: %v", zones)
	}
}

func TestRunFailsToListen(t *testing.T) {
	err := simserver.Run(context.Background(), simserver.Config{Listen: "127.0.0.1:-1"})
	if err == nil || !strings.Contains(err.Error(), "listen on 127.0.0.1:-1") {
		t.Errorf("got %v, want a listen error", err)
	}
}

func TestParseZones(t *testing.T) {
	zs, err := simserver.ParseZones("a, b:0,c:64")
	want := []sim.ZoneConfig{{Name: "a", Available: true, Capacity: sim.Unlimited}, {Name: "b", Available: true, Capacity: 0}, {Name: "c", Available: true, Capacity: 64}}
	if err != nil || !reflect.DeepEqual(zs, want) {
		t.Errorf("got %+v, %v; want %+v", zs, err, want)
	}
	for _, bad := range []string{"a,a", "a:-1", "a:x", "", "A B"} {
		if _, err := simserver.ParseZones(bad); err == nil {
			t.Errorf("ParseZones(%q) succeeded", bad)
		}
	}
}
