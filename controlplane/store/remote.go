package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Remote segments (tiered storage; Kafka's KIP-405 remote log metadata). A
// partition's remote segments are written only by its current leader, fenced
// by its broker epoch and leader epoch. The fence is checked in the same
// transaction as the write, serialised against every change of the
// partition's state and against the partition's other remote-segment
// writes, so a write never lands after a leader change it did not see.
//
// The segments that were ever finished (moved to RemoteCopyFinished, whatever
// their state now) cover consecutive offset ranges with no gap and no
// overlap: a copy may only start (AddRemoteSegment) and finish at the
// partition's next base offset, end offset + 1 of the highest segment ever
// finished. A copy abandoned before it finished (RemoteCopyStarted →
// RemoteDeleteStarted) never moves the next base offset.

// RemoteSegmentState is where a remote segment is in its life:
// RemoteCopyStarted → RemoteCopyFinished → RemoteDeleteStarted →
// RemoteDeleted, or RemoteCopyStarted → RemoteDeleteStarted for a copy that
// will never finish.
type RemoteSegmentState string

// The remote segment states, as stored.
const (
	RemoteCopyStarted   RemoteSegmentState = "copy_started"
	RemoteCopyFinished  RemoteSegmentState = "copy_finished"
	RemoteDeleteStarted RemoteSegmentState = "delete_started"
	RemoteDeleted       RemoteSegmentState = "deleted"
)

// Valid reports whether s is one of the four states.
func (s RemoteSegmentState) Valid() bool {
	switch s {
	case RemoteCopyStarted, RemoteCopyFinished, RemoteDeleteStarted, RemoteDeleted:
		return true
	}
	return false
}

// EpochStart is the first offset of a leader epoch within a remote segment.
type EpochStart struct {
	Epoch       int32
	StartOffset int64
}

// RemoteSegment is one log segment copied to the object store: the batches
// [BaseOffset, EndOffset] of one partition.
type RemoteSegment struct {
	ID             string // UUID, chosen by the control plane
	TenantID       string // the topic's tenant
	TopicID        string
	Partition      int32
	BaseOffset     int64
	EndOffset      int64 // inclusive
	LeaderEpoch    int32 // of the leader that copied it
	SizeBytes      int64
	MaxTimestampMs int64 // -1 when no record has a timestamp
	ObjectKey      string
	State          RemoteSegmentState
	BrokerID       int32        // the leader that copied it
	Epochs         []EpochStart // the leader epochs in the segment, in order; the first starts at BaseOffset
	CreatedAt      time.Time
	UpdatedAt      time.Time // of the latest state change
	// CopyFinished: the segment reached RemoteCopyFinished once (whatever
	// its state now), so it counts toward the next base offset.
	CopyFinished bool
}

// LeaderFence names the caller of a remote-segment write: a broker, the
// broker epoch of its current registration, and the leader epoch it leads
// the partition in.
type LeaderFence struct {
	BrokerID    int32
	BrokerEpoch int64
	LeaderEpoch int32
}

// RemoteRefusal is why a remote-segment write was refused.
type RemoteRefusal int

// The reasons of a *RemoteSegmentError.
const (
	// RemoteStaleBrokerEpoch: the broker registered again since (a zombie).
	RemoteStaleBrokerEpoch RemoteRefusal = iota + 1
	// RemoteNotLeader: the broker does not lead the partition.
	RemoteNotLeader
	// RemoteStaleLeaderEpoch: the broker leads the partition, at another
	// leader epoch than the caller said.
	RemoteStaleLeaderEpoch
	// RemoteBaseOffset: the segment does not start at the partition's next
	// base offset (a gap, or an overlap with a finished segment).
	RemoteBaseOffset
	// RemoteNotCopier: only the leader (broker and leader epoch) that
	// started a copy may finish it.
	RemoteNotCopier
	// RemoteIllegalTransition: the segment cannot move from its state to
	// the one asked for.
	RemoteIllegalTransition
)

// RemoteSegmentError is a remote-segment write refused because of the
// caller's fence, the partition's remote offsets or the segment's state.
// Nothing was written. It wraps ErrConflict.
type RemoteSegmentError struct {
	Reason RemoteRefusal
	// The state the refusal was decided on.
	BrokerEpoch    int64 // the broker's current epoch
	Leader         int32 // the partition's leader; -1 when offline
	LeaderEpoch    int32 // the partition's leader epoch
	NextBaseOffset int64 // where the next copy must begin; -1 when no segment was ever finished
	// The segment's, for RemoteNotCopier and RemoteIllegalTransition.
	State         RemoteSegmentState
	CopierBroker  int32
	CopierEpoch   int32
	RequestedBase int64              // the segment's base offset, for RemoteBaseOffset
	Requested     RemoteSegmentState // the state asked for, for RemoteIllegalTransition
}

func (e *RemoteSegmentError) Error() string {
	switch e.Reason {
	case RemoteStaleBrokerEpoch:
		return fmt.Sprintf("stale broker epoch (current %d); register again", e.BrokerEpoch)
	case RemoteNotLeader:
		return fmt.Sprintf("not the partition's leader (leader %d at leader epoch %d)", e.Leader, e.LeaderEpoch)
	case RemoteStaleLeaderEpoch:
		return fmt.Sprintf("stale leader epoch (current %d)", e.LeaderEpoch)
	case RemoteBaseOffset:
		if e.NextBaseOffset < 0 {
			return fmt.Sprintf("base offset %d is not where the remote log continues (no segment finished yet)", e.RequestedBase)
		}
		return fmt.Sprintf("base offset %d is not where the remote log continues (next base offset %d)", e.RequestedBase, e.NextBaseOffset)
	case RemoteNotCopier:
		return fmt.Sprintf("the copy was started by broker %d at leader epoch %d; only that leader may finish it", e.CopierBroker, e.CopierEpoch)
	case RemoteIllegalTransition:
		return fmt.Sprintf("a remote segment in state %s cannot move to %s", e.State, e.Requested)
	}
	return "remote segment write refused"
}

func (e *RemoteSegmentError) Unwrap() error { return ErrConflict }

// RemoteFenceState is what a driver reads, inside the write's transaction,
// to decide a remote-segment write.
type RemoteFenceState struct {
	BrokerEpoch    int64
	Leader         int32
	LeaderEpoch    int32
	NextBaseOffset int64 // -1 when no segment was ever finished
}

func (s RemoteFenceState) refuse(r RemoteRefusal) *RemoteSegmentError {
	return &RemoteSegmentError{Reason: r, BrokerEpoch: s.BrokerEpoch, Leader: s.Leader, LeaderEpoch: s.LeaderEpoch, NextBaseOffset: s.NextBaseOffset}
}

// CheckRemoteFence refuses a caller that is not the partition's current
// leader at its current broker and leader epochs.
func CheckRemoteFence(f LeaderFence, s RemoteFenceState) error {
	switch {
	case f.BrokerEpoch != s.BrokerEpoch:
		return s.refuse(RemoteStaleBrokerEpoch)
	case f.BrokerID != s.Leader:
		return s.refuse(RemoteNotLeader)
	case f.LeaderEpoch != s.LeaderEpoch:
		return s.refuse(RemoteStaleLeaderEpoch)
	}
	return nil
}

// CheckRemoteAdd decides AddRemoteSegment of seg by f: the fence, then the
// base offset.
func CheckRemoteAdd(f LeaderFence, s RemoteFenceState, seg RemoteSegment) error {
	if err := CheckRemoteFence(f, s); err != nil {
		return err
	}
	if s.NextBaseOffset >= 0 && seg.BaseOffset != s.NextBaseOffset {
		e := s.refuse(RemoteBaseOffset)
		e.RequestedBase = seg.BaseOffset
		return e
	}
	return nil
}

// CheckRemoteUpdate decides UpdateRemoteSegmentState of cur to `to` by f. It
// returns done when cur is in that state already (nothing to write).
//
// The fence is checked first, so a fenced caller learns nothing else; then a
// repeat succeeds; then the transition must be one of COPY_STARTED →
// COPY_FINISHED, COPY_STARTED → DELETE_STARTED, COPY_FINISHED →
// DELETE_STARTED, DELETE_STARTED → DELETED. Finishing also needs the copy to
// be the caller's (same broker and leader epoch) and to start at the next
// base offset.
func CheckRemoteUpdate(f LeaderFence, s RemoteFenceState, cur RemoteSegment, to RemoteSegmentState) (done bool, err error) {
	if !to.Valid() {
		return false, fmt.Errorf("invalid remote segment state %q", to)
	}
	if err := CheckRemoteFence(f, s); err != nil {
		return false, err
	}
	if cur.State == to {
		return true, nil
	}
	if !remoteTransitions[cur.State][to] {
		e := s.refuse(RemoteIllegalTransition)
		e.State, e.Requested = cur.State, to
		return false, e
	}
	if to == RemoteCopyFinished {
		if cur.BrokerID != f.BrokerID || cur.LeaderEpoch != f.LeaderEpoch {
			e := s.refuse(RemoteNotCopier)
			e.State, e.CopierBroker, e.CopierEpoch = cur.State, cur.BrokerID, cur.LeaderEpoch
			return false, e
		}
		if s.NextBaseOffset >= 0 && cur.BaseOffset != s.NextBaseOffset {
			e := s.refuse(RemoteBaseOffset)
			e.RequestedBase = cur.BaseOffset
			return false, e
		}
	}
	return false, nil
}

var remoteTransitions = map[RemoteSegmentState]map[RemoteSegmentState]bool{
	RemoteCopyStarted:   {RemoteCopyFinished: true, RemoteDeleteStarted: true},
	RemoteCopyFinished:  {RemoteDeleteStarted: true},
	RemoteDeleteStarted: {RemoteDeleted: true},
}

// CheckRemoteSegment validates a segment about to be added by f: ids are
// UUIDs (returned canonical in the copy), its leader epoch is f's, offsets
// and epochs are not negative,
// BaseOffset ≤ EndOffset, SizeBytes > 0, MaxTimestampMs ≥ -1, an object
// key, and Epochs non-empty, strictly increasing in both epoch and start
// offset, the first starting at BaseOffset, all within [BaseOffset,
// EndOffset] and none above LeaderEpoch.
func CheckRemoteSegment(f LeaderFence, seg RemoteSegment) (RemoteSegment, error) {
	bad := func(format string, args ...any) (RemoteSegment, error) {
		return RemoteSegment{}, fmt.Errorf("invalid remote segment %s of %s/%d: %s", seg.ID, seg.TopicID, seg.Partition, fmt.Sprintf(format, args...))
	}
	var err error
	if seg.ID, err = CheckNewID("remote segment", seg.ID); err != nil {
		return RemoteSegment{}, err
	}
	if seg.TenantID, err = CheckNewID("tenant", seg.TenantID); err != nil {
		return RemoteSegment{}, err
	}
	if seg.TopicID, err = CheckNewID("topic", seg.TopicID); err != nil {
		return RemoteSegment{}, err
	}
	switch {
	case seg.Partition < 0:
		return bad("negative partition")
	case seg.BaseOffset < 0:
		return bad("negative base offset %d", seg.BaseOffset)
	case seg.EndOffset < seg.BaseOffset:
		return bad("end offset %d below base offset %d", seg.EndOffset, seg.BaseOffset)
	case seg.LeaderEpoch < 0:
		return bad("negative leader epoch %d", seg.LeaderEpoch)
	case seg.LeaderEpoch != f.LeaderEpoch:
		return bad("leader epoch %d is not the caller's %d", seg.LeaderEpoch, f.LeaderEpoch)
	case seg.SizeBytes <= 0:
		return bad("size %d is not positive", seg.SizeBytes)
	case seg.MaxTimestampMs < -1:
		return bad("max timestamp %d below -1", seg.MaxTimestampMs)
	case seg.ObjectKey == "":
		return bad("empty object key")
	case len(seg.Epochs) == 0:
		return bad("no leader epochs")
	case seg.Epochs[0].StartOffset != seg.BaseOffset:
		return bad("first leader epoch starts at %d, not at the base offset %d", seg.Epochs[0].StartOffset, seg.BaseOffset)
	}
	for i, e := range seg.Epochs {
		switch {
		case e.Epoch < 0:
			return bad("negative leader epoch %d in epochs", e.Epoch)
		case e.Epoch > seg.LeaderEpoch:
			return bad("leader epoch %d in epochs is above the copier's %d", e.Epoch, seg.LeaderEpoch)
		case e.StartOffset > seg.EndOffset:
			return bad("leader epoch %d starts at %d, after the end offset %d", e.Epoch, e.StartOffset, seg.EndOffset)
		case i > 0 && (e.Epoch <= seg.Epochs[i-1].Epoch || e.StartOffset <= seg.Epochs[i-1].StartOffset):
			return bad("epochs not strictly increasing at %d", i)
		}
	}
	seg.Epochs = slices.Clone(seg.Epochs)
	return seg, nil
}

// epochJSON is how an EpochStart is stored (JSON in both drivers).
type epochJSON struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"start_offset"`
}

// EpochsJSON encodes a segment's leader epochs as stored.
func EpochsJSON(epochs []EpochStart) string {
	v := make([]epochJSON, len(epochs))
	for i, e := range epochs {
		v[i] = epochJSON(e)
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain integers always marshal
	}
	return string(b)
}

// ParseEpochsJSON decodes what EpochsJSON stored; an empty list is nil.
func ParseEpochsJSON(b []byte) ([]EpochStart, error) {
	var v []epochJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("decode remote segment epochs: %w", err)
	}
	if len(v) == 0 {
		return nil, nil
	}
	out := make([]EpochStart, len(v))
	for i, e := range v {
		out[i] = EpochStart(e)
	}
	return out, nil
}
