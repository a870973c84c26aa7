package replica

import (
	"fmt"
)

// FollowerParams describe a replica when it becomes a follower.
type FollowerParams struct {
	Self        int32
	BrokerEpoch int64 // this broker's current registration
	Leader      int32
	LeaderEpoch int32
	HW          int64 // the local high watermark (the replica's last known one)
	// Unclean: the topic opted in to unclean leader election, so a leader
	// may lack committed records and the follower truncates below its HW
	// when told to (accepting the loss). Otherwise it refuses
	// (ErrTruncateBelowHW).
	Unclean bool
}

// Follower is the replication state machine of a follower. It fetches from
// its LEO with the epoch of its last batch; the leader checks that epoch on
// every fetch (FollowerFetch), so after every leader epoch change, even when
// the leader stays the same broker (KAFKA-7164), the first fetch detects a
// divergent tail and the answer says where to truncate (KIP-101, KIP-279,
// with the divergence carried by the fetch as in KIP-320 and Kafka ≥ 2.7).
// It is not safe for concurrent use and does no I/O: the caller sends the
// requests, truncates and appends to the log, and passes the log's state to
// each call.
type Follower struct {
	self        int32
	brokerEpoch int64
	leader      int32
	leaderEpoch int32
	hw          int64
	unclean     bool
}

// NewFollower returns a follower of p.Leader at p.LeaderEpoch.
func NewFollower(p FollowerParams) (*Follower, error) {
	if p.LeaderEpoch < 0 || p.HW < 0 {
		return nil, fmt.Errorf("leader epoch %d, HW %d: must not be negative: %w", p.LeaderEpoch, p.HW, ErrInvalid)
	}
	if p.Leader == p.Self {
		return nil, fmt.Errorf("broker %d cannot follow itself: %w", p.Self, ErrInvalid)
	}
	return &Follower{self: p.Self, brokerEpoch: p.BrokerEpoch, leader: p.Leader,
		leaderEpoch: p.LeaderEpoch, hw: p.HW, unclean: p.Unclean}, nil
}

// BecomeFollower switches to leader at leaderEpoch, which must be above the
// current epoch (else ErrFencedLeaderEpoch and nothing changes). The next
// fetch, whether or not the leader changed, carries the last fetched epoch,
// so the new leadership checks the log for divergence.
func (f *Follower) BecomeFollower(leader, leaderEpoch int32) error {
	if leaderEpoch <= f.leaderEpoch {
		return fmt.Errorf("leader epoch %d, current %d: %w", leaderEpoch, f.leaderEpoch, ErrFencedLeaderEpoch)
	}
	if leader == f.self {
		return fmt.Errorf("broker %d cannot follow itself: %w", f.self, ErrInvalid)
	}
	f.leader, f.leaderEpoch = leader, leaderEpoch
	return nil
}

// SetUnclean applies a changed unclean.leader.election.enable of the topic.
func (f *Follower) SetUnclean(unclean bool) { f.unclean = unclean }

// Next returns the fetch to send to Leader() given the local log: from its
// LEO, with the epoch of its last batch and the end of its durable prefix
// (what the leader may count toward the HW).
func (f *Follower) Next(local LogState) FetchRequest {
	return FetchRequest{
		Replica:          f.self,
		BrokerEpoch:      f.brokerEpoch,
		LeaderEpoch:      f.leaderEpoch,
		FetchOffset:      local.LEO,
		LastFetchedEpoch: local.LatestEpoch(),
		Durable:          min(max(local.Durable, 0), local.LEO),
	}
}

// HandleFetch takes the leader's decision for req. When the leader reports
// a divergence, local must be the log req was built from, and HandleFetch
// returns the offset the caller must truncate it to: the end of the largest
// epoch both logs know, which is the smaller of the leader's end of the
// epoch it answered and the local end of that epoch; when the answer names
// an epoch the follower lacks, the end of its largest epoch below that one
// (KIP-279); when the leader knows no epoch at or below the one asked, the
// local HW. The next fetch carries the new last epoch, so the leader checks
// again until the logs agree. A truncation point below the HW is refused
// with ErrTruncateBelowHW, changing nothing, unless the topic allows
// unclean leader election; then the HW follows it down.
//
// Otherwise local must be the log after appending the answer's records: the
// HW becomes the leader's HW capped at the local LEO, and never moves back
// (a new leader may start with a lower HW than its predecessor exposed; what
// was committed stays committed). It returns local.LEO.
func (f *Follower) HandleFetch(local LogState, req FetchRequest, d FetchDecision) (int64, error) {
	if req.LeaderEpoch != f.leaderEpoch || req.Replica != f.self {
		return local.LEO, fmt.Errorf("fetch answer for leader epoch %d, following %d: %w", req.LeaderEpoch, f.leaderEpoch, ErrStaleResponse)
	}
	if d.Diverging {
		if err := f.CheckAnswer(local, req); err != nil {
			return local.LEO, err
		}
		to := truncation(local, f.hw, d.DivergingEpoch)
		if to < f.hw {
			if !f.unclean {
				return local.LEO, fmt.Errorf("leader %d at epoch %d: truncate to %d, below the HW %d: %w", f.leader, f.leaderEpoch, to, f.hw, ErrTruncateBelowHW)
			}
			f.hw = to
		}
		return to, nil
	}
	f.hw = max(f.hw, min(d.HW, local.LEO))
	return local.LEO, nil
}

// CheckAnswer reports whether an answer to req may be applied to the local
// log before anything is appended or truncated: ErrStaleResponse when req
// was made under another leader epoch or from another log end.
func (f *Follower) CheckAnswer(local LogState, req FetchRequest) error {
	if req.LeaderEpoch != f.leaderEpoch || req.Replica != f.self || req.FetchOffset != local.LEO {
		return fmt.Errorf("fetch answer for leader epoch %d at offset %d, following %d at LEO %d: %w", req.LeaderEpoch, req.FetchOffset, f.leaderEpoch, local.LEO, ErrStaleResponse)
	}
	return nil
}

// Truncated reports that the local log was cut to leo outside of HandleFetch
// (a log reset to the leader's log start, or a failed truncation that left
// less): the HW is capped at it.
func (f *Follower) Truncated(leo int64) { f.hw = max(0, min(f.hw, leo)) }

func truncation(local LogState, hw int64, ans EpochEndOffset) int64 {
	if ans.Undefined() {
		return min(hw, local.LEO)
	}
	mine := EndOffsetFor(local.Epochs, ans.Epoch, local.LEO)
	switch {
	case mine.Undefined():
		return min(ans.EndOffset, local.LEO)
	case mine.Epoch != ans.Epoch:
		return min(mine.EndOffset, local.LEO)
	}
	return min(mine.EndOffset, ans.EndOffset, local.LEO)
}

// HW returns the follower's high watermark: at most its LEO and the largest
// HW a leader sent it.
func (f *Follower) HW() int64 { return f.hw }

// Leader returns the leader being followed.
func (f *Follower) Leader() int32 { return f.leader }

// LeaderEpoch returns the leader epoch being followed.
func (f *Follower) LeaderEpoch() int32 { return f.leaderEpoch }

// SetBrokerEpoch records that this broker registered again: later fetches
// carry the new epoch.
func (f *Follower) SetBrokerEpoch(e int64) { f.brokerEpoch = e }
