package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/musterhq/muster"
	"github.com/prometheus/client_golang/prometheus"
)

// requestMetrics count the API's requests by route (the pattern that
// matched, so that machine ids and model names do not make new series),
// method and status code, and time them by route.
type requestMetrics struct {
	total   *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

// newRequestMetrics registers muster_build_info and the request metrics
// on reg.
func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	b := muster.BuildInfo()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "muster_build_info", Help: "Always 1; the labels say which muster build this controller runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "build_date": b.Date, "goversion": b.GoVersion},
	})
	info.Set(1)
	m := &requestMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muster_api_requests_total", Help: "API requests by route, method and HTTP status code.",
		}, []string{"route", "method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "muster_api_request_seconds", Help: "API request latency by route (an event stream counts until it ends).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"route"}),
	}
	reg.MustRegister(info, m.total, m.seconds)
	return m
}

// statusRecorder remembers the status code a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes and
// deadlines of event streams).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// serve runs h and records the request.
func (m *requestMetrics) serve(h http.Handler, w http.ResponseWriter, r *http.Request) {
	if m == nil {
		h.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		route := r.Pattern // set by the ServeMux on r
		if route == "" {
			route = "unmatched"
		}
		code := rec.code
		if code == 0 {
			code = http.StatusOK
		}
		m.total.WithLabelValues(route, r.Method, strconv.Itoa(code)).Inc()
		m.seconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
	}()
	h.ServeHTTP(rec, r)
}

// handleVersion answers GET /v1/version: the controller's build.
func (s *Server) handleVersion(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, muster.BuildInfo())
	return nil
}
