package tenants

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jwksServer serves an Issuer's JWKS and can be made to fail.
type jwksServer struct {
	*httptest.Server
	issuer *Issuer
	hits   atomic.Int32

	mu       sync.Mutex
	override func(w http.ResponseWriter) // when set, answers instead of the issuer
}

func newJWKSServer(t *testing.T, keys ...SigningKey) *jwksServer {
	t.Helper()
	s := &jwksServer{issuer: NewIssuer(IssuerConfig{Issuer: testIssuer, Audience: testAudience})}
	s.issuer.SetKeys(keys)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.mu.Lock()
		override := s.override
		s.mu.Unlock()
		if override != nil {
			override(w)
			return
		}
		b, err := s.issuer.JWKS(time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) fail(f func(w http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.override = f
}

// fakeClock is a settable clock safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newKey(t *testing.T) SigningKey {
	t.Helper()
	k, err := GenerateSigningKey(time.Now().Add(-time.Hour))
	require.NoError(t, err)
	return k
}

func TestJWKSCacheRefetchOnUnknownKid(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	srv := newJWKSServer(t, k1)
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	c := NewJWKSCache(srv.URL, srv.Client(), time.Hour, time.Minute)
	c.now = clock.Now
	ctx := t.Context()

	// First use fetches.
	got, err := c.PublicKey(ctx, k1.KID)
	require.NoError(t, err)
	require.Equal(t, k1.Public(), got)
	require.EqualValues(t, 1, srv.hits.Load())

	// Known kids are served from the cache.
	_, err = c.PublicKey(ctx, k1.KID)
	require.NoError(t, err)
	require.EqualValues(t, 1, srv.hits.Load())

	// A key rotated in right after a fetch is not refetched for before minRefetch...
	srv.issuer.SetKeys([]SigningKey{k1, k2})
	_, err = c.PublicKey(ctx, k2.KID)
	require.ErrorIs(t, err, ErrUnknownKey)
	require.EqualValues(t, 1, srv.hits.Load())
	clock.Advance(time.Minute - time.Second)
	_, err = c.PublicKey(ctx, k2.KID)
	require.ErrorIs(t, err, ErrUnknownKey)
	require.EqualValues(t, 1, srv.hits.Load())

	// ...and is fetched once minRefetch passed.
	clock.Advance(time.Second)
	got, err = c.PublicKey(ctx, k2.KID)
	require.NoError(t, err)
	require.Equal(t, k2.Public(), got)
	require.EqualValues(t, 2, srv.hits.Load())

	// A flood of made-up kids costs at most one fetch per minRefetch.
	clock.Advance(time.Minute)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, err := c.PublicKey(ctx, "made-up-"+string(rune('a'+i%26)))
			assert.ErrorIs(t, err, ErrUnknownKey)
		})
	}
	wg.Wait()
	require.EqualValues(t, 3, srv.hits.Load())
}

func TestJWKSCacheKeepsLastGoodSet(t *testing.T) {
	t.Parallel()
	k1 := newKey(t)
	srv := newJWKSServer(t, k1)
	c := NewJWKSCache(srv.URL, srv.Client(), time.Hour, time.Minute)
	ctx := t.Context()
	require.NoError(t, c.Refresh(ctx))

	failures := []struct {
		name    string
		respond func(w http.ResponseWriter)
		wantErr string
	}{
		{name: "server error", respond: func(w http.ResponseWriter) { http.Error(w, "boom", http.StatusInternalServerError) }, wantErr: "status 500"},
		{name: "redirect", respond: func(w http.ResponseWriter) {
			w.Header().Set("Location", "https://evil.example/jwks.json")
			w.WriteHeader(http.StatusFound)
		}, wantErr: "status 302"},
		{name: "not json", respond: func(w http.ResponseWriter) { _, _ = w.Write([]byte("<html>")) }, wantErr: "decode jwks"},
		{name: "empty set", respond: func(w http.ResponseWriter) { _, _ = w.Write([]byte(`{"keys":[]}`)) }, wantErr: "no Ed25519 signing keys"},
		{name: "too large", respond: func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"keys":[],"pad":"` + strings.Repeat("a", MaxJWKSBytes) + `"}`))
		}, wantErr: "larger than"},
	}
	for _, f := range failures {
		srv.fail(f.respond)
		err := c.Refresh(ctx)
		require.ErrorContains(t, err, f.wantErr, f.name)
		got, err := c.PublicKey(ctx, k1.KID)
		require.NoError(t, err, f.name)
		require.Equal(t, k1.Public(), got, f.name)
	}

	// Server down altogether.
	srv.Close()
	require.Error(t, c.Refresh(ctx))
	_, err := c.PublicKey(ctx, k1.KID)
	require.NoError(t, err)
}

func TestJWKSCacheRun(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	srv := newJWKSServer(t, k1)
	c := NewJWKSCache(srv.URL, srv.Client(), 10*time.Millisecond, time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	testenv.Wait(t, 5*time.Second, "the first key set", func() error {
		if c.lookup(k1.KID) == nil {
			return errors.New("key 1 not known")
		}
		return nil
	})
	srv.issuer.SetKeys([]SigningKey{k2})
	testenv.Wait(t, 5*time.Second, "the periodic refresh to pick up rotated keys without an unknown-kid miss", func() error {
		if c.lookup(k2.KID) == nil || c.lookup(k1.KID) != nil {
			return errors.New("still the old key set")
		}
		return nil
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after its context was cancelled")
	}
}

func TestJWKSParse(t *testing.T) {
	t.Parallel()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	x := base64.RawURLEncoding.EncodeToString(pub)
	tests := []struct {
		name     string
		doc      string
		wantKIDs []string
		wantErr  string
	}{
		{name: "one key", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"a","use":"sig","alg":"EdDSA"}]}`, wantKIDs: []string{"a"}},
		{name: "use and alg optional", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"a"}]}`, wantKIDs: []string{"a"}},
		{name: "other key types ignored", doc: `{"keys":[
			{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"},
			{"kty":"EC","crv":"P-256","kid":"e","x":"AA","y":"AA"},
			{"kty":"OKP","crv":"X25519","kid":"x","x":"` + x + `"},
			{"kty":"OKP","crv":"Ed25519","kid":"enc","use":"enc","x":"` + x + `"},
			{"kty":"OKP","crv":"Ed25519","kid":"b","x":"` + x + `"}]}`, wantKIDs: []string{"b"}},
		{name: "empty set", doc: `{"keys":[]}`, wantKIDs: []string{}},
		{name: "not json", doc: `{"keys":`, wantErr: "decode jwks"},
		{name: "no keys member", doc: `{}`, wantErr: `no "keys"`},
		{name: "keys not an array", doc: `{"keys":{}}`, wantErr: "decode jwks"},
		{name: "missing kid", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `"}]}`, wantErr: "empty kid"},
		{name: "bad x", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"!!","kid":"a"}]}`, wantErr: `bad "x"`},
		{name: "short x", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA","kid":"a"}]}`, wantErr: `bad "x"`},
		{name: "padded x", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `=","kid":"a"}]}`, wantErr: `bad "x"`},
		{name: "private key", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","d":"` + x + `","kid":"a"}]}`, wantErr: "private key"},
		{name: "duplicate kid", doc: `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"a"},{"kty":"OKP","crv":"Ed25519","x":"` + x + `","kid":"a"}]}`, wantErr: "duplicate kid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			keys, err := ParseJWKS([]byte(tt.doc))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			kids := []string{}
			for kid, k := range keys {
				require.Equal(t, pub, k)
				kids = append(kids, kid)
			}
			require.ElementsMatch(t, tt.wantKIDs, kids)
		})
	}
}
