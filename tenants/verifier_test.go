package tenants

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

const (
	testIssuer   = "https://cp.sluice.test"
	testAudience = "sluice"
)

// tokenEnv is the setup bundle of the token tests: an Issuer with one active key and a Verifier
// that trusts the Issuer's keys.
type tokenEnv struct {
	issuer   *Issuer
	key      SigningKey
	verifier *Verifier
	tenant   Principal
}

func setupTokens(t *testing.T) *tokenEnv {
	t.Helper()
	key, err := GenerateSigningKey(time.Now().Add(-time.Hour))
	require.NoError(t, err)
	iss := NewIssuer(IssuerConfig{Issuer: testIssuer, Audience: testAudience, TokenTTL: 15 * time.Minute})
	iss.SetKeys([]SigningKey{key})
	return &tokenEnv{
		issuer:   iss,
		key:      key,
		verifier: NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience}, iss.KeySource()),
		tenant: Principal{
			Kind:     PrincipalTenant,
			TenantID: "8a4f0c62-9c1e-4a7e-9d55-0f5b8e1c2d3a",
			APIKeyID: "0123456789abcdef",
			Scopes:   []string{ScopeProduce, ScopeConsume},
		},
	}
}

// claims returns valid claims for the env's tenant, relative to now.
func (e *tokenEnv) claims() jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss":  testIssuer,
		"aud":  []string{testAudience},
		"sub":  "apikey:" + e.tenant.APIKeyID,
		"iat":  now.Unix(),
		"nbf":  now.Unix(),
		"exp":  now.Add(10 * time.Minute).Unix(),
		"jti":  "tok-1",
		"tid":  e.tenant.TenantID,
		"scp":  e.tenant.Scopes,
		"akid": e.tenant.APIKeyID,
	}
}

// sign signs claims with method and key; header entries are added to the default header
// ({"alg", "typ"}), and a nil value removes one.
func sign(t *testing.T, method jwt.SigningMethod, header map[string]any, claims jwt.MapClaims, key any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		if v == nil {
			delete(tok.Header, k)
			continue
		}
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

// with returns a copy of c with the given claims changed (nil deletes).
func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

var (
	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
)

func testRSAKey(t *testing.T) *rsa.PrivateKey {
	rsaOnce.Do(func() {
		var err error
		rsaKey, err = rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
	})
	return rsaKey
}

func TestTokenRejected(t *testing.T) {
	t.Parallel()
	attackerPub, attackerPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	attackerJWK := map[string]any{"kty": "OKP", "crv": "Ed25519", "x": base64.RawURLEncoding.EncodeToString(attackerPub), "kid": "attacker"}
	// The attacker's JWKS server: the verifier must never fetch from a URL in a token header.
	var evilHits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		evilHits.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{attackerJWK}})
	}))
	t.Cleanup(func() { // runs after the parallel subtests
		evil.Close()
		require.Zero(t, evilHits.Load(), "the verifier fetched a URL named by a token")
	})

	tests := []struct {
		name   string
		token  func(t *testing.T, e *tokenEnv) string
		reason string
	}{
		{
			name: "alg none",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodNone, map[string]any{"kid": e.key.KID}, e.claims(), jwt.UnsafeAllowNoneSignatureType)
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "alg none, upper case",
			token: func(t *testing.T, e *tokenEnv) string {
				tok := sign(t, jwt.SigningMethodNone, map[string]any{"kid": e.key.KID}, e.claims(), jwt.UnsafeAllowNoneSignatureType)
				parts := strings.Split(tok, ".")
				parts[0] = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"NONE","kid":"` + e.key.KID + `"}`))
				return strings.Join(parts, ".")
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "HS256 with the public key as HMAC secret",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodHS256, map[string]any{"kid": e.key.KID}, e.claims(), []byte(e.key.Public()))
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "HS256 with the base64url public key as HMAC secret",
			token: func(t *testing.T, e *tokenEnv) string {
				secret := []byte(base64.RawURLEncoding.EncodeToString(e.key.Public()))
				return sign(t, jwt.SigningMethodHS256, map[string]any{"kid": e.key.KID}, e.claims(), secret)
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "RS256",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodRS256, map[string]any{"kid": e.key.KID}, e.claims(), testRSAKey(t))
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "unknown alg",
			token: func(t *testing.T, e *tokenEnv) string {
				tok := e.mint(t)
				parts := strings.Split(tok, ".")
				parts[0] = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"Ed448","kid":"` + e.key.KID + `"}`))
				return strings.Join(parts, ".")
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "missing alg",
			token: func(t *testing.T, e *tokenEnv) string {
				tok := e.mint(t)
				parts := strings.Split(tok, ".")
				parts[0] = base64.RawURLEncoding.EncodeToString([]byte(`{"kid":"` + e.key.KID + `"}`))
				return strings.Join(parts, ".")
			},
			reason: "unsupported signing algorithm",
		},
		{
			name: "expired",
			token: func(t *testing.T, e *tokenEnv) string {
				past := time.Now().Add(-time.Hour)
				c := with(e.claims(), "iat", past.Unix(), "nbf", past.Unix(), "exp", past.Add(15*time.Minute).Unix())
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "token expired",
		},
		{
			name: "expired beyond leeway",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "exp", time.Now().Add(-DefaultLeeway-2*time.Second).Unix())
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "token expired",
		},
		{
			name: "nbf in the future",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "nbf", time.Now().Add(time.Minute).Unix())
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "token not valid yet",
		},
		{
			name: "iat in the future",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "nbf", nil, "iat", time.Now().Add(time.Minute).Unix())
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "token not valid yet",
		},
		{
			name: "wrong iss",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "iss", "https://evil.example")
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "wrong issuer",
		},
		{
			name: "missing iss",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "iss", nil)
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "missing required claim",
		},
		{
			name: "wrong aud",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "aud", []string{"billing"})
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "wrong audience",
		},
		{
			name: "missing exp",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "exp", nil)
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "missing required claim",
		},
		{
			name: "unknown kid",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": "no-such-key"}, e.claims(), e.key.Private)
			},
			reason: "unknown key id",
		},
		{
			name: "missing kid",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, nil, e.claims(), e.key.Private)
			},
			reason: "missing key id",
		},
		{
			name: "empty kid",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": ""}, e.claims(), e.key.Private)
			},
			reason: "missing key id",
		},
		{
			name: "numeric kid",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": 7}, e.claims(), e.key.Private)
			},
			reason: "missing key id",
		},
		{
			name: "tampered payload: other tenant, same signature",
			token: func(t *testing.T, e *tokenEnv) string {
				parts := strings.Split(e.mint(t), ".")
				payload, err := base64.RawURLEncoding.DecodeString(parts[1])
				require.NoError(t, err)
				var c map[string]any
				require.NoError(t, json.Unmarshal(payload, &c))
				c["tid"] = "another-tenant"
				payload, err = json.Marshal(c)
				require.NoError(t, err)
				parts[1] = base64.RawURLEncoding.EncodeToString(payload)
				return strings.Join(parts, ".")
			},
			reason: "invalid signature",
		},
		{
			name: "signature of another token",
			token: func(t *testing.T, e *tokenEnv) string {
				a := strings.Split(e.mint(t), ".")
				b := strings.Split(sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, with(e.claims(), "scp", []string{"admin"}), e.key.Private), ".")
				return a[0] + "." + b[1] + "." + a[2]
			},
			reason: "invalid signature",
		},
		{
			name: "jku to an attacker JWKS, attacker kid",
			token: func(t *testing.T, e *tokenEnv) string {
				h := map[string]any{"kid": "attacker", "jku": evil.URL}
				return sign(t, jwt.SigningMethodEdDSA, h, e.claims(), attackerPriv)
			},
			reason: "unknown key id",
		},
		{
			name: "jku to an attacker JWKS, our kid",
			token: func(t *testing.T, e *tokenEnv) string {
				h := map[string]any{"kid": e.key.KID, "jku": evil.URL}
				return sign(t, jwt.SigningMethodEdDSA, h, e.claims(), attackerPriv)
			},
			reason: "invalid signature",
		},
		{
			name: "x5u to an attacker certificate",
			token: func(t *testing.T, e *tokenEnv) string {
				h := map[string]any{"kid": e.key.KID, "x5u": evil.URL}
				return sign(t, jwt.SigningMethodEdDSA, h, e.claims(), attackerPriv)
			},
			reason: "invalid signature",
		},
		{
			name: "embedded jwk with the attacker key",
			token: func(t *testing.T, e *tokenEnv) string {
				h := map[string]any{"kid": e.key.KID, "jwk": attackerJWK}
				return sign(t, jwt.SigningMethodEdDSA, h, e.claims(), attackerPriv)
			},
			reason: "invalid signature",
		},
		{
			name: "crit header",
			token: func(t *testing.T, e *tokenEnv) string {
				h := map[string]any{"kid": e.key.KID, "crit": []string{"exp"}}
				return sign(t, jwt.SigningMethodEdDSA, h, e.claims(), e.key.Private)
			},
			reason: "unsupported critical header",
		},
		{
			name: "missing tid",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, with(e.claims(), "tid", nil), e.key.Private)
			},
			reason: "missing tenant id",
		},
		{
			name: "empty tid",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, with(e.claims(), "tid", ""), e.key.Private)
			},
			reason: "missing tenant id",
		},
		{
			name: "unknown scope",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "scp", []string{"produce", "root"})
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "invalid scopes",
		},
		{
			name: "no scopes",
			token: func(t *testing.T, e *tokenEnv) string {
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, with(e.claims(), "scp", nil), e.key.Private)
			},
			reason: "invalid scopes",
		},
		{
			name: "scopes as a string",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "scp", "admin produce")
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "malformed token",
		},
		{
			name: "subject does not match akid",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "sub", "apikey:ffffffffffffffff")
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "invalid subject",
		},
		{
			name: "token over 8 KiB",
			token: func(t *testing.T, e *tokenEnv) string {
				c := with(e.claims(), "pad", strings.Repeat("a", MaxTokenBytes))
				return sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.key.KID}, c, e.key.Private)
			},
			reason: "token too large",
		},
		{
			name:   "token full of dots",
			token:  func(*testing.T, *tokenEnv) string { return strings.Repeat(".", 1<<20) },
			reason: "token too large",
		},
		{
			name:   "dots under the cap",
			token:  func(*testing.T, *tokenEnv) string { return strings.Repeat(".", MaxTokenBytes) },
			reason: "malformed token",
		},
		{
			name:   "garbage",
			token:  func(*testing.T, *tokenEnv) string { return "definitely not a jwt" },
			reason: "malformed token",
		},
		{
			name:   "three garbage segments",
			token:  func(*testing.T, *tokenEnv) string { return "a.b.c" },
			reason: "malformed token",
		},
		{
			name: "header not JSON",
			token: func(*testing.T, *tokenEnv) string {
				return base64.RawURLEncoding.EncodeToString([]byte("{")) + ".e30.AA"
			},
			reason: "malformed token",
		},
		{
			name:   "empty",
			token:  func(*testing.T, *tokenEnv) string { return "" },
			reason: "empty token",
		},
		{
			name: "api key instead of a token",
			token: func(t *testing.T, _ *tokenEnv) string {
				k, err := GenerateAPIKey()
				require.NoError(t, err)
				return k.Secret
			},
			reason: "malformed token",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := setupTokens(t)
			p, err := e.verifier.Verify(t.Context(), tt.token(t, e))
			require.ErrorIs(t, err, ErrInvalidToken)
			require.EqualError(t, err, "invalid token: "+tt.reason)
			require.Equal(t, Principal{}, p)
			ce := authError(err)
			require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(ce))
		})
	}
}

func (e *tokenEnv) mint(t *testing.T) string {
	t.Helper()
	tok, _, err := e.issuer.Mint(time.Now(), e.tenant)
	require.NoError(t, err)
	return tok
}

func TestTokenValid(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	now := time.Now()
	tok, exp, err := e.issuer.Mint(now, e.tenant)
	require.NoError(t, err)
	require.Equal(t, now.Add(15*time.Minute).Truncate(time.Second), exp)

	p, err := e.verifier.Verify(t.Context(), tok)
	require.NoError(t, err)
	require.Equal(t, PrincipalTenant, p.Kind)
	require.Equal(t, e.tenant.TenantID, p.TenantID)
	require.Equal(t, e.tenant.APIKeyID, p.APIKeyID)
	require.Equal(t, e.tenant.Scopes, p.Scopes)
	require.True(t, exp.Equal(p.ExpiresAt))
	id, err := uuid.Parse(p.TokenID)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(7), id.Version())

	// The wire form is what the design promises.
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	var header map[string]any
	require.NoError(t, json.Unmarshal(mustB64(t, parts[0]), &header))
	require.Equal(t, "EdDSA", header["alg"])
	require.Equal(t, e.key.KID, header["kid"])
	var claims map[string]any
	require.NoError(t, json.Unmarshal(mustB64(t, parts[1]), &claims))
	require.Equal(t, testIssuer, claims["iss"])
	require.Equal(t, []any{testAudience}, claims["aud"])
	require.Equal(t, "apikey:"+e.tenant.APIKeyID, claims["sub"])
	require.Equal(t, e.tenant.TenantID, claims["tid"])
	require.Equal(t, e.tenant.APIKeyID, claims["akid"])
	require.Equal(t, []any{"produce", "consume"}, claims["scp"])
	for _, c := range []string{"exp", "iat", "nbf", "jti"} {
		require.Contains(t, claims, c)
	}

	// Within the leeway an expired token still passes; a verifier clock past it refuses.
	late := NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience,
		Now: func() time.Time { return exp.Add(3 * time.Second) }}, e.issuer.KeySource())
	_, err = late.Verify(t.Context(), tok)
	require.NoError(t, err)
	later := NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience,
		Now: func() time.Time { return exp.Add(6 * time.Second) }}, e.issuer.KeySource())
	_, err = later.Verify(t.Context(), tok)
	require.EqualError(t, err, "invalid token: token expired")
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}

func TestTokenMintErrors(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	now := time.Now()
	tests := []struct {
		name    string
		issuer  *Issuer
		p       Principal
		wantErr string
	}{
		{name: "no keys", issuer: NewIssuer(IssuerConfig{Issuer: testIssuer, Audience: testAudience}), p: e.tenant, wantErr: "no active signing key"},
		{name: "no issuer", issuer: NewIssuer(IssuerConfig{Audience: testAudience}), p: e.tenant, wantErr: "issuer"},
		{name: "ttl too long", issuer: NewIssuer(IssuerConfig{Issuer: testIssuer, Audience: testAudience, TokenTTL: 48 * time.Hour}), p: e.tenant, wantErr: "token TTL"},
		{name: "anonymous", issuer: e.issuer, p: Principal{TenantID: "t", APIKeyID: "k", Scopes: []string{ScopeAdmin}}, wantErr: "kind anonymous"},
		{name: "broker", issuer: e.issuer, p: Principal{Kind: PrincipalBroker, BrokerID: 1}, wantErr: "kind broker"},
		{name: "no tenant", issuer: e.issuer, p: Principal{Kind: PrincipalTenant, APIKeyID: "k", Scopes: []string{ScopeAdmin}}, wantErr: "tenant id"},
		{name: "no api key", issuer: e.issuer, p: Principal{Kind: PrincipalTenant, TenantID: "t", Scopes: []string{ScopeAdmin}}, wantErr: "api key id"},
		{name: "bad scopes", issuer: e.issuer, p: Principal{Kind: PrincipalTenant, TenantID: "t", APIKeyID: "k", Scopes: []string{"root"}}, wantErr: "unknown scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := tt.issuer.Mint(now, tt.p)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	noKeys := NewIssuer(IssuerConfig{Issuer: testIssuer, Audience: testAudience})
	_, _, err := noKeys.Mint(now, e.tenant)
	require.ErrorIs(t, err, ErrNoSigningKey)
	bad := e.key
	bad.Private = bad.Private[:10]
	noKeys.SetKeys([]SigningKey{bad, {KID: "", Private: e.key.Private}})
	_, _, err = noKeys.Mint(now, e.tenant)
	require.ErrorIs(t, err, ErrNoSigningKey, "invalid keys are dropped")
}

// staticKeys is a KeySource over a fixed map, e.g. a parsed JWKS.
type staticKeys map[string]ed25519.PublicKey

func (s staticKeys) PublicKey(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok := s[kid]; ok {
		return k, nil
	}
	return nil, ErrUnknownKey
}

func TestTokenRotation(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	now := time.Now()
	ttl := 15 * time.Minute
	oldTok, _, err := e.issuer.Mint(now, e.tenant)
	require.NoError(t, err)

	// Rotate: a new key, the old one retired now.
	next, err := GenerateSigningKey(now)
	require.NoError(t, err)
	old := e.key
	old.RetiredAt = now
	e.issuer.SetKeys([]SigningKey{old, next})

	newTok, _, err := e.issuer.Mint(now, e.tenant)
	require.NoError(t, err)
	require.Equal(t, next.KID, kidOf(t, newTok), "the newest active key signs")

	for name, tok := range map[string]string{"old": oldTok, "new": newTok} {
		_, err := e.verifier.Verify(t.Context(), tok)
		require.NoError(t, err, name)
	}

	// The old key stays published until RetiredAt + TTL + MaxLeeway.
	require.ElementsMatch(t, []string{old.KID, next.KID}, jwksKIDs(t, e.issuer, now))
	require.ElementsMatch(t, []string{old.KID, next.KID}, jwksKIDs(t, e.issuer, now.Add(ttl+MaxLeeway-time.Second)))
	require.ElementsMatch(t, []string{next.KID}, jwksKIDs(t, e.issuer, now.Add(ttl+MaxLeeway)))

	// A broker verifying from the published JWKS accepts both tokens, then only the new one.
	b, err := e.issuer.JWKS(now)
	require.NoError(t, err)
	keys, err := ParseJWKS(b)
	require.NoError(t, err)
	broker := NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience}, staticKeys(keys))
	_, err = broker.Verify(t.Context(), oldTok)
	require.NoError(t, err)
	b, err = e.issuer.JWKS(now.Add(ttl + MaxLeeway))
	require.NoError(t, err)
	keys, err = ParseJWKS(b)
	require.NoError(t, err)
	broker = NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience}, staticKeys(keys))
	_, err = broker.Verify(t.Context(), oldTok)
	require.ErrorIs(t, err, ErrUnknownKey)
	_, err = broker.Verify(t.Context(), newTok)
	require.NoError(t, err)

	// The issuer's own KeySource follows the same window.
	e.issuer.now = func() time.Time { return now.Add(ttl + MaxLeeway) }
	_, err = e.issuer.KeySource().PublicKey(t.Context(), old.KID)
	require.ErrorIs(t, err, ErrUnknownKey)
	_, err = e.issuer.KeySource().PublicKey(t.Context(), next.KID)
	require.NoError(t, err)
}

func TestTokenPrePublishedKey(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	now := time.Now()
	upcoming, err := GenerateSigningKey(now.Add(time.Hour))
	require.NoError(t, err)
	e.issuer.SetKeys([]SigningKey{e.key, upcoming})

	tok, _, err := e.issuer.Mint(now, e.tenant)
	require.NoError(t, err)
	require.Equal(t, e.key.KID, kidOf(t, tok), "a key created in the future does not sign yet")
	require.ElementsMatch(t, []string{e.key.KID, upcoming.KID}, jwksKIDs(t, e.issuer, now), "but it is published")

	tok, _, err = e.issuer.Mint(now.Add(time.Hour), e.tenant)
	require.NoError(t, err)
	require.Equal(t, upcoming.KID, kidOf(t, tok))
}

func TestTokenVerifierFaults(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	tok := e.mint(t)

	unconfigured := NewVerifier(VerifierConfig{}, e.issuer.KeySource())
	_, err := unconfigured.Verify(t.Context(), tok)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrInvalidToken)

	down := errors.New("store unreachable: dial tcp 10.0.0.1:5432")
	failing := NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience}, keySourceFunc(
		func(context.Context, string) (ed25519.PublicKey, error) { return nil, down }))
	_, err = failing.Verify(t.Context(), tok)
	require.ErrorIs(t, err, down)
	require.NotErrorIs(t, err, ErrInvalidToken)
	ce := authError(err)
	require.Equal(t, connect.CodeInternal, connect.CodeOf(ce))
	require.Equal(t, "internal error", ce.(*connect.Error).Message())

	// Leeway is capped at MaxLeeway.
	v := NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience, Leeway: time.Hour}, e.issuer.KeySource())
	require.Equal(t, MaxLeeway, v.cfg.Leeway)
}

type keySourceFunc func(ctx context.Context, kid string) (ed25519.PublicKey, error)

func (f keySourceFunc) PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	return f(ctx, kid)
}

func kidOf(t *testing.T, tok string) string {
	t.Helper()
	var h struct {
		Kid string `json:"kid"`
	}
	require.NoError(t, json.Unmarshal(mustB64(t, strings.Split(tok, ".")[0]), &h))
	return h.Kid
}

func jwksKIDs(t *testing.T, i *Issuer, now time.Time) []string {
	t.Helper()
	b, err := i.JWKS(now)
	require.NoError(t, err)
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(b, &set))
	kids := []string{}
	for _, k := range set.Keys {
		require.Equal(t, "OKP", k["kty"])
		require.Equal(t, "Ed25519", k["crv"])
		require.Equal(t, "sig", k["use"])
		require.Equal(t, "EdDSA", k["alg"])
		require.NotContains(t, k, "d")
		kids = append(kids, k["kid"])
	}
	return kids
}
