package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sluicemq/sluice/tenants"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// clients are the generated Connect clients, authenticated with a JWT
// minted from the profile's API key.
type clients struct {
	tenant  sluicev1connect.TenantServiceClient
	auth    sluicev1connect.AuthServiceClient
	apikey  sluicev1connect.APIKeyServiceClient
	topic   sluicev1connect.TopicServiceClient
	billing sluicev1connect.BillingServiceClient
}

// httpClient speaks h2c to http:// URLs (as gRPC does) and HTTP/2 or
// HTTP/1.1 over TLS to https:// ones (a plaintext control plane may name
// brokers that serve TLS), after checking that endpoint is one or the
// other. Servers' certificates are verified against caFile's
// certificates when it is set (--ca-file, the profile's ca_file), else
// against the system's roots.
func httpClient(endpoint, caFile string) (*http.Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("endpoint %q must be an http:// or https:// URL", endpoint)}
	}
	cfg, err := tlsConfig(caFile)
	if err != nil {
		return nil, err
	}
	dial := (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	var h2c, overTLS http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	overTLS.SetHTTP2(true)
	overTLS.SetHTTP1(true)
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: bySchemeTransport{
			http:  &http.Transport{Protocols: &h2c, DialContext: dial},
			https: &http.Transport{Protocols: &overTLS, DialContext: dial, TLSClientConfig: cfg},
		},
	}, nil
}

// bySchemeTransport sends http:// requests on one transport (h2c) and
// https:// ones on the other (HTTP/2 or HTTP/1.1 over TLS): one
// http.Transport speaks HTTP/1.1 to http:// URLs as soon as it speaks it to
// https:// ones.
type bySchemeTransport struct{ http, https *http.Transport }

func (t bySchemeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme == "https" {
		return t.https.RoundTrip(r)
	}
	return t.http.RoundTrip(r)
}

// CloseIdleConnections closes both transports' idle connections.
func (t bySchemeTransport) CloseIdleConnections() {
	t.http.CloseIdleConnections()
	t.https.CloseIdleConnections()
}

// tlsConfig is the TLS configuration of the CLI's calls: servers verified
// against caFile's certificates (empty: the system's roots).
func tlsConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, usageError{fmt.Errorf("--ca-file: %w", err)}
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(b) {
		return nil, usageError{fmt.Errorf("--ca-file %s holds no PEM certificate", caFile)}
	}
	return cfg, nil
}

func newClients(hc *http.Client, endpoint, token string) *clients {
	endpoint = strings.TrimRight(endpoint, "/")
	opt := connect.WithInterceptors(tenants.Bearer(token))
	return &clients{
		tenant:  sluicev1connect.NewTenantServiceClient(hc, endpoint, opt),
		auth:    sluicev1connect.NewAuthServiceClient(hc, endpoint, opt),
		apikey:  sluicev1connect.NewAPIKeyServiceClient(hc, endpoint, opt),
		topic:   sluicev1connect.NewTopicServiceClient(hc, endpoint, opt),
		billing: sluicev1connect.NewBillingServiceClient(hc, endpoint, opt),
	}
}

// anonymous returns clients without credentials for the commands that
// create a profile (signup, login).
func (a *app) anonymous() (*clients, Profile, error) {
	p, err := a.resolve(false, true)
	if err != nil {
		return nil, p, err
	}
	hc, err := httpClient(p.Endpoint, p.CAFile)
	if err != nil {
		return nil, p, err
	}
	return newClients(hc, p.Endpoint, ""), p, nil
}

// authenticated trades the API key for a JWT and returns clients that send it.
func (a *app) authenticated(ctx context.Context) (*clients, error) {
	p, err := a.resolve(true, false)
	if err != nil {
		return nil, err
	}
	hc, err := httpClient(p.Endpoint, p.CAFile)
	if err != nil {
		return nil, err
	}
	anon := newClients(hc, p.Endpoint, "")
	res, err := anon.auth.CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: p.APIKey}))
	if err != nil {
		return nil, fmt.Errorf("log in at %s: %w", p.Endpoint, err)
	}
	return newClients(hc, p.Endpoint, res.Msg.GetToken()), nil
}
