package client_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// staticMember is a GroupConsumer running Run in the background, recording
// what it processed and what it was given and asked to give up.
type staticMember struct {
	gc   *client.GroupConsumer
	stop context.CancelFunc
	done chan error

	mu        sync.Mutex
	processed map[int32][]int64 // offsets per partition, in order
	values    []int
	revoked   []client.TopicPartition
	assigned  []client.TopicPartition
}

func startStaticMember(t *testing.T, c *client.Client, group, topic string, opts ...client.GroupOption) *staticMember {
	t.Helper()
	m := &staticMember{done: make(chan error, 1), processed: map[int32][]int64{}}
	opts = append(opts, client.WithCommitMode(client.CommitEach()),
		client.WithOnAssigned(func(tps []client.TopicPartition) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.assigned = append(m.assigned, tps...)
		}),
		client.WithOnRevoked(func(tps []client.TopicPartition) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.revoked = append(m.revoked, tps...)
		}))
	jctx, jcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer jcancel()
	gc, err := c.NewGroupConsumer(jctx, group, []string{topic}, opts...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	m.gc, m.stop = gc, cancel
	go func() {
		m.done <- gc.Run(ctx, func(_ context.Context, r *client.Record) error {
			v, err := strconv.Atoi(string(r.Value))
			if err != nil {
				return err
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			m.processed[r.Partition] = append(m.processed[r.Partition], r.Offset)
			m.values = append(m.values, v)
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = gc.Close(cctx)
	})
	return m
}

func (m *staticMember) snapshot() (values []int, revoked []client.TopicPartition, processed map[int32][]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	processed = map[int32][]int64{}
	for p, offs := range m.processed {
		processed[p] = slices.Clone(offs)
	}
	return slices.Clone(m.values), slices.Clone(m.revoked), processed
}

// TestGroupStaticMemberReplacedWhileAlive: a second process joins with the
// instance id of a live static member (what a restarted pod does when the
// old one was killed, or is only paused). It gets the old member's
// partitions at once, at the committed offsets, with no rebalance: the
// other member is asked to revoke nothing and the group epoch does not
// move. The old member learns at its next heartbeat that it was fenced:
// its Run fails with ErrInstanceFenced, it stops and never rejoins, and
// its commits are refused as fenced. Nothing is lost.
func TestGroupStaticMemberReplacedWhileAlive(t *testing.T) {
	topic, group := fresh("static"), fresh("static-group")
	const n = 400
	createTopic(t, topic, 4, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(context.Background())
	produce := func(from, to int) {
		t.Helper()
		var recs []*client.Record
		for i := from; i < to; i++ {
			recs = append(recs, &client.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte(strconv.Itoa(i))})
		}
		require.NoError(t, p.ProduceSync(ctx, recs...))
	}
	admin, err := c.GroupAdmin()
	require.NoError(t, err)
	describe := func() (*sluicev1.DescribeGroupResponse, error) {
		res, err := admin.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: group}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	// member returns the description of the member with instance id
	// (dynamic: "").
	member := func(d *sluicev1.DescribeGroupResponse, instance string) *sluicev1.GroupMember {
		for _, m := range d.GetMembers() {
			if m.GetInstanceId() == instance {
				return m
			}
		}
		return nil
	}
	partitionsOf := func(m *sluicev1.GroupMember) []int32 {
		var out []int32
		for _, tp := range m.GetAssignment() {
			out = append(out, tp.GetPartitions()...)
		}
		slices.Sort(out)
		return out
	}
	stable := func() (*sluicev1.DescribeGroupResponse, error) {
		d, err := describe()
		if err != nil {
			return nil, err
		}
		if d.GetState() != "stable" || len(d.GetMembers()) != 2 {
			return nil, fmt.Errorf("group %s with %d members", d.GetState(), len(d.GetMembers()))
		}
		return d, nil
	}
	// committedAll returns how many records the group committed in all,
	// and an error until that is want.
	committedAll := func(want int64) (int64, error) {
		res, err := admin.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: group}))
		if err != nil {
			return 0, err
		}
		var sum int64
		for _, o := range res.Msg.GetOffsets() {
			sum += max(o.GetOffset(), 0)
		}
		if len(res.Msg.GetOffsets()) != 4 || sum != want {
			return sum, fmt.Errorf("committed %v, want %d records in all", res.Msg.GetOffsets(), want)
		}
		return sum, nil
	}

	produce(0, n)
	a := startStaticMember(t, c, group, topic)                                             // the other member: dynamic
	x1 := startStaticMember(t, newClient(t), group, topic, client.WithInstanceID("pod-x")) // the first process of pod-x
	var before *sluicev1.DescribeGroupResponse
	// Each record is committed on its own (CommitEach), an acks=all write:
	// a loaded machine takes long for 400, so the wait fails only when the
	// commits stop coming.
	testenv.WaitProgress(t, 30*time.Second, "a stable group of two, everything consumed and committed", func() (int64, error) {
		committed, err := committedAll(n)
		if err != nil {
			return committed, err
		}
		d, err := stable()
		if err != nil {
			return committed, err
		}
		before = d
		return committed, nil
	})
	aBefore := partitionsOf(member(before, ""))
	x1Member := member(before, "pod-x")
	require.NotNil(t, x1Member)
	xParts := partitionsOf(x1Member)
	require.Len(t, xParts, 2, "%v", before)
	_, aRevokedBefore, _ := a.snapshot()

	// pod-x starts again while the old process still runs.
	x2 := startStaticMember(t, newClient(t), group, topic, client.WithInstanceID("pod-x"))
	var after *sluicev1.DescribeGroupResponse
	testenv.Wait(t, 30*time.Second, "the new process holding pod-x's partitions", func() error {
		d, err := stable()
		if err != nil {
			return err
		}
		m := member(d, "pod-x")
		if m == nil || m.GetMemberId() == x1Member.GetMemberId() || !slices.Equal(partitionsOf(m), xParts) {
			return fmt.Errorf("pod-x is %v", m)
		}
		after = d
		return nil
	})
	require.Equal(t, before.GetGroupEpoch(), after.GetGroupEpoch(), "no rebalance")
	require.Equal(t, before.GetRebalances(), after.GetRebalances(), "no rebalance")
	require.Equal(t, aBefore, partitionsOf(member(after, "")), "the other member keeps its partitions")
	require.Equal(t, x1Member.GetMemberEpoch(), member(after, "pod-x").GetMemberEpoch(), "the old member's epoch")

	// The old process learns it was fenced, and stops.
	select {
	case err := <-x1.done:
		require.ErrorIs(t, err, client.ErrInstanceFenced)
		require.Equal(t, sluicev1.GroupError_REASON_FENCED_INSTANCE_ID, client.ErrorDetailReason(err))
		require.Contains(t, err.Error(), `instance id "pod-x"`)
	case <-time.After(30 * time.Second):
		t.Fatalf("the old pod-x process was not fenced: %s", x1.gc.Debug())
	}
	require.ErrorIs(t, x1.gc.Commit(ctx), client.ErrInstanceFenced, "a fenced member commits nothing")
	// Its commits are refused as fenced at the coordinator too.
	_, err = admin.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: group,
		MemberId: x1Member.GetMemberId(), InstanceId: "pod-x", MemberEpoch: x1Member.GetMemberEpoch(),
		Offsets: []*sluicev1.PartitionOffset{{Topic: topic, Partition: xParts[0], Offset: 0}}}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.GroupError_REASON_FENCED_INSTANCE_ID, client.ErrorDetailReason(err))
	require.NoError(t, x1.gc.Close(ctx), "a fenced member closes without committing or leaving")

	// More records: the group reads all of them, the new process from
	// where the old one committed, the old one none.
	x1Values, _, _ := x1.snapshot()
	produce(n, 2*n)
	defer func() { // what each member held, for a failure below
		if t.Failed() {
			for name, m := range map[string]*staticMember{"a": a, "x2": x2} {
				_, _, processed := m.snapshot()
				last := map[int32]int64{}
				for p, offs := range processed {
					last[p] = offs[len(offs)-1]
				}
				t.Logf("%s: %s; last offset processed per partition %v", name, m.gc.Debug(), last)
			}
		}
	}()
	testenv.WaitProgress(t, 30*time.Second, "every record consumed", func() (int64, error) {
		av, _, _ := a.snapshot()
		xv, _, _ := x2.snapshot()
		seen := map[int]bool{}
		for _, v := range slices.Concat(av, x1Values, xv) {
			seen[v] = true
		}
		for i := range 2 * n {
			if !seen[i] {
				return int64(len(seen)), fmt.Errorf("value %d not consumed (%d of %d)", i, len(seen), 2*n)
			}
		}
		committed, err := committedAll(2 * n)
		return int64(len(seen)) + committed, err
	})
	x1After, _, _ := x1.snapshot()
	require.Equal(t, x1Values, x1After, "the fenced process processed nothing more")
	av, aRevoked, _ := a.snapshot()
	require.Equal(t, aRevokedBefore, aRevoked, "the other member was asked to revoke nothing")
	xv, xRevoked, xProcessed := x2.snapshot()
	require.Empty(t, xRevoked)
	// Each record once: the replacement resumed exactly at the committed
	// offsets (everything before was committed).
	count := map[int]int{}
	for _, v := range slices.Concat(av, x1Values, xv) {
		count[v]++
	}
	for v, k := range count {
		require.Equal(t, 1, k, "value %d consumed %d times", v, k)
	}
	var got []int32
	for part := range xProcessed {
		got = append(got, part)
	}
	slices.Sort(got)
	require.Equal(t, xParts, got, "the new process consumed exactly pod-x's partitions")
	// The fenced process did not come back: the new one is still the
	// member, at the same epoch, and was never fenced itself.
	d, err := stable()
	require.NoError(t, err)
	require.Equal(t, before.GetGroupEpoch(), d.GetGroupEpoch())
	require.Equal(t, member(after, "pod-x").GetMemberId(), member(d, "pod-x").GetMemberId())
	select {
	case err := <-x2.done:
		t.Fatalf("the new pod-x process stopped: %v", err)
	default:
	}
	require.NoError(t, x2.gc.Commit(ctx))
}
