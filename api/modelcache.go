package api

import (
	"context"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// modelCacheTTL is how long an agent endpoint trusts a model it read:
// thousands of agents enrolling or logging in at once ask for the same
// model, and a setting changed meanwhile reaches them a second later.
const modelCacheTTL = time.Second

// modelCache keeps the models the agent endpoints read, by the name or
// uuid they were asked for. Failed reads are not kept.
type modelCache struct {
	mu sync.Mutex
	m  map[string]cachedModel
}

type cachedModel struct {
	model muster.Model
	at    time.Time
}

func (c *modelCache) get(ctx context.Context, st muster.Store, clock muster.Clock, ref string) (muster.Model, error) {
	now := clock.Now()
	c.mu.Lock()
	e, ok := c.m[ref]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < modelCacheTTL && !now.Before(e.at) {
		return e.model, nil
	}
	m, err := st.Model(ctx, ref)
	if err != nil {
		return m, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 1024 { // models are few; a flood of names is not
		c.m = map[string]cachedModel{}
	}
	c.m[ref] = cachedModel{model: m, at: now}
	c.mu.Unlock()
	return m, nil
}
