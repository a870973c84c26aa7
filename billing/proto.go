package billing

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Conversions between the store's billing types and the API's messages.

// DimensionProto returns d's proto enum value (UNSPECIFIED for an unknown d).
func DimensionProto(d store.UsageDimension) sluicev1.UsageDimension {
	return sluicev1.UsageDimension(d.Order())
}

// DimensionFromProto returns the store's name of d, or false for
// UNSPECIFIED and values this build does not know.
func DimensionFromProto(d sluicev1.UsageDimension) (store.UsageDimension, bool) {
	all := store.UsageDimensions()
	if d < 1 || int(d) > len(all) {
		return "", false
	}
	return all[d-1], true
}

// PriceProto returns p as the API's Price.
func PriceProto(p store.Price) *sluicev1.Price {
	return &sluicev1.Price{Dimension: DimensionProto(p.Dimension), Unit: p.Unit, UnitSize: p.UnitSize,
		UnitPriceMicros: p.UnitPriceMicros, FreeQuantity: p.FreeQuantity}
}

// PriceFromProto returns the API's Price as the store's, or false for an
// unknown dimension (CheckPrices validates the rest).
func PriceFromProto(p *sluicev1.Price) (store.Price, bool) {
	d, ok := DimensionFromProto(p.GetDimension())
	return store.Price{Dimension: d, Unit: p.GetUnit(), UnitSize: p.GetUnitSize(), UnitPriceMicros: p.GetUnitPriceMicros(),
		FreeQuantity: p.GetFreeQuantity()}, ok
}

// PlanPricesProto returns p as the API's PlanPrices.
func PlanPricesProto(p store.PlanPrices) *sluicev1.PlanPrices {
	out := &sluicev1.PlanPrices{Plan: p.Plan, CurrencyCode: p.Currency}
	for _, pr := range p.Prices {
		out.Prices = append(out.Prices, PriceProto(pr))
	}
	return out
}

// InvoiceProto returns inv as the API's Invoice.
func InvoiceProto(inv store.Invoice) *sluicev1.Invoice {
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	status := sluicev1.InvoiceStatus_INVOICE_STATUS_DRAFT
	if inv.Status == store.InvoiceFinalized {
		status = sluicev1.InvoiceStatus_INVOICE_STATUS_FINALIZED
	}
	out := &sluicev1.Invoice{Id: inv.ID, TenantId: inv.TenantID, Period: inv.Period, PeriodStart: ts(inv.PeriodStart),
		PeriodEnd: ts(inv.PeriodEnd), Status: status, Plan: inv.Plan,
		Total:      &sluicev1.Money{CurrencyCode: inv.Currency, MinorUnits: inv.TotalMinor},
		UpdateTime: ts(inv.UpdatedAt), FinalizeTime: ts(inv.FinalizedAt)}
	for _, l := range inv.Lines {
		out.Lines = append(out.Lines, &sluicev1.InvoiceLine{Dimension: DimensionProto(l.Dimension), Quantity: l.Quantity,
			FreeQuantity: l.FreeQuantity, BillableQuantity: l.BillableQuantity, Price: PriceProto(l.Price),
			Amount: &sluicev1.Money{CurrencyCode: inv.Currency, MinorUnits: l.AmountMinor}})
	}
	return out
}
