package tenants

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MaxTokenBytes caps a token (and an Authorization header) before any parsing: a token made of
// thousands of dots made jwt-go allocate without bound (CVE-2025-30204).
const MaxTokenBytes = 8 << 10

// DefaultLeeway is the clock skew a Verifier tolerates when VerifierConfig.Leeway is zero.
const DefaultLeeway = 5 * time.Second

// ErrInvalidToken is wrapped by every token rejection. The full error reads
// "invalid token: <reason>" with a short reason fit for the caller ("token expired",
// "unknown key id", "wrong audience", ...); it never carries key material or claims.
var ErrInvalidToken = errors.New("invalid token")

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	Issuer   string           // expected "iss"; required
	Audience string           // expected in "aud"; required
	Leeway   time.Duration    // clock skew for exp/nbf/iat: 0 means DefaultLeeway, capped at MaxLeeway
	Now      func() time.Time // clock, for tests; nil means time.Now
	// CacheSize is how many verified tokens the Verifier remembers, least recently used
	// dropped first, so that a token presented again skips the signature check until its exp;
	// 0 means no cache. See Verify for what a cached token must still pass.
	CacheSize int
}

// Verifier checks tenant JWTs offline against a KeySource. Safe for concurrent use.
type Verifier struct {
	cfg    VerifierConfig
	keys   KeySource
	parser *jwt.Parser
	cache  *tokenCache // nil without VerifierConfig.CacheSize
}

// NewVerifier returns a Verifier resolving signing keys only through keys. A config without
// issuer or audience makes every Verify fail (it never skips those checks).
func NewVerifier(cfg VerifierConfig, keys KeySource) *Verifier {
	if cfg.Leeway <= 0 {
		cfg.Leeway = DefaultLeeway
	}
	cfg.Leeway = min(cfg.Leeway, MaxLeeway)
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodEdDSA.Alg()}),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
	}
	if cfg.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(cfg.Now))
	}
	v := &Verifier{cfg: cfg, keys: keys, parser: jwt.NewParser(opts...)}
	if cfg.CacheSize > 0 {
		v.cache = newTokenCache(cfg.CacheSize)
	}
	return v
}

func (v *Verifier) now() time.Time {
	if v.cfg.Now != nil {
		return v.cfg.Now()
	}
	return time.Now()
}

// CachedTokens is the number of verified tokens the Verifier remembers (0 without a cache).
func (v *Verifier) CachedTokens() int {
	if v.cache == nil {
		return 0
	}
	return v.cache.len()
}

// keyError carries a user-facing reason out of the key function.
type keyError struct {
	reason string
	err    error
}

func (e *keyError) Error() string { return e.reason }
func (e *keyError) Unwrap() error { return e.err }

func invalidToken(reason string) error { return fmt.Errorf("%w: %s", ErrInvalidToken, reason) }

// Verify checks token and returns its PrincipalTenant. It accepts only EdDSA tokens whose kid
// header names a key of the KeySource (jku, x5u and jwk headers are ignored), with the expected
// iss and aud, an exp (and nbf/iat, when present) valid within the leeway, a tenant id, valid
// scopes, an API key id and the matching subject. Rejections wrap ErrInvalidToken (and
// ErrUnknownKey for an unknown kid). Other errors (a KeySource that failed for another reason, a
// misconfigured Verifier) do not wrap ErrInvalidToken: they are server faults.
//
// With a cache (VerifierConfig.CacheSize), a token that verified before is accepted again without
// the signature check while the clock is before its exp (strictly: no leeway) and the KeySource
// still returns the same key for its kid; otherwise it is verified in full again. Only tokens that
// verified are cached. Revocation and suspension are checked by the caller on every call.
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	if v.cfg.Issuer == "" || v.cfg.Audience == "" {
		return Principal{}, errors.New("verify token: verifier has no issuer or audience configured")
	}
	switch {
	case token == "":
		return Principal{}, invalidToken("empty token")
	case len(token) > MaxTokenBytes:
		return Principal{}, invalidToken("token too large")
	}
	if v.cache != nil {
		if p, ok := v.cache.get(ctx, token, v.now(), v.keys); ok {
			return p, nil
		}
	}
	var claims tokenClaims
	var keyErr error // a KeySource failure that is not the token's fault
	var usedKID string
	var usedKey ed25519.PublicKey
	tok, err := v.parser.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		if _, ok := t.Method.(*jwt.SigningMethodEd25519); !ok {
			return nil, &keyError{reason: "unsupported signing algorithm"}
		}
		if _, ok := t.Header["crit"]; ok {
			return nil, &keyError{reason: "unsupported critical header"}
		}
		kid, ok := t.Header["kid"].(string)
		if !ok || kid == "" {
			return nil, &keyError{reason: "missing key id"}
		}
		key, err := v.keys.PublicKey(ctx, kid)
		if errors.Is(err, ErrUnknownKey) {
			return nil, &keyError{reason: "unknown key id", err: ErrUnknownKey}
		}
		if err != nil {
			keyErr = err
			return nil, err
		}
		if len(key) != ed25519.PublicKeySize {
			keyErr = fmt.Errorf("key source returned a %d-byte key for %q", len(key), kid)
			return nil, keyErr
		}
		usedKID, usedKey = kid, key
		return key, nil // the ed25519.PublicKey type is what SigningMethodEd25519 requires
	})
	if keyErr != nil {
		return Principal{}, fmt.Errorf("verify token: resolve key: %w", keyErr)
	}
	if err != nil {
		var ke *keyError
		if errors.As(err, &ke) {
			if ke.err != nil {
				return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, ke.err)
			}
			return Principal{}, invalidToken(ke.reason)
		}
		return Principal{}, invalidToken(rejectReason(tok, err))
	}
	switch {
	case claims.TenantID == "":
		return Principal{}, invalidToken("missing tenant id")
	case claims.APIKeyID == "" || claims.Subject != apiKeySubjectPrefix+claims.APIKeyID:
		return Principal{}, invalidToken("invalid subject")
	case ValidateScopes(claims.Scopes) != nil:
		return Principal{}, invalidToken("invalid scopes")
	}
	p := Principal{
		Kind:      PrincipalTenant,
		TenantID:  claims.TenantID,
		APIKeyID:  claims.APIKeyID,
		Scopes:    claims.Scopes,
		TokenID:   claims.ID,
		ExpiresAt: claims.ExpiresAt.Time, // required by the parser, so non-nil
	}
	if v.cache != nil {
		v.cache.put(token, usedKID, usedKey, p)
	}
	return p, nil
}

// rejectReason turns a jwt parse error into a short reason for the caller.
func rejectReason(tok *jwt.Token, err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "malformed token"
	case errors.Is(err, jwt.ErrTokenUnverifiable): // alg missing or not implemented
		return "unsupported signing algorithm"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		if tok != nil && tok.Method != nil && tok.Method.Alg() != jwt.SigningMethodEdDSA.Alg() {
			return "unsupported signing algorithm"
		}
		return "invalid signature"
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "wrong issuer"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "wrong audience"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return "missing required claim"
	}
	return "rejected"
}
