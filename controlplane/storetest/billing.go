package storetest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Plan prices and invoices (issue 17). Plans and tenants are the test's
// own, so the tests share the store; ListDraftInvoices and GetPlanPrices,
// which read across tenants and plans, are checked for the test's own.

func init() {
	tests = append(tests, billingTests...)
	concurrentTests = append(concurrentTests, billingConcurrentTests...)
}

var billingTests = []test{
	{name: "BillingPlanPrices", fn: testBillingPlanPrices},
	{name: "BillingDraftInvoice", fn: testBillingDraftInvoice},
	{name: "BillingFinalizedImmutable", fn: testBillingFinalizedImmutable},
	{name: "BillingFinalizeWebhooks", fn: testBillingFinalizeWebhooks},
	{name: "BillingInvoiceList", fn: testBillingInvoiceList},
	{name: "BillingInvoiceInvalid", fn: testBillingInvoiceInvalid},
}

var billingConcurrentTests = []test{
	{name: "ConcurrentBillingFinalize", fn: testConcurrentBillingFinalize},
}

// ---- fixtures ----

func testPrice(d store.UsageDimension, micros int64) store.Price {
	return store.Price{Dimension: d, Unit: "unit-of-" + string(d), UnitSize: 1000, UnitPriceMicros: micros, FreeQuantity: 10}
}

// invoiceValue returns an unsaved invoice of tenantID for period with one
// line per (quantity, amount) pair, in dimension order.
func invoiceValue(tenantID, period string, updated time.Time, lines ...[2]int64) store.Invoice {
	start, end, err := store.ParseInvoicePeriod(period)
	if err != nil {
		panic(err)
	}
	inv := store.Invoice{TenantID: tenantID, Period: period, PeriodStart: start, PeriodEnd: end, Status: store.InvoiceDraft,
		Plan: "free", Currency: "USD", UpdatedAt: updated}
	for i, l := range lines {
		d := store.UsageDimensions()[i]
		free := min(l[0], 10)
		inv.Lines = append(inv.Lines, store.InvoiceLine{Dimension: d, Quantity: l[0], FreeQuantity: free, BillableQuantity: l[0] - free,
			Price: testPrice(d, 1_000_000), AmountMinor: l[1]})
		inv.TotalMinor += l[1]
	}
	return inv
}

// storedInvoice is what a store returns for inv stored under id.
func storedInvoice(inv store.Invoice, id string, status store.InvoiceStatus) store.Invoice {
	inv.ID, inv.Status = id, status
	inv.UpdatedAt, inv.FinalizedAt = ms(inv.UpdatedAt), ms(inv.FinalizedAt)
	if status == store.InvoiceDraft {
		inv.FinalizedAt = time.Time{}
	}
	return inv
}

func finalize(t *testing.T, s store.Store, inv store.Invoice, finalized time.Time) (store.Invoice, bool) {
	t.Helper()
	inv.FinalizedAt = finalized
	got, ok, err := s.FinalizeInvoice(t.Context(), inv, func(stored store.Invoice) ([]byte, error) {
		return fmt.Appendf(nil, `{"type":"invoice.finalized","invoice":%q,"total":%d}`, stored.ID, stored.TotalMinor), nil
	})
	require.NoError(t, err)
	return got, ok
}

// ---- prices ----

func testBillingPlanPrices(t *testing.T, s store.Store) {
	plan := "plan-" + store.NewID()
	get := func() (store.PlanPrices, bool) {
		all, err := s.GetPlanPrices(t.Context())
		require.NoError(t, err)
		require.True(t, slices.IsSortedFunc(all, func(a, b store.PlanPrices) int {
			if a.Plan < b.Plan {
				return -1
			}
			return 1
		}))
		for _, p := range all {
			if p.Plan == plan {
				requireUTC(t, p.UpdatedAt)
				return p, true
			}
		}
		return store.PlanPrices{}, false
	}
	_, ok := get()
	require.False(t, ok, "a plan without stored prices is not listed")

	got, err := s.SetPlanPrices(t.Context(), store.PlanPrices{Plan: plan, Currency: "USD", Prices: []store.Price{
		testPrice(store.UsageRequests, 3), testPrice(store.UsageIngressBytes, 1),
	}}, at(time.Minute))
	require.NoError(t, err)
	want := store.PlanPrices{Plan: plan, Currency: "USD", UpdatedAt: ms(at(time.Minute)), Prices: []store.Price{
		testPrice(store.UsageIngressBytes, 1), testPrice(store.UsageRequests, 3),
	}}
	require.Equal(t, want, got, "in dimension order")
	listed, ok := get()
	require.True(t, ok)
	require.Equal(t, want, listed)

	// Replacing one dimension keeps the others; the currency is the plan's.
	changed := testPrice(store.UsageRequests, 0)
	changed.FreeQuantity, changed.Unit, changed.UnitSize = 0, "million requests", 1_000_000
	got, err = s.SetPlanPrices(t.Context(), store.PlanPrices{Plan: plan, Currency: "EUR", Prices: []store.Price{
		changed, testPrice(store.UsagePartitionSeconds, 7),
	}}, at(2*time.Minute))
	require.NoError(t, err)
	want = store.PlanPrices{Plan: plan, Currency: "EUR", UpdatedAt: ms(at(2 * time.Minute)), Prices: []store.Price{
		testPrice(store.UsageIngressBytes, 1), changed, testPrice(store.UsagePartitionSeconds, 7),
	}}
	require.Equal(t, want, got)

	for name, p := range map[string]store.PlanPrices{
		"no plan":          {Currency: "USD"},
		"bad currency":     {Plan: plan, Currency: "dollars"},
		"unknown dim":      {Plan: plan, Currency: "USD", Prices: []store.Price{testPrice("bogus", 1)}},
		"dimension twice":  {Plan: plan, Currency: "USD", Prices: []store.Price{testPrice(store.UsageRequests, 1), testPrice(store.UsageRequests, 2)}},
		"negative price":   {Plan: plan, Currency: "USD", Prices: []store.Price{testPrice(store.UsageRequests, -1)}},
		"zero unit size":   {Plan: plan, Currency: "USD", Prices: []store.Price{{Dimension: store.UsageRequests, Unit: "x"}}},
		"negative free":    {Plan: plan, Currency: "USD", Prices: []store.Price{{Dimension: store.UsageRequests, Unit: "x", UnitSize: 1, FreeQuantity: -1}}},
		"NUL in the unit":  {Plan: plan, Currency: "USD", Prices: []store.Price{{Dimension: store.UsageRequests, Unit: "x\x00", UnitSize: 1}}},
		"invalid UTF-8 pl": {Plan: "\xff", Currency: "USD"},
	} {
		_, err := s.SetPlanPrices(t.Context(), p, at(3*time.Minute))
		require.Error(t, err, name)
		require.False(t, isSentinel(err), name)
	}
	listed, _ = get()
	require.Equal(t, want, listed, "refused prices change nothing")
}

// ---- invoices ----

// testBillingDraftInvoice: a draft is created, replaced in place (same id)
// and read by id and by period.
func testBillingDraftInvoice(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	inv := invoiceValue(ten.ID, "2025-03", at(time.Minute), [2]int64{100, 9}, [2]int64{5, 0})
	inv.ID = store.NewID()
	inv.FinalizedAt = at(time.Hour) // ignored for a draft
	got, err := s.UpsertDraftInvoice(t.Context(), inv)
	require.NoError(t, err)
	want := storedInvoice(inv, inv.ID, store.InvoiceDraft)
	require.Equal(t, want, got)
	requireUTC(t, got.PeriodStart, got.PeriodEnd, got.UpdatedAt)

	byID, err := s.GetInvoice(t.Context(), ten.ID, inv.ID)
	require.NoError(t, err)
	require.Equal(t, want, byID)
	byPeriod, err := s.GetInvoiceByPeriod(t.Context(), ten.ID, "2025-03")
	require.NoError(t, err)
	require.Equal(t, want, byPeriod)

	// The next computation replaces the lines, plan and total; the id stays.
	next := invoiceValue(ten.ID, "2025-03", at(2*time.Minute), [2]int64{200, 19}, [2]int64{50, 4}, [2]int64{1, 0})
	next.Plan = "pro"
	got, err = s.UpsertDraftInvoice(t.Context(), next)
	require.NoError(t, err)
	want = storedInvoice(next, inv.ID, store.InvoiceDraft)
	require.Equal(t, want, got)
	byID, err = s.GetInvoice(t.Context(), ten.ID, inv.ID)
	require.NoError(t, err)
	require.Equal(t, want, byID)

	_, err = s.GetInvoice(t.Context(), other.ID, inv.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "another tenant's invoice")
	_, err = s.GetInvoiceByPeriod(t.Context(), other.ID, "2025-03")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetInvoice(t.Context(), ten.ID, "not-a-uuid")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetInvoiceByPeriod(t.Context(), ten.ID, "2025-04")
	require.ErrorIs(t, err, store.ErrNotFound)

	drafts, err := s.ListDraftInvoices(t.Context(), want.PeriodEnd)
	require.NoError(t, err)
	require.Contains(t, drafts, want, "a draft whose period ended")
	drafts, err = s.ListDraftInvoices(t.Context(), want.PeriodEnd.Add(-time.Millisecond))
	require.NoError(t, err)
	require.NotContains(t, drafts, want, "not ended yet")
}

// testBillingFinalizedImmutable: finalizing replaces the draft once; after
// it no write changes the invoice.
func testBillingFinalizedImmutable(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	draft, err := s.UpsertDraftInvoice(t.Context(), invoiceValue(ten.ID, "2025-02", at(time.Minute), [2]int64{100, 9}))
	require.NoError(t, err)

	final := invoiceValue(ten.ID, "2025-02", at(2*time.Minute), [2]int64{120, 11}, [2]int64{3, 0})
	got, ok := finalize(t, s, final, at(3*time.Minute))
	require.True(t, ok)
	final.FinalizedAt = at(3 * time.Minute)
	want := storedInvoice(final, draft.ID, store.InvoiceFinalized)
	require.Equal(t, want, got, "the draft's id, the finalized lines")
	requireUTC(t, got.FinalizedAt)

	// A draft update, a second finalization with other figures: refused or no-op.
	_, err = s.UpsertDraftInvoice(t.Context(), invoiceValue(ten.ID, "2025-02", at(4*time.Minute), [2]int64{500, 49}))
	require.ErrorIs(t, err, store.ErrConflict)
	again, ok := finalize(t, s, invoiceValue(ten.ID, "2025-02", at(5*time.Minute), [2]int64{900, 89}), at(6*time.Minute))
	require.False(t, ok)
	require.Equal(t, want, again, "the stored invoice, unchanged")
	for _, read := range []func() (store.Invoice, error){
		func() (store.Invoice, error) { return s.GetInvoice(t.Context(), ten.ID, draft.ID) },
		func() (store.Invoice, error) { return s.GetInvoiceByPeriod(t.Context(), ten.ID, "2025-02") },
	} {
		got, err := read()
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	drafts, err := s.ListDraftInvoices(t.Context(), at(1000*time.Hour))
	require.NoError(t, err)
	for _, d := range drafts {
		require.NotEqual(t, draft.ID, d.ID, "a finalized invoice is no draft")
	}

	// Finalizing without a draft creates the invoice.
	direct := invoiceValue(ten.ID, "2025-01", at(time.Minute), [2]int64{1, 0})
	direct.ID = store.NewID()
	got, ok = finalize(t, s, direct, at(2*time.Minute))
	require.True(t, ok)
	direct.FinalizedAt = at(2 * time.Minute)
	require.Equal(t, storedInvoice(direct, direct.ID, store.InvoiceFinalized), got)

	// Finalizing needs a time; an unknown tenant is not found.
	_, _, err = s.FinalizeInvoice(t.Context(), invoiceValue(ten.ID, "2024-12", at(0)), nil)
	require.Error(t, err)
	require.False(t, isSentinel(err))
	unknown := invoiceValue(store.NewID(), "2024-12", at(0))
	unknown.FinalizedAt = at(0)
	_, _, err = s.FinalizeInvoice(t.Context(), unknown, nil)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.UpsertDraftInvoice(t.Context(), invoiceValue(store.NewID(), "2024-12", at(0)))
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testBillingFinalizeWebhooks: finalizing enqueues one invoice.finalized
// delivery per webhook of the tenant, in the same transaction, once.
func testBillingFinalizeWebhooks(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	w1 := createWebhook(t, s, ten.ID, at(0))
	w2 := createWebhook(t, s, ten.ID, at(time.Second))
	wo := createWebhook(t, s, other.ID, at(0))

	inv := invoiceValue(ten.ID, "2025-03", at(time.Minute), [2]int64{100, 9})
	got, ok := finalize(t, s, inv, at(2*time.Minute))
	require.True(t, ok)
	_, ok = finalize(t, s, inv, at(3*time.Minute))
	require.False(t, ok)

	body := fmt.Sprintf(`{"type":"invoice.finalized","invoice":%q,"total":%d}`, got.ID, got.TotalMinor)
	for _, w := range []store.Webhook{w1, w2} {
		ds, err := s.ListDeliveries(t.Context(), ten.ID, w.ID, 0)
		require.NoError(t, err)
		require.Len(t, ds, 1, "one delivery per webhook, enqueued once")
		d := ds[0]
		require.Equal(t, store.EventInvoiceFinalized, d.AlertState)
		require.Empty(t, d.AlertID)
		require.Equal(t, body, string(d.Payload))
		require.Equal(t, store.DeliveryPending, d.Status)
		require.Equal(t, ms(at(2*time.Minute)), d.CreatedAt)
		require.Equal(t, ms(at(2*time.Minute)), d.NextAttemptAt)

		// The sender claims it like any delivery.
		c, err := s.ClaimDelivery(t.Context(), ten.ID, d.ID, at(3*time.Minute), time.Minute)
		require.NoError(t, err)
		require.Equal(t, w.URL, c.URL)
		_, err = s.MarkDelivered(t.Context(), c.ID, c.LeaseToken, at(3*time.Minute))
		require.NoError(t, err)
	}
	ds, err := s.ListDeliveries(t.Context(), other.ID, wo.ID, 0)
	require.NoError(t, err)
	require.Empty(t, ds, "another tenant's webhooks hear nothing")

	// A payload error aborts the finalization.
	boom := invoiceValue(ten.ID, "2025-04", at(time.Minute))
	boom.FinalizedAt = at(2 * time.Minute)
	_, _, err = s.FinalizeInvoice(t.Context(), boom, func(store.Invoice) ([]byte, error) { return nil, fmt.Errorf("boom") })
	require.ErrorContains(t, err, "boom")
	_, err = s.GetInvoiceByPeriod(t.Context(), ten.ID, "2025-04")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing finalized")

	// A tenant without webhooks finalizes all the same.
	lone, _ := createTenant(t, s)
	_, ok = finalize(t, s, invoiceValue(lone.ID, "2025-03", at(time.Minute)), at(2*time.Minute))
	require.True(t, ok)

	// An event delivery is not an alert's: EnqueueDelivery refuses an event with an alert.
	_, _, err = s.EnqueueDelivery(t.Context(), store.Delivery{TenantID: ten.ID, WebhookID: w1.ID, AlertID: store.NewID(),
		AlertState: store.EventInvoiceFinalized, Payload: []byte(`{}`)})
	require.Error(t, err)
}

// testBillingInvoiceList: newest period first, paged.
func testBillingInvoiceList(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	var want []store.Invoice
	for _, p := range []string{"2024-11", "2024-12", "2025-01", "2025-02"} {
		got, ok := finalize(t, s, invoiceValue(ten.ID, p, at(time.Minute), [2]int64{1, 0}), at(2*time.Minute))
		require.True(t, ok)
		want = append(want, got)
	}
	draft, err := s.UpsertDraftInvoice(t.Context(), invoiceValue(ten.ID, "2025-03", at(time.Minute)))
	require.NoError(t, err)
	want = append(want, draft)
	slices.Reverse(want)
	_, err = s.UpsertDraftInvoice(t.Context(), invoiceValue(other.ID, "2025-03", at(time.Minute)))
	require.NoError(t, err)

	all, err := s.ListInvoices(t.Context(), ten.ID, store.InvoiceQuery{})
	require.NoError(t, err)
	require.Equal(t, want, all)

	var paged []store.Invoice
	q := store.InvoiceQuery{Limit: 2}
	for {
		page, err := s.ListInvoices(t.Context(), ten.ID, q)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 2)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		q.BeforePeriod = page[len(page)-1].Period
	}
	require.Equal(t, want, paged)

	none, err := s.ListInvoices(t.Context(), "not-a-uuid", store.InvoiceQuery{})
	require.NoError(t, err)
	require.Empty(t, none)
}

// testBillingInvoiceInvalid: malformed invoices are refused.
func testBillingInvoiceInvalid(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	for name, mut := range map[string]func(*store.Invoice){
		"bad period":      func(i *store.Invoice) { i.Period = "2025-3" },
		"bounds":          func(i *store.Invoice) { i.PeriodEnd = i.PeriodEnd.Add(time.Hour) },
		"total":           func(i *store.Invoice) { i.TotalMinor++ },
		"billable":        func(i *store.Invoice) { i.Lines[0].BillableQuantity++ },
		"free > quantity": func(i *store.Invoice) { i.Lines[0].FreeQuantity, i.Lines[0].BillableQuantity = 101, -1 },
		"dimension twice": func(i *store.Invoice) { i.Lines = append(i.Lines, i.Lines[0]); i.TotalMinor *= 2 },
		"unknown dim":     func(i *store.Invoice) { i.Lines[0].Dimension = "bogus" },
		"no currency":     func(i *store.Invoice) { i.Currency = "" },
		"no update time":  func(i *store.Invoice) { i.UpdatedAt = time.Time{} },
		"bad id":          func(i *store.Invoice) { i.ID = "x" },
	} {
		inv := invoiceValue(ten.ID, "2025-03", at(time.Minute), [2]int64{100, 9})
		mut(&inv)
		_, err := s.UpsertDraftInvoice(t.Context(), inv)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
	_, err := s.GetInvoiceByPeriod(t.Context(), ten.ID, "2025-03")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testConcurrentBillingFinalize: replicas finalizing one period at once:
// one finalizes, every one answers that invoice, one delivery per webhook.
func testConcurrentBillingFinalize(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	_, err := s.UpsertDraftInvoice(t.Context(), invoiceValue(ten.ID, "2025-03", at(time.Minute), [2]int64{100, 9}))
	require.NoError(t, err)
	var won atomic.Int32
	results := make([]store.Invoice, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			<-start
			inv := invoiceValue(ten.ID, "2025-03", at(2*time.Minute), [2]int64{100 + int64(i), 9 + int64(i)})
			inv.FinalizedAt = at(3 * time.Minute)
			got, ok, err := s.FinalizeInvoice(t.Context(), inv, func(store.Invoice) ([]byte, error) { return []byte(`{}`), nil })
			if !assertNoError(t, err) {
				return
			}
			if ok {
				won.Add(1)
			}
			results[i] = got
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int32(1), won.Load())
	for _, r := range results {
		assert.Equal(t, results[0], r)
	}
	ds, err := s.ListDeliveries(t.Context(), ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
}
