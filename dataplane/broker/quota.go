package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/dataplane/quota"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/limit/limitpb"
	"github.com/sluicemq/sluice/tenants"
)

// Quotas (issue 17, docs/quotas-and-billing.md). A tenant's rate limits
// (produce and fetch bytes/s, requests/s, producer ids/hour) hold for the
// whole cluster: every --quota-exchange-interval this broker reports what
// each tenant offered and was admitted here, and what it holds here, to
// the control plane (BrokerService.ExchangeQuotas), which answers this
// broker's allotment of each tenant's limits (controlplane/quota divides
// them by the brokers' shares of the tenant's traffic) and whether the
// tenant is at its storage, group or transactional-id limit. The broker
// enforces the allotments with dataplane/quota's token buckets (bursts of
// a quarter of a second: rateBursts), deciding first from a call's
// headers, before its body is read (admitCall, admit.go):
//
//   - requests/s on every call a tenant's token authenticates, in the
//     gate; calls with the broker credential (replication, markers, a
//     broker acting for a tenant) and calls another broker forwarded are
//     not counted;
//   - produce bytes/s on Produce and ProduceMany, transactional or not:
//     refused in the gate while the bucket is in debt; charged the
//     request's record bytes at the broker that appends (a forwarding
//     broker charges nothing), before appending;
//   - fetch bytes/s on Fetch at the leader: refused in the gate (and again
//     before reading) while the bucket is in debt; an admitted one is
//     charged the bytes it answers;
//   - new producer ids per hour on every producer id the broker gives
//     (newProducerID: an idempotent producer's InitProducerId, a
//     transactional id's first one or its epoch overflow).
//
// The count limits on groups and transactional ids are decided where those
// are created, by the coordinators' admission hooks (admitGroup,
// admitTransactionalID), which reserve each new name at the control plane
// (reserve.go).
//
// A rate refusal is ResourceExhausted with google.rpc.RetryInfo (the time
// the bucket's debt takes to pay off) and google.rpc.QuotaFailure (subject
// "tenant:<id>", description the limit's name); a count refusal (storage,
// groups, transactional ids) has the QuotaFailure and no RetryInfo. A
// tenant with no allotment here (new to this broker, or forgotten after 5
// minutes without traffic) makes the broker exchange at once
// (noticeTenant), not at the next interval, and its calls wait for the
// answer, up to 3 s (awaitAllotment); after that, or while exchanges
// fail, they are admitted and metered. While the control plane cannot be
// reached the last allotments stay in force. The system tenant (internal
// topics) is never limited.

// quotaTenantLabels bounds the tenant label of the per-tenant throttle
// metrics: the tenants throttled most in the last exchange window get
// their own, the others count as "other".
const quotaTenantLabels = 20

// otherTenants is the tenant label of the tenants without their own.
const otherTenants = "other"

// quotas is the broker's quota state: the buckets and meters, the last
// allotments, and the throttle metrics' tenant labels.
type quotas struct {
	lim *quota.Limiter
	// allot: the last allotment of each tenant (replaced whole by every
	// exchange answered).
	allot atomic.Pointer[map[string]*sluicev1.TenantAllotment]
	m     *quotaMetrics
	// labelled: the tenants with their own label in the per-tenant
	// throttle metrics.
	labelled atomic.Pointer[map[string]bool]
	// throttled: throttle seconds per tenant since the last exchange (for
	// choosing labelled).
	mu        sync.Mutex
	throttled map[string]float64
	// failing: the last exchange failed with this error ("" when it
	// succeeded), so that a control plane that stays unreachable is
	// logged once, not every interval. Exchanges hold mu while they apply
	// their answer.
	failing string
	// res: the reservations of new groups and transactional ids
	// (reserve.go), confirmed by the exchanges.
	res *reservations
	// asked: tenants with no allotment that asked for an exchange
	// (noticeTenant), reported in the next exchange with or without
	// traffic here.
	asked map[string]bool
	// kick asks quotaLoop for an exchange now (honoured at most every
	// kickSpacing, and not while exchanges fail).
	kick        chan struct{}
	kickSpacing time.Duration
	// exchanged is closed, and replaced, when an exchange ends, answered
	// or not (guarded by mu); firstWait bounds awaitAllotment.
	exchanged chan struct{}
	firstWait time.Duration
	// pinned: the allotments were put in force by hand (pin, in tests);
	// exchanges still report but leave them.
	pinned bool
}

// newQuotas returns the quota state of a broker exchanging every
// interval.
func newQuotas(m *quotaMetrics, interval time.Duration) *quotas {
	q := &quotas{lim: quota.New(quota.Config{Burst: rateBursts}), m: m, throttled: map[string]float64{},
		asked: map[string]bool{}, kick: make(chan struct{}, 1), exchanged: make(chan struct{}),
		kickSpacing: quotaKickSpacing(interval), firstWait: firstAllotmentWait,
		res: newReservations(interval)}
	q.allot.Store(&map[string]*sluicev1.TenantAllotment{})
	q.labelled.Store(&map[string]bool{})
	return q
}

// limitedTenant returns the caller's tenant when its quotas apply: a
// tenant's token, not the system tenant.
func limitedTenant(ctx context.Context) (string, bool) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.Kind != tenants.PrincipalTenant || p.TenantID == "" || p.TenantID == systemTenantID {
		return "", false
	}
	return p.TenantID, true
}

func (q *quotas) allotment(tenantID string) *sluicev1.TenantAllotment {
	return (*q.allot.Load())[tenantID]
}

// noticeTenant asks for an exchange at once when the broker has no
// allotment for the tenant, so that a tenant new here is limited within
// an exchange's round trip rather than an interval. One ask per tenant
// until an exchange reports it.
func (q *quotas) noticeTenant(tenantID string) {
	if q.allotment(tenantID) != nil {
		return
	}
	q.mu.Lock()
	asked := q.asked[tenantID]
	q.asked[tenantID] = true
	q.mu.Unlock()
	if asked {
		return
	}
	select {
	case q.kick <- struct{}{}:
	default: // one is asked for already
	}
}

// exchangesFailing reports whether the last exchange failed.
func (q *quotas) exchangesFailing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failing != ""
}

// takeAsked returns the tenants asked for, and forgets them.
func (q *quotas) takeAsked() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := slices.Collect(maps.Keys(q.asked))
	clear(q.asked)
	return ids
}

// apply makes allotments the ones in force: each tenant's rates (a
// tenant left out keeps none: it is admitted until it has one again) and
// flags.
func (q *quotas) apply(allotments []*sluicev1.TenantAllotment) {
	next := make(map[string]*sluicev1.TenantAllotment, len(allotments))
	for _, a := range allotments {
		if a.GetTenantId() == "" || a.GetTenantId() == systemTenantID {
			continue
		}
		next[a.GetTenantId()] = a
		q.lim.SetRates(a.GetTenantId(), allotmentRates(a.GetRates()))
	}
	for id := range *q.allot.Load() {
		if _, ok := next[id]; !ok {
			q.lim.SetRates(id, quota.Rates{})
		}
	}
	q.allot.Store(&next)
	var sum quota.Rates
	for _, a := range next {
		r := allotmentRates(a.GetRates())
		for d := range quota.Dimensions {
			sum[d] += r[d]
		}
	}
	for d := range quota.Dimensions {
		q.m.allotment.WithLabelValues(quota.Dimension(d).String()).Set(sum[d])
	}
}

// pin puts allotments in force for good: exchanges no longer replace
// them. For tests of enforcement, which would otherwise race the
// exchanges a tenant's first calls ask for.
func (q *quotas) pin(allotments []*sluicev1.TenantAllotment) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pinned = true
	q.apply(allotments)
}

func allotmentRates(r *sluicev1.QuotaRates) quota.Rates { return limitpb.FromRates(r) }

func protoRates(r quota.Rates) *sluicev1.QuotaRates { return limitpb.Rates(r) }

// take charges cost in dimension d to the caller's tenant, or returns the
// rate refusal.
func (q *quotas) take(ctx context.Context, d quota.Dimension, cost float64) error {
	id, ok := limitedTenant(ctx)
	if !ok {
		return nil
	}
	q.noticeTenant(id)
	if dec := q.lim.Take(id, d, cost); !dec.OK {
		return q.refuseRate(id, d, dec)
	}
	return nil
}

// admitProduce decides a produce of cost record bytes by the caller's
// tenant, before anything is appended: refused while the tenant is at its
// storage limit, or while its produce bucket is in debt; otherwise charged.
func (q *quotas) admitProduce(ctx context.Context, cost int) error {
	id, ok := limitedTenant(ctx)
	if !ok {
		return nil
	}
	if a := q.allotment(id); a.GetStorageExceeded() {
		name := limit.MaxTotalStorageBytes.String()
		q.m.refused.WithLabelValues(name).Inc()
		return countRefusal(id, name, fmt.Sprintf(
			"tenant %s holds %s, at or over its %s limit of %s (hot and cold storage over the cluster): produce is refused until it holds less (delete topics or records, or lower their retention)",
			id, usageBytes(a.GetStorageBytes()), name, fmtBytes(float64(limitpb.FromLimits(a.GetLimits())[limit.MaxTotalStorageBytes]))))
	}
	return q.take(ctx, limit.ProduceBytes, float64(cost))
}

// refundProduce gives back what admitProduce charged for a produce of
// batches when its answer (res, err) shows that the log wrote none of them
// (refundable): the client sends them again, and that attempt pays.
func (q *quotas) refundProduce(ctx context.Context, batches int, cost int, res *sluicev1.ProduceResponse, err error) {
	if refundable(batches, res, err) {
		q.refundUnwritten(ctx, cost)
	}
}

// refundUnwritten gives back cost bytes admitProduce charged for a
// produce refused before it reached the log.
func (q *quotas) refundUnwritten(ctx context.Context, cost int) {
	if id, ok := limitedTenant(ctx); ok {
		q.lim.Refund(id, limit.ProduceBytes, float64(cost))
	}
}

// refundable reports whether a produce of one batch answered (res, err)
// wrote nothing: the producer state refused it before appending (out of
// sequence, fenced, an invalid sequence or transaction state), or it was
// a retry of a batch written, and charged, before. A request of several
// batches is never refunded: the log may have written some of them before
// refusing one.
func refundable(batches int, res *sluicev1.ProduceResponse, err error) bool {
	if batches != 1 {
		return false
	}
	if err == nil {
		return res.GetDuplicate()
	}
	for _, e := range []error{producerstate.ErrOutOfOrderSequence, producerstate.ErrProducerFenced, producerstate.ErrDuplicateSequence,
		producerstate.ErrInvalidSequence, producerstate.ErrInvalidProducer, producerstate.ErrInvalidTxnState,
		producerstate.ErrTransactionNotVerified, producerstate.ErrCoordinatorFenced} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// checkFetch decides a fetch of at most maxBytes by the caller's tenant
// before it reads: refused while the tenant's fetch bucket is in debt.
// An admitted fetch is charged afterwards (chargeFetch).
func (q *quotas) checkFetch(ctx context.Context, maxBytes int) error {
	id, ok := limitedTenant(ctx)
	if !ok {
		return nil
	}
	q.noticeTenant(id)
	if dec := q.lim.Check(id, limit.FetchBytes, q.fetchEstimate(id, maxBytes)); !dec.OK {
		return q.refuseRate(id, limit.FetchBytes, dec)
	}
	return nil
}

// fetchEstimate is what a refused fetch of at most maxBytes (0: not known
// yet) would have read, for the offered meter: what the tenant's fetches
// answered lately, at most what it asked.
func (q *quotas) fetchEstimate(tenantID string, maxBytes int) float64 {
	mean := q.lim.MeanCharge(tenantID, limit.FetchBytes)
	if maxBytes <= 0 {
		return mean
	}
	if mean > 0 {
		return min(float64(maxBytes), mean)
	}
	return float64(maxBytes)
}

// chargeFetch charges an admitted fetch the bytes it answered.
func (q *quotas) chargeFetch(ctx context.Context, n int) {
	if id, ok := limitedTenant(ctx); ok {
		q.lim.Charge(id, limit.FetchBytes, float64(n))
	}
}

// checkProducerID decides an InitProducerId that will create a producer
// id: refused while the tenant's producer-id bucket is in debt. The id is
// charged once created (chargeProducerID).
func (q *quotas) checkProducerID(ctx context.Context) error {
	id, ok := limitedTenant(ctx)
	if !ok {
		return nil
	}
	q.noticeTenant(id)
	if dec := q.lim.Check(id, limit.ProducerIDs, 1); !dec.OK {
		return q.refuseRate(id, limit.ProducerIDs, dec)
	}
	return nil
}

// chargeProducerID charges a producer id created for the caller's tenant.
func (q *quotas) chargeProducerID(ctx context.Context) {
	if id, ok := limitedTenant(ctx); ok {
		q.lim.Charge(id, limit.ProducerIDs, 1)
	}
}

// refuseRate is the refusal of a request over the tenant's rate in d, and
// counts it in the throttle metrics.
func (q *quotas) refuseRate(tenantID string, d quota.Dimension, dec quota.Decision) error {
	secs := dec.RetryAfter.Seconds()
	dim := d.String()
	q.m.throttled.WithLabelValues(dim).Inc()
	q.m.throttleSeconds.WithLabelValues(dim).Add(secs)
	label := otherTenants
	if (*q.labelled.Load())[tenantID] {
		label = tenantID
	}
	q.m.tenantThrottled.WithLabelValues(label, dim).Inc()
	q.m.tenantThrottleSeconds.WithLabelValues(label, dim).Add(secs)
	q.mu.Lock()
	q.throttled[tenantID] += secs
	q.mu.Unlock()

	name := d.Limit().String()
	var cluster string
	if l := q.allotment(tenantID).GetLimits(); l != nil {
		cluster = fmt.Sprintf("%s across the cluster, ", clusterLimit(d, limitpb.FromLimits(l)[d.Limit()]))
	}
	err := connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
		"tenant %s is over its %s quota (%s%s of it at this broker now): retry in %s",
		tenantID, name, cluster, brokerRate(d, dec.Rate), dec.RetryAfter.Round(time.Millisecond)))
	if det, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(dec.RetryAfter)}); derr == nil {
		err.AddDetail(det)
	}
	addQuotaFailure(err, tenantID, name)
	return err
}

// countRefusal is the refusal of a request that would add to a count the
// tenant is at the limit of: no RetryInfo, since retrying does not help
// until its usage drops.
func countRefusal(tenantID, limit, msg string) error {
	err := connect.NewError(connect.CodeResourceExhausted, errors.New(msg))
	addQuotaFailure(err, tenantID, limit)
	return err
}

func addQuotaFailure(err *connect.Error, tenantID, limit string) {
	qf := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:" + tenantID, Description: limit}}}
	if det, derr := connect.NewErrorDetail(qf); derr == nil {
		err.AddDetail(det)
	}
}

// clusterLimit writes the tenant's limit v in d, in the limit's unit:
// "5 MiB/s", "500 requests/s", "1000 producer ids/hour".
func clusterLimit(d quota.Dimension, v int64) string {
	def := d.Limit().Def()
	if def.Unit == limit.Bytes {
		return fmtBytes(float64(v)) + "/" + def.PerName()
	}
	return fmt.Sprintf("%d %s/%s", v, def.Noun, def.PerName())
}

// brokerRate writes this broker's allotment in d, a rate per second, in
// the limit's unit.
func brokerRate(d quota.Dimension, rate float64) string {
	def := d.Limit().Def()
	v := def.FromPerSecond(rate)
	if def.Unit == limit.Bytes {
		return fmtBytes(v) + "/" + def.PerName()
	}
	return fmt.Sprintf("%.4g %s/%s", v, def.Noun, def.PerName())
}

// fmtBytes writes n bytes in binary units: "512 B", "5 MiB", "1.5 GiB".
func fmtBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	s := strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", n), "0"), ".")
	return s + " " + units[i]
}

// usageBytes writes the tenant's storage as the control plane summed it,
// or "at least its limit" when the allotment does not say.
func usageBytes(n int64) string {
	if n <= 0 {
		return "at least its limit"
	}
	return fmtBytes(float64(n))
}

func usageCount(n int64, what string) string {
	if n <= 0 {
		return "at least its limit of " + what
	}
	return fmt.Sprintf("%d %s", n, what)
}

// batchBytes is the size of produced batches, what a produce is charged.
func batchBytes(batches []log.ValidBatch) int {
	n := 0
	for _, b := range batches {
		n += len(b.Batch())
	}
	return n
}

// quotaLoop exchanges quotas with the control plane every
// --quota-exchange-interval until ctx ends, and in between when a tenant
// with no allotment asks (schedule).
func (b *Broker) quotaLoop(ctx context.Context) {
	b.quota.schedule(ctx, b.cfg.QuotaExchangeInterval, func() { _ = b.exchangeQuotas(ctx, b.cp) })
}

// schedule runs exchange every interval until ctx ends, and in between
// when a tenant with no allotment asks (noticeTenant): at most once every
// kickSpacing, and not while exchanges fail (the next interval's tries
// again), so that neither a stream of new tenants nor a control plane
// that is down makes the broker exchange back to back.
func (q *quotas) schedule(ctx context.Context, interval time.Duration, exchange func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-q.kick:
			if q.exchangesFailing() {
				continue
			}
			sleep(ctx, time.Until(last.Add(q.kickSpacing)))
			if ctx.Err() != nil {
				return
			}
		}
		last = time.Now()
		exchange()
	}
}

// exchangeQuotas closes the meters' window, reports every tenant with
// traffic or holdings here to cp, and applies the allotments answered.
// When cp does not answer, the allotments in force stay (and the error is
// logged once while it lasts).
func (b *Broker) exchangeQuotas(ctx context.Context, cp sluicev1connect.BrokerServiceClient) error {
	q := b.quota
	req := b.quotaReport(ctx)
	if req == nil {
		return errors.New("not registered with the control plane yet")
	}
	cctx, cancel := context.WithTimeout(ctx, quotaExchangeTimeout(b.cfg.QuotaExchangeInterval))
	defer cancel()
	res, err := cp.ExchangeQuotas(cctx, connect.NewRequest(req))
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.exchangeEnded()
	if err != nil {
		if ctx.Err() == nil && q.failing != err.Error() {
			b.logger.Warn("exchange quotas with the control plane; the last allotments stay in force", "err", err)
		}
		q.failing = err.Error()
		return err
	}
	if q.failing != "" {
		b.logger.Info("exchanging quotas with the control plane again")
		q.failing = ""
	}
	q.res.confirmed(req.GetApplied())
	if !q.pinned {
		q.apply(res.Msg.GetAllotments())
	}
	return nil
}

// quotaKickSpacing is the least time between an exchange and one a tenant
// with no allotment asks for: a quarter of the interval, at most 100 ms.
func quotaKickSpacing(interval time.Duration) time.Duration {
	return min(interval/4, 100*time.Millisecond)
}

// quotaExchangeTimeout bounds one exchange with the control plane.
func quotaExchangeTimeout(interval time.Duration) time.Duration {
	return max(interval, time.Second)
}

// quotaReport closes the meters' window and reports, for every tenant
// with traffic or holdings here (the system tenant left out), its offered
// and admitted rates over the window, the local log bytes of its
// partitions this broker leads, and the groups and transactional ids this
// broker coordinates for it, with the reservations of new ones applied
// before they were counted; nil before the broker has registered.
func (b *Broker) quotaReport(ctx context.Context) *sluicev1.ExchangeQuotasRequest {
	q := b.quota
	meters, _ := q.lim.Window()
	q.relabel()
	epoch := b.brokerEpoch.Load()
	if epoch == 0 {
		return nil
	}
	// The reservations applied so far, taken before the groups and
	// transactional ids are counted: each that created an object is in
	// the counts below (unless its coordinator moved since).
	applied := q.res.takeApplied()
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
	for id, n := range b.hotStorageByTenant() {
		report(id).HotStorageBytes = n
	}
	for _, id := range q.takeAsked() {
		report(id)
	}
	for id, n := range b.groupsByTenant(ctx) {
		report(id).Groups = int32(n)
	}
	for _, c := range b.currentTxnCoordinators() {
		for id, n := range c.IDsByTenant() {
			report(id).TransactionalIds += int32(n)
		}
	}
	delete(reports, systemTenantID)
	req := &sluicev1.ExchangeQuotasRequest{BrokerId: b.cfg.ID, BrokerEpoch: epoch, Applied: applied}
	for _, id := range slices.Sorted(maps.Keys(reports)) {
		req.Tenants = append(req.Tenants, reports[id])
	}
	return req
}

// groupsByTenant counts the groups of the offsets partitions this broker
// leads, per tenant, loading their coordinators (a partition whose
// coordinator cannot load yet is left out this time).
func (b *Broker) groupsByTenant(ctx context.Context) map[string]int {
	out := map[string]int{}
	t, ok := b.metadata().Topic(systemTenantID, offsetsTopic)
	if !ok {
		return out
	}
	for _, pm := range t.Partitions {
		if pm.Leader != b.cfg.ID {
			continue
		}
		c, err := b.coordinatorAt(ctx, t, pm)
		if err != nil {
			continue
		}
		for id, n := range c.GroupsByTenant() {
			out[id] += n
		}
	}
	return out
}

// hotStorageByTenant sums the local log bytes of the partitions this
// broker leads, per tenant.
func (b *Broker) hotStorageByTenant() map[string]int64 {
	out := map[string]int64{}
	for _, p := range b.partitions() {
		if p.TenantID() == systemTenantID || p.Status().Role != partition.RoleLeader {
			continue
		}
		out[p.TenantID()] += p.Log().Size()
	}
	return out
}

// relabel chooses the tenants with their own label in the per-tenant
// throttle metrics: the quotaTenantLabels tenants throttled longest since
// the last exchange, those labelled already first among equals. A tenant
// that loses its label has its series deleted.
func (q *quotas) relabel() {
	q.mu.Lock()
	window := q.throttled
	q.throttled = map[string]float64{}
	q.mu.Unlock()
	old := *q.labelled.Load()
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
			q.m.forget(id)
		}
	}
	q.labelled.Store(&next)
}
