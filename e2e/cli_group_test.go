package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/stretchr/testify/require"
)

// cliProc is a client command running in the background.
type cliProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	err            error
}

// startCLI starts a client command with a CLI config file; it is killed
// when the test ends.
func startCLI(t *testing.T, cfgPath string, args ...string) *cliProc {
	t.Helper()
	return startCLIArgs(t, append([]string{"--cli-config", cfgPath}, args...)...)
}

// startCLIArgs starts a client command with exactly args; it is killed
// when the test ends.
func startCLIArgs(t *testing.T, args ...string) *cliProc {
	t.Helper()
	cmd := exec.Command(plainBin, args...)
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &cliProc{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if r := testcluster.DataRace(p.stderr.String()); r != "" {
			t.Errorf("sluice %v reports a data race:\n%s", args, r)
		} else if t.Failed() {
			t.Logf("%v stderr:\n%s", cmd.Args, p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *cliProc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%v still running after %s; stderr:\n%s", p.cmd.Args, timeout, p.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, p.err)
	return 0
}

// consumedPositions reads "P O V" lines (--format '%p %o %v\n').
func consumedPositions(t *testing.T, out string) map[position]string {
	t.Helper()
	got := map[position]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		var p position
		var v string
		_, err := fmt.Sscanf(l, "%d %d %s", &p.partition, &p.offset, &v)
		require.NoError(t, err, "line %q", l)
		prev, dup := got[p]
		require.False(t, dup, "partition %d offset %d consumed twice (%s, %s)", p.partition, p.offset, prev, v)
		got[p] = v
	}
	return got
}

// groupLag is the part of group describe -o json the test reads.
type groupLag struct {
	Group   string `json:"group"`
	State   string `json:"state"`
	Members []struct {
		MemberID   string `json:"memberId"`
		Assignment []struct {
			Topic      string  `json:"topic"`
			Partitions []int32 `json:"partitions"`
		} `json:"assignment"`
	} `json:"members"`
	Partitions []struct {
		Topic           string `json:"topic"`
		Partition       int32  `json:"partition"`
		CommittedOffset int64  `json:"committedOffset,string"`
		HighWatermark   int64  `json:"highWatermark,string"`
		Lag             int64  `json:"lag,string"`
		MemberID        string `json:"memberId"`
	} `json:"partitions"`
}

// TestCLIGroup consumes with `sluice consume --group` against `sluice
// dev`: two members share a topic and together read every record exactly
// once; then group list, describe, lag, reset-offsets, delete, Ctrl-C and
// bad input.
func TestCLIGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr)
	dev := func(args ...string) []string { return append([]string{"--profile", "dev"}, args...) }

	mustCLI(t, cfgPath, dev("topic", "create", "jobs", "-p", "4")...)
	// 100 records on each partition.
	produced := map[position]string{}
	for p := range 4 {
		var in strings.Builder
		for i := range 100 {
			fmt.Fprintf(&in, "v%d-%d\n", p, i)
		}
		out, errOut, code := cliIn(t, cfgPath, in.String(), dev("produce", "jobs", "--partition", fmt.Sprint(p))...)
		require.Equal(t, 0, code, errOut)
		for i, pos := range parsePositions(t, out) {
			produced[pos] = fmt.Sprintf("v%d-%d", p, i)
		}
	}
	require.Len(t, produced, 400)

	// Two members at once, 200 records each: together every record exactly
	// once (each commits what it printed when it stops, the other resumes
	// there).
	format := []string{"--format", `%p %o %v\n`}
	a := startCLI(t, cfgPath, dev(append([]string{"consume", "jobs", "--group", "g", "-n", "200"}, format...)...)...)
	b := startCLI(t, cfgPath, dev(append([]string{"consume", "jobs", "--group", "g", "-n", "200"}, format...)...)...)
	require.Equal(t, 0, a.wait(t, 30*time.Second), a.stderr.String())
	require.Equal(t, 0, b.wait(t, 30*time.Second), b.stderr.String())
	require.Contains(t, a.stderr.String(), "consumed 200 records")
	require.Contains(t, b.stderr.String(), "consumed 200 records")
	got := consumedPositions(t, a.stdout.String()+b.stdout.String())

	require.Equal(t, produced, got)

	// The group is listed, and has no lag and no members once both left.
	out := mustCLI(t, cfgPath, dev("group", "list")...)
	require.Regexp(t, `(?m)^GROUP\s+STATE\s+MEMBERS$`, out)
	require.Regexp(t, `(?m)^g\s+empty\s+0$`, out)
	var list struct {
		Groups []struct {
			Group   string `json:"group"`
			Members int    `json:"members"`
		} `json:"groups"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, dev("group", "list", "-o", "json")...)), &list))
	require.Len(t, list.Groups, 1)
	require.Equal(t, "g", list.Groups[0].Group)

	describe := func() groupLag {
		t.Helper()
		var d groupLag
		require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, dev("group", "describe", "g", "-o", "json")...)), &d))
		return d
	}
	d := describe()
	require.Equal(t, "g", d.Group)
	require.Empty(t, d.Members)
	require.Len(t, d.Partitions, 4)
	for _, p := range d.Partitions {
		require.Equal(t, "jobs", p.Topic)
		require.Equal(t, int64(0), p.Lag, "partition %d", p.Partition)
		require.Equal(t, p.HighWatermark, p.CommittedOffset, "partition %d", p.Partition)
		require.Positive(t, p.HighWatermark)
	}
	out = mustCLI(t, cfgPath, dev("group", "describe", "g")...)
	require.Regexp(t, `(?m)^state:\s+empty$`, out)
	require.Regexp(t, `(?m)^TOPIC\s+PARTITION\s+COMMITTED\s+HW\s+LAG\s+LAG-SECONDS\s+MEMBER$`, out)
	out = mustCLI(t, cfgPath, dev("group", "lag", "g")...)
	require.Regexp(t, `(?m)^jobs\s+0\s+\d+\s+\d+\s+0\s+0\.0\s+-$`, out)
	require.Contains(t, out, "total lag: 0 records, 0.0 seconds\n")

	// Back to the start: the group's lag is everything.
	out = mustCLI(t, cfgPath, dev("group", "reset-offsets", "g", "--topic", "jobs", "--to", "earliest")...)
	for p := range int32(4) {
		require.Regexp(t, fmt.Sprintf(`(?m)^jobs\s+%d\s+0$`, p), out)
	}
	require.Contains(t, mustCLI(t, cfgPath, dev("group", "lag", "g")...), "total lag: 400 records")

	// One member, stopped by Ctrl-C after it read everything: it commits
	// on the way out. While it runs the group is active: describe shows
	// it, reset-offsets and delete are refused.
	c := startCLI(t, cfgPath, dev(append([]string{"consume", "jobs", "--group", "g", "--commit", "manual"}, format...)...)...)
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(c.stdout.String(), "\n") < 400 {
		require.True(t, time.Now().Before(deadline), "consume printed %d lines; stderr:\n%s", strings.Count(c.stdout.String(), "\n"), c.stderr.String())
		time.Sleep(20 * time.Millisecond) // poll: until consume printed every record
	}
	require.Equal(t, produced, consumedPositions(t, c.stdout.String()))
	d = describe()
	require.Len(t, d.Members, 1)
	require.Len(t, d.Members[0].Assignment, 1)
	require.ElementsMatch(t, []int32{0, 1, 2, 3}, d.Members[0].Assignment[0].Partitions)
	for _, p := range d.Partitions {
		require.Equal(t, d.Members[0].MemberID, p.MemberID)
		require.Equal(t, int64(0), p.CommittedOffset, "--commit manual: nothing committed over the reset before it stops")
		require.Equal(t, int64(100), p.Lag)
	}
	_, errOut, code := cli(t, cfgPath, dev("group", "reset-offsets", "g", "--topic", "jobs", "--to", "latest")...)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, `group "g" has members`)
	require.Contains(t, errOut, "--force")
	_, errOut, code = cli(t, cfgPath, dev("group", "delete", "g")...)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, `group "g" has members: stop them first`)
	require.NoError(t, c.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, c.wait(t, 15*time.Second), c.stderr.String())
	require.Contains(t, c.stderr.String(), "consumed 400 records")
	require.Contains(t, mustCLI(t, cfgPath, dev("group", "lag", "g")...), "total lag: 0 records")

	// reset-offsets again, then -n 400 reads everything once more.
	mustCLI(t, cfgPath, dev("group", "reset-offsets", "g", "--topic", "jobs", "--to", "earliest")...)
	out, errOut, code = cli(t, cfgPath, dev(append([]string{"consume", "jobs", "--group", "g", "-n", "400", "--commit", "each"}, format...)...)...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "consumed 400 records")
	require.Equal(t, produced, consumedPositions(t, out))

	// A caught-up group with --timeout stops by itself, having read nothing.
	_, errOut, code = cli(t, cfgPath, dev("consume", "jobs", "--group", "g", "--timeout", "500ms")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "consumed 0 records")

	// Delete: the group is gone.
	require.Equal(t, "deleted group g\n", mustCLI(t, cfgPath, dev("group", "delete", "g")...))
	_, errOut, code = cli(t, cfgPath, dev("group", "describe", "g")...)
	require.Equal(t, 4, code, errOut)
	require.Contains(t, errOut, `group "g" not found`)
	require.NotRegexp(t, regexp.MustCompile(`(?m)^g\s`), mustCLI(t, cfgPath, dev("group", "list")...))

	// Bad input: a clear message and the right exit code.
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"group", "describe"}, 2, "accepts 1 arg(s), received 0"},
		{[]string{"group", "lag", "nope"}, 4, `group "nope" not found`},
		{[]string{"group", "delete", "nope"}, 4, `group "nope" not found`},
		{[]string{"group", "reset-offsets", "g", "--topic", "nope", "--to", "earliest"}, 4, `topic "nope" not found`},
		{[]string{"group", "reset-offsets", "g", "--topic", "jobs", "--to", "soon"}, 2, `--to "soon"`},
		{[]string{"consume", "jobs", "--group", "g", "--commit", "bogus"}, 2, `--commit "bogus": choose interval, each, every or manual`},
		{[]string{"consume", "jobs", "--group", "g", "--partition", "1"}, 2, "--partition does not apply with --group"},
		{[]string{"consume", "jobs", "--group", "g", "--offset", "3"}, 2, "want earliest or latest"},
		{[]string{"consume", "nope", "--group", "g", "-n", "1"}, 4, `topic "nope" not found`},
	} {
		_, errOut, code := cli(t, cfgPath, dev(tc.args...)...)
		require.Equal(t, tc.code, code, "%q: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, "%q", tc.args)
	}
}
