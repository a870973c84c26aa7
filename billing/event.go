package billing

import (
	"encoding/json"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Event is the JSON body a webhook receives when an invoice is finalized
// (signed and retried as alert deliveries are; controlplane/alerting).
type Event struct {
	Type    string         `json:"type"` // "invoice.finalized"
	Invoice InvoiceSummary `json:"invoice"`
}

// InvoiceSummary is a finalized invoice as a webhook receives it: amounts
// in minor units of Currency, quantities in base units.
type InvoiceSummary struct {
	ID          string        `json:"id"`
	TenantID    string        `json:"tenant_id"`
	Period      string        `json:"period"`
	PeriodStart time.Time     `json:"period_start"`
	PeriodEnd   time.Time     `json:"period_end"`
	Status      string        `json:"status"`
	Plan        string        `json:"plan"`
	Currency    string        `json:"currency"`
	TotalMinor  int64         `json:"total_minor_units"`
	FinalizedAt time.Time     `json:"finalized_at"`
	Lines       []LineSummary `json:"lines"`
}

// LineSummary is one line of an InvoiceSummary.
type LineSummary struct {
	Dimension        string `json:"dimension"`
	Quantity         int64  `json:"quantity"`
	FreeQuantity     int64  `json:"free_quantity"`
	BillableQuantity int64  `json:"billable_quantity"`
	Unit             string `json:"unit"`
	UnitSize         int64  `json:"unit_size"`
	UnitPriceMicros  int64  `json:"unit_price_micros"`
	AmountMinor      int64  `json:"amount_minor_units"`
}

// EventType is the type of the webhook event of a finalized invoice.
const EventType = string(store.EventInvoiceFinalized)

// EventPayload returns the webhook body announcing inv's finalization: the
// payload FinalizeInvoice enqueues.
func EventPayload(inv store.Invoice) ([]byte, error) {
	s := InvoiceSummary{ID: inv.ID, TenantID: inv.TenantID, Period: inv.Period, PeriodStart: inv.PeriodStart, PeriodEnd: inv.PeriodEnd,
		Status: string(inv.Status), Plan: inv.Plan, Currency: inv.Currency, TotalMinor: inv.TotalMinor, FinalizedAt: inv.FinalizedAt,
		Lines: []LineSummary{}}
	for _, l := range inv.Lines {
		s.Lines = append(s.Lines, LineSummary{Dimension: string(l.Dimension), Quantity: l.Quantity, FreeQuantity: l.FreeQuantity,
			BillableQuantity: l.BillableQuantity, Unit: l.Price.Unit, UnitSize: l.Price.UnitSize, UnitPriceMicros: l.Price.UnitPriceMicros,
			AmountMinor: l.AmountMinor})
	}
	return json.Marshal(Event{Type: EventType, Invoice: s})
}
