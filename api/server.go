// Package api is muster's HTTPS API: the Server (JSON handlers under /v1/,
// authentication, the agent endpoints and their heartbeat monitor, the
// server-sent-event stream, /metrics, and the one table from error code to
// HTTP status) and the Client the CLI and the agent use to talk to it.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/logthrottle"
)

// Config configures a Server.
type Config struct {
	// Store holds the state; required.
	Store muster.Store
	// ControllerUUID names the controller; required.
	ControllerUUID string
	// AdminTokenHash is muster.HashSecret of the admin bearer token; required.
	AdminTokenHash string
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Clock drives heartbeats and stream keepalives; muster.SystemClock when nil.
	Clock muster.Clock

	// Runtime is the controller running the models' provisioners. Nil
	// means none: no zones, no provisioner errors, every model's agents
	// monitored, no model validation, no agent binaries.
	Runtime Runtime
	// Metrics is served at /metrics, to the admin token only, when not
	// nil (an unauthenticated scrape endpoint is the controller's
	// --metrics-listen, on an address of the operator's choosing).
	Metrics prometheus.Gatherer
	// Registerer, when set, gets muster_build_info and the API's request
	// metrics (muster_api_requests_total, muster_api_request_seconds).
	Registerer prometheus.Registerer
	// SessionKey is the key of the MAC agent session tokens carry, so that
	// the token of an ended session (a newer login, a restart) is refused
	// without counting as a failed authentication (S9). Controllers give
	// one that outlives a restart; nil means a random key per Server.
	SessionKey []byte
	// BodyTimeout bounds the time a request's body may take to arrive
	// (S5: a client sending a byte every few seconds cannot hold a
	// connection and a handler); 0 means no bound. It is a read deadline
	// on the connection, so it is wall time, not Clock time.
	BodyTimeout time.Duration
}

// Runtime is what the Server needs from the controller that runs the
// models' provisioners and providers. Its methods are safe for concurrent
// use and answer without calling a provider.
type Runtime interface {
	// Zones returns the zone table of a model (SPEC Z1, Z2): its zones,
	// whether each is available, and how many of the model's machines
	// have an instance there, sorted by name. Errors are reported as
	// unavailable unless they carry a code.
	Zones(ctx context.Context, modelUUID string) ([]ZoneInfo, error)
	// ProvisionerError returns "" when the model's provisioner is fine,
	// else its last error (P20); "" too when another controller runs it.
	ProvisionerError(modelUUID string) string
	// Monitors reports whether this server sets the machines of a model
	// down when their agents miss heartbeats: on a store shared by several
	// controllers, only the one running the model's provisioner does,
	// counting the heartbeats the others write to the store too. The
	// runtime announces each model it starts running (Server.MonitorModel).
	Monitors(modelUUID string) bool
	// ValidateModel checks a new model's provider and configuration before
	// it is created. Errors without a code are reported as invalid.
	ValidateModel(m muster.Model) error
	// AgentBinary returns the local file of the agent binary with a
	// SHA-256 (hex), served at AgentBinaryPath; ENotFound when there is
	// none.
	AgentBinary(sha256 string) (path string, err error)
	// ProviderHandler returns the admin API of a model's provider (an
	// embedded sim's), or nil when it has none. It is served to admins at
	// /v1/models/{model}/sim/ with that prefix stripped.
	ProviderHandler(modelUUID string) http.Handler
	// IdentityCert returns the PEM certificate that verifies the instance
	// identity documents of a model's cloud (batch enrolment, SPEC §4);
	// unavailable when the model's provider has none.
	IdentityCert(modelUUID string) ([]byte, error)
	// Offerings returns what the model's provider can start (instance
	// types, bases, zones), checked before machines are added; lists it
	// does not know are nil and not checked.
	Offerings(modelUUID string) muster.Offerings
}

// Server is the API's http.Handler. Create it with NewServer, call Start to
// run its heartbeat monitor and Close to stop it. It is safe for concurrent
// use.
type Server struct {
	cfg    Config
	store  muster.Store
	logger *slog.Logger
	clock  muster.Clock
	mux    *http.ServeMux
	admin  struct {
		sync.Mutex
		hash   string    // of the admin token
		readAt time.Time // when hash was read from the store
	}

	sessions    sync.Map // token hash → *agentSession
	hb          *heartbeats
	agentWrites *agentWrites
	agentReqs   atomic.Int64 // requests to the agent endpoints
	hbFlushes   atomic.Int64 // heartbeat batches written
	dash        *dashboard
	streams     streamCounts
	authFail    *authFailures
	sessionKey  []byte
	requests    *requestMetrics
	models      modelCache // for the agent endpoints

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	closing chan struct{} // closed by Close: ends event streams
}

// NewServer checks cfg and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("api server: no store")
	}
	if cfg.ControllerUUID == "" {
		return nil, errors.New("api server: no controller uuid")
	}
	if cfg.AdminTokenHash == "" {
		return nil, errors.New("api server: no admin token hash")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = muster.SystemClock
	}
	s := &Server{
		cfg:     cfg,
		store:   cfg.Store,
		logger:  cfg.Logger,
		clock:   cfg.Clock,
		closing: make(chan struct{}),
	}
	s.admin.hash, s.admin.readAt = cfg.AdminTokenHash, cfg.Clock.Now()
	s.hb = newHeartbeats(s)
	s.agentWrites = newAgentWrites(cfg.Store)
	s.sessionKey = cfg.SessionKey
	if s.sessionKey == nil {
		s.sessionKey = []byte(muster.NewSecret())
	}
	s.authFail = newAuthFailures(cfg.Clock, slog.New(logthrottle.New(cfg.Logger.Handler(), logthrottle.Options{Clock: cfg.Clock})))
	dash, err := newDashboard()
	if err != nil {
		return nil, fmt.Errorf("api server: dashboard pages: %w", err)
	}
	s.dash = dash
	if cfg.Registerer != nil {
		s.requests = newRequestMetrics(cfg.Registerer)
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	a := s.adminOnly
	// rd: read-only routes the dashboard uses, where its session cookie
	// stands in for the admin token. Never a mutating route (CSRF).
	rd := s.adminOrDashboard
	m.Handle("GET /v1/controllers", a(s.handleControllers))
	m.Handle("GET /v1/version", a(s.handleVersion))
	m.Handle("GET /v1/models", rd(s.handleModels))
	m.Handle("POST /v1/models", a(s.handleAddModel))
	m.Handle("GET /v1/models/{model}", a(s.handleModel))
	m.Handle("DELETE /v1/models/{model}", a(s.handleRemoveModel))
	m.Handle("GET /v1/models/{model}/config", a(s.handleModelConfig))
	m.Handle("PATCH /v1/models/{model}/config", a(s.handleSetModelConfig))
	m.Handle("POST /v1/models/{model}/machines", a(s.handleAddMachines))
	m.Handle("GET /v1/models/{model}/machines", rd(s.handleMachines))
	m.Handle("GET /v1/models/{model}/machines/{id}", rd(s.handleShowMachine))
	m.Handle("POST /v1/models/{model}/remove-machines", a(s.handleRemoveMachines))
	m.Handle("POST /v1/models/{model}/retry-provisioning", a(s.handleRetryProvisioning))
	m.Handle("GET /v1/models/{model}/status", rd(s.handleStatus))
	m.Handle("GET /v1/models/{model}/zones", rd(s.handleZones))
	m.Handle("GET /v1/models/{model}/events", rd(s.handleEvents))
	m.Handle("GET /v1/models/{model}/events/stream", rd(s.handleEventStream))
	m.Handle("POST /v1/models/{model}/apply", a(s.handleApply))
	m.Handle("POST /v1/models/{model}/rebalance", a(s.handleRebalance))
	m.Handle("/v1/models/{model}/sim/", a(s.handleSim))
	m.Handle("POST /v1/dashboard/codes", a(s.handleDashboardCode))
	s.harvestRoutes(m)

	m.HandleFunc("GET /{$}", s.handleDashboard)
	m.HandleFunc("GET "+DashboardSigninPath, s.handleDashboardSignin)
	m.HandleFunc("POST /dashboard/signout", s.handleDashboardSignout)
	m.Handle("GET /static/", staticHandler())

	m.Handle("POST /v1/agent/login", http.HandlerFunc(s.handleLogin))
	m.HandleFunc("POST "+EnrolPath, s.handleEnrol)
	ag := s.agentOnly
	m.Handle("GET /v1/agent/models/{model}/machines/{id}", ag(s.handleAgentMachine))
	m.Handle("PUT /v1/agent/models/{model}/machines/{id}", ag(s.handleAgentSetMachine))
	m.Handle("POST /v1/agent/models/{model}/machines/{id}/heartbeat", ag(s.handleHeartbeat))

	m.HandleFunc("GET "+AgentBinaryPath+"{sha256}", s.handleAgentBinary)

	if s.cfg.Metrics != nil {
		h := promhttp.HandlerFor(s.cfg.Metrics, promhttp.HandlerOpts{ErrorLog: slogPromLogger{s.logger}})
		m.Handle("GET /metrics", a(func(w http.ResponseWriter, r *http.Request) error {
			h.ServeHTTP(w, r)
			return nil
		}))
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, muster.Errorf(muster.ENotFound, "no API endpoint %s %s", r.Method, r.URL.Path))
	})
	s.mux = m
}

type slogPromLogger struct{ l *slog.Logger }

func (p slogPromLogger) Println(v ...any) { p.l.Error("metrics", "err", v) }

// ServeHTTP serves the API. A handler that panics answers an internal
// error (when it has not answered yet) and the panic is logged with its
// stack, instead of the connection being dropped.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.logger.Error("request panicked", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeJSON(w, StatusOf(muster.EInternal), errorBody{Error: errorDetail{Code: muster.EInternal, Message: "internal error"}})
		}
	}()
	if d := s.cfg.BodyTimeout; d > 0 && r.Body != nil && r.Body != http.NoBody {
		// Only a request with a body: the server reads a bodiless
		// request's connection in the background from the start (to see
		// the client go), and a deadline there would end a long answer
		// such as an event stream. Once a body is read to its end, the
		// server clears the deadline itself before that background read.
		http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
	}
	s.requests.serve(s.mux, w, r)
}

// Start starts the heartbeat monitor (SPEC §4: a machine whose agent
// misses three heartbeats goes down). It runs until Close.
func (s *Server) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.hb.run(ctx)
	}()
}

// AdminTokenHashKey is the controller-config key holding the admin
// token's hash, shared by every controller of a store.
const AdminTokenHashKey = "admin-token-hash"

// adminTokenRefresh is how often the server re-reads the admin token's
// hash, so a token replaced by `muster controller admin-token` is refused
// by every controller of the store, not only after a restart.
const adminTokenRefresh = 10 * time.Second

// adminTokenHash returns the admin token's hash, re-read from the store
// when the last read is adminTokenRefresh old (on the first request after
// that: no goroutine, no timer). A failed read keeps the hash it had.
func (s *Server) adminTokenHash(ctx context.Context) string {
	s.admin.Lock()
	defer s.admin.Unlock()
	now := s.clock.Now()
	if now.Sub(s.admin.readAt) < adminTokenRefresh {
		return s.admin.hash
	}
	s.admin.readAt = now
	kv, err := s.store.ControllerConfig(ctx)
	switch {
	case err != nil:
		s.logger.Warn("read the admin token", "err", err)
	case kv[AdminTokenHashKey] != "" && kv[AdminTokenHashKey] != s.admin.hash:
		s.admin.hash = kv[AdminTokenHashKey]
		s.logger.Info("admin token replaced")
	}
	return s.admin.hash
}

// Close stops the heartbeat monitor and ends open event streams. It waits
// for the monitor to stop.
func (s *Server) Close() error {
	s.mu.Lock()
	select {
	case <-s.closing:
	default:
		close(s.closing)
	}
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, s.logger, r, err)
}

// principal is who made a request.
type principal struct {
	key       string // who, for per-session limits: "admin", "dashboard:<session>", "agent:<model>/<machine>"
	admin     bool
	dashboard bool   // a browser signed in to the dashboard (read-only)
	session   string // the dashboard's session cookie, to check it again later
	agent     *agentSession
}

func (p principal) actor() string {
	if p.agent != nil {
		return "agent/" + p.agent.machineID
	}
	if p.dashboard {
		return "dashboard"
	}
	return "admin"
}

type principalKey struct{}

func principalOf(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

// authenticate finds who presents the request's bearer token, or with
// cookie and no bearer token, the dashboard session cookie.
func (s *Server) authenticate(r *http.Request, cookie bool) (principal, error) {
	tok, ok := auth.BearerToken(r)
	if !ok {
		if sess, ok := s.dashboardSession(r); cookie && ok {
			return principal{key: "dashboard:" + sess, dashboard: true, session: sess}, nil
		}
		return principal{}, muster.Errorf(muster.EUnauthorized, "no bearer token given")
	}
	if err := s.authFail.admit(r); err != nil {
		return principal{}, err
	}
	if auth.TokenMatches(tok, s.adminTokenHash(r.Context())) {
		return principal{key: "admin", admin: true}, nil
	}
	hash := muster.HashSecret(tok)
	if v, ok := s.sessions.Load(hash); ok {
		a := v.(*agentSession)
		return principal{key: "agent:" + a.modelUUID + "/" + a.machineID, agent: a}, nil
	}
	if s.endedSession(tok) {
		return principal{}, muster.Errorf(muster.EUnauthorized, "agent session ended: log in again")
	}
	s.authFail.fail(r, "invalid token")
	return principal{}, muster.Errorf(muster.EUnauthorized, "invalid token")
}

type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) adminOnly(h handlerFunc) http.Handler {
	return s.guard(h, false, func(p principal) bool { return p.admin })
}

// adminOrDashboard admits the admin token or a dashboard session cookie;
// only for GET routes.
func (s *Server) adminOrDashboard(h handlerFunc) http.Handler {
	return s.guard(h, true, func(p principal) bool { return p.admin || p.dashboard })
}

func (s *Server) agentOnly(h handlerFunc) http.Handler {
	g := s.guard(h, false, func(p principal) bool { return p.agent != nil })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.agentReqs.Add(1)
		g.ServeHTTP(w, r)
	})
}

// AgentStats counts what agents have cost the server since it was made.
type AgentStats struct {
	Requests        int64 // to the agent endpoints, enrolments and logins included
	HeartbeatWrites int64 // batches of heartbeats written (one transaction per model each)
}

// AgentStats returns the server's agent counters; safe for concurrent use.
func (s *Server) AgentStats() AgentStats {
	return AgentStats{Requests: s.agentReqs.Load(), HeartbeatWrites: s.hbFlushes.Load()}
}

func (s *Server) guard(h handlerFunc, cookie bool, allowed func(principal) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.authenticate(r, cookie)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if !allowed(p) {
			s.fail(w, r, muster.Errorf(muster.EForbidden, "this token may not use %s %s", r.Method, r.URL.Path))
			return
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if err := h(w, r.WithContext(ctx)); err != nil {
			s.fail(w, r, err)
		}
	})
}

// model resolves the {model} path value (a name or UUID).
func (s *Server) model(r *http.Request) (muster.Model, error) {
	name := r.PathValue("model")
	if name == "" {
		return muster.Model{}, muster.Errorf(muster.EInvalid, "no model given")
	}
	return s.store.Model(r.Context(), name)
}

// appendEvents records events; a failure is logged, not returned, because
// the change they describe is already made.
func (s *Server) appendEvents(ctx context.Context, es []muster.Event) {
	if len(es) == 0 {
		return
	}
	if err := s.store.AppendEvents(ctx, es); err != nil {
		s.logger.Error("append events", "model", es[0].ModelUUID, "kind", es[0].Kind, "err", err)
	}
}

func (s *Server) handleSim(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	var h http.Handler
	if s.cfg.Runtime != nil {
		h = s.cfg.Runtime.ProviderHandler(m.UUID)
	}
	if h == nil {
		return muster.Errorf(muster.ENotFound, "model %q has no embedded sim", m.Name)
	}
	prefix := "/v1/models/" + r.PathValue("model") + "/sim"
	if !strings.HasPrefix(r.URL.Path, prefix) {
		return muster.Errorf(muster.ENotFound, "no API endpoint %s %s", r.Method, r.URL.Path)
	}
	r.Header.Del("Authorization")
	http.StripPrefix(prefix, h).ServeHTTP(w, r)
	return nil
}
