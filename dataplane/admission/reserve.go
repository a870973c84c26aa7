package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants/system"
)

// Count admission (docs/quotas-and-billing.md "Count limits"). A tenant's
// groups and transactional ids are counted against max_groups and
// max_transactional_ids. The coordinators ask before creating one
// (coordinator.Config.Admit, txn.Config.Admit: AdmitGroup,
// AdmitTransactionalID), and the Enforcer reserves the new name at the
// control plane (Config.Reserve: BrokerService.ReserveObjects), which decides atomically per
// tenant against the sum of the brokers' reports plus the names reserved
// and not yet reported. So a burst of creations over any number of brokers
// stops at the limit, instead of running on until the next quota exchange
// shows the sum (what deciding on the exchange's groups_exceeded flag did:
// 916–1,000 of 1,000 concurrent new groups admitted against a limit of
// 100 in TestQuotaCountLimitsBurst).
//
// Reservations made while a ReserveObjects call is in flight go together in
// the next one (group commit: a burst costs a few round trips, not one per
// creation). Once the coordinator has created the object, or failed to, the
// reservation is applied (its done); the next quota exchange lists the
// applied reservations, taken before it counts the holdings it reports, and
// the control plane drops them from the pending names in the transaction
// that writes the report, so each object is counted once, by the report.
//
// When the control plane cannot be reached (a call fails, or times out
// after reserveTimeout) the creation is admitted unreserved, and so
// is every other for the next exchange interval: groups and transactional
// ids keep working through a control-plane outage, as produce and fetch do,
// at the cost of a tenant passing its limit by what it creates at that
// broker meanwhile (counted once reported, so later creations are refused
// until it is under the limit again). Counted in
// sluice_broker_count_reservations_total{result="unreserved"}.

// maxReserveBatch bounds the reservations of one ReserveObjects call (the
// control plane's limit is 10,000).
const maxReserveBatch = 1000

// reservations is a broker's side of ReserveObjects: the reservations
// waiting for the next call, and those applied and not yet confirmed by an
// exchange. Goroutines: one sender at most (send), started by the first
// reservation that finds none and ending when the queue is empty. mu
// guards everything; it is never held across a call.
type reservations struct {
	timeout, backoff time.Duration
	now              func() time.Time

	mu      sync.Mutex
	queue   []*reservation
	sending bool
	// applied: reservations applied (or abandoned after their grant),
	// in the order applied, until an exchange that carried them is
	// answered (confirmed).
	applied []*sluicev1.ObjectReservation
	// unreachableUntil: the last call failed; until then creations are
	// admitted unreserved without a call.
	unreachableUntil time.Time
	failing          bool
}

// reservation is one name waiting for its decision.
type reservation struct {
	obj  *sluicev1.ObjectReservation
	done chan struct{} // closed once decided, or once the call failed
	res  *sluicev1.ObjectReservationResult
	// abandoned: its caller stopped waiting; a grant is applied at once
	// (nothing will be created for it).
	abandoned bool
}

// newReservations returns the reservations of a broker exchanging quotas
// every interval: a call waits at most reserveTimeout (or an exchange's
// timeout, when longer), and after a failure none is tried for an interval
// (at least 1 s).
func newReservations(interval time.Duration) *reservations {
	return &reservations{timeout: max(exchangeTimeout(interval), reserveTimeout), backoff: max(interval, time.Second), now: time.Now}
}

// reserveTimeout bounds a ReserveObjects call: long enough that a control
// plane slowed by a burst of creations (a thousand reservations decided
// one after another under the tenant's lock) still decides them, rather
// than the broker admitting them unreserved after an exchange's second.
const reserveTimeout = 5 * time.Second

// reserveFunc is the ReserveObjects call: one result per reservation, in
// order.
type reserveFunc func(context.Context, []*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error)

// reserve asks for obj in the next call and waits for its decision: the
// result (decided), or decided false when the call failed (or the control
// plane was found unreachable lately). It returns ctx's error if ctx ends
// first (a grant that comes after is applied at once).
func (r *reservations) reserve(ctx context.Context, send reserveFunc, logger *slog.Logger, obj *sluicev1.ObjectReservation) (res *sluicev1.ObjectReservationResult, decided bool, err error) {
	rv := &reservation{obj: obj, done: make(chan struct{})}
	r.mu.Lock()
	if r.now().Before(r.unreachableUntil) {
		r.mu.Unlock()
		return nil, false, nil
	}
	r.queue = append(r.queue, rv)
	if !r.sending {
		r.sending = true
		go r.send(send, logger)
	}
	r.mu.Unlock()
	select {
	case <-rv.done:
		return rv.res, rv.res != nil, nil
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-rv.done:
		// Decided meanwhile: a grant nothing will use is applied now.
		if rv.res.GetGranted() {
			r.applied = append(r.applied, rv.obj)
		}
	default:
		rv.abandoned = true
	}
	return nil, false, ctx.Err()
}

// send makes ReserveObjects calls while reservations wait, each with those
// queued when it starts (at most maxReserveBatch). A failed call fails
// every reservation waiting, which are then admitted unreserved; the first
// failure after a success is logged.
func (r *reservations) send(call reserveFunc, logger *slog.Logger) {
	for {
		r.mu.Lock()
		batch := r.queue[:min(len(r.queue), maxReserveBatch)]
		r.queue = r.queue[len(batch):]
		if len(batch) == 0 {
			r.sending = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		objs := make([]*sluicev1.ObjectReservation, len(batch))
		for i, rv := range batch {
			objs[i] = rv.obj
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		res, err := call(ctx, objs)
		cancel()
		if err == nil && len(res) != len(batch) {
			err = fmt.Errorf("control plane answered %d decisions for %d reservations", len(res), len(batch))
		}
		r.mu.Lock()
		if err != nil {
			batch = append(batch, r.queue...)
			r.queue = nil
			r.unreachableUntil = r.now().Add(r.backoff)
			if !r.failing {
				logger.Warn("reserve new groups and transactional ids at the control plane; creations are admitted unreserved meanwhile", "err", err)
			}
			r.failing = true
		} else if r.failing {
			logger.Info("reserving new groups and transactional ids at the control plane again")
			r.failing = false
		}
		for i, rv := range batch {
			if err == nil {
				rv.res = res[i]
				if rv.abandoned && rv.res.GetGranted() {
					r.applied = append(r.applied, rv.obj)
				}
			}
			close(rv.done)
		}
		r.mu.Unlock()
	}
}

// apply records that a granted reservation's creation is over (created,
// or failed): the next exchange confirms it.
func (r *reservations) apply(obj *sluicev1.ObjectReservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, obj)
}

// takeApplied returns the reservations applied so far, for an exchange's
// report; they stay until confirmed.
func (r *reservations) takeApplied() []*sluicev1.ObjectReservation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*sluicev1.ObjectReservation(nil), r.applied...)
}

// confirmed forgets the reservations an answered exchange carried.
func (r *reservations) confirmed(sent []*sluicev1.ObjectReservation) {
	if len(sent) == 0 {
		return
	}
	done := make(map[*sluicev1.ObjectReservation]bool, len(sent))
	for _, o := range sent {
		done[o] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.applied[:0]
	for _, o := range r.applied {
		if !done[o] {
			kept = append(kept, o)
		}
	}
	clear(r.applied[len(kept):])
	r.applied = kept
}

// countLimited reports whether a creation for tenantID by the caller
// counts against the tenant's limits: a tenant's token (a broker acting
// for a tenant is not limited), not the system tenant.
func countLimited(ctx context.Context, tenantID string) bool {
	_, ok := limitedTenant(ctx)
	return ok && tenantID != system.TenantID
}

// AdmitGroup is the group coordinators' admission of a new group
// (coordinator.Config.Admit): every call that would create a group passes
// it, whatever RPC or front door it came through. Granted, release
// (nil when nothing was reserved) is called once the creation is over,
// done or failed; refused, the error is a count refusal.
func (e *Enforcer) AdmitGroup(ctx context.Context, tenantID, group string) (release func(), err error) {
	return e.admitNew(ctx, tenantID, sluicev1.CountedKind_COUNTED_KIND_GROUP, group)
}

// AdmitTransactionalID is the transaction coordinators' admission of a new
// transactional id (txn.Config.Admit), as AdmitGroup. The id's new
// producer id is decided by CheckProducerID.
func (e *Enforcer) AdmitTransactionalID(ctx context.Context, tenantID, transactionalID string) (release func(), err error) {
	return e.admitNew(ctx, tenantID, sluicev1.CountedKind_COUNTED_KIND_TRANSACTIONAL_ID, transactionalID)
}

// admitNew reserves a new object of the caller's tenant at the control
// plane: granted, the creation goes on and done applies the reservation;
// refused, the call is answered the count refusal; undecided (the control
// plane unreachable), it goes on unreserved.
func (e *Enforcer) admitNew(ctx context.Context, tenantID string, kind sluicev1.CountedKind, name string) (func(), error) {
	if !countLimited(ctx, tenantID) {
		return nil, nil
	}
	obj := &sluicev1.ObjectReservation{TenantId: tenantID, Kind: kind, Name: name, Token: rand.Int64()}
	res, decided, err := e.res.reserve(ctx, e.reserveObjects, e.logger, obj)
	lim, existing := limit.MaxGroups, "existing groups are served; delete groups it no longer uses"
	label, what := "group", "consumer groups"
	if kind == sluicev1.CountedKind_COUNTED_KIND_TRANSACTIONAL_ID {
		lim, existing = limit.MaxTransactionalIDs, "known ids are served; unused ids are forgotten after --transactional-id-expiration"
		label, what = "transactional_id", lim.Def().Noun
	}
	switch {
	case err != nil:
		return nil, err
	case !decided:
		e.m.reservations.WithLabelValues(label, "unreserved").Inc()
		return nil, nil
	case res.GetGranted():
		e.m.reservations.WithLabelValues(label, "granted").Inc()
		return func() { e.res.apply(obj) }, nil
	}
	e.m.reservations.WithLabelValues(label, "refused").Inc()
	e.m.refused.WithLabelValues(lim.String()).Inc()
	kindName := "group"
	if label == "transactional_id" {
		kindName = "transactional id"
	}
	return nil, CountRefusal(tenantID, lim.String(), fmt.Sprintf(
		"tenant %s has %s, at or over its %s limit of %d: %s %q would be a new one (%s)",
		tenantID, usageCount(res.GetCount(), what), lim, res.GetLimit(), kindName, name, existing))
}

// reserveObjects is the ReserveObjects call (Config.Reserve) with this
// broker's identity.
func (e *Enforcer) reserveObjects(ctx context.Context, objs []*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error) {
	epoch := e.cfg.BrokerEpoch()
	if epoch == 0 {
		return nil, errors.New("not registered with the control plane yet")
	}
	res, err := e.cfg.Reserve(ctx, &sluicev1.ReserveObjectsRequest{BrokerId: e.cfg.BrokerID, BrokerEpoch: epoch, Reservations: objs})
	if err != nil {
		return nil, err
	}
	return res.GetResults(), nil
}
