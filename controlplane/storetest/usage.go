package storetest

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants/system"
)

// Usage metering (issue 17): usage reports applied exactly once, ingress
// cursors, interval meters, quota reports and the aggregates the control
// plane meters storage and partitions from. Every test uses brokers, topics,
// tenants and meter names of its own, so they share the store; the reads
// across tenants (ListUsageTenants, ColdStorageBytes, PartitionCounts) are
// checked for the test's own tenants only.

func init() {
	tests = append(tests, usageTests...)
	concurrentTests = append(concurrentTests, usageConcurrentTests...)
}

var usageTests = []test{
	{name: "UsageReportExactlyOnce", fn: testUsageReportExactlyOnce},
	{name: "UsageReportFencing", fn: testUsageReportFencing},
	{name: "UsageReportWindow", fn: testUsageReportWindow},
	{name: "UsageReportInvalid", fn: testUsageReportInvalid},
	{name: "UsageIngressRanges", fn: testUsageIngressRanges},
	{name: "UsageIngressEpochs", fn: testUsageIngressEpochs},
	{name: "UsageListScoping", fn: testUsageListScoping},
	{name: "UsageTotals", fn: testUsageTotals},
	{name: "UsageMeterAdvance", fn: testUsageMeterAdvance},
	{name: "UsageQuotaReports", fn: testUsageQuotaReports},
	{name: "UsageAggregates", own: true, fn: testUsageAggregates},
}

var usageConcurrentTests = []test{
	{name: "ConcurrentUsageReportRetries", fn: testConcurrentUsageReportRetries},
	{name: "ConcurrentUsageIngress", fn: testConcurrentUsageIngress},
	{name: "ConcurrentUsageMeter", fn: testConcurrentUsageMeter},
}

// ---- fixtures ----

// usageBroker registers a broker of an id no other test uses and returns
// its id and epoch.
func usageBroker(t *testing.T, s store.Store) (int32, int64) {
	t.Helper()
	id := lastBrokerID.Add(1)
	b, err := s.RegisterBroker(t.Context(), store.Broker{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", id%60000), LeaseExpiresAt: at(time.Hour), RegisteredAt: at(0)})
	require.NoError(t, err)
	return id, b.Epoch
}

// usageHour is an hour of the suite's times: the usage of reports at
// usageHour(h).Add(x) for x < 1h lands in row usageHour(h).
func usageHour(h int) time.Time { return store.HourOf(base).Add(time.Duration(h) * time.Hour) }

func apply(t *testing.T, s store.Store, r store.UsageReport) store.UsageReportResult {
	t.Helper()
	res, err := s.ApplyUsageReport(t.Context(), r)
	require.NoError(t, err)
	return res
}

// usageOf returns the tenant's rows in [from, to) as hour offset → dimension → amount.
func usageOf(t *testing.T, s store.Store, tenantID string, from, to time.Time) map[time.Time]map[store.UsageDimension]int64 {
	t.Helper()
	rows, err := s.ListUsage(t.Context(), tenantID, from, to)
	require.NoError(t, err)
	out := map[time.Time]map[store.UsageDimension]int64{}
	for _, r := range rows {
		require.Equal(t, tenantID, r.TenantID)
		requireUTC(t, r.Hour)
		require.Equal(t, store.HourOf(r.Hour), r.Hour, "rows are on the hour")
		if out[r.Hour] == nil {
			out[r.Hour] = map[store.UsageDimension]int64{}
		}
		_, twice := out[r.Hour][r.Dimension]
		require.False(t, twice, "one row per hour and dimension")
		out[r.Hour][r.Dimension] = r.Amount
	}
	return out
}

func cursor(topicID string, p int32, epoch int32, next int64) store.IngressCursor {
	return store.IngressCursor{TopicID: topicID, Partition: p, LeaderEpoch: epoch, NextOffset: next}
}

func ingress(topicID string, p, epoch int32, start, end, bytes int64) store.IngressRange {
	return store.IngressRange{TopicID: topicID, Partition: p, LeaderEpoch: epoch, StartOffset: start, EndOffset: end, Bytes: bytes}
}

// ---- reports ----

// testUsageReportExactlyOnce: a report's counters are applied once per
// (broker, epoch, sequence); a retry is a duplicate and adds nothing, also
// when it carries other content.
func testUsageReportExactlyOnce(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	id, epoch := usageBroker(t, s)
	r := store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: 1, At: usageHour(0).Add(10 * time.Minute),
		Counters: []store.UsageCounters{{TenantID: a.ID, EgressBytes: 100, Requests: 5}, {TenantID: b.ID, Requests: 1}}}
	res := apply(t, s, r)
	require.False(t, res.Duplicate)
	require.Empty(t, res.Cursors)

	res = apply(t, s, r)
	require.True(t, res.Duplicate, "the same sequence again is a retry")
	retry := r
	retry.Counters = []store.UsageCounters{{TenantID: a.ID, EgressBytes: 1_000_000, Requests: 1_000}}
	require.True(t, apply(t, s, retry).Duplicate, "a retry is not applied whatever it carries")

	next := r
	next.Sequence, next.At = 2, usageHour(0).Add(50*time.Minute)
	next.Counters = []store.UsageCounters{{TenantID: a.ID, EgressBytes: 7, Requests: 0}}
	require.False(t, apply(t, s, next).Duplicate)
	later := r
	later.Sequence, later.At = 3, usageHour(1).Add(time.Second)
	later.Counters = []store.UsageCounters{{TenantID: a.ID, EgressBytes: 1, Requests: 2}}
	require.False(t, apply(t, s, later).Duplicate)

	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{
		usageHour(0): {store.UsageEgressBytes: 107, store.UsageRequests: 5},
		usageHour(1): {store.UsageEgressBytes: 1, store.UsageRequests: 2},
	}, usageOf(t, s, a.ID, usageHour(-1), usageHour(3)))
	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{
		usageHour(0): {store.UsageRequests: 1},
	}, usageOf(t, s, b.ID, usageHour(-1), usageHour(3)), "zero counters add no row")

	// ListUsage bounds are hours: [from, to) truncated.
	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{
		usageHour(1): {store.UsageEgressBytes: 1, store.UsageRequests: 2},
	}, usageOf(t, s, a.ID, usageHour(1).Add(30*time.Minute), usageHour(2)))

	tenants, err := s.ListUsageTenants(t.Context(), usageHour(0), usageHour(1))
	require.NoError(t, err)
	require.Subset(t, tenants, []string{a.ID, b.ID})
	require.True(t, slices.IsSorted(tenants))
	tenants, err = s.ListUsageTenants(t.Context(), usageHour(1), usageHour(2))
	require.NoError(t, err)
	require.Contains(t, tenants, a.ID)
	require.NotContains(t, tenants, b.ID)
}

// testUsageReportFencing: only the broker's current epoch applies; a new
// epoch's sequences start again.
func testUsageReportFencing(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	id, epoch := usageBroker(t, s)
	r := store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: 1, At: usageHour(0),
		Counters: []store.UsageCounters{{TenantID: a.ID, Requests: 1}}}
	apply(t, s, r)

	b, err := s.RegisterBroker(t.Context(), store.Broker{ID: id, Address: "127.0.0.1:1", LeaseExpiresAt: at(time.Hour), RegisteredAt: at(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, epoch+1, b.Epoch)

	old := r
	old.Sequence = 2
	_, err = s.ApplyUsageReport(t.Context(), old)
	require.ErrorIs(t, err, store.ErrConflict, "a superseded broker epoch")
	_, err = s.ApplyUsageReport(t.Context(), r)
	require.ErrorIs(t, err, store.ErrConflict, "a retry of the old epoch is refused too")

	unknown := r
	unknown.BrokerID = lastBrokerID.Add(1)
	_, err = s.ApplyUsageReport(t.Context(), unknown)
	require.ErrorIs(t, err, store.ErrNotFound)

	cur := r
	cur.BrokerEpoch = b.Epoch
	require.False(t, apply(t, s, cur).Duplicate, "sequence 1 of the new epoch is a new report")
	require.True(t, apply(t, s, cur).Duplicate)
	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{usageHour(0): {store.UsageRequests: 2}},
		usageOf(t, s, a.ID, usageHour(0), usageHour(1)))
}

// testUsageReportWindow: keys far below the newest applied sequence are
// forgotten, and such a report is taken as a duplicate; reports within the
// window apply in any order.
func testUsageReportWindow(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	id, epoch := usageBroker(t, s)
	rep := func(seq int64) store.UsageReport {
		return store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: seq, At: usageHour(0),
			Counters: []store.UsageCounters{{TenantID: a.ID, Requests: seq}}}
	}
	require.False(t, apply(t, s, rep(3)).Duplicate)
	require.False(t, apply(t, s, rep(1)).Duplicate, "an earlier sequence not applied yet applies")
	require.True(t, apply(t, s, rep(3)).Duplicate)
	high := int64(10 + store.UsageReportWindow)
	require.False(t, apply(t, s, rep(high)).Duplicate)
	require.True(t, apply(t, s, rep(2)).Duplicate, "more than the window behind the newest")
	require.False(t, apply(t, s, rep(high-1)).Duplicate)
	require.Equal(t, 1+3+high+high-1, usageOf(t, s, a.ID, usageHour(0), usageHour(1))[usageHour(0)][store.UsageRequests])
}

// testUsageReportInvalid: malformed reports are refused, nothing applied.
func testUsageReportInvalid(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	id, epoch := usageBroker(t, s)
	tp, _ := createTopic(t, s, a.ID, "invalid", 1)
	good := store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: 1, At: usageHour(0),
		Counters: []store.UsageCounters{{TenantID: a.ID, Requests: 1}},
		Ingress:  []store.IngressRange{ingress(tp.ID, 0, 0, 0, 10, 100)}}
	for name, mut := range map[string]func(*store.UsageReport){
		"sequence 0":       func(r *store.UsageReport) { r.Sequence = 0 },
		"no time":          func(r *store.UsageReport) { r.At = time.Time{} },
		"tenant twice":     func(r *store.UsageReport) { r.Counters = append(r.Counters, r.Counters[0]) },
		"negative counter": func(r *store.UsageReport) { r.Counters[0].Requests = -1 },
		"bad tenant id":    func(r *store.UsageReport) { r.Counters[0].TenantID = "nope" },
		"bad topic id":     func(r *store.UsageReport) { r.Ingress[0].TopicID = "nope" },
		"end before start": func(r *store.UsageReport) { r.Ingress[0].StartOffset = 11 },
		"negative bytes":   func(r *store.UsageReport) { r.Ingress[0].Bytes = -1 },
		"bytes in nothing": func(r *store.UsageReport) { r.Ingress[0].EndOffset = 0 },
	} {
		r := good
		r.Counters = slices.Clone(good.Counters)
		r.Ingress = slices.Clone(good.Ingress)
		mut(&r)
		_, err := s.ApplyUsageReport(t.Context(), r)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
	require.Empty(t, usageOf(t, s, a.ID, usageHour(-1), usageHour(1)))
	require.False(t, apply(t, s, good).Duplicate, "nothing of the refused reports was recorded")
}

// ---- ingress ----

// testUsageIngressRanges: a range applies only where metering stands; the
// first range of a partition sets where it starts; gaps and overlaps are
// refused and answered with the cursor; a duplicate report applies none of
// its ranges; unknown topics are skipped.
func testUsageIngressRanges(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, a.ID, "ingress", 2)
	tq, _ := createTopic(t, s, other.ID, "ingress", 1)
	id, epoch := usageBroker(t, s)
	seq := int64(0)
	report := func(ranges ...store.IngressRange) store.UsageReportResult {
		seq++
		return apply(t, s, store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: seq, At: usageHour(0), Ingress: ranges})
	}

	res := report(ingress(tp.ID, 0, 3, 10, 20, 1000))
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 3, 20)}, res.Cursors, "a never-metered partition takes the first range's start")

	res = report(ingress(tp.ID, 0, 3, 10, 20, 1000))
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 3, 20)}, res.Cursors, "overlap refused")
	res = report(ingress(tp.ID, 0, 3, 15, 25, 500))
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 3, 20)}, res.Cursors, "partial overlap refused")
	res = report(ingress(tp.ID, 0, 3, 21, 30, 900))
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 3, 20)}, res.Cursors, "gap refused")

	// Several ranges of one partition apply in order; cursors of every named
	// partition come back sorted; a query (empty range) of a never-metered
	// partition starts its cursor; an unknown topic is left out.
	unknown := store.NewID()
	res = report(
		ingress(tq.ID, 0, 1, 0, 4, 40),
		ingress(tp.ID, 1, 3, 7, 7, 0),
		ingress(unknown, 0, 1, 0, 5, 50),
		ingress(tp.ID, 0, 3, 20, 30, 100),
		ingress(tp.ID, 0, 3, 30, 35, 50),
		ingress(tp.ID, 0, 3, 30, 40, 999), // overlaps what the previous range applied
	)
	want := []store.IngressCursor{cursor(tp.ID, 0, 3, 35), cursor(tp.ID, 1, 3, 7), cursor(tq.ID, 0, 1, 4)}
	slices.SortFunc(want, func(x, y store.IngressCursor) int {
		if x.TopicID != y.TopicID {
			if x.TopicID < y.TopicID {
				return -1
			}
			return 1
		}
		return int(x.Partition - y.Partition)
	})
	require.Equal(t, want, res.Cursors)

	// A duplicate applies none of its ranges, and still answers the cursors.
	dup := apply(t, s, store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: seq, At: usageHour(0),
		Ingress: []store.IngressRange{ingress(tp.ID, 0, 3, 35, 45, 10_000)}})
	require.True(t, dup.Duplicate)
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 3, 35)}, dup.Cursors)

	// A query of a metered partition changes nothing.
	res = report(ingress(tp.ID, 0, 3, 0, 0, 0), ingress(tp.ID, 1, 3, 7, 7, 0))
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 3, 35), cursor(tp.ID, 1, 3, 7)}, res.Cursors)
	res = report(ingress(tp.ID, 1, 3, 7, 9, 20))
	require.Equal(t, []store.IngressCursor{cursor(tp.ID, 1, 3, 9)}, res.Cursors)

	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{usageHour(0): {store.UsageIngressBytes: 1000 + 100 + 50 + 20}},
		usageOf(t, s, a.ID, usageHour(0), usageHour(1)), "ingress lands with the topic's tenant")
	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{usageHour(0): {store.UsageIngressBytes: 40}},
		usageOf(t, s, other.ID, usageHour(0), usageHour(1)))

	// A deleted topic's partitions are skipped and left out of the answer.
	_, err := s.DeleteTopic(t.Context(), other.ID, tq.Name)
	require.NoError(t, err)
	res = report(ingress(tq.ID, 0, 1, 4, 8, 40))
	require.Empty(t, res.Cursors)
	require.Equal(t, int64(40), usageOf(t, s, other.ID, usageHour(0), usageHour(1))[usageHour(0)][store.UsageIngressBytes])
}

// testUsageIngressEpochs: ranges of an older leader epoch than the newest
// that named the partition are refused; a newer epoch takes over from the
// cursor.
func testUsageIngressEpochs(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, a.ID, "epochs", 1)
	id, epoch := usageBroker(t, s)
	id2, epoch2 := usageBroker(t, s)
	seq := map[int32]int64{}
	report := func(broker int32, brokerEpoch int64, g store.IngressRange) store.IngressCursor {
		seq[broker]++
		res := apply(t, s, store.UsageReport{BrokerID: broker, BrokerEpoch: brokerEpoch, Sequence: seq[broker], At: usageHour(0), Ingress: []store.IngressRange{g}})
		require.Len(t, res.Cursors, 1)
		return res.Cursors[0]
	}
	require.Equal(t, cursor(tp.ID, 0, 5, 100), report(id, epoch, ingress(tp.ID, 0, 5, 0, 100, 1000)))
	// The new leader (epoch 6, another broker) asks where metering stands.
	require.Equal(t, cursor(tp.ID, 0, 6, 100), report(id2, epoch2, ingress(tp.ID, 0, 6, 80, 80, 0)))
	// The old leader's next range is refused, though it starts at the cursor.
	require.Equal(t, cursor(tp.ID, 0, 6, 100), report(id, epoch, ingress(tp.ID, 0, 5, 100, 150, 500)))
	require.Equal(t, cursor(tp.ID, 0, 6, 150), report(id2, epoch2, ingress(tp.ID, 0, 6, 100, 150, 500)))
	// A newer epoch's range that does not start at the cursor still raises the epoch.
	require.Equal(t, cursor(tp.ID, 0, 7, 150), report(id, epoch, ingress(tp.ID, 0, 7, 120, 200, 800)))
	require.Equal(t, cursor(tp.ID, 0, 7, 150), report(id2, epoch2, ingress(tp.ID, 0, 6, 150, 160, 100)))
	require.Equal(t, int64(1500), usageOf(t, s, a.ID, usageHour(0), usageHour(1))[usageHour(0)][store.UsageIngressBytes])
}

// testUsageListScoping: a tenant's usage is its own; bad ids have none.
func testUsageListScoping(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	id, epoch := usageBroker(t, s)
	apply(t, s, store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: 1, At: usageHour(0),
		Counters: []store.UsageCounters{{TenantID: a.ID, Requests: 3}}})
	require.Empty(t, usageOf(t, s, b.ID, usageHour(-100), usageHour(100)))
	rows, err := s.ListUsage(t.Context(), "not-a-uuid", usageHour(-100), usageHour(100))
	require.NoError(t, err)
	require.Empty(t, rows)
	rows, err = s.ListUsage(t.Context(), a.ID, usageHour(1), usageHour(0))
	require.NoError(t, err)
	require.Empty(t, rows, "an empty range")
}

// testUsageTotals: every tenant's sums over a range of hours, exact past
// int64.
func testUsageTotals(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	meter := "test-" + store.NewID()
	_, err := s.AdvanceMeter(t.Context(), meter, usageHour(0), nil)
	require.NoError(t, err)
	// Three hours of the largest amount an hourly row holds, for a.
	_, err = s.AdvanceMeter(t.Context(), meter, usageHour(3), func(from, to time.Time) ([]store.UsageAmount, error) {
		return []store.UsageAmount{{TenantID: a.ID, Dimension: store.UsageColdStorageByteSeconds, Amount: math.MaxInt64}}, nil
	})
	require.NoError(t, err)
	id, epoch := usageBroker(t, s)
	apply(t, s, store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: 1, At: usageHour(1),
		Counters: []store.UsageCounters{{TenantID: a.ID, Requests: 7}, {TenantID: b.ID, EgressBytes: 5, Requests: 1}}})
	apply(t, s, store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: 2, At: usageHour(4),
		Counters: []store.UsageCounters{{TenantID: a.ID, Requests: 100}}}) // outside the range below

	mine := func(from, to time.Time) []store.UsageTotal {
		all, err := s.UsageTotals(t.Context(), from, to)
		require.NoError(t, err)
		var out []store.UsageTotal
		for _, u := range all {
			if u.TenantID == a.ID || u.TenantID == b.ID {
				out = append(out, u)
			}
		}
		return out
	}
	threeMax, _ := new(big.Int).SetString("27670116110564327421", 10) // 3 × (2^63 − 1), by hand
	want := []store.UsageTotal{
		{TenantID: a.ID, Dimension: store.UsageRequests, Amount: big.NewInt(7)},
		{TenantID: a.ID, Dimension: store.UsageColdStorageByteSeconds, Amount: threeMax},
		{TenantID: b.ID, Dimension: store.UsageEgressBytes, Amount: big.NewInt(5)},
		{TenantID: b.ID, Dimension: store.UsageRequests, Amount: big.NewInt(1)},
	}
	if b.ID < a.ID {
		want = append(want[2:], want[:2]...)
	}
	require.Equal(t, want, mine(usageHour(0).Add(30*time.Minute), usageHour(3)), "the hours overlapping the range")
	require.Empty(t, mine(usageHour(5), usageHour(6)))
}

// ---- meters ----

// testUsageMeterAdvance: a meter counts each interval once, split at hours,
// from its first call on.
func testUsageMeterAdvance(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	meter := "test-" + store.NewID()
	var pieces []store.MeterPiece
	compute := func(from, to time.Time) ([]store.UsageAmount, error) {
		requireUTC(t, from, to)
		pieces = append(pieces, store.MeterPiece{From: from, To: to})
		return []store.UsageAmount{
			{TenantID: a.ID, Dimension: store.UsagePartitionSeconds, Amount: to.Sub(from).Milliseconds()},
			{TenantID: a.ID, Dimension: store.UsageHotStorageByteSeconds, Amount: 0},
		}, nil
	}
	start := usageHour(0).Add(50 * time.Minute)
	res, err := s.AdvanceMeter(t.Context(), meter, start, compute)
	require.NoError(t, err)
	require.Equal(t, store.MeterResult{Advanced: false, From: start, To: start}, res, "the first call starts the meter")
	require.Empty(t, pieces)

	now := start.Add(90 * time.Minute) // 01:20 past usageHour(0)... → pieces 50→60, 60→120, 120→140
	res, err = s.AdvanceMeter(t.Context(), meter, now, compute)
	require.NoError(t, err)
	require.Equal(t, store.MeterResult{Advanced: true, From: start, To: now}, res)
	require.Equal(t, []store.MeterPiece{
		{From: start, To: usageHour(1)},
		{From: usageHour(1), To: usageHour(2)},
		{From: usageHour(2), To: now},
	}, pieces)
	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{
		usageHour(0): {store.UsagePartitionSeconds: (10 * time.Minute).Milliseconds()},
		usageHour(1): {store.UsagePartitionSeconds: time.Hour.Milliseconds()},
		usageHour(2): {store.UsagePartitionSeconds: (20 * time.Minute).Milliseconds()},
	}, usageOf(t, s, a.ID, usageHour(0), usageHour(3)), "zero amounts add no row")

	// Not after the meter: nothing.
	pieces = nil
	for _, n := range []time.Time{now, now.Add(-time.Minute)} {
		res, err = s.AdvanceMeter(t.Context(), meter, n, compute)
		require.NoError(t, err)
		require.False(t, res.Advanced)
		require.Empty(t, pieces)
	}

	// compute's error: nothing added, the meter stays.
	boom := errors.New("boom")
	_, err = s.AdvanceMeter(t.Context(), meter, now.Add(time.Minute), func(time.Time, time.Time) ([]store.UsageAmount, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	// Invalid amounts: refused, nothing added.
	_, err = s.AdvanceMeter(t.Context(), meter, now.Add(time.Minute), func(time.Time, time.Time) ([]store.UsageAmount, error) {
		return []store.UsageAmount{{TenantID: a.ID, Dimension: "bogus", Amount: 1}}, nil
	})
	require.Error(t, err)
	res, err = s.AdvanceMeter(t.Context(), meter, now.Add(time.Minute), compute)
	require.NoError(t, err)
	require.Equal(t, store.MeterResult{Advanced: true, From: now, To: now.Add(time.Minute)}, res)
	require.Equal(t, (21 * time.Minute).Milliseconds(), usageOf(t, s, a.ID, usageHour(2), usageHour(3))[usageHour(2)][store.UsagePartitionSeconds])

	// A gap longer than MaxMeterPieces hours is skipped.
	pieces = nil
	far := now.Add(time.Minute + (store.MaxMeterPieces+1)*time.Hour)
	res, err = s.AdvanceMeter(t.Context(), meter, far, compute)
	require.NoError(t, err)
	require.False(t, res.Advanced)
	require.Empty(t, pieces)
	res, err = s.AdvanceMeter(t.Context(), meter, far.Add(time.Second), compute)
	require.NoError(t, err)
	require.Equal(t, store.MeterResult{Advanced: true, From: ms(far), To: ms(far.Add(time.Second))}, res)
}

// ---- quota reports ----

func testUsageQuotaReports(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	b1, _ := usageBroker(t, s)
	b2, _ := usageBroker(t, s)
	rates := func(x float64) store.QuotaRates {
		return store.QuotaRates{limit.ProduceBytes: x, limit.FetchBytes: 2 * x, limit.Requests: 3 * x, limit.ProducerIDs: x / 4}
	}
	rep := func(tenant string, x float64) store.QuotaReport {
		return store.QuotaReport{TenantID: tenant, Offered: rates(x), Admitted: rates(x / 2), HotStorageBytes: int64(x) * 1000, Groups: int32(x), TransactionalIDs: int32(x) + 1}
	}
	stamped := func(r store.QuotaReport, broker int32, when time.Time) store.QuotaReport {
		r.BrokerID, r.At = broker, ms(when)
		return r
	}
	list := func(since time.Time, tenants ...string) []store.QuotaReport {
		got, err := s.ListQuotaReports(t.Context(), tenants, since)
		require.NoError(t, err)
		for _, r := range got {
			requireUTC(t, r.At)
		}
		return got
	}
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(time.Second), []store.QuotaReport{rep(a.ID, 10), rep(b.ID, 20)}, nil))
	require.Equal(t, []store.QuotaReport{stamped(rep(a.ID, 10), b1, at(time.Second))}, list(at(0), a.ID))

	// The broker's next report replaces the last: b is gone from b1.
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(2*time.Second), []store.QuotaReport{rep(a.ID, 12.5)}, nil))
	require.NoError(t, s.PutQuotaReports(t.Context(), b2, at(3*time.Second), []store.QuotaReport{rep(a.ID, 1), rep(b.ID, 2)}, nil))
	want := []store.QuotaReport{stamped(rep(a.ID, 12.5), b1, at(2*time.Second)), stamped(rep(a.ID, 1), b2, at(3*time.Second)), stamped(rep(b.ID, 2), b2, at(3*time.Second))}
	slices.SortFunc(want, func(x, y store.QuotaReport) int {
		if x.TenantID != y.TenantID {
			if x.TenantID < y.TenantID {
				return -1
			}
			return 1
		}
		return int(x.BrokerID - y.BrokerID)
	})
	require.Equal(t, want, list(at(0), a.ID, b.ID))
	require.Equal(t, []store.QuotaReport{stamped(rep(a.ID, 1), b2, at(3*time.Second))}, list(at(3*time.Second), a.ID), "since filters stale reports")

	all := list(at(0))
	var mine []store.QuotaReport
	for _, r := range all {
		if r.TenantID == a.ID || r.TenantID == b.ID {
			mine = append(mine, r)
		}
	}
	require.Equal(t, want, mine, "no tenants: every tenant")

	// An empty report clears the broker's.
	require.NoError(t, s.PutQuotaReports(t.Context(), b2, at(4*time.Second), nil, nil))
	require.Equal(t, []store.QuotaReport{stamped(rep(a.ID, 12.5), b1, at(2*time.Second))}, list(at(0), a.ID, b.ID))

	for name, bad := range map[string][]store.QuotaReport{
		"NaN":          {{TenantID: a.ID, Offered: store.QuotaRates{limit.ProduceBytes: math.NaN()}}},
		"infinite":     {{TenantID: a.ID, Admitted: store.QuotaRates{limit.Requests: math.Inf(1)}}},
		"negative":     {{TenantID: a.ID, HotStorageBytes: -1}},
		"tenant twice": {rep(a.ID, 1), rep(a.ID, 2)},
		"bad tenant":   {{TenantID: "x"}},
	} {
		err := s.PutQuotaReports(t.Context(), b1, at(5*time.Second), bad, nil)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), name)
	}
	require.Equal(t, []store.QuotaReport{stamped(rep(a.ID, 12.5), b1, at(2*time.Second))}, list(at(0), a.ID), "refused reports change nothing")
}

// ---- aggregates ----

// testUsageAggregates: cold storage counts finished remote segments only;
// partition counts follow topics; the system tenant is left out. Its own
// store: it creates the system tenant's internal topic.
func testUsageAggregates(t *testing.T, s store.Store) {
	f := newRemoteFixture(t, s, 2)
	lead := f.leader(t, 0)
	s1 := f.add(t, lead, 0, 0, 99)
	f.move(t, lead, s1, store.RemoteCopyFinished)
	s2 := f.add(t, lead, 0, 100, 199)
	f.move(t, lead, s2, store.RemoteCopyFinished)
	f.add(t, lead, 0, 200, 299) // copy started: not counted
	f.move(t, lead, s1, store.RemoteDeleteStarted)

	cold, err := s.ColdStorageBytes(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(100*100), cold[f.tenant.ID], "s2 alone: 100 offsets of 100 bytes")

	createTopic(t, s, f.tenant.ID, "more", 3)
	empty, _ := createTenant(t, s)
	counts, err := s.PartitionCounts(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(5), counts[f.tenant.ID])
	require.NotContains(t, counts, empty.ID)
	require.NotContains(t, cold, empty.ID)

	// The system tenant's internal topics are nobody's to pay for.
	createTopic(t, s, system.TenantID, system.OffsetsTopic, 2)
	counts, err = s.PartitionCounts(t.Context())
	require.NoError(t, err)
	require.NotContains(t, counts, system.TenantID)
	require.Equal(t, int64(5), counts[f.tenant.ID])
}

// ---- concurrent ----

// testConcurrentUsageReportRetries: one report retried from many goroutines
// at once is applied once.
func testConcurrentUsageReportRetries(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, a.ID, "retries", 1)
	id, epoch := usageBroker(t, s)
	var applied atomic.Int32
	for seq := int64(1); seq <= 5; seq++ {
		r := store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: seq, At: usageHour(0),
			Counters: []store.UsageCounters{{TenantID: a.ID, EgressBytes: 10, Requests: 1}},
			Ingress:  []store.IngressRange{ingress(tp.ID, 0, 1, (seq-1)*10, seq*10, 100)}}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				<-start
				res, err := s.ApplyUsageReport(t.Context(), r)
				if !assertNoError(t, err) {
					return
				}
				if !res.Duplicate {
					applied.Add(1)
				}
				assert.Equal(t, []store.IngressCursor{cursor(tp.ID, 0, 1, seq*10)}, res.Cursors)
			})
		}
		close(start)
		wg.Wait()
	}
	require.Equal(t, int32(5), applied.Load(), "each report applied once")
	require.Equal(t, map[time.Time]map[store.UsageDimension]int64{usageHour(0): {
		store.UsageEgressBytes: 50, store.UsageRequests: 5, store.UsageIngressBytes: 500,
	}}, usageOf(t, s, a.ID, usageHour(0), usageHour(1)))
}

// testConcurrentUsageIngress: brokers reporting the same offsets of a
// partition at once (each its own report) meter them once: the ingress
// billed equals the bytes of the log.
func testConcurrentUsageIngress(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, a.ID, "race", 1)
	const ranges = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		id, epoch := usageBroker(t, s)
		wg.Go(func() {
			<-start
			seq := int64(0)
			next := int64(0)
			for next < ranges*10 {
				seq++
				res, err := s.ApplyUsageReport(t.Context(), store.UsageReport{BrokerID: id, BrokerEpoch: epoch, Sequence: seq, At: usageHour(0),
					Ingress: []store.IngressRange{ingress(tp.ID, 0, 1, next, next+10, 7)}})
				if !assertNoError(t, err) {
					return
				}
				if !assert.Len(t, res.Cursors, 1) {
					return
				}
				next = res.Cursors[0].NextOffset // continue from where metering stands
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int64(ranges*7), usageOf(t, s, a.ID, usageHour(0), usageHour(1))[usageHour(0)][store.UsageIngressBytes])
}

// testConcurrentUsageMeter: replicas advancing one meter at once count each
// interval once: what was added is exactly the time the meter covered.
func testConcurrentUsageMeter(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	meter := "test-" + store.NewID()
	compute := func(from, to time.Time) ([]store.UsageAmount, error) {
		return []store.UsageAmount{{TenantID: a.ID, Dimension: store.UsagePartitionSeconds, Amount: to.Sub(from).Milliseconds()}}, nil
	}
	first := usageHour(0)
	_, err := s.AdvanceMeter(t.Context(), meter, first, compute)
	require.NoError(t, err)
	const steps = 40
	var advanced atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			<-start
			for i := 1; i <= steps; i++ {
				res, err := s.AdvanceMeter(t.Context(), meter, first.Add(time.Duration(i)*97*time.Second), compute)
				if !assertNoError(t, err) {
					return
				}
				if res.Advanced {
					advanced.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.Positive(t, advanced.Load())
	var sum int64
	for _, dims := range usageOf(t, s, a.ID, usageHour(0), usageHour(3)) {
		sum += dims[store.UsagePartitionSeconds]
	}
	require.Equal(t, (steps * 97 * time.Second).Milliseconds(), sum, "every interval counted once")
}
