package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sqlstore"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Keys of the controller config kept in the store.
const (
	cfgControllerUUID = "controller-uuid"
	cfgAdminTokenHash = "admin-token-hash"
)

// controllerConfig configures a controller; flags map onto it.
type controllerConfig struct {
	DataDir   string
	Listen    string // host:port; port 0 picks one
	StoreURL  string // "" = sqlite://<data-dir>/muster.db
	Logger    *slog.Logger
	Clock     muster.Clock
	ModelPoll time.Duration // how often the model list is re-read; default 1s
	// WriteUserConfig also writes ~/.config/muster/client.yaml when none
	// exists (the daemon does; tests and the demo do not).
	WriteUserConfig bool
	// AgentBinary is the controller's own agent binary, registered in the
	// agent binary catalogue at start; default os.Executable().
	AgentBinary string
}

// controller is a running `muster controller`: store, HTTPS API, and one
// supervised provisioner per model.
type controller struct {
	cfg        controllerConfig
	log        *slog.Logger
	store      muster.Store
	uuid       string
	ca         *auth.CA
	agentBins  *agentCatalogue
	url        string // https://host:port
	clientPath string // <data-dir>/client.yaml

	listener net.Listener
	server   *http.Server
	api      *api.Server
	metrics  *metrics

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	models map[string]*modelRunner // by model uuid
}

// modelRunner is one model's provider and provisioner.
type modelRunner struct {
	model    muster.Model
	provider *modelProvider
	sup      *provisioner.Supervisor
	cancel   context.CancelFunc
}

// openController starts a controller: it initialises the data dir and
// store on first start, then serves the API and runs the provisioners
// until Close.
func openController(ctx context.Context, cfg controllerConfig) (*controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = muster.SystemClock
	}
	if cfg.ModelPoll <= 0 {
		cfg.ModelPoll = time.Second
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:17070"
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if cfg.StoreURL == "" {
		cfg.StoreURL = "sqlite://" + filepath.Join(cfg.DataDir, "muster.db")
	}
	c := &controller{cfg: cfg, log: cfg.Logger, models: map[string]*modelRunner{}, clientPath: filepath.Join(cfg.DataDir, "client.yaml")}
	ok := false
	defer func() {
		if !ok {
			c.closeResources()
		}
	}()
	var err error
	c.store, err = sqlstore.Open(ctx, cfg.StoreURL, sqlstore.WithLogger(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	token, tokenHash := auth.NewToken()
	kv, err := c.store.InitControllerConfig(ctx, map[string]string{cfgControllerUUID: muster.NewUUID(), cfgAdminTokenHash: tokenHash})
	if err != nil {
		return nil, fmt.Errorf("initialise controller config: %w", err)
	}
	c.uuid = kv[cfgControllerUUID]
	firstStart := kv[cfgAdminTokenHash] == tokenHash
	if c.ca, err = auth.LoadOrCreateCA(cfg.DataDir, cfg.Clock.Now()); err != nil {
		return nil, err
	}
	if err := c.ensureDefaultModel(ctx); err != nil {
		return nil, err
	}
	// agent binaries: register the controller's own (agentbinaries.go).
	if cfg.AgentBinary == "" {
		if c.cfg.AgentBinary, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find own binary: %w", err)
		}
	}
	c.agentBins = newAgentCatalogue(cfg.DataDir)
	if err := c.agentBins.registerSelf(c.cfg.AgentBinary, cfg.Clock.Now()); err != nil {
		return nil, err
	}
	if c.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	host, port, _ := net.SplitHostPort(c.listener.Addr().String())
	cert, err := c.ca.ServerCertificate(certHosts(host), cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	c.url = "https://" + net.JoinHostPort(displayHost(host), port)
	if firstStart {
		if err := c.writeClientConfigs(token); err != nil {
			return nil, err
		}
	} else if err := c.updateClientConfigURL(); err != nil {
		return nil, err
	}
	if err := c.newAPI(kv[cfgAdminTokenHash]); err != nil {
		return nil, err
	}
	c.server = &http.Server{
		Handler:           c.api,
		TLSConfig:         auth.ServerTLSConfig(cert),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		if err := c.server.Serve(tls.NewListener(c.listener, c.server.TLSConfig)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("api server stopped", "err", err)
		}
	}()
	go func() {
		defer c.wg.Done()
		c.runModels()
	}()
	c.log.Info("controller started", "controller", c.uuid, "url", c.url, "data-dir", cfg.DataDir)
	ok = true
	return c, nil
}

// certHosts are the names the server certificate is valid for.
func certHosts(host string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if host != "" && host != "0.0.0.0" && host != "::" {
		hosts = append(hosts, host)
	}
	return hosts
}

// displayHost is the host clients should dial.
func displayHost(host string) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		return "127.0.0.1"
	}
	return host
}

func (c *controller) ensureDefaultModel(ctx context.Context) error {
	_, err := c.store.Model(ctx, muster.DefaultModel)
	if muster.ErrorCode(err) != muster.ENotFound {
		return err
	}
	_, err = c.store.CreateModel(ctx, muster.Model{
		Name:     muster.DefaultModel,
		Provider: "sim",
		Config:   map[string]string{"zones": "a,b,c"},
		Settings: muster.DefaultSettings(),
	})
	if muster.ErrorCode(err) == muster.EConflict {
		return nil // another controller made it first
	}
	return err
}

func (c *controller) writeClientConfigs(token string) error {
	cc := &clientConfig{Controllers: []string{c.url}, CACert: string(c.ca.CertPEM), Token: token, Model: muster.DefaultModel}
	if err := cc.save(c.clientPath); err != nil {
		return err
	}
	if !c.cfg.WriteUserConfig {
		return nil
	}
	p, err := defaultClientConfigPath()
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		if err := cc.save(p); err != nil {
			return err
		}
		c.log.Info("wrote client config", "path", p)
	}
	return nil
}

// updateClientConfigURL keeps the data dir's client config pointing at
// this controller after a restart on another port.
func (c *controller) updateClientConfigURL() error {
	cc, err := loadClientConfig(c.clientPath)
	if err != nil {
		return err
	}
	for _, u := range cc.Controllers {
		if u == c.url {
			return nil
		}
	}
	cc.Controllers = append([]string{c.url}, cc.Controllers...)
	return cc.save(c.clientPath)
}

// runModels keeps one provisioner running per model until Close.
func (c *controller) runModels() {
	t := time.NewTicker(c.cfg.ModelPoll)
	defer t.Stop()
	for {
		c.syncModels()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// syncModels starts provisioners for new models and stops those of removed
// ones.
func (c *controller) syncModels() {
	models, err := c.store.Models(c.ctx)
	if err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("list models", "err", err)
		}
		return
	}
	seen := map[string]bool{}
	for _, m := range models {
		seen[m.UUID] = true
		c.mu.Lock()
		_, running := c.models[m.UUID]
		c.mu.Unlock()
		if !running {
			if err := c.startModel(m); err != nil {
				c.log.Error("start model", "model", m.Name, "err", err)
			}
		}
	}
	c.mu.Lock()
	var gone []*modelRunner
	for id, r := range c.models {
		if !seen[id] {
			gone = append(gone, r)
			delete(c.models, id)
		}
	}
	c.mu.Unlock()
	for _, r := range gone {
		if r.provider.cleanup != nil { // removed model: remove its networks
			if err := r.provider.cleanup(c.ctx); err != nil {
				c.log.Warn("clean up removed model", "model", r.model.Name, "err", err)
			}
		}
		c.stopModel(r)
	}
}

func (c *controller) startModel(m muster.Model) error {
	log := c.log.With("model", m.Name)
	kind, ok := providers[m.Provider]
	if !ok {
		return fmt.Errorf("unknown provider %q", m.Provider)
	}
	p, err := kind.open(c.ctx, providerEnv{controllerUUID: c.uuid, model: m, dataDir: c.cfg.DataDir, logger: log, clock: c.cfg.Clock,
		store: c.store, apiURL: c.url, caCert: c.ca.CertPEM, agentBinary: c.cfg.AgentBinary, listenAgents: c.listenAgents})
	if err != nil {
		return err
	}
	apiAddresses := []string{c.url}
	if p.apiAddresses != nil { // e.g. docker zone gateways (agentlisten.go)
		apiAddresses = p.apiAddresses
	}
	ctx, cancel := context.WithCancel(c.ctx)
	r := &modelRunner{model: m, provider: p, cancel: cancel}
	r.sup = provisioner.Supervise(ctx, provisioner.Config{
		ControllerUUID: c.uuid,
		Model:          m,
		Store:          c.store,
		Provider:       p,
		AgentBinaries:  c.agentBins,
		Clock:          c.cfg.Clock,
		Logger:         log,
		Observer:       c.metrics.observer(m.Name),
		APIAddresses:   apiAddresses,
		CACert:         string(c.ca.CertPEM),
	}, provisioner.SupervisorOptions{})
	c.mu.Lock()
	c.models[m.UUID] = r
	c.mu.Unlock()
	log.Info("provisioner started", "provider", m.Provider)
	return nil
}

func (c *controller) stopModel(r *modelRunner) {
	r.cancel()
	r.sup.Wait()
	c.metrics.forget(r.model.Name)
	if err := r.provider.close(); err != nil {
		c.log.Warn("close provider", "model", r.model.Name, "err", err)
	}
}

// runner returns the running model with the given uuid.
func (c *controller) runner(modelUUID string) *modelRunner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.models[modelUUID]
}

// Close stops the API and every provisioner, within ctx's deadline.
func (c *controller) Close(ctx context.Context) error {
	var err error
	c.stopSimAgents() // first: their connections would hold up Shutdown (simagents.go)
	if c.server != nil {
		if e := c.server.Shutdown(ctx); e != nil {
			c.server.Close()
		}
	}
	if c.cancel != nil {
		c.cancel()
	}
	if c.api != nil {
		c.api.Close()
	}
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		c.mu.Lock()
		runners := c.models
		c.models = map[string]*modelRunner{}
		c.mu.Unlock()
		for _, r := range runners {
			c.stopModel(r)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("controller did not stop in time: %w", ctx.Err())
	}
	c.closeResources()
	return err
}

func (c *controller) closeResources() {
	if c.listener != nil {
		c.listener.Close()
	}
	if c.store != nil {
		c.store.Close()
	}
}

// newAPI builds the API server with the controller's hooks and metrics.
func (c *controller) newAPI(adminTokenHash string) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(api.NewMachineCollector(c.store, c.log))
	c.metrics = newMetrics(reg)
	srv, err := api.NewServer(api.Config{
		Store:          c.store,
		ControllerUUID: c.uuid,
		AdminTokenHash: adminTokenHash,
		Logger:         c.log,
		Clock:          c.cfg.Clock,
		Zones: func(ctx context.Context, modelUUID string) ([]muster.Zone, error) {
			r := c.runner(modelUUID)
			if r == nil {
				return nil, muster.Errorf(muster.EUnavailable, "model %s is not running on this controller", modelUUID)
			}
			return r.provider.Zones(ctx)
		},
		ProvisionerStatus: func(modelUUID string) string {
			r := c.runner(modelUUID)
			if r == nil {
				return ""
			}
			return r.sup.Status().LastError
		},
		SimHandler: func(modelUUID string) http.Handler {
			if r := c.runner(modelUUID); r != nil && r.provider.simHandler != nil {
				return r.provider.simHandler
			}
			return nil
		},
		ValidateModel: validateModel,
		Metrics:       reg,
	})
	if err != nil {
		return err
	}
	srv.Start()
	c.api = srv
	return nil
}
