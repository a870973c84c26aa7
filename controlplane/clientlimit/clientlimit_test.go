package clientlimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/flagenv"
)

func TestClientLimitBucket(t *testing.T) {
	t.Parallel()
	l := NewLimiter(Limit{Burst: 3, Every: time.Minute}, 100)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		ok, _ := l.Take("a", t0)
		require.True(t, ok, "call %d of the burst", i+1)
	}
	ok, wait := l.Take("a", t0)
	require.False(t, ok, "past the burst")
	require.Equal(t, time.Minute, wait, "one call comes back per minute")
	ok, wait = l.Take("a", t0.Add(20*time.Second))
	require.False(t, ok)
	require.Equal(t, 40*time.Second, wait, "the delay counts down")
	ok, _ = l.Take("b", t0)
	require.True(t, ok, "another key has its own bucket")

	ok, _ = l.Take("a", t0.Add(time.Minute))
	require.True(t, ok, "one call back after a minute")
	ok, _ = l.Take("a", t0.Add(time.Minute))
	require.False(t, ok, "and only one")

	// A refund gives a call back, never beyond the burst.
	l.Refund("a", t0.Add(time.Minute))
	ok, _ = l.Take("a", t0.Add(time.Minute))
	require.True(t, ok)
	for range 10 {
		l.Refund("b", t0)
	}
	for i := range 3 {
		ok, _ := l.Take("b", t0)
		require.True(t, ok, "call %d", i)
	}
	ok, _ = l.Take("b", t0)
	require.False(t, ok, "refunds never raise a bucket past its burst")

	off := NewLimiter(Limit{}, 10)
	for range 100 {
		ok, _ := off.Take("a", t0)
		require.True(t, ok, "burst 0 is off")
	}
	require.Zero(t, off.Len())
}

// TestClientLimitBoundedMemory: a limiter never tracks more than its bound;
// past it the least recently used key is forgotten, and buckets that have
// refilled are dropped.
func TestClientLimitBoundedMemory(t *testing.T) {
	t.Parallel()
	l := NewLimiter(Limit{Burst: 1, Every: time.Hour}, 1000)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5000 {
		ok, _ := l.Take(fmt.Sprintf("k%d", i), t0)
		require.True(t, ok)
		require.LessOrEqual(t, l.Len(), 1000)
	}
	require.Equal(t, 1000, l.Len())
	ok, _ := l.Take("k4999", t0)
	require.False(t, ok, "a recent key is still limited")
	ok, _ = l.Take("k0", t0)
	require.True(t, ok, "the least recently used keys were forgotten")

	// An hour later every bucket is full again: they are dropped.
	ok, _ = l.Take("fresh", t0.Add(time.Hour+time.Second))
	require.True(t, ok)
	require.Equal(t, 1, l.Len(), "refilled buckets are dropped")

	// Burst and interval at their maxima do not overflow.
	big := NewLimiter(Limit{Burst: 1_000_000, Every: 24 * time.Hour}, 1000)
	ok, _ = big.Take("a", t0)
	require.True(t, ok)
	ok, _ = big.Take("b", t0.Add(time.Hour))
	require.True(t, ok)
	require.Equal(t, 2, big.Len())
}

func TestClientLimitKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},
		{"::1", "::/64"},
	} {
		a, ok := parseHost(tc.in)
		require.True(t, ok, tc.in)
		require.Equal(t, tc.want, Key(a), tc.in)
	}
	require.Equal(t, "unknown", Key(netip.Addr{}))
}

func TestClientLimitResolver(t *testing.T) {
	t.Parallel()
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8", " 2001:db8:ff::/48", "192.0.2.1"})
	require.NoError(t, err)
	xff := func(vs ...string) http.Header {
		h := http.Header{}
		for _, v := range vs {
			h.Add("X-Forwarded-For", v)
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		h       http.Header
		want    string
	}{
		{"no proxies: the peer, X-Forwarded-For ignored", nil, "198.51.100.9:5000", xff("203.0.113.5"), "198.51.100.9"},
		{"untrusted peer: the peer", trusted, "198.51.100.9:5000", xff("203.0.113.5"), "198.51.100.9"},
		{"trusted peer: the entry it added", trusted, "10.1.2.3:5000", xff("203.0.113.5"), "203.0.113.5"},
		{"spoofed entries left of the proxy's are ignored", trusted, "10.1.2.3:5000", xff("1.1.1.1, 203.0.113.5"), "203.0.113.5"},
		{"a chain of trusted proxies is walked", trusted, "10.1.2.3:5000", xff("1.1.1.1, 203.0.113.5, 10.9.9.9", "192.0.2.1"), "203.0.113.5"},
		{"IPv6 peer and entries", trusted, "[2001:db8:ff::7]:443", xff("2001:db8:1::5"), "2001:db8:1::5"},
		{"an entry with a port", trusted, "10.1.2.3:5000", xff("[2001:db8:1::5]:1234"), "2001:db8:1::5"},
		{"garbage stops the walk at the last trusted hop", trusted, "10.1.2.3:5000", xff("203.0.113.5, not-an-ip"), "10.1.2.3"},
		{"every hop trusted: the leftmost", trusted, "10.1.2.3:5000", xff("10.4.4.4, 10.5.5.5"), "10.4.4.4"},
		{"no header from a trusted peer: the peer", trusted, "10.1.2.3:5000", http.Header{}, "10.1.2.3"},
		{"IPv4-mapped peer", trusted, "[::ffff:10.1.2.3]:5000", xff("203.0.113.5"), "203.0.113.5"},
	} {
		got, ok := NewResolver(tc.trusted).ClientAddr(tc.peer, tc.h)
		require.True(t, ok, tc.name)
		require.Equal(t, tc.want, got.String(), tc.name)
	}
	_, ok := NewResolver(nil).ClientAddr("pipe", nil)
	require.False(t, ok)
}

func TestClientLimitConfigValidate(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Signup.Burst = -1 }, "--signup-limit"},
		{func(c *Config) { c.Signup.Every = 0 }, "--signup-limit-interval"},
		{func(c *Config) { c.TokenFailures.Every = 48 * time.Hour }, "--token-failure-limit-interval"},
		{func(c *Config) { c.MaxAddresses = 10 }, "--client-limit-addresses"},
		{func(c *Config) { c.TrustedProxies = []string{"10.0.0.0/33"} }, "--trusted-proxies"},
		{func(c *Config) { c.TrustedProxies = []string{"proxy.internal"} }, "--trusted-proxies"},
	} {
		c := DefaultConfig()
		tc.mutate(&c)
		require.ErrorContains(t, c.Validate(), tc.want)
	}
	c = DefaultConfig()
	c.Signup = Limit{} // off: no interval needed
	require.NoError(t, c.Validate())
}

// TestClientLimitFlags: every setting is a flag with a help text and a
// $SLUICE_* variable; the defaults are the documented ones.
func TestClientLimitFlags(t *testing.T) {
	t.Setenv("SLUICE_SIGNUP_LIMIT", "7")
	t.Setenv("SLUICE_TOKEN_FAILURE_LIMIT_INTERVAL", "1m")
	t.Setenv("SLUICE_TRUSTED_PROXIES", "10.0.0.0/8,fd00::/8")
	c := DefaultConfig()
	require.Equal(t, Limit{Burst: 5, Every: 10 * time.Minute}, c.Signup)
	require.Equal(t, Limit{Burst: 20, Every: 5 * time.Second}, c.TokenFailures)
	require.Equal(t, 100_000, c.MaxAddresses)
	require.Empty(t, c.TrustedProxies)
	fs := pflag.NewFlagSet("controlplane", pflag.ContinueOnError)
	c.RegisterFlags(fs)
	flagenv.Annotate(fs, "SLUICE")
	require.NoError(t, fs.Parse([]string{"--signup-limit-interval", "30m"}))
	require.NoError(t, flagenv.Apply(fs, "SLUICE"))
	require.Equal(t, Limit{Burst: 7, Every: 30 * time.Minute}, c.Signup)
	require.Equal(t, Limit{Burst: 20, Every: time.Minute}, c.TokenFailures)
	require.Equal(t, []string{"10.0.0.0/8", "fd00::/8"}, c.TrustedProxies)
	require.NoError(t, c.Validate())
	for _, name := range []string{"signup-limit", "signup-limit-interval", "token-failure-limit", "token-failure-limit-interval", "client-limit-addresses", "trusted-proxies"} {
		f := fs.Lookup(name)
		require.NotNil(t, f, name)
		require.Contains(t, f.Usage, "[$"+flagenv.Name("SLUICE", name)+"]")
	}
}
