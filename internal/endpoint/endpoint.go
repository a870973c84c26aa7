// Package endpoint turns the address a broker advertises into the URL its
// API is called at. An address is host:port, or a URL of scheme http or
// https with nothing after the port: a broker that serves TLS advertises
// https://host:port, so that clients and the other servers call it with
// TLS.
package endpoint

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// URL is the base URL of the API at addr: addr itself when it names a
// scheme, else scheme://addr (the scheme a caller uses for addresses
// without one: the control plane's for the SDK, http inside the cluster).
func URL(addr, scheme string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return scheme + "://" + addr
}

// Validate checks an advertised address: host:port with a port from 1 to
// 65535, optionally after http:// or https://.
func Validate(addr string) error {
	hostPort := addr
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("%q is neither host:port nor http(s)://host:port", addr)
		}
		hostPort = u.Host
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number between 1 and 65535", addr, port)
	}
	return nil
}

// Scheme is addr's scheme: http or https when it names one, else "".
func Scheme(addr string) string {
	if s, _, ok := strings.Cut(addr, "://"); ok {
		return s
	}
	return ""
}

type externalKey struct{}

// External marks ctx as a request's that came in on an external listener
// (a server's ConnContext for that listener's connections sets it).
func External(ctx context.Context) context.Context {
	return context.WithValue(ctx, externalKey{}, true)
}

// IsExternal reports whether ctx is a request's from an external
// listener.
func IsExternal(ctx context.Context) bool {
	v, _ := ctx.Value(externalKey{}).(bool)
	return v
}

// For is the address of a broker to give the caller of ctx: its external
// address when the call came in on an external listener and the broker
// has one, else its internal one (Kafka's advertised.listeners: a client
// gets the addresses of the listener it came in on).
func For(ctx context.Context, internal, external string) string {
	if external != "" && IsExternal(ctx) {
		return external
	}
	return internal
}
