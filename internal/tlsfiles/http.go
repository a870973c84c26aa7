package tlsfiles

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// HTTPClient returns the client the cluster's servers call each other
// with: HTTP/2 over TLS to https:// URLs, with s's client side (each new
// connection verifies its server against the CA the files hold then, and
// presents the certificate they hold at its handshake; a nil s: the
// system's roots, no certificate), and cleartext HTTP/2 (h2c) to http://
// ones. The dial timeout and keep-alives are h2c.Client's.
func (s *Source) HTTPClient() *http.Client {
	d := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 15 * time.Second}
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{
		Protocols:         &p,
		ForceAttemptHTTP2: true,
		DialContext:       d.DialContext,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			cfg := s.ClientConfig(host)
			cfg.NextProtos = []string{"h2"}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return tc, nil
		},
	}}
}
