package tenants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// PrincipalKind says who is calling.
type PrincipalKind uint8

const (
	// PrincipalAnonymous is an unauthenticated caller of a public procedure. It is the zero
	// value, so a Principal nobody filled in has no tenant and no scopes.
	PrincipalAnonymous PrincipalKind = iota
	// PrincipalTenant acts for one tenant, with the scopes of the API key it came from.
	PrincipalTenant
	// PrincipalOperator is a Sluice operator (cluster administration, not bound to a tenant).
	PrincipalOperator
	// PrincipalBroker is a data-plane broker calling the control plane's internal services.
	PrincipalBroker
)

func (k PrincipalKind) String() string {
	switch k {
	case PrincipalAnonymous:
		return "anonymous"
	case PrincipalTenant:
		return "tenant"
	case PrincipalOperator:
		return "operator"
	case PrincipalBroker:
		return "broker"
	}
	return fmt.Sprintf("PrincipalKind(%d)", uint8(k))
}

// Principal is the authenticated caller of a request. Handlers take the tenant only from here,
// never from the request message.
type Principal struct {
	Kind      PrincipalKind
	TenantID  string    // set for PrincipalTenant
	APIKeyID  string    // the API key the credential came from (PrincipalTenant)
	Scopes    []string  // what the caller may do within TenantID
	TokenID   string    // jti of the JWT, when authenticated by one
	ExpiresAt time.Time // expiry of the credential; zero if it does not expire
	BrokerID  int32     // set for PrincipalBroker
	// Peer, for PrincipalBroker with mutual TLS inside the cluster, is
	// the server the caller's client certificate proved it is, as its
	// identity says: "sluice://broker/3" or "sluice://controlplane"
	// (internal/tlsfiles); a call whose message names the calling broker
	// must name this one (NewAuthInterceptor). Empty without mutual TLS.
	Peer string
}

// Has reports whether p carries scope. Anonymous principals have no scopes.
func (p Principal) Has(scope string) bool {
	return p.Kind != PrincipalAnonymous && slices.Contains(p.Scopes, scope)
}

// ErrPermissionDenied is for an authenticated caller that may not do what it asked; the auth
// interceptor and API packages map it to CodePermissionDenied.
var ErrPermissionDenied = errors.New("permission denied")

// Require returns nil if p has scope, else an error wrapping ErrPermissionDenied that names it.
func (p Principal) Require(scope string) error {
	if p.Has(scope) {
		return nil
	}
	return fmt.Errorf("%w: scope %q required", ErrPermissionDenied, scope)
}

type principalKey struct{}

// WithPrincipal returns a context carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal stored by WithPrincipal (the auth interceptor does so for
// every server-side call), and false when there is none.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
