package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func setupFollower(t *testing.T, hw int64, unclean bool) *Follower {
	t.Helper()
	f, err := NewFollower(FollowerParams{Self: 2, BrokerEpoch: 5, Leader: 1, LeaderEpoch: 5, HW: hw, Unclean: unclean})
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
	f := setupFollower(t, 0, false)
	require.Equal(t, FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 5, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, f.Next(LogState{}))
	require.Equal(t, int32(1), f.Leader())
}

// TestReplicaFollowerReconcile runs the KIP-101/KIP-279 loop against a real
// Leader whose log is given as epochs and LEO, truncating the follower's log
// as told, and checks where it ends.
func TestReplicaFollowerReconcile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		leader         LogState
		follower       LogState
		hw             int64
		wantDiverging  int
		wantLEO        int64
		wantFetchEpoch int32
	}{
		{
			name:     "same history: nothing to truncate",
			leader:   LogState{LEO: 8, Epochs: []EpochEntry{{1, 0}, {5, 8}}},
			follower: LogState{LEO: 8, Epochs: []EpochEntry{{1, 0}}},
			hw:       3, wantDiverging: 0, wantLEO: 8, wantFetchEpoch: 1,
		},
		{
			name:     "KIP-101: unreplicated tail of the old leader",
			leader:   LogState{LEO: 6, Epochs: []EpochEntry{{1, 0}, {2, 4}}},
			follower: LogState{LEO: 5, Epochs: []EpochEntry{{1, 0}}},
			hw:       2, wantDiverging: 1, wantLEO: 4, wantFetchEpoch: 1,
		},
		{
			name:     "KIP-101: follower shorter than the leader's epoch",
			leader:   LogState{LEO: 9, Epochs: []EpochEntry{{1, 0}, {2, 7}}},
			follower: LogState{LEO: 5, Epochs: []EpochEntry{{1, 0}}},
			hw:       2, wantDiverging: 0, wantLEO: 5, wantFetchEpoch: 1,
		},
		{
			name:     "KIP-279: two failovers, the follower iterates",
			leader:   LogState{LEO: 5, Epochs: []EpochEntry{{1, 0}, {3, 2}, {5, 4}}},
			follower: LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}, {2, 2}, {4, 3}}},
			hw:       2, wantDiverging: 2, wantLEO: 2, wantFetchEpoch: 1,
		},
		{
			name:     "follower's first epoch is unknown to the leader",
			leader:   LogState{LEO: 6, Epochs: []EpochEntry{{1, 0}, {5, 6}}},
			follower: LogState{LEO: 3, Epochs: []EpochEntry{{2, 0}}},
			hw:       0, wantDiverging: 1, wantLEO: 0, wantFetchEpoch: UndefinedEpoch,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := NewLeader(LeaderParams{Self: 1, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, LeaderEpoch: 5,
				MinISR: 1, LagTimeMax: DefaultLagTimeMax, Log: tc.leader, Now: t0})
			require.NoError(t, err)
			f := setupFollower(t, tc.hw, false)
			local := tc.follower
			diverging := 0
			for {
				req := f.Next(local)
				require.Equal(t, local.LEO, req.FetchOffset)
				d, err := l.FollowerFetch(req, t0)
				require.NoError(t, err)
				if !d.Diverging {
					require.Equal(t, tc.wantFetchEpoch, req.LastFetchedEpoch)
					break
				}
				diverging++
				require.Less(t, diverging, 10)
				to, err := f.HandleFetch(local, req, d)
				require.NoError(t, err)
				require.LessOrEqual(t, to, local.LEO)
				local = truncateState(local, to)
			}
			require.Equal(t, tc.wantDiverging, diverging)
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
	f := setupFollower(t, 2, false)
	local := LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}, {3, 2}}}
	req := f.Next(local)
	appended := LogState{LEO: 7, Epochs: []EpochEntry{{1, 0}, {3, 2}, {5, 4}}}
	to, err := f.HandleFetch(appended, req, FetchDecision{HW: 9, LEO: 9})
	require.NoError(t, err)
	require.Equal(t, int64(7), to)
	require.Equal(t, int64(7), f.HW(), "the HW is at most the local LEO")
	_, err = f.HandleFetch(appended, f.Next(appended).withEpoch(4), FetchDecision{HW: 9})
	require.ErrorIs(t, err, ErrStaleResponse, "an answer from an older leader epoch")
	_, err = f.HandleFetch(appended, req, FetchDecision{Diverging: true, DivergingEpoch: EpochEndOffset{3, 3}})
	require.ErrorIs(t, err, ErrStaleResponse, "a divergence reported for an older log state")

	// A new leader's lower HW does not move the follower's back.
	_, err = f.HandleFetch(appended, f.Next(appended), FetchDecision{HW: 3, LEO: 9})
	require.NoError(t, err)
	require.Equal(t, int64(7), f.HW())

	// A diverging answer above the HW truncates.
	f = setupFollower(t, 3, false)
	to, err = f.HandleFetch(appended, f.Next(appended), FetchDecision{HW: 9, LEO: 9, Diverging: true, DivergingEpoch: EpochEndOffset{3, 5}})
	require.NoError(t, err)
	require.Equal(t, int64(4), to, "its own epoch 3 ends at 4")
	require.Equal(t, int64(3), f.HW())
}

// TestReplicaFollowerNeverTruncatesBelowTheHW: records below the HW are
// committed; a leader elected from the ISR never asks to truncate them, so
// such an answer is refused, changing nothing, unless the topic allows
// unclean leader election (then the loss is accepted and the HW follows).
func TestReplicaFollowerNeverTruncatesBelowTheHW(t *testing.T) {
	t.Parallel()
	local := LogState{LEO: 10, Epochs: []EpochEntry{{3, 0}}}
	diverge := FetchDecision{Diverging: true, DivergingEpoch: EpochEndOffset{3, 5}}

	f := setupFollower(t, 8, false)
	to, err := f.HandleFetch(local, f.Next(local), diverge)
	require.ErrorIs(t, err, ErrTruncateBelowHW)
	require.Equal(t, int64(10), to, "nothing to truncate")
	require.Equal(t, int64(8), f.HW())

	f.SetUnclean(true)
	to, err = f.HandleFetch(local, f.Next(local), diverge)
	require.NoError(t, err)
	require.Equal(t, int64(5), to)
	require.Equal(t, int64(5), f.HW())

	f = setupFollower(t, 8, true)
	f.Truncated(2)
	require.Equal(t, int64(2), f.HW(), "a log reset below the HW caps it")
}

func (r FetchRequest) withEpoch(e int32) FetchRequest {
	r.LeaderEpoch = e
	return r
}

func TestReplicaFollowerEpochChange(t *testing.T) {
	t.Parallel()
	f := setupFollower(t, 0, false)
	require.ErrorIs(t, f.BecomeFollower(1, 5), ErrFencedLeaderEpoch)
	require.ErrorIs(t, f.BecomeFollower(1, 4), ErrFencedLeaderEpoch)
	require.ErrorIs(t, f.BecomeFollower(2, 6), ErrInvalid, "cannot follow itself")
	// KAFKA-7164: same leader, new epoch: the next fetch carries the new
	// leader epoch and the last fetched epoch, so the leader checks again.
	local := LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}}}
	old := f.Next(local)
	require.NoError(t, f.BecomeFollower(1, 6))
	require.Equal(t, int32(6), f.LeaderEpoch())
	require.Equal(t, int32(1), f.Leader())
	require.Equal(t, FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 6, FetchOffset: 4, LastFetchedEpoch: 1}, f.Next(local))
	_, err := f.HandleFetch(local, old, FetchDecision{Diverging: true, DivergingEpoch: EpochEndOffset{1, 2}})
	require.ErrorIs(t, err, ErrStaleResponse, "an answer to a fetch of epoch 5")
}
