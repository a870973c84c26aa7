package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// leaderParams: leader 1 of (1,2,3), epoch 3 starting at offset 10 after
// epochs 1@0 and 2@6, min ISR 2, lag 30s.
func leaderParams() LeaderParams {
	return LeaderParams{
		Self: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3},
		LeaderEpoch: 3, PartitionEpoch: 7, MinISR: 2, LagTimeMax: 30 * time.Second,
		Log:          LogState{LEO: 10, Epochs: []EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: 6}}, Durable: 10},
		HW:           8,
		BrokerEpochs: map[int32]int64{2: 5, 3: 5},
		Now:          t0,
	}
}

func setupLeader(t *testing.T, mutate ...func(*LeaderParams)) *Leader {
	t.Helper()
	p := leaderParams()
	for _, m := range mutate {
		m(&p)
	}
	l, err := NewLeader(p)
	require.NoError(t, err)
	return l
}

func fetch(id int32, offset int64, lastEpoch int32) FetchRequest {
	return FetchRequest{Replica: id, BrokerEpoch: 5, LeaderEpoch: 3, FetchOffset: offset, LastFetchedEpoch: lastEpoch, Durable: offset}
}

// appendDurable appends up to leo and reports it durable at once, as a
// leader with flush policy "os" (or a sync with no delay) does.
func appendDurable(l *Leader, leo int64, now time.Time) error {
	if err := l.Append(leo, now); err != nil {
		return err
	}
	return l.Flushed(leo)
}

func mustFetch(t *testing.T, l *Leader, req FetchRequest, now time.Time) FetchDecision {
	t.Helper()
	d, err := l.FollowerFetch(req, now)
	require.NoError(t, err)
	return d
}

func TestReplicaNewLeaderValidates(t *testing.T) {
	t.Parallel()
	for name, m := range map[string]func(*LeaderParams){
		"self not a replica":     func(p *LeaderParams) { p.Self = 9 },
		"self not in ISR":        func(p *LeaderParams) { p.ISR = []int32{2, 3} },
		"ISR outside replicas":   func(p *LeaderParams) { p.ISR = []int32{1, 4} },
		"duplicate replicas":     func(p *LeaderParams) { p.Replicas = []int32{1, 2, 2} },
		"no replicas":            func(p *LeaderParams) { p.Replicas = nil },
		"min ISR zero":           func(p *LeaderParams) { p.MinISR = 0 },
		"lag zero":               func(p *LeaderParams) { p.LagTimeMax = 0 },
		"HW above LEO":           func(p *LeaderParams) { p.HW = 11 },
		"negative epoch":         func(p *LeaderParams) { p.LeaderEpoch = -1 },
		"epochs out of order":    func(p *LeaderParams) { p.Log.Epochs = []EpochEntry{{2, 0}, {1, 3}} },
		"log epoch above leader": func(p *LeaderParams) { p.Log.Epochs = append(p.Log.Epochs, EpochEntry{Epoch: 4, StartOffset: 8}) },
		"epoch start beyond LEO": func(p *LeaderParams) { p.Log.Epochs = []EpochEntry{{1, 11}} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := leaderParams()
			m(&p)
			_, err := NewLeader(p)
			require.Error(t, err)
		})
	}
}

func TestReplicaLeaderInitialState(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	require.Equal(t, int64(8), l.HW())
	require.Equal(t, int64(10), l.LEO())
	require.Equal(t, int64(10), l.EpochStartOffset())
	require.Equal(t, []int32{1, 2, 3}, l.ISR())
	require.Equal(t, []int32{1, 2, 3}, l.Replicas())
	require.Equal(t, int32(3), l.LeaderEpoch())
	require.Equal(t, int32(7), l.PartitionEpoch())
	f, ok := l.Follower(2)
	require.True(t, ok)
	require.Equal(t, FollowerState{BrokerEpoch: 5, LEO: -1, Durable: -1, LastCaughtUp: t0}, f)
	_, ok = l.Follower(1)
	require.False(t, ok, "the leader is not its own follower")

	// A leader that restarts its state machine inside its epoch keeps the
	// epoch's start offset.
	l = setupLeader(t, func(p *LeaderParams) {
		p.Log.Epochs = append(p.Log.Epochs, EpochEntry{Epoch: 3, StartOffset: 9})
	})
	require.Equal(t, int64(9), l.EpochStartOffset())
}

func TestReplicaLeaderCheckEpoch(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	require.NoError(t, l.CheckEpoch(3))
	require.ErrorIs(t, l.CheckEpoch(2), ErrFencedLeaderEpoch)
	require.ErrorIs(t, l.CheckEpoch(4), ErrUnknownLeaderEpoch)
	require.NoError(t, l.Resign(4))
	require.ErrorIs(t, l.CheckEpoch(3), ErrNotLeader)
}

func TestReplicaLeaderHWNeedsEveryISRMember(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	d := mustFetch(t, l, fetch(2, 10, 2), t0)
	require.Equal(t, FetchDecision{HW: 8, LEO: 10}, d, "3 has not fetched in this epoch")
	d = mustFetch(t, l, fetch(3, 9, 2), t0)
	require.Equal(t, int64(9), d.HW)
	mustFetch(t, l, fetch(3, 10, 2), t0)
	require.Equal(t, int64(10), l.HW())

	require.NoError(t, appendDurable(l, 12, t0))
	require.Equal(t, int64(10), l.HW())
	require.ErrorIs(t, l.Append(11, t0), ErrInvalid, "the LEO never goes back")
}

// The HW counts only what every ISR member, the leader included, reports
// durable: a follower may fetch records the leader has not synced, and
// fetched records a follower has not synced hold the HW back.
func TestReplicaLeaderHWCountsOnlyDurableOffsets(t *testing.T) {
	t.Parallel()
	l := setupLeader(t, func(p *LeaderParams) { p.Log.Durable = 9 })
	mustFetch(t, l, fetch(2, 10, 2), t0)
	mustFetch(t, l, fetch(3, 10, 2), t0)
	require.Equal(t, int64(9), l.HW(), "the leader's own tail is not durable yet")
	require.NoError(t, l.Flushed(10))
	require.Equal(t, int64(10), l.HW())

	require.NoError(t, l.Append(14, t0))
	ack, err := l.WaitAcksAll(14)
	require.NoError(t, err)
	d := mustFetch(t, l, fetch(2, 10, 3), t0)
	require.Equal(t, int64(14), d.LEO, "followers fetch past the leader's durable end")
	require.Equal(t, int64(10), d.HW)
	req := fetch(2, 14, 3)
	req.Durable = 12 // fetched, partly synced
	mustFetch(t, l, req, t0)
	req = fetch(3, 14, 3)
	mustFetch(t, l, req, t0)
	require.Equal(t, int64(10), l.HW(), "the leader has synced nothing above 10")
	require.NoError(t, l.Flushed(14))
	require.Equal(t, int64(12), l.HW(), "follower 2 has only 12 durable")
	require.Empty(t, l.TakeAcks())
	mustFetch(t, l, fetch(2, 14, 3), t0)
	require.Equal(t, int64(14), l.HW())
	require.Equal(t, []AckResult{{ID: ack, End: 14}}, l.TakeAcks())

	require.NoError(t, l.Flushed(11), "a lower durable end changes nothing")
	require.Equal(t, int64(14), l.Durable())
	require.ErrorIs(t, l.Flushed(15), ErrInvalid, "durable beyond the LEO")
	bad := fetch(2, 14, 3)
	bad.Durable = 15
	_, err = l.FollowerFetch(bad, t0)
	require.ErrorIs(t, err, ErrInvalid, "a follower's durable end beyond its fetch offset")
}

// A replica joins the ISR only once the HW is durable on it: elected
// later, it must still hold every committed record after a crash.
func TestReplicaLeaderExpandNeedsDurableHW(t *testing.T) {
	t.Parallel()
	l := setupLeader(t, func(p *LeaderParams) { p.ISR = []int32{1, 2}; p.HW = 10 })
	req := fetch(3, 10, 2)
	req.Durable = 9
	mustFetch(t, l, req, t0)
	_, ok := l.Tick(t0)
	require.False(t, ok, "3 has the HW in its log but not on disk")
	mustFetch(t, l, fetch(3, 10, 2), t0)
	p, ok := l.Tick(t0)
	require.True(t, ok)
	require.Equal(t, Expand, p.Kind)
	require.Equal(t, []int32{1, 2, 3}, p.ISR)
}

func TestReplicaLeaderSingleReplica(t *testing.T) {
	t.Parallel()
	l := setupLeader(t, func(p *LeaderParams) {
		p.Replicas, p.ISR, p.MinISR = []int32{1}, []int32{1}, 1
	})
	require.Equal(t, int64(10), l.HW(), "with only itself in the ISR the leader commits at once")
	id, err := l.WaitAcksAll(10)
	require.NoError(t, err)
	require.NoError(t, appendDurable(l, 11, t0))
	require.Equal(t, []AckResult{{ID: id, End: 10}}, l.TakeAcks())
}

func TestReplicaLeaderFetchFencing(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	for name, tc := range map[string]struct {
		req  FetchRequest
		want error
	}{
		"not a replica":      {FetchRequest{Replica: 4, BrokerEpoch: 5, LeaderEpoch: 3, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, ErrNotReplica},
		"the leader itself":  {FetchRequest{Replica: 1, BrokerEpoch: 5, LeaderEpoch: 3, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, ErrNotReplica},
		"stale broker epoch": {FetchRequest{Replica: 2, BrokerEpoch: 4, LeaderEpoch: 3, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, ErrStaleBrokerEpoch},
		"stale leader epoch": {FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 2, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, ErrFencedLeaderEpoch},
		"newer leader epoch": {FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 4, FetchOffset: 0, LastFetchedEpoch: UndefinedEpoch}, ErrUnknownLeaderEpoch},
		"past the LEO":       {FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 3, FetchOffset: 11, LastFetchedEpoch: UndefinedEpoch}, ErrOffsetOutOfRange},
		"negative offset":    {FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 3, FetchOffset: -1, LastFetchedEpoch: UndefinedEpoch}, ErrInvalid},
	} {
		_, err := l.FollowerFetch(tc.req, t0)
		require.ErrorIs(t, err, tc.want, name)
	}
	f, _ := l.Follower(2)
	require.Equal(t, int64(-1), f.LEO, "refused fetches change nothing")

	// A newer incarnation is accepted and fences the older one.
	req := fetch(2, 10, 2)
	req.BrokerEpoch = 6
	mustFetch(t, l, req, t0)
	_, err := l.FollowerFetch(fetch(2, 10, 2), t0)
	require.ErrorIs(t, err, ErrStaleBrokerEpoch)
}

func TestReplicaLeaderDivergence(t *testing.T) {
	t.Parallel()
	// Leader epochs: 1@0, 2@6, 3@10 (its own, not yet in the log), LEO 12.
	for _, tc := range []struct {
		name      string
		offset    int64
		lastEpoch int32
		want      *EpochEndOffset
	}{
		{"in sync inside epoch 1", 6, 1, nil},
		{"in sync at the end of epoch 2", 10, 2, nil},
		{"in sync in the leader's epoch", 12, 3, nil},
		{"tail of epoch 1 the leader lacks", 7, 1, &EpochEndOffset{1, 6}},
		{"tail of epoch 2 past the epoch start", 11, 2, &EpochEndOffset{2, 10}},
		{"in sync inside epoch 2", 8, 2, nil},
		{"past the LEO in the leader's epoch", 13, 3, &EpochEndOffset{3, 12}},
		{"epoch above every leader epoch", 5, 9, &EpochEndOffset{UndefinedEpoch, UndefinedOffset}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := setupLeader(t)
			require.NoError(t, appendDurable(l, 12, t0))
			d, err := l.FollowerFetch(fetch(2, tc.offset, tc.lastEpoch), t0)
			require.NoError(t, err)
			f, _ := l.Follower(2)
			if tc.want == nil {
				require.False(t, d.Diverging)
				require.Equal(t, tc.offset, f.LEO)
				return
			}
			require.True(t, d.Diverging)
			require.Equal(t, *tc.want, d.DivergingEpoch)
			require.Equal(t, int64(-1), f.LEO, "a diverging fetch does not count as the follower's LEO")
		})
	}

	// Epochs the follower has but the leader lacks: epoch 2 missing on a
	// leader with 1@0, 3@4.
	l := setupLeader(t, func(p *LeaderParams) {
		p.LeaderEpoch, p.Log = 3, LogState{LEO: 4, Epochs: []EpochEntry{{1, 0}}, Durable: 4}
		p.HW = 4
	})
	d := mustFetch(t, l, FetchRequest{Replica: 2, BrokerEpoch: 5, LeaderEpoch: 3, FetchOffset: 5, LastFetchedEpoch: 2}, t0)
	require.Equal(t, FetchDecision{HW: 4, LEO: 4, Diverging: true, DivergingEpoch: EpochEndOffset{1, 4}}, d)
}

func TestReplicaLeaderLastCaughtUp(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	caughtUp := func() time.Time { f, _ := l.Follower(2); return f.LastCaughtUp }

	mustFetch(t, l, fetch(2, 10, 2), at(1)) // at the LEO
	require.Equal(t, at(1), caughtUp())
	require.NoError(t, appendDurable(l, 11, at(2)))
	mustFetch(t, l, fetch(2, 10, 2), at(3)) // reached the LEO of its previous fetch
	require.Equal(t, at(1), caughtUp())
	require.NoError(t, appendDurable(l, 12, at(4)))
	mustFetch(t, l, fetch(2, 11, 3), at(5)) // same, as of the previous fetch (3s)
	require.Equal(t, at(3), caughtUp())
	require.NoError(t, appendDurable(l, 20, at(6)))
	mustFetch(t, l, fetch(2, 11, 3), at(7)) // fell behind the previous fetch's LEO (12)
	require.Equal(t, at(3), caughtUp())
}

func TestReplicaLeaderShrinkAndExpand(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	mustFetch(t, l, fetch(2, 10, 2), t0)
	_, ok := l.Tick(t0.Add(30 * time.Second))
	require.False(t, ok, "exactly the lag time max is still in sync")

	mustFetch(t, l, fetch(2, 10, 2), t0.Add(30*time.Second)) // 2 keeps fetching, 3 does not
	p, ok := l.Tick(t0.Add(31 * time.Second))
	require.True(t, ok)
	require.Equal(t, Proposal{ID: 1, Kind: Shrink, LeaderEpoch: 3, PartitionEpoch: 7, From: []int32{1, 2, 3}, ISR: []int32{1, 2}}, p)
	require.Equal(t, "isr-shrink (1,2,3) -> (1,2)", p.String())
	_, ok = l.Tick(t0.Add(time.Hour))
	require.False(t, ok, "one proposal in flight at a time")
	pending, ok := l.Pending()
	require.True(t, ok)
	require.Equal(t, p, pending)
	require.Equal(t, []int32{1, 2, 3}, l.MaximalISR(), "a pending shrink removes nothing yet")

	require.ErrorIs(t, l.ISRChanged(7, []int32{1, 2}), ErrStalePartitionEpoch)
	require.ErrorIs(t, l.ISRChanged(8, []int32{2, 3}), ErrInvalid, "the leader must stay in the ISR")
	require.ErrorIs(t, l.ISRChanged(8, []int32{1, 5}), ErrInvalid)
	require.NoError(t, l.ISRChanged(8, []int32{2, 1}))
	require.Equal(t, []int32{1, 2}, l.ISR())
	require.Equal(t, int64(10), l.HW())
	_, ok = l.Pending()
	require.False(t, ok)

	// 3 comes back: below the HW it cannot join; at the LEO it can.
	now := t0.Add(40 * time.Second)
	mustFetch(t, l, fetch(3, 4, 1), now)
	_, ok = l.Tick(now)
	require.False(t, ok)
	mustFetch(t, l, fetch(3, 10, 2), now)
	p, ok = l.Tick(now)
	require.True(t, ok)
	require.Equal(t, Expand, p.Kind)
	require.Equal(t, []int32{1, 2, 3}, p.ISR)
	require.Equal(t, []BrokerEpoch{{Broker: 3, Epoch: 5}}, p.BrokerEpochs)
	require.Equal(t, []int32{1, 2, 3}, l.MaximalISR(), "a pending expansion counts at once")

	// A stale-partition-epoch refusal keeps the proposal pending; a
	// definitive one drops it.
	l.ProposalRejected(p.ID, ErrStalePartitionEpoch)
	_, ok = l.Pending()
	require.True(t, ok)
	l.ProposalRejected(p.ID+1, ErrStaleBrokerEpoch)
	_, ok = l.Pending()
	require.True(t, ok, "another proposal's refusal")
	l.ProposalRejected(p.ID, ErrStaleBrokerEpoch)
	_, ok = l.Pending()
	require.False(t, ok)
	require.Equal(t, []int32{1, 2}, l.MaximalISR())
}

// An idle follower is in sync as long as it keeps fetching; one that stops
// (a dead broker) leaves after the lag time max although its last LEO equals
// the leader's, and once out it is not proposed back before it fetches again
// (issue 15: a dead broker was proposed every round while it was down).
func TestReplicaLeaderIdleFollowerInSyncOnlyWhileFetching(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	mustFetch(t, l, fetch(2, 10, 2), at(0))
	mustFetch(t, l, fetch(3, 10, 2), at(0)) // both at the LEO; nothing more is produced
	require.Equal(t, int64(10), l.HW())
	for s := 1; s <= 30; s++ {
		mustFetch(t, l, fetch(2, 10, 2), at(s))
		_, ok := l.Tick(at(s))
		require.False(t, ok, "at %ds both are within the lag time max", s)
	}
	mustFetch(t, l, fetch(2, 10, 2), at(31))
	p, ok := l.Tick(at(31))
	require.True(t, ok, "3 stopped fetching 31s ago")
	require.Equal(t, Shrink, p.Kind)
	require.Equal(t, []int32{1, 2}, p.ISR)
	require.NoError(t, l.ISRChanged(8, p.ISR))

	// Out of the ISR, 3 is never proposed back on its old position, and 2,
	// idle but fetching, stays in.
	for s := 32; s < 600; s++ {
		mustFetch(t, l, fetch(2, 10, 2), at(s))
		p, ok := l.Tick(at(s))
		require.False(t, ok, "at %ds: proposed %v", s, p)
	}
	// It rejoins once it fetched at the leader's LEO with the HW durable.
	require.NoError(t, appendDurable(l, 12, at(600)))
	mustFetch(t, l, fetch(2, 12, 3), at(600))
	require.Equal(t, int64(12), l.HW())
	mustFetch(t, l, fetch(3, 10, 2), at(601))
	_, ok = l.Tick(at(601))
	require.False(t, ok, "below the HW")
	mustFetch(t, l, fetch(3, 12, 3), at(602))
	p, ok = l.Tick(at(602))
	require.True(t, ok)
	require.Equal(t, Expand, p.Kind)
	require.Equal(t, []int32{1, 2, 3}, p.ISR)
}

// The controller removes a dead broker from the ISR itself (its lease
// expired) while the leader still counts it caught up: the leader does not
// propose it back before it fetches again.
func TestReplicaLeaderFollowerRemovedByTheControllerWaitsForAFetch(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	mustFetch(t, l, fetch(2, 10, 2), t0)
	mustFetch(t, l, fetch(3, 10, 2), t0)
	require.NoError(t, l.ISRChanged(8, []int32{1, 2}))
	for i := 1; i <= 20; i++ {
		now := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		p, ok := l.Tick(now)
		require.False(t, ok, "tick %d proposed %v", i, p)
	}
	now := t0.Add(11 * time.Second)
	mustFetch(t, l, fetch(3, 10, 2), now)
	p, ok := l.Tick(now)
	require.True(t, ok)
	require.Equal(t, Proposal{ID: 1, Kind: Expand, LeaderEpoch: 3, PartitionEpoch: 8, From: []int32{1, 2}, ISR: []int32{1, 2, 3}, BrokerEpochs: []BrokerEpoch{{Broker: 3, Epoch: 5}}}, p)
}

// An expansion the controller refused definitively (the added broker is
// not live, or restarted) is proposed again only after that follower's next
// fetch: a leader ticking every half second sends at most one refused
// proposal per follower fetch, and none for a follower that stopped.
func TestReplicaLeaderRefusedExpansionWaitsForTheNextFetch(t *testing.T) {
	t.Parallel()
	l := setupLeader(t, func(p *LeaderParams) { p.ISR = []int32{1, 2} })
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	mustFetch(t, l, fetch(2, 10, 2), at(0))
	mustFetch(t, l, fetch(3, 10, 2), at(0))
	p, ok := l.Tick(at(0))
	require.True(t, ok)
	require.Equal(t, Expand, p.Kind)
	l.ProposalRejected(p.ID, ErrStaleBrokerEpoch)

	proposals := 0
	for ms := 500; ms <= 20_000; ms += 500 {
		mustFetch(t, l, fetch(2, 10, 2), at(ms))
		if ms%5000 == 0 { // 3 fetches every 5 s
			mustFetch(t, l, fetch(3, 10, 2), at(ms))
		}
		if p, ok := l.Tick(at(ms)); ok {
			require.Equal(t, []int32{1, 2, 3}, p.ISR)
			proposals++
			l.ProposalRejected(p.ID, ErrStaleBrokerEpoch)
		}
	}
	require.Equal(t, 4, proposals, "one per fetch of 3, not one per tick")

	// A refusal for a stale partition epoch keeps the proposal pending (the
	// controller may have applied it); the newer state ends it, and 3 is
	// proposed again on it without waiting for a fetch, since 3 did not
	// leave and was not refused.
	mustFetch(t, l, fetch(3, 10, 2), at(20_500))
	p, ok = l.Tick(at(20_500))
	require.True(t, ok)
	l.ProposalRejected(p.ID, ErrStalePartitionEpoch)
	_, ok = l.Tick(at(21_000))
	require.False(t, ok, "still pending")
	require.NoError(t, l.ISRChanged(9, []int32{1, 2}))
	p, ok = l.Tick(at(21_500))
	require.True(t, ok)
	require.Equal(t, int32(9), p.PartitionEpoch)
}

func TestReplicaLeaderLostDataShrinksAtOnce(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	req := fetch(3, 0, UndefinedEpoch)
	req.BrokerEpoch = 6 // restarted with an empty disk
	mustFetch(t, l, req, t0)
	f, _ := l.Follower(3)
	require.True(t, f.LostData)
	p, ok := l.Tick(t0)
	require.True(t, ok)
	require.Equal(t, []int32{1, 2}, p.ISR)
	require.NoError(t, l.ISRChanged(8, p.ISR))
	f, _ = l.Follower(3)
	require.False(t, f.LostData)
}

func TestReplicaLeaderAcks(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	require.NoError(t, l.CanAcceptAcksAll())
	_, err := l.WaitAcksAll(11)
	require.ErrorIs(t, err, ErrInvalid, "beyond the LEO")

	done, err := l.WaitAcksAll(8)
	require.NoError(t, err)
	require.Equal(t, []AckResult{{ID: done, End: 8}}, l.TakeAcks(), "already below the HW")
	require.Empty(t, l.TakeAcks())

	a, err := l.WaitAcksAll(9)
	require.NoError(t, err)
	b, err := l.WaitAcksAll(10)
	require.NoError(t, err)
	c, err := l.WaitAcksAll(10)
	require.NoError(t, err)
	require.True(t, l.CancelAck(c))
	require.False(t, l.CancelAck(c))

	mustFetch(t, l, fetch(2, 10, 2), t0)
	mustFetch(t, l, fetch(3, 9, 2), t0)
	require.Equal(t, []AckResult{{ID: a, End: 9}}, l.TakeAcks())
	mustFetch(t, l, fetch(3, 10, 2), t0)
	require.Equal(t, []AckResult{{ID: b, End: 10}}, l.TakeAcks())
}

func TestReplicaLeaderStrictMinISR(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	require.NoError(t, appendDurable(l, 12, t0))
	pending, err := l.WaitAcksAll(12)
	require.NoError(t, err)

	require.NoError(t, l.ISRChanged(8, []int32{1}))
	res := l.TakeAcks()
	require.Len(t, res, 1)
	require.Equal(t, pending, res[0].ID)
	require.ErrorIs(t, res[0].Err, ErrNotEnoughReplicas)
	require.ErrorIs(t, l.CanAcceptAcksAll(), ErrNotEnoughReplicas)
	_, err = l.WaitAcksAll(12)
	require.ErrorIs(t, err, ErrNotEnoughReplicas)

	// The leader alone holds everything, yet the HW stays.
	require.NoError(t, appendDurable(l, 13, t0))
	mustFetch(t, l, fetch(2, 13, 3), t0)
	require.Equal(t, int64(8), l.HW())

	// Back to min ISR: the HW advances over what the ISR holds.
	require.NoError(t, l.ISRChanged(9, []int32{1, 2}))
	require.Equal(t, int64(13), l.HW())
}

func TestReplicaLeaderResign(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	id, err := l.WaitAcksAll(10)
	require.NoError(t, err)
	_, ok := l.Tick(t0.Add(time.Minute))
	require.True(t, ok)

	require.ErrorIs(t, l.Resign(3), ErrFencedLeaderEpoch, "not a newer epoch")
	require.False(t, l.Resigned())
	require.NoError(t, l.Resign(4))
	require.True(t, l.Resigned())
	res := l.TakeAcks()
	require.Len(t, res, 1)
	require.Equal(t, id, res[0].ID)
	require.ErrorIs(t, res[0].Err, ErrNotLeader)
	require.NoError(t, l.Resign(5), "idempotent")

	_, err = l.FollowerFetch(fetch(2, 10, 2), t0)
	require.ErrorIs(t, err, ErrNotLeader)
	require.ErrorIs(t, l.Append(11, t0), ErrNotLeader)
	require.ErrorIs(t, l.ISRChanged(9, []int32{1}), ErrNotLeader)
	require.ErrorIs(t, l.CanAcceptAcksAll(), ErrNotLeader)
	_, ok = l.Tick(t0.Add(time.Hour))
	require.False(t, ok)
	_, ok = l.Pending()
	require.False(t, ok)
}

// TestReplicaLeaderClose: a leadership that ends without a newer epoch
// known (the broker closes the replica or gives it another role) fails its
// pending acks=all waits like a resignation.
func TestReplicaLeaderClose(t *testing.T) {
	t.Parallel()
	l := setupLeader(t)
	id, err := l.WaitAcksAll(10)
	require.NoError(t, err)
	l.Close()
	require.True(t, l.Resigned())
	res := l.TakeAcks()
	require.Len(t, res, 1)
	require.Equal(t, id, res[0].ID)
	require.ErrorIs(t, res[0].Err, ErrNotLeader)
	l.Close()
	require.Empty(t, l.TakeAcks(), "closing twice reports nothing new")
	_, err = l.WaitAcksAll(10)
	require.ErrorIs(t, err, ErrNotLeader)
	require.ErrorIs(t, l.Append(11, t0), ErrNotLeader)
}

func TestReplicaConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{LagTimeMax: DefaultLagTimeMax}.Validate())
	require.ErrorIs(t, Config{}.Validate(), ErrInvalid)
}

func TestReplicaLeaderSetMinISR(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	l, err := NewLeader(LeaderParams{Self: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}, LeaderEpoch: 1, MinISR: 2,
		LagTimeMax: 10 * time.Second, Log: LogState{LEO: 0}, Now: now})
	require.NoError(t, err)
	require.NoError(t, appendDurable(l, 5, now))
	id, err := l.WaitAcksAll(5)
	require.NoError(t, err)

	// Raising min ISR above the ISR fails the pending wait and refuses new ones.
	require.NoError(t, l.SetMinISR(3))
	res := l.TakeAcks()
	require.Len(t, res, 1)
	require.Equal(t, id, res[0].ID)
	require.ErrorIs(t, res[0].Err, ErrNotEnoughReplicas)
	require.ErrorIs(t, l.CanAcceptAcksAll(), ErrNotEnoughReplicas)
	_, err = l.FollowerFetch(FetchRequest{Replica: 2, BrokerEpoch: 1, LeaderEpoch: 1, FetchOffset: 5, LastFetchedEpoch: UndefinedEpoch, Durable: 5}, now)
	require.NoError(t, err)
	require.Zero(t, l.HW(), "HW frozen below min ISR")

	// Lowering it again lets the HW advance to what the ISR holds.
	require.NoError(t, l.SetMinISR(2))
	require.EqualValues(t, 5, l.HW())
	require.ErrorIs(t, l.SetMinISR(0), ErrInvalid)
}
