package tenants

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// mutableKeys is a KeySource whose key set a test replaces (a JWKS refresh).
type mutableKeys struct {
	keys  atomic.Pointer[staticKeys]
	calls atomic.Int64
}

func (m *mutableKeys) set(k staticKeys) { m.keys.Store(&k) }

func (m *mutableKeys) PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	m.calls.Add(1)
	return (*m.keys.Load()).PublicKey(ctx, kid)
}

// cacheEnv is the setup bundle of the token-cache tests: a signing key,
// a key source holding it, a clock and a caching Verifier on both.
type cacheEnv struct {
	kid   string
	priv  ed25519.PrivateKey
	keys  *mutableKeys
	clock *fakeClock
	v     *Verifier
}

func setupCache(t testing.TB, size int) *cacheEnv {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	e := &cacheEnv{kid: "key-1", priv: priv, keys: &mutableKeys{}, clock: &fakeClock{now: time.Now()}}
	e.keys.set(staticKeys{e.kid: pub})
	e.v = NewVerifier(VerifierConfig{Issuer: testIssuer, Audience: testAudience, Now: e.clock.Now, CacheSize: size}, e.keys)
	return e
}

// token signs a valid token for tenant that expires ttl after the clock.
func (e *cacheEnv) token(t testing.TB, tenant string, ttl time.Duration) string {
	t.Helper()
	now := e.clock.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{
		"iss": testIssuer, "aud": []string{testAudience}, "sub": "apikey:0123456789abcdef",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(), "jti": tenant,
		"tid": tenant, "scp": []string{ScopeProduce}, "akid": "0123456789abcdef",
	})
	tok.Header["kid"] = e.kid
	s, err := tok.SignedString(e.priv)
	require.NoError(t, err)
	return s
}

// A token that verified is remembered, and served again only while the
// clock is before its exp: past exp and the leeway it is refused as
// expired, exactly as without the cache, and forgotten.
func TestTokenCacheExpiry(t *testing.T) {
	t.Parallel()
	e := setupCache(t, 8)
	ctx := context.Background()
	tok := e.token(t, "t1", time.Minute)
	p, err := e.v.Verify(ctx, tok)
	require.NoError(t, err)
	require.Equal(t, "t1", p.TenantID)
	require.Equal(t, 1, e.v.CachedTokens(), "a verified token is remembered")
	p2, err := e.v.Verify(ctx, tok)
	require.NoError(t, err)
	require.Equal(t, p, p2, "a hit answers the principal of the verification")

	e.clock.Advance(p.ExpiresAt.Add(-time.Second).Sub(e.clock.Now()))
	_, err = e.v.Verify(ctx, tok)
	require.NoError(t, err, "still valid a second before exp")

	e.clock.Advance(p.ExpiresAt.Add(MaxLeeway + time.Second).Sub(e.clock.Now()))
	_, err = e.v.Verify(ctx, tok)
	require.ErrorIs(t, err, ErrInvalidToken)
	require.ErrorContains(t, err, "token expired")
	require.Equal(t, 0, e.v.CachedTokens(), "an expired token is forgotten")
}

// A cached token stops working as soon as the key source no longer holds
// its key (removed from JWKS), or holds another key under its kid.
func TestTokenCacheKeyRemoval(t *testing.T) {
	t.Parallel()
	e := setupCache(t, 8)
	ctx := context.Background()
	tok := e.token(t, "t1", time.Minute)
	_, err := e.v.Verify(ctx, tok)
	require.NoError(t, err)
	orig := *e.keys.keys.Load()

	e.keys.set(staticKeys{})
	_, err = e.v.Verify(ctx, tok)
	require.ErrorIs(t, err, ErrUnknownKey, "a removed key's cached token")
	require.Equal(t, 0, e.v.CachedTokens())

	e.keys.set(orig)
	_, err = e.v.Verify(ctx, tok)
	require.NoError(t, err, "the key is back: the token verifies again")
	other, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	e.keys.set(staticKeys{e.kid: other})
	_, err = e.v.Verify(ctx, tok)
	require.ErrorIs(t, err, ErrInvalidToken, "another key under the same kid")
	require.ErrorContains(t, err, "invalid signature")
}

// The cache holds at most its size, and only tokens that verified: a
// flood of made-up or badly signed tokens stores nothing.
func TestTokenCacheBound(t *testing.T) {
	t.Parallel()
	e := setupCache(t, 4)
	ctx := context.Background()
	var toks []string
	for i := range 20 {
		tok := e.token(t, fmt.Sprintf("t%d", i), time.Minute)
		toks = append(toks, tok)
		_, err := e.v.Verify(ctx, tok)
		require.NoError(t, err)
		require.LessOrEqual(t, e.v.CachedTokens(), 4)
	}
	require.Equal(t, 4, e.v.CachedTokens())
	// The most recent ones stay; older ones are verified in full again.
	_, err := e.v.Verify(ctx, toks[0])
	require.NoError(t, err)

	e2 := setupCache(t, 4)
	_, forged, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	for i := range 50 {
		bad := sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e2.kid}, jwt.MapClaims{
			"iss": testIssuer, "aud": []string{testAudience}, "sub": "apikey:0123456789abcdef",
			"exp": e2.clock.Now().Add(time.Minute).Unix(), "tid": fmt.Sprintf("t%d", i), "scp": []string{ScopeProduce}, "akid": "0123456789abcdef",
		}, forged)
		_, err := e2.v.Verify(ctx, bad)
		require.ErrorIs(t, err, ErrInvalidToken)
		_, err = e2.v.Verify(ctx, fmt.Sprintf("garbage.%d.x", i))
		require.ErrorIs(t, err, ErrInvalidToken)
	}
	require.Equal(t, 0, e2.v.CachedTokens(), "refused tokens are never cached")
}

// A token refused for a claim is refused again from the cache's point of
// view too: a wrong-audience token never enters it, and the same string
// verified by a cache-less Verifier gives the same answer.
func TestTokenCacheNeverWidens(t *testing.T) {
	t.Parallel()
	e := setupCache(t, 8)
	ctx := context.Background()
	now := e.clock.Now()
	wrongAud := sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.kid}, jwt.MapClaims{
		"iss": testIssuer, "aud": []string{"other"}, "sub": "apikey:0123456789abcdef",
		"exp": now.Add(time.Minute).Unix(), "tid": "t1", "scp": []string{ScopeProduce}, "akid": "0123456789abcdef",
	}, e.priv)
	notYet := sign(t, jwt.SigningMethodEdDSA, map[string]any{"kid": e.kid}, jwt.MapClaims{
		"iss": testIssuer, "aud": []string{testAudience}, "sub": "apikey:0123456789abcdef",
		"nbf": now.Add(time.Minute).Unix(), "exp": now.Add(2 * time.Minute).Unix(), "tid": "t1", "scp": []string{ScopeProduce}, "akid": "0123456789abcdef",
	}, e.priv)
	for range 3 {
		_, err := e.v.Verify(ctx, wrongAud)
		require.ErrorContains(t, err, "wrong audience")
		_, err = e.v.Verify(ctx, notYet)
		require.ErrorContains(t, err, "not valid yet")
	}
	require.Equal(t, 0, e.v.CachedTokens())
}

// BenchmarkTokenVerify compares a full verification with a cache hit.
func BenchmarkTokenVerify(b *testing.B) {
	for _, size := range []int{0, 1024} {
		b.Run(fmt.Sprintf("cache=%d", size), func(b *testing.B) {
			e := setupCache(b, size)
			tok := e.token(b, "t1", time.Hour)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.v.Verify(ctx, tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
