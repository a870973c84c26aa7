package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// parseGroupArgs parses consume's group-related flags from args the way
// consume does.
func parseGroupArgs(t *testing.T, args ...string) (groupSettings, error) {
	t.Helper()
	var g groupFlags
	var partitions []int32
	var offset string
	fs := pflag.NewFlagSet("consume", pflag.ContinueOnError)
	fs.Int32SliceVar(&partitions, "partition", nil, "")
	fs.StringVar(&offset, "offset", "earliest", "")
	g.register(fs)
	require.NoError(t, fs.Parse(args))
	return g.parse(fs.Changed, offset)
}

func TestCLIGroupFlags(t *testing.T) {
	t.Parallel()
	def := groupSettings{commit: client.CommitInterval(5 * time.Second), delivery: client.AtLeastOnce, start: client.Earliest()}
	with := func(f func(*groupSettings)) groupSettings {
		s := def
		f(&s)
		return s
	}
	tests := []struct {
		args []string
		want groupSettings
		err  string // a usage error containing this
	}{
		{[]string{"--group", "g"}, def, ""},
		{[]string{"--group", "g", "--offset", "earliest"}, def, ""},
		{[]string{"--group", "g", "--offset", "latest"}, with(func(s *groupSettings) { s.start = client.Latest() }), ""},
		{[]string{"--group", "g", "--commit", "interval", "--commit-interval", "250ms"}, with(func(s *groupSettings) { s.commit = client.CommitInterval(250 * time.Millisecond) }), ""},
		{[]string{"--group", "g", "--commit", "each"}, with(func(s *groupSettings) { s.commit = client.CommitEach() }), ""},
		{[]string{"--group", "g", "--commit", "every"}, with(func(s *groupSettings) { s.commit = client.CommitEvery(100) }), ""},
		{[]string{"--group", "g", "--commit", "every", "--commit-every", "7"}, with(func(s *groupSettings) { s.commit = client.CommitEvery(7) }), ""},
		{[]string{"--group", "g", "--commit", "manual"}, with(func(s *groupSettings) { s.commit = client.CommitManual() }), ""},
		{[]string{"--group", "g", "--delivery", "at-most-once"}, with(func(s *groupSettings) { s.delivery = client.AtMostOnce }), ""},
		{[]string{"--group", "g", "--instance-id", "pod-1", "--assignor", "range"}, with(func(s *groupSettings) { s.instanceID, s.assignor = "pod-1", "range" }), ""},

		{[]string{"--group", ""}, groupSettings{}, "the group name must not be empty"},
		{[]string{"--group", "g", "--commit", "bogus"}, groupSettings{}, `--commit "bogus": choose interval, each, every or manual`},
		{[]string{"--group", "g", "--commit-every", "5"}, groupSettings{}, "--commit-every applies only with --commit every"},
		{[]string{"--group", "g", "--commit", "each", "--commit-interval", "1s"}, groupSettings{}, "--commit-interval applies only with --commit interval"},
		{[]string{"--group", "g", "--commit-interval", "0s"}, groupSettings{}, "--commit-interval must be positive"},
		{[]string{"--group", "g", "--commit", "every", "--commit-every", "0"}, groupSettings{}, "--commit-every must be at least 1"},
		{[]string{"--group", "g", "--delivery", "exactly-once"}, groupSettings{}, `--delivery "exactly-once": choose at-least-once or at-most-once`},
		{[]string{"--group", "g", "--delivery", "at-most-once", "--commit", "manual"}, groupSettings{}, "--commit manual commits only when consume stops, which cannot be at-most-once"},
		{[]string{"--group", "g", "--delivery", "at-most-once", "--commit", "each"}, with(func(s *groupSettings) { s.delivery, s.commit = client.AtMostOnce, client.CommitEach() }), ""},
		{[]string{"--group", "g", "--assignor", "sticky"}, groupSettings{}, `--assignor "sticky": choose uniform or range`},
		{[]string{"--group", "g", "--partition", "0"}, groupSettings{}, "--partition does not apply with --group"},
		{[]string{"--group", "g", "--offset", "17"}, groupSettings{}, `--offset "17" with --group: want earliest or latest`},
		{[]string{"--group", "g", "--offset", "@2025-01-31T12:00:00Z"}, groupSettings{}, "want earliest or latest"},

		// Without --group the group flags are mistakes.
		{[]string{"--partition", "0", "--offset", "17"}, groupSettings{}, ""},
		{[]string{"--commit", "each"}, groupSettings{}, "--commit applies only with --group"},
		{[]string{"--delivery", "at-most-once"}, groupSettings{}, "--delivery applies only with --group"},
		{[]string{"--instance-id", "x"}, groupSettings{}, "--instance-id applies only with --group"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			got, err := parseGroupArgs(t, tc.args...)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorAs(t, err, new(usageError))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			n := 3 // commit mode, delivery, start offset
			if got.instanceID != "" {
				n++
			}
			if got.assignor != "" {
				n++
			}
			require.Len(t, got.options(), n)
		})
	}
}

func TestCLIGroupResetTo(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want resetTarget
		err  string
	}{
		{"earliest", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}, ""},
		{"latest", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}, ""},
		{"0", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED}, ""},
		{"1500", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED, offset: 1500}, ""},
		{"@2025-01-31T12:00:00Z", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, timestampMs: at.UnixMilli()}, ""},
		{"@2025-01-31T13:00:00+01:00", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, timestampMs: at.UnixMilli()}, ""},
		{"@1738324800000", resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, timestampMs: 1738324800000}, ""},
		{"", resetTarget{}, "--to is required"},
		{"-1", resetTarget{}, `--to "-1": want earliest, latest, @TIME or an offset`},
		{"soon", resetTarget{}, `--to "soon"`},
		{"@yesterday", resetTarget{}, "after @ give an RFC 3339 time"},
	}
	for _, tc := range tests {
		got, err := parseResetTo(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			require.ErrorAs(t, err, new(usageError), tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func TestCLIGroupLagRows(t *testing.T) {
	t.Parallel()
	rows, total, maxSecs, unknown := lagRows([]*sluicev1.PartitionLag{
		{Topic: "orders", Partition: 0, CommittedOffset: 10, HighWatermark: 15, Lag: 5, LagSeconds: 2.25, MemberId: "m1"},
		{Topic: "orders", Partition: 1, CommittedOffset: -1, HighWatermark: 7, Lag: 7, LagSeconds: 9.5},
		{Topic: "orders", Partition: 2, CommittedOffset: 3, HighWatermark: -1, LogStartOffset: -1, Lag: -1},
	})
	require.Equal(t, [][]string{
		{"orders", "0", "10", "15", "5", "2.2", "m1"},
		{"orders", "1", "-", "7", "7", "9.5", "-"},
		{"orders", "2", "3", "-", "-", "-", "-"},
	}, rows)
	require.Equal(t, int64(12), total)
	require.InDelta(t, 9.5, maxSecs, 1e-9)
	require.True(t, unknown)

	require.Equal(t, "orders:0,1 audit:3", fmtAssignment([]*sluicev1.TopicPartitions{
		{Topic: "orders", Partitions: []int32{0, 1}}, {Topic: "empty"}, {Topic: "audit", Partitions: []int32{3}},
	}))
	require.Equal(t, "-", fmtAssignment(nil))
}

// TestCLIGroupUsage: bad group input is a usage error (exit 2) before any
// request is sent (the endpoint does not exist).
func TestCLIGroupUsage(t *testing.T) {
	t.Parallel()
	cfg := t.TempDir() + "/config.json"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"group", "describe"}, "accepts 1 arg(s)"},
		{[]string{"group", "lag"}, "accepts 1 arg(s)"},
		{[]string{"group", "delete", "a", "b"}, "accepts 1 arg(s)"},
		{[]string{"group", "list", "x"}, "unknown command"},
		{[]string{"group", "describe", ""}, "group name must not be empty"},
		{[]string{"group", "reset-offsets", "g", "--to", "earliest"}, `required flag(s) "topic" not set`},
		{[]string{"group", "reset-offsets", "g", "--topic", "orders"}, `required flag(s) "to" not set`},
		{[]string{"group", "reset-offsets", "g", "--topic", "orders", "--to", "soon"}, `--to "soon"`},
		{[]string{"group", "reset-offsets", "g", "--topic", "orders", "--to", "1", "--partition", "-1"}, "--partition must not be negative"},
		{[]string{"consume", "orders", "--group", "g", "--commit", "bogus"}, `--commit "bogus"`},
		{[]string{"consume", "orders", "--group", "g", "--partition", "1"}, "--partition does not apply with --group"},
		{[]string{"consume", "orders", "--group", "g", "--offset", "5"}, "want earliest or latest"},
		{[]string{"consume", "orders", "--commit", "each"}, "--commit applies only with --group"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--cli-config", cfg, "--endpoint", "http://127.0.0.1:1", "--api-key", "slk_x"}, tc.args...)
		code := Execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, ExitUsage, code, "%q: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%q", tc.args)
	}
}
