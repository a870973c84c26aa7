package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func setupFollower(t *testing.T, hw int64) *Follower {
	t.Helper()
	f, err := NewFollower(FollowerParams{Self: 2, BrokerEpoch: 5, Leader: 1, LeaderEpoch: 5, HW: hw})
	require.NoError(t, err)
	return f
}

func TestReplicaNewFollowerValidates(t *testing.T) {
	t.Parallel()
	_, err := NewFollower(FollowerParams{Self: 2, Leader: 2, LeaderEpoch: 1})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewFollower(FollowerParams{Self: 2, Leader: 1, LeaderEpoch: -1})
	require.ErrorIs(t, err, ErrInvalid)
	_, err = NewFollower(FollowerParams{Self: 2, Leader: 1, LeaderEpoch: 1, HW: -1})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestReplicaFollowerEmptyLogFetchesAtOnce(t *testing.T) {
	t.Parallel()
	f := setupFollower(t, 0)
	req := f.Next(LogState{})
	require.Nil(t, req.Epoch)
	require.Equal(t, &FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 5, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, req.Fetch)
	require.Equal(t, int32(1), req.Leader)
	require.False(t, f.Reconciling())
}

// TestReplicaFollowerReconcile runs the KIP-101/KIP-279 loop against a
// leader log given as epochs and LEO, truncating the follower's log as told,
// and checks where it ends.
func TestReplicaFollowerReconcile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		leader         LogState
		follower       LogState
		hw             int64
		wantQueries    int
		wantLEO        int64
		wantFetchEpoch int32
	}{
		{
			name:     "same history: nothing to truncate",
			leader:   LogState{LEO: 8, Epochs: []EpochEntry{{1, 0}, {5, 8}}},
			follower: LogState{LEO: 8, Epochs: []EpochEntry{{1, 0}}},
			hw:       3, wantQueries: 1, wantLEO: 8, wantFetchEpoch: 1,
		},
		{
			name:     "KIP-101: unreplicated tail of the old leader",
			leader:   LogState{LEO: 6, Epochs: []EpochEntry{{1, 0}, {2, 4}}},
			follower: LogState{LEO: 5, Epochs: []EpochEntry{{1, 0}}},
			hw:       2, wantQueries: 1, wantLEO: 4, wantFetchEpoch: 1,
		},
		{
			name:     "KIP-101: follower shorter than the leader's epoch",
			leader:   LogState{LEO: 9, Epochs: []EpochEntry{{1, 0}, {2, 7}}},
			follower: LogState{LEO: 5, Epochs: []EpochEntry{{1, 0}}},
			hw:       2, wantQueries: 1, wantLEO: 5, wantFetchEpoch: 1,
		},
		{
			name:     "KIP-279: two failovers, the follower iterates",
			leader:   LogState{LEO: 5, Epochs: []EpochEntry{{1, 0}, {3, 2}, {5, 4}}},
			follower: LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}, {2, 2}, {4, 3}}},
			hw:       2, wantQueries: 2, wantLEO: 2, wantFetchEpoch: 1,
		},
		{
			name:     "follower's first epoch is unknown to the leader",
			leader:   LogState{LEO: 6, Epochs: []EpochEntry{{1, 0}, {5, 6}}},
			follower: LogState{LEO: 3, Epochs: []EpochEntry{{2, 0}}},
			hw:       0, wantQueries: 1, wantLEO: 0, wantFetchEpoch: UndefinedEpoch,
		},
		{
			name:     "leader without epochs: truncate to the HW",
			leader:   LogState{},
			follower: LogState{LEO: 3, Epochs: []EpochEntry{{2, 0}}},
			hw:       1, wantQueries: 1, wantLEO: 1, wantFetchEpoch: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setupFollower(t, tc.hw)
			local := tc.follower
			queries := 0
			for {
				req := f.Next(local)
				if req.Fetch != nil {
					require.Equal(t, local.LEO, req.Fetch.FetchOffset)
					require.Equal(t, tc.wantFetchEpoch, req.Fetch.LastFetchedEpoch)
					break
				}
				queries++
				require.Less(t, queries, 10)
				ans := EndOffsetFor(tc.leader.Epochs, req.Epoch.Epoch, tc.leader.LEO)
				to, err := f.HandleEpochEndOffset(local, *req.Epoch, ans)
				require.NoError(t, err)
				require.LessOrEqual(t, to, local.LEO)
				local = truncateState(local, to)
			}
			require.Equal(t, tc.wantQueries, queries)
			require.Equal(t, tc.wantLEO, local.LEO)
			require.LessOrEqual(t, f.HW(), local.LEO)
		})
	}
}

// truncateState truncates a log state as the partition log does.
func truncateState(s LogState, to int64) LogState {
	var eps []EpochEntry
	for _, e := range s.Epochs {
		if e.StartOffset < to {
			eps = append(eps, e)
		}
	}
	return LogState{LEO: min(s.LEO, to), Epochs: eps}
}

func TestReplicaFollowerFetch(t *testing.T) {
	t.Parallel()
	f := setupFollower(t, 2)
	local := LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}, {3, 2}}}
	req := f.Next(local)
	_, err := f.HandleFetch(local, FetchRequest{LeaderEpoch: 5}, FetchDecision{})
	require.ErrorIs(t, err, ErrStaleResponse, "a fetch answer while reconciling")
	to, err := f.HandleEpochEndOffset(local, *req.Epoch, EpochEndOffset{3, 4})
	require.NoError(t, err)
	require.Equal(t, int64(4), to)
	_, err = f.HandleEpochEndOffset(local, *req.Epoch, EpochEndOffset{3, 4})
	require.ErrorIs(t, err, ErrStaleResponse, "a duplicate answer")

	fr := *f.Next(local).Fetch
	appended := LogState{LEO: 7, Epochs: []EpochEntry{{1, 0}, {3, 2}, {5, 4}}}
	to, err = f.HandleFetch(appended, fr, FetchDecision{HW: 9, LEO: 9})
	require.NoError(t, err)
	require.Equal(t, int64(7), to)
	require.Equal(t, int64(7), f.HW(), "the HW is at most the local LEO")
	_, err = f.HandleFetch(appended, f.Next(appended).Fetch.withEpoch(4), FetchDecision{HW: 9})
	require.ErrorIs(t, err, ErrStaleResponse, "an answer from an older leader epoch")

	// A diverging answer truncates; the HW follows.
	fr = *f.Next(appended).Fetch
	to, err = f.HandleFetch(appended, fr, FetchDecision{HW: 9, LEO: 9, Diverging: true, DivergingEpoch: EpochEndOffset{3, 5}})
	require.NoError(t, err)
	require.Equal(t, int64(4), to, "its own epoch 3 ends at 4")
	require.Equal(t, int64(4), f.HW())
}

func (r FetchRequest) withEpoch(e int32) FetchRequest {
	r.LeaderEpoch = e
	return r
}

func TestReplicaFollowerEpochChange(t *testing.T) {
	t.Parallel()
	f := setupFollower(t, 0)
	local := LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}}}
	req := f.Next(local)
	_, err := f.HandleEpochEndOffset(local, *req.Epoch, EpochEndOffset{1, 4})
	require.NoError(t, err)
	require.False(t, f.Reconciling())

	require.ErrorIs(t, f.BecomeFollower(1, 5), ErrFencedLeaderEpoch)
	require.ErrorIs(t, f.BecomeFollower(1, 4), ErrFencedLeaderEpoch)
	require.ErrorIs(t, f.BecomeFollower(2, 6), ErrInvalid, "cannot follow itself")
	// KAFKA-7164: same leader, new epoch: reconcile again.
	require.NoError(t, f.BecomeFollower(1, 6))
	require.True(t, f.Reconciling())
	require.Equal(t, int32(6), f.LeaderEpoch())
	require.Equal(t, int32(1), f.Leader())
	require.NotNil(t, f.Next(local).Epoch)
	_, err = f.HandleEpochEndOffset(local, *req.Epoch, EpochEndOffset{1, 4})
	require.ErrorIs(t, err, ErrStaleResponse, "an answer to the query of epoch 5")
}
