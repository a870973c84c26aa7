package meter

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Counters accumulates each tenant's egress bytes and requests between
// reports. It is safe for concurrent use; adding is lock-free once a
// tenant has been seen.
type Counters struct {
	m sync.Map // tenant id → *tenantCounts; never deleted (one small entry per tenant seen)
}

type tenantCounts struct {
	egress, requests atomic.Int64
}

func (c *Counters) of(tenantID string) *tenantCounts {
	if v, ok := c.m.Load(tenantID); ok {
		return v.(*tenantCounts)
	}
	v, _ := c.m.LoadOrStore(tenantID, new(tenantCounts))
	return v.(*tenantCounts)
}

// AddEgress counts n bytes of record batches answered to the tenant's
// consumers.
func (c *Counters) AddEgress(tenantID string, n int64) {
	if n > 0 {
		c.of(tenantID).egress.Add(n)
	}
}

// AddRequest counts one request of the tenant.
func (c *Counters) AddRequest(tenantID string) { c.of(tenantID).requests.Add(1) }

// take moves what was counted since the last take into the answer (each
// counter is swapped to zero, so a concurrent add lands in this take or
// the next, never in both or neither), sorted by tenant, without the
// tenants with nothing counted.
func (c *Counters) take() []*sluicev1.TenantUsageCounters {
	var out []*sluicev1.TenantUsageCounters
	c.m.Range(func(k, v any) bool {
		tc := v.(*tenantCounts)
		e, r := tc.egress.Swap(0), tc.requests.Swap(0)
		if e != 0 || r != 0 {
			out = append(out, &sluicev1.TenantUsageCounters{TenantId: k.(string), EgressBytes: e, Requests: r})
		}
		return true
	})
	slices.SortFunc(out, func(a, b *sluicev1.TenantUsageCounters) int { return strings.Compare(a.GetTenantId(), b.GetTenantId()) })
	return out
}

// restore adds taken counters back, for a report known not to have been
// applied.
func (c *Counters) restore(taken []*sluicev1.TenantUsageCounters) {
	for _, t := range taken {
		tc := c.of(t.GetTenantId())
		tc.egress.Add(t.GetEgressBytes())
		tc.requests.Add(t.GetRequests())
	}
}
