// Package opshttp is the operator listener every Sluice server runs beside
// its tenant-facing port (`--metrics-addr`): Prometheus metrics at /metrics,
// /healthz and /readyz for probes, and the Go runtime's profiles
// (net/http/pprof) under /debug/pprof/.
//
// Metric labels name tenants, topics and consumer groups, with their byte
// counts and lag, and profiles show the process's allocations, goroutine
// stacks and symbols, so all of it is served here only, never on a port tenants reach (the control
// plane's API port, a broker's client port). The listener binds loopback by
// default; an operator who scrapes from another host binds it to an
// interface only operators reach, and so exposes the profiles there too.
//
// The profiles are mounted on this package's own mux. Importing
// net/http/pprof also registers them on http.DefaultServeMux, which no
// Sluice server serves.
package opshttp

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves reg at GET /metrics, Healthz at GET /healthz, ready at
// GET /readyz, and the Go profiles under /debug/pprof/: the index, profile
// (CPU), trace, symbol, and every runtime profile by name (heap, allocs,
// goroutine, block, mutex, threadcreate). Not /debug/pprof/cmdline: server
// flags may carry tokens (--broker-token). Any other path is 404.
func Handler(reg *prometheus.Registry, ready http.HandlerFunc) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", Healthz)
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	return mux
}

// Healthz answers 200 "ok" while the process serves HTTP at all (liveness).
func Healthz(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }

// NewServer returns the operator listener's server for h: HTTP/1.1 (what
// Prometheus and probes speak) and h2c, with bounded headers. It sets no
// write timeout, so that a CPU profile or trace may run for as long as its
// ?seconds= asks.
func NewServer(h http.Handler, logger *slog.Logger) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
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
