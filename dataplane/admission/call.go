package admission

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/dataplane/quota"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// Rate decisions from headers (issue 29, item 10). The gate in front of
// the client port (internal/httpgate) calls AdmitCall, through the
// broker, for every call it authenticated, before it reads the body: a
// tenant over its requests/s, or whose produce or fetch bucket is in
// debt, is refused there, its body never read or decoded, so that a
// tenant offering many times its quota costs the broker a header's worth
// of work per refused call, not a decode (what its neighbours would
// otherwise wait for). The gate then holds the tenant's later calls of
// that procedure on that connection until the refusal's delay has passed
// (Kafka's channel muting, KIP-219; over HTTP/2 only calls of a small
// body, see internal/httpgate), so a client that does not wait is slowed
// instead of refused over and over. Admitted calls are decided again,
// and charged what they cost, where their cost is known: produce record
// bytes before appending (AdmitProduce), fetch bytes once answered
// (ChargeFetch).

// rateBursts are the buckets' bursts, in seconds of their rates, from
// the limit table: limit.DefaultBurst (250 ms: the tenant's burst over
// the cluster is a quarter of a second of its limit, split among the
// brokers as the allotments are) for bytes and requests, 10 minutes for
// producer ids (see dataplane/quota).
var rateBursts = func() (b [quota.Dimensions]time.Duration) {
	for d := range quota.Dimensions {
		b[d] = d.Burst()
	}
	return b
}()

// CallKind is what a call is, as AdmitCall decides it beyond its one
// request.
type CallKind uint8

const (
	// CallOther is charged its request only.
	CallOther CallKind = iota
	// CallProduce (Produce, ProduceMany) is refused while the tenant's
	// produce bucket is in debt.
	CallProduce
	// CallFetch is refused while the tenant's fetch bucket is in debt.
	CallFetch
)

// Call is a call as its headers tell it, before its body is read.
type Call struct {
	// Principal is who the call authenticated as.
	Principal tenants.Principal
	Kind      CallKind
	// Size is the body's length, -1 when not known: a produce's estimate
	// of its record bytes.
	Size int64
	// Forwarded: another broker forwarded the call for its client (with
	// the client's credentials); it was decided, and billed, there.
	Forwarded bool
}

// AdmitCall decides a call from its headers (the broker's httpgate.Admit):
// for a call of a limited tenant (not the system tenant, not a call
// another broker forwarded) it bills one request (Config.CountRequest),
// waits for the tenant's first allotment here (awaitAllotment), charges
// one request to its requests/s, and refuses a produce while its produce
// bucket is in debt and a fetch while its fetch bucket is. The refusal is
// a rate refusal (see the package doc).
func (e *Enforcer) AdmitCall(ctx context.Context, c Call) error {
	p := c.Principal
	if p.Kind != tenants.PrincipalTenant || p.TenantID == "" || p.TenantID == system.TenantID {
		return nil
	}
	if c.Forwarded {
		return nil
	}
	id := p.TenantID
	// Billed whether admitted or refused, as every authenticated request.
	if e.cfg.CountRequest != nil {
		e.cfg.CountRequest(id)
	}
	arrived := e.awaitAllotment(ctx, id)
	if dec := e.lim.Take(id, limit.Requests, 1); !dec.OK {
		return e.refuseRate(id, limit.Requests, dec)
	}
	if !arrived && c.Kind == CallProduce {
		e.awaitArrival(ctx, id, limit.ProduceBytes, c.Size)
	}
	switch c.Kind {
	case CallProduce:
		// In debt: refused at the body's size (an estimate of its record
		// bytes). Otherwise AdmitProduce charges the record bytes.
		if dec := e.lim.Check(id, limit.ProduceBytes, float64(max(c.Size, 0))); !dec.OK {
			return e.refuseRate(id, limit.ProduceBytes, dec)
		}
	case CallFetch:
		if dec := e.lim.Check(id, limit.FetchBytes, e.fetchEstimate(id, 0)); !dec.OK {
			return e.refuseRate(id, limit.FetchBytes, dec)
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
// traffic): it asks for an exchange at once (NoticeTenant) and waits for
// its answer, so that the tenant's first calls here are decided by its
// limits rather than admitted unthrottled until the answer, which let a
// tenant turning loud through every broker at once burst far past its
// quota. Not while exchanges fail (the calls are then admitted, as every
// call of a tenant with no allotment is). asked: it asked for an
// exchange (the tenant is reported as arriving if it has no meter here
// yet).
func (e *Enforcer) awaitAllotment(ctx context.Context, tenantID string) (asked bool) {
	if e.Allotment(tenantID) != nil || e.ExchangesFailing() {
		return false
	}
	timeout := e.clock.After(e.firstWait)
	e.NoticeTenant(tenantID)
	// An exchange under way may have built its report before the ask:
	// wait for the ones after it too.
	for {
		e.mu.Lock()
		exchanged, failing := e.exchanged, e.failing != ""
		e.mu.Unlock()
		if e.Allotment(tenantID) != nil || failing {
			return true
		}
		select {
		case <-exchanged:
		case <-timeout:
			return true
		case <-ctx.Done():
			return true
		}
	}
}

// awaitArrival holds a produce of a tenant that has an allotment here
// but has produced nothing here lately and would find its bucket short
// of the call's size (quota.Limiter.Short: its produce starts at this
// broker, larger than what its allotment here holds) until an exchange
// reporting it as arriving is answered, up to firstWait: the control
// plane then allots it the mean share rather than the floor its
// unmeasured (zero) offered rate would get (controlplane/quota, Arrive),
// which held a client writing to a partition on each broker, at the pace
// of the slowest, to a fraction of its quota for seconds. A produce its
// bucket holds goes on at once (a producer writing now and then does not
// wait for an exchange each time). Not while exchanges fail, nor with
// pinned allotments (Pin). The tenant's other calls, and a new tenant
// (awaitAllotment reported it arriving already), do not wait.
func (e *Enforcer) awaitArrival(ctx context.Context, tenantID string, d limit.Dimension, size int64) {
	if e.Allotment(tenantID) == nil || e.ExchangesFailing() || !e.lim.Short(tenantID, d, float64(max(size, 0))) {
		return
	}
	e.mu.Lock()
	if e.pinned { // no exchange changes the allotments
		e.mu.Unlock()
		return
	}
	timeout := e.clock.After(e.firstWait)
	e.arriving[tenantID] = true
	arrived := e.arrived
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
	select {
	case <-arrived:
	case <-timeout:
	case <-ctx.Done():
	}
}

// takeArriving returns the tenants arriving (awaitArrival) for the report
// being built, and the channel their calls wait on, for the report's
// exchange to close once its answer is applied (calls that arrive
// meanwhile wait for the next report).
func (e *Enforcer) takeArriving() (map[string]bool, chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out, reported := e.arriving, e.arrived
	e.arriving, e.arrived = map[string]bool{}, make(chan struct{})
	return out, reported
}

// exchangeEnded wakes the calls waiting in awaitAllotment. The caller
// holds mu.
func (e *Enforcer) exchangeEnded() {
	close(e.exchanged)
	e.exchanged = make(chan struct{})
}
