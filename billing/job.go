package billing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"slices"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants/system"
)

// DefaultGrace is how long after a month ends its invoices stay drafts:
// the control plane's interval meters add the month's last minutes at their
// next advance, after the month has ended.
const DefaultGrace = time.Hour

// MaxGrace bounds JobConfig.Grace.
const MaxGrace = 7 * 24 * time.Hour

// JobConfig configures a Job.
type JobConfig struct {
	// Grace: a month is finalized once it ended this long ago (≤ 0:
	// DefaultGrace; at most MaxGrace).
	Grace time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
	// Metrics: nil records none.
	Metrics *Metrics
}

// Job keeps invoices current; see the package doc. Every control-plane
// replica may run it at once: drafts are recomputed from the same rows, and
// the store finalizes a period once.
type Job struct {
	st  store.Store
	cfg JobConfig
}

// NewJob returns the job on st.
func NewJob(st store.Store, cfg JobConfig) *Job {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	cfg.Grace = min(cfg.Grace, MaxGrace)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Job{st: st, cfg: cfg}
}

// RunResult is what one run did.
type RunResult struct {
	Drafts    int // drafts computed and stored
	Finalized int // invoices finalized by this run
}

type tenantPeriod struct{ tenant, period string }

// RunOnce brings invoices up to now: it recomputes the draft of every
// tenant with usage in the current month (and in the previous one while it
// ended less than Grace ago), and finalizes every month that ended Grace
// ago or more and has a draft or usage, enqueueing the invoice.finalized
// deliveries. The system tenant, and usage of a tenant that does not
// exist, get no invoice. One tenant's failure does not stop the others:
// the errors are joined.
func (j *Job) RunOnce(ctx context.Context, now time.Time) (RunResult, error) {
	began := time.Now()
	res, err := j.run(ctx, now.UTC())
	j.cfg.Metrics.record(began, time.Now(), res, err)
	if err != nil {
		j.cfg.Logger.Warn("billing: run", "err", err, "drafts", res.Drafts, "finalized", res.Finalized)
	}
	return res, err
}

func (j *Job) run(ctx context.Context, now time.Time) (RunResult, error) {
	var res RunResult
	prices, err := Prices(ctx, j.st)
	if err != nil {
		return res, err
	}
	byPlan := map[string]store.PlanPrices{}
	for _, p := range prices {
		byPlan[p.Plan] = p
	}
	cur, curStart, _ := store.InvoicePeriod(now)
	prev, _, prevEnd := store.InvoicePeriod(curStart.Add(-time.Hour))
	prevClosed := !now.Before(prevEnd.Add(j.cfg.Grace))

	// Every tenant's sums of a period, read once per run.
	totals := map[string]map[string]map[store.UsageDimension]*big.Int{}
	totalsOf := func(period string) (map[string]map[store.UsageDimension]*big.Int, error) {
		if t, ok := totals[period]; ok {
			return t, nil
		}
		start, end, err := store.ParseInvoicePeriod(period)
		if err != nil {
			return nil, err
		}
		all, err := j.st.UsageTotals(ctx, start, end)
		if err != nil {
			return nil, fmt.Errorf("usage of %s: %w", period, err)
		}
		t := map[string]map[store.UsageDimension]*big.Int{}
		for _, u := range all {
			if u.TenantID == system.TenantID {
				continue // Sluice's own internal topics: nobody's bill
			}
			if t[u.TenantID] == nil {
				t[u.TenantID] = map[store.UsageDimension]*big.Int{}
			}
			t[u.TenantID][u.Dimension] = u.Amount
		}
		totals[period] = t
		return t, nil
	}
	compute := func(tenantID, period string) (store.Invoice, error) {
		t, err := totalsOf(period)
		if err != nil {
			return store.Invoice{}, err
		}
		return j.compute(ctx, byPlan, tenantID, period, t[tenantID], now)
	}
	tenantsOf := func(period string) ([]string, error) {
		t, err := totalsOf(period)
		if err != nil {
			return nil, err
		}
		ids := make([]string, 0, len(t))
		for id := range t {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids, nil
	}

	var errs []error
	open := []string{cur}
	if !prevClosed {
		open = append(open, prev)
	}
	for _, period := range open {
		ids, err := tenantsOf(period)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, id := range ids {
			inv, err := compute(id, period)
			if err == nil {
				_, err = j.st.UpsertDraftInvoice(ctx, inv)
			}
			switch {
			case errors.Is(err, store.ErrConflict): // finalized already (a replica with a clock ahead)
			case errors.Is(err, store.ErrNotFound):
				j.cfg.Logger.Debug("billing: usage of a tenant that does not exist", "tenant", id, "period", period)
			case err != nil:
				errs = append(errs, fmt.Errorf("draft of tenant %s for %s: %w", id, period, err))
			default:
				res.Drafts++
			}
		}
	}

	// Finalization: every draft of an ended month, and every tenant with
	// usage in the previous month once it is closed.
	due := map[tenantPeriod]bool{}
	drafts, err := j.st.ListDraftInvoices(ctx, now.Add(-j.cfg.Grace))
	if err != nil {
		errs = append(errs, fmt.Errorf("drafts to finalize: %w", err))
	}
	for _, d := range drafts {
		due[tenantPeriod{d.TenantID, d.Period}] = true
	}
	if prevClosed {
		ids, err := tenantsOf(prev)
		if err != nil {
			errs = append(errs, err)
		}
		for _, id := range ids {
			k := tenantPeriod{id, prev}
			if due[k] {
				continue
			}
			inv, err := j.st.GetInvoiceByPeriod(ctx, id, prev)
			switch {
			case err == nil && inv.Status == store.InvoiceFinalized:
			case err == nil || errors.Is(err, store.ErrNotFound):
				due[k] = true
			default:
				errs = append(errs, fmt.Errorf("invoice of tenant %s for %s: %w", id, prev, err))
			}
		}
	}
	keys := make([]tenantPeriod, 0, len(due))
	for k := range due {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b tenantPeriod) int {
		return cmp.Or(cmp.Compare(a.period, b.period), cmp.Compare(a.tenant, b.tenant))
	})
	for _, k := range keys {
		inv, err := compute(k.tenant, k.period)
		if errors.Is(err, store.ErrNotFound) {
			continue // no such tenant: nobody to bill
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("finalize tenant %s for %s: %w", k.tenant, k.period, err))
			continue
		}
		inv.FinalizedAt = now
		stored, finalized, err := j.st.FinalizeInvoice(ctx, inv, EventPayload)
		if err != nil {
			errs = append(errs, fmt.Errorf("finalize tenant %s for %s: %w", k.tenant, k.period, err))
			continue
		}
		if finalized {
			res.Finalized++
			j.cfg.Logger.Info("billing: invoice finalized", "tenant", k.tenant, "period", k.period, "invoice", stored.ID,
				"total_minor_units", stored.TotalMinor, "currency", stored.Currency)
		}
	}
	return res, errors.Join(errs...)
}

// compute computes tenantID's invoice of period from its sums on its
// current plan's prices.
func (j *Job) compute(ctx context.Context, byPlan map[string]store.PlanPrices, tenantID, period string, sums map[store.UsageDimension]*big.Int, now time.Time) (store.Invoice, error) {
	t, err := j.st.GetTenant(ctx, tenantID)
	if err != nil {
		return store.Invoice{}, fmt.Errorf("tenant: %w", err)
	}
	prices, ok := byPlan[t.Plan]
	if !ok {
		return store.Invoice{}, fmt.Errorf("tenant %s is on plan %q, which has no prices", tenantID, t.Plan)
	}
	return ComputeTotals(tenantID, t.Plan, period, prices, sums, now)
}
