// Package access decides who may call a data-plane broker: the
// Authenticator verifies tenants' tokens offline (the control plane's
// JWKS) and the brokers' shared credential, against the access rules every
// RPC declares ((sluice.v1.access), tenants.AccessRules), and refuses
// tokens of revoked API keys and of suspended tenants, from the deny-list
// (Revocations) PollRevocations keeps current from the control plane's
// revocation feed. It knows no protocol: the Connect interceptor
// (tenants.NewAuthInterceptor) calls it with a call's headers.
package access

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/tlsfiles"
	"github.com/sluicemq/sluice/tenants"
)

// ActForTenantHeader names the tenant a broker acts for when it calls a
// tenant procedure with the broker credential.
const ActForTenantHeader = "Sluice-Act-For-Tenant"

// rules are the procedures a broker serves, with who may call each: the
// (sluice.v1.access) options of the services in proto/sluice/v1, read once
// at start (tenants.AccessRules), the same declarations the control plane
// reads. Anything else is refused. Offsets inside a transaction
// (TxnCommitOffsets) need the produce and consume scopes, as Kafka's
// TxnOffsetCommit needs Write on the transactional id and Read on the
// group; Fetch and ListOffsets may also be called by another broker for a
// tenant (Rule.BrokerForTenant: the reads the group lag metrics make; the
// broker credential reads every partition through FetchReplica anyway).
var rules = tenants.MustAccessRules(tenants.ServerBroker)

// TokenCacheSize bounds the broker's cache of verified tokens (a few
// hundred bytes each): a client presents one token for its lifetime (15
// minutes by default), so this covers that many concurrent clients per
// broker; beyond it the least recently used token is verified again.
const TokenCacheSize = 16384

// Authenticator verifies tenant tokens offline (signature from the control
// plane's JWKS, iss, aud, exp) and refuses tokens of API keys on the
// revocation list and of tenants in the suspended set; other brokers
// present the shared broker credential.
//
// The verifier caches tokens that verified (tenants.VerifierConfig.CacheSize:
// until exp, and only while JWKS still holds their key), so most calls skip
// the Ed25519 check; the revocation list and the suspended set are checked
// below on every call, cached token or not, so the cache never delays a
// revocation or a suspension.
type Authenticator struct {
	verifier    *tenants.Verifier
	revoked     *Revocations
	brokerToken string
	// cluster, with mutual TLS inside the cluster (Source.Mutual), makes
	// a call with the broker credential present a cluster certificate
	// too: a broker's or the control plane's (tlsfiles.PeerOf).
	cluster *tlsfiles.Source
}

// RequirePeers makes calls with the broker credential present a client
// certificate from cluster's CA naming a broker or the control plane as
// well, when cluster has both a CA and a certificate of its own (mutual
// TLS inside the cluster); otherwise the credential alone is checked.
func (a *Authenticator) RequirePeers(cluster *tlsfiles.Source) {
	if cluster.Mutual() {
		a.cluster = cluster
	}
}

// broker checks a call made with the broker credential tok: the token and,
// with RequirePeers, the caller's certificate.
func (a *Authenticator) broker(ctx context.Context, tok, tenantID string) (tenants.Principal, error) {
	if subtle.ConstantTimeCompare([]byte(tok), []byte(a.brokerToken)) != 1 {
		return tenants.Principal{}, fmt.Errorf("%w: invalid broker credential", tenants.ErrInvalidToken)
	}
	p := tenants.Principal{Kind: tenants.PrincipalBroker, TenantID: tenantID}
	if a.cluster != nil {
		peer, err := a.cluster.PeerOf(tlsfiles.ConnState(ctx))
		if err != nil {
			return tenants.Principal{}, fmt.Errorf("%w: %w", tenants.ErrInvalidToken, err)
		}
		p.Peer = peer.String()
	}
	return p, nil
}

// NewAuthenticator is an Authenticator of tenants' tokens by verifier, of
// the deny-list revoked, and of the brokers' shared credential brokerToken.
func NewAuthenticator(verifier *tenants.Verifier, revoked *Revocations, brokerToken string) *Authenticator {
	return &Authenticator{verifier: verifier, revoked: revoked, brokerToken: brokerToken}
}

func (a *Authenticator) Authenticate(ctx context.Context, procedure string, h http.Header) (tenants.Principal, error) {
	r, ok := rules[procedure]
	if !ok {
		if tenants.IsInfrastructureProcedure(procedure) {
			return tenants.Principal{Kind: tenants.PrincipalAnonymous}, nil
		}
		return tenants.Principal{}, tenants.ErrUnknownProcedure
	}
	tok, err := tenants.BearerToken(h)
	if err != nil {
		return tenants.Principal{}, err
	}
	if tenantID := h.Get(ActForTenantHeader); tenantID != "" && r.BrokerForTenant {
		// Only the broker credential may name a tenant; a tenant's token
		// with this header is refused, never read as another tenant's.
		return a.broker(ctx, tok, tenantID)
	}
	switch r.Caller {
	case tenants.CallerBroker:
		return a.broker(ctx, tok, "")
	case tenants.CallerTenant:
		if strings.HasPrefix(tok, tenants.APIKeyPrefix) {
			return tenants.Principal{}, fmt.Errorf("%w: an API key is not a token; exchange it at the control plane (AuthService.CreateToken)", tenants.ErrInvalidToken)
		}
		p, err := a.Tenant(ctx, tok)
		if err != nil {
			return tenants.Principal{}, err
		}
		for _, scope := range r.Scopes {
			if !p.Has(scope) {
				return tenants.Principal{}, fmt.Errorf("%w: this call needs the %q scope", tenants.ErrPermissionDenied, scope)
			}
		}
		return p, nil
	}
	return tenants.Principal{}, fmt.Errorf("%w: procedure not allowed", tenants.ErrPermissionDenied)
}

// Tenant verifies a tenant's token tok (signature, iss, aud, exp) and
// refuses it when its API key is revoked or its tenant suspended: what
// every tenant call is checked for, whatever the protocol (a Kafka
// session checks its principal again with Current on every request).
func (a *Authenticator) Tenant(ctx context.Context, tok string) (tenants.Principal, error) {
	p, err := a.verifier.Verify(ctx, tok)
	if err != nil {
		return tenants.Principal{}, err
	}
	if err := a.Current(p); err != nil {
		return tenants.Principal{}, err
	}
	return p, nil
}

// Current refuses a tenant principal verified before (a Kafka session's)
// whose API key has been revoked or whose tenant has been suspended
// since.
func (a *Authenticator) Current(p tenants.Principal) error {
	if !a.revoked.loaded.Load() {
		// Fail closed: until the feed has answered once, a revoked
		// key's token could not be told apart.
		return derr.New(derr.Unavailable, "broker starting: the API key revocation list is not loaded yet; retry")
	}
	if a.revoked.Has(p.APIKeyID) {
		return fmt.Errorf("%w: the token's API key was revoked", tenants.ErrInvalidToken)
	}
	if a.revoked.Suspended(p.TenantID) {
		return ErrTenantSuspended
	}
	return nil
}

// ErrTenantSuspended refuses a suspended tenant's calls. PermissionDenied,
// as on the control plane, and not Unauthenticated: the token is valid and
// a fresh one would be refused too (CreateToken refuses the tenant), so a
// client must stop, not re-authenticate; once the tenant is reinstated the
// same token works again.
var ErrTenantSuspended = fmt.Errorf("%w: tenant is suspended", tenants.ErrPermissionDenied)

// Revocations is the broker's deny-list, fed by polling the control
// plane's revocation feed: the ids of revoked API keys, each kept until
// every token of that key has expired, and the set of suspended tenants,
// replaced by every answer (the feed carries the whole set).
type Revocations struct {
	mu     sync.RWMutex
	keys   map[string]time.Time // key id → when to forget it
	susp   map[string]bool      // suspended tenant ids
	loaded atomic.Bool          // the feed answered at least once
	// changed is closed, and replaced, whenever the suspended set changes;
	// waiting calls watch it (untilSuspended).
	changed chan struct{}
}

func NewRevocations() *Revocations {
	return &Revocations{keys: map[string]time.Time{}, susp: map[string]bool{}, changed: make(chan struct{})}
}

// Loaded reports whether the revocation feed has answered at least once:
// until then the Authenticator refuses tenants' tokens (fail closed).
func (r *Revocations) Loaded() bool { return r.loaded.Load() }

// MarkLoaded marks the list loaded without the feed: for a broker's tests
// that serve without a control plane.
func (r *Revocations) MarkLoaded() { r.loaded.Store(true) }

// Has reports whether the API key keyID is revoked.
func (r *Revocations) Has(keyID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.keys[keyID]
	return ok
}

// suspended reports whether the tenant is in the suspended set.
func (r *Revocations) Suspended(tenantID string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.susp[tenantID]
}

// setSuspended replaces the suspended set with ids.
func (r *Revocations) SetSuspended(ids []string) {
	next := make(map[string]bool, len(ids))
	for _, id := range ids {
		next[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if maps.Equal(next, r.susp) {
		return
	}
	r.susp = next
	close(r.changed)
	r.changed = make(chan struct{})
}

// untilSuspended returns a context that is cancelled, with cause
// ErrTenantSuspended, as soon as the tenant joins the suspended set, so a
// call waiting for data (a long-poll fetch) ends then rather than when its
// wait does. Call stop when done with it.
func (r *Revocations) UntilSuspended(ctx context.Context, tenantID string) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			r.mu.RLock()
			susp, changed := r.susp[tenantID], r.changed
			r.mu.RUnlock()
			if susp {
				cancel(ErrTenantSuspended)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Add revokes the API key keyID until forgetAt (when its last token has
// expired).
func (r *Revocations) Add(keyID string, forgetAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.keys[keyID]; !ok || forgetAt.After(cur) {
		r.keys[keyID] = forgetAt
	}
}

// Expire forgets the keys whose last token has expired by now.
func (r *Revocations) Expire(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, at := range r.keys {
		if now.After(at) {
			delete(r.keys, k)
		}
	}
}

// PollRevocations keeps r current until ctx ends: every interval it asks for
// keys revoked since the previous answer's server time (minus a margin for
// clock skew between control-plane replicas), and takes the suspended set
// of every answer as the current one. When the control plane cannot be
// reached, r keeps what it last heard. loaded is called after the first
// answer.
func PollRevocations(ctx context.Context, list func(context.Context, *sluicev1.ListRevokedAPIKeysRequest) (*sluicev1.ListRevokedAPIKeysResponse, error), r *Revocations, interval time.Duration, logger *slog.Logger, loaded func()) {
	const margin = 10 * time.Second
	const keep = tenants.MaxTokenTTL + tenants.MaxLeeway
	var since *timestamppb.Timestamp
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		res, err := list(ctx, &sluicev1.ListRevokedAPIKeysRequest{Since: since})
		if err == nil {
			for _, k := range res.GetKeys() {
				r.Add(k.GetId(), k.GetRevokeTime().AsTime().Add(keep))
			}
			r.SetSuspended(res.GetSuspendedTenantIds())
			since = timestamppb.New(res.GetServerTime().AsTime().Add(-margin))
			r.Expire(time.Now())
			if !r.loaded.Swap(true) {
				loaded()
			}
		} else if ctx.Err() == nil {
			logger.Warn("poll Revocations", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
