package alerting

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Webhook URLs are the tenants' to choose, and the control plane calls them
// from inside the operator's network: a URL naming, or resolving to, an
// internal address would let a tenant reach internal services through
// webhooks (SSRF), the cloud metadata endpoint at 169.254.169.254 first of
// all. Guard refuses such addresses twice: when a webhook is registered
// (CheckURL, for a clear answer), and when a delivery connects (the
// dialer's Control function checks the very address the socket is about
// to connect to, after DNS resolution), so a name that resolved to a
// public address at registration and to a private one later (DNS
// rebinding) is refused all the same. IPv6 addresses that carry an IPv4
// address (IPv4-mapped and -translated, NAT64, 6to4, Teredo) are judged by
// the IPv4 address they carry, and the deprecated IPv4-compatible ones
// (::/96) are refused outright. Proxies from the environment are not used
// (the check would see the proxy's address), and redirects are not
// followed.

// ErrAddressRefused is wrapped by every refusal of Guard.
var ErrAddressRefused = errors.New("address refused")

// Guard decides which webhook endpoints the control plane may call.
type Guard struct {
	// AllowInsecureLoopback admits loopback addresses, and http:// URLs to
	// them (`sluice dev` and tests): --webhook-allow-insecure-loopback.
	AllowInsecureLoopback bool
	// Resolver resolves host names at registration (net.DefaultResolver
	// when nil).
	Resolver *net.Resolver
}

// reserved are address ranges no webhook may reach beyond those netip
// classifies (private, loopback, link-local, multicast, unspecified).
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT, shared address space
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved, and the broadcast address
	netip.MustParsePrefix("fec0::/10"),     // deprecated site-local
}

// IPv6 forms that carry an IPv4 address. A packet to one of them reaches
// that IPv4 address through a translator or a tunnel (or, for the
// deprecated IPv4-compatible form, a host may treat it as the IPv4 address
// itself), so an address that carries a refused IPv4 address is refused
// with it. IPv4-mapped addresses (::ffff:0:0/96) are unmapped first and
// judged as the IPv4 address they are.
var (
	// ::/96, IPv4-compatible (RFC 4291 §2.5.5.1, deprecated): refused as a
	// whole (after :: and ::1, which are in it); no host may use one.
	ipv4Compatible = netip.MustParsePrefix("::/96")
	// ::ffff:0:0:0/96, IPv4-translated (SIIT, RFC 2765): the last 32 bits.
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96")
	// 64:ff9b::/96, the NAT64 well-known prefix (RFC 6052): the last 32 bits.
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
	// 64:ff9b:1::/48, NAT64 for local use (RFC 8215): the network's own
	// prefix inside it is /48, /56, /64 or /96 long, each placing the IPv4
	// address elsewhere (RFC 6052 §2.2), so all four readings are checked.
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	// 2002::/16, 6to4 (RFC 3056): bits 16–48.
	sixToFour = netip.MustParsePrefix("2002::/16")
	// 2001::/32, Teredo (RFC 4380): the server in bits 32–64, the client in
	// the last 32 bits, inverted.
	teredo = netip.MustParsePrefix("2001::/32")
)

// carried is an IPv4 address an IPv6 address carries, and the form.
type carried struct {
	form string
	ip   netip.Addr
}

// embeddedIPv4 returns the IPv4 addresses ip carries, if any.
func embeddedIPv4(ip netip.Addr) []carried {
	if !ip.Is6() {
		return nil
	}
	b := ip.As16()
	v4 := func(form string, x ...byte) carried { return carried{form, netip.AddrFrom4([4]byte(x))} }
	switch {
	case ipv4Translated.Contains(ip):
		return []carried{v4("IPv4-translated", b[12:]...)}
	case nat64.Contains(ip):
		return []carried{v4("NAT64", b[12:]...)}
	case nat64Local.Contains(ip):
		// Bits 64–71 are skipped by the shorter layouts (RFC 6052's "u"
		// octet). Any reading that carries a refused address refuses the
		// whole address: the guard cannot know which one the network uses.
		return []carried{
			v4("NAT64 (local-use, /96)", b[12:]...),
			v4("NAT64 (local-use, /64)", b[9:13]...),
			v4("NAT64 (local-use, /56)", b[7], b[9], b[10], b[11]),
			v4("NAT64 (local-use, /48)", b[6], b[7], b[9], b[10]),
		}
	case sixToFour.Contains(ip):
		return []carried{v4("6to4", b[2:6]...)}
	case teredo.Contains(ip):
		return []carried{
			v4("Teredo (server)", b[4:8]...),
			v4("Teredo (client)", ^b[12], ^b[13], ^b[14], ^b[15]),
		}
	}
	return nil
}

// CheckAddr reports why the control plane may not connect to ip, or nil
// when it may. The refusal wraps ErrAddressRefused.
func (g Guard) CheckAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	why := g.refusal(ip, g.AllowInsecureLoopback)
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w: %s is %s", ErrAddressRefused, ip, why)
}

// refusal returns why ip (unmapped) is refused, as "a private address",
// or "" when it is not. An IPv4 address carried in an IPv6 one is judged
// with allowLoopback false: the translator's or the tunnel's loopback is
// not the control plane's.
func (g Guard) refusal(ip netip.Addr, allowLoopback bool) string {
	why := ""
	switch {
	case !ip.IsValid():
		return "not an IP address"
	case ip.IsLoopback():
		if allowLoopback {
			return ""
		}
		why = "loopback"
	case ip.IsUnspecified():
		why = "unspecified"
	case ip.IsPrivate():
		why = "private"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		why = "link-local"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		why = "multicast"
	case ipv4Compatible.Contains(ip):
		why = "IPv4-compatible (deprecated)"
	}
	for _, p := range reserved {
		if why == "" && p.Contains(ip) {
			why = "reserved"
		}
	}
	if why != "" {
		return article(why) + " address"
	}
	for _, c := range embeddedIPv4(ip) {
		if inner := g.refusal(c.ip, false); inner != "" {
			return fmt.Sprintf("%s address of %s, %s", article(c.form), c.ip, inner)
		}
	}
	return ""
}

// article prefixes w with "a" or "an".
func article(w string) string {
	if strings.ContainsRune("aeiouAEIOU", rune(w[0])) {
		return "an " + w
	}
	return "a " + w
}

// CheckURL validates a webhook URL at registration: https:// (http:// only
// to loopback with AllowInsecureLoopback), no user info, a host, a valid
// port, and a host that resolves only to addresses CheckAddr allows (every
// one of them: a connection may use any). Errors say what is wrong in
// words a tenant can act on; refused addresses wrap ErrAddressRefused.
func (g Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && g.AllowInsecureLoopback:
	case u.Scheme == "http":
		return errors.New("must be https:// (http:// is allowed only to loopback, when the control plane runs with --webhook-allow-insecure-loopback)")
	default:
		return fmt.Errorf("scheme %q is not https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("must not contain user info; authenticate deliveries by their signature")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("has no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is not between 1 and 65535", p)
		}
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if err := g.CheckAddr(a); err != nil {
			return fmt.Errorf("host %s: %w", host, err)
		}
		if u.Scheme == "http" && !a.Unmap().IsLoopback() {
			return fmt.Errorf("host %s: http:// is allowed only to loopback addresses; %s is not one (use https://)", host, a)
		}
	}
	return nil
}

func (g Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("host %s does not resolve", host)
	}
	return addrs, nil
}

// dialer returns a dialer that refuses, right before connecting, every
// address CheckAddr refuses; with loopbackOnly (plain http://) also every
// address that is not loopback.
func (g Guard) dialer(loopbackOnly bool) *net.Dialer {
	return &net.Dialer{
		Timeout: 5 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: cannot parse %q", ErrAddressRefused, address)
			}
			if err := g.CheckAddr(ap.Addr()); err != nil {
				return err
			}
			if loopbackOnly && !ap.Addr().Unmap().IsLoopback() {
				return fmt.Errorf("%w: http:// only to loopback; %s is not", ErrAddressRefused, ap.Addr())
			}
			return nil
		},
	}
}
