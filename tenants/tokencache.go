package tenants

import (
	"container/list"
	"context"
	"crypto/ed25519"
	"slices"
	"sync"
	"time"
)

// tokenCache remembers tokens that passed a full verification, so that a Verifier does not check
// the same token's Ed25519 signature on every request. It never makes a token valid that a full
// verification would refuse:
//   - only tokens that verified are stored (a flood of made-up tokens stores nothing);
//   - a hit needs the clock strictly before the token's exp (a full verification accepts up to
//     the leeway after it), so an expired token is refused, or re-verified, never served;
//   - a hit needs the key source to still return the very key that verified the token, so a key
//     removed from JWKS (or replaced under the same kid) stops the token as soon as the key
//     source drops it;
//   - nbf and iat only ever become valid with time, and iss, aud, alg, claims and signature are
//     properties of the token string, which is the cache key (compared whole).
//
// Revocation of an API key and suspension of a tenant are not the cache's business: callers
// that check them (the broker) do so on every request, hit or miss.
//
// The cache holds at most max entries and drops the least recently used one to make room.
type tokenCache struct {
	max int

	mu    sync.Mutex
	byTok map[string]*list.Element // of *cachedToken
	lru   list.List                // front: most recently used
}

type cachedToken struct {
	token string
	kid   string
	key   ed25519.PublicKey
	p     Principal
}

func newTokenCache(maxEntries int) *tokenCache {
	return &tokenCache{max: maxEntries, byTok: make(map[string]*list.Element, min(maxEntries, 1024))}
}

// get returns the principal of a cached token that is still valid at now and whose key keys
// still resolves to the same bytes. An entry that fails either check is dropped.
func (c *tokenCache) get(ctx context.Context, token string, now time.Time, keys KeySource) (Principal, bool) {
	c.mu.Lock()
	el, ok := c.byTok[token]
	if !ok {
		c.mu.Unlock()
		return Principal{}, false
	}
	e := el.Value.(*cachedToken)
	if !now.Before(e.p.ExpiresAt) {
		c.removeLocked(el)
		c.mu.Unlock()
		return Principal{}, false
	}
	c.lru.MoveToFront(el)
	c.mu.Unlock()
	// Outside the lock: a key source may fetch (JWKSCache refetches on an unknown kid).
	key, err := keys.PublicKey(ctx, e.kid)
	if err != nil || !key.Equal(e.key) {
		c.mu.Lock()
		if cur, ok := c.byTok[token]; ok && cur == el {
			c.removeLocked(el)
		}
		c.mu.Unlock()
		return Principal{}, false
	}
	return e.p, true
}

// put stores a token that just verified with key (named kid) as p.
func (c *tokenCache) put(token, kid string, key ed25519.PublicKey, p Principal) {
	p.Scopes = slices.Clip(p.Scopes) // shared by every hit: an append must not write into it
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byTok[token]; ok {
		el.Value = &cachedToken{token: token, kid: kid, key: key, p: p}
		c.lru.MoveToFront(el)
		return
	}
	for c.lru.Len() >= c.max {
		c.removeLocked(c.lru.Back())
	}
	c.byTok[token] = c.lru.PushFront(&cachedToken{token: token, kid: kid, key: key, p: p})
}

func (c *tokenCache) removeLocked(el *list.Element) {
	delete(c.byTok, el.Value.(*cachedToken).token)
	c.lru.Remove(el)
}

// len is the number of cached tokens.
func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
