package kafka

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/tenants"
)

// The SASL mechanisms served, as the handshake lists them (every answer
// lists them, success too: kafkajs reads them).
var mechanisms = []string{"PLAIN", "OAUTHBEARER"}

// session is a connection's authentication: SaslHandshake picks the
// mechanism, SaslAuthenticate (or, after a v0 handshake, a raw token
// frame) authenticates, and a client re-authenticates the same way
// before its session ends (KIP-368).
type session struct {
	mech      string // the handshake's mechanism; "" before one
	handshook bool   // a handshake awaits its authentication
	rawToken  bool   // after a v0 handshake: the next frame is a raw token

	p        tenants.Principal // the authenticated principal
	token    string            // its Sluice token (for calls made on its behalf)
	expires  time.Time         // when the session ends: its token's expiry
	done     bool              // authenticated once
	tenantID string

	// closeAfter closes the connection once the current answer is
	// written: a failed authentication.
	closeAfter bool
}

func (s *session) authenticated() bool { return s.done }

// check refuses a session past its expiry (KIP-368: the client should
// have re-authenticated), or whose key was revoked or tenant suspended
// since.
func (s *session) check(srv *Server) error {
	if time.Now().After(s.expires) {
		return fmt.Errorf("session of tenant %s expired at %s without re-authentication", s.tenantID, s.expires.Format(time.RFC3339))
	}
	if err := srv.d.Auth.Current(s.p); err != nil {
		return fmt.Errorf("session of tenant %s: %w", s.tenantID, err)
	}
	return nil
}

// context is ctx with the session's principal.
func (s *session) context(ctx context.Context) context.Context {
	if !s.done {
		return ctx
	}
	return tenants.WithPrincipal(ctx, s.p)
}

// headers are the session's credential as a call made on its behalf
// (a transaction's verification, an admin call) carries it.
func (s *session) headers() http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+s.token)
	return h
}

func (s *session) end(srv *Server) {
	if s.done {
		srv.metrics.tenantConnections.WithLabelValues(s.tenantID).Dec()
	}
}

func (c *conn) saslHandshake(req *kmsg.SASLHandshakeRequest) *kmsg.SASLHandshakeResponse {
	res := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	res.SupportedMechanisms = mechanisms
	mech := strings.ToUpper(req.Mechanism)
	if mech != "PLAIN" && mech != "OAUTHBEARER" {
		res.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		c.s.metrics.saslFailure("unsupported_mechanism")
		return res
	}
	if c.sess.done && (req.Version == 0 || mech != c.sess.mech) {
		// KIP-368: re-authentication keeps the mechanism and uses
		// SaslAuthenticate.
		res.ErrorCode = kerr.IllegalSaslState.Code
		c.s.metrics.saslFailure("illegal_state")
		return res
	}
	c.sess.mech, c.sess.handshook = mech, true
	c.sess.rawToken = req.Version == 0
	return res
}

func (c *conn) saslAuthenticate(ctx context.Context, req *kmsg.SASLAuthenticateRequest) *kmsg.SASLAuthenticateResponse {
	res := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	if !c.sess.handshook {
		res.ErrorCode = kerr.IllegalSaslState.Code
		res.ErrorMessage = ptr("SaslAuthenticate without a SaslHandshake before it")
		c.s.metrics.saslFailure("illegal_state")
		c.sess.closeAfter = true
		return res
	}
	c.sess.handshook = false
	lifetime, err := c.authenticate(ctx, req.SASLAuthBytes)
	if err != nil {
		res.ErrorCode = kerr.SaslAuthenticationFailed.Code
		res.ErrorMessage = ptr(err.Error())
		c.sess.closeAfter = true
		return res
	}
	if req.Version >= 1 {
		res.SessionLifetimeMillis = lifetime.Milliseconds()
	}
	return res
}

// rawSASL serves the raw token frame that follows a v0 handshake: the
// answer is a raw frame too (empty on success); a failure closes the
// connection.
func (c *conn) rawSASL(ctx context.Context, b []byte) ([]byte, time.Duration, error) {
	c.sess.rawToken, c.sess.handshook = false, false
	if _, err := c.authenticate(ctx, b); err != nil {
		return nil, 0, fmt.Errorf("SASL %s (v0 handshake): %w", c.sess.mech, err)
	}
	return make([]byte, 4), 0, nil // an empty frame
}

// authenticate checks a client's SASL message for the session's
// mechanism and starts (or renews) the session; it returns the session's
// lifetime. A failure is answered after a short delay (Kafka's
// connection.failed.authentication.delay.ms), so that guessing is slow.
func (c *conn) authenticate(ctx context.Context, msg []byte) (time.Duration, error) {
	var tok Token
	var p tenants.Principal
	var err error
	switch c.sess.mech {
	case "PLAIN":
		tok, p, err = c.plain(ctx, msg)
	case "OAUTHBEARER":
		tok, p, err = c.oauthBearer(ctx, msg)
	default:
		err = errors.New("no mechanism chosen")
	}
	if err == nil && c.sess.done && p.TenantID != c.sess.p.TenantID {
		err = errors.New("re-authentication as another tenant")
	}
	if err != nil {
		c.s.metrics.saslFailure(strings.ToLower(c.sess.mech))
		c.s.logger.Info("Kafka SASL authentication failed", "remote", c.remote, "mechanism", c.sess.mech, "err", err)
		_ = clock.Sleep(ctx, failedAuthDelay)
		return 0, err
	}
	if !c.sess.done {
		c.s.metrics.tenantConnections.WithLabelValues(p.TenantID).Inc()
	}
	c.sess.p, c.sess.token, c.sess.expires, c.sess.done, c.sess.tenantID = p, tok.Token, tok.Expires, true, p.TenantID
	return time.Until(tok.Expires), nil
}

// failedAuthDelay delays the answer to a failed authentication.
const failedAuthDelay = 100 * time.Millisecond

// plain checks a PLAIN message (RFC 4616: authzid NUL authcid NUL
// passwd): the username is the tenant's name (or id), the password one of
// its API keys, exchanged for a token at the control plane (cached until
// shortly before it expires).
func (c *conn) plain(ctx context.Context, msg []byte) (Token, tenants.Principal, error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return Token{}, tenants.Principal{}, errors.New("malformed PLAIN message")
	}
	authz, user, key := string(parts[0]), string(parts[1]), string(parts[2])
	if authz != "" && authz != user {
		return Token{}, tenants.Principal{}, errors.New("PLAIN: an authorization id other than the username is not supported")
	}
	if user == "" || key == "" {
		return Token{}, tenants.Principal{}, errors.New("PLAIN: the username (the tenant's name) and the password (an API key) must not be empty")
	}
	tok, err := c.s.tokens.get(ctx, key, func(ctx context.Context) (Token, error) {
		return c.s.d.Exchange(ctx, key, c.remote)
	})
	if err != nil {
		if k, ok := derr.KindOf(err); ok && k == derr.AuthenticationFailed || errors.Is(err, tenants.ErrInvalidToken) {
			return Token{}, tenants.Principal{}, errors.New("invalid username or password")
		}
		return Token{}, tenants.Principal{}, fmt.Errorf("PLAIN: %w", err)
	}
	if user != tok.TenantName && user != tok.TenantID {
		return Token{}, tenants.Principal{}, errors.New("invalid username or password")
	}
	p, err := c.s.d.Auth.Tenant(ctx, tok.Token)
	if err != nil {
		return Token{}, tenants.Principal{}, err
	}
	return tok, p, nil
}

// oauthBearer checks an OAUTHBEARER client message (RFC 7628:
// gs2-header, then kvpairs separated by 0x01, one of them
// "auth=Bearer <token>") whose token is a Sluice token.
func (c *conn) oauthBearer(ctx context.Context, msg []byte) (Token, tenants.Principal, error) {
	s := string(msg)
	i := strings.IndexByte(s, 0x01)
	if i < 0 || !strings.HasPrefix(s, "n,") && !strings.HasPrefix(s, "y,") {
		return Token{}, tenants.Principal{}, errors.New("malformed OAUTHBEARER message")
	}
	var bearer string
	for kv := range strings.SplitSeq(s[i+1:], "\x01") {
		if v, ok := strings.CutPrefix(kv, "auth="); ok {
			scheme, tok, _ := strings.Cut(v, " ")
			if !strings.EqualFold(scheme, "Bearer") {
				return Token{}, tenants.Principal{}, errors.New("OAUTHBEARER: auth must be \"Bearer <token>\"")
			}
			bearer = strings.TrimSpace(tok)
		}
	}
	if bearer == "" {
		return Token{}, tenants.Principal{}, errors.New("OAUTHBEARER: no token")
	}
	if strings.HasPrefix(bearer, tenants.APIKeyPrefix) {
		return Token{}, tenants.Principal{}, errors.New("OAUTHBEARER takes a token, not an API key: exchange the key for a token (sluice auth token), or use SASL PLAIN with the key as the password")
	}
	p, err := c.s.d.Auth.Tenant(ctx, bearer)
	if err != nil {
		return Token{}, tenants.Principal{}, err
	}
	return Token{Token: bearer, TenantID: p.TenantID, Expires: p.ExpiresAt}, p, nil
}

// tokenCache keeps the tokens API keys were exchanged for, by a hash of
// the key, until a minute before they expire, so that connecting clients
// do not each call the control plane; a bad key is never cached.
type tokenCache struct {
	mu sync.Mutex
	m  map[[32]byte]Token
}

const tokenCacheMax = 4096

func (t *tokenCache) get(ctx context.Context, key string, exchange func(context.Context) (Token, error)) (Token, error) {
	h := sha256.Sum256([]byte(key))
	t.mu.Lock()
	tok, ok := t.m[h]
	t.mu.Unlock()
	if ok && time.Until(tok.Expires) > time.Minute {
		return tok, nil
	}
	tok, err := exchange(ctx)
	if err != nil {
		return Token{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || len(t.m) >= tokenCacheMax {
		t.m = map[[32]byte]Token{}
	}
	t.m[h] = tok
	return tok, nil
}

func ptr[T any](v T) *T { return &v }
