package sqlite

import (
	"context"
	"errors"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// The usage and billing store is written once, in controlplane/store/sqlstore;
// until it is wired in, this driver answers errNoUsage.
var errNoUsage = errors.New("usage store: not implemented by this driver yet")

func (s *Store) ApplyUsageReport(context.Context, store.UsageReport) (store.UsageReportResult, error) {
	return store.UsageReportResult{}, errNoUsage
}

func (s *Store) AdvanceMeter(context.Context, string, time.Time, func(from, to time.Time) ([]store.UsageAmount, error)) (store.MeterResult, error) {
	return store.MeterResult{}, errNoUsage
}

func (s *Store) ListUsage(context.Context, string, time.Time, time.Time) ([]store.UsageRow, error) {
	return nil, errNoUsage
}

func (s *Store) ListUsageTenants(context.Context, time.Time, time.Time) ([]string, error) {
	return nil, errNoUsage
}

func (s *Store) PutQuotaReports(context.Context, int32, time.Time, []store.QuotaReport) error {
	return errNoUsage
}

func (s *Store) ListQuotaReports(context.Context, []string, time.Time) ([]store.QuotaReport, error) {
	return nil, errNoUsage
}

func (s *Store) ColdStorageBytes(context.Context) (map[string]int64, error) { return nil, errNoUsage }

func (s *Store) PartitionCounts(context.Context) (map[string]int64, error) { return nil, errNoUsage }

func (s *Store) GetPlanPrices(context.Context) ([]store.PlanPrices, error) { return nil, errNoUsage }

func (s *Store) SetPlanPrices(context.Context, store.PlanPrices, time.Time) (store.PlanPrices, error) {
	return store.PlanPrices{}, errNoUsage
}

func (s *Store) UpsertDraftInvoice(context.Context, store.Invoice) (store.Invoice, error) {
	return store.Invoice{}, errNoUsage
}

func (s *Store) FinalizeInvoice(context.Context, store.Invoice, func(store.Invoice) ([]byte, error)) (store.Invoice, bool, error) {
	return store.Invoice{}, false, errNoUsage
}

func (s *Store) GetInvoice(context.Context, string, string) (store.Invoice, error) {
	return store.Invoice{}, errNoUsage
}

func (s *Store) GetInvoiceByPeriod(context.Context, string, string) (store.Invoice, error) {
	return store.Invoice{}, errNoUsage
}

func (s *Store) ListInvoices(context.Context, string, store.InvoiceQuery) ([]store.Invoice, error) {
	return nil, errNoUsage
}

func (s *Store) ListDraftInvoices(context.Context, time.Time) ([]store.Invoice, error) {
	return nil, errNoUsage
}
