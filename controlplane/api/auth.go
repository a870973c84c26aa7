package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
)

// rules are the procedures the control plane serves, with who may call
// each: the (sluice.v1.access) options of the services in proto/sluice/v1,
// read once at start (tenants.AccessRules), the same declarations the
// brokers read. A procedure missing here is refused (those of the brokers'
// services with a pointer to the brokers, servedByBrokers): a new RPC
// declares its rule in its .proto to be reachable.
var rules = tenants.MustAccessRules(tenants.ServerControlPlane)

// authenticator decides who is calling. Tenant tokens are verified offline
// (signature, iss, aud, exp), then — unlike on brokers — the API key they
// were minted from is checked against the store on every request, so a
// revoked key stops working at once, and a suspended tenant is refused.
type authenticator struct {
	logger        *slog.Logger
	store         store.Store
	verifier      *tenants.Verifier
	operatorToken string
	brokerToken   string
	// cluster, with mutual TLS inside the cluster, makes BrokerService
	// calls present a broker's cluster certificate besides the token.
	cluster *tlsfiles.Source
}

func (a *authenticator) Authenticate(ctx context.Context, procedure string, h http.Header) (tenants.Principal, error) {
	r, ok := rules[procedure]
	if !ok {
		if tenants.IsInfrastructureProcedure(procedure) {
			return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
		}
		if err := servedByBrokers(procedure); err != nil {
			return tenants.Principal{}, err
		}
		return tenants.Principal{}, tenants.ErrUnknownProcedure
	}
	switch r.Caller {
	case tenants.CallerPublic:
		return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
	case tenants.CallerOperator:
		if err := checkSharedSecret(h, a.operatorToken, "operator"); err != nil {
			return tenants.Principal{}, err
		}
		return tenants.Principal{Kind: tenants.PrincipalOperator}, nil
	case tenants.CallerBroker:
		if err := checkSharedSecret(h, a.brokerToken, "broker"); err != nil {
			return tenants.Principal{}, err
		}
		p := tenants.Principal{Kind: tenants.PrincipalBroker}
		if a.cluster != nil {
			peer, err := a.cluster.PeerOf(tlsfiles.ConnState(ctx))
			if err == nil && peer.ControlPlane {
				err = fmt.Errorf("%w: the control plane's certificate is not a broker's", tlsfiles.ErrNoPeer)
			}
			if err != nil {
				return tenants.Principal{}, fmt.Errorf("%w: %w", tenants.ErrInvalidToken, err)
			}
			p.Peer = peer.String()
		}
		return p, nil
	case tenants.CallerTenant:
		return a.tenant(ctx, h, r.Scopes)
	}
	return tenants.Principal{}, fmt.Errorf("%w: procedure not allowed", tenants.ErrPermissionDenied)
}

func (a *authenticator) tenant(ctx context.Context, h http.Header, scopes []string) (tenants.Principal, error) {
	tok, err := tenants.BearerToken(h)
	if err != nil {
		return tenants.Principal{}, err
	}
	if strings.HasPrefix(tok, tenants.APIKeyPrefix) {
		return tenants.Principal{}, fmt.Errorf("%w: an API key is not a token; exchange it for one with AuthService.CreateToken", tenants.ErrInvalidToken)
	}
	p, err := a.verifier.Verify(ctx, tok)
	if err != nil {
		return tenants.Principal{}, err
	}
	key, err := a.store.GetAPIKey(ctx, p.APIKeyID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tenants.Principal{}, fmt.Errorf("%w: the token's API key no longer exists", tenants.ErrInvalidToken)
	case err != nil:
		a.logger.ErrorContext(ctx, "authenticate: look up API key", "key", p.APIKeyID, "err", err)
		return tenants.Principal{}, fmt.Errorf("look up API key: %w", err)
	case key.TenantID != p.TenantID:
		return tenants.Principal{}, fmt.Errorf("%w: token does not match its API key", tenants.ErrInvalidToken)
	case key.Revoked():
		return tenants.Principal{}, fmt.Errorf("%w: the token's API key was revoked", tenants.ErrInvalidToken)
	}
	t, err := a.store.GetTenant(ctx, p.TenantID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return tenants.Principal{}, fmt.Errorf("%w: tenant no longer exists", tenants.ErrInvalidToken)
	case err != nil:
		a.logger.ErrorContext(ctx, "authenticate: look up tenant", "tenant", p.TenantID, "err", err)
		return tenants.Principal{}, fmt.Errorf("look up tenant: %w", err)
	case t.Status != store.TenantActive:
		return tenants.Principal{}, fmt.Errorf("%w: tenant is %s", tenants.ErrPermissionDenied, t.Status)
	}
	for _, scope := range scopes {
		if !p.Has(scope) {
			return tenants.Principal{}, fmt.Errorf("%w: this call needs the %q scope", tenants.ErrPermissionDenied, scope)
		}
	}
	return p, nil
}

// checkSharedSecret compares the bearer token with a configured secret in
// constant time. An unset secret disables that kind of caller entirely.
func checkSharedSecret(h http.Header, secret, who string) error {
	if secret == "" {
		return fmt.Errorf("%w: %s API disabled (no %s token configured)", tenants.ErrPermissionDenied, who, who)
	}
	tok, err := tenants.BearerToken(h)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(tok), []byte(secret)) != 1 {
		return fmt.Errorf("%w: invalid %s credential", tenants.ErrInvalidToken, who)
	}
	return nil
}

// principal returns the authenticated tenant caller placed in ctx by the
// auth interceptor. Handlers read the tenant only from here.
func principal(ctx context.Context) (tenants.Principal, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.Kind != tenants.PrincipalTenant || p.TenantID == "" {
		return tenants.Principal{}, errors.New("no tenant principal in context")
	}
	return p, nil
}
