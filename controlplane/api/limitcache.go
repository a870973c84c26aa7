package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants"
)

// limitCacheTTL is how long ExchangeQuotas uses a tenant's limits before
// reading them again: an operator's change of plan or overrides reaches the
// brokers' allotments within it (plus one exchange interval) through the
// other replicas; the replica that made the change forgets its entry at
// once (forget).
const limitCacheTTL = 5 * time.Second

// limitCache holds tenants' effective limits for ExchangeQuotas, which
// every broker calls about once a second for every tenant it serves: each
// tenant is read from the store at most once per limitCacheTTL.
type limitCache struct {
	mu      sync.Mutex
	entries map[string]cachedLimits
}

type cachedLimits struct {
	limits tenants.Limits
	known  bool // false: no such tenant (deleted, or never was)
	at     time.Time
}

// get returns the tenant's limits and whether the tenant exists, reading
// the store when the cached entry is older than limitCacheTTL. An entry of
// a tenant the store cannot read is not cached.
func (c *limitCache) get(ctx context.Context, st store.Store, tenantID string, now time.Time) (tenants.Limits, bool, error) {
	c.mu.Lock()
	e, ok := c.entries[tenantID]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < limitCacheTTL && !now.Before(e.at) {
		return e.limits, e.known, nil
	}
	e = cachedLimits{at: now}
	t, err := st.GetTenant(ctx, tenantID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return tenants.Limits{}, false, err
	default:
		l, _, err := limitsOf(t)
		if err != nil {
			return tenants.Limits{}, false, err
		}
		e.limits, e.known = l, true
	}
	c.mu.Lock()
	if c.entries == nil || len(c.entries) > 100000 {
		c.entries = make(map[string]cachedLimits)
	}
	c.entries[tenantID] = e
	c.mu.Unlock()
	return e.limits, e.known, nil
}

// forget drops the tenant's entry: its limits changed.
func (c *limitCache) forget(tenantID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, tenantID)
}
