package quota_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

var t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

func produce(b int32, offered float64) quota.Report {
	return quota.Report{BrokerID: b, At: t0, Offered: quota.Rates{limit.ProduceBytes: offered}}
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
	lim := quota.Rates{limit.ProduceBytes: 1000, limit.FetchBytes: 2000, limit.Requests: 500, limit.ProducerIDs: 1}
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
			got := cfg.Divide(lim, tc.reports)
			require.Len(t, got, len(tc.want))
			for b, w := range tc.want {
				require.InDelta(t, w, got[b][limit.ProduceBytes], 1e-9, "broker %d", b)
			}
			s := sum(got)
			require.InDelta(t, lim[limit.ProduceBytes], s[limit.ProduceBytes], 1e-9)
			// Nothing fetched anywhere: the other dimensions are even.
			require.InDelta(t, lim[limit.FetchBytes], s[limit.FetchBytes], 1e-9)
			require.InDelta(t, lim[limit.Requests], s[limit.Requests], 1e-9)
			require.InDelta(t, lim[limit.ProducerIDs], s[limit.ProducerIDs], 1e-12)
			for b := range got {
				require.InDelta(t, lim[limit.FetchBytes]/float64(len(got)), got[b][limit.FetchBytes], 1e-9)
			}
		})
	}
	require.Empty(t, cfg.Divide(lim, nil))
}

// Every dimension is divided by its own offered traffic, and sums to its
// limit whatever the shares.
func TestQuotaDivideDimensionsSumToLimit(t *testing.T) {
	t.Parallel()
	lim := quota.Rates{limit.ProduceBytes: 5 << 20, limit.FetchBytes: 10 << 20, limit.Requests: 500, limit.ProducerIDs: 1000.0 / 3600}
	cfg := quota.DefaultConfig()
	reports := []quota.Report{
		{BrokerID: 1, At: t0, Offered: quota.Rates{limit.ProduceBytes: 9e6, limit.FetchBytes: 0, limit.Requests: 30, limit.ProducerIDs: 0.5}},
		{BrokerID: 2, At: t0, Offered: quota.Rates{limit.ProduceBytes: 1e6, limit.FetchBytes: 7e6, limit.Requests: 3000, limit.ProducerIDs: 0}},
		{BrokerID: 3, At: t0, Offered: quota.Rates{limit.ProduceBytes: 0, limit.FetchBytes: 1e6, limit.Requests: 1, limit.ProducerIDs: 0}},
	}
	got := cfg.Divide(lim, reports)
	s := sum(got)
	require.InDelta(t, lim[limit.ProduceBytes], s[limit.ProduceBytes], 1e-6)
	require.InDelta(t, lim[limit.FetchBytes], s[limit.FetchBytes], 1e-6)
	require.InDelta(t, lim[limit.Requests], s[limit.Requests], 1e-9)
	require.InDelta(t, lim[limit.ProducerIDs], s[limit.ProducerIDs], 1e-12)
	require.Greater(t, got[1][limit.ProduceBytes], got[2][limit.ProduceBytes])
	require.Greater(t, got[2][limit.FetchBytes], got[3][limit.FetchBytes])
	require.Greater(t, got[2][limit.Requests], got[1][limit.Requests])
	// Broker 3 offered no produce: the floor, α/N.
	require.InDelta(t, lim[limit.ProduceBytes]*0.1/3, got[3][limit.ProduceBytes], 1e-6)
	// Only broker 1 asked for producer ids.
	require.InDelta(t, lim[limit.ProducerIDs]*(0.1/3+0.9), got[1][limit.ProducerIDs], 1e-12)
}

func TestQuotaFreshDropsStaleBrokers(t *testing.T) {
	t.Parallel()
	cfg := quota.DefaultConfig()
	now := t0.Add(10 * time.Second)
	reports := []quota.Report{
		{BrokerID: 2, At: now.Add(-time.Second), Offered: quota.Rates{limit.ProduceBytes: 100}},
		{BrokerID: 1, At: now.Add(-4 * time.Second), Offered: quota.Rates{limit.ProduceBytes: 1e9}}, // stale
		{BrokerID: 3, At: now.Add(-3 * time.Second), Offered: quota.Rates{limit.ProduceBytes: 1e9}}, // exactly Fresh old: stale
		{BrokerID: 2, At: now.Add(-2 * time.Second), Offered: quota.Rates{limit.ProduceBytes: 7}},   // older than broker 2's latest
		{BrokerID: 4, At: now, Offered: quota.Rates{limit.ProduceBytes: 100}},
	}
	fresh := cfg.FreshReports(reports, now)
	require.Len(t, fresh, 2)
	require.Equal(t, int32(2), fresh[0].BrokerID)
	require.Equal(t, 100.0, fresh[0].Offered[limit.ProduceBytes])
	require.Equal(t, int32(4), fresh[1].BrokerID)
	got := cfg.Divide(quota.Rates{limit.ProduceBytes: 1000}, fresh)
	require.Equal(t, map[int32]quota.Rates{2: {limit.ProduceBytes: 500, limit.FetchBytes: 0, limit.Requests: 0}, 4: {limit.ProduceBytes: 500}}, got)
}

func TestQuotaLimitRates(t *testing.T) {
	t.Parallel()
	l, err := tenants.PlanLimits(tenants.PlanFree)
	require.NoError(t, err)
	r := quota.LimitRates(l)
	require.Equal(t, float64(5<<20), r[limit.ProduceBytes])
	require.Equal(t, float64(10<<20), r[limit.FetchBytes])
	require.Equal(t, 500.0, r[limit.Requests])
	require.InDelta(t, 1000.0/3600, r[limit.ProducerIDs], 1e-12)
}

func TestQuotaDecide(t *testing.T) {
	t.Parallel()
	l := tenants.Limits{limit.MaxTotalStorageBytes: 1000, limit.MaxGroups: 3, limit.MaxTransactionalIDs: 2}
	reports := []quota.Report{
		{BrokerID: 1, HotStorageBytes: 300, Groups: 1, TransactionalIDs: 1, Admitted: quota.Rates{limit.ProduceBytes: 10}},
		{BrokerID: 2, HotStorageBytes: 200, Groups: 1, Admitted: quota.Rates{limit.ProduceBytes: 5, limit.Requests: 2}},
	}
	h := quota.Sum(reports, 499)
	require.Equal(t, int64(999), h.StorageBytes())
	require.Equal(t, quota.Rates{limit.ProduceBytes: 15, limit.Requests: 2}, h.Admitted)
	require.Equal(t, quota.Decision{}, quota.Decide(l, h))

	h = quota.Sum(reports, 500) // 1000: at the limit
	require.Equal(t, quota.Decision{StorageExceeded: true}, quota.Decide(l, h))

	reports[1].Groups, reports[1].TransactionalIDs = 2, 1
	h = quota.Sum(reports, 0)
	require.Equal(t, quota.Decision{GroupsExceeded: true, TransactionalIDsExceeded: true}, quota.Decide(l, h))

	// A limit of 0 allows nothing.
	require.True(t, quota.Decide(tenants.Limits{limit.MaxTotalStorageBytes: 1}, quota.Holdings{}).GroupsExceeded)
}

// The doc's error bound: allotments computed from different moments'
// reports (a move of a fraction m of the traffic between the exchanges of
// two brokers) sum to within (1−α)·m·L of L.
func TestQuotaErrorBoundWhenDemandMoves(t *testing.T) {
	t.Parallel()
	cfg := quota.DefaultConfig()
	lim := quota.Rates{limit.ProduceBytes: 1000}
	before := []quota.Report{produce(1, 800), produce(2, 200), produce(3, 0)}
	for _, m := range []float64{0.1, 0.5, 0.8} {
		// A fraction m of the traffic moves from broker 1 to broker 3.
		after := []quota.Report{produce(1, 800-1000*m), produce(2, 200), produce(3, 1000*m)}
		old, cur := cfg.Divide(lim, before), cfg.Divide(lim, after)
		// Broker 1 still holds its old allotment; 2 and 3 the new ones.
		held := old[1][limit.ProduceBytes] + cur[2][limit.ProduceBytes] + cur[3][limit.ProduceBytes]
		bound := (1 - cfg.Floor) * m * lim[limit.ProduceBytes]
		require.LessOrEqual(t, math.Abs(held-lim[limit.ProduceBytes]), bound+1e-9, "m=%v", m)
		require.InDelta(t, lim[limit.ProduceBytes]+bound, held, 1e-9, "m=%v: the bound is reached", m)
	}
}

// TestQuotaArrive: an arriving report's offered rates are the mean of the
// other brokers' (or its own, when larger), per dimension; other reports
// and other arriving ones do not count; with no other, it stays as it is
// (the division then spreads evenly).
func TestQuotaArrive(t *testing.T) {
	t.Parallel()
	arriving := quota.Report{BrokerID: 3, At: t0, Arriving: true, Offered: quota.Rates{limit.Requests: 50}}
	others := []quota.Report{
		{BrokerID: 1, At: t0, Offered: quota.Rates{limit.ProduceBytes: 300, limit.Requests: 10}},
		{BrokerID: 2, At: t0, Offered: quota.Rates{limit.ProduceBytes: 100, limit.FetchBytes: -8}},
		{BrokerID: 4, At: t0, Arriving: true, Offered: quota.Rates{limit.ProduceBytes: 1e9}},
		{BrokerID: 3, At: t0, Offered: quota.Rates{limit.ProduceBytes: 1e9}}, // its own older report
	}
	got := quota.Arrive(arriving, others)
	require.Equal(t, quota.Rates{limit.ProduceBytes: 200, limit.Requests: 50}, got.Offered)

	measured := produce(3, 7)
	require.Equal(t, measured, quota.Arrive(measured, others), "not arriving: as it is")
	require.Equal(t, arriving, quota.Arrive(arriving, nil), "no other: as it is")

	// Divided with the estimate: an arriving broker beside one that
	// offered everything gets half, not the floor.
	lim := quota.Rates{limit.ProduceBytes: 1000}
	a := quota.DefaultConfig().Divide(lim, []quota.Report{produce(1, 400), quota.Arrive(quota.Report{BrokerID: 2, Arriving: true}, []quota.Report{produce(1, 400)})})
	require.InDelta(t, 500, a[2][limit.ProduceBytes], 1e-9)
	require.InDelta(t, 500, a[1][limit.ProduceBytes], 1e-9)
}
