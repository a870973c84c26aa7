package alerting

import (
	"crypto/sha256"
	"errors"
	"fmt"
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

// TestGuardEmbeddedIPv4: an IPv6 address that carries an IPv4 address (or
// is the deprecated IPv4-compatible form) is judged by the IPv4 address it
// carries, at registration (CheckAddr, CheckURL) and at dial time (the
// dialer's Control), with the loopback flag and without: a translator's or
// a tunnel's loopback is never the control plane's own.
func TestGuardEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, tc := range []struct {
		addr string
		want string // the refusal's text; "" allowed
	}{
		// IPv4-compatible, ::/96 (deprecated): refused whatever it carries.
		{addr: "::a9fe:a9fe", want: "::a9fe:a9fe is an IPv4-compatible (deprecated) address"}, // 169.254.169.254
		{addr: "::a00:1", want: "IPv4-compatible"},                                            // 10.0.0.1
		{addr: "::169.254.169.254", want: "IPv4-compatible"},
		{addr: "::808:808", want: "IPv4-compatible"}, // even 8.8.8.8
		{addr: "::2", want: "IPv4-compatible"},
		{addr: "::ffff:ffff", want: "IPv4-compatible"},
		{addr: "::1:0:0:0"}, // not in ::/96
		// IPv4-mapped, ::ffff:0:0/96: unmapped, judged as the IPv4 address.
		{addr: "::ffff:a9fe:a9fe", want: "169.254.169.254 is a link-local address"},
		{addr: "::ffff:10.0.0.1", want: "10.0.0.1 is a private address"},
		{addr: "::ffff:100.64.0.1", want: "reserved"},
		{addr: "::ffff:808:808"},
		// IPv4-translated (SIIT), ::ffff:0:0:0/96.
		{addr: "::ffff:0:a9fe:a9fe", want: "an IPv4-translated address of 169.254.169.254, a link-local address"},
		{addr: "::ffff:0:7f00:1", want: "127.0.0.1, a loopback address"},
		{addr: "::ffff:0:808:808"},
		// NAT64, 64:ff9b::/96.
		{addr: "64:ff9b::a9fe:a9fe", want: "a NAT64 address of 169.254.169.254, a link-local address"},
		{addr: "64:ff9b::10.0.0.1", want: "10.0.0.1, a private address"},
		{addr: "64:ff9b::7f00:1", want: "127.0.0.1, a loopback address"},
		{addr: "64:ff9b::c0a8:101", want: "192.168.1.1, a private address"},
		{addr: "64:ff9b::ac10:1", want: "172.16.0.1, a private address"},
		{addr: "64:ff9b::", want: "0.0.0.0, an unspecified address"},
		{addr: "64:ff9b::e000:1", want: "224.0.0.1, a link-local address"},
		{addr: "64:ff9b::ef01:203", want: "239.1.2.3, a multicast address"},
		{addr: "64:ff9b::ffff:ffff", want: "255.255.255.255, a reserved address"},
		{addr: "64:ff9b::808:808"},
		{addr: "64:ff9b::5db8:d70e"},
		// NAT64 for local use, 64:ff9b:1::/48: every RFC 6052 reading.
		{addr: "64:ff9b:1:5db8:d7:e08:a9fe:a9fe", want: "local-use, /96) address of 169.254.169.254"},
		{addr: "64:ff9b:1:5db8:a:0:100:0", want: "local-use, /64) address of 10.0.0.1"},
		{addr: "64:ff9b:1:5dac:10:504:808:808", want: "local-use, /56) address of 172.16.5.4"},
		{addr: "64:ff9b:1:c0a8:1:1:808:808", want: "local-use, /48) address of 192.168.1.0"},
		{addr: "64:ff9b:1:5db8:d7:e08:808:808"}, // 8.8.8.8, 215.14.8.8, 184.215.14.8, 93.184.215.14: all public
		// With a /96 layout and a prefix of zeros the /64 reading is 0.0.0.8:
		// the guard cannot tell the layouts apart, so it refuses.
		{addr: "64:ff9b:1::808:808", want: "local-use, /64) address of 0.0.0.8"},
		// 6to4, 2002::/16: the IPv4 address in bits 16–48.
		{addr: "2002:a9fe:a9fe::1", want: "a 6to4 address of 169.254.169.254, a link-local address"},
		{addr: "2002:a00:1::1", want: "6to4 address of 10.0.0.1, a private address"},
		{addr: "2002:7f00:1::", want: "127.0.0.1, a loopback address"},
		{addr: "2002:c0a8:101:1::1", want: "192.168.1.1"},
		{addr: "2002:6440:1::1", want: "100.64.0.1, a reserved address"},
		{addr: "2002::1", want: "0.0.0.0"},
		{addr: "2002:5db8:d70e::1"},
		{addr: "2002:808:808:ffff::a9fe:a9fe"}, // only bits 16–48 count
		// Teredo, 2001::/32: the server in bits 32–64, the client inverted
		// in the last 32 bits.
		{addr: "2001:0:5db8:d70e::f5ff:fffe", want: "Teredo (client) address of 10.0.0.1, a private address"},
		{addr: "2001:0:5db8:d70e:8000:f227:5601:5601", want: "Teredo (client) address of 169.254.169.254"},
		{addr: "2001:0:5db8:d70e::80ff:fffe", want: "127.0.0.1, a loopback address"},
		{addr: "2001:0:a00:1::f7f7:f7f7", want: "Teredo (server) address of 10.0.0.1, a private address"},
		{addr: "2001:0:a9fe:a9fe::f7f7:f7f7", want: "Teredo (server) address of 169.254.169.254"},
		{addr: "2001::", want: "0.0.0.0"},
		{addr: "2001:0:5db8:d70e:8000:f227:f7f7:f7f7"}, // server 93.184.215.14, client 8.8.8.8
		{addr: "2001:0:5db8:d70e::a9fe:a9fe"},          // the client is 86.1.86.1: inverted
		{addr: "2001:db8::a00:1"},                      // 2001:db8::/32 is not Teredo
		{addr: "2001:4860:4860::8888"},
	} {
		ip := netip.MustParseAddr(tc.addr)
		control := func(g Guard) error {
			return g.dialer(false).Control("tcp6", netip.AddrPortFrom(ip, 443).String(), nil)
		}
		for _, g := range []Guard{{}, {AllowInsecureLoopback: true}} {
			name := fmt.Sprintf("%s, loopback allowed %v", tc.addr, g.AllowInsecureLoopback)
			if tc.want == "" {
				require.NoError(t, g.CheckAddr(ip), name)
				require.NoError(t, g.CheckURL(ctx, "https://["+tc.addr+"]/hook"), name)
				require.NoError(t, control(g), name)
				continue
			}
			for what, err := range map[string]error{
				"CheckAddr": g.CheckAddr(ip),
				"CheckURL":  g.CheckURL(ctx, "https://["+tc.addr+"]/hook"),
				"dial":      control(g),
			} {
				require.ErrorIs(t, err, ErrAddressRefused, "%s: %s", what, name)
				require.ErrorContains(t, err, tc.want, "%s: %s", what, name)
			}
		}
	}
}

// TestDeliverSendTimeEmbeddedIPv4: deliveries to an IPv6 address carrying
// a refused IPv4 address are refused when the connection is made, before
// anything is sent.
func TestDeliverSendTimeEmbeddedIPv4(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, g := range []Guard{{}, {AllowInsecureLoopback: true}} {
		s := NewSender(g, 5*time.Second, nil)
		for _, u := range []string{
			"https://[::a9fe:a9fe]/latest/meta-data",
			"https://[::a00:1]/hook",
			"https://[::ffff:0:a9fe:a9fe]/hook",
			"https://[64:ff9b::a9fe:a9fe]/hook",
			"https://[64:ff9b::7f00:1]/hook",
			"https://[64:ff9b:1:5db8:a:0:100:0]/hook",
			"https://[2002:a9fe:a9fe::1]/hook",
			"https://[2001:0:5db8:d70e::f5ff:fffe]/hook",
			"https://[2001:0:a00:1::f7f7:f7f7]/hook",
		} {
			start := time.Now()
			status, err := s.Send(ctx, u, []byte("0123456789abcdef0123456789abcdef"), store.NewID(), []byte(`{}`))
			require.ErrorIs(t, err, ErrAddressRefused, u)
			require.Zero(t, status)
			require.Less(t, time.Since(start), 2*time.Second, "refused, not timed out: %s", u)
		}
	}
}
