package billing_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/billing"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// engines runs fn on a fresh store of each engine.
func engines(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		fn(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(t.Context(), testenv.PostgresURL(t), nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, st.Close()) })
		fn(t, st)
	})
}

const (
	gib      = int64(1) << 30
	gibMonth = gib * 30 * 24 * 3600 // 2,783,138,807,808,000 byte-seconds
)

var (
	nov = time.Date(2026, time.November, 1, 0, 0, 0, 0, time.UTC)
	dec = time.Date(2026, time.December, 1, 0, 0, 0, 0, time.UTC)
)

// The synthetic month: what the tenant holds at t (the schedule changes
// only on the hour, so every metered piece holds one value).
func hotBytes(t time.Time) int64 {
	if t.Before(nov.AddDate(0, 0, 15)) {
		return 2 * gib
	}
	return 5 * gib
}

func coldBytes(time.Time) int64 { return 100 * gib }

func partitions(t time.Time) int64 {
	switch {
	case t.Before(time.Date(2026, time.November, 26, 0, 0, 0, 0, time.UTC)):
		return 4
	case t.Before(time.Date(2026, time.November, 30, 14, 0, 0, 0, time.UTC)):
		return 6
	default:
		return 7
	}
}

// TestInvoiceMonth is the invoice of a month of synthetic usage on the free
// plan's default prices, checked line by line against figures worked by
// hand (below, not with billing's code), and a finalized invoice that
// nothing changes: not late usage, not re-running the job, not new prices.
//
// Usage, November 2026 (30 days, 720 hours), put in through the store's
// metering calls as the control plane would (reports each applied twice, as
// a retry after a lost answer would):
//
//   - ingress: a report a day, 1.5 GiB each, plus 64,424,510 bytes on the
//     30th: 45 GiB + 64,424,510 B = 48,382,806,590 B; 10 GiB free;
//     billable 35 GiB + 64,424,510 B = 37,645,388,350 B, × $0.10/GiB =
//     350 + 644,245,100/1,073,741,824 = 350.6000000052 cents → 351.
//     A range with a gap and one of an older leader epoch are refused.
//   - egress: 1 GiB a day plus 0.5 GiB on the 15th = 30.5 GiB =
//     32,749,125,632 B; 10 GiB free; 20.5 GiB × 9 cents = 184.5 → 184 (even).
//   - requests: 1,000,000 a day plus 25,000 on the 20th = 30,025,000; 10
//     million free; 20,025,000 × $0.20/M = 400.5 cents → 400 (even).
//   - hot storage: 2 GiB for 15 days, 5 GiB for 15 = 7 GiB × 1,296,000 s =
//     9,740,985,827,328,000 B·s = 3.5 GiB-months; 1 free; 2.5 × 10 cents = 25.
//   - cold storage: 100 GiB all month = 278,313,880,780,800,000 B·s = 100
//     GiB-months; 5 free; 95 × 2.3 cents = 218.5 → 218 (even).
//   - partitions: 4 for 600 h, 6 for 110 h, 7 for 10 h = 2,400 + 660 + 70 =
//     3,130 partition-hours = 11,268,000 s; 720 h free; 2,410 h × 0.15 cents
//     = 361.5 → 362 (even).
//
// Total: 351 + 184 + 400 + 25 + 218 + 362 = 1,540 cents.
func TestInvoiceMonth(t *testing.T) {
	engines(t, testInvoiceMonth)
}

func testInvoiceMonth(t *testing.T, st store.Store) {
	ctx := t.Context()
	ten := store.Tenant{ID: store.NewID(), Name: "acme", Email: "billing@acme.example", Plan: tenants.PlanFree, Status: store.TenantActive, CreatedAt: nov.AddDate(0, -1, 0)}
	require.NoError(t, st.CreateTenant(ctx, ten, store.APIKey{ID: "k_" + store.NewID(), TenantID: ten.ID, Name: "first", Hash: []byte("h"), CreatedAt: ten.CreatedAt}))
	hook, err := st.CreateWebhook(ctx, store.Webhook{TenantID: ten.ID, URL: "https://hooks.acme.example/billing", CreatedAt: ten.CreatedAt}, []byte("0123456789abcdef0123"), 0)
	require.NoError(t, err)
	tp := store.Topic{ID: store.NewID(), TenantID: ten.ID, Name: "orders", Partitions: 1, ReplicationFactor: 1,
		Config:    store.TopicConfig{RetentionMs: -1, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2, MaxMessageBytes: 1 << 20, MinInsyncReplicas: 1, CleanupPolicy: "delete"},
		CreatedAt: ten.CreatedAt, UpdatedAt: ten.CreatedAt}
	require.NoError(t, st.CreateTopic(ctx, tp, []store.Partition{{TopicID: tp.ID, Replicas: []int32{1}, Leader: 1, LeaderEpoch: 1, ISR: []int32{1}}}, store.CountLimits{}))
	broker, err := st.RegisterBroker(ctx, store.Broker{ID: 1, Address: "127.0.0.1:1", LeaseExpiresAt: dec.AddDate(1, 0, 0), RegisteredAt: nov})
	require.NoError(t, err)

	meter := func(name string, perSecond func(time.Time) int64, d store.UsageDimension) func(time.Time) {
		return func(now time.Time) {
			_, err := st.AdvanceMeter(ctx, name, now, func(from, to time.Time) ([]store.UsageAmount, error) {
				return []store.UsageAmount{{TenantID: ten.ID, Dimension: d, Amount: perSecond(from) * int64(to.Sub(from)/time.Second)}}, nil
			})
			require.NoError(t, err)
		}
	}
	meters := []func(time.Time){
		meter("test-hot", hotBytes, store.UsageHotStorageByteSeconds),
		meter("test-cold", coldBytes, store.UsageColdStorageByteSeconds),
		meter("test-partitions", partitions, store.UsagePartitionSeconds),
	}
	seq := int64(0)
	report := func(at time.Time, counters []store.UsageCounters, ingress ...store.IngressRange) store.UsageReportResult {
		seq++
		r := store.UsageReport{BrokerID: 1, BrokerEpoch: broker.Epoch, Sequence: seq, At: at, Counters: counters, Ingress: ingress}
		res, err := st.ApplyUsageReport(ctx, r)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		again, err := st.ApplyUsageReport(ctx, r) // the answer was lost: the broker retries
		require.NoError(t, err)
		require.True(t, again.Duplicate)
		return res
	}

	metrics := billing.NewMetrics()
	job := billing.NewJob(st, billing.JobConfig{Metrics: metrics})
	for now := nov; !now.After(dec); now = now.Add(6 * time.Hour) {
		for _, m := range meters {
			m(now)
		}
		if now.Hour() == 12 {
			day := int64(now.Day())
			egress, requests, ingress := gib, int64(1_000_000), gib+gib/2
			switch day {
			case 15:
				egress += gib / 2
			case 20:
				requests += 25_000
			case 30:
				ingress += 64_424_510
			}
			res := report(now, []store.UsageCounters{{TenantID: ten.ID, EgressBytes: egress, Requests: requests}},
				store.IngressRange{TopicID: tp.ID, LeaderEpoch: 1, StartOffset: (day - 1) * 1000, EndOffset: day * 1000, Bytes: ingress})
			require.Equal(t, []store.IngressCursor{{TopicID: tp.ID, LeaderEpoch: 1, NextOffset: day * 1000}}, res.Cursors)
			if day == 10 {
				refused := report(now.Add(time.Minute), nil,
					store.IngressRange{TopicID: tp.ID, LeaderEpoch: 1, StartOffset: day*1000 + 5, EndOffset: day*1000 + 900, Bytes: 5 * gib}, // a gap
					store.IngressRange{TopicID: tp.ID, LeaderEpoch: 0, StartOffset: day * 1000, EndOffset: day*1000 + 900, Bytes: 5 * gib},   // a deposed leader
				)
				require.Equal(t, []store.IngressCursor{{TopicID: tp.ID, LeaderEpoch: 1, NextOffset: day * 1000}}, refused.Cursors)
			}
		}
		if now.Equal(nov.AddDate(0, 0, 20)) {
			res, err := job.RunOnce(ctx, now)
			require.NoError(t, err)
			require.Equal(t, billing.RunResult{Drafts: 1}, res)
			draft, err := st.GetInvoiceByPeriod(ctx, ten.ID, "2026-11")
			require.NoError(t, err)
			require.Equal(t, store.InvoiceDraft, draft.Status)
			require.Equal(t, int64(20_025_000), draft.Lines[2].Quantity, "twenty days of requests so far")
		}
	}

	free := func(d store.UsageDimension, unit string, size, micros, freeQ int64) store.Price {
		return store.Price{Dimension: d, Unit: unit, UnitSize: size, UnitPriceMicros: micros, FreeQuantity: freeQ}
	}
	wantLines := []store.InvoiceLine{
		{Dimension: store.UsageIngressBytes, Quantity: 48_382_806_590, FreeQuantity: 10_737_418_240, BillableQuantity: 37_645_388_350,
			Price: free(store.UsageIngressBytes, "GiB", gib, 100_000, 10*gib), AmountMinor: 351},
		{Dimension: store.UsageEgressBytes, Quantity: 32_749_125_632, FreeQuantity: 10_737_418_240, BillableQuantity: 22_011_707_392,
			Price: free(store.UsageEgressBytes, "GiB", gib, 90_000, 10*gib), AmountMinor: 184},
		{Dimension: store.UsageRequests, Quantity: 30_025_000, FreeQuantity: 10_000_000, BillableQuantity: 20_025_000,
			Price: free(store.UsageRequests, "million requests", 1_000_000, 200_000, 10_000_000), AmountMinor: 400},
		{Dimension: store.UsageHotStorageByteSeconds, Quantity: 9_740_985_827_328_000, FreeQuantity: 2_783_138_807_808_000, BillableQuantity: 6_957_847_019_520_000,
			Price: free(store.UsageHotStorageByteSeconds, "GiB-month", gibMonth, 100_000, gibMonth), AmountMinor: 25},
		{Dimension: store.UsageColdStorageByteSeconds, Quantity: 278_313_880_780_800_000, FreeQuantity: 13_915_694_039_040_000, BillableQuantity: 264_398_186_741_760_000,
			Price: free(store.UsageColdStorageByteSeconds, "GiB-month", gibMonth, 23_000, 5*gibMonth), AmountMinor: 218},
		{Dimension: store.UsagePartitionSeconds, Quantity: 11_268_000, FreeQuantity: 2_592_000, BillableQuantity: 8_676_000,
			Price: free(store.UsagePartitionSeconds, "partition-hour", 3600, 1_500, 2_592_000), AmountMinor: 362},
	}

	// Within the grace after the month: still a draft, with the month's figures.
	res, err := job.RunOnce(ctx, dec.Add(30*time.Minute))
	require.NoError(t, err)
	require.Equal(t, billing.RunResult{Drafts: 1}, res)
	draft, err := st.GetInvoiceByPeriod(ctx, ten.ID, "2026-11")
	require.NoError(t, err)
	require.Equal(t, store.InvoiceDraft, draft.Status)
	require.Equal(t, wantLines, draft.Lines)

	// An hour after: finalized, line by line.
	finalizedAt := dec.Add(time.Hour)
	res, err = job.RunOnce(ctx, finalizedAt)
	require.NoError(t, err)
	require.Equal(t, billing.RunResult{Finalized: 1}, res)
	inv, err := st.GetInvoiceByPeriod(ctx, ten.ID, "2026-11")
	require.NoError(t, err)
	require.Equal(t, store.Invoice{ID: draft.ID, TenantID: ten.ID, Period: "2026-11", PeriodStart: nov, PeriodEnd: dec,
		Status: store.InvoiceFinalized, Plan: "free", Currency: "USD", Lines: wantLines, TotalMinor: 1540,
		UpdatedAt: finalizedAt, FinalizedAt: finalizedAt}, inv)

	// The invoice.finalized event: one delivery to the tenant's webhook.
	deliveries, err := st.ListDeliveries(ctx, ten.ID, hook.ID, 0)
	require.NoError(t, err)
	require.Len(t, deliveries, 1)
	require.Equal(t, store.EventInvoiceFinalized, deliveries[0].AlertState)
	var ev billing.Event
	require.NoError(t, json.Unmarshal(deliveries[0].Payload, &ev))
	require.Equal(t, "invoice.finalized", ev.Type)
	require.Equal(t, billing.InvoiceSummary{ID: draft.ID, TenantID: ten.ID, Period: "2026-11", PeriodStart: nov, PeriodEnd: dec,
		Status: "finalized", Plan: "free", Currency: "USD", TotalMinor: 1540, FinalizedAt: finalizedAt, Lines: []billing.LineSummary{
			{Dimension: "ingress_bytes", Quantity: 48_382_806_590, FreeQuantity: 10_737_418_240, BillableQuantity: 37_645_388_350, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 100_000, AmountMinor: 351},
			{Dimension: "egress_bytes", Quantity: 32_749_125_632, FreeQuantity: 10_737_418_240, BillableQuantity: 22_011_707_392, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 90_000, AmountMinor: 184},
			{Dimension: "requests", Quantity: 30_025_000, FreeQuantity: 10_000_000, BillableQuantity: 20_025_000, Unit: "million requests", UnitSize: 1_000_000, UnitPriceMicros: 200_000, AmountMinor: 400},
			{Dimension: "hot_storage_byte_seconds", Quantity: 9_740_985_827_328_000, FreeQuantity: 2_783_138_807_808_000, BillableQuantity: 6_957_847_019_520_000, Unit: "GiB-month", UnitSize: gibMonth, UnitPriceMicros: 100_000, AmountMinor: 25},
			{Dimension: "cold_storage_byte_seconds", Quantity: 278_313_880_780_800_000, FreeQuantity: 13_915_694_039_040_000, BillableQuantity: 264_398_186_741_760_000, Unit: "GiB-month", UnitSize: gibMonth, UnitPriceMicros: 23_000, AmountMinor: 218},
			{Dimension: "partition_seconds", Quantity: 11_268_000, FreeQuantity: 2_592_000, BillableQuantity: 8_676_000, Unit: "partition-hour", UnitSize: 3600, UnitPriceMicros: 1_500, AmountMinor: 362},
		}}, ev.Invoice)

	// Nothing changes a finalized invoice: usage recorded late into November
	// (a skewed clock), new prices, the job run again and again.
	before, err := json.Marshal(inv)
	require.NoError(t, err)
	report(dec.Add(-time.Hour), []store.UsageCounters{{TenantID: ten.ID, EgressBytes: 100 * gib, Requests: 1 << 30}})
	_, err = billing.SetPlanPrices(ctx, st, tenants.PlanFree, []store.Price{
		{Dimension: store.UsageRequests, UnitPriceMicros: 9_999_999},
		{Dimension: store.UsageIngressBytes, UnitPriceMicros: 0, FreeQuantity: 0},
	}, finalizedAt.Add(time.Minute))
	require.NoError(t, err)
	report(dec.Add(2*time.Hour), []store.UsageCounters{{TenantID: ten.ID, Requests: 3_000_000}}) // December's
	// dec-30min: a replica whose clock is behind takes November for open and
	// recomputes its draft, which the store refuses.
	for _, now := range []time.Time{finalizedAt.Add(time.Hour), dec.Add(-30 * time.Minute), dec.AddDate(0, 0, 15), dec.AddDate(0, 1, 1).Add(2 * time.Hour)} {
		_, err := job.RunOnce(ctx, now)
		require.NoError(t, err)
	}
	after, err := st.GetInvoiceByPeriod(ctx, ten.ID, "2026-11")
	require.NoError(t, err)
	afterJSON, err := json.Marshal(after)
	require.NoError(t, err)
	require.Equal(t, string(before), string(afterJSON), "the finalized invoice, byte for byte")
	deliveries, err = st.ListDeliveries(ctx, ten.ID, hook.ID, 0)
	require.NoError(t, err)
	require.Len(t, deliveries, 2, "November's event once, and December's")

	// December was billed at the new prices (the requests price replaced
	// whole, its allowance with it): 3,000,000 requests × $9.999999/M =
	// 2,999.9997 cents → 3,000.
	decInv, err := st.GetInvoiceByPeriod(ctx, ten.ID, "2026-12")
	require.NoError(t, err)
	require.Equal(t, store.InvoiceFinalized, decInv.Status)
	require.Equal(t, store.InvoiceLine{Dimension: store.UsageRequests, Quantity: 3_000_000, BillableQuantity: 3_000_000,
		Price: free(store.UsageRequests, "million requests", 1_000_000, 9_999_999, 0), AmountMinor: 3000}, decInv.Lines[2])
	require.Equal(t, int64(3000), decInv.TotalMinor)
	list, err := st.ListInvoices(ctx, ten.ID, store.InvoiceQuery{})
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, []string{"2026-12", "2026-11"}, []string{list[0].Period, list[1].Period})

	// Job health: every run succeeded, two invoices finalized.
	families, err := gather(metrics)
	require.NoError(t, err)
	require.Equal(t, 7.0, families["sluice_billing_job_runs_total{result=ok}"])
	require.Equal(t, 0.0, families["sluice_billing_job_runs_total{result=error}"])
	require.Equal(t, 2.0, families["sluice_billing_invoices_finalized_total"])
	require.Positive(t, families["sluice_billing_job_last_success_timestamp_seconds"])
}

// gather returns the collector's samples by name{label=value}.
func gather(c prometheus.Collector) (map[string]float64, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetCounter() != nil:
				out[name] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

// TestJobFailure: a tenant whose invoice cannot be computed (a plan with
// no prices) fails the run, counted, and does not stop the others; the
// system tenant gets no invoice, nor does usage of a tenant that does not
// exist.
func TestJobFailure(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	ctx := t.Context()
	var ids []string
	for _, plan := range []string{"enterprise", tenants.PlanPro} {
		ten := store.Tenant{ID: store.NewID(), Name: "t-" + plan, Email: plan + "@example.com", Plan: plan, Status: store.TenantActive, CreatedAt: nov}
		require.NoError(t, st.CreateTenant(ctx, ten, store.APIKey{ID: "k_" + store.NewID(), TenantID: ten.ID, Name: "k", Hash: []byte("h"), CreatedAt: nov}))
		ids = append(ids, ten.ID)
	}
	ghost := store.NewID()
	b, err := st.RegisterBroker(ctx, store.Broker{ID: 7, Address: "a", LeaseExpiresAt: dec, RegisteredAt: nov})
	require.NoError(t, err)
	_, err = st.ApplyUsageReport(ctx, store.UsageReport{BrokerID: 7, BrokerEpoch: b.Epoch, Sequence: 1, At: nov.Add(time.Hour),
		Counters: []store.UsageCounters{{TenantID: ids[0], Requests: 1}, {TenantID: ids[1], Requests: 200_000_000}, {TenantID: system.TenantID, Requests: 5}, {TenantID: ghost, Requests: 5}}})
	require.NoError(t, err)

	metrics := billing.NewMetrics()
	job := billing.NewJob(st, billing.JobConfig{Metrics: metrics})
	res, err := job.RunOnce(ctx, nov.Add(2*time.Hour))
	require.ErrorContains(t, err, ids[0])
	require.NotContains(t, err.Error(), ghost, "usage of a tenant that does not exist is nobody's to bill, and no failure")
	require.Equal(t, billing.RunResult{Drafts: 1}, res)
	pro, err := st.GetInvoiceByPeriod(ctx, ids[1], "2026-11")
	require.NoError(t, err)
	// 200,000,000 requests, 100 million free on pro, 100 million × $0.10/M = $10.00.
	require.Equal(t, int64(1000), pro.TotalMinor)
	_, err = st.GetInvoiceByPeriod(ctx, system.TenantID, "2026-11")
	require.ErrorIs(t, err, store.ErrNotFound, "Sluice's own usage is nobody's bill")
	families, err := gather(metrics)
	require.NoError(t, err)
	require.Equal(t, 1.0, families["sluice_billing_job_runs_total{result=error}"])
	require.Equal(t, 0.0, families["sluice_billing_job_runs_total{result=ok}"])
	_, ok := families["sluice_billing_job_last_success_timestamp_seconds"]
	require.False(t, ok, "no success yet")
}
