// Package clientlimit rate-limits the control plane's public procedures per
// client address: Signup (every call counts) and CreateToken (only calls
// with a bad API key count), so that one client cannot create tenants in
// bulk, enumerate registered names and emails, or guess API keys at speed.
//
// A Limiter is a token bucket per client address: Burst calls at once, then
// one more per Every. IPv4 addresses are limited one by one; IPv6 addresses
// per /64 (one customer's network, as ISPs hand them out), since a host can
// pick any of its 2^64 addresses. Memory is bounded: at most MaxAddresses
// buckets per limiter; a bucket that has refilled is dropped, and beyond the
// bound the least recently used address is forgotten (it starts again with
// a full bucket — a client with more addresses than the bound defeats any
// per-address limit anyway).
//
// The client address is the TCP peer's, or, when the peer is one of the
// trusted proxies (Config.TrustedProxies), the rightmost X-Forwarded-For
// entry that is not itself a trusted proxy (Resolver.ClientAddr): entries
// to the left of it were written by the client and prove nothing.
//
// Limits are per control-plane replica (in memory): behind a load balancer
// spreading requests over N replicas, a client gets up to N times the
// limit.
//
// All types are safe for concurrent use.
package clientlimit

import (
	"container/list"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
)

// Limit is a token bucket's shape: Burst calls at once, then one more per
// Every. Burst 0 turns the limit off.
type Limit struct {
	Burst int
	Every time.Duration
}

// Off reports whether the limit allows everything.
func (l Limit) Off() bool { return l.Burst == 0 }

func (l Limit) String() string {
	if l.Off() {
		return "off"
	}
	return fmt.Sprintf("%d at once, then 1 per %s", l.Burst, l.Every)
}

// Config is the control plane's per-client-address limits.
type Config struct {
	// Signup limits TenantService.Signup calls per client address.
	Signup Limit
	// TokenFailures limits CreateToken calls with a bad API key (malformed,
	// unknown, wrong secret, revoked) per client address. While an address
	// has none left, every CreateToken from it is refused, good keys
	// included (so a guess cannot be tested); good keys cost nothing.
	TokenFailures Limit
	// MaxAddresses bounds how many client addresses each limiter tracks.
	MaxAddresses int
	// TrustedProxies are the CIDRs of load balancers and proxies whose
	// X-Forwarded-For is believed. Empty: the TCP peer is the client.
	TrustedProxies []string
}

// DefaultConfig is what the control plane runs with unless told otherwise.
func DefaultConfig() Config {
	return Config{
		Signup:        Limit{Burst: 5, Every: 10 * time.Minute},
		TokenFailures: Limit{Burst: 20, Every: 5 * time.Second},
		MaxAddresses:  100_000,
	}
}

// RegisterFlags binds c to flags, with c's values as defaults.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.Signup.Burst, "signup-limit", c.Signup.Burst, "signups one client address may make at once, then one more per --signup-limit-interval; more are refused with resource_exhausted and a retry delay (0 turns the limit off)")
	fs.DurationVar(&c.Signup.Every, "signup-limit-interval", c.Signup.Every, "how often a client address earns one more signup, up to --signup-limit")
	fs.IntVar(&c.TokenFailures.Burst, "token-failure-limit", c.TokenFailures.Burst, "CreateToken calls with a bad API key one client address may make at once, then one more per --token-failure-limit-interval; while it has none left, every CreateToken from it is refused with resource_exhausted and a retry delay, good keys included (calls with a good key never count; 0 turns the limit off)")
	fs.DurationVar(&c.TokenFailures.Every, "token-failure-limit-interval", c.TokenFailures.Every, "how often a client address earns one more bad-key CreateToken, up to --token-failure-limit")
	fs.IntVar(&c.MaxAddresses, "client-limit-addresses", c.MaxAddresses, "client addresses each limit tracks (IPv6 per /64); beyond that the least recently seen is forgotten, bounding memory (about 150 bytes each)")
	fs.StringSliceVar(&c.TrustedProxies, "trusted-proxies", c.TrustedProxies, "comma-separated CIDRs of the load balancers or proxies in front of the control plane; for a request from one, the client address is the rightmost X-Forwarded-For entry outside them. Empty: the TCP peer is the client and X-Forwarded-For is ignored")
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	for _, l := range []struct {
		flag string
		l    Limit
	}{{"--signup-limit", c.Signup}, {"--token-failure-limit", c.TokenFailures}} {
		switch {
		case l.l.Burst < 0 || l.l.Burst > 1_000_000:
			return fmt.Errorf("%s must be between 0 (off) and 1000000; got %d", l.flag, l.l.Burst)
		case !l.l.Off() && (l.l.Every < time.Millisecond || l.l.Every > 24*time.Hour):
			return fmt.Errorf("%s-interval must be between 1ms and 24h; got %s", l.flag, l.l.Every)
		}
	}
	if c.MaxAddresses < 1000 || c.MaxAddresses > 10_000_000 {
		return fmt.Errorf("--client-limit-addresses must be between 1000 and 10000000; got %d", c.MaxAddresses)
	}
	if _, err := ParsePrefixes(c.TrustedProxies); err != nil {
		return fmt.Errorf("--trusted-proxies: %w", err)
	}
	return nil
}

// ParsePrefixes parses CIDRs ("10.0.0.0/8", "2001:db8::/32") and bare
// addresses (a single host).
func ParsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR or an IP address", s)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Resolver finds a request's client address.
type Resolver struct {
	trusted []netip.Prefix
}

// NewResolver returns a Resolver believing X-Forwarded-For from trusted.
func NewResolver(trusted []netip.Prefix) *Resolver { return &Resolver{trusted: trusted} }

func (r *Resolver) isTrusted(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientAddr returns the client address of a request whose TCP peer is
// remoteAddr ("host:port", as net/http gives it). With no trusted proxies,
// or a peer that is not one, that is the peer. Otherwise it walks
// X-Forwarded-For (every such header, in order, comma-separated) from the
// right, past trusted proxies, to the first address that is not one; when
// an entry does not parse, or every entry is trusted, the last address
// reached is the client. ok is false when remoteAddr itself does not parse.
func (r *Resolver) ClientAddr(remoteAddr string, h http.Header) (_ netip.Addr, ok bool) {
	addr, ok := parseHost(remoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if len(r.trusted) == 0 || !r.isTrusted(addr) {
		return addr, true
	}
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHost(strings.TrimSpace(hops[i]))
		if !ok {
			break
		}
		addr = a
		if !r.isTrusted(a) {
			break
		}
	}
	return addr, true
}

// parseHost parses "ip", "ip:port" or "[ipv6]:port", unmapping IPv4-mapped
// IPv6 and dropping zones.
func parseHost(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// Key is the bucket a client address counts against: an IPv4 address
// itself, an IPv6 address's /64; "unknown" for an invalid address (all such
// callers share one bucket).
func Key(a netip.Addr) string {
	switch {
	case !a.IsValid():
		return "unknown"
	case a.Is4():
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// Limiter is a token bucket per key, bounded to max keys.
type Limiter struct {
	limit Limit
	max   int

	mu      sync.Mutex
	buckets map[string]*list.Element // of *bucket
	lru     list.List                // front: most recently used
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time // when tokens was computed
}

// NewLimiter returns a limiter of l tracking at most maxKeys keys.
func NewLimiter(l Limit, maxKeys int) *Limiter {
	return &Limiter{limit: l, max: max(maxKeys, 1), buckets: map[string]*list.Element{}}
}

// Limit is the limiter's shape.
func (l *Limiter) Limit() Limit { return l.limit }

// Len is how many keys the limiter tracks now.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// refill brings b up to now.
func (l *Limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = math.Min(float64(l.limit.Burst), b.tokens+float64(d)/float64(l.limit.Every))
		b.at = now
	}
}

// Take takes one call from key's bucket at now. When none is left it takes
// nothing and returns false and how long until one is.
func (l *Limiter) Take(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l.limit.Off() {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropRefilled(now)
	var b *bucket
	if e, found := l.buckets[key]; found {
		l.lru.MoveToFront(e)
		b = e.Value.(*bucket)
		l.refill(b, now)
	} else {
		if len(l.buckets) >= l.max {
			oldest := l.lru.Back()
			l.lru.Remove(oldest)
			delete(l.buckets, oldest.Value.(*bucket).key)
		}
		b = &bucket{key: key, tokens: float64(l.limit.Burst), at: now}
		l.buckets[key] = l.lru.PushFront(b)
	}
	if b.tokens < 1 {
		wait := time.Duration((1 - b.tokens) * float64(l.limit.Every)).Round(time.Millisecond)
		return false, max(wait, time.Millisecond)
	}
	b.tokens--
	return true, 0
}

// Refund gives back a call taken from key's bucket (a call that turned out
// not to count), up to the burst.
func (l *Limiter) Refund(key string, now time.Time) {
	if l.limit.Off() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.buckets[key]; ok {
		b := e.Value.(*bucket)
		l.refill(b, now)
		b.tokens = math.Min(float64(l.limit.Burst), b.tokens+1)
	}
}

// dropRefilled forgets least recently used buckets that are full again at
// now (no different from a key never seen), so idle memory shrinks.
func (l *Limiter) dropRefilled(now time.Time) {
	for e := l.lru.Back(); e != nil; e = l.lru.Back() {
		b := e.Value.(*bucket)
		toFull := (float64(l.limit.Burst) - b.tokens) * float64(l.limit.Every)
		if toFull >= math.MaxInt64/2 || now.Before(b.at.Add(time.Duration(toFull))) {
			return
		}
		l.lru.Remove(e)
		delete(l.buckets, b.key)
	}
}
