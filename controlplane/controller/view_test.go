package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/internal/clock"
)

// viewHarness drives one controller round by round on a fixture with a
// clock the test moves.
type viewHarness struct {
	*fixture
	rc  *readCounter
	c   *Controller
	now time.Time
}

func newViewHarness(t *testing.T, e engine) *viewHarness {
	t.Helper()
	h := &viewHarness{now: t0}
	h.fixture = newFixture(t, e, h.now, h.now.Add(10*time.Second))
	h.rc = &readCounter{Store: h.s}
	c, err := New(DefaultConfig(), Deps{Store: h.rc, Clock: clock.Func(func() time.Time { return h.now })})
	require.NoError(t, err)
	h.c = c
	return h
}

// round runs one controller round and checks that the controller's view
// is the store's partitions.
func (h *viewHarness) round(t *testing.T) {
	t.Helper()
	h.c.round(t.Context())
	require.True(t, h.c.active)
	require.NotNil(t, h.c.view)
	all, err := h.s.ListAllPartitions(t.Context())
	require.NoError(t, err)
	want := map[partKey]store.Partition{}
	wantUnclean := map[string]bool{}
	for _, p := range all {
		want[partKey{p.TopicID, p.Partition.Partition}] = p.Partition
		if p.Config.UncleanLeaderElection {
			wantUnclean[p.TopicID] = true
		}
	}
	got := map[partKey]store.Partition{}
	for _, p := range h.c.view.parts {
		got[partKey{p.TopicID, p.Partition}] = p
	}
	require.Len(t, h.c.view.parts, len(got), "each partition once in the view")
	require.Equal(t, want, got, "the controller's view is the store's partitions")
	require.Equal(t, wantUnclean, h.c.view.unclean)
}

// kill lets the leases of the brokers in dead run out: the clock moves 11
// s, past every lease, and the others heartbeat. The controller's own lease
// (3 s) runs out too; it takes it again under the same epoch (same holder).
func (h *viewHarness) kill(t *testing.T, dead ...int32) {
	t.Helper()
	h.now = h.now.Add(11 * time.Second)
	brokers, err := h.s.ListBrokers(t.Context())
	require.NoError(t, err)
	for _, b := range brokers {
		if !slices.Contains(dead, b.ID) && b.Live(h.now.Add(-11*time.Second)) {
			_, err := h.s.HeartbeatBroker(t.Context(), b.ID, b.Epoch, h.now.Add(10*time.Second))
			require.NoError(t, err)
		}
	}
}

func (h *viewHarness) partitions(t *testing.T, topicID string) []store.Partition {
	t.Helper()
	ps, err := h.s.ListPartitions(t.Context(), topicID)
	require.NoError(t, err)
	return ps
}

// TestControllerViewFollowsChanges: the controller reads every partition
// once, at activation, and then follows the store's changes: it elects for
// topics created after that read, for partitions a leader changed
// (AlterPartition), by a topic's unclean-election config changed after it,
// and forgets deleted topics — each in the first round after the change.
func TestControllerViewFollowsChanges(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			h := newViewHarness(t, e)
			a := h.topic(t, "a", 3, nil)
			h.round(t)
			require.EqualValues(t, 1, h.rc.listAll.Load(), "one read of every partition at activation")

			// A topic created after the controller's read: broker 1 leads
			// partition 0 and dies.
			b := h.topic(t, "b", 3, nil)
			gone := h.topic(t, "gone", 2, nil)
			h.kill(t, 1)
			h.round(t)
			for _, id := range []string{a, b, gone} {
				for _, p := range h.partitions(t, id) {
					require.NotEqual(t, int32(1), p.Leader, "%s/%d", id, p.Partition)
					require.NotContains(t, p.ISR, int32(1), "%s/%d", id, p.Partition)
					require.EqualValues(t, 1, p.PartitionEpoch, "%s/%d", id, p.Partition)
				}
			}
			require.EqualValues(t, 8, testutil.ToFloat64(h.c.m.underReplicated))

			// A leader shrinks a partition's ISR to itself (AlterPartition),
			// then dies: the partition goes offline rather than electing the
			// member it removed. b/1 is led by 2 with ISR [2 3].
			p := h.partitions(t, b)[1]
			require.Equal(t, int32(2), p.Leader)
			p.ISR, p.PartitionEpoch = []int32{2}, p.PartitionEpoch+1
			require.NoError(t, h.s.UpdatePartition(ctx, p, p.PartitionEpoch-1))
			// A deleted topic's partitions are no longer the controller's.
			_, err := h.s.DeleteTopic(ctx, h.tenant, "gone")
			require.NoError(t, err)
			// A topic whose leader dies with the rest of its ISR, and which
			// opts in to unclean election after the controller read it.
			u := h.topic(t, "u", 1, nil)
			up := h.partitions(t, u)[0]
			up.Leader, up.ISR, up.PartitionEpoch = 2, []int32{2}, 1
			require.NoError(t, h.s.UpdatePartition(ctx, up, 0))
			h.round(t)
			_, err = h.s.UpdateTopicConfig(ctx, h.tenant, "u", h.now, func(tp store.Topic) (store.TopicConfig, error) {
				c := tp.Config
				c.UncleanLeaderElection = true
				return c, nil
			})
			require.NoError(t, err)
			h.kill(t, 1, 2)
			h.round(t)

			off := h.partitions(t, b)[1]
			require.EqualValues(t, -1, off.Leader, "offline: its only ISR member is dead")
			require.Equal(t, []int32{2}, off.ISR)
			require.Equal(t, p.PartitionEpoch+1, off.PartitionEpoch, "one change, from the leader's row")
			for _, q := range h.partitions(t, a) {
				require.Equal(t, int32(3), q.Leader, "a/%d: 3 is the only live ISR member", q.Partition)
			}
			unclean := h.partitions(t, u)[0]
			require.Equal(t, int32(3), unclean.Leader, "unclean election: the topic opted in after the controller read it")
			require.Equal(t, []int32{3}, unclean.ISR)
			require.EqualValues(t, 1, testutil.ToFloat64(h.c.m.elections.WithLabelValues(string(ReasonUncleanElection))))
			require.EqualValues(t, 1, testutil.ToFloat64(h.c.m.offline), "b/1; the deleted topic's partitions not counted")
			require.EqualValues(t, 7, testutil.ToFloat64(h.c.m.underReplicated), "a and b and u, not the deleted topic")
			require.EqualValues(t, 1, h.rc.listAll.Load(), "never a second read of every partition")
		})
	}
}

// TestControllerViewResnapshotsBehindHorizon: when the store no longer
// keeps the deletions since the controller's view (ErrChangesPruned), the
// controller reads every partition again and elects from that.
func TestControllerViewResnapshotsBehindHorizon(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			h := newViewHarness(t, e)
			h.topic(t, "x", 1, nil)
			h.topic(t, "y", 1, nil)
			h.round(t)
			since := h.c.view.version
			_, err := h.s.DeleteTopic(ctx, h.tenant, "x")
			require.NoError(t, err)
			h.env.age(t)
			_, err = h.s.DeleteTopic(ctx, h.tenant, "y") // prunes x's tombstone
			require.NoError(t, err)
			_, err = h.s.MetadataChangesSince(ctx, since)
			require.ErrorIs(t, err, store.ErrChangesPruned)

			z := h.topic(t, "z", 3, nil)
			h.kill(t, 1)
			h.round(t)
			require.EqualValues(t, 2, h.rc.listAll.Load(), "a second read of every partition, behind the horizon")
			for _, p := range h.partitions(t, z) {
				require.NotEqual(t, int32(1), p.Leader, "z/%d", p.Partition)
				require.NotContains(t, p.ISR, int32(1), "z/%d", p.Partition)
			}
			h.round(t)
			require.EqualValues(t, 2, h.rc.listAll.Load(), "then changes again")
		})
	}
}

// TestControllerSteadyStateReadsNoPartitions: rounds in which nothing
// changes, or a little does, read no partition listing: after the one at
// activation, a round reads the metadata version and, when it moved, what
// changed since.
func TestControllerSteadyStateReadsNoPartitions(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			h := newViewHarness(t, e)
			h.topic(t, "a", 6, nil)
			h.round(t)
			for range 5 {
				h.round(t)
			}
			require.EqualValues(t, 1, h.rc.listAll.Load())
			require.Zero(t, h.rc.changes.Load(), "the version did not move: no read of changes either")
			h.topic(t, "b", 3, nil)
			h.round(t)
			h.round(t)
			require.EqualValues(t, 1, h.rc.listAll.Load())
			require.EqualValues(t, 1, h.rc.changes.Load(), "one read of what changed")
		})
	}
}

// TestControllerQuietRoundsDecideWhatTimeBrings: a round after one that
// decided nothing, over the same partitions and liveness, skips Decide; the
// clock alone (no store change) still brings the decisions that are due: a
// preferred leader live for the preferred-leader delay, a broker whose
// lease ran out.
func TestControllerQuietRoundsDecideWhatTimeBrings(t *testing.T) {
	t.Parallel()
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			h := newViewHarness(t, e)
			a := h.topic(t, "a", 1, nil)
			p := h.partitions(t, a)[0]
			require.Equal(t, int32(1), p.Leader)
			// Leadership moved away from the preferred leader (an earlier
			// failover), which is in the ISR and, to this controller, just
			// seen live.
			p.Leader, p.LeaderEpoch, p.PartitionEpoch = 2, 1, 1
			require.NoError(t, h.s.UpdatePartition(t.Context(), p, 0))
			h.round(t)
			require.NotNil(t, h.c.quiet, "nothing decided: 1 has not been live for the delay")
			h.now = h.now.Add(time.Second)
			h.round(t)
			require.Equal(t, int32(2), h.partitions(t, a)[0].Leader)
			h.kill(t) // 11 s on, past the 10 s delay; everyone heartbeats
			h.round(t)
			require.Equal(t, int32(1), h.partitions(t, a)[0].Leader, "leadership back to the preferred leader")
			require.Nil(t, h.c.quiet, "it decided a change")
			h.round(t)
			require.NotNil(t, h.c.quiet)
			h.kill(t, 3)
			h.round(t)
			require.Equal(t, []int32{1, 2}, h.partitions(t, a)[0].ISR, "broker 3's lease ran out")
		})
	}
}
