package broker

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicemq/sluice/dataplane/quota"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

// Rate decisions from headers (issue 29, item 10). The gate in front of
// the client port (internal/httpgate) calls admitCall for every call it
// authenticated, before it reads the body: a tenant over its requests/s,
// or whose produce or fetch bucket is in debt, is refused there, its body
// never read or decoded, so that a tenant offering many times its quota
// costs the broker a header's worth of work per refused call, not a
// decode (what its neighbours would otherwise wait for). The gate then
// holds the tenant's later calls of that procedure on that connection
// until the refusal's delay has passed (Kafka's channel muting, KIP-219;
// over HTTP/2 only calls of a small body, see internal/httpgate), so a
// client that does not wait is slowed instead of refused over and over.
// Admitted calls are decided again, and charged what they cost, where
// their cost is known: produce record bytes before appending
// (admitProduce), fetch bytes once answered (chargeFetch).

// rateBursts are the broker's buckets' bursts, in seconds of their
// rates, from the limit table: limit.DefaultBurst (250 ms: the tenant's
// burst over the cluster is a quarter of a second of its limit, split
// among the brokers as the allotments are) for bytes and requests, 10
// minutes for producer ids (see dataplane/quota).
var rateBursts = func() (b [quota.Dimensions]time.Duration) {
	for d := range quota.Dimensions {
		b[d] = d.Burst()
	}
	return b
}()

// admitCall is the broker's httpgate.Admit: for a call of a limited
// tenant (not the system tenant, not a call another broker forwarded,
// which was decided and billed where the client sent it) it bills one
// request, waits for the tenant's first allotment here (awaitAllotment),
// charges one request to its requests/s, and refuses a produce while its
// produce bucket is in debt and a fetch while its fetch bucket is.
func (b *Broker) admitCall(ctx context.Context, r *http.Request, procedure string, p tenants.Principal, size int64) error {
	if p.Kind != tenants.PrincipalTenant || p.TenantID == "" || p.TenantID == systemTenantID {
		return nil
	}
	if forwardedByBroker(r.Header, b.cfg.BrokerToken) {
		return nil
	}
	id := p.TenantID
	// Billed whether admitted or refused, as every authenticated request.
	b.usageCounters.AddRequest(id)
	q := b.quota
	q.awaitAllotment(ctx, id)
	if dec := q.lim.Take(id, limit.Requests, 1); !dec.OK {
		return q.refuseRate(id, limit.Requests, dec)
	}
	switch procedure {
	case sluicev1connect.RecordServiceProduceProcedure, sluicev1connect.RecordServiceProduceManyProcedure:
		// In debt: refused at the body's size (an estimate of its record
		// bytes). Otherwise admitProduce charges the record bytes.
		if dec := q.lim.Check(id, limit.ProduceBytes, float64(max(size, 0))); !dec.OK {
			return q.refuseRate(id, limit.ProduceBytes, dec)
		}
	case sluicev1connect.RecordServiceFetchProcedure:
		if dec := q.lim.Check(id, limit.FetchBytes, q.fetchEstimate(id, 0)); !dec.OK {
			return q.refuseRate(id, limit.FetchBytes, dec)
		}
	}
	return nil
}

// firstAllotmentWait bounds how long a tenant's first calls at a broker
// wait for its allotment (awaitAllotment): an exchange takes a round trip
// to the control plane, milliseconds, and fails after its timeout (1 s by
// default), which ends the wait too; one still unanswered after this lets
// the calls through unthrottled, as before.
const firstAllotmentWait = 3 * time.Second

// awaitAllotment waits, up to firstWait, for an allotment of a tenant the
// broker has none of (new here, or forgotten after 5 minutes without
// traffic): it asks for an exchange at once (noticeTenant) and waits for
// its answer, so that the tenant's first calls here are decided by its
// limits rather than admitted unthrottled until the answer, which let a
// tenant turning loud through every broker at once burst far past its
// quota. Not while exchanges fail (the calls are then admitted, as every
// call of a tenant with no allotment is).
func (q *quotas) awaitAllotment(ctx context.Context, tenantID string) {
	if q.allotment(tenantID) != nil || q.exchangesFailing() {
		return
	}
	timer := time.NewTimer(q.firstWait)
	defer timer.Stop()
	q.noticeTenant(tenantID)
	// An exchange under way may have built its report before the ask:
	// wait for the ones after it too.
	for {
		q.mu.Lock()
		exchanged, failing := q.exchanged, q.failing != ""
		q.mu.Unlock()
		if q.allotment(tenantID) != nil || failing {
			return
		}
		select {
		case <-exchanged:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// exchangeEnded wakes the calls waiting in awaitAllotment. The caller
// holds mu.
func (q *quotas) exchangeEnded() {
	close(q.exchanged)
	q.exchanged = make(chan struct{})
}
