package billing

import (
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants"
)

// TestLineAmountRounding: amounts are exact and rounded half to even, in
// minor units (figures worked by hand in the comments).
func TestLineAmountRounding(t *testing.T) {
	gib := store.Price{Dimension: store.UsageIngressBytes, Unit: "GiB", UnitSize: 1 << 30, UnitPriceMicros: 100_000} // $0.10/GiB
	perMillion := store.Price{Dimension: store.UsageRequests, Unit: "million requests", UnitSize: 1_000_000, UnitPriceMicros: 200_000}
	for _, c := range []struct {
		name     string
		billable *big.Int
		price    store.Price
		perMinor int64
		want     int64
	}{
		{"10 GiB at $0.10 is 100 cents", big.NewInt(10 << 30), gib, 10_000, 100},
		{"nothing is nothing", big.NewInt(0), gib, 10_000, 0},
		{"53,687,091 B (just under 0.05 GiB) is just under 0.5 cents → 0", big.NewInt(53_687_091), gib, 10_000, 0},
		{"53,687,092 B (just over 0.05 GiB) is just over 0.5 cents → 1", big.NewInt(53_687_092), gib, 10_000, 1},
		{"2,500,000 requests at $0.20/M is 50,000 µ = 5 cents", big.NewInt(2_500_000), perMillion, 10_000, 50},
		{"25,000 requests: 5,000 µ = 0.5 cents → 0 (even)", big.NewInt(25_000), perMillion, 10_000, 0},
		{"75,000 requests: 1.5 cents → 2 (even)", big.NewInt(75_000), perMillion, 10_000, 2},
		{"125,000 requests: 2.5 cents → 2 (even)", big.NewInt(125_000), perMillion, 10_000, 2},
		{"20,025,000 requests: 400.5 cents → 400", big.NewInt(20_025_000), perMillion, 10_000, 400},
		{"24,999 requests: 0.49996 cents → 0", big.NewInt(24_999), perMillion, 10_000, 0},
		{"25,001 requests: 0.50004 cents → 1", big.NewInt(25_001), perMillion, 10_000, 1},
		{"yen have no minor digits: 2.5 yen → 2", big.NewInt(12_500_000), perMillion, 1_000_000, 2},
		{"free price", big.NewInt(1 << 40), store.Price{UnitSize: 1}, 10_000, 0},
	} {
		got, err := LineAmount(c.billable, c.price, c.perMinor)
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, got, c.name)
	}

	// A billable quantity past int64 (2^70 byte-seconds) priced down to a
	// small amount is exact: 2^70 / 2^60 units × 7 µ = 1024 × 7 µ = 7,168 µ → 1 cent (0.7168).
	huge := new(big.Int).Lsh(big.NewInt(1), 70)
	got, err := LineAmount(huge, store.Price{UnitSize: 1 << 60, UnitPriceMicros: 7}, 10_000)
	require.NoError(t, err)
	require.Equal(t, int64(1), got)

	_, err = LineAmount(huge, store.Price{UnitSize: 1, UnitPriceMicros: 1_000_000}, 1)
	require.ErrorIs(t, err, ErrOverflow)
	_, err = LineAmount(big.NewInt(1), store.Price{UnitSize: 0}, 10_000)
	require.Error(t, err)
}

func TestMicrosPerMinor(t *testing.T) {
	m, err := MicrosPerMinor("USD")
	require.NoError(t, err)
	require.Equal(t, int64(10_000), m)
	m, err = MicrosPerMinor("JPY")
	require.NoError(t, err)
	require.Equal(t, int64(1_000_000), m)
	_, err = MicrosPerMinor("XXX")
	require.ErrorIs(t, err, ErrInvalidPrice)
}

// TestComputeIgnoresOthers: rows of other tenants and other months do not
// count; a dimension without a price costs nothing; every dimension has a
// line.
func TestComputeIgnoresOthers(t *testing.T) {
	me, other := store.NewID(), store.NewID()
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	rows := []store.UsageRow{
		{TenantID: me, Hour: nov, Dimension: store.UsageRequests, Amount: 11_000_000},
		{TenantID: me, Hour: nov.Add(719 * time.Hour), Dimension: store.UsageRequests, Amount: 1_500_000},
		{TenantID: me, Hour: nov.Add(720 * time.Hour), Dimension: store.UsageRequests, Amount: 1 << 40}, // December
		{TenantID: me, Hour: nov.Add(-time.Hour), Dimension: store.UsageRequests, Amount: 1 << 40},      // October
		{TenantID: other, Hour: nov, Dimension: store.UsageRequests, Amount: 1 << 40},
		{TenantID: me, Hour: nov, Dimension: store.UsageEgressBytes, Amount: 1 << 40},
	}
	prices := store.PlanPrices{Plan: "p", Currency: "USD", Prices: []store.Price{
		{Dimension: store.UsageRequests, Unit: "million requests", UnitSize: 1_000_000, UnitPriceMicros: 200_000, FreeQuantity: 10_000_000},
	}}
	now := nov.Add(24 * time.Hour)
	inv, err := Compute(me, "p", "2026-11", prices, rows, now)
	require.NoError(t, err)
	require.Len(t, inv.Lines, len(store.UsageDimensions()))
	for i, l := range inv.Lines {
		require.Equal(t, store.UsageDimensions()[i], l.Dimension)
	}
	// 12,500,000 requests, 10,000,000 free: 2,500,000 × $0.20/M = 50 cents.
	req := inv.Lines[2]
	require.Equal(t, store.InvoiceLine{Dimension: store.UsageRequests, Quantity: 12_500_000, FreeQuantity: 10_000_000,
		BillableQuantity: 2_500_000, Price: prices.Prices[0], AmountMinor: 50}, req)
	// Egress has no price: 2^40 bytes at nothing.
	require.Equal(t, store.InvoiceLine{Dimension: store.UsageEgressBytes, Quantity: 1 << 40, BillableQuantity: 1 << 40,
		Price: store.Price{Dimension: store.UsageEgressBytes, Unit: "GiB", UnitSize: 1 << 30}}, inv.Lines[1])
	require.Equal(t, int64(50), inv.TotalMinor)
	require.Equal(t, store.InvoiceDraft, inv.Status)
	require.Equal(t, now, inv.UpdatedAt)
	_, err = store.CheckInvoice(inv)
	require.NoError(t, err, "what Compute makes the store takes")

	// A month of rows summing past int64 is an error, not a wrapped number.
	big := []store.UsageRow{
		{TenantID: me, Hour: nov, Dimension: store.UsageColdStorageByteSeconds, Amount: 1 << 62},
		{TenantID: me, Hour: nov.Add(time.Hour), Dimension: store.UsageColdStorageByteSeconds, Amount: 1 << 62},
	}
	_, err = Compute(me, "p", "2026-11", prices, big, now)
	require.ErrorIs(t, err, ErrOverflow)
}

func TestCheckPrices(t *testing.T) {
	got, err := CheckPrices(tenants.PlanPro, []store.Price{{Dimension: store.UsageIngressBytes, UnitPriceMicros: 1, FreeQuantity: 2}})
	require.NoError(t, err)
	require.Equal(t, []store.Price{{Dimension: store.UsageIngressBytes, Unit: "GiB", UnitSize: GiB, UnitPriceMicros: 1, FreeQuantity: 2}}, got,
		"the unit is the dimension's")
	for name, c := range map[string]struct {
		plan   string
		prices []store.Price
	}{
		"unknown plan":      {"enterprise", nil},
		"unknown dimension": {tenants.PlanPro, []store.Price{{Dimension: "bogus"}}},
		"twice":             {tenants.PlanPro, []store.Price{{Dimension: store.UsageRequests}, {Dimension: store.UsageRequests}}},
		"negative price":    {tenants.PlanPro, []store.Price{{Dimension: store.UsageRequests, UnitPriceMicros: -1}}},
		"negative free":     {tenants.PlanPro, []store.Price{{Dimension: store.UsageRequests, FreeQuantity: -1}}},
		"another unit":      {tenants.PlanPro, []store.Price{{Dimension: store.UsageRequests, Unit: "thousand requests", UnitSize: 1000}}},
		"another unit size": {tenants.PlanPro, []store.Price{{Dimension: store.UsageHotStorageByteSeconds, Unit: "GiB-month", UnitSize: GiB * 3600}}},
	} {
		_, err := CheckPrices(c.plan, c.prices)
		require.ErrorIs(t, err, ErrInvalidPrice, name)
	}
}

// TestDefaultPrices: every plan prices every dimension in its unit.
func TestDefaultPrices(t *testing.T) {
	for _, plan := range tenants.Plans() {
		p, err := DefaultPrices(plan)
		require.NoError(t, err)
		require.Equal(t, Currency, p.Currency)
		require.Len(t, p.Prices, len(store.UsageDimensions()))
		for i, pr := range p.Prices {
			require.Equal(t, store.UsageDimensions()[i], pr.Dimension)
			_, err := CheckPrices(plan, []store.Price{pr})
			require.NoError(t, err)
		}
		require.NoError(t, store.CheckPlanPrices(p))
	}
	_, err := DefaultPrices("enterprise")
	require.ErrorIs(t, err, tenants.ErrUnknownPlan)
}
