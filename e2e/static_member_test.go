package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// staticGroupRun is the world of the static membership tests: a cluster, a
// topic fed by the test, an SDK member (the "other" member, which records
// what it is given and asked to give up) and `sluice consume --group
// --instance-id pod-x` processes.
type staticGroupRun struct {
	t        *testing.T
	c        *testcluster.Cluster
	apiKey   string
	admin    *groupAdmin
	producer *client.Producer

	other        *client.GroupConsumer
	otherStopped chan error
	mu           sync.Mutex
	otherValues  []int
	otherRevoked []client.TopicPartition
	procs        []*cliProc // every pod-x process started, in order
}

const (
	staticTopic      = "events"
	staticGroup      = "billing"
	staticPartitions = 4
	staticInstance   = "pod-x"
)

func newStaticGroupRun(t *testing.T, session time.Duration) *staticGroupRun {
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		GroupHeartbeatInterval: 250 * time.Millisecond, GroupSessionTimeout: session,
	})
	tc := c.NewClient(t, "acme", staticTopic, staticPartitions, 2)
	ctx := t.Context()
	cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	p, err := cl.NewProducer(ctx, client.WithManualPartitioner(), client.WithAcks(client.AcksAll))
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	})
	r := &staticGroupRun{t: t, c: c, apiKey: tc.APIKey, admin: &groupAdmin{cl: cl, group: staticGroup, topic: staticTopic},
		producer: p, otherStopped: make(chan error, 1)}

	// The other member: at-least-once, a commit per record.
	jctx, jcancel := context.WithTimeout(ctx, 60*time.Second)
	defer jcancel()
	r.other, err = cl.NewGroupConsumer(jctx, staticGroup, []string{staticTopic}, client.WithCommitMode(client.CommitEach()),
		client.WithOnRevoked(func(tps []client.TopicPartition) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.otherRevoked = append(r.otherRevoked, tps...)
		}))
	require.NoError(t, err)
	runCtx, stopRun := context.WithCancel(ctx)
	go func() {
		r.otherStopped <- r.other.Run(runCtx, func(_ context.Context, rec *client.Record) error {
			v, err := strconv.Atoi(string(rec.Value))
			if err != nil {
				return err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.otherValues = append(r.otherValues, v)
			return nil
		})
	}()
	t.Cleanup(func() {
		stopRun()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.other.Close(cctx)
	})
	return r
}

// produce writes values from..to-1, value v to partition v mod 4.
func (r *staticGroupRun) produce(from, to int) {
	r.t.Helper()
	var recs []*client.Record
	for v := from; v < to; v++ {
		recs = append(recs, &client.Record{Topic: staticTopic, Partition: int32(v % staticPartitions), Value: []byte(strconv.Itoa(v))})
	}
	require.NoError(r.t, r.producer.ProduceSync(r.t.Context(), recs...))
}

// startPodX starts `sluice consume events --group billing --instance-id
// pod-x`, committing after each record it prints.
func (r *staticGroupRun) startPodX() *cliProc {
	r.t.Helper()
	p := startCLIArgs(r.t, "--endpoint", r.c.ControlPlane(), "--api-key", r.apiKey,
		"consume", staticTopic, "--group", staticGroup, "--instance-id", staticInstance,
		"--commit", "each", "--format", `%p %o %v\n`)
	r.procs = append(r.procs, p)
	return p
}

// printed returns what a consume process printed so far: offsets per
// partition in order, and the values.
func printed(t *testing.T, p *cliProc) (map[int32][]int64, []int) {
	t.Helper()
	out := p.stdout.String()
	out = out[:strings.LastIndexByte(out, '\n')+1] // complete lines only
	offs := map[int32][]int64{}
	var values []int
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		var part int32
		var off int64
		var v int
		_, err := fmt.Sscanf(l, "%d %d %d", &part, &off, &v)
		require.NoError(t, err, "line %q", l)
		offs[part] = append(offs[part], off)
		values = append(values, v)
	}
	return offs, values
}

// counts returns how often each value was processed, by the other member
// and every pod-x process.
func (r *staticGroupRun) counts() map[int]int {
	r.mu.Lock()
	out := map[int]int{}
	for _, v := range r.otherValues {
		out[v]++
	}
	r.mu.Unlock()
	for _, p := range r.procs {
		_, vs := printed(r.t, p)
		for _, v := range vs {
			out[v]++
		}
	}
	return out
}

func (r *staticGroupRun) revokedFromOther() []client.TopicPartition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.otherRevoked)
}

// waitConsumed waits until every value below n was processed, with the
// group stable with two members, and, if committed, the group committed
// everything (n records over the 4 partitions); it returns the group's
// description.
func (r *staticGroupRun) waitConsumed(n int, committed bool, alive ...*cliProc) *sluicev1.DescribeGroupResponse {
	r.t.Helper()
	ctx := r.t.Context()
	var d *sluicev1.DescribeGroupResponse
	testenv.Wait(r.t, 60*time.Second, fmt.Sprintf("%d records consumed (committed: %v) by a stable group of two", n, committed), func() error {
		for _, p := range alive {
			if exited(p) {
				return testenv.Permanent(fmt.Errorf("%v exited: %v\n%s", p.cmd.Args, p.err, p.stderr.String()))
			}
		}
		seen := r.counts()
		for v := range n {
			if seen[v] == 0 {
				return fmt.Errorf("value %d not consumed yet (%d of %d)", v, len(seen), n)
			}
		}
		var err error
		if d, err = r.admin.describe(ctx); err != nil {
			return err
		}
		if err := stableWithAll(d, staticTopic, 2, staticPartitions); err != nil {
			return err
		}
		if committed {
			return r.committedAll(n)
		}
		return nil
	})
	return d
}

// committedAll checks that the group committed n records over the 4
// partitions.
func (r *staticGroupRun) committedAll(n int) error {
	offs, err := r.admin.committed(r.t.Context())
	if err != nil {
		return err
	}
	for part := range int32(staticPartitions) {
		if offs[part] != int64(n/staticPartitions) {
			return fmt.Errorf("committed %v, want %d on each partition", offs, n/staticPartitions)
		}
	}
	return nil
}

// waitReplaced waits until the group is stable with pod-x held by a member
// id other than old, with the partitions want.
func (r *staticGroupRun) waitReplaced(old string, want []int32, alive *cliProc) *sluicev1.DescribeGroupResponse {
	r.t.Helper()
	var d *sluicev1.DescribeGroupResponse
	testenv.Wait(r.t, 60*time.Second, "the new pod-x process holding the old one's partitions", func() error {
		if exited(alive) {
			return testenv.Permanent(fmt.Errorf("the new pod-x process exited: %v\n%s", alive.err, alive.stderr.String()))
		}
		var err error
		if d, err = r.admin.describe(r.t.Context()); err != nil {
			return err
		}
		if err := stableWithAll(d, staticTopic, 2, staticPartitions); err != nil {
			return err
		}
		m := memberWithInstance(d, staticInstance)
		if m == nil || m.GetMemberId() == old || !slices.Equal(assignedPartitions(m), want) {
			return fmt.Errorf("pod-x is %v, want a new member id holding %v", m, want)
		}
		return nil
	})
	return d
}

func memberWithInstance(d *sluicev1.DescribeGroupResponse, instance string) *sluicev1.GroupMember {
	for _, m := range d.GetMembers() {
		if m.GetInstanceId() == instance {
			return m
		}
	}
	return nil
}

func assignedPartitions(m *sluicev1.GroupMember) []int32 {
	var out []int32
	for _, tp := range m.GetAssignment() {
		out = append(out, tp.GetPartitions()...)
	}
	slices.Sort(out)
	return out
}

func exited(p *cliProc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// TestGroupStaticMemberRestartAfterKill is KIP-345's promise with real
// processes: `sluice consume --group billing --instance-id pod-x` shares a
// topic with another member, is killed with SIGKILL, and the same command
// started again within the session timeout gets the same partitions at
// once, with no rebalance (the other member is asked to revoke nothing; the
// group epoch and rebalance count do not move), and consumes on from the
// committed offsets: every record is read, none twice (everything printed
// before the kill was committed).
func TestGroupStaticMemberRestartAfterKill(t *testing.T) {
	t.Parallel()
	const n = 200
	session := 20 * time.Second
	r := newStaticGroupRun(t, session)
	r.produce(0, n)
	x1 := r.startPodX()
	before := r.waitConsumed(n, true, x1)
	old := memberWithInstance(before, staticInstance)
	require.NotNil(t, old)
	xParts := assignedPartitions(old)
	otherParts := assignedPartitions(memberWithInstance(before, ""))
	require.Len(t, xParts, 2)
	revokedBefore := r.revokedFromOther()

	require.NoError(t, x1.cmd.Process.Kill())
	<-x1.done
	killedAt := time.Now()
	x2 := r.startPodX()
	after := r.waitReplaced(old.GetMemberId(), xParts, x2)
	took := time.Since(killedAt)
	t.Logf("pod-x back %s after the kill (session timeout %s)", took.Round(time.Millisecond), session)
	require.Less(t, took, session, "replaced before the session timeout could have moved anything")
	require.Equal(t, before.GetGroupEpoch(), after.GetGroupEpoch(), "no rebalance")
	require.Equal(t, before.GetRebalances(), after.GetRebalances(), "no rebalance")
	require.Equal(t, otherParts, assignedPartitions(memberWithInstance(after, "")))

	r.produce(n, 2*n)
	final := r.waitConsumed(2*n, true, x2)
	require.Equal(t, before.GetGroupEpoch(), final.GetGroupEpoch(), "no rebalance")
	require.Equal(t, revokedBefore, r.revokedFromOther(), "the other member was asked to revoke nothing")
	for v, k := range r.counts() {
		require.Equal(t, 1, k, "value %d processed %d times", v, k)
	}
	// The new process read pod-x's partitions, from where the old one
	// committed (n/4 per partition) on.
	offs, _ := printed(t, x2)
	var got []int32
	for part, o := range offs {
		got = append(got, part)
		require.Equal(t, int64(n/staticPartitions), o[0], "partition %d starts at the committed offset", part)
	}
	slices.Sort(got)
	require.Equal(t, xParts, got)

	require.NoError(t, x2.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, x2.wait(t, 30*time.Second), x2.stderr.String())
}

// TestGroupStaticMemberFencedAcrossCoordinatorFailover: pod-x's process is
// paused (SIGSTOP) and a new one with the same instance id replaces it;
// then the new one pauses too and the group coordinator's broker is
// SIGKILLed. The old process resumes first, so it reaches the new
// coordinator before the current one rejoins: the new coordinator knows
// from its offsets partition that pod-x's latest member id is not the old
// process's, refuses it as fenced, and the old process exits (code 1,
// saying why) instead of rejoining and taking the partitions. The current
// process resumes, rejoins and consumes on; nothing is lost.
func TestGroupStaticMemberFencedAcrossCoordinatorFailover(t *testing.T) {
	t.Parallel()
	const n = 200
	r := newStaticGroupRun(t, 20*time.Second)
	ctx := t.Context()
	r.produce(0, n)
	x1 := r.startPodX()
	before := r.waitConsumed(n, true, x1)
	old := memberWithInstance(before, staticInstance)
	require.NotNil(t, old)
	xParts := assignedPartitions(old)

	require.NoError(t, x1.cmd.Process.Signal(syscall.SIGSTOP))
	x2 := r.startPodX()
	replaced := r.waitReplaced(old.GetMemberId(), xParts, x2)
	require.Equal(t, before.GetGroupEpoch(), replaced.GetGroupEpoch(), "no rebalance")

	require.NoError(t, x2.cmd.Process.Signal(syscall.SIGSTOP))
	coord := r.admin.findCoordinator(t, ctx, func(int32) bool { return true })
	r.c.Kill(coord)
	moved := r.admin.findCoordinator(t, ctx, func(id int32) bool { return id != coord })
	t.Logf("coordinator moved from broker %d to %d", coord, moved)

	_, x1Values := printed(t, x1)
	require.NoError(t, x1.cmd.Process.Signal(syscall.SIGCONT))
	code := x1.wait(t, 60*time.Second)
	require.Equal(t, 1, code, "the old process stops with an error: %s", x1.stderr.String())
	require.Contains(t, x1.stderr.String(), "static group member fenced")
	require.Contains(t, x1.stderr.String(), `instance id "pod-x"`)
	_, x1Final := printed(t, x1)
	require.Equal(t, x1Values, x1Final, "the fenced process printed nothing more")

	// The current process resumes, rejoins and reads on, and commits
	// everything, what it processed while rejoining included.
	require.NoError(t, x2.cmd.Process.Signal(syscall.SIGCONT))
	r.produce(n, 2*n)
	final := r.waitConsumed(2*n, true, x2)
	require.NotNil(t, memberWithInstance(final, staticInstance), "pod-x is a member: %v", final)
	require.False(t, exited(x2), "the current process was not fenced")
	require.NoError(t, x2.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, x2.wait(t, 30*time.Second), x2.stderr.String())
}
