package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit/limitpb"
)

// Quotas and metering: the brokers' side (docs/quotas-and-billing.md).
//
// ExchangeQuotas is called by every broker about once a second, so it costs
// a broker-list read (the epoch check), one read (every fresh report of
// the tenants named) and one write (the broker's reports); tenants' limits
// (limitCache) and cold bytes (coldCache) are cached for a few seconds.

// quotaConfig is how ExchangeQuotas divides limits.
var quotaConfig = quota.DefaultConfig()

// ExchangeQuotas implements BrokerService: a broker's per-tenant demand and
// holdings in, its allotments of each tenant's cluster-wide limits out
// (controlplane/quota divides them). The reports are stamped with this
// replica's clock: replicas' clocks must agree to well within
// quota.DefaultFresh. The reservations the broker confirms (applied) end
// in the same store transaction as its reports are written.
func (s *brokerService) ExchangeQuotas(ctx context.Context, req *connect.Request[sluicev1.ExchangeQuotasRequest]) (*connect.Response[sluicev1.ExchangeQuotasResponse], error) {
	m := req.Msg
	reports, err := validateExchangeQuotas(m)
	if err != nil {
		return nil, err
	}
	if n := len(m.GetApplied()); n > store.MaxReservations {
		return nil, invalid("applied", "has %d entries; at most %d", n, store.MaxReservations)
	}
	applied, err := validObjectReservations("applied", m.GetApplied())
	if err != nil {
		return nil, err
	}
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkBrokerEpoch(brokers, m.GetBrokerId(), m.GetBrokerEpoch()); err != nil {
		return nil, err
	}
	now := s.now().UTC()
	ids := make([]string, len(reports))
	for i, r := range reports {
		ids[i] = r.TenantID
	}
	// The other brokers' fresh reports, read before this one's are
	// written (which they leave out), so that an arriving report's
	// estimate (quota.Arrive) is what is stored and every broker divides
	// by it.
	var stored []store.QuotaReport
	if len(reports) > 0 {
		if stored, err = s.store.ListQuotaReports(ctx, ids, now.Add(-quotaConfig.Fresh)); err != nil {
			return nil, err
		}
	}
	byTenant := make(map[string][]quota.Report, len(reports))
	for _, r := range stored {
		if r.BrokerID == m.GetBrokerId() {
			continue // this call's own, below
		}
		byTenant[r.TenantID] = append(byTenant[r.TenantID], fromStoreReport(r))
	}
	put := make([]store.QuotaReport, len(reports))
	for i := range reports {
		r := &reports[i]
		r.Report = quota.Arrive(r.Report, quotaConfig.FreshReports(byTenant[r.TenantID], now))
		put[i] = store.QuotaReport{
			TenantID:         r.TenantID,
			Offered:          toStoreRates(r.Offered),
			Admitted:         toStoreRates(r.Admitted),
			HotStorageBytes:  r.HotStorageBytes,
			Groups:           int32(r.Groups),
			TransactionalIDs: int32(r.TransactionalIDs),
		}
	}
	if err := s.store.PutQuotaReports(ctx, m.GetBrokerId(), now, put, applied); err != nil {
		return nil, err
	}
	res := &sluicev1.ExchangeQuotasResponse{Allotments: make([]*sluicev1.TenantAllotment, 0, len(reports))}
	if len(reports) == 0 {
		return connect.NewResponse(res), nil
	}
	cold, err := s.cold.get(ctx, s.store, now)
	if err != nil {
		return nil, err
	}
	for _, r := range reports {
		own := r.Report
		own.At = now
		fresh := quotaConfig.FreshReports(append(byTenant[r.TenantID], own), now)
		a, err := s.allot(ctx, r.TenantID, m.GetBrokerId(), fresh, cold[r.TenantID], now)
		if err != nil {
			return nil, err
		}
		res.Allotments = append(res.Allotments, a)
	}
	return connect.NewResponse(res), nil
}

// allot answers broker's part of one tenant's limits from the tenant's
// fresh reports (broker's own among them) and cold bytes. A tenant the
// store does not know gets nothing: zero rates, every count limit reached.
func (s *brokerService) allot(ctx context.Context, tenantID string, broker int32, fresh []quota.Report, cold int64, now time.Time) (*sluicev1.TenantAllotment, error) {
	limits, known, err := s.limits.get(ctx, s.store, tenantID, now)
	if err != nil {
		return nil, err
	}
	if !known {
		return &sluicev1.TenantAllotment{TenantId: tenantID, Rates: &sluicev1.QuotaRates{},
			StorageExceeded: true, GroupsExceeded: true, TransactionalIdsExceeded: true, Limits: &sluicev1.Limits{}}, nil
	}
	rates := quotaConfig.Divide(quota.LimitRates(limits), fresh)[broker]
	h := quota.Sum(fresh, cold)
	d := quota.Decide(limits, h)
	return &sluicev1.TenantAllotment{
		TenantId:                 tenantID,
		Rates:                    toQuotaRatesPB(rates),
		StorageExceeded:          d.StorageExceeded,
		GroupsExceeded:           d.GroupsExceeded,
		TransactionalIdsExceeded: d.TransactionalIDsExceeded,
		Limits:                   toLimitsPB(limits),
		StorageBytes:             h.StorageBytes(),
		Groups:                   h.Groups,
		TransactionalIds:         h.TransactionalIDs,
	}, nil
}

// ReportUsage implements BrokerService: a broker's metered usage, applied
// exactly once (store.UsageStore.ApplyUsageReport), in the hour of this
// replica's clock.
func (s *brokerService) ReportUsage(ctx context.Context, req *connect.Request[sluicev1.ReportUsageRequest]) (*connect.Response[sluicev1.ReportUsageResponse], error) {
	m := req.Msg
	if err := validateReportUsage(m); err != nil {
		return nil, err
	}
	r := store.UsageReport{
		BrokerID:    m.GetBrokerId(),
		BrokerEpoch: m.GetBrokerEpoch(),
		Sequence:    m.GetSequence(),
		At:          s.now().UTC(),
		Counters:    make([]store.UsageCounters, len(m.GetCounters())),
		Ingress:     make([]store.IngressRange, len(m.GetIngress())),
	}
	for i, c := range m.GetCounters() {
		r.Counters[i] = store.UsageCounters{TenantID: c.GetTenantId(), EgressBytes: c.GetEgressBytes(), Requests: c.GetRequests()}
	}
	for i, g := range m.GetIngress() {
		r.Ingress[i] = store.IngressRange{
			TopicID: g.GetTopicId(), Partition: g.GetPartition(), LeaderEpoch: g.GetLeaderEpoch(),
			StartOffset: g.GetStartOffset(), EndOffset: g.GetEndOffset(), Bytes: g.GetBytes(),
		}
	}
	out, err := s.store.ApplyUsageReport(ctx, r)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, notFound("broker %d is not registered", m.GetBrokerId())
	case errors.Is(err, store.ErrConflict):
		return nil, failedPrecondition("broker %d epoch %d is stale; register again", m.GetBrokerId(), m.GetBrokerEpoch())
	case err != nil:
		return nil, err
	}
	s.usage.observe(m.GetBrokerId(), out.Duplicate)
	if out.Duplicate {
		s.logger.DebugContext(ctx, "usage report retried: acknowledged, not applied again", "broker", m.GetBrokerId(), "epoch", m.GetBrokerEpoch(), "sequence", m.GetSequence())
	}
	res := &sluicev1.ReportUsageResponse{Duplicate: out.Duplicate, Cursors: make([]*sluicev1.IngressCursor, len(out.Cursors))}
	for i, c := range out.Cursors {
		res.Cursors[i] = &sluicev1.IngressCursor{TopicId: c.TopicID, Partition: c.Partition, NextOffset: c.NextOffset}
	}
	return connect.NewResponse(res), nil
}

// coldCacheTTL is how long ExchangeQuotas uses the tenants' cold bytes
// before summing the remote segments again: cold storage grows by whole
// segments, each upload long after its bytes were counted hot.
const coldCacheTTL = 10 * time.Second

// coldCache holds every tenant's cold bytes (store.ColdStorageBytes) for
// coldCacheTTL; one caller at a time refreshes it.
type coldCache struct {
	mu    sync.Mutex
	bytes map[string]int64
	at    time.Time
}

func (c *coldCache) get(ctx context.Context, st store.Store, now time.Time) (map[string]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bytes != nil && now.Sub(c.at) < coldCacheTTL && !now.Before(c.at) {
		return c.bytes, nil
	}
	b, err := st.ColdStorageBytes(ctx)
	if err != nil {
		return nil, err
	}
	c.bytes, c.at = b, now
	return b, nil
}

func toStoreRates(r quota.Rates) store.QuotaRates { return store.QuotaRates(r) }

func fromStoreRates(r store.QuotaRates) quota.Rates { return quota.Rates(r) }

func fromStoreReport(r store.QuotaReport) quota.Report {
	return quota.Report{
		BrokerID:         r.BrokerID,
		At:               r.At,
		Offered:          fromStoreRates(r.Offered),
		Admitted:         fromStoreRates(r.Admitted),
		HotStorageBytes:  r.HotStorageBytes,
		Groups:           int64(r.Groups),
		TransactionalIDs: int64(r.TransactionalIDs),
	}
}

func toQuotaRatesPB(r quota.Rates) *sluicev1.QuotaRates { return limitpb.Rates(r) }
