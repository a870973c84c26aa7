package kafka

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/tenants"
)

// shortTokens gives tokens that live ttl, counting the exchanges.
type shortTokens struct {
	ttl       time.Duration
	exchanges atomic.Int32
	client    atomic.Pointer[string] // the last exchange's client address
}

func (s *shortTokens) exchange(_ context.Context, _, clientAddr string) (Token, error) {
	s.exchanges.Add(1)
	s.client.Store(&clientAddr)
	return Token{Token: "tok", TenantID: "t1", TenantName: "acme", Expires: time.Now().Add(s.ttl)}, nil
}

type acceptAll struct{ ttl time.Duration }

func (a acceptAll) Tenant(context.Context, string) (tenants.Principal, error) {
	return tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", Scopes: []string{tenants.ScopeConsume}, ExpiresAt: time.Now().Add(a.ttl)}, nil
}
func (acceptAll) Current(tenants.Principal) error { return nil }

// TestReauthentication (KIP-368): the SaslAuthenticate answer carries the
// session's lifetime (its token's), a client that re-authenticates before
// it ends keeps its connection, and a session past its end without
// re-authentication is closed at its next request.
func TestReauthentication(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tokens := &shortTokens{ttl: ttl}
	view := cluster.EmptyView()
	view.Loaded = true
	view.Brokers[1] = cluster.Node{ID: 1, KafkaAddress: ln.Addr().String()}
	s := New(Deps{BrokerID: 1, ClusterID: "reauth", Auth: acceptAll{ttl}, Exchange: tokens.exchange,
		View: func() *cluster.View { return view }})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = s.Serve(ctx, ln) }()

	// franz-go re-authenticates on its own before the lifetime passes:
	// its requests keep working for three lifetimes.
	cl, err := kgo.NewClient(kgo.SeedBrokers(ln.Addr().String()), kgo.SASL(plain.Auth{User: "acme", Pass: "slk_key"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); {
		res, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
		if err != nil || res.ClusterID != "reauth" {
			t.Fatalf("describe cluster at %s: %v", time.Until(end), err)
		}
		time.Sleep(100 * time.Millisecond) // pacing: a request every 100 ms
	}
	// A fresh connection per re-authentication would count far more.
	if n := tokens.exchanges.Load(); n < 3 {
		t.Fatalf("%d authentications in three lifetimes, want a re-authentication in each", n)
	}

	// A client that does not re-authenticate: closed after the lifetime.
	rc := DialRaw(t, ln.Addr().String())
	roundTrip := func(_, version int16, req kmsg.Request) (kmsg.Response, error) { return rc.RoundTrip(version, req) }
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	if _, err := roundTrip(17, 1, hs); err != nil {
		t.Fatal(err)
	}
	auth := kmsg.NewPtrSASLAuthenticateRequest()
	auth.SASLAuthBytes = []byte("\x00acme\x00slk_key")
	res, err := roundTrip(36, 1, auth)
	if err != nil {
		t.Fatal(err)
	}
	if l := res.(*kmsg.SASLAuthenticateResponse).SessionLifetimeMillis; l <= 0 || l > ttl.Milliseconds() {
		t.Fatalf("session lifetime %d ms, want (0, %d]", l, ttl.Milliseconds())
	}
	if _, err := roundTrip(60, 0, kmsg.NewPtrDescribeClusterRequest()); err != nil {
		t.Fatalf("a request within the session: %v", err)
	}
	time.Sleep(ttl + 100*time.Millisecond) // clock: past the session's end
	if _, err := roundTrip(60, 0, kmsg.NewPtrDescribeClusterRequest()); err == nil {
		t.Fatal("a request after the session's end was answered")
	}
}
