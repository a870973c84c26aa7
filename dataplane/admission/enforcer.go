package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/dataplane/quota"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/limit/limitpb"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// ExchangeFunc is BrokerService.ExchangeQuotas: the report in, this
// broker's allotments out.
type ExchangeFunc func(context.Context, *sluicev1.ExchangeQuotasRequest) (*sluicev1.ExchangeQuotasResponse, error)

// ReserveFunc is BrokerService.ReserveObjects: one result per
// reservation, in order.
type ReserveFunc func(context.Context, *sluicev1.ReserveObjectsRequest) (*sluicev1.ReserveObjectsResponse, error)

// Config is what an Enforcer is built from: the broker's identity, its
// calls to the control plane, the holdings its reports carry, and where
// its metrics and logs go.
type Config struct {
	// BrokerID is this broker's id; BrokerEpoch its epoch at the control
	// plane, 0 until it has registered (no exchange or reservation is
	// made before: the control plane would refuse them).
	BrokerID    int32
	BrokerEpoch func() int64
	// Interval is how often the Enforcer exchanges quotas
	// (--quota-exchange-interval); 0: 1 s.
	Interval time.Duration
	// Exchange is the loop's call to the control plane (Run); required
	// by Run.
	Exchange ExchangeFunc
	// Reserve reserves new groups and transactional ids (AdmitGroup,
	// AdmitTransactionalID); required by them.
	Reserve ReserveFunc
	// A report's holdings, per tenant (the system tenant is left out
	// whatever they return): the local log bytes of the partitions this
	// broker leads, and the groups and transactional ids its coordinators
	// hold. Each may be nil (nothing held).
	HotStorage       func() map[string]int64
	Groups           func(context.Context) map[string]int
	TransactionalIDs func() map[string]int
	// CountRequest, when set, bills a request of the tenant: every call
	// AdmitCall counts, admitted or refused (the usage meter's requests).
	CountRequest func(tenantID string)
	// Registerer takes the metrics (sluice_broker_quota_…,
	// sluice_broker_count_reservations_total); nil: a registry of its own.
	Registerer prometheus.Registerer
	// Logger: nil discards.
	Logger *slog.Logger
	// Clock is the exchange loop's and the buckets' time; nil: the real
	// one.
	Clock Clock
}

// quotaTenantLabels bounds the tenant label of the per-tenant throttle
// metrics: the tenants throttled most in the last exchange window get
// their own, the others count as "other".
const quotaTenantLabels = 20

// OtherTenants is the tenant label of the tenants without their own in
// the per-tenant throttle metrics.
const OtherTenants = "other"

// Enforcer is a broker's quota state: the buckets and meters, the last
// allotments, the reservations of new names and the throttle metrics'
// tenant labels. Safe for concurrent use.
type Enforcer struct {
	cfg    Config
	clock  Clock
	logger *slog.Logger
	lim    *quota.Limiter
	// allot: the last allotment of each tenant (replaced whole by every
	// exchange answered).
	allot atomic.Pointer[map[string]*sluicev1.TenantAllotment]
	m     *metrics
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
	// (NoticeTenant), reported in the next exchange with or without
	// traffic here.
	asked map[string]bool
	// arriving: tenants with an allotment whose produce starts here
	// (awaitArrival), reported as arriving in the next exchange; that
	// exchange closes arrived, which the calls waiting for it hold, once
	// its answer is applied (a new one takes its place when the report
	// takes the tenants: takeArriving).
	arriving map[string]bool
	arrived  chan struct{}
	// kick asks Run for an exchange now (honoured at most every
	// kickSpacing, and not while exchanges fail).
	kick        chan struct{}
	kickSpacing time.Duration
	// exchanged is closed, and replaced, when an exchange ends, answered
	// or not (guarded by mu); firstWait bounds awaitAllotment.
	exchanged chan struct{}
	firstWait time.Duration
	// pinned: the allotments were put in force by hand (Pin, in tests);
	// exchanges still report but leave them.
	pinned bool
}

// New returns the Enforcer of a broker exchanging every cfg.Interval.
func New(cfg Config) *Enforcer {
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.BrokerEpoch == nil {
		cfg.BrokerEpoch = func() int64 { return 0 }
	}
	e := &Enforcer{cfg: cfg, clock: cfg.Clock, logger: cfg.Logger,
		lim: quota.New(quota.Config{Burst: rateBursts, Now: cfg.Clock.Now}), m: newMetrics(cfg.Registerer),
		throttled: map[string]float64{}, asked: map[string]bool{}, arriving: map[string]bool{}, arrived: make(chan struct{}), kick: make(chan struct{}, 1), exchanged: make(chan struct{}),
		kickSpacing: kickSpacing(cfg.Interval), firstWait: firstAllotmentWait,
		res: newReservations(cfg.Interval)}
	e.res.now = cfg.Clock.Now
	e.allot.Store(&map[string]*sluicev1.TenantAllotment{})
	e.labelled.Store(&map[string]bool{})
	return e
}

// limitedTenant returns the caller's tenant when its quotas apply: a
// tenant's token, not the system tenant.
func limitedTenant(ctx context.Context) (string, bool) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.Kind != tenants.PrincipalTenant || p.TenantID == "" || p.TenantID == system.TenantID {
		return "", false
	}
	return p.TenantID, true
}

// Allotment returns the tenant's allotment as the last exchange answered
// it (or Pin put it), nil when the broker has none.
func (e *Enforcer) Allotment(tenantID string) *sluicev1.TenantAllotment {
	return (*e.allot.Load())[tenantID]
}

// Limits returns the tenant's limits as the last exchange carried them;
// all 0 (not known) when the broker has no allotment for the tenant (ask
// for one with NoticeTenant).
func (e *Enforcer) Limits(tenantID string) limit.Values {
	return limitpb.FromLimits(e.Allotment(tenantID).GetLimits())
}

// NoticeTenant asks for an exchange at once when the broker has no
// allotment for the tenant, so that a tenant new here is limited within
// an exchange's round trip rather than an interval. One ask per tenant
// until an exchange reports it.
func (e *Enforcer) NoticeTenant(tenantID string) {
	if e.Allotment(tenantID) != nil {
		return
	}
	e.mu.Lock()
	asked := e.asked[tenantID]
	e.asked[tenantID] = true
	e.mu.Unlock()
	if asked {
		return
	}
	select {
	case e.kick <- struct{}{}:
	default: // one is asked for already
	}
}

// ExchangesFailing reports whether the last exchange failed.
func (e *Enforcer) ExchangesFailing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failing != ""
}

// Admit decides a call of the caller's tenant (the principal in ctx: a
// tenant's token, as every front door authenticates it) that costs cost
// in dimension d, before its work: refused (a rate refusal, or for
// produce the storage limit's count refusal) or admitted. An admitted
// call is settled with what it used (settle(written), never nil):
//
//   - limit.ProduceBytes is charged cost up front, after the storage
//     limit's check; settle gives back what was not written
//     (cost-written), so that a request the log wrote nothing of costs
//     nothing (RefundProduce, RefundUnwritten);
//   - limit.Requests is charged cost up front, for good (settle does
//     nothing);
//   - the others, limit.FetchBytes and limit.ProducerIDs, are only
//     checked (refused while the bucket is in debt: a fetch at what the
//     tenant's fetches answered lately, at most cost); settle charges
//     written, the bytes answered (ChargeFetch) or the ids created
//     (ChargeProducerID).
//
// A call not of a limited tenant (the system tenant, a broker's
// credential) is admitted and settled for nothing.
func (e *Enforcer) Admit(ctx context.Context, d limit.Dimension, cost int) (settle func(written int), err error) {
	noop := func(int) {}
	id, ok := limitedTenant(ctx)
	if !ok {
		return noop, nil
	}
	switch d {
	case limit.Requests:
		return noop, e.take(id, d, float64(cost))
	case limit.ProduceBytes:
		if err := e.storageRefusal(id); err != nil {
			return noop, err
		}
		if err := e.take(id, d, float64(cost)); err != nil {
			return noop, err
		}
		return func(written int) {
			if written < cost {
				e.lim.Refund(id, d, float64(cost-written))
			}
		}, nil
	}
	e.NoticeTenant(id)
	estimate := float64(cost)
	if d == limit.FetchBytes {
		estimate = e.fetchEstimate(id, cost)
	}
	if dec := e.lim.Check(id, d, estimate); !dec.OK {
		return noop, e.refuseRate(id, d, dec)
	}
	return func(written int) {
		// A fetch that answered nothing is charged too: what fetches
		// answered lately is the estimate of a refused one's.
		if written > 0 || d == limit.FetchBytes {
			e.lim.Charge(id, d, float64(written))
		}
	}, nil
}

// take charges cost in dimension d to a limited tenant, or returns the
// rate refusal.
func (e *Enforcer) take(id string, d quota.Dimension, cost float64) error {
	e.NoticeTenant(id)
	if dec := e.lim.Take(id, d, cost); !dec.OK {
		return e.refuseRate(id, d, dec)
	}
	return nil
}

// storageRefusal is the refusal of a produce while the tenant is at its
// storage limit, nil otherwise.
func (e *Enforcer) storageRefusal(id string) error {
	a := e.Allotment(id)
	if !a.GetStorageExceeded() {
		return nil
	}
	name := limit.MaxTotalStorageBytes.String()
	e.m.refused.WithLabelValues(name).Inc()
	return CountRefusal(id, name, fmt.Sprintf(
		"tenant %s holds %s, at or over its %s limit of %s (hot and cold storage over the cluster): produce is refused until it holds less (delete topics or records, or lower their retention)",
		id, usageBytes(a.GetStorageBytes()), name, fmtBytes(float64(limitpb.FromLimits(a.GetLimits())[limit.MaxTotalStorageBytes]))))
}

// AdmitProduce decides a produce of cost record bytes by the caller's
// tenant, before anything is appended: refused while the tenant is at its
// storage limit, or while its produce bucket is in debt; otherwise charged.
func (e *Enforcer) AdmitProduce(ctx context.Context, cost int) error {
	_, err := e.Admit(ctx, limit.ProduceBytes, cost)
	return err
}

// RefundProduce gives back what AdmitProduce charged (cost) for a produce
// of batches when its answer (duplicate: the answer said the batch was a
// duplicate; err) shows that the log wrote none of them (refundable):
// the client sends them again, and that attempt pays.
func (e *Enforcer) RefundProduce(ctx context.Context, batches, cost int, duplicate bool, err error) {
	if refundable(batches, duplicate, err) {
		e.RefundUnwritten(ctx, cost)
	}
}

// RefundUnwritten gives back cost bytes AdmitProduce charged for a
// produce refused before it reached the log.
func (e *Enforcer) RefundUnwritten(ctx context.Context, cost int) {
	if id, ok := limitedTenant(ctx); ok {
		e.lim.Refund(id, limit.ProduceBytes, float64(cost))
	}
}

// refundable reports whether a produce of one batch answered (duplicate,
// err) wrote nothing: the producer state refused it before appending
// (out of sequence, fenced, an invalid sequence or transaction state), or
// it was a retry of a batch written, and charged, before. A request of
// several batches is never refunded: the log may have written some of
// them before refusing one.
func refundable(batches int, duplicate bool, err error) bool {
	if batches != 1 {
		return false
	}
	if err == nil {
		return duplicate
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

// CheckFetch decides a fetch of at most maxBytes by the caller's tenant
// before it reads: refused while the tenant's fetch bucket is in debt.
// An admitted fetch is charged afterwards (ChargeFetch).
func (e *Enforcer) CheckFetch(ctx context.Context, maxBytes int) error {
	_, err := e.Admit(ctx, limit.FetchBytes, maxBytes)
	return err
}

// fetchEstimate is what a refused fetch of at most maxBytes (0: not known
// yet) would have read, for the offered meter: what the tenant's fetches
// answered lately, at most what it asked.
func (e *Enforcer) fetchEstimate(tenantID string, maxBytes int) float64 {
	mean := e.lim.MeanCharge(tenantID, limit.FetchBytes)
	if maxBytes <= 0 {
		return mean
	}
	if mean > 0 {
		return min(float64(maxBytes), mean)
	}
	return float64(maxBytes)
}

// ChargeFetch charges an admitted fetch the n bytes it answered.
func (e *Enforcer) ChargeFetch(ctx context.Context, n int) {
	if id, ok := limitedTenant(ctx); ok {
		e.lim.Charge(id, limit.FetchBytes, float64(n))
	}
}

// CheckProducerID decides an InitProducerId that will create a producer
// id: refused while the tenant's producer-id bucket is in debt. The id is
// charged once created (ChargeProducerID).
func (e *Enforcer) CheckProducerID(ctx context.Context) error {
	_, err := e.Admit(ctx, limit.ProducerIDs, 1)
	return err
}

// ChargeProducerID charges a producer id created for the caller's tenant.
func (e *Enforcer) ChargeProducerID(ctx context.Context) {
	if id, ok := limitedTenant(ctx); ok {
		e.lim.Charge(id, limit.ProducerIDs, 1)
	}
}

// refuseRate is the refusal of a request over the tenant's rate in d, and
// counts it in the throttle metrics.
func (e *Enforcer) refuseRate(tenantID string, d quota.Dimension, dec quota.Decision) error {
	e.countThrottle(tenantID, d, dec.RetryAfter)
	name := d.Limit().String()
	var cluster string
	if l := e.Allotment(tenantID).GetLimits(); l != nil {
		cluster = fmt.Sprintf("%s across the cluster, ", clusterLimit(d, limitpb.FromLimits(l)[d.Limit()]))
	}
	return &derr.Error{Kind: derr.ThrottlingQuotaExceeded,
		Err: fmt.Errorf("tenant %s is over its %s quota (%s%s of it at this broker now): retry in %s",
			tenantID, name, cluster, brokerRate(d, dec.Rate), dec.RetryAfter.Round(time.Millisecond)),
		RetryAfter: dec.RetryAfter, Throttle: dec.RetryAfter,
		Quota: &derr.QuotaViolation{Tenant: tenantID, Limit: name}}
}

// countThrottle counts a rate refusal of tenantID in d, told to wait,
// in the throttle metrics.
func (e *Enforcer) countThrottle(tenantID string, d quota.Dimension, wait time.Duration) {
	secs := wait.Seconds()
	dim := d.String()
	e.m.throttled.WithLabelValues(dim).Inc()
	e.m.throttleSeconds.WithLabelValues(dim).Add(secs)
	label := OtherTenants
	if (*e.labelled.Load())[tenantID] {
		label = tenantID
	}
	e.m.tenantThrottled.WithLabelValues(label, dim).Inc()
	e.m.tenantThrottleSeconds.WithLabelValues(label, dim).Add(secs)
	e.mu.Lock()
	e.throttled[tenantID] += secs
	e.mu.Unlock()
}

// CountRefusal is the refusal of a request that would add to a count the
// tenant is at the limit of (limitName: the limit's name, as in the
// limit table), with msg as its text: a derr.PolicyViolation naming the
// tenant and the limit, with no retry delay, since retrying does not help
// until its usage drops.
func CountRefusal(tenantID, limitName, msg string) error {
	return &derr.Error{Kind: derr.PolicyViolation, Err: errors.New(msg),
		Quota: &derr.QuotaViolation{Tenant: tenantID, Limit: limitName}}
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
