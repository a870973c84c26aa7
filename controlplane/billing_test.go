package controlplane_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/billing"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// storeInvoice computes and stores tenantID's invoice of period from its
// usage rows on the free plan's default prices, finalized when final.
func storeInvoice(t *testing.T, st store.Store, tenantID, period string, final bool) store.Invoice {
	t.Helper()
	ctx := context.Background()
	prices, err := billing.DefaultPrices("free")
	require.NoError(t, err)
	start, end, err := store.ParseInvoicePeriod(period)
	require.NoError(t, err)
	rows, err := st.ListUsage(ctx, tenantID, start, end)
	require.NoError(t, err)
	inv, err := billing.Compute(tenantID, "free", period, prices, rows, time.Now())
	require.NoError(t, err)
	if final {
		inv.FinalizedAt = time.Now()
		out, finalized, err := st.FinalizeInvoice(ctx, inv, nil)
		require.NoError(t, err)
		require.True(t, finalized)
		return out
	}
	out, err := st.UpsertDraftInvoice(ctx, inv)
	require.NoError(t, err)
	return out
}

// TestControlPlaneBillingUsageAndInvoices: a tenant reads its own usage by
// hour and day and its own invoices, newest first, paged, by id and by
// period; another tenant's invoice is not found; bad requests are refused.
func TestControlPlaneBillingUsageAndInvoices(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		ctx := context.Background()
		e1 := c.register(t, 1)
		alice, bob := c.signup(t, "alice"), c.signup(t, "bob")

		// Usage recorded now, through a broker's report.
		_, err := c.report(&sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: e1, Sequence: 1, Counters: []*sluicev1.TenantUsageCounters{
			{TenantId: alice.tenantID, EgressBytes: 3 << 30, Requests: 12},
			{TenantId: bob.tenantID, Requests: 1},
		}})
		require.NoError(t, err)
		now := time.Now().UTC()
		hour := now.Truncate(time.Hour)
		res, err := c.billing(alice.token).GetUsage(ctx, connect.NewRequest(&sluicev1.GetUsageRequest{
			StartTime: timestamppb.New(now.Add(-2 * time.Hour)), EndTime: timestamppb.New(now.Add(time.Minute)),
			Dimensions: []sluicev1.UsageDimension{sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS, sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES},
		}))
		require.NoError(t, err)
		require.Len(t, res.Msg.GetBuckets(), 2)
		for _, b := range res.Msg.GetBuckets() {
			require.True(t, hour.Equal(b.GetStartTime().AsTime()) || hour.Add(time.Hour).Equal(b.GetStartTime().AsTime()), "bucket %v in the hour applied", b.GetStartTime().AsTime())
		}
		require.Equal(t, sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES, res.Msg.GetBuckets()[0].GetDimension())
		require.Equal(t, int64(3<<30), res.Msg.GetBuckets()[0].GetAmount())
		require.Equal(t, int64(12), res.Msg.GetBuckets()[1].GetAmount())
		require.Len(t, res.Msg.GetTotals(), 2)
		// By day: one bucket per dimension, today's (or tomorrow's, past midnight).
		res, err = c.billing(alice.token).GetUsage(ctx, connect.NewRequest(&sluicev1.GetUsageRequest{
			StartTime: timestamppb.New(now.Add(-24 * time.Hour)), EndTime: timestamppb.New(now.Add(time.Hour)), Granularity: sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY,
		}))
		require.NoError(t, err)
		require.Len(t, res.Msg.GetBuckets(), 2)
		require.Len(t, res.Msg.GetTotals(), 6)
		require.Equal(t, int64(12), res.Msg.GetTotals()[2].GetAmount())
		require.Equal(t, int64(0), res.Msg.GetTotals()[0].GetAmount())
		_, err = c.billing(alice.token).GetUsage(ctx, connect.NewRequest(&sluicev1.GetUsageRequest{
			StartTime: timestamppb.New(now), EndTime: timestamppb.New(now.Add(-time.Hour)),
		}))
		requireCode(t, connect.CodeInvalidArgument, err, "end_time")
		_, err = c.billing(alice.token).GetUsage(ctx, connect.NewRequest(&sluicev1.GetUsageRequest{
			StartTime: timestamppb.New(now.Add(-40 * 24 * time.Hour)),
		}))
		requireCode(t, connect.CodeInvalidArgument, err, "31 days by hour")

		// Invoices: alice has a finalized month and the open month's draft.
		cur, curStart, _ := store.InvoicePeriod(now)
		prev, _, _ := store.InvoicePeriod(curStart.Add(-time.Hour))
		old := storeInvoice(t, c.srv.Store(), alice.tenantID, prev, true)
		draft := storeInvoice(t, c.srv.Store(), alice.tenantID, cur, false)
		bobs := storeInvoice(t, c.srv.Store(), bob.tenantID, cur, false)

		list, err := c.billing(alice.token).ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{}))
		require.NoError(t, err)
		require.Len(t, list.Msg.GetInvoices(), 2)
		require.Empty(t, list.Msg.GetNextPageToken())
		got := list.Msg.GetInvoices()[0]
		require.Equal(t, draft.ID, got.GetId())
		require.Equal(t, cur, got.GetPeriod())
		require.Equal(t, sluicev1.InvoiceStatus_INVOICE_STATUS_DRAFT, got.GetStatus())
		require.Equal(t, "free", got.GetPlan())
		require.Len(t, got.GetLines(), 6)
		egress := got.GetLines()[1]
		require.Equal(t, sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES, egress.GetDimension())
		require.Equal(t, int64(3<<30), egress.GetQuantity())
		require.Equal(t, int64(3<<30), egress.GetFreeQuantity(), "within the free plan's 10 GiB")
		require.Equal(t, "GiB", egress.GetPrice().GetUnit())
		require.Equal(t, "USD", got.GetTotal().GetCurrencyCode())
		require.Equal(t, draft.TotalMinor, got.GetTotal().GetMinorUnits())
		require.Equal(t, old.ID, list.Msg.GetInvoices()[1].GetId())
		require.Equal(t, sluicev1.InvoiceStatus_INVOICE_STATUS_FINALIZED, list.Msg.GetInvoices()[1].GetStatus())
		require.NotNil(t, list.Msg.GetInvoices()[1].GetFinalizeTime())

		// Paged one at a time.
		page, err := c.billing(alice.token).ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{PageSize: 1}))
		require.NoError(t, err)
		require.Len(t, page.Msg.GetInvoices(), 1)
		require.Equal(t, draft.ID, page.Msg.GetInvoices()[0].GetId())
		require.NotEmpty(t, page.Msg.GetNextPageToken())
		page, err = c.billing(alice.token).ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{PageSize: 1, PageToken: page.Msg.GetNextPageToken()}))
		require.NoError(t, err)
		require.Len(t, page.Msg.GetInvoices(), 1)
		require.Equal(t, old.ID, page.Msg.GetInvoices()[0].GetId())
		require.Empty(t, page.Msg.GetNextPageToken())
		_, err = c.billing(alice.token).ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{PageSize: 101}))
		requireCode(t, connect.CodeInvalidArgument, err, "page_size")
		_, err = c.billing(alice.token).ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{PageToken: "!!"}))
		requireCode(t, connect.CodeInvalidArgument, err, "page_token")

		// By id and by period.
		one, err := c.billing(alice.token).GetInvoice(ctx, connect.NewRequest(&sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_InvoiceId{InvoiceId: old.ID}}))
		require.NoError(t, err)
		require.Equal(t, prev, one.Msg.GetInvoice().GetPeriod())
		one, err = c.billing(alice.token).GetInvoice(ctx, connect.NewRequest(&sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_Period{Period: cur}}))
		require.NoError(t, err)
		require.Equal(t, draft.ID, one.Msg.GetInvoice().GetId())

		// Bob's invoice is not alice's to see, by id or by its period.
		_, err = c.billing(alice.token).GetInvoice(ctx, connect.NewRequest(&sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_InvoiceId{InvoiceId: bobs.ID}}))
		requireCode(t, connect.CodeNotFound, err)
		bl, err := c.billing(bob.token).ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{}))
		require.NoError(t, err)
		require.Len(t, bl.Msg.GetInvoices(), 1)
		require.Equal(t, bobs.ID, bl.Msg.GetInvoices()[0].GetId())
		_, err = c.billing(bob.token).GetInvoice(ctx, connect.NewRequest(&sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_Period{Period: prev}}))
		requireCode(t, connect.CodeNotFound, err)

		_, err = c.billing(alice.token).GetInvoice(ctx, connect.NewRequest(&sluicev1.GetInvoiceRequest{}))
		requireCode(t, connect.CodeInvalidArgument, err, "invoice")
		_, err = c.billing(alice.token).GetInvoice(ctx, connect.NewRequest(&sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_Period{Period: "2026-13"}}))
		requireCode(t, connect.CodeInvalidArgument, err, "period")
		_, err = c.billing("").ListInvoices(ctx, connect.NewRequest(&sluicev1.ListInvoicesRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
	})
}

// TestControlPlaneOperatorPlanPrices: operators read every plan's prices
// and replace some of one plan's; bad prices are refused and change
// nothing; tenants cannot call either.
func TestControlPlaneOperatorPlanPrices(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		ctx := context.Background()
		op := c.operator(operatorToken)
		res, err := op.GetPlanPrices(ctx, connect.NewRequest(&sluicev1.GetPlanPricesRequest{}))
		require.NoError(t, err)
		require.Len(t, res.Msg.GetPlans(), 2)
		free := res.Msg.GetPlans()[0]
		require.Equal(t, "free", free.GetPlan())
		require.Equal(t, "USD", free.GetCurrencyCode())
		require.Len(t, free.GetPrices(), 6)
		cold := free.GetPrices()[4]
		require.Equal(t, sluicev1.UsageDimension_USAGE_DIMENSION_COLD_STORAGE_BYTE_SECONDS, cold.GetDimension())
		require.Equal(t, "GiB-month", cold.GetUnit())
		require.Equal(t, int64(23000), cold.GetUnitPriceMicros())

		set, err := op.SetPlanPrices(ctx, connect.NewRequest(&sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, UnitPriceMicros: 70000, FreeQuantity: 5 << 30},
		}}))
		require.NoError(t, err)
		pro := set.Msg.GetPlan()
		require.Equal(t, "pro", pro.GetPlan())
		require.Len(t, pro.GetPrices(), 6)
		require.Equal(t, "GiB", pro.GetPrices()[0].GetUnit(), "the dimension's unit when left empty")
		require.Equal(t, int64(1<<30), pro.GetPrices()[0].GetUnitSize())
		require.Equal(t, int64(70000), pro.GetPrices()[0].GetUnitPriceMicros())
		require.Equal(t, int64(5<<30), pro.GetPrices()[0].GetFreeQuantity())
		require.Equal(t, int64(40000), pro.GetPrices()[1].GetUnitPriceMicros(), "egress keeps its price")
		res, err = op.GetPlanPrices(ctx, connect.NewRequest(&sluicev1.GetPlanPricesRequest{}))
		require.NoError(t, err)
		require.Equal(t, int64(70000), res.Msg.GetPlans()[1].GetPrices()[0].GetUnitPriceMicros())
		require.Equal(t, int64(100000), res.Msg.GetPlans()[0].GetPrices()[0].GetUnitPriceMicros(), "free keeps its price")

		ingress := sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES
		for _, tc := range []struct {
			name string
			m    *sluicev1.SetPlanPricesRequest
			msg  string
		}{
			{"unknown plan", &sluicev1.SetPlanPricesRequest{Plan: "platinum", Prices: []*sluicev1.Price{{Dimension: ingress}}}, "platinum"},
			{"no plan", &sluicev1.SetPlanPricesRequest{Prices: []*sluicev1.Price{{Dimension: ingress}}}, "plan"},
			{"no prices", &sluicev1.SetPlanPricesRequest{Plan: "pro"}, "prices"},
			{"unspecified dimension", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{}}}, "prices[0].dimension"},
			{"unknown dimension", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{Dimension: 42}}}, "prices[0].dimension"},
			{"negative price", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{Dimension: ingress, UnitPriceMicros: -1}}}, "negative"},
			{"negative allowance", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{Dimension: ingress, FreeQuantity: -1}}}, "negative"},
			{"another unit", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{Dimension: ingress, Unit: "GB"}}}, "GB"},
			{"another unit size", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{Dimension: ingress, UnitSize: 1000}}}, "1000"},
			{"a dimension twice", &sluicev1.SetPlanPricesRequest{Plan: "pro", Prices: []*sluicev1.Price{{Dimension: ingress}, {Dimension: ingress}}}, "twice"},
		} {
			_, err := op.SetPlanPrices(ctx, connect.NewRequest(tc.m))
			requireCode(t, connect.CodeInvalidArgument, err, tc.msg)
		}
		res, err = op.GetPlanPrices(ctx, connect.NewRequest(&sluicev1.GetPlanPricesRequest{}))
		require.NoError(t, err)
		require.Equal(t, int64(70000), res.Msg.GetPlans()[1].GetPrices()[0].GetUnitPriceMicros(), "refusals changed nothing")

		a := c.signup(t, "alice")
		_, err = c.operator(a.token).GetPlanPrices(ctx, connect.NewRequest(&sluicev1.GetPlanPricesRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
	})
}
