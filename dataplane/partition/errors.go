package partition

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// NotLeaderError says this broker cannot serve the partition as leader.
// TopicID and Partition name the partition (TopicID "" when unknown): a
// leader hint is only good for the partition it is about, since leader
// epochs of different partitions do not compare.
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

// notLeader builds the error for this partition when this broker does not
// lead it, as assignment a describes it.
func (p *Replica) notLeader(a Assignment) error {
	return &NotLeaderError{TopicID: p.topicID, Partition: p.id, Leader: a.Leader, Epoch: a.LeaderEpoch, Self: a.Leader == p.h.ID, Address: p.h.LeaderAddress(a.Leader)}
}

// ToConnect maps the replica's errors to Connect errors with details a
// client can act on: NotLeaderError, the refusal of acks=all below min
// ISR, log.OffsetOutOfRangeError; a Connect error passes unchanged, and
// anything else is returned as it is.
func ToConnect(err error) error {
	var nl *NotLeaderError
	var ner *notEnoughReplicasError
	var oor *log.OffsetOutOfRangeError
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return ce // already decided, with its own code: never reinterpret what it wraps
	case errors.As(err, &nl):
		// Offline, or named leader but not leading yet: retrying here
		// succeeds once it is back or has taken over (following the
		// NotLeader to itself would loop). Either way nothing was written.
		code := connect.CodeFailedPrecondition
		if nl.Leader < 0 || nl.Self {
			code = connect.CodeUnavailable
		}
		ce := connect.NewError(code, nl)
		if d, derr := connect.NewErrorDetail(&sluicev1.NotLeader{LeaderId: nl.Leader, LeaderAddress: nl.Address, LeaderEpoch: nl.Epoch,
			TopicId: nl.TopicID, Partition: nl.Partition}); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	case errors.As(err, &ner):
		ce := connect.NewError(connect.CodeFailedPrecondition, ner)
		if d, derr := connect.NewErrorDetail(&sluicev1.NotEnoughReplicas{IsrSize: int32(ner.isr), MinInsyncReplicas: ner.min}); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	case errors.As(err, &oor):
		return connect.NewError(connect.CodeOutOfRange, oor)
	}
	return err
}

// notEnoughReplicasError refuses acks=all writes while the ISR is smaller
// than min.insync.replicas.
type notEnoughReplicasError struct {
	isr int
	min int32
}

func (e *notEnoughReplicasError) Error() string {
	return fmt.Sprintf("not enough replicas: %d in sync, min.insync.replicas is %d; acks=all writes are refused until replicas catch up", e.isr, e.min)
}

// ErrHWCatchingUp: a new leader has not yet learned a high watermark as
// high as the previous leader's (its followers have not all fetched). It
// must not answer with a HW that went backwards; clients retry shortly
// (Kafka's OFFSET_NOT_AVAILABLE).
var ErrHWCatchingUp = connect.NewError(connect.CodeUnavailable, errors.New("the new leader is still establishing its high watermark; retry shortly"))
