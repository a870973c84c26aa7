package derr

import "fmt"

// NotLeaderError says this broker cannot serve the partition as leader,
// with the leader hint a client routes by. TopicID and Partition name the
// partition (TopicID "" when unknown): a leader hint is only good for the
// partition it is about, since leader epochs of different partitions do
// not compare.
type NotLeaderError struct {
	TopicID   string
	Partition int32
	Leader    int32 // -1: offline
	Epoch     int32
	Address   string
	// Self: the metadata names this very broker, whose replica is not
	// leading: it has not taken over yet (still opening the log, applying
	// the view), or it stepped down and the next view has not arrived.
	Self bool
}

func (e *NotLeaderError) Error() string {
	var msg string
	switch {
	case e.Leader < 0:
		msg = "partition is offline: no in-sync replica is alive"
	case e.Self:
		msg = fmt.Sprintf("this broker (%d) is named the leader at epoch %d but is not leading the partition (yet); retry shortly", e.Leader, e.Epoch)
	default:
		msg = fmt.Sprintf("not the leader: broker %d (%s) leads at epoch %d", e.Leader, e.Address, e.Epoch)
	}
	if e.TopicID != "" {
		msg += fmt.Sprintf(" (topic %s partition %d)", e.TopicID, e.Partition)
	}
	return msg
}

// ErrorKind is LeaderNotAvailable when the partition is offline or this
// broker is named its leader but not leading (retrying here succeeds once
// it is back or has taken over; following the hint to itself would
// loop), else NotLeaderOrFollower. Either way nothing was done.
func (e *NotLeaderError) ErrorKind() Kind {
	if e.Leader < 0 || e.Self {
		return LeaderNotAvailable
	}
	return NotLeaderOrFollower
}

// Is reports whether target is e's kind.
func (e *NotLeaderError) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.ErrorKind()
}
