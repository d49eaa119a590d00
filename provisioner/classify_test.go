package provisioner

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/musterhq/muster"
)

func machine(id string, life muster.Life, st muster.MachineStatus, ist muster.InstanceStatus, inst string) muster.Machine {
	m := muster.Machine{ID: id, Life: life, Status: st, InstanceStatus: ist}
	if inst != "" {
		m.Instance = &muster.InstanceInfo{InstanceID: inst}
	}
	return m
}

func TestClassify(t *testing.T) {
	const (
		alive = muster.LifeAlive
		dying = muster.LifeDying
		dead  = muster.LifeDead
	)
	tests := []struct {
		name string
		m    muster.Machine
		f    flags
		want class
	}{
		{"new machine is pending", machine("0", alive, muster.StatusPending, "", ""), flags{}, classPending},
		{"allocating after retry request is pending", machine("0", alive, muster.StatusError, muster.InstanceAllocating, ""), flags{}, classPending},
		{"provisioning error left alone", machine("0", alive, muster.StatusError, muster.InstanceProvisioningError, ""), flags{}, classNone},
		{"alive with instance", machine("0", alive, muster.StatusStarted, muster.InstanceRunning, "i-1"), flags{}, classNone},
		{"starting is not queued twice", machine("0", alive, muster.StatusPending, muster.InstanceAllocating, ""), flags{starting: true}, classNone},
		{"dying with instance waits", machine("0", dying, muster.StatusStarted, muster.InstanceRunning, "i-1"), flags{}, classNone},
		{"dying without instance made dead", machine("0", dying, muster.StatusPending, "", ""), flags{}, classMakeDead},
		{"dying while starting made dead and deferred", machine("0", dying, muster.StatusPending, muster.InstanceAllocating, ""), flags{starting: true}, classMakeDeadDefer},
		{"dead", machine("0", dead, muster.StatusStarted, muster.InstanceRunning, "i-1"), flags{}, classDead},
		{"dead while starting deferred", machine("0", dead, muster.StatusPending, muster.InstanceAllocating, ""), flags{starting: true}, classDefer},
		{"dead being stopped skipped", machine("0", dead, muster.StatusStarted, muster.InstanceRunning, "i-1"), flags{stopping: true}, classSkip},
		{"deferred skipped", machine("0", dead, muster.StatusPending, "", ""), flags{deferred: true}, classSkip},
		{"alive stopped status without instance left alone", machine("0", alive, muster.StatusStopped, "", ""), flags{}, classNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classify(tt.m, tt.f); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClassifyAll(t *testing.T) {
	ms := []muster.Machine{
		machine("0", muster.LifeAlive, muster.StatusPending, "", ""),
		machine("1", muster.LifeDying, muster.StatusPending, "", ""),
		machine("2", muster.LifeDead, muster.StatusStarted, muster.InstanceRunning, "i-2"),
		machine("3", muster.LifeDead, muster.StatusPending, muster.InstanceAllocating, ""),
		machine("4", muster.LifeDying, muster.StatusPending, muster.InstanceAllocating, ""),
	}
	starting := map[string]bool{"3": true, "4": true}
	p := classifyAll(ms, func(id string) flags { return flags{starting: starting[id]} })
	check := func(name string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	check("pending", p.Pending, []string{"0"})
	check("make dead", p.MakeDead, []string{"1", "4"})
	check("dead", p.Dead, []string{"1", "2"})
	check("defer", p.Defer, []string{"3", "4"})
}

func TestPoolResizeAndPanic(t *testing.T) {
	ctx := t.Context()
	var mu sync.Mutex
	var panics []any
	done := make(chan int, 100)
	p := newPool(ctx, 2, nil)
	p.onPanic = func(v any) { mu.Lock(); panics = append(panics, v); mu.Unlock() }
	block := make(chan struct{})
	for i := 0; i < 10; i++ {
		p.submit(func(context.Context) { <-block; done <- i })
	}
	p.submit(func(context.Context) { panic("boom") })
	p.resize(5)
	if q, w := p.stats(); w != 5 || q > 11 {
		t.Errorf("got %d queued, %d workers, want 5 workers", q, w)
	}
	close(block)
	seen := map[int]bool{}
	for len(seen) < 10 {
		seen[<-done] = true
	}
	p.resize(1)
	p.close()
	mu.Lock()
	defer mu.Unlock()
	if len(panics) != 1 || panics[0] != "boom" {
		t.Errorf("got panics %v, want one boom", panics)
	}
}
