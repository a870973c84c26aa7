package controlplane_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
)

// register joins broker id and returns its epoch.
func (c *cluster) register(t *testing.T, id int32) int64 {
	t.Helper()
	res, err := c.brokers(brokerToken).RegisterBroker(context.Background(), connect.NewRequest(&sluicev1.RegisterBrokerRequest{
		BrokerId: id, Address: fmt.Sprintf("127.0.0.1:%d", 9100+id), Rack: "a",
	}))
	require.NoError(t, err)
	return res.Msg.GetBrokerEpoch()
}

func (c *cluster) exchange(broker int32, epoch int64, reports ...*sluicev1.TenantQuotaReport) (*sluicev1.ExchangeQuotasResponse, error) {
	res, err := c.brokers(brokerToken).ExchangeQuotas(context.Background(), connect.NewRequest(&sluicev1.ExchangeQuotasRequest{
		BrokerId: broker, BrokerEpoch: epoch, Tenants: reports,
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func offeredProduce(tenant string, bytesPerSec float64) *sluicev1.TenantQuotaReport {
	return &sluicev1.TenantQuotaReport{TenantId: tenant, Offered: &sluicev1.QuotaRates{ProduceBytesPerSec: bytesPerSec}}
}

// allotment returns the one allotment of res, of tenant.
func allotment(t *testing.T, res *sluicev1.ExchangeQuotasResponse, tenant string) *sluicev1.TenantAllotment {
	t.Helper()
	require.Len(t, res.GetAllotments(), 1)
	a := res.GetAllotments()[0]
	require.Equal(t, tenant, a.GetTenantId())
	return a
}

// TestControlPlaneExchangeQuotas: a tenant's produce limit is divided among
// the brokers by their offered traffic, with the floor, summing to the
// limit; a broker that stops reporting drops out; the count limits are
// decided from the sums; a stale broker epoch and malformed reports are
// refused.
func TestControlPlaneExchangeQuotas(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		ctx := context.Background()
		e1, e2 := c.register(t, 1), c.register(t, 2)
		alice := c.signup(t, "alice")
		const limit = 5 << 20 // free plan

		// Alone, a broker gets the whole limit, whatever it offered.
		res, err := c.exchange(1, e1, offeredProduce(alice.tenantID, 300))
		require.NoError(t, err)
		a := allotment(t, res, alice.tenantID)
		require.InDelta(t, limit, a.GetRates().GetProduceBytesPerSec(), 1e-6)
		require.InDelta(t, 10<<20, a.GetRates().GetFetchBytesPerSec(), 1e-6)
		require.InDelta(t, 500, a.GetRates().GetRequestsPerSec(), 1e-9)
		require.InDelta(t, 1000.0/3600, a.GetRates().GetProducerIdsPerSec(), 1e-12)
		require.Equal(t, int64(limit), a.GetLimits().GetProduceBytesPerSec())
		require.False(t, a.GetStorageExceeded() || a.GetGroupsExceeded() || a.GetTransactionalIdsExceeded())

		// Broker 2 arriving (the tenant's first calls there wait for the
		// answer): its offered is taken as the mean of the others', 300,
		// and stored so, so that broker 1's next exchange divides the
		// same way: half each.
		res, err = c.exchange(2, e2, &sluicev1.TenantQuotaReport{TenantId: alice.tenantID, Arriving: true})
		require.NoError(t, err)
		require.InDelta(t, limit/2, allotment(t, res, alice.tenantID).GetRates().GetProduceBytesPerSec(), 1e-6)
		res, err = c.exchange(1, e1, offeredProduce(alice.tenantID, 300))
		require.NoError(t, err)
		require.InDelta(t, limit/2, allotment(t, res, alice.tenantID).GetRates().GetProduceBytesPerSec(), 1e-6)

		// Broker 2 offered a quarter: α/N + (1−α)·¼ of the limit; broker 1
		// the rest. Nothing fetched anywhere: fetch is split evenly.
		res, err = c.exchange(2, e2, offeredProduce(alice.tenantID, 100))
		require.NoError(t, err)
		a2 := allotment(t, res, alice.tenantID)
		require.InDelta(t, limit*(0.05+0.9*0.25), a2.GetRates().GetProduceBytesPerSec(), 1e-6)
		require.InDelta(t, (10<<20)/2, a2.GetRates().GetFetchBytesPerSec(), 1e-6)
		res, err = c.exchange(1, e1, offeredProduce(alice.tenantID, 300))
		require.NoError(t, err)
		a1 := allotment(t, res, alice.tenantID)
		require.InDelta(t, limit*(0.05+0.9*0.75), a1.GetRates().GetProduceBytesPerSec(), 1e-6)
		require.InDelta(t, limit, a1.GetRates().GetProduceBytesPerSec()+a2.GetRates().GetProduceBytesPerSec(), 1e-6)

		// A broker barely used still gets the floor.
		res, err = c.exchange(2, e2, offeredProduce(alice.tenantID, 0))
		require.NoError(t, err)
		require.InDelta(t, limit*0.05, allotment(t, res, alice.tenantID).GetRates().GetProduceBytesPerSec(), 1e-6)

		// Broker 1 stops reporting: within the freshness window (3 s)
		// broker 2 has the whole limit again.
		testenv.Wait(t, 10*time.Second, "broker 1's report to go stale", func() error {
			res, err := c.exchange(2, e2, offeredProduce(alice.tenantID, 0))
			if err != nil {
				return err
			}
			if got := allotment(t, res, alice.tenantID).GetRates().GetProduceBytesPerSec(); math.Abs(got-limit) > 1e-6 {
				return fmt.Errorf("broker 2 has %v of %v", got, limit)
			}
			return nil
		})

		// A change of the tenant's limits is allotted at the next exchange
		// with the replica that made it (its cached limits forgotten), not
		// after the cache's 5 s.
		_, err = c.operator(operatorToken).UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{
			TenantId: alice.tenantID, Overrides: &sluicev1.LimitOverrides{ProduceBytesPerSec: ptr(int64(1 << 20))}}))
		require.NoError(t, err)
		res, err = c.exchange(2, e2, offeredProduce(alice.tenantID, 0))
		require.NoError(t, err)
		require.Equal(t, int64(1<<20), allotment(t, res, alice.tenantID).GetLimits().GetProduceBytesPerSec())
		_, err = c.operator(operatorToken).UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{
			TenantId: alice.tenantID, Overrides: &sluicev1.LimitOverrides{}}))
		require.NoError(t, err)
		res, err = c.exchange(2, e2, offeredProduce(alice.tenantID, 0))
		require.NoError(t, err)
		require.Equal(t, int64(limit), allotment(t, res, alice.tenantID).GetLimits().GetProduceBytesPerSec())

		// A broker that registered again is refused under its old epoch.
		e1b := c.register(t, 1)
		_, err = c.exchange(1, e1, offeredProduce(alice.tenantID, 1))
		requireCode(t, connect.CodeFailedPrecondition, err, "stale")
		_, err = c.exchange(9, 1, offeredProduce(alice.tenantID, 1))
		requireCode(t, connect.CodeNotFound, err, "not registered")

		for _, tc := range []struct {
			name    string
			reports []*sluicev1.TenantQuotaReport
			field   string
		}{
			{"not a tenant id", []*sluicev1.TenantQuotaReport{offeredProduce("alice", 1)}, "tenants[0].tenant_id"},
			{"a tenant twice", []*sluicev1.TenantQuotaReport{offeredProduce(alice.tenantID, 1), offeredProduce(alice.tenantID, 2)}, "tenants[1].tenant_id"},
			{"a negative rate", []*sluicev1.TenantQuotaReport{offeredProduce(alice.tenantID, -1)}, "tenants[0].offered.produce_bytes_per_sec"},
			{"not a number", []*sluicev1.TenantQuotaReport{{TenantId: alice.tenantID, Admitted: &sluicev1.QuotaRates{FetchBytesPerSec: math.NaN()}}}, "tenants[0].admitted.fetch_bytes_per_sec"},
			{"negative storage", []*sluicev1.TenantQuotaReport{{TenantId: alice.tenantID, HotStorageBytes: -1}}, "tenants[0].hot_storage_bytes"},
		} {
			_, err := c.exchange(1, e1b, tc.reports...)
			requireCode(t, connect.CodeInvalidArgument, err, tc.field)
		}

		// Count limits from the sums over the brokers: bob may hold 1000
		// bytes and 2 groups.
		bob := c.signup(t, "bob")
		_, err = c.operator(operatorToken).UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: bob.tenantID,
			Overrides: &sluicev1.LimitOverrides{MaxTotalStorageBytes: ptr(int64(1000)), MaxGroups: ptr(int32(2))}}))
		require.NoError(t, err)
		res, err = c.exchange(1, e1b, &sluicev1.TenantQuotaReport{TenantId: bob.tenantID, HotStorageBytes: 600, Groups: 1, TransactionalIds: 5})
		require.NoError(t, err)
		b := allotment(t, res, bob.tenantID)
		require.False(t, b.GetStorageExceeded() || b.GetGroupsExceeded() || b.GetTransactionalIdsExceeded())
		require.Equal(t, int64(1000), b.GetLimits().GetMaxTotalStorageBytes())
		res, err = c.exchange(2, e2, &sluicev1.TenantQuotaReport{TenantId: bob.tenantID, HotStorageBytes: 400, Groups: 1})
		require.NoError(t, err)
		b = allotment(t, res, bob.tenantID)
		require.True(t, b.GetStorageExceeded(), "600 + 400 bytes reach the limit of 1000")
		require.True(t, b.GetGroupsExceeded(), "1 + 1 groups reach the limit of 2")
		require.False(t, b.GetTransactionalIdsExceeded(), "5 of 100")
		require.Equal(t, int64(1000), b.GetStorageBytes())
		require.Equal(t, int64(2), b.GetGroups())
		require.Equal(t, int64(5), b.GetTransactionalIds())

		// GetTenant shows the holdings and admitted rates the brokers report.
		_, err = c.exchange(1, e1b, &sluicev1.TenantQuotaReport{TenantId: bob.tenantID, HotStorageBytes: 600, Groups: 1, TransactionalIds: 5,
			Admitted: &sluicev1.QuotaRates{ProduceBytesPerSec: 1000, RequestsPerSec: 10, ProducerIdsPerSec: 0.5}})
		require.NoError(t, err)
		_, err = c.exchange(2, e2, &sluicev1.TenantQuotaReport{TenantId: bob.tenantID, HotStorageBytes: 400, Groups: 1,
			Admitted: &sluicev1.QuotaRates{ProduceBytesPerSec: 500, FetchBytesPerSec: 7}})
		require.NoError(t, err)
		gt, err := c.tenants(bob.token).GetTenant(ctx, connect.NewRequest(&sluicev1.GetTenantRequest{}))
		require.NoError(t, err)
		u := gt.Msg.GetUsage()
		require.Equal(t, int64(1000), u.GetStorageBytes())
		require.Equal(t, int64(1000), u.GetHotStorageBytes())
		require.Equal(t, int64(0), u.GetColdStorageBytes())
		require.Equal(t, int64(2), u.GetGroups())
		require.Equal(t, int64(5), u.GetTransactionalIds())
		require.InDelta(t, 1500, u.GetProduceBytesPerSec(), 1e-9)
		require.InDelta(t, 7, u.GetFetchBytesPerSec(), 1e-9)
		require.InDelta(t, 10, u.GetRequestsPerSec(), 1e-9)
		require.InDelta(t, 1800, u.GetProducerIdsPerHour(), 1e-9)
		// Alice's are hers.
		gt, err = c.tenants(alice.token).GetTenant(ctx, connect.NewRequest(&sluicev1.GetTenantRequest{}))
		require.NoError(t, err)
		require.Zero(t, gt.Msg.GetUsage().GetStorageBytes())
		require.Zero(t, gt.Msg.GetUsage().GetGroups())

		// A broker with no tenants is answered nothing.
		res, err = c.exchange(1, e1b)
		require.NoError(t, err)
		require.Empty(t, res.GetAllotments())
		// An unknown tenant gets nothing.
		res, err = c.exchange(1, e1b, offeredProduce("00000000-0000-0000-0000-0000000000aa", 1))
		require.NoError(t, err)
		u0 := allotment(t, res, "00000000-0000-0000-0000-0000000000aa")
		require.Zero(t, u0.GetRates().GetProduceBytesPerSec())
		require.True(t, u0.GetStorageExceeded())
	})
}

func (c *cluster) report(m *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error) {
	res, err := c.brokers(brokerToken).ReportUsage(context.Background(), connect.NewRequest(m))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (c *cluster) billing(token string) sluicev1connect.BillingServiceClient {
	return sluicev1connect.NewBillingServiceClient(c.hc, c.endpoint, bearer(token))
}

// usageTotals returns the tenant's totals of the current month by dimension.
func usageTotals(t *testing.T, c *cluster, token string) map[sluicev1.UsageDimension]int64 {
	t.Helper()
	res, err := c.billing(token).GetUsage(context.Background(), connect.NewRequest(&sluicev1.GetUsageRequest{}))
	require.NoError(t, err)
	out := map[sluicev1.UsageDimension]int64{}
	for _, tot := range res.Msg.GetTotals() {
		out[tot.GetDimension()] = tot.GetAmount()
	}
	return out
}

// TestControlPlaneReportUsage: a report is applied once: its retry (the
// answer lost) is acknowledged as a duplicate and counted nothing more; an
// ingress range applies only where metering stands; a stale broker epoch
// is refused and applies nothing; malformed reports are refused.
func TestControlPlaneReportUsage(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		e1 := c.register(t, 1)
		alice := c.signup(t, "alice")
		topic, err := c.topics(alice.token).CreateTopic(context.Background(), connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 1, ReplicationFactor: 1}))
		require.NoError(t, err)
		topicID := topic.Msg.GetTopic().GetId()

		first := &sluicev1.ReportUsageRequest{
			BrokerId: 1, BrokerEpoch: e1, Sequence: 1,
			Counters: []*sluicev1.TenantUsageCounters{{TenantId: alice.tenantID, EgressBytes: 700, Requests: 9}},
			Ingress:  []*sluicev1.IngressRange{{TopicId: topicID, Partition: 0, LeaderEpoch: 0, StartOffset: 0, EndOffset: 10, Bytes: 1000}},
		}
		res, err := c.report(first)
		require.NoError(t, err)
		require.False(t, res.GetDuplicate())
		require.Len(t, res.GetCursors(), 1)
		require.Equal(t, int64(10), res.GetCursors()[0].GetNextOffset())
		require.Equal(t, topicID, res.GetCursors()[0].GetTopicId())

		// The answer was lost: the broker sends the same report again.
		res, err = c.report(first)
		require.NoError(t, err)
		require.True(t, res.GetDuplicate())
		require.Equal(t, int64(10), res.GetCursors()[0].GetNextOffset())

		// A new report whose range does not start where metering stands
		// applies its counters, not the range; the cursor says where to go on.
		res, err = c.report(&sluicev1.ReportUsageRequest{
			BrokerId: 1, BrokerEpoch: e1, Sequence: 2,
			Counters: []*sluicev1.TenantUsageCounters{{TenantId: alice.tenantID, Requests: 1}},
			Ingress:  []*sluicev1.IngressRange{{TopicId: topicID, Partition: 0, StartOffset: 5, EndOffset: 12, Bytes: 999}},
		})
		require.NoError(t, err)
		require.False(t, res.GetDuplicate())
		require.Equal(t, int64(10), res.GetCursors()[0].GetNextOffset())

		tot := usageTotals(t, c, alice.token)
		require.Equal(t, int64(1000), tot[sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES])
		require.Equal(t, int64(700), tot[sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES])
		require.Equal(t, int64(10), tot[sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS])
		require.Equal(t, 1.0, c.metric(t, `sluice_controlplane_usage_reports_total{outcome="duplicate"}`))
		require.Equal(t, 2.0, c.metric(t, `sluice_controlplane_usage_reports_total{outcome="applied"}`))
		require.GreaterOrEqual(t, c.metric(t, `sluice_controlplane_usage_report_age_seconds{broker="1"}`), 0.0)

		// A zombie's report (the broker registered again) applies nothing.
		e1b := c.register(t, 1)
		_, err = c.report(&sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1, Sequence: 3,
			Counters: []*sluicev1.TenantUsageCounters{{TenantId: alice.tenantID, Requests: 1000}}})
		requireCode(t, connect.CodeFailedPrecondition, err, "stale")
		_, err = c.report(&sluicev1.ReportUsageRequest{BrokerId: 7, BrokerEpoch: 1, Sequence: 1})
		requireCode(t, connect.CodeNotFound, err, "not registered")
		require.Equal(t, int64(10), usageTotals(t, c, alice.token)[sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS])

		// The new epoch starts its sequences from 1 again.
		res, err = c.report(&sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b, Sequence: 1,
			Counters: []*sluicev1.TenantUsageCounters{{TenantId: alice.tenantID, Requests: 5}}})
		require.NoError(t, err)
		require.False(t, res.GetDuplicate())
		require.Equal(t, int64(15), usageTotals(t, c, alice.token)[sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS])

		for _, tc := range []struct {
			name  string
			m     *sluicev1.ReportUsageRequest
			field string
		}{
			{"no sequence", &sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b}, "sequence"},
			{"no epoch", &sluicev1.ReportUsageRequest{BrokerId: 1, Sequence: 1}, "broker_epoch"},
			{"negative egress", &sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b, Sequence: 2,
				Counters: []*sluicev1.TenantUsageCounters{{TenantId: alice.tenantID, EgressBytes: -1}}}, "counters[0].egress_bytes"},
			{"a tenant twice", &sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b, Sequence: 2,
				Counters: []*sluicev1.TenantUsageCounters{{TenantId: alice.tenantID}, {TenantId: alice.tenantID}}}, "counters[1].tenant_id"},
			{"a backwards range", &sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b, Sequence: 2,
				Ingress: []*sluicev1.IngressRange{{TopicId: topicID, StartOffset: 10, EndOffset: 9}}}, "ingress[0].end_offset"},
			{"bytes in an empty range", &sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b, Sequence: 2,
				Ingress: []*sluicev1.IngressRange{{TopicId: topicID, StartOffset: 10, EndOffset: 10, Bytes: 1}}}, "ingress[0].bytes"},
			{"not a topic id", &sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1b, Sequence: 2,
				Ingress: []*sluicev1.IngressRange{{TopicId: "orders"}}}, "ingress[0].topic_id"},
		} {
			_, err := c.report(tc.m)
			requireCode(t, connect.CodeInvalidArgument, err, tc.field)
		}
	})
}

// quotaReads counts the store calls of the quota exchange.
type quotaReads struct {
	store.Store
	tenants, cold, puts, lists atomic.Int32
}

func (s *quotaReads) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	s.tenants.Add(1)
	return s.Store.GetTenant(ctx, id)
}

func (s *quotaReads) ColdStorageBytes(ctx context.Context) (map[string]int64, error) {
	s.cold.Add(1)
	return s.Store.ColdStorageBytes(ctx)
}

func (s *quotaReads) PutQuotaReports(ctx context.Context, brokerID int32, at time.Time, reports []store.QuotaReport, applied []store.ObjectReservation) error {
	s.puts.Add(1)
	return s.Store.PutQuotaReports(ctx, brokerID, at, reports, applied)
}

func (s *quotaReads) ListQuotaReports(ctx context.Context, tenantIDs []string, since time.Time) ([]store.QuotaReport, error) {
	s.lists.Add(1)
	return s.Store.ListQuotaReports(ctx, tenantIDs, since)
}

// TestControlPlaneExchangeQuotasCost: every broker calls ExchangeQuotas
// about once a second naming every tenant it serves, so one call writes
// its reports once and reads the tenants' reports once, and the tenants'
// limits (5 s) and cold bytes (10 s) come from caches, not from a read per
// tenant per call.
func TestControlPlaneExchangeQuotasCost(t *testing.T) {
	t.Parallel()
	w := &quotaReads{}
	c := startWith(t, "sqlite:"+t.TempDir()+"/cp.db", func(s store.Store) store.Store { w.Store = s; return w },
		func(cfg *controlplane.Config) { cfg.MeteringInterval = time.Hour })
	epochs := []int64{c.register(t, 1), c.register(t, 2), c.register(t, 3)}
	var reports []*sluicev1.TenantQuotaReport
	for i := range 20 {
		reports = append(reports, offeredProduce(c.signup(t, fmt.Sprintf("tenant-%02d", i)).tenantID, float64(i)))
	}
	w.tenants.Store(0)
	began := time.Now()
	const rounds = 30
	for range rounds {
		for b, e := range epochs {
			res, err := c.exchange(int32(b+1), e, reports...)
			require.NoError(t, err)
			require.Len(t, res.GetAllotments(), 20)
		}
	}
	elapsed := time.Since(began)
	require.Equal(t, int32(3*rounds), w.puts.Load())
	require.Equal(t, int32(3*rounds), w.lists.Load())
	require.LessOrEqual(t, w.tenants.Load(), int32(20*(1+elapsed/(5*time.Second))), "each tenant read once per 5 s, not %d times", 3*rounds)
	require.LessOrEqual(t, w.cold.Load(), int32(1+elapsed/(10*time.Second)))
	t.Logf("%d exchanges of 20 tenants in %s: %d tenant reads, %d cold-storage reads", 3*rounds, elapsed, w.tenants.Load(), w.cold.Load())
}
