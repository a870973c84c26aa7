package replica

import "errors"

// Sentinel errors. Callers branch on them with errors.Is; the broker maps
// them to wire error codes once, at its API seam.
var (
	// ErrNotEnoughReplicas: an acks=all produce is refused, or a pending
	// one failed, because the ISR is smaller than min.insync.replicas.
	// It is never answered by silently downgrading to acks=1.
	ErrNotEnoughReplicas = errors.New("not enough in-sync replicas")
	// ErrNotLeader: this replica is not (or no longer) the leader.
	ErrNotLeader = errors.New("not the leader")
	// ErrFencedLeaderEpoch: the request carries a leader epoch older than
	// the replica's; the sender is stale and must refresh its metadata.
	ErrFencedLeaderEpoch = errors.New("fenced leader epoch")
	// ErrUnknownLeaderEpoch: the request carries a leader epoch newer than
	// the replica's; the receiver has not learned of the change yet (it may
	// be a stale leader). Retriable.
	ErrUnknownLeaderEpoch = errors.New("unknown leader epoch")
	// ErrStaleBrokerEpoch: a fetch from an older incarnation of a broker
	// (a zombie that restarted since).
	ErrStaleBrokerEpoch = errors.New("stale broker epoch")
	// ErrNotReplica: a fetch from a broker that is not a replica of the
	// partition.
	ErrNotReplica = errors.New("not a replica")
	// ErrStalePartitionEpoch: an ISR change notification older than the
	// state it would replace; it is ignored.
	ErrStalePartitionEpoch = errors.New("stale partition epoch")
	// ErrOffsetOutOfRange: a follower fetched past the leader's LEO without
	// a last fetched epoch that would explain a divergence.
	ErrOffsetOutOfRange = errors.New("fetch offset out of range")
	// ErrTruncateBelowHW: the leader's answer would make a follower
	// truncate records below its HW (committed records). A leader elected
	// from the ISR never asks that; only an unclean election can, and the
	// follower complies only when the topic opted in to it.
	ErrTruncateBelowHW = errors.New("truncation below the high watermark")
	// ErrStaleResponse: an answer to a request made under an older leader
	// epoch (or from an older log state); it is ignored.
	ErrStaleResponse = errors.New("stale response")
	// ErrInvalid: an argument breaks the documented contract (a caller bug).
	ErrInvalid = errors.New("invalid argument")
)
