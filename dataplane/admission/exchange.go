package admission

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/dataplane/quota"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit/limitpb"
	"github.com/sluicemq/sluice/tenants/system"
)

// takeAsked returns the tenants asked for, and forgets them.
func (e *Enforcer) takeAsked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := slices.Collect(maps.Keys(e.asked))
	clear(e.asked)
	return ids
}

// apply makes allotments the ones in force: each tenant's rates (a
// tenant left out keeps none: it is admitted until it has one again) and
// flags.
func (e *Enforcer) apply(allotments []*sluicev1.TenantAllotment) {
	next := make(map[string]*sluicev1.TenantAllotment, len(allotments))
	for _, a := range allotments {
		if a.GetTenantId() == "" || a.GetTenantId() == system.TenantID {
			continue
		}
		next[a.GetTenantId()] = a
		e.lim.SetRates(a.GetTenantId(), allotmentRates(a.GetRates()))
	}
	for id := range *e.allot.Load() {
		if _, ok := next[id]; !ok {
			e.lim.SetRates(id, quota.Rates{})
		}
	}
	e.allot.Store(&next)
	var sum quota.Rates
	for _, a := range next {
		r := allotmentRates(a.GetRates())
		for d := range quota.Dimensions {
			sum[d] += r[d]
		}
	}
	for d := range quota.Dimensions {
		e.m.allotment.WithLabelValues(quota.Dimension(d).String()).Set(sum[d])
	}
}

// Pin puts allotments in force for good: exchanges no longer replace
// them. For tests of enforcement, which would otherwise race the
// exchanges a tenant's first calls ask for.
func (e *Enforcer) Pin(allotments []*sluicev1.TenantAllotment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.pinned = true
	e.apply(allotments)
}

func allotmentRates(r *sluicev1.QuotaRates) quota.Rates { return limitpb.FromRates(r) }

func protoRates(r quota.Rates) *sluicev1.QuotaRates { return limitpb.Rates(r) }

// Run exchanges quotas with the control plane (Config.Exchange) every
// Config.Interval until ctx ends, and in between when a tenant with no
// allotment asks (schedule).
func (e *Enforcer) Run(ctx context.Context) {
	e.schedule(ctx, e.cfg.Interval, func() { _ = e.Exchange(ctx, e.cfg.Exchange) })
}

// schedule runs exchange every interval until ctx ends, and in between
// when a tenant with no allotment asks (NoticeTenant): at most once every
// kickSpacing, and not while exchanges fail (the next interval's tries
// again), so that neither a stream of new tenants nor a control plane
// that is down makes the broker exchange back to back. The interval's
// exchanges keep a time.Ticker's: due every interval from the start, one
// at once when an exchange overran one or more (the others dropped).
func (e *Enforcer) schedule(ctx context.Context, interval time.Duration, exchange func()) {
	c := e.clock
	tick := c.Now().Add(interval) // when the interval's next exchange is due
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.After(tick.Sub(c.Now())):
			for now := c.Now(); !tick.After(now); {
				tick = tick.Add(interval)
			}
		case <-e.kick:
			if e.ExchangesFailing() {
				continue
			}
			if d := last.Add(e.kickSpacing).Sub(c.Now()); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-c.After(d):
				}
			}
			if ctx.Err() != nil {
				return
			}
		}
		last = c.Now()
		exchange()
	}
}

// Exchange closes the meters' window, reports every tenant with traffic
// or holdings here through call (Report), and applies the allotments
// answered. When call fails the allotments in force stay (and the error
// is logged once while it lasts). Run calls it with Config.Exchange.
func (e *Enforcer) Exchange(ctx context.Context, call ExchangeFunc) error {
	req, reported := e.report(ctx)
	if req == nil {
		return errors.New("not registered with the control plane yet")
	}
	// Last (after the answer is applied, answered or not): the produces
	// waiting for this report go on.
	defer close(reported)
	cctx, cancel := context.WithTimeout(ctx, exchangeTimeout(e.cfg.Interval))
	defer cancel()
	res, err := call(cctx, req)
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.exchangeEnded()
	if err != nil {
		if ctx.Err() == nil && e.failing != err.Error() {
			e.logger.Warn("exchange quotas with the control plane; the last allotments stay in force", "err", err)
		}
		e.failing = err.Error()
		return err
	}
	if e.failing != "" {
		e.logger.Info("exchanging quotas with the control plane again")
		e.failing = ""
	}
	e.res.confirmed(req.GetApplied())
	if !e.pinned {
		e.apply(res.GetAllotments())
	}
	return nil
}

// kickSpacing is the least time between an exchange and one a tenant
// with no allotment asks for: a quarter of the interval, at most 100 ms.
func kickSpacing(interval time.Duration) time.Duration {
	return min(interval/4, 100*time.Millisecond)
}

// exchangeTimeout bounds one exchange with the control plane.
func exchangeTimeout(interval time.Duration) time.Duration {
	return max(interval, time.Second)
}

// Report closes the meters' window and reports, for every tenant with
// traffic or holdings here (the system tenant left out), its offered and
// admitted rates over the window, the local log bytes of its partitions
// this broker leads, and the groups and transactional ids this broker
// coordinates for it (Config's holdings), with the reservations of new
// ones applied before they were counted; a tenant asked for
// (NoticeTenant) that has no meter yet, and one whose produce starts
// here (awaitArrival), is reported as arriving; nil before the broker
// has registered. Exchange sends it; a report not sent loses its window,
// and the produces waiting for an exchange to report their tenant
// arriving go on without one.
func (e *Enforcer) Report(ctx context.Context) *sluicev1.ExchangeQuotasRequest {
	req, reported := e.report(ctx)
	if reported != nil {
		close(reported)
	}
	return req
}

// report is Report, with the channel the produces waiting for it hold
// (awaitArrival), for the caller to close once the answer is applied;
// nil and nil before the broker has registered.
func (e *Enforcer) report(ctx context.Context) (*sluicev1.ExchangeQuotasRequest, chan struct{}) {
	meters, _ := e.lim.Window()
	e.relabel()
	epoch := e.cfg.BrokerEpoch()
	if epoch == 0 {
		return nil, nil
	}
	// The reservations applied so far, taken before the groups and
	// transactional ids are counted: each that created an object is in
	// the counts below (unless its coordinator moved since).
	applied := e.res.takeApplied()
	reports := map[string]*sluicev1.TenantQuotaReport{}
	report := func(id string) *sluicev1.TenantQuotaReport {
		r := reports[id]
		if r == nil {
			r = &sluicev1.TenantQuotaReport{TenantId: id, Offered: &sluicev1.QuotaRates{}, Admitted: &sluicev1.QuotaRates{}}
			reports[id] = r
		}
		return r
	}
	for id, m := range meters {
		r := report(id)
		r.Offered, r.Admitted = protoRates(m.Offered), protoRates(m.Admitted)
	}
	if e.cfg.HotStorage != nil {
		for id, n := range e.cfg.HotStorage() {
			report(id).HotStorageBytes = n
		}
	}
	for _, id := range e.takeAsked() {
		// Asked for with no meter: its first calls wait for this
		// answer, and what it offers here is not measured yet.
		_, metered := meters[id]
		report(id).Arriving = !metered
	}
	arriving, reported := e.takeArriving()
	for id := range arriving {
		report(id).Arriving = true // its produce starts here (awaitArrival)
	}
	if e.cfg.Groups != nil {
		for id, n := range e.cfg.Groups(ctx) {
			report(id).Groups = int32(n)
		}
	}
	if e.cfg.TransactionalIDs != nil {
		for id, n := range e.cfg.TransactionalIDs() {
			report(id).TransactionalIds += int32(n)
		}
	}
	delete(reports, system.TenantID)
	req := &sluicev1.ExchangeQuotasRequest{BrokerId: e.cfg.BrokerID, BrokerEpoch: epoch, Applied: applied}
	for _, id := range slices.Sorted(maps.Keys(reports)) {
		req.Tenants = append(req.Tenants, reports[id])
	}
	return req, reported
}

// relabel chooses the tenants with their own label in the per-tenant
// throttle metrics: the quotaTenantLabels tenants throttled longest since
// the last exchange, those labelled already first among equals. A tenant
// that loses its label has its series deleted.
func (e *Enforcer) relabel() {
	e.mu.Lock()
	window := e.throttled
	e.throttled = map[string]float64{}
	e.mu.Unlock()
	old := *e.labelled.Load()
	if len(window) == 0 {
		return // nothing throttled: keep the labels
	}
	ids := slices.Collect(maps.Keys(window))
	slices.SortFunc(ids, func(a, b string) int {
		switch {
		case window[a] != window[b]:
			if window[a] > window[b] {
				return -1
			}
			return 1
		case old[a] != old[b]:
			if old[a] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	next := make(map[string]bool, quotaTenantLabels)
	for _, id := range ids[:min(len(ids), quotaTenantLabels)] {
		next[id] = true
	}
	// Tenants not throttled in this window keep their labels while there
	// is room.
	for id := range old {
		if len(next) >= quotaTenantLabels {
			break
		}
		next[id] = true
	}
	for id := range old {
		if !next[id] {
			e.m.forget(id)
		}
	}
	e.labelled.Store(&next)
}
