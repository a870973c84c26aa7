package quota_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/tenants"
)

var t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

func produce(b int32, offered float64) quota.Report {
	return quota.Report{BrokerID: b, At: t0, Offered: quota.Rates{ProduceBytes: offered}}
}

func sum(as map[int32]quota.Rates) quota.Rates {
	var s quota.Rates
	for _, a := range as {
		s = s.Add(a)
	}
	return s
}

func TestQuotaDivide(t *testing.T) {
	t.Parallel()
	limit := quota.Rates{ProduceBytes: 1000, FetchBytes: 2000, Requests: 500, ProducerIDs: 1}
	cfg := quota.DefaultConfig()
	for _, tc := range []struct {
		name    string
		reports []quota.Report
		want    map[int32]float64 // produce bytes/s
	}{
		{"single broker takes it all", []quota.Report{produce(1, 50)}, map[int32]float64{1: 1000}},
		{"single broker without traffic", []quota.Report{produce(1, 0)}, map[int32]float64{1: 1000}},
		{"nothing offered: even", []quota.Report{produce(1, 0), produce(2, 0), produce(3, 0), produce(4, 0)},
			map[int32]float64{1: 250, 2: 250, 3: 250, 4: 250}},
		{"shares follow offered", []quota.Report{produce(1, 300), produce(2, 100)},
			// 1000 × (0.05 + 0.9 × 3/4) and 1000 × (0.05 + 0.9 × 1/4)
			map[int32]float64{1: 725, 2: 275}},
		{"floor for a broker barely used", []quota.Report{produce(1, 1e6), produce(2, 0), produce(3, 0)},
			// α/N = 0.1/3 each, the rest to broker 1.
			map[int32]float64{1: 1000 * (0.1/3 + 0.9), 2: 1000 * 0.1 / 3, 3: 1000 * 0.1 / 3}},
		{"negative offered counts as nothing", []quota.Report{produce(1, -500), produce(2, 100)},
			map[int32]float64{1: 50, 2: 950}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := cfg.Divide(limit, tc.reports)
			require.Len(t, got, len(tc.want))
			for b, w := range tc.want {
				require.InDelta(t, w, got[b].ProduceBytes, 1e-9, "broker %d", b)
			}
			s := sum(got)
			require.InDelta(t, limit.ProduceBytes, s.ProduceBytes, 1e-9)
			// Nothing fetched anywhere: the other dimensions are even.
			require.InDelta(t, limit.FetchBytes, s.FetchBytes, 1e-9)
			require.InDelta(t, limit.Requests, s.Requests, 1e-9)
			require.InDelta(t, limit.ProducerIDs, s.ProducerIDs, 1e-12)
			for b := range got {
				require.InDelta(t, limit.FetchBytes/float64(len(got)), got[b].FetchBytes, 1e-9)
			}
		})
	}
	require.Empty(t, cfg.Divide(limit, nil))
}

// Every dimension is divided by its own offered traffic, and sums to its
// limit whatever the shares.
func TestQuotaDivideDimensionsSumToLimit(t *testing.T) {
	t.Parallel()
	limit := quota.Rates{ProduceBytes: 5 << 20, FetchBytes: 10 << 20, Requests: 500, ProducerIDs: 1000.0 / 3600}
	cfg := quota.DefaultConfig()
	reports := []quota.Report{
		{BrokerID: 1, At: t0, Offered: quota.Rates{ProduceBytes: 9e6, FetchBytes: 0, Requests: 30, ProducerIDs: 0.5}},
		{BrokerID: 2, At: t0, Offered: quota.Rates{ProduceBytes: 1e6, FetchBytes: 7e6, Requests: 3000, ProducerIDs: 0}},
		{BrokerID: 3, At: t0, Offered: quota.Rates{ProduceBytes: 0, FetchBytes: 1e6, Requests: 1, ProducerIDs: 0}},
	}
	got := cfg.Divide(limit, reports)
	s := sum(got)
	require.InDelta(t, limit.ProduceBytes, s.ProduceBytes, 1e-6)
	require.InDelta(t, limit.FetchBytes, s.FetchBytes, 1e-6)
	require.InDelta(t, limit.Requests, s.Requests, 1e-9)
	require.InDelta(t, limit.ProducerIDs, s.ProducerIDs, 1e-12)
	require.Greater(t, got[1].ProduceBytes, got[2].ProduceBytes)
	require.Greater(t, got[2].FetchBytes, got[3].FetchBytes)
	require.Greater(t, got[2].Requests, got[1].Requests)
	// Broker 3 offered no produce: the floor, α/N.
	require.InDelta(t, limit.ProduceBytes*0.1/3, got[3].ProduceBytes, 1e-6)
	// Only broker 1 asked for producer ids.
	require.InDelta(t, limit.ProducerIDs*(0.1/3+0.9), got[1].ProducerIDs, 1e-12)
}

func TestQuotaFreshDropsStaleBrokers(t *testing.T) {
	t.Parallel()
	cfg := quota.DefaultConfig()
	now := t0.Add(10 * time.Second)
	reports := []quota.Report{
		{BrokerID: 2, At: now.Add(-time.Second), Offered: quota.Rates{ProduceBytes: 100}},
		{BrokerID: 1, At: now.Add(-4 * time.Second), Offered: quota.Rates{ProduceBytes: 1e9}}, // stale
		{BrokerID: 3, At: now.Add(-3 * time.Second), Offered: quota.Rates{ProduceBytes: 1e9}}, // exactly Fresh old: stale
		{BrokerID: 2, At: now.Add(-2 * time.Second), Offered: quota.Rates{ProduceBytes: 7}},   // older than broker 2's latest
		{BrokerID: 4, At: now, Offered: quota.Rates{ProduceBytes: 100}},
	}
	fresh := cfg.FreshReports(reports, now)
	require.Len(t, fresh, 2)
	require.Equal(t, int32(2), fresh[0].BrokerID)
	require.Equal(t, 100.0, fresh[0].Offered.ProduceBytes)
	require.Equal(t, int32(4), fresh[1].BrokerID)
	got := cfg.Divide(quota.Rates{ProduceBytes: 1000}, fresh)
	require.Equal(t, map[int32]quota.Rates{2: {ProduceBytes: 500, FetchBytes: 0, Requests: 0}, 4: {ProduceBytes: 500}}, got)
}

func TestQuotaLimitRates(t *testing.T) {
	t.Parallel()
	l, err := tenants.PlanLimits(tenants.PlanFree)
	require.NoError(t, err)
	r := quota.LimitRates(l)
	require.Equal(t, float64(5<<20), r.ProduceBytes)
	require.Equal(t, float64(10<<20), r.FetchBytes)
	require.Equal(t, 500.0, r.Requests)
	require.InDelta(t, 1000.0/3600, r.ProducerIDs, 1e-12)
}

func TestQuotaDecide(t *testing.T) {
	t.Parallel()
	l := tenants.Limits{MaxTotalStorageBytes: 1000, MaxGroups: 3, MaxTransactionalIDs: 2}
	reports := []quota.Report{
		{BrokerID: 1, HotStorageBytes: 300, Groups: 1, TransactionalIDs: 1, Admitted: quota.Rates{ProduceBytes: 10}},
		{BrokerID: 2, HotStorageBytes: 200, Groups: 1, Admitted: quota.Rates{ProduceBytes: 5, Requests: 2}},
	}
	h := quota.Sum(reports, 499)
	require.Equal(t, int64(999), h.StorageBytes())
	require.Equal(t, quota.Rates{ProduceBytes: 15, Requests: 2}, h.Admitted)
	require.Equal(t, quota.Decision{}, quota.Decide(l, h))

	h = quota.Sum(reports, 500) // 1000: at the limit
	require.Equal(t, quota.Decision{StorageExceeded: true}, quota.Decide(l, h))

	reports[1].Groups, reports[1].TransactionalIDs = 2, 1
	h = quota.Sum(reports, 0)
	require.Equal(t, quota.Decision{GroupsExceeded: true, TransactionalIDsExceeded: true}, quota.Decide(l, h))

	// A limit of 0 allows nothing.
	require.True(t, quota.Decide(tenants.Limits{MaxTotalStorageBytes: 1}, quota.Holdings{}).GroupsExceeded)
}

// The doc's error bound: allotments computed from different moments'
// reports (a move of a fraction m of the traffic between the exchanges of
// two brokers) sum to within (1−α)·m·L of L.
func TestQuotaErrorBoundWhenDemandMoves(t *testing.T) {
	t.Parallel()
	cfg := quota.DefaultConfig()
	limit := quota.Rates{ProduceBytes: 1000}
	before := []quota.Report{produce(1, 800), produce(2, 200), produce(3, 0)}
	for _, m := range []float64{0.1, 0.5, 0.8} {
		// A fraction m of the traffic moves from broker 1 to broker 3.
		after := []quota.Report{produce(1, 800-1000*m), produce(2, 200), produce(3, 1000*m)}
		old, cur := cfg.Divide(limit, before), cfg.Divide(limit, after)
		// Broker 1 still holds its old allotment; 2 and 3 the new ones.
		held := old[1].ProduceBytes + cur[2].ProduceBytes + cur[3].ProduceBytes
		bound := (1 - cfg.Floor) * m * limit.ProduceBytes
		require.LessOrEqual(t, math.Abs(held-limit.ProduceBytes), bound+1e-9, "m=%v", m)
		require.InDelta(t, limit.ProduceBytes+bound, held, 1e-9, "m=%v: the bound is reached", m)
	}
}
