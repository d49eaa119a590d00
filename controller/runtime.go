package controller

import (
	"context"
	"net/http"
	"sort"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// The controller is the API's runtime: what the API knows of the models'
// provisioners and providers comes from here.
var _ api.Runtime = (*Controller)(nil)

// newAPI builds the API server over the controller and its metrics.
func (c *Controller) newAPI(adminTokenHash string) error {
	c.cfg.serverDefaults()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c.metricsReg = reg
	c.metrics = newMetrics(reg)
	srv, err := api.NewServer(api.Config{
		Store:          c.store,
		ControllerUUID: c.uuid,
		AdminTokenHash: adminTokenHash,
		Logger:         c.log,
		Clock:          c.cfg.Clock,
		Runtime:        c,
		Metrics:        reg,
		Registerer:     reg,
		BodyTimeout:    c.cfg.BodyTimeout,
		SessionKey:     c.ca.DerivedKey("agent sessions"),
	})
	if err != nil {
		return err
	}
	srv.Start()
	c.api = srv
	return nil
}

// Zones returns the model's zone table. A model whose provisioner runs
// here answers from the provisioner's own table (Z1, Z2), which it
// refreshes from the provider through its rate limiter; no provider is
// called here. A model another controller runs (or whose provisioner has
// not made its first pass yet) answers from the store: the zones its
// machines' instances were recorded in, a zone available when an
// instance of the model runs there.
func (c *Controller) Zones(ctx context.Context, modelUUID string) ([]api.ZoneInfo, error) {
	if r := c.runner(modelUUID); r != nil {
		if zs := r.sup.Zones(); len(zs) > 0 {
			out := make([]api.ZoneInfo, len(zs))
			for i, z := range zs {
				out[i] = api.ZoneInfo{Name: z.Name, Available: z.Available, Machines: z.Machines,
					Blocked: blockedShapes(z.Blocked, c.cfg.Clock.Now())}
			}
			return out, nil
		}
	}
	byName := map[string]*api.ZoneInfo{}
	err := forMachines(ctx, c.store, modelUUID, func(m muster.Machine) {
		if m.Instance == nil {
			return
		}
		name := m.Instance.Zone
		if name == "" {
			name = m.Instance.Hardware.AvailabilityZone
		}
		if name == "" {
			return
		}
		z := byName[name]
		if z == nil {
			z = &api.ZoneInfo{Name: name}
			byName[name] = z
		}
		z.Machines++
		z.Available = z.Available || m.InstanceStatus == muster.InstanceRunning
	})
	if err != nil {
		return nil, err
	}
	if err := c.storedBlocks(ctx, modelUUID, byName); err != nil {
		return nil, err
	}
	out := make([]api.ZoneInfo, 0, len(byName))
	for _, z := range byName {
		out = append(out, *z)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// forMachines calls fn with each machine of the model, read a page at a
// time, so a big model is never all in memory.
func forMachines(ctx context.Context, st muster.Store, modelUUID string, fn func(muster.Machine)) error {
	after := ""
	for {
		page, err := st.MachinesPage(ctx, modelUUID, after, api.DefaultPageSize)
		if err != nil {
			return err
		}
		for _, m := range page {
			fn(m)
		}
		if len(page) < api.DefaultPageSize {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// ProvisionerError returns the last error of the model's provisioner. A
// model provisioned by another controller reports "": its errors are
// known there only.
func (c *Controller) ProvisionerError(modelUUID string) string {
	if r := c.runner(modelUUID); r != nil {
		return r.sup.Status().LastError
	}
	return ""
}

// Monitors reports whether the model's provisioner runs here: agents
// heartbeat to the controller that runs it, and only that one sets their
// machines down.
func (c *Controller) Monitors(modelUUID string) bool { return c.runner(modelUUID) != nil }

// AgentBinary returns the file of the catalogue's binary with that
// SHA-256.
func (c *Controller) AgentBinary(sha256 string) (string, error) { return c.agentBins.pathOf(sha256) }

// ProviderHandler returns the admin API of the model's provider when its
// provisioner runs here and the provider has one (an embedded sim).
func (c *Controller) ProviderHandler(modelUUID string) http.Handler {
	if r := c.runner(modelUUID); r != nil && r.provider.Handler != nil {
		return r.provider.Handler
	}
	return nil
}

// IdentityCert returns the certificate of the model's cloud that verifies
// its instance identity documents, when its provisioner runs here and the
// provider has one.
func (c *Controller) IdentityCert(modelUUID string) ([]byte, error) {
	if r := c.runner(modelUUID); r != nil && r.provider.IdentityCert != nil {
		return r.provider.IdentityCert, nil
	}
	return nil, muster.Errorf(muster.EUnavailable, "no instance identity certificate for model %s on this controller", modelUUID)
}

// Offerings is what the model's provider offers, when its provisioner
// runs here: instance types and bases from the provider (when it knows
// them), zones from the provisioner's zone table once it has one.
// Nothing is known of a model another controller runs.
func (c *Controller) Offerings(modelUUID string) muster.Offerings {
	r := c.runner(modelUUID)
	if r == nil {
		return muster.Offerings{}
	}
	var o muster.Offerings
	if of, ok := r.provider.Provider.(muster.Offerer); ok {
		o = of.Offerings()
	}
	for _, z := range r.sup.Zones() {
		o.Zones = append(o.Zones, z.Name)
	}
	return o
}
