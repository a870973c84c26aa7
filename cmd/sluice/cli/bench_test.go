package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/bench"
)

// benchSpecOf parses bench flags as the command does.
func benchSpecOf(t *testing.T, args ...string) (benchSpec, error) {
	t.Helper()
	var o benchOptions
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	o.register(fs)
	require.NoError(t, fs.Parse(args))
	return o.spec(fs)
}

// TestCLIBenchFlags: the modes and their flags parse into the run they
// say; contradictions and bad values are usage errors (exit 2) before
// anything is sent.
func TestCLIBenchFlags(t *testing.T) {
	t.Parallel()
	s, err := benchSpecOf(t)
	require.NoError(t, err)
	require.Len(t, s.cfg.Steps, 1)
	require.True(t, s.cfg.Steps[0].Rate.Saturated(), "no --rate: saturated")
	require.Equal(t, 30*time.Second, s.cfg.Steps[0].Duration)
	require.Equal(t, 5*time.Second, s.cfg.Warmup)
	require.Equal(t, 1024, s.cfg.RecordSize)
	require.True(t, s.cfg.EndToEnd)
	require.EqualValues(t, 3, s.partitions)
	require.EqualValues(t, 3, s.rf)
	require.False(t, s.rfGiven)
	require.Len(t, s.opts, 2, "acks and compression only: the SDK's defaults for the rest")

	s, err = benchSpecOf(t, "--steps", "5MiB/s,10MiB/s,20MiB/s", "--step-duration", "10s", "--warmup", "1s", "--record-size", "4KiB",
		"--linger", "0", "--batch-size", "64KiB", "--max-in-flight", "1", "--idempotence=false", "-r", "1")
	require.NoError(t, err)
	require.Len(t, s.cfg.Steps, 3)
	require.InDelta(t, 20<<20, s.cfg.Steps[2].Rate.Bytes, 0)
	require.Equal(t, 10*time.Second, s.cfg.Steps[2].Duration)
	require.Equal(t, 4096, s.cfg.RecordSize)
	require.Len(t, s.opts, 6)
	require.True(t, s.rfGiven)

	s, err = benchSpecOf(t, "--rate", "100", "--duration", "2s", "--end-to-end=false")
	require.NoError(t, err)
	require.InDelta(t, 100, s.cfg.Steps[0].Rate.Records, 0)
	require.False(t, s.cfg.EndToEnd)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "fast"}, `--rate: rate "fast"`},
		{[]string{"--rate", "1", "--steps", "1,2"}, "not both"},
		{[]string{"--steps", "1,2", "--duration", "1s"}, "--step-duration"},
		{[]string{"--step-duration", "1s"}, "--step-duration needs --steps"},
		{[]string{"--steps", "1,,2"}, "--steps: rate"},
		{[]string{"--record-size", "8"}, "at least 16 bytes"},
		{[]string{"--record-size", "1K"}, "--record-size"},
		{[]string{"--duration", "0s"}, "duration 0s must be positive"},
		{[]string{"--producers", "0"}, "--producers must be 1 to 64"},
		{[]string{"--partitions", "0"}, "--partitions must be at least 1"},
		{[]string{"--acks", "2"}, `acks "2"`},
		{[]string{"--max-in-flight", "6"}, "--max-in-flight must be 1 to 5"},
		{[]string{"--linger", "-1ms"}, "--linger must not be negative"},
		{[]string{"--topic", "orders", "--keep"}, "never deleted"},
	} {
		_, err := benchSpecOf(t, tc.args...)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%q", tc.args)

		// And through the command line: exit 2, before any connection.
		_, errOut, code := run(t, append([]string{"bench", "--endpoint", "http://127.0.0.1:1", "--api-key", "slk_x"}, tc.args...)...)
		require.Equal(t, ExitUsage, code, "%q: %s", tc.args, errOut)
	}
}

// TestCLIBenchTopicReadsNoVariable: a $SLUICE_TOPIC left in the
// environment does not send bench's records into that topic; the other
// flags read their variables as everywhere.
func TestCLIBenchTopicReadsNoVariable(t *testing.T) {
	t.Setenv("SLUICE_TOPIC", "orders")
	t.Setenv("SLUICE_RATE", "5MiB/s")
	cmd := (&app{}).rootCommand()
	b, _, err := cmd.Find([]string{"bench"})
	require.NoError(t, err)
	require.NoError(t, b.ParseFlags(nil))
	require.NoError(t, cmd.PersistentPreRunE(b, nil))
	topic, _ := b.Flags().GetString("topic")
	require.Empty(t, topic)
	rate, _ := b.Flags().GetString("rate")
	require.Equal(t, "5MiB/s", rate)
	require.NotContains(t, b.Flags().Lookup("topic").Usage, "$SLUICE_TOPIC")
	require.Contains(t, b.Flags().Lookup("rate").Usage, "[$SLUICE_RATE]")
}

func sampleBenchResult() *bench.Result {
	sum := bench.Summary{Count: 300, Min: 900 * time.Microsecond, Mean: 2500 * time.Microsecond, P50: 2100 * time.Microsecond,
		P90: 3 * time.Millisecond, P99: 8300 * time.Microsecond, P999: 12 * time.Millisecond, Max: 1500 * time.Millisecond}
	r10, _ := bench.ParseRate("10MiB/s")
	return &bench.Result{
		Drained: true,
		Steps: []bench.StepResult{
			{Rate: r10, TargetRecordsPerSecond: 10240, Warmup: 5 * time.Second, Duration: 30 * time.Second,
				Sent: 307200, Acked: 307190, Failed: 10, Consumed: 307190, RecordsPerSecond: 10239.7, BytesPerSecond: 10239.7 * 1024,
				Publish: sum, EndToEnd: sum},
			{Duration: 30 * time.Second, Sent: 10, Unsent: 5, Publish: sum},
		},
		Errors: []bench.ErrorCount{{Message: "delivery timeout; the record may or may not have been written", Count: 10}},
	}
}

// TestCLIBenchOutput: -o json has the CLI's style (camelCase, durations as
// protojson writes them, every field) and every number of the run; the
// table shows each step's publish and end-to-end rows and the errors.
func TestCLIBenchOutput(t *testing.T) {
	t.Parallel()
	s, err := benchSpecOf(t, "--rate", "10MiB/s")
	require.NoError(t, err)
	res := sampleBenchResult()
	rep := newBenchReport(s, "sluice-bench-0a1b2c3d", true, true, res)
	rep.Throttled = benchThrottle{Requests: 3, Time: pbDuration(1500 * time.Millisecond)}

	var b bytes.Buffer
	require.NoError(t, writeJSONValue(&b, rep))
	requireJSONStyle(t, b.String())
	for _, want := range []string{
		`"topic": "sluice-bench-0a1b2c3d"`, `"topicCreated": true`, `"replicationFactor": 3`, `"acks": "all"`,
		`"rate": "10MiB/s"`, `"saturated": false`, `"targetRecordsPerSecond": 10240`, `"warmup": "5s"`, `"duration": "30s"`,
		`"p50": "0.002100s"`, `"p99": "0.008300s"`, `"p999": "0.012s"`, `"max": "1.500s"`, `"min": "0.000900s"`,
		`"rate": "0"`, `"saturated": true`, `"unsent": 5`, `"mibPerSecond": 9.99970703125`,
		`"message": "delivery timeout; the record may or may not have been written"`,
		`"throttled": {
    "requests": 3,
    "time": "1.500s"
  }`,
	} {
		require.Contains(t, b.String(), want)
	}
	var back struct {
		Steps []struct {
			Publish, EndToEnd map[string]any
		}
		Errors []map[string]any
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	require.Len(t, back.Steps, 2)
	require.Len(t, back.Steps[1].EndToEnd, 8, "every field, also of an empty summary")
	require.Equal(t, "0s", back.Steps[1].EndToEnd["p50"])

	b.Reset()
	require.NoError(t, printBench(&b, rep, res))
	out := b.String()
	require.Contains(t, out, "sluice-bench-0a1b2c3d (created, deleted)")
	lines := strings.Split(out, "\n")
	var rows []string
	for _, l := range lines {
		if strings.Contains(l, "publish") || strings.Contains(l, "end-to-end") {
			rows = append(rows, strings.Join(strings.Fields(l), " "))
		}
	}
	require.Equal(t, []string{
		"10MiB/s 307200 307190 10 0 10240 10.00 publish 2.10ms 8.30ms 12.00ms 1.50s",
		"end-to-end 2.10ms 8.30ms 12.00ms 1.50s",
		"saturated (behind) 10 0 0 5 0 0.00 publish 2.10ms 8.30ms 12.00ms 1.50s",
		"end-to-end 0µs 0µs 0µs 0µs",
	}, rows)
	require.Contains(t, out, "10× delivery timeout")
	require.Contains(t, out, "throttled:          3 requests, waited 1.50s (the tenant's rate quotas)\n")
}

func TestCLIBenchProgressLine(t *testing.T) {
	t.Parallel()
	r5, _ := bench.ParseRate("5MiB/s")
	cfg := bench.Config{Steps: []bench.Step{{Rate: r5}, {}}, EndToEnd: true}
	p := bench.Progress{Elapsed: 12 * time.Second, Interval: time.Second, Step: 1, Steps: 2, Warmup: true,
		Sent: 5120, Acked: 5100, AckedBytes: 5100 * 1024, Publish: bench.Summary{P50: 2100 * time.Microsecond, P99: 9 * time.Millisecond},
		EndToEnd: bench.Summary{P50: 850 * time.Microsecond, P99: 2 * time.Second}, Errors: 1}
	require.Equal(t, "  12s step 1/2 5MiB/s (warm-up): sent 5120/s, acked 5100/s (4.98 MiB/s), publish p50 2.10ms p99 9.00ms, end-to-end p50 850µs p99 2.00s, 1 error",
		progressLine(p, cfg))
	p.Step, p.Warmup = 2, false
	cfg.EndToEnd = false
	require.Contains(t, progressLine(p, cfg), "step 2/2 saturated: sent")
	require.NotContains(t, progressLine(p, cfg), "end-to-end")
	p.Draining = true
	require.Contains(t, progressLine(p, cfg), "  12s draining: ")
}
