package e2e

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// devOperator starts sluice dev (with extra flags) and returns the CLI config, the endpoint
// and the operator credential (from --data-dir's secrets.json).
func devOperator(t *testing.T, extra ...string) (cfgPath, endpoint, token string) {
	t.Helper()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr, extra...)
	b, err := os.ReadFile(filepath.Join(dataDir, "secrets.json"))
	require.NoError(t, err)
	var secrets struct {
		OperatorToken string `json:"operator_token"`
	}
	require.NoError(t, json.Unmarshal(b, &secrets))
	require.NotEmpty(t, secrets.OperatorToken)
	return cfgPath, "http://" + addr, secrets.OperatorToken
}

// TestCLIOperatorLimits: the operator changes a tenant's limit
// overrides with sluice operator tenant update (by the tenant's name, no
// API key); the tenant sees them in tenant get next to what it uses; the
// control plane enforces the new topic limit; clearing one override brings
// the plan's value back and keeps the others. With sluice dev's real
// processes.
func TestCLIOperatorLimits(t *testing.T) {
	t.Parallel()
	cfgPath, endpoint, token := devOperator(t)
	mustCLI(t, cfgPath, "--profile", "acme", "--endpoint", endpoint, "signup", "--email", "ops@acme.example", "--tenant", "acme")
	op := []string{"--endpoint", endpoint, "--operator-token", token}

	out := mustCLI(t, cfgPath, append([]string{"operator", "tenant", "update", "acme", "--max-topics", "2", "--max-groups", "3",
		"--max-transactional-ids", "4", "--producer-ids-per-hour", "50", "--produce-bytes-per-sec", "1MiB", "--max-total-storage-bytes", "2GiB"}, op...)...)
	require.Regexp(t, `max-topics:\s+2 \(override\)\n`, out)
	require.Regexp(t, `produce-bytes-per-sec:\s+1048576 \(override\)\n`, out)
	require.Regexp(t, `max-partitions:\s+30\n`, out, "the plan's, no override")

	mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "one", "-p", "2")
	out = mustCLI(t, cfgPath, "--profile", "acme", "tenant", "get")
	for _, re := range []string{
		`topics:\s+1 of 2\n`,
		`partitions:\s+2 of 30\n`,
		`groups:\s+0 of 3\n`,
		`transactional ids:\s+0 of 4\n`,
		`storage:\s+\S+ \S+ of 2\.00 GiB \(hot \S+ \S+, cold \S+ \S+\)\n`,
		`produce:\s+\S+ \S+/s of 1\.00 MiB/s\n`,
		`new producer ids:\s+\S+/hour of 50/hour\n`,
	} {
		require.Regexp(t, re, out)
	}
	mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "two", "-p", "1")
	_, errOut, code := cli(t, cfgPath, "--profile", "acme", "topic", "create", "three", "-p", "1")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "resource_exhausted")

	// The overrides listed, then one cleared: the others stay.
	out = mustCLI(t, cfgPath, append([]string{"operator", "tenant", "list"}, op...)...)
	require.Regexp(t, `acme\s+free\s+active\s+.*max-topics=2,.*max-groups=3`, out)
	var upd struct {
		Tenant struct {
			Limits struct {
				MaxTopics int `json:"maxTopics"`
				MaxGroups int `json:"maxGroups"`
			} `json:"limits"`
			Overrides map[string]any `json:"overrides"`
		} `json:"tenant"`
	}
	out = mustCLI(t, cfgPath, append([]string{"operator", "tenant", "update", "acme", "--clear-override", "max-topics", "-o", "json"}, op...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &upd), out)
	require.Equal(t, 10, upd.Tenant.Limits.MaxTopics, "the free plan's")
	require.Equal(t, 3, upd.Tenant.Limits.MaxGroups)
	require.NotContains(t, upd.Tenant.Overrides, "maxTopics")
	mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "three", "-p", "1")

	// A tenant's API key is no operator credential.
	_, errOut, code = cli(t, cfgPath, "operator", "tenant", "list", "--endpoint", endpoint, "--operator-token", "slk_not_the_operator")
	require.Equal(t, 3, code, errOut)
}

// TestCLIUsageAndInvoices: after some produce and consume, sluice
// usage shows the ingress and egress bytes (once the brokers' metering
// reports reach the control plane: every 500 ms here), in the table, as
// CSV that parses and as JSON with totals; invoice list shows this month's
// draft and invoice get its lines, also as CSV; tenant get shows the
// storage held against the limit. With sluice dev's real processes.
func TestCLIUsageAndInvoices(t *testing.T) {
	t.Parallel()
	cfgPath, _, _ := devOperator(t, "--usage-report-interval", "500ms", "--billing-interval", "1s")
	dev := func(args ...string) []string { return append([]string{"--profile", "dev"}, args...) }
	mustCLI(t, cfgPath, dev("topic", "create", "metered", "-p", "2")...)
	var in strings.Builder
	const n, size = 200, 100
	for i := range n {
		fmt.Fprintf(&in, "%0*d\n", size, i)
	}
	mustCLIIn(t, cfgPath, in.String(), dev("produce", "metered", "--quiet")...)
	out := mustCLI(t, cfgPath, dev("consume", "metered", "-o", "json")...)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), n)

	// usage -o csv: base units, one line per bucket and dimension.
	amount := func(rows [][]string, dim string) int64 {
		var sum int64
		for _, r := range rows[1:] {
			if r[1] == dim {
				v, err := strconv.ParseInt(r[3], 10, 64)
				require.NoError(t, err)
				sum += v
			}
		}
		return sum
	}
	var rows [][]string
	testenv.Wait(t, time.Minute, "usage to show what was produced and consumed", func() error {
		out, errOut, code := cli(t, cfgPath, dev("usage", "--from=-1h", "-o", "csv")...)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		var err error
		if rows, err = csv.NewReader(strings.NewReader(out)).ReadAll(); err != nil {
			return fmt.Errorf("CSV: %w\n%s", err, out)
		}
		if in, eg := amount(rows, "ingress_bytes"), amount(rows, "egress_bytes"); in < n*size || eg < n*size {
			return fmt.Errorf("ingress %d, egress %d bytes so far; want at least %d each", in, eg, n*size)
		}
		return nil
	})
	require.Equal(t, []string{"start_time", "dimension", "unit", "amount"}, rows[0])
	for _, r := range rows[1:] {
		start, err := time.Parse(time.RFC3339, r[0])
		require.NoError(t, err, r)
		require.True(t, start.Equal(start.Truncate(time.Hour)), "hourly buckets: %s", r[0])
	}
	ingress := amount(rows, "ingress_bytes")

	// The table shows the same in human units, and -o json the totals.
	out = mustCLI(t, cfgPath, dev("usage", "--from=-1h", "--dimension", "ingress", "--dimension", "egress")...)
	require.Regexp(t, `(?m)^START \(UTC\)\s+INGRESS\s+EGRESS$`, out)
	require.Regexp(t, `(?m)^total\s+\d+(\.\d+)? KiB\s+\d+(\.\d+)? KiB$`, out)
	var usage struct {
		Totals []struct {
			Dimension string `json:"dimension"`
			Amount    string `json:"amount"`
		} `json:"totals"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, dev("usage", "--from=-1h", "-o", "json")...)), &usage))
	totals := map[string]string{}
	for _, tt := range usage.Totals {
		totals[tt.Dimension] = tt.Amount
	}
	require.GreaterOrEqual(t, mustInt(t, totals["USAGE_DIMENSION_INGRESS_BYTES"]), ingress, "at least what the CSV had a moment before")

	// This month's draft invoice (the billing job computes drafts every
	// --billing-interval), listed and shown; its lines as CSV.
	period := time.Now().UTC().Format("2006-01")
	draft := regexp.MustCompile(`(?m)^\S+\s+` + period + `\s+draft\s+free\s+`)
	testenv.Wait(t, 3*time.Minute, "invoice list to show this month's draft", func() error {
		if out := mustCLI(t, cfgPath, dev("invoice", "list")...); !draft.MatchString(out) {
			return fmt.Errorf("not yet:\n%s", out)
		}
		return nil
	})
	out = mustCLI(t, cfgPath, dev("invoice", "list", "-o", "csv")...)
	list, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err, out)
	require.GreaterOrEqual(t, len(list), 2)
	require.Equal(t, period, list[1][2])
	require.Equal(t, "draft", list[1][3])
	out = mustCLI(t, cfgPath, dev("invoice", "get")...)
	require.Regexp(t, `period:\s+`+period+`\n`, out)
	require.Regexp(t, `(?m)^ingress_bytes\s+`, out)
	out = mustCLI(t, cfgPath, dev("invoice", "get", list[1][0], "-o", "csv")...)
	lines, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err, out)
	require.Equal(t, "invoice_id", lines[0][0])
	var sum int64
	for _, l := range lines[1:] {
		require.Equal(t, list[1][0], l[0])
		sum += mustInt(t, l[11])
		if l[3] == "ingress_bytes" {
			require.GreaterOrEqual(t, mustInt(t, l[6]), int64(n*size), "the draft counts the ingress")
		}
	}
	require.Equal(t, mustInt(t, list[1][6]), sum, "the total is the sum of the lines")

	// tenant get: what the tenant holds, against its limits.
	testenv.Wait(t, time.Minute, "tenant get to show the storage held", func() error {
		out := mustCLI(t, cfgPath, dev("tenant", "get")...)
		if !regexp.MustCompile(`storage:\s+\d+(\.\d+)? KiB of 50\.0 GiB`).MatchString(out) {
			return fmt.Errorf("not yet:\n%s", out)
		}
		return nil
	})
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err, s)
	return n
}

// TestCLIOperatorPrices: operator prices set changes one plan's price
// and allowance, get shows them (table and JSON), the other plans keep
// theirs, and the draft invoice prices its lines with them.
func TestCLIOperatorPrices(t *testing.T) {
	t.Parallel()
	cfgPath, endpoint, token := devOperator(t, "--billing-interval", "1s")
	op := []string{"--endpoint", endpoint, "--operator-token", token}
	before := mustCLI(t, cfgPath, append([]string{"operator", "prices", "get", "--plan", "pro"}, op...)...)
	require.Regexp(t, `(?m)^PLAN\s+DIMENSION\s+UNIT\s+UNIT PRICE\s+FREE PER MONTH$`, before)

	out := mustCLI(t, cfgPath, append([]string{"operator", "prices", "set", "--plan", "free", "--price", "ingress=0.5", "--free", "ingress=0"}, op...)...)
	require.Regexp(t, `(?m)^free\s+ingress_bytes\s+GiB\s+0\.5 USD\s+0 GiB$`, out)
	var got struct {
		Plans []struct {
			Plan   string `json:"plan"`
			Prices []struct {
				Dimension       string `json:"dimension"`
				UnitPriceMicros string `json:"unitPriceMicros"`
				FreeQuantity    string `json:"freeQuantity"`
			} `json:"prices"`
		} `json:"plans"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, append([]string{"operator", "prices", "get", "-o", "json"}, op...)...)), &got))
	found := false
	for _, p := range got.Plans {
		for _, pr := range p.Prices {
			if p.Plan == "free" && pr.Dimension == "USAGE_DIMENSION_INGRESS_BYTES" {
				found = true
				require.Equal(t, "500000", pr.UnitPriceMicros)
				require.Equal(t, "0", pr.FreeQuantity)
			}
		}
	}
	require.True(t, found, "free's ingress price is listed")
	require.Equal(t, before, mustCLI(t, cfgPath, append([]string{"operator", "prices", "get", "--plan", "pro"}, op...)...), "pro keeps its prices")

	// The dev tenant (free plan) is priced with it once its draft is
	// computed (the billing job runs every --billing-interval).
	mustCLI(t, cfgPath, "--profile", "dev", "topic", "create", "priced", "-p", "1")
	mustCLIIn(t, cfgPath, "a\nb\n", "--profile", "dev", "produce", "priced", "--quiet")
	testenv.Wait(t, 3*time.Minute, "the draft to price ingress at 0.5", func() error {
		out, errOut, code := cli(t, cfgPath, "--profile", "dev", "invoice", "get", "-o", "csv")
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		lines, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		require.NoError(t, err, out)
		for _, l := range lines[1:] {
			if l[3] == "ingress_bytes" && l[9] == "500000" {
				return nil
			}
		}
		return fmt.Errorf("not yet:\n%s", out)
	})
}
