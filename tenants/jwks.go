package tenants

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// MaxJWKSBytes bounds a fetched JWKS document.
const MaxJWKSBytes = 1 << 20

// ParseJWKS decodes a JWK Set and returns its Ed25519 signing keys by kid. Keys of other types or
// curves, and keys marked for another use or algorithm, are skipped. A malformed document, or an
// Ed25519 key without a kid, with a bad "x", with private material or with a repeated kid, is an
// error.
func ParseJWKS(b []byte) (map[string]ed25519.PublicKey, error) {
	var set struct {
		Keys *[]jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("decode jwks: %w", err)
	}
	if set.Keys == nil {
		return nil, errors.New("decode jwks: no \"keys\" array")
	}
	keys := make(map[string]ed25519.PublicKey, len(*set.Keys))
	for n, k := range *set.Keys {
		if k.Kty != "OKP" || k.Crv != "Ed25519" || (k.Use != "" && k.Use != "sig") || (k.Alg != "" && k.Alg != "EdDSA") {
			continue
		}
		switch {
		case k.Kid == "":
			return nil, fmt.Errorf("decode jwks: key %d: empty kid", n)
		case k.D != "":
			return nil, fmt.Errorf("decode jwks: key %q: contains private key material", k.Kid)
		case keys[k.Kid] != nil:
			return nil, fmt.Errorf("decode jwks: key %q: duplicate kid", k.Kid)
		}
		x, err := base64.RawURLEncoding.Strict().DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("decode jwks: key %q: bad \"x\": want %d base64url bytes", k.Kid, ed25519.PublicKeySize)
		}
		keys[k.Kid] = ed25519.PublicKey(x)
	}
	return keys, nil
}

// JWKSCache is a KeySource for brokers: it holds the keys from one pinned JWKS URL, refreshes
// them every refresh interval (Run), and refetches on an unknown kid at most once per
// minRefetch so that a rotated-in key is picked up quickly while a flood of tokens with made-up
// kids cannot turn into a flood of fetches. A failed fetch keeps the last good set. Redirects
// are not followed and bodies over MaxJWKSBytes are refused. Safe for concurrent use.
type JWKSCache struct {
	url        string
	client     *http.Client
	refresh    time.Duration
	minRefetch time.Duration
	now        func() time.Time

	fetchMu   sync.Mutex // serialises fetches; held while fetching, before mu
	lastFetch time.Time  // start of the last fetch attempt; guarded by fetchMu

	mu   sync.RWMutex
	keys map[string]ed25519.PublicKey // last good set; never mutated once stored
}

// NewJWKSCache returns a cache for url. A nil client means a client with a 10s timeout.
// refresh ≤ 0 means 5 minutes; minRefetch ≤ 0 means 10 seconds.
func NewJWKSCache(url string, client *http.Client, refresh, minRefetch time.Duration) *JWKSCache {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	pinned := *client // a copy: the caller's client keeps its own redirect policy
	pinned.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if refresh <= 0 {
		refresh = 5 * time.Minute
	}
	if minRefetch <= 0 {
		minRefetch = 10 * time.Second
	}
	return &JWKSCache{url: url, client: &pinned, refresh: refresh, minRefetch: minRefetch, now: time.Now}
}

// Run refreshes the key set every refresh interval until ctx is done, starting with an immediate
// fetch. After a failed fetch it retries after minRefetch when that is sooner. The caller owns
// the goroutine running it.
func (c *JWKSCache) Run(ctx context.Context) {
	for {
		wait := c.refresh
		if err := c.Refresh(ctx); err != nil && c.minRefetch < wait {
			wait = c.minRefetch
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Refresh fetches the key set now and returns why it failed; the last good set stays in use then.
// Use it at startup to fail loudly when the control plane's JWKS is unreachable.
func (c *JWKSCache) Refresh(ctx context.Context) error {
	c.fetchMu.Lock()
	defer c.fetchMu.Unlock()
	return c.fetchLocked(ctx)
}

// PublicKey implements KeySource. An unknown kid triggers a fetch when none started within
// minRefetch; otherwise, or if the kid is still unknown, the error wraps ErrUnknownKey.
func (c *JWKSCache) PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	if k := c.lookup(kid); k != nil {
		return k, nil
	}
	c.fetchMu.Lock()
	// Another caller may have fetched while we waited for the lock.
	if k := c.lookup(kid); k != nil {
		c.fetchMu.Unlock()
		return k, nil
	}
	if c.lastFetch.IsZero() || c.now().Sub(c.lastFetch) >= c.minRefetch {
		_ = c.fetchLocked(ctx) // the last good set stays; Run reports nothing either
	}
	c.fetchMu.Unlock()
	if k := c.lookup(kid); k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownKey, kid)
}

func (c *JWKSCache) lookup(kid string) ed25519.PublicKey {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.keys[kid]
}

// fetchLocked fetches and installs the key set; c.fetchMu must be held.
func (c *JWKSCache) fetchLocked(ctx context.Context) error {
	start := c.now()
	keys, err := c.fetch(ctx)
	// A fetch abandoned because this caller gave up says nothing about the server: do not let
	// it use up the refetch budget of other callers.
	if err == nil || ctx.Err() == nil {
		c.lastFetch = start
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.keys = keys
	c.mu.Unlock()
	return nil
}

func (c *JWKSCache) fetch(ctx context.Context) (map[string]ed25519.PublicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: %w", err)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("fetch jwks %s: status %s", c.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch jwks: read body: %w", err)
	}
	if len(body) > MaxJWKSBytes {
		return nil, fmt.Errorf("fetch jwks %s: body larger than %d bytes", c.url, MaxJWKSBytes)
	}
	keys, err := ParseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("fetch jwks %s: %w", c.url, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("fetch jwks %s: no Ed25519 signing keys", c.url)
	}
	return keys, nil
}
