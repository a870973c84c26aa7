package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// benchJSON is `sluice bench -o json` as docs/benchmarking.md describes it.
type benchJSON struct {
	Topic             string `json:"topic"`
	TopicCreated      bool   `json:"topicCreated"`
	TopicDeleted      bool   `json:"topicDeleted"`
	Partitions        int32  `json:"partitions"`
	ReplicationFactor int32  `json:"replicationFactor"`
	Acks              string `json:"acks"`
	RecordSize        int    `json:"recordSize"`
	EndToEnd          bool   `json:"endToEnd"`
	Interrupted       bool   `json:"interrupted"`
	Drained           bool   `json:"drained"`
	Steps             []struct {
		Rate                   string         `json:"rate"`
		Saturated              bool           `json:"saturated"`
		TargetRecordsPerSecond float64        `json:"targetRecordsPerSecond"`
		Warmup                 string         `json:"warmup"`
		Duration               string         `json:"duration"`
		Sent                   int64          `json:"sent"`
		Unsent                 int64          `json:"unsent"`
		Acked                  int64          `json:"acked"`
		Failed                 int64          `json:"failed"`
		Consumed               int64          `json:"consumed"`
		RecordsPerSecond       float64        `json:"recordsPerSecond"`
		MiBPerSecond           float64        `json:"mibPerSecond"`
		Publish                map[string]any `json:"publish"`
		EndToEnd               map[string]any `json:"endToEnd"`
	} `json:"steps"`
	Errors []struct {
		Message string `json:"message"`
		Count   int64  `json:"count"`
	} `json:"errors"`
}

// requireLatencies checks a latency summary: count records, every
// quantile a protojson duration, in order min ≤ p50 ≤ p90 ≤ p99 ≤ p99.9 ≤
// max, and mean within [min, max].
func requireLatencies(t *testing.T, s map[string]any, count int64, what string) {
	t.Helper()
	require.EqualValues(t, count, s["count"], what)
	d := map[string]time.Duration{}
	for _, k := range []string{"min", "mean", "p50", "p90", "p99", "p999", "max"} {
		v, ok := s[k].(string)
		require.True(t, ok, "%s %s is a protojson duration: %v", what, k, s[k])
		require.True(t, strings.HasSuffix(v, "s"), "%s %s: %q", what, k, v)
		var err error
		d[k], err = time.ParseDuration(v)
		require.NoError(t, err, "%s %s", what, k)
	}
	require.Positive(t, d["p50"], what)
	order := []string{"min", "p50", "p90", "p99", "p999", "max"}
	for i := 1; i < len(order); i++ {
		require.LessOrEqual(t, d[order[i-1]], d[order[i]], "%s: %s ≤ %s in %v", what, order[i-1], order[i], s)
	}
	require.LessOrEqual(t, d["min"], d["mean"], what)
	require.LessOrEqual(t, d["mean"], d["max"], what)
}

// TestCLIBench runs the real binary's bench against `sluice dev` for
// a few seconds: two fixed-rate steps on a throwaway RF 3 topic, -o json,
// then into an existing topic. The JSON is complete and sane (records
// acknowledged and read back, none failed, latencies ordered), the
// throwaway topic is gone and the existing one kept. No assertion on
// speed. The operator listeners serve the Go profiles; the endpoint and
// the brokers' client ports do not.
func TestCLIBench(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	dev := startDev(t, dataDir, cfgPath, addr)

	out, errOut, code := cli(t, cfgPath, "--profile", "dev", "bench", "--steps", "100,200/s", "--step-duration", "1500ms", "--warmup", "500ms", "-o", "json")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	var res benchJSON
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.True(t, strings.HasPrefix(res.Topic, "sluice-bench-"), res.Topic)
	require.True(t, res.TopicCreated)
	require.True(t, res.TopicDeleted)
	require.EqualValues(t, 3, res.Partitions)
	require.EqualValues(t, 3, res.ReplicationFactor, "dev has 3 brokers")
	require.Equal(t, "all", res.Acks)
	require.Equal(t, 1024, res.RecordSize)
	require.True(t, res.EndToEnd)
	require.False(t, res.Interrupted)
	require.True(t, res.Drained, "every record had its outcome and was read back")
	require.Empty(t, res.Errors)
	require.Len(t, res.Steps, 2)
	for i, s := range res.Steps {
		require.Equal(t, []string{"100/s", "200/s"}[i], s.Rate)
		require.False(t, s.Saturated)
		require.InDelta(t, []float64{100, 200}[i], s.TargetRecordsPerSecond, 0)
		require.Equal(t, "0.500s", s.Warmup)
		require.Equal(t, "1.500s", s.Duration)
		require.Positive(t, s.Acked, "step %d", i+1)
		require.Equal(t, s.Sent, s.Acked, "step %d: every record sent was acknowledged", i+1)
		require.Zero(t, s.Failed)
		require.Equal(t, s.Acked, s.Consumed, "step %d: and read back", i+1)
		require.Positive(t, s.RecordsPerSecond)
		require.Positive(t, s.MiBPerSecond)
		requireLatencies(t, s.Publish, s.Acked, "publish")
		requireLatencies(t, s.EndToEnd, s.Consumed, "end-to-end")
	}
	// The progress went to stderr, a line a second.
	require.Contains(t, errOut, "bench: steps 100/s, 200/s")
	require.Regexp(t, `(?m)^\s+\d+s step \d/2 \S+: sent \d+/s, acked \d+/s`, errOut)
	require.NotContains(t, mustCLI(t, cfgPath, "--profile", "dev", "topic", "list"), "sluice-bench-", "the throwaway topic is deleted")

	// Into an existing topic: it is kept, and read as it is.
	mustCLI(t, cfgPath, "--profile", "dev", "topic", "create", "ledger", "-p", "2")
	out = mustCLI(t, cfgPath, "--profile", "dev", "bench", "--topic", "ledger", "--rate", "200", "--duration", "1s", "--warmup", "0s", "-q")
	require.Contains(t, out, "ledger (existing)")
	require.Regexp(t, `(?m)^partitions:\s+2$`, out)
	// A loaded machine may not keep up with even 200/s: the row then says
	// so ("200/s (behind)"), which is the tool reporting truthfully, not a
	// failure.
	require.Regexp(t, `(?m)^200/s( \(behind\))?\s+\d+\s+\d+\s+0\s+`, out, "a row for the step, no failure")
	require.Contains(t, out, "end-to-end")
	require.Contains(t, mustCLI(t, cfgPath, "--profile", "dev", "topic", "list"), "ledger")

	// Profiles: on every operator listener, not on the ports tenants reach.
	banner := dev.out.String()
	ops := regexp.MustCompile(`http://(\S+)/metrics \((?:control plane|broker \d)\)`).FindAllStringSubmatch(banner, -1)
	require.Len(t, ops, 4, banner)
	hc := &http.Client{Timeout: 30 * time.Second}
	get := func(url string) (int, []byte) {
		res, err := hc.Get(url)
		require.NoError(t, err, url)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err, url)
		return res.StatusCode, b
	}
	for _, m := range ops {
		code, body := get("http://" + m[1] + "/debug/pprof/")
		require.Equal(t, http.StatusOK, code, m[1])
		require.Contains(t, string(body), "goroutine")
	}
	code, body := get("http://" + ops[1][1] + "/debug/pprof/profile?seconds=1")
	require.Equal(t, http.StatusOK, code, "%s", body)
	_, err := gzip.NewReader(bytes.NewReader(body))
	require.NoError(t, err, "a CPU profile from broker 1 (gzip-compressed protobuf)")
	tenantPorts := append([]string{addr}, strings.Fields(regexp.MustCompile(`brokers\s+(.+)`).FindStringSubmatch(banner)[1])...)
	require.Len(t, tenantPorts, 4)
	for _, a := range tenantPorts {
		code, _ := get("http://" + a + "/debug/pprof/")
		require.Equal(t, http.StatusNotFound, code, a)
	}
}
