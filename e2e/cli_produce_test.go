package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/stretchr/testify/require"
)

// cliIn is cli with stdin.
func cliIn(t *testing.T, cfgPath, stdin string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, plainBin, append([]string{"--cli-config", cfgPath}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=")
	cmd.Stdin = strings.NewReader(stdin)
	// A command still running after 30s is stuck: SIGQUIT has the Go
	// runtime print every goroutine's stack to stderr, which the failure
	// then shows.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sluice %v did not finish within 30s; its stderr:\n%s", args, stderr.String())
	}
	if r := testcluster.DataRace(stderr.String()); r != "" {
		t.Errorf("sluice %v reports a data race:\n%s", args, r)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// position is where a record was written.
type position struct {
	partition int32
	offset    int64
}

// parsePositions reads produce's "partition=P offset=O" lines.
func parsePositions(t *testing.T, out string) []position {
	t.Helper()
	var ps []position
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var p position
		_, err := fmt.Sscanf(l, "partition=%d offset=%d", &p.partition, &p.offset)
		require.NoError(t, err, "line %q", l)
		ps = append(ps, p)
	}
	return ps
}

// consumedRecord is a record as consume -o json prints it.
type consumedRecord struct {
	Topic       string  `json:"topic"`
	Partition   int32   `json:"partition"`
	Offset      int64   `json:"offset"`
	Timestamp   string  `json:"timestamp"`
	Key         *string `json:"key"`
	KeyBase64   bool    `json:"keyBase64"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"valueBase64"`
	Headers     []struct {
		Key   string  `json:"key"`
		Value *string `json:"value"`
	} `json:"headers"`
}

func parseConsumed(t *testing.T, out string) []consumedRecord {
	t.Helper()
	var rs []consumedRecord
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var r consumedRecord
		require.NoError(t, json.Unmarshal([]byte(l), &r), "line %q", l)
		rs = append(rs, r)
	}
	return rs
}

// TestCLIProduce produces and consumes through `sluice produce` and
// `sluice consume` against `sluice dev`: stdin lines, keys, partitions,
// headers, formats, JSON, bad input and Ctrl-C.
func TestCLIProduce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr)
	dev := func(args ...string) []string { return append([]string{"--profile", "dev"}, args...) }

	// Produce at once after creating: the brokers learn the topic a moment
	// after the control plane, which produce waits out.
	mustCLI(t, cfgPath, dev("topic", "create", "events", "-p", "3")...)

	// 1000 lines from stdin: each acknowledged, reported in input order.
	var in strings.Builder
	for i := 1; i <= 1000; i++ {
		fmt.Fprintf(&in, "%d\n", i)
	}
	out, errOut, code := cliIn(t, cfgPath, in.String(), dev("produce", "events")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "produced 1000 records to events (0 failed)")
	produced := parsePositions(t, out)
	require.Len(t, produced, 1000)

	// Keys from each line: one key, one partition.
	in.Reset()
	for i := range 300 {
		fmt.Fprintf(&in, "k%d:v%d\n", i%10, i)
	}
	out, errOut, code = cliIn(t, cfgPath, in.String(), dev("produce", "events", "--key-separator", ":", "-o", "json")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "produced 300 records to events (0 failed)")
	keyParts := map[string]int32{}
	for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var pos struct {
			Partition *int32 `json:"partition"`
			Offset    *int64 `json:"offset"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &pos), l)
		require.NotNil(t, pos.Partition, l)
		require.NotNil(t, pos.Offset, l)
		k := fmt.Sprintf("k%d", i%10)
		if p, ok := keyParts[k]; ok {
			require.Equal(t, p, *pos.Partition, "key %s moved partition", k)
		}
		keyParts[k] = *pos.Partition
	}
	spread := map[int32]bool{}
	for _, p := range keyParts {
		spread[p] = true
	}
	require.Greater(t, len(spread), 1, "10 keys should hash to more than one of 3 partitions")

	// Read everything back: every value exactly once, where produce said,
	// offsets increasing within each partition.
	out, errOut, code = cli(t, cfgPath, dev("consume", "events", "-n", "1300", "--offset", "earliest", "--format", `%p %o %k %v\n`)...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "consumed 1300 records")
	seen := map[string]position{}
	last := map[int32]int64{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		f := strings.Split(l, " ")
		require.Len(t, f, 4, l)
		p, err := strconv.ParseInt(f[0], 10, 32)
		require.NoError(t, err)
		o, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		pos := position{int32(p), o}
		if prev, ok := last[pos.partition]; ok {
			require.Greater(t, o, prev, "partition %d offsets must increase", p)
		}
		last[pos.partition] = o
		_, dup := seen[f[3]]
		require.False(t, dup, "value %s twice", f[3])
		seen[f[3]] = pos
		if strings.HasPrefix(f[3], "v") {
			n, err := strconv.Atoi(f[3][1:])
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("k%d", n%10), f[2])
			require.Equal(t, keyParts[f[2]], pos.partition)
		} else {
			require.Empty(t, f[2], "no key")
		}
	}
	for i := 1; i <= 1000; i++ {
		pos, ok := seen[strconv.Itoa(i)]
		require.True(t, ok, "value %d missing", i)
		require.Equal(t, produced[i-1], pos, "value %d", i)
	}

	// --key with repeated --value: one partition, consecutive offsets.
	ps := parsePositions(t, mustCLI(t, cfgPath, dev("produce", "events", "--key", "user-7", "--value", "a", "--value", "b", "--value", "c")...))
	require.Len(t, ps, 3)
	for i := 1; i < 3; i++ {
		require.Equal(t, ps[0].partition, ps[i].partition)
		require.Equal(t, ps[0].offset+int64(i), ps[i].offset)
	}
	// --partition.
	ps = parsePositions(t, mustCLI(t, cfgPath, dev("produce", "events", "--partition", "2", "--value", "p2", "--value", "p2b")...))
	require.Equal(t, []int32{2, 2}, []int32{ps[0].partition, ps[1].partition})

	// Headers, read back through --format and -o json.
	before := time.Now().Add(-time.Minute)
	ps = parsePositions(t, mustCLI(t, cfgPath, dev("produce", "events", "--partition", "1", "--key", "k1", "--value", "hello world", "--header", "a=1", "--header", "b=x=y")...))
	at := strconv.FormatInt(ps[0].offset, 10)
	out = mustCLI(t, cfgPath, dev("consume", "events", "--partition", "1", "--offset", at, "-n", "1", "--format", `%k|%v|%h|%p|%o|%t\n`)...)
	f := strings.Split(strings.TrimSuffix(out, "\n"), "|")
	require.Equal(t, []string{"k1", "hello world", "a=1,b=x=y", "1", at}, f[:5])
	ts, err := time.Parse(time.RFC3339Nano, f[5])
	require.NoError(t, err)
	require.True(t, ts.After(before) && ts.Before(time.Now().Add(time.Minute)), "timestamp %s", ts)
	out = mustCLI(t, cfgPath, dev("consume", "events", "--partition", "1", "--offset", at, "-n", "1", "-o", "json")...)
	rs := parseConsumed(t, out)
	require.Len(t, rs, 1)
	r := rs[0]
	require.Equal(t, "events", r.Topic)
	require.Equal(t, int32(1), r.Partition)
	require.Equal(t, ps[0].offset, r.Offset)
	require.Equal(t, "k1", *r.Key)
	require.Equal(t, "hello world", *r.Value)
	require.False(t, r.KeyBase64 || r.ValueBase64)
	require.Len(t, r.Headers, 2)
	require.Equal(t, "a", r.Headers[0].Key)
	require.Equal(t, "1", *r.Headers[0].Value)
	require.Equal(t, "b", r.Headers[1].Key)
	require.Equal(t, "x=y", *r.Headers[1].Value)
	jts, err := time.Parse(time.RFC3339Nano, r.Timestamp)
	require.NoError(t, err)
	require.True(t, jts.Equal(ts))

	// Not UTF-8 comes back as base64; an empty line is an empty value; a
	// record without a key has a null key.
	ps = parsePositions(t, mustCLIIn(t, cfgPath, "\xff\xfe\n\n", dev("produce", "events", "--partition", "0")...))
	require.Len(t, ps, 2)
	out = mustCLI(t, cfgPath, dev("consume", "events", "--partition", "0", "--offset", strconv.FormatInt(ps[0].offset, 10), "-n", "2", "-o", "json")...)
	rs = parseConsumed(t, out)
	require.Len(t, rs, 2)
	require.Nil(t, rs[0].Key)
	require.True(t, rs[0].ValueBase64)
	require.Equal(t, "//4=", *rs[0].Value)
	require.False(t, rs[1].ValueBase64)
	require.NotNil(t, rs[1].Value)
	require.Empty(t, *rs[1].Value)

	// Batches follow a topic's max.message.bytes below the SDK's 256 KiB.
	mustCLI(t, cfgPath, dev("topic", "create", "small", "-p", "1", "--config", "max.message.bytes=2000")...)
	_, errOut, code = cliIn(t, cfgPath, strings.Repeat("0123456789\n", 300), dev("produce", "small", "-q")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "produced 300 records to small (0 failed)")
	_, errOut, code = cliIn(t, cfgPath, strings.Repeat("b", 1990)+"\n", dev("produce", "small")...)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, `record 1: invalid_argument: record too large: about 2072 bytes in its batch; topic "small" takes batches up to its max.message.bytes, 2000`)

	// --timeout ends a quiet consume cleanly.
	_, errOut, code = cli(t, cfgPath, dev("consume", "events", "--follow", "--offset", "latest", "--timeout", "300ms")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "consumed 0 records")

	// Bad input: a clear message and the right exit code.
	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{[]string{"produce", "", "--value", "x"}, "", 2, "topic name must not be empty"},
		{[]string{"produce", "nope", "--value", "x"}, "", 4, `topic "nope" not found`},
		{[]string{"produce", "events", "--value", "x", "--acks", "2"}, "", 2, `acks "2": choose all, 1 or 0`},
		{[]string{"produce", "events", "--value", "x", "--acks", "1", "--idempotence"}, "", 2, "idempotence needs acks=all"},
		{[]string{"produce", "events", "--value", "x", "--header", "nokey"}, "", 2, `--header "nokey": want key=value`},
		{[]string{"produce", "events", "--value", "x", "--key-separator", ":"}, "", 2, "cannot be used with --value"},
		{[]string{"produce", "events", "--value", "x", "--partition", "3"}, "", 2, `--partition 3: topic "events" has partitions 0..2`},
		{[]string{"produce", "events", "--value", "x", "--compression", "brotli"}, "", 2, "compression: choose none, gzip, snappy, lz4 or zstd"},
		{[]string{"produce", "events"}, "ok\n" + strings.Repeat("a", 1<<20+1) + "\nok\n", 1, `record 2: record too large: a line of 1048577 bytes; topic "events" takes records up to its max.message.bytes, 1048576`},
		{[]string{"produce", "events", "--key-separator", ":"}, "k:v\nnone\n", 1, `record 2: no key separator ":" in the line; the record was not written`},
		{[]string{"consume", "", "-n", "1"}, "", 2, "topic name must not be empty"},
		{[]string{"consume", "nope", "-n", "1"}, "", 4, `topic "nope" not found`},
		{[]string{"consume", "events", "--offset", "99999", "--partition", "0", "--timeout", "10s"}, "", 1, "offset 99999 outside [0, "},
		{[]string{"consume", "events", "--offset", "soon"}, "", 2, `--offset "soon": want earliest, latest, an offset (0 or more) or @TIME`},
		{[]string{"consume", "events", "--offset", "-1"}, "", 2, `--offset "-1"`},
		{[]string{"consume", "events", "--offset", "@yesterday"}, "", 2, "after @ give an RFC 3339 time"},
		{[]string{"consume", "events", "--format", "%x"}, "", 2, "unknown placeholder %x"},
		{[]string{"consume", "events", "--partition", "5"}, "", 2, `--partition 5: topic "events" has partitions 0..2`},
		{[]string{"consume", "events", "--partition", "x"}, "", 2, `invalid argument "x"`},
		{[]string{"consume", "events", "-o", "json", "--format", "%v"}, "", 2, "--format does not apply to -o json"},
	} {
		_, errOut, code := cliIn(t, cfgPath, tc.stdin, dev(tc.args...)...)
		require.Equal(t, tc.code, code, "%q: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, "%q", tc.args)
	}
	// The record that was too large did not stop the others.
	_, errOut, _ = cliIn(t, cfgPath, "ok\n"+strings.Repeat("a", 1<<20+1)+"\nok\n", dev("produce", "events", "-q")...)
	require.Contains(t, errOut, "produced 2 records to events (1 failed)")

	// Ctrl-C stops consume cleanly, with the count.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, plainBin, append([]string{"--cli-config", cfgPath}, dev("consume", "events", "--follow", "--format", `%o\n`)...)...)
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(stdout.String(), "\n") < 1300 {
		require.True(t, time.Now().Before(deadline), "consume printed %d lines", strings.Count(stdout.String(), "\n"))
		time.Sleep(20 * time.Millisecond) // poll: until consume printed every record
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.NoError(t, cmd.Wait(), stderr.String())
	m := regexp.MustCompile(`consumed (\d+) records`).FindStringSubmatch(stderr.String())
	require.NotNil(t, m, stderr.String())
	require.Equal(t, strconv.Itoa(strings.Count(stdout.String(), "\n")), m[1])
}

// mustCLIIn is mustCLI with stdin.
func mustCLIIn(t *testing.T, cfgPath, stdin string, args ...string) string {
	t.Helper()
	out, errOut, code := cliIn(t, cfgPath, stdin, args...)
	require.Equal(t, 0, code, "sluice %v: %s%s", args, out, errOut)
	return out
}
