package kafka

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// serveTest serves s on a loopback listener until the test ends and
// returns its address.
func serveTest(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

func apiVersions(c *RawClient) error {
	res, err := c.RoundTrip(3, kmsg.NewPtrApiVersionsRequest())
	if err != nil {
		return err
	}
	if code := res.(*kmsg.ApiVersionsResponse).ErrorCode; code != 0 {
		return fmt.Errorf("ApiVersions: error %d", code)
	}
	return nil
}

// TestMaxConnections: a connection over MaxConnections is closed at
// once, whatever it sends; one closed makes room for the next.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	s := fuzzServer()
	s.d.MaxConnections = 2
	addr := serveTest(t, s)
	c1, c2 := DialRaw(t, addr), DialRaw(t, addr)
	for _, c := range []*RawClient{c1, c2} {
		if err := apiVersions(c); err != nil {
			t.Fatal(err)
		}
	}
	c3 := DialRaw(t, addr)
	if !c3.Closed() {
		t.Fatal("a third connection over a limit of 2 was not closed")
	}
	c1.NC.Close()
	testenv.Wait(t, 10*time.Second, "a new connection served once one closed", func() error {
		return apiVersions(DialRaw(t, addr))
	})
	if err := apiVersions(c2); err != nil {
		t.Fatalf("the connection within the limit: %v", err)
	}
}

// TestPreAuthenticationIdle: a connection that has not authenticated is
// closed when it sends no request for preAuthIdle, before its first
// request or between two; once authenticated it may idle for
// IdleTimeout. The API key's exchange is told the client's address (the
// control plane limits failed logins by it).
func TestPreAuthenticationIdle(t *testing.T) {
	t.Parallel()
	tokens := &shortTokens{ttl: time.Hour}
	view := cluster.EmptyView()
	view.Loaded = true
	s := New(Deps{BrokerID: 1, ClusterID: "idle", Auth: acceptAll{time.Hour}, Exchange: tokens.exchange,
		View: func() *cluster.View { return view }, IdleTimeout: time.Hour})
	const idle = 300 * time.Millisecond
	s.preAuthIdle = idle
	addr := serveTest(t, s)

	silent := DialRaw(t, addr)
	start := time.Now()
	if !silent.Closed() {
		t.Fatal("a connection that sent nothing was not closed")
	}
	if d := time.Since(start); d < idle-50*time.Millisecond {
		t.Fatalf("closed after %v, before the %v limit", d, idle)
	}
	asked := DialRaw(t, addr)
	if err := apiVersions(asked); err != nil {
		t.Fatal(err)
	}
	if !asked.Closed() {
		t.Fatal("an unauthenticated connection idle after a request was not closed")
	}

	authed := DialRaw(t, addr)
	if err := authed.Login("acme", "slk_key"); err != nil {
		t.Fatal(err)
	}
	if got, want := *tokens.client.Load(), authed.NC.LocalAddr().String(); got != want {
		t.Fatalf("the key's exchange was told client %q, want %q", got, want)
	}
	time.Sleep(3 * idle) // window: three times the unauthenticated limit
	if _, err := authed.RoundTrip(0, kmsg.NewPtrDescribeClusterRequest()); err != nil {
		t.Fatalf("an authenticated connection idle for %v: %v", 3*idle, err)
	}
}
