package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// csvAnnotation marks a command that also prints -o csv.
const csvAnnotation = "sluice/csv"

func withCSV(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[csvAnnotation] = "true"
	return cmd
}

// parseWhen reads a --from or --to time: "now", an RFC 3339 time
// ("2026-11-03T10:00:00Z", "…+01:00"), a UTC date or date and time
// ("2026-11-03", "2026-11-03T10:00"), a UTC month ("2026-11": its first
// instant) or a span before now ("-24h", "-7d", "-90m").
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		d, err := parseSpanDays(rest)
		if err != nil {
			return time.Time{}, err
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02", "2006-01"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: use now, 2026-11-03T10:00:00Z, 2026-11-03, 2026-11 (UTC) or a span before now such as -24h or -7d", s)
}

// parseSpanDays reads a non-negative span in the CLI's duration format or
// Go's ("7d", "1d12h", "24h").
func parseSpanDays(s string) (time.Duration, error) {
	d, err := parseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("span %q: want a duration such as 24h, 7d or 90m", s)
	}
	return d, nil
}

func (a *app) usageCommand() *cobra.Command {
	var from, to, by string
	var dims []string
	cmd := withCSV(&cobra.Command{
		Use:   "usage",
		Short: "Show your metered usage per hour or per day",
		Long: `Show the tenant's metered usage (BillingService.GetUsage) per hour or per day (UTC):
ingress and egress bytes, requests, hot and cold storage (byte-hours) and
partition-hours, from --from up to --to (default: the start of this month, now).

The table is for people (binary units: KiB, MiB, GiB; GiB-hours; partition-hours)
with one row per hour or day that has usage and a total row; -o csv prints one
line per bucket and dimension in the API's base units (bytes, requests,
byte-seconds, partition-seconds), -o json the API's response.`,
		Example: `  sluice usage
  sluice usage --from 2026-11-01 --to 2026-12-01 --by day
  sluice usage --from=-24h --dimension ingress_bytes --dimension egress_bytes
  sluice usage --from 2026-11 --by day -o csv > usage.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := usageRequest(from, to, by, dims, time.Now())
			if err != nil {
				return err
			}
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.billing.GetUsage(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return fmt.Errorf("get usage: %w", err)
			}
			return a.printUsage(res.Msg, req)
		},
	})
	cmd.Flags().StringVar(&from, "from", "", "start (inclusive, truncated to the hour or day): now, 2026-11-03T10:00:00Z, 2026-11-03, 2026-11 (UTC), or a span before now such as -24h or -7d (default: the start of this month)")
	cmd.Flags().StringVar(&to, "to", "", "end (exclusive), in the same forms as --from (default: now)")
	cmd.Flags().StringVar(&by, "by", "hour", "bucket size: hour or day (UTC)")
	cmd.Flags().StringSliceVar(&dims, "dimension", nil, "only this dimension (repeatable): "+strings.Join(dimensionNames(), ", ")+" (default: all)")
	return cmd
}

// usageRequest builds a GetUsageRequest from the flags.
func usageRequest(from, to, by string, dims []string, now time.Time) (*sluicev1.GetUsageRequest, error) {
	req := &sluicev1.GetUsageRequest{}
	if from != "" {
		t, err := parseWhen(from, now)
		if err != nil {
			return nil, usageError{fmt.Errorf("--from: %w", err)}
		}
		req.StartTime = timestamppb.New(t)
	}
	if to != "" {
		t, err := parseWhen(to, now)
		if err != nil {
			return nil, usageError{fmt.Errorf("--to: %w", err)}
		}
		req.EndTime = timestamppb.New(t)
	}
	if req.StartTime != nil && req.EndTime != nil && !req.EndTime.AsTime().After(req.StartTime.AsTime()) {
		return nil, usageError{fmt.Errorf("--to (%s) must be after --from (%s)", req.EndTime.AsTime().Format(time.RFC3339), req.StartTime.AsTime().Format(time.RFC3339))}
	}
	switch by {
	case "hour":
		req.Granularity = sluicev1.UsageGranularity_USAGE_GRANULARITY_HOUR
	case "day":
		req.Granularity = sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY
	default:
		return nil, usageError{fmt.Errorf("--by must be hour or day; got %q", by)}
	}
	for _, d := range dims {
		dim, err := parseDimension(d)
		if err != nil {
			return nil, usageError{fmt.Errorf("--dimension: %w", err)}
		}
		if !slices.Contains(req.Dimensions, dim) {
			req.Dimensions = append(req.Dimensions, dim)
		}
	}
	return req, nil
}

// printUsage writes a GetUsage answer as -o asks: a table with a column
// per dimension and a row per bucket, then the totals; CSV lines of
// bucket, dimension, base unit and amount; or the response as JSON.
func (a *app) printUsage(res *sluicev1.GetUsageResponse, req *sluicev1.GetUsageRequest) error {
	switch a.output {
	case "json":
		return printJSON(a.stdout, res)
	case "csv":
		w := csv.NewWriter(a.stdout)
		_ = w.Write([]string{"start_time", "dimension", "unit", "amount"})
		for _, b := range res.GetBuckets() {
			_ = w.Write([]string{b.GetStartTime().AsTime().UTC().Format(time.RFC3339), dimensionName(b.GetDimension()), baseUnit(b.GetDimension()), strconv.FormatInt(b.GetAmount(), 10)})
		}
		w.Flush()
		return w.Error()
	}
	var cols []sluicev1.UsageDimension
	for _, d := range usageDimensions {
		if len(req.GetDimensions()) == 0 || slices.Contains(req.GetDimensions(), d.dim) {
			cols = append(cols, d.dim)
		}
	}
	layout := "2006-01-02 15:04"
	if req.GetGranularity() == sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY {
		layout = "2006-01-02"
	}
	header := []string{"START (UTC)"}
	for _, d := range cols {
		header = append(header, usageColumn(d))
	}
	var rows [][]string
	var starts []time.Time
	cells := map[time.Time]map[sluicev1.UsageDimension]int64{}
	for _, b := range res.GetBuckets() {
		t := b.GetStartTime().AsTime()
		if cells[t] == nil {
			cells[t] = map[sluicev1.UsageDimension]int64{}
			starts = append(starts, t)
		}
		cells[t][b.GetDimension()] += b.GetAmount()
	}
	slices.SortFunc(starts, func(x, y time.Time) int { return x.Compare(y) })
	for _, t := range starts {
		row := []string{t.UTC().Format(layout)}
		for _, d := range cols {
			row = append(row, fmtAmount(d, cells[t][d]))
		}
		rows = append(rows, row)
	}
	totals := map[sluicev1.UsageDimension]int64{}
	for _, t := range res.GetTotals() {
		totals[t.GetDimension()] += t.GetAmount()
	}
	row := []string{"total"}
	for _, d := range cols {
		row = append(row, fmtAmount(d, totals[d]))
	}
	rows = append(rows, row)
	return table(a.stdout, header, rows)
}

func usageColumn(d sluicev1.UsageDimension) string {
	for _, u := range usageDimensions {
		if u.dim == d {
			return u.column
		}
	}
	return strings.ToUpper(dimensionName(d))
}

func baseUnit(d sluicev1.UsageDimension) string {
	for _, u := range usageDimensions {
		if u.dim == d {
			return u.base
		}
	}
	return ""
}

func invoiceStatus(s sluicev1.InvoiceStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "INVOICE_STATUS_"))
}

// listInvoices pages through every invoice of the tenant, newest first.
func listInvoices(ctx context.Context, c *clients) (*sluicev1.ListInvoicesResponse, error) {
	out := &sluicev1.ListInvoicesResponse{}
	req := &sluicev1.ListInvoicesRequest{PageSize: 100}
	for {
		res, err := c.billing.ListInvoices(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, fmt.Errorf("list invoices: %w", err)
		}
		out.Invoices = append(out.Invoices, res.Msg.GetInvoices()...)
		if res.Msg.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = res.Msg.GetNextPageToken()
	}
}

func (a *app) invoiceCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "invoice", Short: "List and show your invoices"}
	list := withCSV(&cobra.Command{
		Use:   "list",
		Short: "List your invoices, newest period first (the open month's is a draft)",
		Example: `  sluice invoice list
  sluice invoice list -o csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := listInvoices(cmd.Context(), c)
			if err != nil {
				return err
			}
			return a.printInvoices(res)
		},
	})
	var period string
	get := withCSV(&cobra.Command{
		Use:   "get [ID]",
		Short: "Show an invoice and its lines, by id or by --period (default: this month's)",
		Long: `Show one invoice with its lines: per dimension the quantity metered in the period,
the plan's free allowance, the billable rest, the unit price and the amount, in
billing units (GiB, GiB-months, million requests, partition-hours). Without an ID
or --period, this month's invoice (UTC), a draft while the month is open.

-o csv prints the lines, one per dimension, in base units (bytes, requests,
byte-seconds, partition-seconds) with the unit size and price, and the amount in
minor units and as a decimal; the invoice total is the sum of the amounts.`,
		Example: `  sluice invoice get
  sluice invoice get --period 2026-11
  sluice invoice get inv_01J… -o csv > invoice.csv`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := invoiceRequest(args, period, cmd.Flags().Changed("period"), time.Now())
			if err != nil {
				return err
			}
			c, err := a.authenticated(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.billing.GetInvoice(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return fmt.Errorf("get invoice: %w", err)
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			return a.printInvoice(res.Msg.GetInvoice())
		},
	})
	get.Flags().StringVar(&period, "period", "", "the calendar month (UTC) the invoice bills, as YYYY-MM (default: this month's)")
	cmd.AddCommand(list, get)
	return cmd
}

// invoiceRequest is the GetInvoiceRequest for an ID argument or --period;
// with neither, this month's.
func invoiceRequest(args []string, period string, periodSet bool, now time.Time) (*sluicev1.GetInvoiceRequest, error) {
	switch {
	case len(args) == 1 && periodSet:
		return nil, usageError{errors.New("give an invoice ID or --period, not both")}
	case len(args) == 1:
		return &sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_InvoiceId{InvoiceId: args[0]}}, nil
	case !periodSet:
		period = now.UTC().Format("2006-01")
	}
	if _, err := time.Parse("2006-01", period); err != nil {
		return nil, usageError{fmt.Errorf("--period %q: want a month as YYYY-MM, such as 2026-11", period)}
	}
	return &sluicev1.GetInvoiceRequest{Invoice: &sluicev1.GetInvoiceRequest_Period{Period: period}}, nil
}

func (a *app) printInvoices(res *sluicev1.ListInvoicesResponse) error {
	switch a.output {
	case "json":
		return printJSON(a.stdout, res)
	case "csv":
		w := csv.NewWriter(a.stdout)
		_ = w.Write([]string{"invoice_id", "tenant_id", "period", "status", "plan", "currency", "total_minor_units", "total", "update_time", "finalize_time"})
		for _, inv := range res.GetInvoices() {
			t := inv.GetTotal()
			_ = w.Write([]string{inv.GetId(), inv.GetTenantId(), inv.GetPeriod(), invoiceStatus(inv.GetStatus()), inv.GetPlan(),
				t.GetCurrencyCode(), strconv.FormatInt(t.GetMinorUnits(), 10), fmtMinor(t.GetMinorUnits(), t.GetCurrencyCode()),
				csvTime(inv.GetUpdateTime()), csvTime(inv.GetFinalizeTime())})
		}
		w.Flush()
		return w.Error()
	}
	var rows [][]string
	for _, inv := range res.GetInvoices() {
		rows = append(rows, []string{inv.GetId(), inv.GetPeriod(), invoiceStatus(inv.GetStatus()), inv.GetPlan(), fmtMoney(inv.GetTotal()), fmtTime(inv.GetUpdateTime())})
	}
	return table(a.stdout, []string{"ID", "PERIOD", "STATUS", "PLAN", "TOTAL", "UPDATED"}, rows)
}

// csvTime is a timestamp in RFC 3339 UTC, or empty when unset.
func csvTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

func (a *app) printInvoice(inv *sluicev1.Invoice) error {
	cur := inv.GetTotal().GetCurrencyCode()
	if a.output == "csv" {
		w := csv.NewWriter(a.stdout)
		_ = w.Write([]string{"invoice_id", "period", "status", "dimension", "unit", "unit_size", "quantity", "free_quantity", "billable_quantity",
			"unit_price_micros", "currency", "amount_minor_units", "amount"})
		for _, l := range inv.GetLines() {
			p, m := l.GetPrice(), l.GetAmount()
			_ = w.Write([]string{inv.GetId(), inv.GetPeriod(), invoiceStatus(inv.GetStatus()), dimensionName(l.GetDimension()), p.GetUnit(),
				strconv.FormatInt(p.GetUnitSize(), 10), strconv.FormatInt(l.GetQuantity(), 10), strconv.FormatInt(l.GetFreeQuantity(), 10),
				strconv.FormatInt(l.GetBillableQuantity(), 10), strconv.FormatInt(p.GetUnitPriceMicros(), 10), cmpOr(m.GetCurrencyCode(), cur),
				strconv.FormatInt(m.GetMinorUnits(), 10), fmtMinor(m.GetMinorUnits(), cmpOr(m.GetCurrencyCode(), cur))})
		}
		w.Flush()
		return w.Error()
	}
	finalized := "-"
	if inv.GetFinalizeTime() != nil {
		finalized = fmtTime(inv.GetFinalizeTime())
	}
	if err := kv(a.stdout, "invoice", inv.GetId(), "tenant id", inv.GetTenantId(), "period", inv.GetPeriod(),
		"from", inv.GetPeriodStart().AsTime().UTC().Format(time.RFC3339), "to", inv.GetPeriodEnd().AsTime().UTC().Format(time.RFC3339),
		"status", invoiceStatus(inv.GetStatus()), "plan", inv.GetPlan(), "updated", fmtTime(inv.GetUpdateTime()), "finalized", finalized,
		"total", fmtMoney(inv.GetTotal())); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	var rows [][]string
	for _, l := range inv.GetLines() {
		p := l.GetPrice()
		rows = append(rows, []string{dimensionName(l.GetDimension()), fmtUnits(l.GetQuantity(), p.GetUnitSize()), fmtUnits(l.GetFreeQuantity(), p.GetUnitSize()),
			fmtUnits(l.GetBillableQuantity(), p.GetUnitSize()), p.GetUnit(), fmtMicros(p.GetUnitPriceMicros()) + " " + cur, fmtMoney(l.GetAmount())})
	}
	return table(a.stdout, []string{"DIMENSION", "QUANTITY", "FREE", "BILLABLE", "UNIT", "UNIT PRICE", "AMOUNT"}, rows)
}
