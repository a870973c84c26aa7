package broker

import (
	"slices"
	"time"
)

// leaderState is a partition leader's view of its followers: their log end
// offsets, when each last caught up, and from that the high watermark.
//
// Invariants: hw ≤ the LEO of every ISR member; hw never decreases; hw does
// not advance while |ISR| < min.insync.replicas (Kafka's strict min ISR,
// KIP-966), so nothing is reported committed that fewer than min ISR
// replicas hold.
type leaderState struct {
	self      int32
	minISR    int32
	isr       []int32
	replicas  []int32
	leo       int64
	hwm       int64
	followers map[int32]*followerState
	// pending is an ISR proposed to the controller and not yet confirmed.
	// While an expansion is pending, the HW also waits for the joining
	// members (Kafka's "maximal ISR"), so that once the controller confirms
	// it, every ISR member really holds everything below the HW.
	pending []int32
}

type followerState struct {
	leo          int64
	lastCaughtUp time.Time // last time its fetch reached the leader's LEO
	lastFetch    time.Time
}

func newLeaderState(self int32, meta partMeta, minISR int32, leo, hw int64, now time.Time) *leaderState {
	l := &leaderState{self: self, minISR: minISR, isr: slices.Clone(meta.isr), replicas: slices.Clone(meta.replicas), leo: leo, hwm: hw, followers: map[int32]*followerState{}}
	for _, r := range meta.replicas {
		if r != self {
			// A new leader gives every follower a full lag window to catch up.
			l.followers[r] = &followerState{leo: -1, lastCaughtUp: now}
		}
	}
	return l
}

func (l *leaderState) hw() int64 { return l.hwm }

func (l *leaderState) canAckAll() error {
	if int32(len(l.isr)) < l.minISR {
		return &notEnoughReplicasError{isr: len(l.isr), min: l.minISR}
	}
	return nil
}

// appended records the leader's new LEO; it reports whether the HW moved.
func (l *leaderState) appended(leo int64, now time.Time) bool {
	l.leo = leo
	return l.advance()
}

// followerFetched records that follower holds every offset below
// fetchOffset; it reports whether the HW moved.
func (l *leaderState) followerFetched(follower int32, fetchOffset int64, now time.Time) bool {
	f, ok := l.followers[follower]
	if !ok {
		return false
	}
	f.leo = fetchOffset
	f.lastFetch = now
	if fetchOffset >= l.leo {
		f.lastCaughtUp = now
	}
	return l.advance()
}

// setISR applies an ISR confirmed by the controller and clears any
// pending proposal.
func (l *leaderState) setISR(isr []int32) bool {
	l.isr = slices.Clone(isr)
	l.pending = nil
	return l.advance()
}

// propose records an ISR sent to the controller.
func (l *leaderState) propose(isr []int32) { l.pending = slices.Clone(isr) }

// maximalISR is the confirmed ISR plus members of a pending proposal.
func (l *leaderState) maximalISR() []int32 {
	out := slices.Clone(l.isr)
	for _, r := range l.pending {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func (l *leaderState) advance() bool {
	if int32(len(l.isr)) < l.minISR {
		return false
	}
	hw := l.leo
	for _, r := range l.maximalISR() {
		if r == l.self {
			continue
		}
		f, ok := l.followers[r]
		if !ok || f.leo < 0 {
			return false // an ISR member we have not heard from yet holds the HW
		}
		hw = min(hw, f.leo)
	}
	if hw > l.hwm {
		l.hwm = hw
		return true
	}
	return false
}

// isrChange proposes a new ISR: followers in the ISR that have not caught
// up within lagMax leave; replicas outside it that reached the HW join.
// It returns nil when nothing should change.
func (l *leaderState) isrChange(now time.Time, lagMax time.Duration) []int32 {
	next := []int32{l.self}
	for _, r := range l.replicas {
		if r == l.self {
			continue
		}
		f := l.followers[r]
		in := slices.Contains(l.isr, r)
		switch {
		case in && now.Sub(f.lastCaughtUp) <= lagMax:
			next = append(next, r)
		case !in && f.leo >= l.hwm && f.leo >= 0 && now.Sub(f.lastCaughtUp) <= lagMax:
			next = append(next, r)
		}
	}
	slices.Sort(next)
	cur := slices.Clone(l.isr)
	slices.Sort(cur)
	if slices.Equal(next, cur) {
		return nil
	}
	return next
}
