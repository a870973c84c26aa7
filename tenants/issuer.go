package tenants

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// MaxLeeway is the largest clock skew a Verifier tolerates, and the margin the Issuer keeps a
// retired key published for after its last token expired.
const MaxLeeway = 30 * time.Second

// DefaultTokenTTL is the token lifetime when IssuerConfig.TokenTTL is zero.
const DefaultTokenTTL = 15 * time.Minute

// MaxTokenTTL bounds IssuerConfig.TokenTTL: tokens are not revocable by themselves (see the
// package doc), so their life stays short.
const MaxTokenTTL = 24 * time.Hour

// ErrNoSigningKey is returned by Mint when no key in the set may sign now.
var ErrNoSigningKey = errors.New("no active signing key")

// ErrUnknownKey is returned by a KeySource for a kid it does not know.
var ErrUnknownKey = errors.New("unknown key id")

// SigningKey is one Ed25519 key of the control plane's token-signing key set.
type SigningKey struct {
	KID     string
	Private ed25519.PrivateKey
	// CreatedAt is when the key may start signing. A key created in the future is already
	// published in JWKS, so a rotation can pre-publish the next key before using it.
	CreatedAt time.Time
	// RetiredAt is when the key stopped signing; zero means active. A retired key stays
	// published (and trusted) until RetiredAt + TokenTTL + MaxLeeway, when its last token expired.
	RetiredAt time.Time
}

// GenerateSigningKey returns a new active key created at now, with a random 16-character kid.
func GenerateSigningKey(now time.Time) (SigningKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return SigningKey{}, fmt.Errorf("generate ed25519 key: %w", err)
	}
	var kid [12]byte
	if _, err := rand.Read(kid[:]); err != nil {
		return SigningKey{}, fmt.Errorf("read random: %w", err)
	}
	return SigningKey{KID: base64.RawURLEncoding.EncodeToString(kid[:]), Private: priv, CreatedAt: now}, nil
}

// Public returns the key's public half.
func (k SigningKey) Public() ed25519.PublicKey {
	return k.Private.Public().(ed25519.PublicKey)
}

// Validate checks that k has a kid and a well-formed private key.
func (k SigningKey) Validate() error {
	switch {
	case k.KID == "":
		return errors.New("signing key: empty kid")
	case len(k.Private) != ed25519.PrivateKeySize:
		return fmt.Errorf("signing key %s: private key is %d bytes, want %d", k.KID, len(k.Private), ed25519.PrivateKeySize)
	case !k.RetiredAt.IsZero() && k.RetiredAt.Before(k.CreatedAt):
		return fmt.Errorf("signing key %s: retired before created", k.KID)
	}
	return nil
}

// canSign reports whether k may sign a token at now.
func (k SigningKey) canSign(now time.Time) bool {
	return !now.Before(k.CreatedAt) && (k.RetiredAt.IsZero() || now.Before(k.RetiredAt))
}

// published reports whether k is in JWKS (and trusted) at now.
func (k SigningKey) published(now time.Time, ttl time.Duration) bool {
	return k.RetiredAt.IsZero() || now.Before(k.RetiredAt.Add(ttl+MaxLeeway))
}

// IssuerConfig configures an Issuer.
type IssuerConfig struct {
	Issuer   string        // "iss": the control plane's public URL
	Audience string        // "aud": what brokers and the control plane expect, e.g. "sluice"
	TokenTTL time.Duration // token lifetime; 0 means DefaultTokenTTL
}

// Validate names the first bad field of c (after defaults).
func (c IssuerConfig) Validate() error {
	switch {
	case c.Issuer == "":
		return errors.New("issuer: must not be empty")
	case c.Audience == "":
		return errors.New("audience: must not be empty")
	case c.TokenTTL < time.Second || c.TokenTTL > MaxTokenTTL:
		return fmt.Errorf("token TTL: must be in [1s, %s], got %s", MaxTokenTTL, c.TokenTTL)
	}
	return nil
}

// Issuer mints tenant JWTs and publishes its public keys as JWKS. Its key set comes from the
// store through SetKeys; all methods are safe for concurrent use.
type Issuer struct {
	cfg  IssuerConfig
	keys atomic.Pointer[[]SigningKey] // immutable once stored; newest CreatedAt first
	now  func() time.Time             // for KeySource's publication window
}

// NewIssuer returns an Issuer without keys; call SetKeys before Mint.
func NewIssuer(cfg IssuerConfig) *Issuer {
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	i := &Issuer{cfg: cfg, now: time.Now}
	i.keys.Store(new([]SigningKey))
	return i
}

// SetKeys replaces the key set, e.g. after the store rotated keys. Keys failing
// SigningKey.Validate and repeated kids (after the first) are dropped; validate keys when
// loading them to see why. The slice is copied. To stop trusting a compromised key at once,
// remove it from the set rather than retiring it.
func (i *Issuer) SetKeys(keys []SigningKey) {
	set := make([]SigningKey, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if k.Validate() != nil || seen[k.KID] {
			continue
		}
		seen[k.KID] = true
		set = append(set, k)
	}
	slices.SortStableFunc(set, func(a, b SigningKey) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.KID, b.KID))
	})
	i.keys.Store(&set)
}

// tokenClaims is the JWT body. Standard claims plus tenant id, scopes and API key id.
type tokenClaims struct {
	jwt.RegisteredClaims
	TenantID string   `json:"tid"`
	Scopes   []string `json:"scp"`
	APIKeyID string   `json:"akid"`
}

const apiKeySubjectPrefix = "apikey:"

// Mint signs a token for p (which must be a PrincipalTenant with a tenant id, an API key id and
// valid scopes) with the newest key that may sign at now. The token carries kid in its header
// and iss, aud, sub ("apikey:<id>"), iat, nbf, exp (now + TokenTTL), jti (a UUIDv7), tid, scp
// and akid. It returns the token and its expiry (whole seconds, as in the token).
func (i *Issuer) Mint(now time.Time, p Principal) (token string, expiresAt time.Time, err error) {
	if err := i.cfg.Validate(); err != nil {
		return "", time.Time{}, fmt.Errorf("mint: %w", err)
	}
	switch {
	case p.Kind != PrincipalTenant:
		return "", time.Time{}, fmt.Errorf("mint: principal kind %s, want tenant", p.Kind)
	case p.TenantID == "":
		return "", time.Time{}, errors.New("mint: empty tenant id")
	case p.APIKeyID == "":
		return "", time.Time{}, errors.New("mint: empty api key id")
	}
	if err := ValidateScopes(p.Scopes); err != nil {
		return "", time.Time{}, fmt.Errorf("mint: %w", err)
	}
	var key *SigningKey
	for _, k := range *i.keys.Load() {
		if k.canSign(now) {
			key = &k
			break
		}
	}
	if key == nil {
		return "", time.Time{}, ErrNoSigningKey
	}
	jti, err := uuid.NewV7()
	if err != nil {
		return "", time.Time{}, fmt.Errorf("mint: new token id: %w", err)
	}
	iat := jwt.NewNumericDate(now)
	exp := jwt.NewNumericDate(now.Add(i.cfg.TokenTTL))
	t := jwt.NewWithClaims(jwt.SigningMethodEdDSA, tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    i.cfg.Issuer,
			Subject:   apiKeySubjectPrefix + p.APIKeyID,
			Audience:  jwt.ClaimStrings{i.cfg.Audience},
			ExpiresAt: exp,
			NotBefore: iat,
			IssuedAt:  iat,
			ID:        jti.String(),
		},
		TenantID: p.TenantID,
		Scopes:   slices.Clone(p.Scopes),
		APIKeyID: p.APIKeyID,
	})
	t.Header["kid"] = key.KID
	token, err = t.SignedString(key.Private)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("mint: sign: %w", err)
	}
	return token, exp.Time, nil
}

// jwk is one JSON Web Key (RFC 7517, RFC 8037 for OKP).
type jwk struct {
	Kty string `json:"kty"`
	Crv string `json:"crv,omitempty"`
	X   string `json:"x,omitempty"`
	D   string `json:"d,omitempty"`
	Kid string `json:"kid,omitempty"`
	Use string `json:"use,omitempty"`
	Alg string `json:"alg,omitempty"`
}

type jwkSet struct {
	Keys []jwk `json:"keys"`
}

// JWKS returns the public key set as served at the control plane's JWKS URL: every active key
// (including pre-published ones) and every retired key whose RetiredAt + TokenTTL + MaxLeeway is
// after now, so tokens it signed keep verifying until the last of them expired. Newest first.
func (i *Issuer) JWKS(now time.Time) ([]byte, error) {
	set := jwkSet{Keys: []jwk{}}
	for _, k := range *i.keys.Load() {
		if !k.published(now, i.cfg.TokenTTL) {
			continue
		}
		set.Keys = append(set.Keys, jwk{
			Kty: "OKP",
			Crv: "Ed25519",
			X:   base64.RawURLEncoding.EncodeToString(k.Public()),
			Kid: k.KID,
			Use: "sig",
			Alg: jwt.SigningMethodEdDSA.Alg(),
		})
	}
	b, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("encode jwks: %w", err)
	}
	return b, nil
}

// KeySource resolves a token's kid to the public key that must have signed it.
type KeySource interface {
	// PublicKey returns the key for kid, or an error wrapping ErrUnknownKey.
	PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// KeySource returns a KeySource over the issuer's current key set, for the control plane's own
// Verifier. It trusts exactly the keys JWKS publishes at the time of the call.
func (i *Issuer) KeySource() KeySource { return issuerKeys{i} }

type issuerKeys struct{ i *Issuer }

func (s issuerKeys) PublicKey(_ context.Context, kid string) (ed25519.PublicKey, error) {
	now := s.i.now()
	for _, k := range *s.i.keys.Load() {
		if k.KID == kid && k.published(now, s.i.cfg.TokenTTL) {
			return k.Public(), nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownKey, kid)
}
