package billing

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// ErrOverflow: an invoice figure does not fit an int64 (a quantity of more
// than 2^63 base units in a month, or a total of more than 2^63 minor
// units).
var ErrOverflow = errors.New("invoice figure overflows int64")

// LineAmount returns what billable base units cost at p in minor units of a
// currency with microsPerMinor micros to the minor unit:
// billable × p.UnitPriceMicros / (p.UnitSize × microsPerMinor), rounded
// half to even, computed exactly. It is ErrOverflow beyond int64.
func LineAmount(billable *big.Int, p store.Price, microsPerMinor int64) (int64, error) {
	if p.UnitSize <= 0 || microsPerMinor <= 0 {
		return 0, fmt.Errorf("line amount: unit size %d, micros per minor unit %d", p.UnitSize, microsPerMinor)
	}
	num := new(big.Int).Mul(billable, big.NewInt(p.UnitPriceMicros))
	den := new(big.Int).Mul(big.NewInt(p.UnitSize), big.NewInt(microsPerMinor))
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	// Half to even: up when the remainder is more than half, or exactly half
	// and the quotient is odd (num and den are not negative).
	switch new(big.Int).Lsh(r, 1).Cmp(den) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	if !q.IsInt64() {
		return 0, ErrOverflow
	}
	return q.Int64(), nil
}

// Compute returns tenantID's invoice for the calendar month period
// ("2026-11") on plan at prices, from the tenant's hourly usage rows
// (those of other tenants or outside the period are ignored): see
// ComputeTotals.
func Compute(tenantID, plan, period string, prices store.PlanPrices, rows []store.UsageRow, now time.Time) (store.Invoice, error) {
	start, end, err := store.ParseInvoicePeriod(period)
	if err != nil {
		return store.Invoice{}, err
	}
	sums := map[store.UsageDimension]*big.Int{}
	for _, r := range rows {
		if r.TenantID != tenantID || r.Hour.Before(start) || !r.Hour.Before(end) {
			continue
		}
		if sums[r.Dimension] == nil {
			sums[r.Dimension] = new(big.Int)
		}
		sums[r.Dimension].Add(sums[r.Dimension], big.NewInt(r.Amount))
	}
	return ComputeTotals(tenantID, plan, period, prices, sums, now)
}

// ComputeTotals returns tenantID's invoice for the calendar month period
// on plan at prices, from the month's sum of each dimension (absent: none),
// as a draft updated at now: one line per dimension in dimension order,
// each quantity the month's sum, of it free up to the price's allowance,
// the rest billable, priced by LineAmount; the total is the lines' sum. A
// dimension prices lack is priced at zero per its unit with no allowance.
// The id is left empty (the store keeps the period's). A quantity or total
// past int64 is ErrOverflow.
func ComputeTotals(tenantID, plan, period string, prices store.PlanPrices, sums map[store.UsageDimension]*big.Int, now time.Time) (store.Invoice, error) {
	start, end, err := store.ParseInvoicePeriod(period)
	if err != nil {
		return store.Invoice{}, err
	}
	perMinor, err := MicrosPerMinor(prices.Currency)
	if err != nil {
		return store.Invoice{}, err
	}
	byDim := map[store.UsageDimension]store.Price{}
	for _, p := range prices.Prices {
		byDim[p.Dimension] = p
	}
	inv := store.Invoice{TenantID: tenantID, Period: period, PeriodStart: start, PeriodEnd: end, Status: store.InvoiceDraft,
		Plan: plan, Currency: prices.Currency, UpdatedAt: now}
	total := new(big.Int)
	units := Units()
	for _, d := range store.UsageDimensions() {
		p, ok := byDim[d]
		if !ok {
			p = store.Price{Dimension: d, Unit: units[d].Name, UnitSize: units[d].Size}
		}
		q := sums[d]
		if q == nil {
			q = new(big.Int)
		}
		if !q.IsInt64() || q.Sign() < 0 {
			return store.Invoice{}, fmt.Errorf("%s of tenant %s in %s: %w", d, tenantID, period, ErrOverflow)
		}
		quantity := q.Int64()
		free := min(quantity, p.FreeQuantity)
		billable := quantity - free
		amount, err := LineAmount(big.NewInt(billable), p, perMinor)
		if err != nil {
			return store.Invoice{}, fmt.Errorf("%s of tenant %s in %s: %w", d, tenantID, period, err)
		}
		inv.Lines = append(inv.Lines, store.InvoiceLine{Dimension: d, Quantity: quantity, FreeQuantity: free,
			BillableQuantity: billable, Price: p, AmountMinor: amount})
		total.Add(total, big.NewInt(amount))
	}
	if !total.IsInt64() {
		return store.Invoice{}, fmt.Errorf("total of tenant %s in %s: %w", tenantID, period, ErrOverflow)
	}
	inv.TotalMinor = total.Int64()
	return inv, nil
}
