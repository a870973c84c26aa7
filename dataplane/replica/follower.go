package replica

import (
	"errors"
	"fmt"
)

// ErrStaleResponse: a response to a request made under an older leader epoch
// (or in an earlier phase); it is ignored.
var ErrStaleResponse = errors.New("stale response")

// FollowerParams describe a replica when it becomes a follower.
type FollowerParams struct {
	Self        int32
	BrokerEpoch int64 // this broker's current registration
	Leader      int32
	LeaderEpoch int32
	HW          int64 // the local high watermark
}

// Request is the next request a follower sends to its leader: exactly one
// of Epoch and Fetch is set.
type Request struct {
	Leader int32
	Epoch  *EpochRequest
	Fetch  *FetchRequest
}

// Follower is the replication state machine of a follower. After every
// leader epoch change, even when the leader stays the same broker
// (KAFKA-7164), it first reconciles its log with the leader's by leader
// epoch (KIP-101, KIP-279), then fetches. It is not safe for concurrent use
// and does no I/O: the caller sends the requests, truncates and appends to
// the log, and passes the log's state to each call.
type Follower struct {
	self        int32
	brokerEpoch int64
	leader      int32
	leaderEpoch int32
	truncating  bool
	hw          int64
}

// NewFollower returns a follower of p.Leader at p.LeaderEpoch that starts by
// reconciling its log.
func NewFollower(p FollowerParams) (*Follower, error) {
	if p.LeaderEpoch < 0 || p.HW < 0 {
		return nil, fmt.Errorf("leader epoch %d, HW %d: must not be negative: %w", p.LeaderEpoch, p.HW, ErrInvalid)
	}
	if p.Leader == p.Self {
		return nil, fmt.Errorf("broker %d cannot follow itself: %w", p.Self, ErrInvalid)
	}
	return &Follower{self: p.Self, brokerEpoch: p.BrokerEpoch, leader: p.Leader,
		leaderEpoch: p.LeaderEpoch, truncating: true, hw: p.HW}, nil
}

// BecomeFollower switches to leader at leaderEpoch, which must be above the
// current epoch (else ErrFencedLeaderEpoch and nothing changes). The
// follower reconciles its log again before fetching, whether or not the
// leader changed.
func (f *Follower) BecomeFollower(leader, leaderEpoch int32) error {
	if leaderEpoch <= f.leaderEpoch {
		return fmt.Errorf("leader epoch %d, current %d: %w", leaderEpoch, f.leaderEpoch, ErrFencedLeaderEpoch)
	}
	if leader == f.self {
		return fmt.Errorf("broker %d cannot follow itself: %w", f.self, ErrInvalid)
	}
	f.leader, f.leaderEpoch, f.truncating = leader, leaderEpoch, true
	return nil
}

// Next returns the request to send given the local log: while reconciling,
// an end offset query for the largest local epoch at or below the leader
// epoch; then a fetch from the LEO. A log without epochs has nothing to
// reconcile.
func (f *Follower) Next(local LogState) Request {
	if f.truncating {
		epoch := UndefinedEpoch
		for _, e := range local.Epochs {
			if e.Epoch <= f.leaderEpoch {
				epoch = e.Epoch
			}
		}
		if epoch != UndefinedEpoch {
			return Request{Leader: f.leader, Epoch: &EpochRequest{Replica: f.self, LeaderEpoch: f.leaderEpoch, Epoch: epoch}}
		}
		f.truncating = false
	}
	return Request{Leader: f.leader, Fetch: &FetchRequest{
		Replica:          f.self,
		BrokerEpoch:      f.brokerEpoch,
		LeaderEpoch:      f.leaderEpoch,
		FetchOffset:      local.LEO,
		LastFetchedEpoch: local.LatestEpoch(),
	}}
}

// HandleEpochEndOffset takes the leader's answer to req and returns the
// offset the caller must truncate its log to (local.LEO: nothing to do). It
// truncates to the smaller of the leader's end offset and the local end of
// the same epoch; when the leader answered with an epoch the follower lacks,
// it truncates to the end of its largest epoch below that one and asks again
// (KIP-279), so Next returns another query. An undefined answer (the leader
// knows no epoch at or below the one asked) truncates to the local HW.
func (f *Follower) HandleEpochEndOffset(local LogState, req EpochRequest, ans EpochEndOffset) (int64, error) {
	if !f.truncating || req.LeaderEpoch != f.leaderEpoch {
		return local.LEO, fmt.Errorf("epoch answer for leader epoch %d, following %d: %w", req.LeaderEpoch, f.leaderEpoch, ErrStaleResponse)
	}
	to, done := f.truncation(local, ans)
	if done {
		f.truncating = false
	}
	return to, nil
}

// HandleFetch takes the leader's decision for req. When the leader reports a
// divergence it returns the offset to truncate to, computed as in
// HandleEpochEndOffset; the next fetch carries the new last epoch, so the
// leader checks again until the logs agree. Otherwise local must be the log
// after appending the response's records, and the HW becomes the smaller of
// the leader's HW and the local LEO.
func (f *Follower) HandleFetch(local LogState, req FetchRequest, d FetchDecision) (int64, error) {
	if f.truncating || req.LeaderEpoch != f.leaderEpoch {
		return local.LEO, fmt.Errorf("fetch answer for leader epoch %d, following %d: %w", req.LeaderEpoch, f.leaderEpoch, ErrStaleResponse)
	}
	if d.Diverging {
		to, _ := f.truncation(local, d.DivergingEpoch)
		return to, nil
	}
	f.hw = min(d.HW, local.LEO)
	return local.LEO, nil
}

func (f *Follower) truncation(local LogState, ans EpochEndOffset) (to int64, done bool) {
	defer func() { f.hw = min(f.hw, to) }()
	if ans.Undefined() {
		return min(f.hw, local.LEO), true
	}
	mine := EndOffsetFor(local.Epochs, ans.Epoch, local.LEO)
	switch {
	case mine.Undefined():
		return min(ans.EndOffset, local.LEO), true
	case mine.Epoch != ans.Epoch:
		return min(mine.EndOffset, local.LEO), false
	}
	return min(mine.EndOffset, ans.EndOffset, local.LEO), true
}

// HW returns the follower's high watermark: at most its LEO and the leader's
// HW as of the last fetch.
func (f *Follower) HW() int64 { return f.hw }

// Leader returns the leader being followed.
func (f *Follower) Leader() int32 { return f.leader }

// LeaderEpoch returns the leader epoch being followed.
func (f *Follower) LeaderEpoch() int32 { return f.leaderEpoch }

// Reconciling reports whether the follower still has to reconcile its log by
// leader epoch before fetching.
func (f *Follower) Reconciling() bool { return f.truncating }
