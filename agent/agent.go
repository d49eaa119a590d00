// Package agent is the machine agent of SPEC §4 as a library: it logs in
// to the controller with a machine's id, password and nonce over TLS
// (trusting only the controller's CA), reports the machine started with
// its hardware and addresses, and heartbeats until it is stopped.
//
// `muster agent --config FILE` runs it in an instance; the simulated cloud
// runs the same code in-process for each simulated instance (SPEC §3.1).
// The package talks to the controller through api.Client only.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// Defaults of Options.
const (
	DefaultNotProvisionedFor = time.Minute
	DefaultMinBackoff        = time.Second
	DefaultMaxBackoff        = 30 * time.Second
	// DefaultHeartbeat is used when the controller names no valid period.
	DefaultHeartbeat = 10 * time.Second
)

// Options tunes Run. The zero value is ready to use.
type Options struct {
	// Logger receives the agent's log; default slog.Default().
	Logger *slog.Logger
	// Clock times retries and heartbeats; default muster.SystemClock.
	Clock muster.Clock
	// NotProvisionedFor is how long logins refused as not-provisioned
	// (a nonce that is not the machine's) are retried before Run gives
	// up for good; default DefaultNotProvisionedFor (one minute).
	NotProvisionedFor time.Duration
	// MinBackoff and MaxBackoff bound the jittered, doubling delay between
	// retries after transient errors (controller unreachable, 5xx);
	// defaults DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Hardware returns what the agent reports as the machine's hardware;
	// zero fields keep what the provider recorded. Default ProbeHardware.
	Hardware func() muster.Hardware
	// Addresses returns the machine's addresses to report; an empty list
	// keeps what the provider recorded. Default InterfaceAddresses.
	Addresses func() []string
	// HTTPClient, when set, is used for every API address instead of a
	// client built from the config's CA (in-process agents share one);
	// its transport must trust the controller's certificate.
	HTTPClient *http.Client
	// OnStarted, when set, is called each time the agent has reported its
	// machine started (after every login).
	OnStarted func()
	// Identity, when set, returns the instance's identity document and
	// signature for enrolment; default: read from the metadata service
	// at the config's metadata-url (FetchIdentity).
	Identity func(ctx context.Context) (doc []byte, sig string, err error)
	// OnEnrolled, when set, is called with the complete config once the
	// agent has enrolled, to keep it: the credentials are handed out once.
	OnEnrolled func(muster.AgentConfig) error
}

// Run runs the agent of cfg until ctx ends (then it returns nil) or it
// fails for good. An enrolment config (a batch token, no password) first
// enrols for the machine's credentials with the instance's identity
// (Options.Identity); a refused enrolment fails for good. When the controller reports the machine dying (it is
// being removed), the agent makes it dead, as Juju's machiner does, and
// then idles until ctx ends: the provisioner stops the instance, and an
// instance whose process exited on its own could look gone to it. Run
// returns an error, with the controller's code, when:
//   - cfg is invalid (invalid);
//   - the controller refuses the password or the machine is gone
//     (unauthorized), at once;
//   - the controller keeps refusing the nonce (not-provisioned) for
//     Options.NotProvisionedFor: an instance the controller has forgotten
//     must not act as the machine.
//
// Transient errors are retried with backoff, trying each API address in
// turn. A session the controller no longer knows (after its restart, or a
// newer login) makes the agent log in again.
func Run(ctx context.Context, cfg muster.AgentConfig, opts Options) error {
	a, err := New(cfg, opts)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// Run runs the agent as the package's Run does.
func (a *Agent) Run(ctx context.Context) error {
	var enrolled *session // the session the enrolment opened, used first
	if a.cfg.Enrolling() {
		var err error
		if enrolled, err = a.enrol(ctx); ctx.Err() != nil {
			return nil
		} else if err != nil {
			a.log.Error("agent giving up", "err", err)
			return err
		}
	}
	for {
		var (
			s   session
			err error
		)
		if enrolled != nil {
			s, enrolled = *enrolled, nil
		} else {
			s, err = a.login(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			a.log.Error("agent giving up", "err", err)
			return err
		}
		err = a.serve(ctx, s)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errMachineDead) {
			a.log.Info("machine dead; agent idle until its instance stops")
			<-ctx.Done()
			return nil
		}
		a.log.Info("agent logging in again", "err", err)
	}
}

type Agent struct {
	cfg     muster.AgentConfig
	opts    Options
	log     *slog.Logger
	clock   muster.Clock
	clients []*api.Client // one per API address
	cur     int           // the address that answered last
}

// session is a successful login.
type session struct {
	client *api.Client // with the agent's token
	token  string
	model  string // model uuid
	period time.Duration
	// reported: the enrolment that opened the session applied the
	// started report; life is the machine's life then.
	reported bool
	life     string
}

// Enrolling reports whether the agent enrols when it runs (its config
// has an enrolment token and no credentials yet).
func (a *Agent) Enrolling() bool { return a.cfg.Enrolling() }

// New returns the agent of cfg, ready to Run; an invalid cfg is an
// invalid error.
func New(cfg muster.AgentConfig, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Clock == nil {
		opts.Clock = muster.SystemClock
	}
	if opts.NotProvisionedFor <= 0 {
		opts.NotProvisionedFor = DefaultNotProvisionedFor
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.Hardware == nil {
		opts.Hardware = ProbeHardware
	}
	if opts.Addresses == nil {
		opts.Addresses = InterfaceAddresses
	}
	a := &Agent{cfg: cfg, opts: opts, clock: opts.Clock, log: opts.Logger.With("machine", cfg.Machine)}
	hc := opts.HTTPClient
	if hc == nil && cfg.CACert != "" {
		// One transport for every address: the connection in use stays
		// open from one heartbeat to the next.
		tr, err := agentTransport([]byte(cfg.CACert))
		if err != nil {
			return nil, muster.Errorf(muster.EInvalid, "agent of machine %s: %v", cfg.Machine, err)
		}
		hc = &http.Client{Transport: tr}
	}
	for _, addr := range cfg.APIAddresses {
		c, err := api.NewClient(api.ClientConfig{URL: addr, CACert: []byte(cfg.CACert), HTTPClient: hc})
		if err != nil {
			return nil, fmt.Errorf("agent of machine %s: %w", cfg.Machine, err)
		}
		a.clients = append(a.clients, c)
	}
	return a, nil
}

// login logs in, trying each address in turn, until it succeeds, fails for
// good, or ctx ends.
func (a *Agent) login(ctx context.Context) (session, error) {
	req := api.LoginRequest{Model: a.cfg.Model, Machine: a.cfg.Machine, Password: a.cfg.Password, Nonce: a.cfg.Nonce}
	var refusedSince time.Time
	b := a.newBackoff()
	for {
		var lastErr error
		n := len(a.clients)
	addresses:
		for i := range n {
			idx := (a.cur + i) % n
			c := a.clients[idx]
			res, err := c.Login(ctx, req)
			if ctx.Err() != nil {
				return session{}, ctx.Err()
			}
			if err == nil {
				a.cur = idx
				return a.newSession(c, res), nil
			}
			switch muster.ErrorCode(err) {
			case muster.EUnauthorized, muster.EInvalid, muster.EForbidden:
				return session{}, fmt.Errorf("log in as machine %s: %s: %w", a.cfg.Machine, muster.ErrorCode(err), err)
			case muster.ENotProvisioned:
				now := a.clock.Now()
				if refusedSince.IsZero() {
					refusedSince = now
				}
				if now.Sub(refusedSince) >= a.opts.NotProvisionedFor {
					return session{}, fmt.Errorf("log in as machine %s: refused for %s: %s: %w", a.cfg.Machine, a.opts.NotProvisionedFor, muster.ErrorCode(err), err)
				}
				lastErr = err
				// The controller answered: other addresses lead to it too.
				break addresses
			default:
				lastErr = err
			}
		}
		d := b.next()
		if !refusedSince.IsZero() {
			// Try once more exactly when the minute is over.
			left := a.opts.NotProvisionedFor - a.clock.Now().Sub(refusedSince)
			d = max(min(d, left), 0)
		}
		a.log.Warn("agent login failed", "err", lastErr, "retry-in", d)
		if err := a.sleep(ctx, d); err != nil {
			return session{}, err
		}
	}
}

// newSession is the session a login (or an enrolment) at c returned.
func (a *Agent) newSession(c *api.Client, res api.LoginResult) session {
	period, err := time.ParseDuration(res.Heartbeat)
	if err != nil || period <= 0 {
		period = DefaultHeartbeat
	}
	model := res.ModelUUID
	if model == "" {
		model = a.cfg.Model
	}
	a.log.Info("agent logged in", "controller", c.URL(), "heartbeat", period)
	return session{client: c.WithToken(res.Token), token: res.Token, model: model, period: period}
}

// errMachineDead ends serve: the agent's work is done.
var errMachineDead = errors.New("machine is dead")

// needsLogin reports whether err means the session is no longer valid.
func needsLogin(err error) bool {
	switch muster.ErrorCode(err) {
	case muster.EUnauthorized, muster.ENotProvisioned, muster.EForbidden, muster.ENotFound:
		return true
	}
	return false
}

// serve reports the machine started and heartbeats until ctx ends or the
// session becomes invalid (the error says why).
func (a *Agent) serve(ctx context.Context, s session) error {
	s, err := a.start(ctx, s)
	if err != nil {
		return err
	}
	return a.heartbeat(ctx, s)
}

// start reports the machine started, retrying transient errors, and
// makes it dead when the controller says it is dying. It returns the
// session it reached the controller with.
func (a *Agent) start(ctx context.Context, s session) (session, error) {
	if s.reported {
		return s, a.started(ctx, s, s.life)
	}
	b := a.newBackoff()
	for {
		life, err := a.reportStarted(ctx, s)
		if err == nil {
			return s, a.started(ctx, s, life)
		}
		if ctx.Err() != nil || needsLogin(err) {
			return s, err
		}
		d := b.next()
		a.log.Warn("agent status report failed", "err", err, "retry-in", d)
		s = a.rotate(s)
		if err := a.sleep(ctx, d); err != nil {
			return s, err
		}
	}
}

// started follows the controller's acceptance of the started report:
// the machine's life was life then.
func (a *Agent) started(ctx context.Context, s session, life string) error {
	a.log.Info("machine started")
	if a.opts.OnStarted != nil {
		a.opts.OnStarted()
	}
	return a.checkLife(ctx, s, life)
}

// heartbeat beats until ctx ends or the session becomes invalid. The
// first heartbeat comes anywhere in the second half of the first period
// (firstHeartbeat), so agents that logged in together (a controller
// restart) do not beat in step.
func (a *Agent) heartbeat(ctx context.Context, s session) error {
	b := a.newBackoff()
	wait := firstHeartbeat(s.period)
	for {
		if err := a.sleep(ctx, wait); err != nil {
			return err
		}
		res, err := s.client.Heartbeat(ctx, s.model, a.cfg.Machine)
		if err == nil {
			if p, perr := time.ParseDuration(res.Heartbeat); perr == nil && p > 0 && p != s.period {
				a.log.Info("agent heartbeat period changed", "heartbeat", p)
				s.period = p
			}
			if err := a.checkLife(ctx, s, res.Life); err != nil {
				return err
			}
			b.reset()
			wait = nextHeartbeat(s.period)
			continue
		}
		if ctx.Err() != nil || needsLogin(err) {
			return err
		}
		wait = min(b.next(), s.period)
		a.log.Warn("agent heartbeat failed", "err", err, "retry-in", wait)
		s = a.rotate(s)
	}
}

// rotate moves the session to the next API address, for the next try
// after a transient error.
func (a *Agent) rotate(s session) session {
	if len(a.clients) < 2 {
		return s
	}
	a.cur = (a.cur + 1) % len(a.clients)
	s.client = a.clients[a.cur].WithToken(s.token)
	return s
}

// checkLife makes a dying machine dead; it returns errMachineDead once the
// machine is dead (or already removed), nil while it is alive.
func (a *Agent) checkLife(ctx context.Context, s session, life string) error {
	switch muster.Life(life) {
	case muster.LifeDying:
	case muster.LifeDead:
		return errMachineDead
	default:
		return nil
	}
	a.log.Info("machine dying; making it dead")
	b := a.newBackoff()
	for {
		_, err := s.client.SetAgentMachine(ctx, s.model, a.cfg.Machine, api.AgentUpdate{Life: muster.Ptr(string(muster.LifeDead))})
		if err == nil || muster.IsCode(err, muster.ENotFound) {
			return errMachineDead
		}
		if ctx.Err() != nil || needsLogin(err) {
			return err
		}
		d := b.next()
		a.log.Warn("agent could not make its machine dead", "err", err, "retry-in", d)
		s = a.rotate(s)
		if err := a.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// reportStarted sets the machine started with its hardware and addresses
// in one request; what the agent cannot tell (zero hardware fields, no
// addresses) keeps the provider's recorded values, which the controller
// merges in. It returns the machine's life.
func (a *Agent) reportStarted(ctx context.Context, s session) (string, error) {
	am, err := s.client.SetAgentMachine(ctx, s.model, a.cfg.Machine, a.startedReport())
	return am.Life, err
}

// startedReport is the update that reports the machine started.
func (a *Agent) startedReport() api.AgentUpdate {
	hw := a.opts.Hardware()
	u := api.AgentUpdate{
		Status:        muster.Ptr(string(muster.StatusStarted)),
		StatusMessage: muster.Ptr(""),
		Hardware:      &hw,
	}
	if addrs := a.opts.Addresses(); len(addrs) > 0 {
		u.Addresses = &addrs
	}
	return u
}

// firstHeartbeat draws the wait before a session's first heartbeat from
// (period/2, period]: the login (or enrolment) that opened the session
// counts as a beat, so agents that logged in together (a controller
// restart, 10,000 booting at once) neither beat at once nor spend the
// controller's busiest seconds beating.
func firstHeartbeat(period time.Duration) time.Duration {
	half := period / 2
	return half + 1 + rand.N(period-half)
}

// nextHeartbeat draws the wait between heartbeats from [0.9, 1] periods:
// never later than the period the controller counts missed beats by, and
// agents that happen to beat together drift apart.
func nextHeartbeat(period time.Duration) time.Duration {
	return period - rand.N(period/10+1)
}

func (a *Agent) sleep(ctx context.Context, d time.Duration) error {
	return muster.Sleep(ctx, a.clock, d)
}

// backoff is a doubling delay with jitter (each delay is drawn from
// [d/2, d]), so that many agents do not retry in step.
type backoff struct {
	min, max, cur time.Duration
}

func (a *Agent) newBackoff() *backoff {
	return &backoff{min: a.opts.MinBackoff, max: a.opts.MaxBackoff, cur: a.opts.MinBackoff}
}

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d/2 + rand.N(d/2+1)
}

func (b *backoff) reset() { b.cur = b.min }
