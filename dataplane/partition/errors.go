package partition

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
)

// NotLeaderError says this broker cannot serve the partition as leader
// (derr.NotLeaderError: the leader hint).
type NotLeaderError = derr.NotLeaderError

// notLeader builds the error for this partition when this broker does not
// lead it, as assignment a describes it.
func (p *Replica) notLeader(a Assignment) error {
	return &NotLeaderError{TopicID: p.topicID, Partition: p.id, Leader: a.Leader, Epoch: a.LeaderEpoch, Self: a.Leader == p.h.ID, Address: p.h.LeaderAddress(a.Leader)}
}

// notEnoughReplicas refuses acks=all writes while the ISR (isr members)
// is smaller than min.insync.replicas.
func notEnoughReplicas(isr int, min int32) error {
	return &derr.Error{Kind: derr.NotEnoughReplicas, Replicas: &derr.ReplicaCount{ISR: isr, MinISR: min},
		Err: fmt.Errorf("not enough replicas: %d in sync, min.insync.replicas is %d; acks=all writes are refused until replicas catch up", isr, min)}
}

// offsetOutOfRange is the log's refusal of an offset outside it, as a
// domain error with the range.
func offsetOutOfRange(oor *log.OffsetOutOfRangeError) error {
	return &derr.Error{Kind: derr.OffsetOutOfRange, Err: oor, Range: &derr.OffsetRange{Offset: oor.Offset, LogStart: oor.LogStart, LEO: oor.LEO}}
}

// ErrHWCatchingUp: a new leader has not yet learned a high watermark as
// high as the previous leader's (its followers have not all fetched). It
// must not answer with a HW that went backwards; clients retry shortly
// (Kafka's OFFSET_NOT_AVAILABLE).
var ErrHWCatchingUp = derr.New(derr.OffsetNotAvailable, "the new leader is still establishing its high watermark; retry shortly")

// logError is err from the log, with its refusal of an offset outside it
// as a domain error (offsetOutOfRange); other errors pass unchanged.
func logError(err error) error {
	var oor *log.OffsetOutOfRangeError
	if errors.As(err, &oor) {
		return offsetOutOfRange(oor)
	}
	return err
}
