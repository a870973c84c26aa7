package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
)

// Marker is a transaction marker a transaction coordinator writes to this
// partition: a control batch ending ProducerID's transaction here,
// committing or aborting its batches (record.ControlRecord).
type Marker struct {
	ProducerID    int64
	ProducerEpoch int16
	// CoordinatorEpoch is the writing coordinator's leader epoch.
	CoordinatorEpoch int32
	Commit           bool
}

// WriteMarker appends m as the leader, at its leader epoch, with acks=all,
// and returns its offset once the ISR has it (at most timeout). It is
// checked first (producerstate.CheckMarker): a producer epoch older than
// the producer's here, or a coordinator epoch older than that of the
// producer's last marker, is refused with FailedPrecondition and a
// TransactionError detail (REASON_PRODUCER_FENCED). Writing the same
// marker again is harmless: it passes the check, ends nothing (the
// producer has no ongoing transaction any more) and appends another
// control batch, which readers never see. The other errors are Produce's:
// NotLeader and NotEnoughReplicas details when nothing was written,
// Unavailable or DeadlineExceeded when the marker was written but its
// fate is unknown.
func (p *Replica) WriteMarker(ctx context.Context, m Marker, timeout time.Duration) (int64, error) {
	typ := record.ControlAbort
	if m.Commit {
		typ = record.ControlCommit
	}
	h, recs := record.MarkerBatch(m.ProducerID, m.ProducerEpoch, time.Now().UnixMilli(), record.ControlRecord{Type: typ, CoordinatorEpoch: m.CoordinatorEpoch})
	v, err := log.EncodeLeaderBatch(nil, h, recs)
	if err != nil {
		return -1, fmt.Errorf("encode marker: %w", err)
	}
	p.mu.Lock()
	if p.role != RoleLeader || p.lead == nil || p.lead.Resigned() {
		meta := p.meta
		p.mu.Unlock()
		return -1, p.notLeader(meta)
	}
	if err := p.pstate.CheckMarker(m.ProducerID, m.ProducerEpoch, m.CoordinatorEpoch); err != nil {
		p.mu.Unlock()
		return -1, producerError(p.h.Metrics, err, true)
	}
	if err := p.lead.CanAcceptAcksAll(); err != nil {
		err = p.replicaError(err)
		p.mu.Unlock()
		return -1, err
	}
	lead := p.lead
	if p.cfg.LogAppendTime {
		v = v.WithLogAppendTime() // as Kafka stamps every batch of such a topic
	}
	base, leo, appendErr := p.log.AppendValidated(v, p.meta.LeaderEpoch)
	if appendErr != nil {
		appendErr = fmt.Errorf("append marker: %w", appendErr)
	} else {
		p.applyAppendedLocked(v.Batch())
	}
	a, err := p.publishAppendLocked(lead, leo, true, appendErr)
	if err != nil {
		return -1, err
	}
	if err := p.awaitAppend(ctx, a, timeout); err != nil {
		return -1, err
	}
	return base, nil
}

// Verifier asks the transaction coordinator whether this partition is in
// producer pid's current transaction at epoch, registering it there
// (KIP-890's verification, AddPartitions); nil means it is. Its error is
// the produce's answer, as it is.
type Verifier func(ctx context.Context, pid int64, epoch int16) error

// verification is a producer's entry in Replica.verified: epoch is
// verified once done is set; until then a verification of it is in
// flight, and wait is closed when it ends.
type verification struct {
	epoch int16
	done  bool
	wait  chan struct{}
}

// verifiedLocked reports whether producer pid is verified at epoch on this
// leadership.
func (p *Replica) verifiedLocked(pid int64, epoch int16) bool {
	v := p.verified[pid]
	return v != nil && v.done && v.epoch == epoch
}

// verifyLocked verifies producer pid at epoch with verify, releasing p.mu
// during the call and holding it again on return; with a verification of
// the same epoch in flight it waits for that one instead (started false).
// The caller checks everything again afterwards: a marker of pid or a role
// change meanwhile clears the verification. The error is the verifier's
// (or ctx's).
func (p *Replica) verifyLocked(ctx context.Context, verify Verifier, pid int64, epoch int16) (started bool, _ error) {
	if v := p.verified[pid]; v != nil && !v.done && v.epoch == epoch {
		p.mu.Unlock()
		select {
		case <-v.wait:
		case <-ctx.Done():
		}
		p.mu.Lock()
		return false, ctx.Err()
	}
	if p.verified == nil {
		p.verified = map[int64]*verification{}
	}
	mine := &verification{epoch: epoch, wait: make(chan struct{})}
	p.verified[pid] = mine
	p.mu.Unlock()
	err := verify(ctx, pid, epoch)
	p.mu.Lock()
	close(mine.wait)
	if p.verified[pid] == mine { // no marker or role change meanwhile
		if err != nil {
			delete(p.verified, pid)
		} else {
			mine.done = true
		}
	}
	return true, err
}

// transactionError is a domain error of kind with a transaction reason.
func transactionError(kind derr.Kind, reason derr.TxnReason, err error) *derr.Error {
	return &derr.Error{Kind: kind, Err: err, Txn: reason}
}

// errMarkerUndecodable: an appended control batch whose control record
// does not decode (the log checked its CRC, so its writer wrote it so).
var errMarkerUndecodable = errors.New("a control batch in the log does not hold a valid transaction marker")

// applyMarkerLocked applies an appended control batch b to the producer
// state and forgets the producer's verification: its transaction ended
// (for readers once the HW passes the marker: Replica.unreplicated). A
// marker that does not decode stops the broker, as a failed rebuild does
// (Rebuild would refuse the same log).
func (p *Replica) applyMarkerLocked(b record.Batch, now int64) {
	pb, ok, err := producerstate.FromBatch(b)
	if err != nil {
		err = fmt.Errorf("%w: offset %d: %w", errMarkerUndecodable, b.BaseOffset(), err)
		p.h.Logger.Error("producer state", "topic", p.topicID, "partition", p.id, "err", err)
		p.pstate.Apply(producerstate.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, LastSequence: -1,
			FirstOffset: b.BaseOffset(), LastOffset: b.LastOffset(), MaxTimestamp: b.MaxTimestamp()})
		go p.h.failStop(p, err)
		return
	}
	if e, found := p.pstate.Producer(pb.ProducerID); ok && found && e.TxnFirstOffset >= 0 {
		// It ends a transaction: readers see the end once the HW passes
		// the marker (lsoLocked). Pruned here too, so that a replica
		// nobody asks for its LSO keeps only markers above its HW.
		p.pruneUnreplicatedLocked(p.hwLocked())
		p.unreplicated = append(p.unreplicated, unreplicatedTxn{first: e.TxnFirstOffset, marker: pb.LastOffset})
	}
	p.pstate.Apply(pb)
	if ok {
		p.pstate.Seen(pb.ProducerID, now)
		delete(p.verified, pb.ProducerID)
	}
}
