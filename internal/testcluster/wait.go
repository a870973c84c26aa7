package testcluster

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/sluicemq/sluice/tenants"

	"connectrpc.com/connect"
)

// testClient speaks HTTP/2, cleartext to http:// URLs and over TLS with
// cfg (nil: the system's roots) to https:// ones, with no overall timeout
// (calls carry contexts) and pings that drop connections to unresponsive
// peers (a paused or cut-off broker): a connection silent for 2 s is
// pinged and dropped when no answer comes within 5 s. (1 s was too short
// on a loaded machine: under make test-busy a live broker once answered
// later, and the dropped connection failed a produce in flight.)
func testClient(cfg *tls.Config) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:       &p,
		TLSClientConfig: cfg,
		DialContext:     (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 2 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}}
}

// bearer sends a fixed token on every unary call.
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(tenants.Bearer(token))
}
