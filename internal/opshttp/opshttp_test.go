package opshttp

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// serve runs the operator listener as servers do, on a loopback port.
func serve(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_test_total", Help: "a test counter"}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := NewServer(Handler(reg, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) }), slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, b
}

// requireProfile checks b is a pprof profile: gzip-compressed protobuf.
func requireProfile(t *testing.T, b []byte, what string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	require.NoError(t, err, "%s is gzip", what)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err, what)
	require.NotEmpty(t, raw, what)
}

// TestOpsHTTPServes: metrics, probes and the Go profiles are on the
// operator listener; other paths are 404.
func TestOpsHTTPServes(t *testing.T) {
	base := serve(t)

	code, _, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "sluice_test_total 0")
	code, _, body = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", string(body))
	code, _, body = get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", string(body))
	code, _, _ = get(t, base+"/nope")
	require.Equal(t, http.StatusNotFound, code)

	// The index lists the profiles.
	code, _, body = get(t, base+"/debug/pprof/")
	require.Equal(t, http.StatusOK, code)
	for _, p := range []string{"allocs", "goroutine", "heap", "profile", "trace"} {
		require.Contains(t, string(body), p)
	}
	code, _, body = get(t, base+"/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), "goroutine profile:")
	code, _, body = get(t, base+"/debug/pprof/heap")
	require.Equal(t, http.StatusOK, code)
	requireProfile(t, body, "the heap profile")
	// Not the command line: server flags may carry tokens.
	code, _, body = get(t, base+"/debug/pprof/cmdline")
	require.Equal(t, http.StatusNotFound, code)
	require.NotContains(t, string(body), "opshttp.test")
	code, _, _ = get(t, base+"/debug/pprof/no-such-profile")
	require.Equal(t, http.StatusNotFound, code)

	// A short CPU profile and trace, as `go tool pprof URL` takes them.
	code, hdr, body := get(t, base+"/debug/pprof/profile?seconds=1")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Equal(t, "application/octet-stream", hdr.Get("Content-Type"))
	requireProfile(t, body, "the CPU profile")
	code, _, body = get(t, base+"/debug/pprof/trace?seconds=1")
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.NotEmpty(t, body)

	// symbol answers lookups by POST too, as pprof sends them.
	res, err := http.Post(base+"/debug/pprof/symbol", "text/plain", bytes.NewReader([]byte("0x0")))
	require.NoError(t, err)
	_ = res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}
