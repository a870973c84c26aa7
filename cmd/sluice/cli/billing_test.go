package cli

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

func TestCLIBillingUnits(t *testing.T) {
	t.Parallel()
	for n, want := range map[float64]string{0: "0 B", 512: "512 B", 1536: "1.50 KiB", 12.3 * (1 << 20): "12.3 MiB", 2 << 30: "2.00 GiB", 150 << 30: "150 GiB", 1.25 * (1 << 40): "1.25 TiB"} {
		require.Equal(t, want, fmtBytes(n), "%v", n)
	}
	const gibHour = 3600 << 30
	require.Equal(t, "1.50 GiB-hours", fmtAmount(sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS, gibHour*3/2))
	require.Equal(t, "0.25 partition-hours", fmtAmount(sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, 900))
	require.Equal(t, "3 partition-hours", fmtAmount(sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, 3*3600))
	require.Equal(t, "1234", fmtAmount(sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS, 1234))
	require.Equal(t, "4.00 KiB", fmtAmount(sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES, 4096))

	require.Equal(t, "12.34", fmtMinor(1234, "USD"))
	require.Equal(t, "0.05", fmtMinor(5, "EUR"))
	require.Equal(t, "-0.05", fmtMinor(-5, "EUR"))
	require.Equal(t, "1234", fmtMinor(1234, "JPY"))
	require.Equal(t, "12.34 USD", fmtMoney(&sluicev1.Money{CurrencyCode: "USD", MinorUnits: 1234}))
	require.Equal(t, "0.023", fmtMicros(23000))
	require.Equal(t, "1.5", fmtMicros(1500000))
	require.Equal(t, "0", fmtMicros(0))

	for in, want := range map[string]int64{"0.023": 23000, "1.5": 1500000, "2": 2000000, ".5": 500000, "0.000001": 1} {
		got, err := parseMicros(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", ".", "-1", "1e3", "0.0000001", "1,5", "abc"} {
		_, err := parseMicros(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "1.5", fmtUnits(3<<29, 1<<30))
	require.Equal(t, "0.000001", fmtUnits(1, 1000000))
	n, err := parseUnits("10", 1<<30)
	require.NoError(t, err)
	require.Equal(t, int64(10<<30), n)
	n, err = parseUnits("0.5", 3600)
	require.NoError(t, err)
	require.Equal(t, int64(1800), n)
	_, err = parseUnits("-1", 3600)
	require.Error(t, err)
	_, err = parseUnits("1/2", 3600)
	require.Error(t, err)

	for in, want := range map[string]int64{"1073741824": 1 << 30, "512MiB": 512 << 20, "10GiB": 10 << 30, "10G": 10 << 30, "1 KiB": 1024, "5mb": 5 << 20, "7B": 7} {
		got, err := parseBytes(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "ten", "1.5GiB", "9999999999PiB"} {
		_, err := parseBytes(bad)
		require.Error(t, err, bad)
	}

	now := time.Date(2026, 11, 15, 10, 30, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"now":                       now,
		"-24h":                      now.Add(-24 * time.Hour),
		"-7d":                       now.Add(-7 * 24 * time.Hour),
		"-1d12h":                    now.Add(-36 * time.Hour),
		"2026-11-03":                time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC),
		"2026-11-03T10:00":          time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC),
		"2026-11":                   time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-03T10:00:00+01:00": time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC),
	} {
		got, err := parseWhen(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s, want %s", in, got, want)
	}
	for _, bad := range []string{"yesterday", "-x", "2026-13", "-5"} {
		_, err := parseWhen(bad, now)
		require.Error(t, err, bad)
	}
}

func TestCLIUsageRequest(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 15, 10, 30, 0, 0, time.UTC)
	req, err := usageRequest("", "", "hour", nil, now)
	require.NoError(t, err)
	require.True(t, proto.Equal(&sluicev1.GetUsageRequest{Granularity: sluicev1.UsageGranularity_USAGE_GRANULARITY_HOUR}, req), "defaults are the server's: this month, up to now")

	req, err = usageRequest("2026-11-01", "2026-12", "day", []string{"ingress", "HOT_STORAGE_BYTE_SECONDS", "ingress"}, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), req.GetStartTime().AsTime())
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), req.GetEndTime().AsTime())
	require.Equal(t, sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY, req.GetGranularity())
	require.Equal(t, []sluicev1.UsageDimension{sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS}, req.GetDimensions())

	for _, tc := range []struct {
		from, to, by string
		dims         []string
		want         string
	}{
		{"2026-11-02", "2026-11-01", "hour", nil, "--to (2026-11-01T00:00:00Z) must be after --from (2026-11-02T00:00:00Z)"},
		{"", "", "week", nil, `--by must be hour or day; got "week"`},
		{"", "", "hour", []string{"bandwidth"}, `--dimension: dimension "bandwidth": choose ingress_bytes, egress_bytes, requests, hot_storage_byte_seconds, cold_storage_byte_seconds, partition_seconds`},
		{"soon", "", "hour", nil, `--from: "soon" is not a time`},
	} {
		_, err := usageRequest(tc.from, tc.to, tc.by, tc.dims, now)
		var ue usageError
		require.ErrorAs(t, err, &ue, tc.want)
		require.ErrorContains(t, err, tc.want)
	}
}

// fakeBilling answers BillingService, TenantService and OperatorService
// from fixed values and records what it was asked.
type fakeBilling struct {
	sluicev1connect.UnimplementedBillingServiceHandler
	sluicev1connect.UnimplementedTenantServiceHandler
	sluicev1connect.UnimplementedOperatorServiceHandler

	mu       sync.Mutex
	usage    []*sluicev1.GetUsageRequest
	invoices []*sluicev1.GetInvoiceRequest
	updates  []*sluicev1.UpdateTenantRequest
	sets     []*sluicev1.SetPlanPricesRequest
	opAuth   []string
}

var billT0 = time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)

const gib = 1 << 30

func fixedPrices() []*sluicev1.PlanPrices {
	return []*sluicev1.PlanPrices{
		{Plan: "free", CurrencyCode: "USD", Prices: []*sluicev1.Price{
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 0, FreeQuantity: 10 * gib},
		}},
		{Plan: "pro", CurrencyCode: "USD", Prices: []*sluicev1.Price{
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 50000, FreeQuantity: gib},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 40000},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, Unit: "partition-hour", UnitSize: 3600, UnitPriceMicros: 1500},
		}},
	}
}

func fixedInvoice() *sluicev1.Invoice {
	return &sluicev1.Invoice{
		Id: "inv-11", TenantId: "t1", Period: "2026-11", Status: sluicev1.InvoiceStatus_INVOICE_STATUS_DRAFT, Plan: "pro",
		PeriodStart: timestamppb.New(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), PeriodEnd: timestamppb.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		UpdateTime: timestamppb.New(billT0),
		Lines: []*sluicev1.InvoiceLine{
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Quantity: 3 * gib, FreeQuantity: gib, BillableQuantity: 2 * gib,
				Price: fixedPrices()[1].Prices[0], Amount: &sluicev1.Money{CurrencyCode: "USD", MinorUnits: 10}},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, Quantity: 720 * 3600, BillableQuantity: 720 * 3600,
				Price: fixedPrices()[1].Prices[2], Amount: &sluicev1.Money{CurrencyCode: "USD", MinorUnits: 108}},
		},
		Total: &sluicev1.Money{CurrencyCode: "USD", MinorUnits: 118},
	}
}

func (f *fakeBilling) GetUsage(_ context.Context, req *connect.Request[sluicev1.GetUsageRequest]) (*connect.Response[sluicev1.GetUsageResponse], error) {
	f.mu.Lock()
	f.usage = append(f.usage, req.Msg)
	f.mu.Unlock()
	day := 24 * time.Hour
	return connect.NewResponse(&sluicev1.GetUsageResponse{
		Buckets: []*sluicev1.UsageBucket{
			{StartTime: timestamppb.New(billT0), Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Amount: 3 * gib / 2},
			{StartTime: timestamppb.New(billT0), Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS, Amount: 1200},
			{StartTime: timestamppb.New(billT0.Add(day)), Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Amount: 512},
			{StartTime: timestamppb.New(billT0.Add(day)), Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS, Amount: 3600 * 2 * gib},
			{StartTime: timestamppb.New(billT0.Add(day)), Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, Amount: 3 * 24 * 3600},
		},
		Totals: []*sluicev1.UsageTotal{
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Amount: 3*gib/2 + 512},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS, Amount: 1200},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS, Amount: 3600 * 2 * gib},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_COLD_STORAGE_BYTE_SECONDS},
			{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, Amount: 3 * 24 * 3600},
		},
	}), nil
}

func (f *fakeBilling) ListInvoices(_ context.Context, req *connect.Request[sluicev1.ListInvoicesRequest]) (*connect.Response[sluicev1.ListInvoicesResponse], error) {
	if req.Msg.GetPageToken() == "" {
		return connect.NewResponse(&sluicev1.ListInvoicesResponse{Invoices: []*sluicev1.Invoice{fixedInvoice()}, NextPageToken: "p2"}), nil
	}
	old := &sluicev1.Invoice{Id: "inv-10", TenantId: "t1", Period: "2026-10", Status: sluicev1.InvoiceStatus_INVOICE_STATUS_FINALIZED, Plan: "free",
		Total: &sluicev1.Money{CurrencyCode: "USD"}, UpdateTime: timestamppb.New(billT0), FinalizeTime: timestamppb.New(billT0)}
	return connect.NewResponse(&sluicev1.ListInvoicesResponse{Invoices: []*sluicev1.Invoice{old}}), nil
}

func (f *fakeBilling) GetInvoice(_ context.Context, req *connect.Request[sluicev1.GetInvoiceRequest]) (*connect.Response[sluicev1.GetInvoiceResponse], error) {
	f.mu.Lock()
	f.invoices = append(f.invoices, req.Msg)
	f.mu.Unlock()
	if req.Msg.GetInvoiceId() == "inv-11" || req.Msg.GetPeriod() != "" && req.Msg.GetPeriod() != "2020-01" {
		return connect.NewResponse(&sluicev1.GetInvoiceResponse{Invoice: fixedInvoice()}), nil
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("no such invoice"))
}

func fixedTenant() *sluicev1.Tenant {
	twenty, forty := int32(20), int32(40)
	return &sluicev1.Tenant{
		Id: "t1", Name: "acme", Email: "ops@acme.example", Plan: "free", Status: "active",
		Limits: &sluicev1.Limits{MaxTopics: 20, MaxPartitions: 40, MaxRetentionMs: 7 * 24 * 3600 * 1000, MaxStorageBytes: 10 * gib, MaxMessageBytes: 1 << 20,
			ProduceBytesPerSec: 5 << 20, FetchBytesPerSec: 10 << 20, RequestsPerSec: 500,
			MaxTotalStorageBytes: 50 * gib, ProducerIdsPerHour: 1000, MaxTransactionalIds: 100, MaxGroups: 100,
			MaxPartitionsPerTransaction: 100, MaxGroupsPerTransaction: 10},
		Overrides: &sluicev1.LimitOverrides{MaxTopics: &twenty, MaxPartitions: &forty},
	}
}

func (f *fakeBilling) GetTenant(context.Context, *connect.Request[sluicev1.GetTenantRequest]) (*connect.Response[sluicev1.GetTenantResponse], error) {
	return connect.NewResponse(&sluicev1.GetTenantResponse{Tenant: fixedTenant(), Usage: &sluicev1.Usage{
		Topics: 3, Partitions: 12, StorageBytes: 3 * gib / 2, HotStorageBytes: gib, ColdStorageBytes: gib / 2,
		Groups: 2, TransactionalIds: 1, ProduceBytesPerSec: 1 << 20, FetchBytesPerSec: 0, RequestsPerSec: 12.5, ProducerIdsPerHour: 3,
	}}), nil
}

func (f *fakeBilling) opAuthLocked(h http.Header) error {
	f.opAuth = append(f.opAuth, h.Get("Authorization"))
	if h.Get("Authorization") != "Bearer op-secret" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("not the operator"))
	}
	return nil
}

func (f *fakeBilling) ListTenants(_ context.Context, req *connect.Request[sluicev1.ListTenantsRequest]) (*connect.Response[sluicev1.ListTenantsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opAuthLocked(req.Header()); err != nil {
		return nil, err
	}
	if req.Msg.GetPageToken() == "" {
		return connect.NewResponse(&sluicev1.ListTenantsResponse{Tenants: []*sluicev1.Tenant{{Id: "t0", Name: "other", Plan: "pro", Status: "active"}}, NextPageToken: "n"}), nil
	}
	return connect.NewResponse(&sluicev1.ListTenantsResponse{Tenants: []*sluicev1.Tenant{fixedTenant()}}), nil
}

func (f *fakeBilling) UpdateTenant(_ context.Context, req *connect.Request[sluicev1.UpdateTenantRequest]) (*connect.Response[sluicev1.UpdateTenantResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opAuthLocked(req.Header()); err != nil {
		return nil, err
	}
	f.updates = append(f.updates, req.Msg)
	t := fixedTenant()
	if req.Msg.Overrides != nil {
		t.Overrides = req.Msg.Overrides
	}
	if req.Msg.Plan != nil {
		t.Plan = req.Msg.GetPlan()
	}
	return connect.NewResponse(&sluicev1.UpdateTenantResponse{Tenant: t}), nil
}

func (f *fakeBilling) GetPlanPrices(_ context.Context, req *connect.Request[sluicev1.GetPlanPricesRequest]) (*connect.Response[sluicev1.GetPlanPricesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opAuthLocked(req.Header()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.GetPlanPricesResponse{Plans: fixedPrices()}), nil
}

func (f *fakeBilling) SetPlanPrices(_ context.Context, req *connect.Request[sluicev1.SetPlanPricesRequest]) (*connect.Response[sluicev1.SetPlanPricesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.opAuthLocked(req.Header()); err != nil {
		return nil, err
	}
	f.sets = append(f.sets, req.Msg)
	pp := fixedPrices()[1]
	for _, p := range req.Msg.GetPrices() {
		for i, q := range pp.Prices {
			if q.GetDimension() == p.GetDimension() {
				pp.Prices[i] = p
			}
		}
	}
	return connect.NewResponse(&sluicev1.SetPlanPricesResponse{Plan: pp}), nil
}

func startFakeBilling(t *testing.T) (*fakeBilling, func(args ...string) (string, string, int)) {
	t.Helper()
	fake := &fakeBilling{}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewBillingServiceHandler(fake))
	mux.Handle(sluicev1connect.NewTenantServiceHandler(fake))
	mux.Handle(sluicev1connect.NewOperatorServiceHandler(fake))
	mux.Handle(sluicev1connect.NewAuthServiceHandler(fakeAuth{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	cfg := t.TempDir() + "/config.json"
	return fake, func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		args = append([]string{"--cli-config", cfg, "--endpoint", srv.URL, "--api-key", "slk_x"}, args...)
		code := Execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
}

func readCSV(t *testing.T, s string) [][]string {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(s)).ReadAll()
	require.NoError(t, err, s)
	return rows
}

// usage: a table with a column per dimension in human units and a total
// row; CSV in base units; JSON as the API answers.
func TestCLIUsageOutput(t *testing.T) {
	t.Parallel()
	fake, run := startFakeBilling(t)
	out, errOut, code := run("usage", "--from", "2026-11-01", "--to", "2026-12-01", "--by", "day")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, ""+
		"START (UTC)  INGRESS   EGRESS  REQUESTS  HOT STORAGE     COLD STORAGE  PARTITIONS\n"+
		"2026-11-03   1.50 GiB  0 B     1200      0 B-hours       0 B-hours     0 partition-hours\n"+
		"2026-11-04   512 B     0 B     0         2.00 GiB-hours  0 B-hours     72 partition-hours\n"+
		"total        1.50 GiB  0 B     1200      2.00 GiB-hours  0 B-hours     72 partition-hours\n", out)
	require.Len(t, fake.usage, 1)
	require.Equal(t, sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY, fake.usage[0].GetGranularity())
	require.Equal(t, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), fake.usage[0].GetStartTime().AsTime())

	out, errOut, code = run("usage", "--dimension", "ingress", "--dimension", "requests")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, ""+
		"START (UTC)       INGRESS   REQUESTS\n"+
		"2026-11-03 00:00  1.50 GiB  1200\n"+
		"2026-11-04 00:00  512 B     0\n"+
		"total             1.50 GiB  1200\n", out)

	out, errOut, code = run("usage", "-o", "csv")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, [][]string{
		{"start_time", "dimension", "unit", "amount"},
		{"2026-11-03T00:00:00Z", "ingress_bytes", "bytes", "1610612736"},
		{"2026-11-03T00:00:00Z", "requests", "requests", "1200"},
		{"2026-11-04T00:00:00Z", "ingress_bytes", "bytes", "512"},
		{"2026-11-04T00:00:00Z", "hot_storage_byte_seconds", "byte-seconds", "7730941132800"},
		{"2026-11-04T00:00:00Z", "partition_seconds", "partition-seconds", "259200"},
	}, readCSV(t, out))

	out, errOut, code = run("usage", "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	requireJSONStyle(t, out)
	var res struct {
		Totals []struct {
			Dimension string `json:"dimension"`
			Amount    string `json:"amount"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, "USAGE_DIMENSION_INGRESS_BYTES", res.Totals[0].Dimension)
	require.Equal(t, "1610613248", res.Totals[0].Amount)

	_, errOut, code = run("topic", "list", "-o", "csv")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "--output csv: only usage, invoice list and invoice get print CSV; sluice topic list prints table or json")
	_, errOut, code = run("usage", "-o", "yaml")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, `--output must be table, json or csv; got "yaml"`)
}

// invoice list and get: tables, CSV of the lines in base units, the
// request by id or period (this month's by default), and NotFound's exit
// code.
func TestCLIInvoiceOutput(t *testing.T) {
	t.Parallel()
	fake, run := startFakeBilling(t)
	out, errOut, code := run("invoice", "list")
	require.Equal(t, ExitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, "both pages:\n%s", out)
	require.Regexp(t, `^ID\s+PERIOD\s+STATUS\s+PLAN\s+TOTAL\s+UPDATED$`, lines[0])
	require.Regexp(t, `^inv-11\s+2026-11\s+draft\s+pro\s+1\.18 USD\s+`, lines[1])
	require.Regexp(t, `^inv-10\s+2026-10\s+finalized\s+free\s+0\.00 USD\s+`, lines[2])

	out, errOut, code = run("invoice", "list", "-o", "csv")
	require.Equal(t, ExitOK, code, errOut)
	rows := readCSV(t, out)
	require.Len(t, rows, 3)
	require.Equal(t, []string{"invoice_id", "tenant_id", "period", "status", "plan", "currency", "total_minor_units", "total", "update_time", "finalize_time"}, rows[0])
	require.Equal(t, []string{"inv-11", "t1", "2026-11", "draft", "pro", "USD", "118", "1.18", "2026-11-03T00:00:00Z", ""}, rows[1])
	require.Equal(t, "2026-11-03T00:00:00Z", rows[2][9])

	out, errOut, code = run("invoice", "get", "--period", "2026-11")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "status:    draft\n")
	require.Contains(t, out, "total:     1.18 USD\n")
	require.Contains(t, out, "from:      2026-11-01T00:00:00Z\n")
	require.Contains(t, out, ""+
		"DIMENSION          QUANTITY  FREE  BILLABLE  UNIT            UNIT PRICE  AMOUNT\n"+
		"ingress_bytes      3         1     2         GiB             0.05 USD    0.10 USD\n"+
		"partition_seconds  720       0     720       partition-hour  0.0015 USD  1.08 USD\n")
	require.Equal(t, "2026-11", fake.invoices[0].GetPeriod())

	out, errOut, code = run("invoice", "get", "inv-11", "-o", "csv")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, [][]string{
		{"invoice_id", "period", "status", "dimension", "unit", "unit_size", "quantity", "free_quantity", "billable_quantity", "unit_price_micros", "currency", "amount_minor_units", "amount"},
		{"inv-11", "2026-11", "draft", "ingress_bytes", "GiB", "1073741824", "3221225472", "1073741824", "2147483648", "50000", "USD", "10", "0.10"},
		{"inv-11", "2026-11", "draft", "partition_seconds", "partition-hour", "3600", "2592000", "0", "2592000", "1500", "USD", "108", "1.08"},
	}, readCSV(t, out))
	require.Equal(t, "inv-11", fake.invoices[1].GetInvoiceId())

	out, errOut, code = run("invoice", "get", "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	requireJSONStyle(t, out)
	require.Equal(t, time.Now().UTC().Format("2006-01"), fake.invoices[2].GetPeriod(), "this month's by default")

	_, errOut, code = run("invoice", "get", "inv-11", "--period", "2026-11")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "give an invoice ID or --period, not both")
	_, errOut, code = run("invoice", "get", "--period", "November")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, `--period "November": want a month as YYYY-MM`)
	_, errOut, code = run("invoice", "get", "--period", "2020-01")
	require.Equal(t, ExitNotFound, code, errOut)
}

// tenant get: what the tenant holds and does now against each limit.
func TestCLITenantGetUsage(t *testing.T) {
	t.Parallel()
	_, run := startFakeBilling(t)
	out, errOut, code := run("tenant", "get")
	require.Equal(t, ExitOK, code, errOut)
	for _, want := range []string{
		"topics:              3 of 20\n",
		"partitions:          12 of 40\n",
		"storage:             1.50 GiB of 50.0 GiB (hot 1.00 GiB, cold 512 MiB)\n",
		"groups:              2 of 100\n",
		"transactional ids:   1 of 100\n",
		"produce:             1.00 MiB/s of 5.00 MiB/s\n",
		"fetch:               0 B/s of 10.0 MiB/s\n",
		"requests:            12.5/s of 500/s\n",
		"new producer ids:    3/hour of 1000/hour\n",
		"max retention:       7d\n",
		"max partition bytes: 10.0 GiB (a partition's retention.bytes)\n",
		"max message bytes:   1048576 (1.00 MiB)\n",
	} {
		require.Contains(t, out, want)
	}
}

// operator tenant update merges the flags into the tenant's overrides
// (found by name); prices set keeps each dimension's unit and what a flag
// leaves; both need the operator credential, from the flag or
// $SLUICE_OPERATOR_TOKEN.
func TestCLIOperatorQuotasAndPrices(t *testing.T) {
	fake, run := startFakeBilling(t)
	_, errOut, code := run("operator", "tenant", "update", "acme", "--max-groups", "5")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "operator tenant update acts as the operator: pass --operator-token or $SLUICE_OPERATOR_TOKEN")

	t.Setenv("SLUICE_OPERATOR_TOKEN", "op-secret")
	t.Setenv("SLUICE_MAX_GROUPS", "99") // changes nothing on its own
	out, errOut, code := run("operator", "tenant", "update", "acme", "--max-groups", "5", "--produce-bytes-per-sec", "1MiB",
		"--max-total-storage-bytes", "20GiB", "--producer-ids-per-hour", "10", "--max-transactional-ids", "7", "--clear-override", "max-topics")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, fake.updates, 1)
	u := fake.updates[0]
	require.Equal(t, "t1", u.GetTenantId(), "found by name")
	require.Nil(t, u.Plan)
	require.Nil(t, u.Status)
	forty, five, seven, ten, mib, twentyGiB := int32(40), int32(5), int32(7), int32(10), int64(1<<20), int64(20*gib)
	require.True(t, proto.Equal(&sluicev1.LimitOverrides{MaxPartitions: &forty, MaxGroups: &five, MaxTransactionalIds: &seven, ProducerIdsPerHour: &ten,
		ProduceBytesPerSec: &mib, MaxTotalStorageBytes: &twentyGiB}, u.GetOverrides()), "%v", u.GetOverrides())
	require.Contains(t, out, "max-partitions:                 40 (override)\n")
	require.Contains(t, out, "max-topics:                     20\n")
	require.Contains(t, out, "max-groups:                     100 (override)\n") // the fake's limits stay; the marker follows the overrides
	require.Contains(t, out, "max-groups-per-transaction:     10\n")

	_, errOut, code = run("operator", "tenant", "update", "acme", "--plan", "pro")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, "pro", fake.updates[1].GetPlan())
	require.Nil(t, fake.updates[1].Overrides, "overrides untouched without a limit flag")

	_, errOut, code = run("operator", "tenant", "update", "acme", "--clear-overrides")
	require.Equal(t, ExitOK, code, errOut)
	require.NotNil(t, fake.updates[2].Overrides)
	require.True(t, proto.Equal(&sluicev1.LimitOverrides{}, fake.updates[2].GetOverrides()))

	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"acme"}, "nothing to change: give --plan, --status or a limit flag", ExitUsage},
		{[]string{"acme", "--clear-override", "bogus"}, `--clear-override "bogus": not a limit; choose fetch-bytes-per-sec,`, ExitUsage},
		{[]string{"acme", "--max-groups", "-1"}, "--max-groups: must not be negative", ExitUsage},
		{[]string{"acme", "--max-groups", "3000000000"}, "--max-groups: at most 2147483647", ExitUsage},
		{[]string{"acme", "--max-total-storage-bytes", "lots"}, `"lots" is not a byte count`, ExitUsage},
		{[]string{"nobody", "--plan", "pro"}, `tenant "nobody" not found`, ExitNotFound},
	} {
		_, errOut, code := run(append([]string{"operator", "tenant", "update"}, tc.args...)...)
		require.Equal(t, tc.code, code, "%q: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, "%q", tc.args)
	}

	out, errOut, code = run("operator", "tenant", "list")
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `\nt1\s+acme\s+free\s+active\s+.*max-topics=20,max-partitions=40\n`, out)
	require.Contains(t, out, "other")

	out, errOut, code = run("operator", "prices", "get", "--plan", "pro")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, ""+
		"PLAN  DIMENSION          UNIT            UNIT PRICE  FREE PER MONTH\n"+
		"pro   ingress_bytes      GiB             0.05 USD    1 GiB\n"+
		"pro   egress_bytes       GiB             0.04 USD    0 GiB\n"+
		"pro   partition_seconds  partition-hour  0.0015 USD  0 partition-hour\n", out)

	out, errOut, code = run("operator", "prices", "set", "--plan", "pro", "--price", "ingress=0.09", "--free", "egress=10", "--free", "partitions=0.5")
	require.Equal(t, ExitOK, code, errOut)
	require.Len(t, fake.sets, 1)
	s := fake.sets[0]
	require.Equal(t, "pro", s.GetPlan())
	require.Len(t, s.GetPrices(), 3)
	require.True(t, proto.Equal(&sluicev1.Price{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 90000, FreeQuantity: gib}, s.GetPrices()[0]))
	require.True(t, proto.Equal(&sluicev1.Price{Dimension: sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES, Unit: "GiB", UnitSize: gib, UnitPriceMicros: 40000, FreeQuantity: 10 * gib}, s.GetPrices()[1]))
	require.Equal(t, int64(1800), s.GetPrices()[2].GetFreeQuantity())
	require.Contains(t, out, "pro   ingress_bytes      GiB             0.09 USD    1 GiB\n")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--plan", "pro"}, "nothing to set: give --price DIMENSION=PRICE or --free DIMENSION=QUANTITY"},
		{[]string{"--plan", "gold", "--price", "ingress=1"}, `--plan "gold": no such plan (the control plane knows free, pro)`},
		{[]string{"--plan", "pro", "--price", "ingress"}, `--price "ingress": want DIMENSION=VALUE`},
		{[]string{"--plan", "pro", "--price", "ingress=1.0000001"}, `--price ingress_bytes: "1.0000001" is not an amount of at most 6 decimals`},
		{[]string{"--plan", "pro", "--free", "bandwidth=1"}, `--free: dimension "bandwidth": choose`},
	} {
		_, errOut, code := run(append([]string{"operator", "prices", "set"}, tc.args...)...)
		require.Equal(t, ExitUsage, code, "%q: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, "%q", tc.args)
	}
	t.Setenv("SLUICE_OPERATOR_TOKEN", "wrong")
	_, _, code = run("operator", "prices", "get")
	require.Equal(t, ExitAuth, code)
}
