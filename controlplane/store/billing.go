package store

import (
	"context"
	"fmt"
	"time"
)

// Plan prices and invoices (issue 17). The store keeps what billing
// decides: the prices an operator set (billing/ holds the defaults they
// override) and the invoices computed from the usage rows. A finalized
// invoice is immutable: no call changes its row again.

// Price is what one billing unit of a dimension costs on a plan (the
// proto's Price): UnitSize base units make one Unit, which costs
// UnitPriceMicros millionths of the currency; FreeQuantity base units a
// month are free.
type Price struct {
	Dimension       UsageDimension `json:"dimension"`
	Unit            string         `json:"unit"`
	UnitSize        int64          `json:"unit_size"`
	UnitPriceMicros int64          `json:"unit_price_micros"`
	FreeQuantity    int64          `json:"free_quantity"`
}

// PlanPrices are the prices an operator stored for one plan.
type PlanPrices struct {
	Plan     string
	Currency string  // ISO 4217, e.g. "USD"
	Prices   []Price // in dimension order, only the dimensions set
	// UpdatedAt is when a price of the plan was last set.
	UpdatedAt time.Time
}

// CheckPlanPrices validates prices about to be stored: a plan name, a
// three-letter currency, known dimensions each named once, a unit, a
// positive unit size, no negative price or allowance. Whether the plan
// exists and the unit is the dimension's is billing's to decide.
func CheckPlanPrices(p PlanPrices) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("invalid plan prices: %s", fmt.Sprintf(format, args...))
	}
	if p.Plan == "" || !PlainText(p.Plan) || len(p.Plan) > 64 {
		return bad("plan %q", p.Plan)
	}
	if len(p.Currency) != 3 {
		return bad("currency %q", p.Currency)
	}
	seen := map[UsageDimension]bool{}
	for _, pr := range p.Prices {
		switch {
		case !pr.Dimension.Valid():
			return bad("dimension %q", pr.Dimension)
		case seen[pr.Dimension]:
			return bad("dimension %s named twice", pr.Dimension)
		case pr.Unit == "" || !PlainText(pr.Unit) || len(pr.Unit) > 64:
			return bad("unit %q of %s", pr.Unit, pr.Dimension)
		case pr.UnitSize <= 0:
			return bad("unit size %d of %s", pr.UnitSize, pr.Dimension)
		case pr.UnitPriceMicros < 0 || pr.FreeQuantity < 0:
			return bad("negative price or allowance of %s", pr.Dimension)
		}
		seen[pr.Dimension] = true
	}
	return nil
}

// InvoiceStatus is where an invoice is.
type InvoiceStatus string

// The invoice statuses.
const (
	// InvoiceDraft: the period is open (or not yet closed); lines follow usage.
	InvoiceDraft InvoiceStatus = "draft"
	// InvoiceFinalized: closed and immutable.
	InvoiceFinalized InvoiceStatus = "finalized"
)

// InvoiceLine is one dimension's line of an invoice (the proto's
// InvoiceLine); amounts are in minor units of the invoice's currency.
type InvoiceLine struct {
	Dimension        UsageDimension `json:"dimension"`
	Quantity         int64          `json:"quantity"`
	FreeQuantity     int64          `json:"free_quantity"`
	BillableQuantity int64          `json:"billable_quantity"`
	Price            Price          `json:"price"`
	AmountMinor      int64          `json:"amount_minor"`
}

// Invoice is one tenant's bill for one calendar month (UTC).
type Invoice struct {
	ID          string
	TenantID    string
	Period      string    // "2026-11"
	PeriodStart time.Time // first instant of the month, UTC
	PeriodEnd   time.Time // exclusive
	Status      InvoiceStatus
	Plan        string
	Currency    string
	Lines       []InvoiceLine
	TotalMinor  int64
	UpdatedAt   time.Time // when the lines were last computed
	FinalizedAt time.Time // zero for a draft
}

// InvoicePeriod returns the period name ("2026-11") and bounds of the UTC
// calendar month holding t.
func InvoicePeriod(t time.Time) (period string, start, end time.Time) {
	t = t.UTC()
	start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return start.Format("2006-01"), start, start.AddDate(0, 1, 0)
}

// ParseInvoicePeriod returns the bounds of a period name ("2026-11").
func ParseInvoicePeriod(period string) (start, end time.Time, err error) {
	start, err = time.Parse("2006-01", period)
	if err != nil || start.Format("2006-01") != period {
		return time.Time{}, time.Time{}, fmt.Errorf("invalid invoice period %q (want YYYY-MM)", period)
	}
	return start, start.AddDate(0, 1, 0), nil
}

// CheckInvoice validates an invoice about to be stored and returns it with
// canonical ids (a new id when empty; the store keeps the id of an invoice
// it has for the tenant and period already), times in UTC milliseconds,
// and bounds matching the period. The lines must have known dimensions,
// each once, non-negative figures, billable = quantity − free (free ≤
// quantity), and the total must be their sum.
func CheckInvoice(inv Invoice) (Invoice, error) {
	bad := func(format string, args ...any) (Invoice, error) {
		return Invoice{}, fmt.Errorf("invalid invoice: %s", fmt.Sprintf(format, args...))
	}
	var err error
	if inv.ID == "" {
		inv.ID = NewID()
	} else if inv.ID, err = CheckNewID("invoice", inv.ID); err != nil {
		return Invoice{}, err
	}
	if inv.TenantID, err = CheckNewID("tenant", inv.TenantID); err != nil {
		return Invoice{}, err
	}
	start, end, err := ParseInvoicePeriod(inv.Period)
	if err != nil {
		return Invoice{}, err
	}
	if !inv.PeriodStart.Equal(start) || !inv.PeriodEnd.Equal(end) {
		return bad("bounds %v–%v are not period %s's", inv.PeriodStart, inv.PeriodEnd, inv.Period)
	}
	inv.PeriodStart, inv.PeriodEnd = start, end
	if inv.Plan == "" || !PlainText(inv.Plan) || len(inv.Currency) != 3 {
		return bad("plan %q, currency %q", inv.Plan, inv.Currency)
	}
	var sum int64
	seen := map[UsageDimension]bool{}
	for _, l := range inv.Lines {
		switch {
		case !l.Dimension.Valid() || seen[l.Dimension]:
			return bad("line dimension %q unknown or twice", l.Dimension)
		case l.Quantity < 0 || l.FreeQuantity < 0 || l.FreeQuantity > l.Quantity || l.BillableQuantity != l.Quantity-l.FreeQuantity:
			return bad("line %s: quantity %d, free %d, billable %d", l.Dimension, l.Quantity, l.FreeQuantity, l.BillableQuantity)
		case l.AmountMinor < 0:
			return bad("line %s: negative amount", l.Dimension)
		}
		seen[l.Dimension] = true
		if sum+l.AmountMinor < sum {
			return bad("total overflows")
		}
		sum += l.AmountMinor
	}
	if sum != inv.TotalMinor {
		return bad("total %d is not the lines' sum %d", inv.TotalMinor, sum)
	}
	if inv.UpdatedAt.IsZero() {
		return bad("no update time")
	}
	inv.UpdatedAt = inv.UpdatedAt.UTC().Truncate(time.Millisecond)
	inv.FinalizedAt = inv.FinalizedAt.UTC().Truncate(time.Millisecond)
	return inv, nil
}

// InvoiceQuery pages ListInvoices.
type InvoiceQuery struct {
	// Limit: at most this many (≤ 0: 24, capped at 100).
	Limit int
	// BeforePeriod: only periods before it ("" = from the newest): the
	// last period of the previous page.
	BeforePeriod string
}

// BillingStore keeps plan prices and invoices.
type BillingStore interface {
	// GetPlanPrices returns the prices operators stored, one PlanPrices per plan that has
	// any, ordered by plan, each one's prices in dimension order.
	GetPlanPrices(ctx context.Context) ([]PlanPrices, error)
	// SetPlanPrices stores p.Prices for p.Plan (CheckPlanPrices validates them), replacing
	// those of the same dimensions and keeping the others; the plan's currency becomes
	// p.Currency. Returns the plan's stored prices afterwards.
	SetPlanPrices(ctx context.Context, p PlanPrices, at time.Time) (PlanPrices, error)

	// UpsertDraftInvoice stores inv (CheckInvoice validates it; Status and FinalizedAt are
	// ignored) as the draft of its tenant and period, creating it or replacing the draft's
	// plan, currency, lines, total and UpdatedAt (the draft keeps its id). The period's
	// invoice finalized already → ErrConflict, nothing changed. Returns the stored draft.
	UpsertDraftInvoice(ctx context.Context, inv Invoice) (Invoice, error)
	// FinalizeInvoice stores inv (CheckInvoice; FinalizedAt must be set) as its tenant's
	// finalized invoice of its period, replacing the draft (keeping its id) or creating it,
	// and in the same transaction, when payload is not nil, enqueues for every webhook of the
	// tenant a delivery (AlertID "", AlertState EventInvoiceFinalized) of payload(stored).
	// When the period's invoice is finalized already it changes nothing, enqueues nothing,
	// and returns the stored invoice with finalized false: a period is finalized once, so
	// its deliveries are enqueued once. An unknown tenant → ErrNotFound.
	FinalizeInvoice(ctx context.Context, inv Invoice, payload func(Invoice) ([]byte, error)) (stored Invoice, finalized bool, err error)
	// GetInvoice returns the tenant's invoice id → ErrNotFound (also another tenant's).
	GetInvoice(ctx context.Context, tenantID, id string) (Invoice, error)
	// GetInvoiceByPeriod returns the tenant's invoice of period ("2026-11") → ErrNotFound.
	GetInvoiceByPeriod(ctx context.Context, tenantID, period string) (Invoice, error)
	// ListInvoices returns the tenant's invoices newest period first (see InvoiceQuery).
	ListInvoices(ctx context.Context, tenantID string, q InvoiceQuery) ([]Invoice, error)
	// ListDraftInvoices returns every tenant's drafts whose period ended at or before end,
	// ordered by period and tenant id: the billing job's finalization backlog.
	ListDraftInvoices(ctx context.Context, end time.Time) ([]Invoice, error)
}
