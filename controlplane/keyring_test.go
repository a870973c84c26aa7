package controlplane

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/tenants"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func kidOf(t *testing.T, token string) string {
	t.Helper()
	tok, _, err := jwt.NewParser().ParseUnverified(token, jwt.MapClaims{})
	require.NoError(t, err)
	return tok.Header["kid"].(string)
}

func jwksKids(t *testing.T, iss *tenants.Issuer, now time.Time) []string {
	t.Helper()
	b, err := iss.JWKS(now)
	require.NoError(t, err)
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	require.NoError(t, json.Unmarshal(b, &set))
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	return kids
}

// TestKeyringRotation walks a signing key through its life with a fake
// clock and two replicas sharing one store: pre-published, signing,
// retired but still verifying old tokens, deleted.
func TestKeyringRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/cp.db", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	const ttl, rotation, prepublish = 15 * time.Minute, 24 * time.Hour, time.Minute
	replica := func() (*keyring, *tenants.Verifier) {
		iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice", TokenTTL: ttl})
		k := &keyring{store: st, issuer: iss, rotation: rotation, prepublish: prepublish,
			keep: ttl + tenants.MaxLeeway + time.Minute, logger: slog.New(slog.DiscardHandler), now: clock.Now}
		return k, tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice", Now: clock.Now}, k)
	}
	a, va := replica()
	b, vb := replica()
	mint := func(k *keyring) string {
		tok, _, err := k.issuer.Mint(clock.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: []string{"admin"}})
		require.NoError(t, err)
		return tok
	}

	require.NoError(t, a.sync(ctx))
	require.NoError(t, b.sync(ctx)) // b adopts a's key, creates none
	keys, err := st.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	k0 := keys[0].KID
	old := mint(a)
	require.Equal(t, k0, kidOf(t, old))
	_, err = vb.Verify(ctx, old)
	require.NoError(t, err, "replica b verifies replica a's token")

	// Rotation is due: the next key is published before it signs.
	clock.Advance(rotation - prepublish)
	require.NoError(t, a.sync(ctx))
	keys, err = st.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	k1 := keys[1].KID
	require.ElementsMatch(t, []string{k0, k1}, jwksKids(t, a.issuer, clock.Now()))
	require.Equal(t, k0, kidOf(t, mint(a)), "the next key does not sign before its time")
	require.Equal(t, k0, kidOf(t, mint(b)), "b has not synced: still the old key, which is fine")

	// At the switch a signs with the new key without another sync. (A replica
	// syncs every 30 s, well within the one-minute pre-publication, so in
	// practice b knows both keys by now too; here b learns on first sight.)
	clock.Advance(prepublish)
	require.Equal(t, k1, kidOf(t, mint(a)))
	fresh := mint(a)
	_, err = vb.Verify(ctx, fresh)
	require.NoError(t, err, "b learns the new kid from the store on first sight")
	require.Equal(t, k1, kidOf(t, mint(b)))

	// A token of the old key minted just before the switch still verifies until it expires.
	clock.Advance(ttl - time.Minute)
	old = func() string {
		tok, _, err := a.issuer.Mint(clock.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: []string{"admin"}})
		require.NoError(t, err)
		return tok
	}()
	require.Equal(t, k1, kidOf(t, old))
	require.Contains(t, jwksKids(t, a.issuer, clock.Now()), k0)

	// After RetiredAt + TTL + leeway the old key leaves the JWKS, and after keep, the store.
	clock.Advance(time.Minute + tenants.MaxLeeway + time.Second)
	require.NotContains(t, jwksKids(t, a.issuer, clock.Now()), k0)
	clock.Advance(time.Minute)
	require.NoError(t, a.sync(ctx))
	keys, err = st.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, k1, keys[0].KID)
	_, err = va.Verify(ctx, mint(a))
	require.NoError(t, err)
	_, err = va.Verify(ctx, fresh)
	require.ErrorIs(t, err, tenants.ErrInvalidToken, "tokens expire; the key does not outlive them")
}

// TestKeyringConcurrentRotation: two replicas rotating at the same moment
// converge on one signing key.
func TestKeyringConcurrentRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, t.TempDir()+"/cp.db", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	mk := func() *keyring {
		return &keyring{store: st, issuer: tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"}),
			rotation: time.Hour, prepublish: time.Minute, keep: time.Hour, logger: slog.New(slog.DiscardHandler), now: clock.Now}
	}
	a, b := mk(), mk()
	require.NoError(t, a.sync(ctx))
	clock.Advance(time.Hour)
	var wg sync.WaitGroup
	for _, k := range []*keyring{a, b} {
		wg.Go(func() { require.NoError(t, k.sync(ctx)) })
	}
	wg.Wait()
	require.NoError(t, a.sync(ctx))
	require.NoError(t, b.sync(ctx))
	clock.Advance(time.Minute)
	keys, err := st.ListSigningKeys(ctx)
	require.NoError(t, err)
	var signing int
	for _, k := range keys {
		if k.RetiredAt.IsZero() || clock.Now().Before(k.RetiredAt) {
			signing++
		}
	}
	require.Equal(t, 1, signing, "exactly one key signs after the race: %+v", keys)
}
