package controller

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/connlimit"
)

// Limits of the HTTPS server (S5): idle or slow clients cannot hold it
// down.
const (
	defaultIdleTimeout = 30 * time.Second // well within the 60 s of S5
	defaultBodyTimeout = 30 * time.Second
	readHeaderTimeout  = 10 * time.Second
	// fdReserve is the file descriptors kept out of the connection cap:
	// the store, logs, provider and agent clients, the metrics listener.
	fdReserve = 256
)

// serverDefaults fills in the server limits of cfg.
func (cfg *Config) serverDefaults() {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = defaultIdleTimeout
	}
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = defaultBodyTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = connlimit.FromRlimit(fdReserve)
	}
}

// newHTTPServer builds the API's HTTPS server, its connection limiter
// and, with MetricsListen, the metrics server and its listener.
func (c *Controller) newHTTPServer(cert tls.Certificate) error {
	c.limiter = connlimit.New(c.cfg.MaxConns)
	c.server = &http.Server{
		Handler:           c.api,
		TLSConfig:         auth.ServerTLSConfig(cert),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       c.cfg.IdleTimeout,
		ConnState:         c.limiter.ConnState,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
	}
	registerConnMetrics(c.metricsReg, c.limiter)
	if c.cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", c.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", c.cfg.MetricsListen, err)
	}
	c.metricsListener = ln
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.metricsReg, promhttp.HandlerOpts{}))
	c.metricsServer = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       c.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelDebug),
	}
	return nil
}

// serveHTTP runs the servers until Close; it is called once, from Open,
// with c.wg counting one goroutine per server.
func (c *Controller) serveHTTP() {
	serve := func(name string, srv *http.Server, ln net.Listener) {
		defer c.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error(name+" server stopped", "err", err)
		}
	}
	c.wg.Add(1)
	go serve("api", c.server, tls.NewListener(c.limiter.Listener(c.listener), c.server.TLSConfig))
	if c.metricsServer != nil {
		c.wg.Add(1)
		go serve("metrics", c.metricsServer, c.metricsListener)
	}
}

// MetricsAddr is the address of the unauthenticated metrics endpoint
// (MetricsListen, its port resolved), or "" without one.
func (c *Controller) MetricsAddr() string {
	if c.metricsListener == nil {
		return ""
	}
	return c.metricsListener.Addr().String()
}

// registerConnMetrics exposes the connection limiter's counters.
func registerConnMetrics(reg prometheus.Registerer, l *connlimit.Limiter) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muster_api_connections", Help: "Open connections to the API.",
		}, func() float64 { return float64(l.Stats().Open) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muster_api_connections_max", Help: "The cap on open connections to the API.",
		}, func() float64 { return float64(l.Stats().Max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "muster_api_connections_evicted_total", Help: "Idle connections closed to make room for new ones at the cap.",
		}, func() float64 { return float64(l.Stats().Evicted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "muster_api_connections_refused_total", Help: "Connections closed at once because every held one was busy.",
		}, func() float64 { return float64(l.Stats().Refused) }),
	)
}
