package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// One duration format out (Go's syntax, whole days as d, zero units left
// out), both in.
func TestCLIDurationFormat(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                    "0s",
		250 * time.Millisecond:               "250ms",
		90 * time.Second:                     "1m30s",
		10 * time.Minute:                     "10m",
		time.Hour:                            "1h",
		time.Hour + 5*time.Second:            "1h0m5s",
		2*time.Hour + 5*time.Minute:          "2h5m",
		7 * 24 * time.Hour:                   "7d",
		36 * time.Hour:                       "1d12h",
		24*time.Hour + 1500*time.Millisecond: "1d1.5s",
		-24 * time.Hour:                      "-1d",
	} {
		require.Equal(t, want, fmtDuration(d), "%v", d)
		back, err := parseDuration(want)
		require.NoError(t, err, want)
		require.Equal(t, d, back, want)
		back, err = parseDuration(d.String())
		require.NoError(t, err, d.String())
		require.Equal(t, d, back, "Go's own %s", d)
	}
	for _, bad := range []string{"", "d", "7days", "1d-1h", "xd", "1h1d"} {
		_, err := parseDuration(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "7d", fmtMsDuration(7*24*3600*1000))
	require.Equal(t, "1h", fmtMsDuration(3600*1000), "no 1h0m0s")
}

// Every duration flag reads days too, and keeps its variable and default.
func TestCLIDurationFlagsReadDays(t *testing.T) {
	t.Parallel()
	a := &app{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	root := a.rootCommand()
	cmd, _, err := root.Find([]string{"consume"})
	require.NoError(t, err)
	f := cmd.Flags().Lookup("timeout")
	require.NotNil(t, f)
	require.Equal(t, "duration", f.Value.Type())
	require.NoError(t, f.Value.Set("1d12h"))
	require.Equal(t, (36 * time.Hour).String(), f.Value.String())
	require.NoError(t, f.Value.Set("90s"))
	require.Equal(t, "1m30s", f.Value.String())
	require.Error(t, f.Value.Set("2days"))
	n := 0
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		c.Flags().VisitAll(func(fl *pflag.Flag) {
			if fl.Value.Type() == "duration" {
				_, ok := fl.Value.(dayDuration)
				require.True(t, ok, "%s --%s", c.CommandPath(), fl.Name)
				n++
			}
		})
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(root)
	require.Greater(t, n, 10)
}

// Times in tables are RFC 3339.
func TestCLITimeFormat(t *testing.T) {
	t.Parallel()
	ts := timestamppb.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	_, err := time.Parse(time.RFC3339, fmtTime(ts))
	require.NoError(t, err, fmtTime(ts))
	require.Equal(t, "2026-03-01T13:00:00+01:00", fmtTimeIn(ts, time.FixedZone("X", 3600)))
	require.Equal(t, "-", fmtTime(nil))
}

// A usage dimension's one name is the API's; the enum's and the CLI's old
// names are read too.
func TestCLIDimensionNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"ingress_bytes", "egress_bytes", "requests", "hot_storage_byte_seconds", "cold_storage_byte_seconds", "partition_seconds"}, dimensionNames())
	for _, s := range []string{"hot_storage_byte_seconds", "HOT_STORAGE_BYTE_SECONDS", "USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS", "hot-storage", "Hot-Storage"} {
		d, err := parseDimension(s)
		require.NoError(t, err, s)
		require.Equal(t, sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS, d, s)
	}
	d, err := parseDimension("partitions")
	require.NoError(t, err)
	require.Equal(t, "partition_seconds", dimensionName(d))
	_, err = parseDimension("bandwidth")
	require.True(t, err != nil && strings.Contains(err.Error(), "choose ingress_bytes, egress_bytes"), "%v", err)
}
