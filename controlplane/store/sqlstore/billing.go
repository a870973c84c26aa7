package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// ---- prices ----

// GetPlanPrices implements store.BillingStore.
func (s *Store) GetPlanPrices(ctx context.Context) ([]store.PlanPrices, error) {
	return s.readPrices(ctx, s.usageQuery, "")
}

func (s *Store) readPrices(ctx context.Context, query func(context.Context, string, ...any) (*sql.Rows, error), plan string) ([]store.PlanPrices, error) {
	q := `SELECT plan, dimension, currency, unit, unit_size, unit_price_micros, free_quantity, updated_at FROM plan_prices`
	var args []any
	if plan != "" {
		q += ` WHERE plan = $1`
		args = append(args, plan)
	}
	rows, err := query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("get plan prices: %w", err)
	}
	defer rows.Close()
	byPlan := map[string]*store.PlanPrices{}
	for rows.Next() {
		var (
			p       store.Price
			name    string
			dim     string
			cur     string
			updated int64
		)
		if err := rows.Scan(&name, &dim, &cur, &p.Unit, &p.UnitSize, &p.UnitPriceMicros, &p.FreeQuantity, &updated); err != nil {
			return nil, fmt.Errorf("get plan prices: %w", err)
		}
		p.Dimension = store.UsageDimension(dim)
		pp := byPlan[name]
		if pp == nil {
			pp = &store.PlanPrices{Plan: name, Currency: cur}
			byPlan[name] = pp
		}
		pp.Prices = append(pp.Prices, p)
		if t := usageTime(updated); t.After(pp.UpdatedAt) {
			pp.UpdatedAt = t
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get plan prices: %w", err)
	}
	var out []store.PlanPrices
	for _, pp := range byPlan {
		slices.SortFunc(pp.Prices, func(a, b store.Price) int { return cmp.Compare(a.Dimension.Order(), b.Dimension.Order()) })
		out = append(out, *pp)
	}
	slices.SortFunc(out, func(a, b store.PlanPrices) int { return strings.Compare(a.Plan, b.Plan) })
	return out, nil
}

// SetPlanPrices implements store.BillingStore.
func (s *Store) SetPlanPrices(ctx context.Context, p store.PlanPrices, at time.Time) (store.PlanPrices, error) {
	if err := store.CheckPlanPrices(p); err != nil {
		return store.PlanPrices{}, err
	}
	atMs := at.UTC().Truncate(time.Millisecond).UnixMilli()
	var out store.PlanPrices
	err := s.usageInTx(ctx, "set plan prices", func(tx usageTx) error {
		for _, pr := range p.Prices {
			if _, err := tx.exec(ctx, `INSERT INTO plan_prices (plan, dimension, currency, unit, unit_size, unit_price_micros, free_quantity, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
				ON CONFLICT (plan, dimension) DO UPDATE SET currency = excluded.currency, unit = excluded.unit,
					unit_size = excluded.unit_size, unit_price_micros = excluded.unit_price_micros,
					free_quantity = excluded.free_quantity, updated_at = excluded.updated_at`,
				p.Plan, string(pr.Dimension), p.Currency, pr.Unit, pr.UnitSize, pr.UnitPriceMicros, pr.FreeQuantity, atMs); err != nil {
				return fmt.Errorf("set plan prices: %w", err)
			}
		}
		if _, err := tx.exec(ctx, `UPDATE plan_prices SET currency = $1 WHERE plan = $2`, p.Currency, p.Plan); err != nil {
			return fmt.Errorf("set plan prices: %w", err)
		}
		all, err := s.readPrices(ctx, tx.query, p.Plan)
		if err != nil {
			return err
		}
		if len(all) == 1 {
			out = all[0]
		} else {
			out = store.PlanPrices{Plan: p.Plan, Currency: p.Currency}
		}
		return nil
	})
	if err != nil {
		return store.PlanPrices{}, err
	}
	return out, nil
}

// ---- invoices ----

const invoiceColumns = `id, tenant_id, period, period_start, period_end, status, plan, currency, lines, total_minor, updated_at, finalized_at`

func scanInvoice(row Scanner) (store.Invoice, error) {
	var (
		inv                 store.Invoice
		status, lines       string
		start, end, updated int64
		finalized           sql.NullInt64
	)
	if err := row.Scan(&inv.ID, &inv.TenantID, &inv.Period, &start, &end, &status, &inv.Plan, &inv.Currency, &lines,
		&inv.TotalMinor, &updated, &finalized); err != nil {
		return store.Invoice{}, err
	}
	if err := json.Unmarshal([]byte(lines), &inv.Lines); err != nil {
		return store.Invoice{}, fmt.Errorf("invoice %s: lines: %w", inv.ID, err)
	}
	if len(inv.Lines) == 0 {
		inv.Lines = nil
	}
	inv.Status = store.InvoiceStatus(status)
	inv.PeriodStart, inv.PeriodEnd, inv.UpdatedAt = usageTime(start), usageTime(end), usageTime(updated)
	if finalized.Valid {
		inv.FinalizedAt = usageTime(finalized.Int64)
	}
	return inv, nil
}

func linesJSON(lines []store.InvoiceLine) (string, error) {
	if lines == nil {
		lines = []store.InvoiceLine{}
	}
	b, err := json.Marshal(lines)
	return string(b), err
}

// tenantExists reports whether the tenant is stored (tenants' ids are uuid
// on Postgres: id is canonical, so the comparison converts).
func invoiceTenantExists(ctx context.Context, tx usageTx, id string) error {
	var one int
	switch err := tx.row(ctx, `SELECT 1 FROM tenants WHERE id = $1`, id).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("tenant %s: %w", id, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("read tenant: %w", err)
	}
	return nil
}

// putInvoice writes inv as its tenant's invoice of its period in status
// `to`, replacing a draft (keeping its id) or creating the row: the
// invoice as stored after, and whether it was written; not written: the
// period's invoice is finalized (returned as stored).
func putInvoice(ctx context.Context, tx usageTx, inv store.Invoice, to store.InvoiceStatus) (store.Invoice, bool, error) {
	lines, err := linesJSON(inv.Lines)
	if err != nil {
		return store.Invoice{}, false, fmt.Errorf("invoice lines: %w", err)
	}
	var finalized any
	if to == store.InvoiceFinalized {
		finalized = inv.FinalizedAt.UnixMilli()
	}
	for range usageCASRetries {
		n, err := tx.exec(ctx, `UPDATE invoices SET status = $1, plan = $2, currency = $3, lines = $4, total_minor = $5, updated_at = $6, finalized_at = $7
			WHERE tenant_id = $8 AND period = $9 AND status = 'draft'`,
			string(to), inv.Plan, inv.Currency, lines, inv.TotalMinor, inv.UpdatedAt.UnixMilli(), finalized, inv.TenantID, inv.Period)
		if err != nil {
			return store.Invoice{}, false, fmt.Errorf("write invoice: %w", err)
		}
		if n == 0 {
			n, err = tx.exec(ctx, `INSERT INTO invoices (`+invoiceColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT DO NOTHING`,
				inv.ID, inv.TenantID, inv.Period, inv.PeriodStart.UnixMilli(), inv.PeriodEnd.UnixMilli(), string(to), inv.Plan, inv.Currency,
				lines, inv.TotalMinor, inv.UpdatedAt.UnixMilli(), finalized)
			if err != nil {
				return store.Invoice{}, false, fmt.Errorf("write invoice: %w", err)
			}
		}
		stored, err := scanInvoice(tx.row(ctx, `SELECT `+invoiceColumns+` FROM invoices WHERE tenant_id = $1 AND period = $2`, inv.TenantID, inv.Period))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			// The insert collided on the id alone.
			return store.Invoice{}, false, &store.AlreadyExistsError{What: "invoice id"}
		case err != nil:
			return store.Invoice{}, false, fmt.Errorf("read invoice: %w", err)
		case n == 1:
			return stored, true, nil
		case stored.Status == store.InvoiceFinalized:
			return stored, false, nil
		}
		// A draft another writer inserted meanwhile: update it.
	}
	return store.Invoice{}, false, fmt.Errorf("write invoice of tenant %s for %s: %d concurrent changes", inv.TenantID, inv.Period, usageCASRetries)
}

// UpsertDraftInvoice implements store.BillingStore.
func (s *Store) UpsertDraftInvoice(ctx context.Context, inv store.Invoice) (store.Invoice, error) {
	inv.FinalizedAt = time.Time{}
	inv, err := store.CheckInvoice(inv)
	if err != nil {
		return store.Invoice{}, err
	}
	var out store.Invoice
	err = s.usageInTx(ctx, "upsert draft invoice", func(tx usageTx) error {
		if err := invoiceTenantExists(ctx, tx, inv.TenantID); err != nil {
			return err
		}
		stored, written, err := putInvoice(ctx, tx, inv, store.InvoiceDraft)
		if err != nil {
			return err
		}
		if !written {
			return fmt.Errorf("invoice %s of tenant %s for %s is finalized: %w", stored.ID, inv.TenantID, inv.Period, store.ErrConflict)
		}
		out = stored
		return nil
	})
	if err != nil {
		return store.Invoice{}, err
	}
	return out, nil
}

// FinalizeInvoice implements store.BillingStore.
func (s *Store) FinalizeInvoice(ctx context.Context, inv store.Invoice, payload func(store.Invoice) ([]byte, error)) (store.Invoice, bool, error) {
	if inv.FinalizedAt.IsZero() {
		return store.Invoice{}, false, fmt.Errorf("invalid invoice: no finalization time")
	}
	inv, err := store.CheckInvoice(inv)
	if err != nil {
		return store.Invoice{}, false, err
	}
	var (
		out       store.Invoice
		finalized bool
	)
	err = s.usageInTx(ctx, "finalize invoice", func(tx usageTx) error {
		if err := invoiceTenantExists(ctx, tx, inv.TenantID); err != nil {
			return err
		}
		stored, written, err := putInvoice(ctx, tx, inv, store.InvoiceFinalized)
		if err != nil {
			return err
		}
		out, finalized = stored, written
		if !written || payload == nil {
			return nil
		}
		body, err := payload(stored)
		if err != nil {
			return fmt.Errorf("invoice %s payload: %w", stored.ID, err)
		}
		if len(body) == 0 {
			return fmt.Errorf("invoice %s payload: empty", stored.ID)
		}
		rows, err := tx.query(ctx, `SELECT CAST(id AS TEXT) FROM webhooks WHERE tenant_id = $1 ORDER BY created_at, id`, inv.TenantID)
		if err != nil {
			return fmt.Errorf("finalize invoice: webhooks: %w", err)
		}
		hooks, err := usageStrings(rows)
		if err != nil {
			return fmt.Errorf("finalize invoice: webhooks: %w", err)
		}
		for _, h := range hooks {
			if _, err := tx.exec(ctx, `INSERT INTO webhook_deliveries (id, tenant_id, webhook_id, alert_id, alert_state, payload, status,
				attempts, next_attempt_at, lease_token, lease_expires_at, last_error, created_at, delivered_at)
				VALUES ($1, $2, $3, NULL, $4, $5, $6, 0, $7, NULL, NULL, '', $8, NULL)`,
				store.NewID(), inv.TenantID, h, string(store.EventInvoiceFinalized), body, string(store.DeliveryPending),
				s.db.Time(stored.FinalizedAt), s.db.Time(stored.FinalizedAt)); err != nil {
				return fmt.Errorf("finalize invoice: enqueue delivery: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return store.Invoice{}, false, err
	}
	return out, finalized, nil
}

// GetInvoice implements store.BillingStore.
func (s *Store) GetInvoice(ctx context.Context, tenantID, id string) (store.Invoice, error) {
	t, ok1 := store.CanonicalID(tenantID)
	i, ok2 := store.CanonicalID(id)
	if !ok1 || !ok2 {
		return store.Invoice{}, store.ErrNotFound
	}
	return s.getInvoice(ctx, `id = $1 AND tenant_id = $2`, i, t)
}

// GetInvoiceByPeriod implements store.BillingStore.
func (s *Store) GetInvoiceByPeriod(ctx context.Context, tenantID, period string) (store.Invoice, error) {
	t, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Invoice{}, store.ErrNotFound
	}
	if _, _, err := store.ParseInvoicePeriod(period); err != nil {
		return store.Invoice{}, store.ErrNotFound
	}
	return s.getInvoice(ctx, `tenant_id = $1 AND period = $2`, t, period)
}

func (s *Store) getInvoice(ctx context.Context, where string, args ...any) (store.Invoice, error) {
	inv, err := scanInvoice(s.usageRow(ctx, `SELECT `+invoiceColumns+` FROM invoices WHERE `+where, args...))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Invoice{}, store.ErrNotFound
	case err != nil:
		return store.Invoice{}, fmt.Errorf("get invoice: %w", err)
	}
	return inv, nil
}

// ListInvoices implements store.BillingStore.
func (s *Store) ListInvoices(ctx context.Context, tenantID string, q store.InvoiceQuery) ([]store.Invoice, error) {
	t, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 24
	}
	limit = min(limit, 100)
	before := int64(1<<63 - 1)
	if q.BeforePeriod != "" {
		start, _, err := store.ParseInvoicePeriod(q.BeforePeriod)
		if err != nil {
			return nil, err
		}
		before = start.UnixMilli()
	}
	return s.listInvoices(ctx, `SELECT `+invoiceColumns+` FROM invoices WHERE tenant_id = $1 AND period_start < $2
		ORDER BY period_start DESC LIMIT $3`, t, before, limit)
}

// ListDraftInvoices implements store.BillingStore.
func (s *Store) ListDraftInvoices(ctx context.Context, end time.Time) ([]store.Invoice, error) {
	out, err := s.listInvoices(ctx, `SELECT `+invoiceColumns+` FROM invoices WHERE status = 'draft' AND period_end <= $1`, end.UnixMilli())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b store.Invoice) int {
		return cmp.Or(a.PeriodStart.Compare(b.PeriodStart), strings.Compare(a.TenantID, b.TenantID))
	})
	return out, nil
}

func (s *Store) listInvoices(ctx context.Context, query string, args ...any) ([]store.Invoice, error) {
	rows, err := s.usageQuery(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list invoices: %w", err)
	}
	defer rows.Close()
	var out []store.Invoice
	for rows.Next() {
		inv, err := scanInvoice(rows)
		if err != nil {
			return nil, fmt.Errorf("list invoices: %w", err)
		}
		out = append(out, inv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list invoices: %w", err)
	}
	return out, nil
}
