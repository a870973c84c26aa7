package testcluster

import (
	"net"
	"net/http"
	"time"

	"github.com/sluicemq/sluice/tenants"

	"connectrpc.com/connect"
)

// h2cClient is an HTTP/2 cleartext client with no overall timeout (calls
// carry contexts) and pings that drop connections to unresponsive peers.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:   &p,
		DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 2 * time.Second,
			PingTimeout:     time.Second,
		},
	}}
}

// bearer sends a fixed token on every unary call.
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(tenants.Bearer(token))
}
