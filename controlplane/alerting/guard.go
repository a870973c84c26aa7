package alerting

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
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
// rebinding) is refused all the same. Proxies from the environment are not
// used (the check would see the proxy's address), and redirects are not
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

// nat64 embeds an IPv4 address in its last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// CheckAddr reports why the control plane may not connect to ip, or nil
// when it may. The refusal wraps ErrAddressRefused.
func (g Guard) CheckAddr(ip netip.Addr) error {
	ip = ip.Unmap()
	why := ""
	switch {
	case !ip.IsValid():
		why = "not an IP address"
	case ip.IsLoopback():
		if g.AllowInsecureLoopback {
			return nil
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
	case nat64.Contains(ip):
		b := ip.As16()
		return g.CheckAddr(netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, p := range reserved {
		if why == "" && p.Contains(ip) {
			why = "reserved"
		}
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w: %s is a %s address", ErrAddressRefused, ip, why)
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
