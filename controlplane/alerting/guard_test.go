package alerting

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
)

func TestGuardCheckAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr     string
		ok       bool
		loopback bool // allowed with AllowInsecureLoopback
	}{
		{addr: "93.184.215.14", ok: true},
		{addr: "2606:2800:21f:cb07:6820:80da:af6b:8b2c", ok: true},
		{addr: "127.0.0.1", loopback: true},
		{addr: "127.1.2.3", loopback: true},
		{addr: "::1", loopback: true},
		{addr: "::ffff:127.0.0.1", loopback: true},
		{addr: "10.0.0.1"},
		{addr: "172.16.5.4"},
		{addr: "192.168.1.1"},
		{addr: "::ffff:192.168.1.1"},
		{addr: "fd00::1"},
		{addr: "169.254.169.254"},
		{addr: "fe80::1"},
		{addr: "0.0.0.0"},
		{addr: "::"},
		{addr: "0.1.2.3"},
		{addr: "224.0.0.1"},
		{addr: "ff02::1"},
		{addr: "100.64.0.1"},
		{addr: "255.255.255.255"},
		{addr: "64:ff9b::a00:1"},               // NAT64 of 10.0.0.1
		{addr: "64:ff9b::5db8:d70e", ok: true}, // NAT64 of a public address
		{addr: "fec0::1"},
	} {
		ip := netip.MustParseAddr(tc.addr)
		err := Guard{}.CheckAddr(ip)
		if tc.ok {
			require.NoError(t, err, tc.addr)
		} else {
			require.ErrorIs(t, err, ErrAddressRefused, tc.addr)
		}
		err = Guard{AllowInsecureLoopback: true}.CheckAddr(ip)
		if tc.ok || tc.loopback {
			require.NoError(t, err, tc.addr)
		} else {
			require.ErrorIs(t, err, ErrAddressRefused, tc.addr)
		}
	}
}

func TestGuardCheckURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tc := range []struct {
		url      string
		want     string // "" ok
		loopback string // with AllowInsecureLoopback; "" ok
	}{
		{url: "https://93.184.215.14/hook"},
		{url: "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]:8443/hook"},
		{url: "http://93.184.215.14/hook", want: "must be https://", loopback: "only to loopback"},
		{url: "http://127.0.0.1:8080/hook", want: "must be https://"},
		{url: "http://localhost:8080/hook", want: "must be https://"},
		{url: "https://localhost/hook", want: "loopback"},
		{url: "https://[::1]/hook", want: "loopback"},
		{url: "https://10.1.2.3/hook", want: "private", loopback: "private"},
		{url: "https://169.254.169.254/latest/meta-data", want: "link-local", loopback: "link-local"},
		{url: "https://[fe80::1%25eth0]/hook", want: "link-local", loopback: "link-local"},
		{url: "https://0.0.0.0/hook", want: "unspecified", loopback: "unspecified"},
		{url: "https://239.1.2.3/hook", want: "multicast", loopback: "multicast"},
		{url: "ftp://93.184.215.14/hook", want: "not https", loopback: "not https"},
		{url: "https://user:pw@93.184.215.14/hook", want: "user info", loopback: "user info"},
		{url: "https:///hook", want: "no host", loopback: "no host"},
		{url: "https://93.184.215.14:99999/hook", want: "not between", loopback: "not between"},
		{url: "https://no-such-host.invalid/hook", want: "does not resolve", loopback: "does not resolve"},
	} {
		check := func(g Guard, want string) {
			err := g.CheckURL(ctx, tc.url)
			if want == "" {
				require.NoError(t, err, tc.url)
				return
			}
			require.ErrorContains(t, err, want, tc.url)
		}
		check(Guard{}, tc.want)
		check(Guard{AllowInsecureLoopback: true}, tc.loopback)
	}
}

// TestDeliverSendTimeAddressCheck: the address is checked when a delivery
// connects, after resolution, whatever the URL said at registration: a
// stored webhook whose host is (or came to resolve to) a private or
// loopback address is never connected to, and the delivery fails with the
// refusal.
func TestDeliverSendTimeAddressCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var hits atomic.Int32
	recv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	port := recv.URL[strings.LastIndex(recv.URL, ":"):]

	s := NewSender(Guard{}, 5*time.Second, nil)
	for _, u := range []string{
		"https://10.0.0.1/hook",          // private: refused before any packet is sent
		"https://169.254.169.254/hook",   // the metadata endpoint
		"https://[::ffff:10.0.0.1]/hook", // a mapped private address
		"https://localhost" + port,       // a name resolving to loopback, checked at dial time
		"https://127.0.0.1" + port,
	} {
		start := time.Now()
		status, err := s.Send(ctx, u, []byte("0123456789abcdef0123456789abcdef"), store.NewID(), []byte(`{}`))
		require.ErrorIs(t, err, ErrAddressRefused, u)
		require.Zero(t, status)
		require.Less(t, time.Since(start), 2*time.Second, "refused, not timed out: %s", u)
	}
	require.Zero(t, hits.Load(), "nothing reached the receiver")
	_, err := s.Send(ctx, "http://127.0.0.1"+port, []byte("0123456789abcdef0123456789abcdef"), store.NewID(), []byte(`{}`))
	require.ErrorIs(t, err, ErrAddressRefused, "plain http without the loopback flag")

	// Through the delivery loop: the delivery fails with the refusal.
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	tenant := store.NewID()
	h := sha256.Sum256([]byte("key"))
	require.NoError(t, st.CreateTenant(ctx, store.Tenant{ID: tenant, Name: "t-" + tenant, Email: tenant + "@example.com", Plan: "free", Status: store.TenantActive, CreatedAt: time.Now()},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: tenant, Name: "first", Hash: h[:], Scopes: []string{"consume"}, CreatedAt: time.Now()}))
	wh, err := st.CreateWebhook(ctx, store.Webhook{TenantID: tenant, URL: "https://192.168.0.10/hook"}, []byte("0123456789abcdef0123456789abcdef"), 10)
	require.NoError(t, err)
	_, _, err = st.EnqueueDelivery(ctx, store.Delivery{TenantID: tenant, WebhookID: wh.ID, AlertState: store.AlertStateTest, Payload: []byte(`{}`)})
	require.NoError(t, err)
	n, err := New(st, Config{}).Deliver(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	log, err := st.ListDeliveries(ctx, tenant, wh.ID, 10)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Contains(t, log[0].LastError, "192.168.0.10 is a private address")

	// And the loopback flag lets the TLS receiver through (its certificate
	// is not trusted here, so the error is a TLS one, not a refusal).
	_, err = NewSender(Guard{AllowInsecureLoopback: true}, 5*time.Second, nil).Send(ctx, "https://127.0.0.1"+port, []byte("0123456789abcdef0123456789abcdef"), store.NewID(), []byte(`{}`))
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrAddressRefused), "%v", err)
}
