// Package opshttp is the operator listener every Sluice server runs beside
// its tenant-facing port (`--metrics-addr`): Prometheus metrics at /metrics,
// and /healthz and /readyz for probes.
//
// Metric labels name tenants, topics and consumer groups, with their byte
// counts and lag, so metrics are served here only, never on a port tenants
// reach (the control plane's API port, a broker's client port). The
// listener binds loopback by default; an operator who scrapes from another
// host binds it to an interface only operators reach.
package opshttp

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves reg at GET /metrics, Healthz at GET /healthz and ready
// at GET /readyz; any other path is 404.
func Handler(reg *prometheus.Registry, ready http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", Healthz)
	mux.HandleFunc("GET /readyz", ready)
	return mux
}

// Healthz answers 200 "ok" while the process serves HTTP at all (liveness).
func Healthz(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }

// NewServer returns the operator listener's server for h: HTTP/1.1 (what
// Prometheus and probes speak) and h2c, with bounded headers.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
