package testcluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// RPCProxy is a gRPC-aware (HTTP/2 cleartext) proxy in front of one
// address: it forwards every call, streams included, and can lose the
// answers of one method only, so that a test takes away one RPC's
// acknowledgements while every other call (a broker's heartbeats, its
// assignment watch) goes on. A lost answer is the call forwarded and
// served whole, its answer read and thrown away, and UNAVAILABLE returned
// to the caller instead: what a caller sees when the connection breaks
// after the server applied its request.
type RPCProxy struct {
	ln      net.Listener
	srv     *http.Server
	proxy   *httputil.ReverseProxy
	target  *url.URL
	hc      *http.Client
	mu      sync.Mutex
	drop    map[string]bool // full method names ("/pkg.Service/Method") whose answers are lost
	dropped atomic.Int64
}

// NewRPCProxy listens on a free loopback port and forwards to target
// (host:port, h2c) until the test ends.
func NewRPCProxy(t testing.TB, target string) *RPCProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("rpc proxy listen: %v", err)
	}
	u := &url.URL{Scheme: "http", Host: target}
	p := &RPCProxy{ln: ln, target: u, hc: testClient(nil), drop: map[string]bool{}}
	p.proxy = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = u.Host },
		Transport:     p.hc.Transport,
		FlushInterval: -1, // streams pass each message at once
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			grpcUnavailable(w, "test rpc proxy: "+err.Error())
		},
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), Protocols: &protos}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // do not wait for open streams
		_ = p.srv.Shutdown(ctx)
		_ = p.srv.Close()
		p.hc.CloseIdleConnections()
	})
	return p
}

// Addr is the address to dial instead of the target.
func (p *RPCProxy) Addr() string { return p.ln.Addr().String() }

// DropAnswers loses (on) or passes again (off) the answers of a method,
// named by its full name ("/sluice.v1.BrokerService/ReportUsage") or its
// last element ("ReportUsage").
func (p *RPCProxy) DropAnswers(method string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.drop[method] = true
	} else {
		delete(p.drop, method)
	}
}

// Dropped is how many answers the proxy has lost so far.
func (p *RPCProxy) Dropped() int64 { return p.dropped.Load() }

func (p *RPCProxy) dropping(path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drop[path] {
		return true
	}
	i := strings.LastIndexByte(path, '/')
	return i >= 0 && p.drop[path[i+1:]]
}

func (p *RPCProxy) serve(w http.ResponseWriter, r *http.Request) {
	if !p.dropping(r.URL.Path) {
		p.proxy.ServeHTTP(w, r)
		return
	}
	out := r.Clone(r.Context())
	out.URL = &url.URL{Scheme: p.target.Scheme, Host: p.target.Host, Path: r.URL.Path}
	out.Host, out.RequestURI = p.target.Host, ""
	res, err := p.hc.Transport.RoundTrip(out)
	if err != nil {
		grpcUnavailable(w, "test rpc proxy: "+err.Error())
		return
	}
	// Served whole: the body and its trailers are read, then lost.
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		grpcUnavailable(w, "test rpc proxy: "+err.Error())
		return
	}
	p.dropped.Add(1)
	grpcUnavailable(w, "test rpc proxy: the answer was lost")
}

// grpcUnavailable answers a gRPC call with status UNAVAILABLE
// (trailers-only).
func grpcUnavailable(w http.ResponseWriter, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", "14")
	h.Set("Grpc-Message", url.PathEscape(msg))
	w.WriteHeader(http.StatusOK)
}
