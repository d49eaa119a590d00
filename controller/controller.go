// Package controller is the muster controller as a library: Open starts
// it on a data dir (state store, CA, client config, agent-binary catalogue,
// HTTPS API, controller registration) and runs one supervised provisioner
// per model while it holds the model's lease; Close stops it all.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/connlimit"
	"github.com/musterhq/muster/internal/datadir"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sqlstore"
	"github.com/prometheus/client_golang/prometheus"
)

// Keys of the controller config kept in the store.
const (
	cfgControllerUUID = "controller-uuid"
	cfgAdminTokenHash = api.AdminTokenHashKey
	// The CA, shared by every controller of the store: the first
	// controller's wins.
	cfgCACert = "ca-cert"
	cfgCAKey  = "ca-key"
)

// IDFile holds a controller's own id in its data dir: the lease
// holder and registry name of this controller among those sharing a store
// (the controller uuid is the same for all of them).
const IDFile = "controller-id"

// Timings of the controllers sharing a store.
const (
	// sharedLeaseTTL is the life of a model lease on a shared
	// (PostgreSQL) store; the holder renews it every third of it, on the
	// store's lease connection, and stops provisioning a fifth of it
	// before it could expire. After a kill -9 another controller takes
	// the model over within the TTL plus a poll (docs/architecture.md).
	sharedLeaseTTL = 2500 * time.Millisecond
	// soloLeaseTTL is the life of a model lease on SQLite, where one
	// controller runs (its data dir is locked) and nothing waits for the
	// lease to expire: long, so that a busy controller whose renewal
	// queues behind the store's writes is not stopped for it.
	soloLeaseTTL = 30 * time.Second
	// maxLeasePoll bounds how often a controller that runs no provisioner
	// for a model tries to take its lease: every tenth of the TTL, at
	// most every maxLeasePoll.
	maxLeasePoll = time.Second
	// registerTTL is how long a controller's registered API address lives
	// without a refresh; it is refreshed every registerEvery.
	registerTTL   = 30 * time.Second
	registerEvery = 10 * time.Second
)

// StopTimeout bounds a graceful stop (SPEC §5.1: within 5 s).
const StopTimeout = 4500 * time.Millisecond

// Config configures a controller; the controller command's flags map onto
// it.
type Config struct {
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

	// APIAddress is the host:port other controllers' clients reach this
	// controller at, registered in the store; default the listen address
	// (127.0.0.1 for an unspecified host). Its host is in the server
	// certificate.
	APIAddress string
	// ClientConfigFrom is a client config of the controllers this one joins
	// (its token matches the store's): copied, with this controller's URL
	// added, to <data-dir>/client.yaml when this controller does not make
	// the admin token itself.
	ClientConfigFrom string
	// DefaultSimEndpoint, when set, makes the default model a sim model at
	// this `muster sim serve` URL. On a shared (PostgreSQL) store the
	// default model is created only when it is set: an embedded sim lives
	// in one controller's data dir.
	DefaultSimEndpoint string
	// LeaseTTL is the life of a model lease; default 2.5s on PostgreSQL,
	// 30s on SQLite. A controller without the lease tries to take it every
	// tenth of it (at most every second).
	LeaseTTL time.Duration
	// Providers are the provider kinds models may use, by provider name
	// (DESIGN §1: the map is built by the caller, in cmd/muster);
	// required.
	Providers map[string]ProviderKind
	// CAKeyFile, when set, keeps the CA's private key in this file (0600)
	// instead of the store: for a PostgreSQL store shared by several
	// controllers, each given the same file (S4). A new CA writes its key
	// there; a store that still holds the key has it moved out.
	CAKeyFile string
	// SimAgentBootDelay is how long a simulated instance "boots" before
	// its agent starts (SPEC §3.1); default 1s.
	SimAgentBootDelay time.Duration
	// IdleTimeout closes an API connection idle this long between
	// requests; default 30s (S5).
	IdleTimeout time.Duration
	// BodyTimeout bounds the time a request body may take to arrive;
	// default 30s (S5).
	BodyTimeout time.Duration
	// MaxConns caps the API's open connections; at the cap the longest
	// idle one is closed to make room. Default: the open-file limit less
	// a reserve for the store and clients (S5).
	MaxConns int
	// MetricsListen, when set (host:port), serves /metrics there without
	// authentication, over plain HTTP, for Prometheus; on the API port
	// /metrics takes the admin token (S7).
	MetricsListen string
}

// Controller is a running controller: store, HTTPS API, and one
// supervised provisioner per model. Its methods are safe for concurrent
// use.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	store    muster.Store
	leases   muster.LeaseStore
	registry muster.ControllerRegistry
	// peers is what AgentAddresses returned last, read at peersAt.
	peersMu    sync.Mutex
	peers      []string
	peersAt    time.Time
	shared     bool   // the store is shared with other controllers (PostgreSQL)
	id         string // this controller's own id (IDFile)
	apiAddress string // host:port registered for clients
	uuid       string
	ca         *auth.CA
	agentBins  *AgentCatalogue
	url        string // https://host:port
	clientPath string // <data-dir>/client.yaml
	// clientWritten is false when a joining controller could not write a
	// client config (no --client-config).
	clientWritten bool

	lock     *datadir.Lock // the data dir's lock, held until Close (S1)
	listener net.Listener
	server   *http.Server
	limiter  *connlimit.Limiter
	api      *api.Server
	metrics  *metrics
	// metricsReg is every metric of the controller; metricsServer serves
	// it on metricsListener without authentication (MetricsListen).
	metricsReg      *prometheus.Registry
	metricsServer   *http.Server
	metricsListener net.Listener

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// crashed makes Close behave like a crash (tests): leases are not
	// released and the registration is left to expire.
	crashed atomic.Bool

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	models  map[string]*modelRunner // the provisioners running here, by model uuid
	leaders map[string]*modelLease  // every model's lease loop, by model uuid
}

// modelLease runs one model's provisioner on this controller while it holds
// the model's lease.
type modelLease struct {
	uuid    string
	name    string      // the model's name, for logs
	removed atomic.Bool // the model was removed: clean up its provider
	cancel  context.CancelFunc
}

// modelRunner is one model's provider and provisioner.
type modelRunner struct {
	model    muster.Model
	provider *ModelProvider
	sup      *provisioner.Supervisor
	trimmed  chan struct{} // closed once its trim loop has stopped
	cancel   context.CancelFunc
}

// Open starts a controller: it initialises the data dir and
// store on first start, then serves the API and runs the provisioners
// until Close.
func Open(ctx context.Context, cfg Config) (*Controller, error) {
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
	if cfg.StoreURL == "" {
		cfg.StoreURL = "sqlite://" + filepath.Join(cfg.DataDir, "muster.db")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = soloLeaseTTL
		if isSharedStore(cfg.StoreURL) {
			cfg.LeaseTTL = sharedLeaseTTL
		}
	}
	if cfg.SimAgentBootDelay <= 0 {
		cfg.SimAgentBootDelay = time.Second
	}
	if len(cfg.Providers) == 0 {
		return nil, errors.New("open controller: no provider kinds")
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, models: map[string]*modelRunner{}, leaders: map[string]*modelLease{},
		clientPath: filepath.Join(cfg.DataDir, "client.yaml"), shared: isSharedStore(cfg.StoreURL)}
	ok := false
	defer func() {
		if !ok {
			c.closeResources()
		}
	}()
	// The data dir, private (S4) and locked against a second controller
	// (S1), before anything is written in it.
	if err := datadir.Ensure(cfg.DataDir); err != nil {
		return nil, err
	}
	var err error
	if c.lock, err = datadir.Acquire(cfg.DataDir); err != nil {
		return nil, err
	}
	// The listen address is bound before the store is initialised: a bad
	// or busy address must not leave a store whose admin token no client
	// config holds (S2).
	if c.listener, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, errors.Unwrap(err))
	}
	host, port, _ := net.SplitHostPort(c.listener.Addr().String())
	hosts := certHosts(host)
	c.apiAddress = net.JoinHostPort(displayHost(host), port)
	if cfg.APIAddress != "" {
		ah, _, err := net.SplitHostPort(cfg.APIAddress)
		if err != nil || ah == "" {
			return nil, muster.Errorf(muster.EInvalid, "bad API address %q: want host:port", cfg.APIAddress)
		}
		hosts = append(hosts, ah)
		c.apiAddress = cfg.APIAddress
	}
	c.url = "https://" + c.apiAddress
	store, err := sqlstore.Open(ctx, cfg.StoreURL, sqlstore.WithLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	c.store = store
	var okLeases, okRegistry bool
	c.leases, okLeases = c.store.(muster.LeaseStore)
	c.registry, okRegistry = c.store.(muster.ControllerRegistry)
	if !okLeases || !okRegistry {
		return nil, errors.New("open store: the store keeps no leases or controller registry")
	}
	if c.id, err = loadOrCreateControllerID(cfg.DataDir); err != nil {
		return nil, err
	}
	token, tokenHash := auth.NewToken()
	kv, err := c.initControllerConfig(ctx, tokenHash)
	if err != nil {
		return nil, err
	}
	c.uuid = kv[cfgControllerUUID]
	firstStart := kv[cfgAdminTokenHash] == tokenHash
	if err := c.writeCACert(); err != nil {
		return nil, err
	}
	// The client config right after the store took the token: nothing that
	// can fail comes between them.
	if err := c.setUpClientConfig(firstStart, token, kv[cfgAdminTokenHash]); err != nil {
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
	c.agentBins = NewAgentCatalogue(cfg.DataDir)
	if err := c.agentBins.registerSelf(c.cfg.AgentBinary, cfg.Clock.Now()); err != nil {
		return nil, err
	}
	if c.shared && cfg.APIAddress == "" && displayHost(host) != host {
		c.log.Warn("listening on every address without --api-address: clients on other hosts cannot use the registered address", "listen", cfg.Listen, "registered", c.apiAddress)
	}
	cert, err := c.ca.ServerCertificate(hosts, cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	if err := c.newAPI(kv[cfgAdminTokenHash]); err != nil {
		return nil, err
	}
	if err := c.newHTTPServer(cert); err != nil {
		return nil, err
	}
	if err := c.registry.RegisterController(ctx, c.id, c.apiAddress, registerTTL); err != nil {
		return nil, fmt.Errorf("register controller: %w", err)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.serveHTTP()
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		c.runModels()
	}()
	go func() {
		defer c.wg.Done()
		c.keepRegistered()
	}()
	c.log.Info("controller started", "controller", c.uuid, "id", c.id, "url", c.url, "data-dir", cfg.DataDir, "shared-store", c.shared)
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

// isSharedStore reports whether the store URL names a database other
// controllers may share.
func isSharedStore(storeURL string) bool {
	return strings.HasPrefix(storeURL, "postgres://") || strings.HasPrefix(storeURL, "postgresql://")
}

// loadOrCreateControllerID returns the controller's own id, kept in its
// data dir.
func loadOrCreateControllerID(dataDir string) (string, error) {
	p := filepath.Join(dataDir, IDFile)
	b, err := os.ReadFile(p)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, makePrivate(p)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read controller id: %w", err)
	}
	id := muster.NewUUID()
	if err := writePrivate(p, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("write controller id: %w", err)
	}
	return id, nil
}

// dataDirCA returns the PEMs of the CA kept in the data dir (a controller
// made before the CA moved into the store), else of a new CA: what this
// controller offers the store, where the first controller's CA wins.
func dataDirCA(dataDir string, now time.Time) (certPEM, keyPEM []byte, err error) {
	certPEM, certErr := os.ReadFile(filepath.Join(dataDir, auth.CACertFile))
	keyPEM, keyErr := os.ReadFile(filepath.Join(dataDir, auth.CAKeyFile))
	if certErr == nil && keyErr == nil {
		if _, err := auth.ParseCA(certPEM, keyPEM); err != nil {
			return nil, nil, fmt.Errorf("load ca from %s: %w", dataDir, err)
		}
		return certPEM, keyPEM, nil
	}
	ca, err := auth.NewCA("muster controller CA", now)
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM, ca.KeyPEM, nil
}

// writeCACert keeps the store's CA certificate in the data dir's ca.crt,
// for clients' convenience. A data dir with a CA key of its own is left
// alone (a warning says the store's CA is used).
func (c *Controller) writeCACert() error {
	certPath := filepath.Join(c.cfg.DataDir, auth.CACertFile)
	have, err := os.ReadFile(certPath)
	if err == nil && string(have) == string(c.ca.CertPEM) {
		return makePrivate(certPath)
	}
	if _, err := os.Stat(filepath.Join(c.cfg.DataDir, auth.CAKeyFile)); err == nil {
		c.log.Warn("the data dir's ca differs from the store's: using the store's", "data-dir", c.cfg.DataDir)
		return nil
	}
	if err := writePrivate(certPath, c.ca.CertPEM); err != nil {
		return fmt.Errorf("write ca certificate %s: %w", certPath, err)
	}
	return nil
}

// makePrivate tightens a file muster wrote to 0600 (S4): one an older
// muster, or another umask, left readable by others.
func makePrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("make %s private: %w", path, errors.Unwrap(err))
	}
	return nil
}

// ensureDefaultModel creates the default model on a new store: a sim
// model, embedded in the data dir or at DefaultSimEndpoint. On a shared
// store it is created only with DefaultSimEndpoint: an embedded sim's
// instances live in one controller's data dir and would be lost to the
// controller taking the model over.
func (c *Controller) ensureDefaultModel(ctx context.Context) error {
	_, err := c.store.Model(ctx, muster.DefaultModel)
	if muster.ErrorCode(err) != muster.ENotFound {
		return err
	}
	m := muster.Model{
		Name:     muster.DefaultModel,
		Provider: "sim",
		Config:   map[string]string{"zones": "a,b,c"},
		Settings: muster.DefaultSettings(),
	}
	switch {
	case c.cfg.DefaultSimEndpoint != "":
		m.Config = map[string]string{"endpoint": c.cfg.DefaultSimEndpoint}
	case c.shared:
		c.log.Info("no default model on a shared store without --default-sim-endpoint: add models with a sim endpoint or docker")
		return nil
	}
	_, err = c.store.CreateModel(ctx, m)
	if muster.ErrorCode(err) == muster.EConflict {
		return nil // another controller made it first
	}
	return err
}

// ValidateModel checks a new model: its provider and config keys, and on
// a shared store an embedded sim is refused, its instances would live in
// one controller's data dir.
func (c *Controller) ValidateModel(m muster.Model) error {
	if err := ValidateModel(c.cfg.Providers, m); err != nil {
		return err
	}
	if c.shared && m.Provider == "sim" && m.Config["endpoint"] == "" {
		return muster.Errorf(muster.EInvalid, "sim model %s needs endpoint=URL of a `muster sim serve` on a store shared by several controllers: an embedded sim lives in one controller's data dir", m.Name)
	}
	return nil
}

// setUpClientConfig writes the data dir's client config. The controller
// that made the admin token writes it (and the user's, if missing); a
// restarted controller adds its URL to its own; a controller joining a
// store copies the config named by ClientConfigFrom, else writes none:
// the user keeps using the first controller's client config, from which
// the CLI learns every controller's address.
func (c *Controller) setUpClientConfig(firstStart bool, token, tokenHash string) error {
	if firstStart {
		c.clientWritten = true
		return c.writeClientConfigs(token)
	}
	if _, err := os.Stat(c.clientPath); err == nil {
		c.clientWritten = true
		return c.updateClientConfigURL()
	}
	if c.cfg.ClientConfigFrom == "" && !c.shared {
		c.log.Warn("no client config in the data dir and the store has an admin token: stop the controller and run `muster controller admin-token --data-dir DIR` for a new one", "data-dir", c.cfg.DataDir)
		return nil
	}
	if c.cfg.ClientConfigFrom == "" {
		c.log.Info("joined the controllers of the store: no client config written; use the first controller's, the CLI learns this controller's address from it")
		return nil
	}
	from, err := LoadClientConfig(c.cfg.ClientConfigFrom)
	if err != nil {
		return err
	}
	if !auth.TokenMatches(from.Token, tokenHash) {
		return muster.Errorf(muster.EInvalid, "client config %s: its token is not the admin token of this store", c.cfg.ClientConfigFrom)
	}
	c.clientWritten = true
	return c.writeClientConfigs(from.Token, from.Controllers...)
}

// writeClientConfigs writes the data dir's client config with this
// controller's URL first, then others, and the user's when missing.
func (c *Controller) writeClientConfigs(token string, others ...string) error {
	urls := []string{c.url}
	for _, u := range others {
		if u != c.url {
			urls = append(urls, u)
		}
	}
	cc := &ClientConfig{Controllers: urls, CACert: string(c.ca.CertPEM), Token: token, Model: muster.DefaultModel}
	if err := cc.Save(c.clientPath); err != nil {
		return err
	}
	if !c.cfg.WriteUserConfig {
		return nil
	}
	// The data dir's copy is written: a home whose config dir cannot be
	// written (read-only, not a directory) only costs the default path.
	p, err := DefaultClientConfigPath()
	if err == nil {
		if _, err = os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err = cc.Save(p); err == nil {
				c.log.Info("wrote client config", "path", p)
			}
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("could not write the client config in the user's config dir; point MUSTER_CONFIG at the data dir's",
			"err", err, "MUSTER_CONFIG", c.clientPath)
	}
	return nil
}

// updateClientConfigURL keeps the data dir's client config pointing at
// this controller after a restart on another port.
func (c *Controller) updateClientConfigURL() error {
	cc, err := readClientConfig(c.clientPath)
	if err != nil {
		return err
	}
	for _, u := range cc.Controllers {
		if u == c.url {
			return makePrivate(c.clientPath)
		}
	}
	cc.Controllers = append([]string{c.url}, cc.Controllers...)
	return cc.Save(c.clientPath)
}

// keepRegistered refreshes the controller's registered API address until
// Close.
func (c *Controller) keepRegistered() {
	for muster.Sleep(c.ctx, c.cfg.Clock, registerEvery) == nil {
		ctx, cancel := context.WithTimeout(c.ctx, registerEvery)
		err := c.registry.RegisterController(ctx, c.id, c.apiAddress, registerTTL)
		cancel()
		if err != nil && c.ctx.Err() == nil {
			c.log.Warn("register controller", "err", err)
		}
	}
}

// runModels keeps one lease loop running per model until Close.
func (c *Controller) runModels() {
	for {
		c.syncModels()
		if muster.Sleep(c.ctx, c.cfg.Clock, c.cfg.ModelPoll) != nil {
			return
		}
	}
}

// syncModels starts lease loops for new models and stops those of removed
// ones.
func (c *Controller) syncModels() {
	models, err := c.store.Models(c.ctx)
	if err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("list models", "err", err)
		}
		return
	}
	seen := map[string]bool{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range models {
		seen[m.UUID] = true
		if _, ok := c.leaders[m.UUID]; ok || c.ctx.Err() != nil {
			continue
		}
		ctx, cancel := context.WithCancel(c.ctx)
		l := &modelLease{uuid: m.UUID, name: m.Name, cancel: cancel}
		c.leaders[m.UUID] = l
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.leadModel(ctx, l)
		}()
	}
	for id, l := range c.leaders {
		if !seen[id] {
			l.removed.Store(true)
			l.cancel()
			delete(c.leaders, id)
		}
	}
}

// LeaseName is the lease of a model's provisioner.
func LeaseName(modelUUID string) string { return "model/" + modelUUID }

// leadModel runs the model's provisioner while this controller holds the
// model's lease, until ctx ends (lease.go).
func (c *Controller) leadModel(ctx context.Context, l *modelLease) {
	var r *modelRunner // while this controller runs the provisioner
	lr := &leaseRunner{
		leases: c.leases, name: LeaseName(l.uuid), holder: c.id,
		ttl: c.cfg.LeaseTTL, poll: min(c.cfg.LeaseTTL/10, maxLeasePoll), clock: c.cfg.Clock,
		log: c.log.With("model", l.name),
		start: func(ctx context.Context) (bool, error) {
			var err error
			r, err = c.startModel(ctx, l.uuid)
			return r != nil, err
		},
		stop: func(string) {
			c.stopModel(r, l.removed.Load())
			r = nil
		},
		release: func() bool { return !c.crashed.Load() },
	}
	lr.run(ctx)
}

// startModel opens the model's provider, as the store has it now, and
// starts its provisioner; nil without an error when the model is gone.
func (c *Controller) startModel(ctx context.Context, modelUUID string) (*modelRunner, error) {
	m, err := c.store.Model(ctx, modelUUID)
	if muster.ErrorCode(err) == muster.ENotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	log := c.log.With("model", m.Name)
	kind, ok := c.cfg.Providers[m.Provider]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", m.Provider)
	}
	p, err := kind.Open(ctx, ProviderEnv{ControllerUUID: c.uuid, Model: m, DataDir: c.cfg.DataDir, Logger: log, Clock: c.cfg.Clock,
		Store: c.store, APIURL: c.url, CACert: c.ca.CertPEM, AgentBinary: c.cfg.AgentBinary, ListenAgents: c.listenAgents,
		SimAgentBootDelay: c.cfg.SimAgentBootDelay})
	if err != nil {
		return nil, err
	}
	apiAddresses, agentAddresses := []string{c.url}, c.AgentAddresses
	if p.APIAddresses != nil { // e.g. docker zone gateways (agentlisten.go)
		apiAddresses, agentAddresses = p.APIAddresses, nil
	}
	pctx, cancel := context.WithCancel(ctx)
	r := &modelRunner{model: m, provider: p, cancel: cancel, trimmed: make(chan struct{})}
	go func() {
		defer close(r.trimmed)
		trimLoop(pctx, c.store, c.cfg.Clock, m.UUID, log)
	}()
	r.sup = provisioner.Supervise(pctx, provisioner.Config{
		ControllerUUID: c.uuid,
		Model:          m,
		Store:          c.store,
		// The provider itself, not the wrapper: the provisioner looks for
		// what it offers beyond muster.Provider (batch starts, subnets).
		Provider:       p.Provider,
		Cloud:          cloudKey(m),
		AgentBinaries:  downloadURLs{c.agentBins, apiAddresses[0]},
		Clock:          c.cfg.Clock,
		Logger:         c.log, // the provisioner adds the model itself
		Observer:       c.metrics.observer(m.Name),
		APIAddresses:   apiAddresses,
		AgentAddresses: agentAddresses,
		CACert:         string(c.ca.CertPEM),
		PasswordKey:    c.ca.DerivedKey("agent passwords"),
	}, provisioner.SupervisorOptions{})
	c.mu.Lock()
	c.models[m.UUID] = r
	c.mu.Unlock()
	if c.api != nil {
		// Taken over from another controller: its machines are watched
		// from now, and set down unless their agents heartbeat to a live
		// controller.
		c.api.MonitorModel(m.UUID)
	}
	log.Info("model runs on this controller", "provider", m.Provider, "controller-id", c.id)
	return r, nil
}

// AgentAddresses returns the controller URLs given to the agents of an
// instance started now: this controller's first, then those of the other
// live controllers sharing the store (read again at most every second),
// so that an agent whose controller dies carries on with another: every
// controller answers agents, and the one running a model reads the
// others' heartbeats of its machines from the store. The slice returned
// is not to be modified.
func (c *Controller) AgentAddresses() []string {
	c.peersMu.Lock()
	defer c.peersMu.Unlock()
	now := c.cfg.Clock.Now()
	if c.peers != nil && now.Sub(c.peersAt) < time.Second {
		return c.peers
	}
	c.peersAt = now
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	live, err := c.registry.Controllers(ctx)
	cancel()
	if err != nil {
		if c.ctx.Err() == nil {
			c.log.Warn("agents given the controller addresses known before: list controllers", "err", err)
		}
		if c.peers == nil {
			c.peers = []string{c.url}
		}
		return c.peers
	}
	addrs := []string{c.url}
	for _, l := range live {
		if l.ID != c.id {
			addrs = append(addrs, "https://"+l.Address)
		}
	}
	slices.Sort(addrs[1:])
	c.peers = addrs
	return addrs
}

// stopModel stops a running provisioner and closes its provider; cleanup
// also removes what the provider made for a removed model.
func (c *Controller) stopModel(r *modelRunner, cleanup bool) {
	c.mu.Lock()
	if c.models[r.model.UUID] == r {
		delete(c.models, r.model.UUID)
	}
	c.mu.Unlock()
	r.cancel()
	r.sup.Wait()
	<-r.trimmed
	c.metrics.forget(r.model.Name)
	if cleanup && r.provider.Cleanup != nil { // removed model: remove its networks
		if err := r.provider.Cleanup(c.ctx); err != nil {
			c.log.Warn("clean up removed model", "model", r.model.Name, "err", err)
		}
	}
	if err := r.provider.Close(); err != nil {
		c.log.Warn("close provider", "model", r.model.Name, "err", err)
	}
}

// runner returns the model with the given uuid if its provisioner runs on
// this controller.
func (c *Controller) runner(modelUUID string) *modelRunner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.models[modelUUID]
}

// Crash stops the controller as a kill -9 would leave the store: its
// model leases and registration stay until they expire (for tests of
// failover).
func (c *Controller) Crash() {
	c.crashed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		c.log.Warn("crash", "err", err)
	}
}

// Close stops the API and every provisioner, within ctx's deadline, and
// releases the controller's leases and registration. Calls after the
// first return the first's error.
func (c *Controller) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { c.closeErr = c.close(ctx) })
	return c.closeErr
}

func (c *Controller) close(ctx context.Context) error {
	var err error
	c.stopSimAgents() // first: their connections would hold up Shutdown (simagents.go)
	if c.server != nil {
		if e := c.server.Shutdown(ctx); e != nil {
			c.server.Close()
		}
	}
	if c.metricsServer != nil {
		if e := c.metricsServer.Shutdown(ctx); e != nil {
			c.metricsServer.Close()
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
		c.wg.Wait() // the lease loops stop their provisioners
		c.mu.Lock()
		runners := c.models
		c.models = map[string]*modelRunner{}
		c.mu.Unlock()
		for _, r := range runners {
			c.stopModel(r, false)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("controller did not stop in time: %w", ctx.Err())
	}
	if c.registry != nil && c.apiAddress != "" && !c.crashed.Load() {
		// Registered for a nanosecond: gone from the live controllers.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if e := c.registry.RegisterController(rctx, c.id, c.apiAddress, time.Nanosecond); e != nil {
			c.log.Warn("unregister controller", "err", e)
		}
		cancel()
	}
	c.closeResources()
	return err
}

func (c *Controller) closeResources() {
	if c.listener != nil {
		c.listener.Close()
	}
	if c.metricsListener != nil {
		c.metricsListener.Close()
	}
	if c.store != nil {
		c.store.Close()
	}
	c.lock.Release() // last: the next controller finds everything closed
}

// URL is the controller's API URL, https://host:port.
func (c *Controller) URL() string { return c.url }

// ClientConfigPath is the data dir's client config, <data-dir>/client.yaml.
func (c *Controller) ClientConfigPath() string { return c.clientPath }

// ClientConfigWritten is false when a controller that joined a shared
// store wrote no client config (no ClientConfigFrom).
func (c *Controller) ClientConfigWritten() bool { return c.clientWritten }

// UUID is the controller uuid, the same for every controller sharing a
// store.
func (c *Controller) UUID() string { return c.uuid }

// ID is this controller's own id among those sharing a store: its lease
// holder and registry name.
func (c *Controller) ID() string { return c.id }

// CA is the store's CA.
func (c *Controller) CA() *auth.CA { return c.ca }

// Store is the controller's state store.
func (c *Controller) Store() muster.Store { return c.store }

// Config is the controller's configuration, defaults filled in.
func (c *Controller) Config() Config { return c.cfg }

// Runs reports whether the model's provisioner runs on this controller.
func (c *Controller) Runs(modelUUID string) bool { return c.runner(modelUUID) != nil }
