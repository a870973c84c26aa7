package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/billing"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// billingService serves BillingService: a tenant's usage and invoices.
type billingService struct{ *API }

// GetUsage implements BillingService: the tenant's hourly usage rows, per
// hour or summed per UTC day.
func (s *billingService) GetUsage(ctx context.Context, req *connect.Request[sluicev1.GetUsageRequest]) (*connect.Response[sluicev1.GetUsageResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	q, err := validateGetUsage(req.Msg, s.now())
	if err != nil {
		return nil, err
	}
	// Every hour starting before end: the current hour so far included.
	to := q.end.Truncate(time.Hour)
	if to.Before(q.end) {
		to = to.Add(time.Hour)
	}
	rows, err := s.store.ListUsage(ctx, p.TenantID, q.start, to)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(usageResponse(q, rows)), nil
}

// usageResponse buckets rows (ordered by hour, then dimension) as q asks:
// per hour, or per day; the totals per requested dimension. Sums saturate
// at the int64 maximum.
func usageResponse(q usageQuery, rows []store.UsageRow) *sluicev1.GetUsageResponse {
	want := make(map[sluicev1.UsageDimension]int, len(q.dimensions))
	totals := make([]*sluicev1.UsageTotal, len(q.dimensions))
	for i, d := range q.dimensions {
		want[d] = i
		totals[i] = &sluicev1.UsageTotal{Dimension: d}
	}
	res := &sluicev1.GetUsageResponse{Totals: totals}
	type key struct {
		start time.Time
		dim   sluicev1.UsageDimension
	}
	var order []key
	sums := map[key]int64{}
	for _, r := range rows {
		d := billing.DimensionProto(r.Dimension)
		i, ok := want[d]
		if !ok || r.Amount == 0 || r.Hour.Before(q.start) || !r.Hour.Before(q.end) {
			continue
		}
		start := r.Hour.UTC()
		if q.daily {
			start = time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
		}
		k := key{start, d}
		if _, seen := sums[k]; !seen {
			order = append(order, k)
		}
		sums[k] = addSaturating(sums[k], r.Amount)
		totals[i].Amount = addSaturating(totals[i].Amount, r.Amount)
	}
	slices.SortFunc(order, func(a, b key) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return int(a.dim) - int(b.dim)
	})
	for _, k := range order {
		res.Buckets = append(res.Buckets, &sluicev1.UsageBucket{StartTime: ts(k.start), Dimension: k.dim, Amount: sums[k]})
	}
	return res
}

func addSaturating(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Invoice pages: at most maxInvoicePageSize, defaultInvoicePageSize when
// the request says 0.
const (
	defaultInvoicePageSize = 24
	maxInvoicePageSize     = 100
)

// ListInvoices implements BillingService: newest period first, paged by
// period (the token is the last period of the previous page).
func (s *billingService) ListInvoices(ctx context.Context, req *connect.Request[sluicev1.ListInvoicesRequest]) (*connect.Response[sluicev1.ListInvoicesResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	size := defaultInvoicePageSize
	switch n := m.GetPageSize(); {
	case n < 0:
		return nil, invalid("page_size", "must not be negative; got %d", n)
	case n > maxInvoicePageSize:
		return nil, invalid("page_size", "must be at most %d; got %d", maxInvoicePageSize, n)
	case n > 0:
		size = int(n)
	}
	q := store.InvoiceQuery{Limit: size + 1} // one more: is there a next page?
	if tok := m.GetPageToken(); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return nil, invalid("page_token", "is not a token from ListInvoices")
		}
		if _, _, err := store.ParseInvoicePeriod(string(b)); err != nil {
			return nil, invalid("page_token", "is not a token from ListInvoices")
		}
		q.BeforePeriod = string(b)
	}
	list, err := s.store.ListInvoices(ctx, p.TenantID, q)
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListInvoicesResponse{}
	if len(list) > size {
		list = list[:size]
		res.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(list[size-1].Period))
	}
	for _, inv := range list {
		res.Invoices = append(res.Invoices, billing.InvoiceProto(inv))
	}
	return connect.NewResponse(res), nil
}

// GetInvoice implements BillingService: by id or by period; another
// tenant's invoice is NOT_FOUND, as a missing one.
func (s *billingService) GetInvoice(ctx context.Context, req *connect.Request[sluicev1.GetInvoiceRequest]) (*connect.Response[sluicev1.GetInvoiceResponse], error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	var inv store.Invoice
	switch sel := req.Msg.GetInvoice().(type) {
	case *sluicev1.GetInvoiceRequest_InvoiceId:
		if sel.InvoiceId == "" {
			return nil, invalid("invoice_id", "must not be empty")
		}
		inv, err = s.store.GetInvoice(ctx, p.TenantID, sel.InvoiceId)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("invoice %q not found", sel.InvoiceId)
		}
	case *sluicev1.GetInvoiceRequest_Period:
		if _, _, perr := store.ParseInvoicePeriod(sel.Period); perr != nil {
			return nil, invalid("period", "%q is not a month (YYYY-MM, e.g. \"2026-11\")", sel.Period)
		}
		inv, err = s.store.GetInvoiceByPeriod(ctx, p.TenantID, sel.Period)
		if errors.Is(err, store.ErrNotFound) {
			return nil, notFound("no invoice for %s", sel.Period)
		}
	default:
		return nil, invalid("invoice", "set invoice_id or period")
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.GetInvoiceResponse{Invoice: billing.InvoiceProto(inv)}), nil
}

// GetPlanPrices implements OperatorService: every plan's effective prices
// (billing.Prices: the defaults with the stored ones over them).
func (s *operatorService) GetPlanPrices(ctx context.Context, req *connect.Request[sluicev1.GetPlanPricesRequest]) (*connect.Response[sluicev1.GetPlanPricesResponse], error) {
	all, err := billing.Prices(ctx, s.store)
	if err != nil {
		return nil, err
	}
	res := &sluicev1.GetPlanPricesResponse{}
	for _, p := range all {
		res.Plans = append(res.Plans, billing.PlanPricesProto(p))
	}
	return connect.NewResponse(res), nil
}

// SetPlanPrices implements OperatorService: the prices named replace the
// plan's of their dimensions (billing.SetPlanPrices checks them).
func (s *operatorService) SetPlanPrices(ctx context.Context, req *connect.Request[sluicev1.SetPlanPricesRequest]) (*connect.Response[sluicev1.SetPlanPricesResponse], error) {
	m := req.Msg
	if m.GetPlan() == "" {
		return nil, invalid("plan", "must not be empty")
	}
	if len(m.GetPrices()) == 0 {
		return nil, invalid("prices", "must name at least one dimension")
	}
	prices := make([]store.Price, len(m.GetPrices()))
	for i, p := range m.GetPrices() {
		pr, ok := billing.PriceFromProto(p)
		if !ok {
			return nil, invalid(fmt.Sprintf("prices[%d].dimension", i), "%v is not a usage dimension", p.GetDimension())
		}
		prices[i] = pr
	}
	out, err := billing.SetPlanPrices(ctx, s.store, m.GetPlan(), prices, s.now().UTC())
	if errors.Is(err, billing.ErrInvalidPrice) {
		return nil, invalid("prices", "%v", err)
	}
	if err != nil {
		return nil, err
	}
	s.logger.InfoContext(ctx, "plan prices set", "plan", out.Plan, "dimensions", len(prices))
	return connect.NewResponse(&sluicev1.SetPlanPricesResponse{Plan: billing.PlanPricesProto(out)}), nil
}

// Bounds of a GetUsage range, per granularity.
const (
	maxHourlyRange = 31 * 24 * time.Hour
	maxDailyRange  = 400 * 24 * time.Hour
)

// usageQuery is a validated GetUsageRequest.
type usageQuery struct {
	start, end time.Time // start truncated to the granularity
	daily      bool
	dimensions []sluicev1.UsageDimension // sorted, each once
}

// validateGetUsage applies GetUsageRequest's defaults and bounds.
func validateGetUsage(m *sluicev1.GetUsageRequest, now time.Time) (usageQuery, error) {
	now = now.UTC()
	var q usageQuery
	switch m.GetGranularity() {
	case sluicev1.UsageGranularity_USAGE_GRANULARITY_UNSPECIFIED, sluicev1.UsageGranularity_USAGE_GRANULARITY_HOUR:
	case sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY:
		q.daily = true
	default:
		return q, invalid("granularity", "%v is not hour or day", m.GetGranularity())
	}
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if m.GetStartTime() != nil {
		if err := m.GetStartTime().CheckValid(); err != nil {
			return q, invalid("start_time", "%v", err)
		}
		start = m.GetStartTime().AsTime().UTC()
	}
	end := now
	if m.GetEndTime() != nil {
		if err := m.GetEndTime().CheckValid(); err != nil {
			return q, invalid("end_time", "%v", err)
		}
		end = m.GetEndTime().AsTime().UTC()
	}
	if !end.After(start) {
		return q, invalid("end_time", "%s is not after start_time %s", end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	limit, unit := maxHourlyRange, "31 days by hour"
	if q.daily {
		start = time.Date(start.Year(), start.Month(), start.Day(), 0, 0, 0, 0, time.UTC)
		limit, unit = maxDailyRange, "400 days by day"
	} else {
		start = start.Truncate(time.Hour)
	}
	if end.Sub(start) > limit {
		return q, invalid("end_time", "the range from %s to %s is longer than %s", start.Format(time.RFC3339), end.Format(time.RFC3339), unit)
	}
	q.start, q.end = start, end
	seen := map[sluicev1.UsageDimension]bool{}
	for i, d := range m.GetDimensions() {
		if _, ok := sluicev1.UsageDimension_name[int32(d)]; !ok || d == sluicev1.UsageDimension_USAGE_DIMENSION_UNSPECIFIED {
			return q, invalid(fmt.Sprintf("dimensions[%d]", i), "%v is not a usage dimension", d)
		}
		if !seen[d] {
			seen[d] = true
			q.dimensions = append(q.dimensions, d)
		}
	}
	if len(q.dimensions) == 0 {
		for v := range sluicev1.UsageDimension_name {
			if d := sluicev1.UsageDimension(v); d != sluicev1.UsageDimension_USAGE_DIMENSION_UNSPECIFIED {
				q.dimensions = append(q.dimensions, d)
			}
		}
	}
	slices.Sort(q.dimensions)
	return q, nil
}
