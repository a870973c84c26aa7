package partition

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
)

const (
	// sequenceGapWait is how long a leader holds a batch whose sequence is
	// ahead of the next expected one, waiting for the batches before it:
	// a client's concurrent requests (up to 5 per partition) can arrive
	// in any order over HTTP/2, and holding beats refusing and resending.
	sequenceGapWait = time.Second
	// producerIDExpiration: a producer id with no batch in a partition for
	// this long is forgotten there (Kafka's producer.id.expiration.ms).
	producerIDExpiration = 24 * time.Hour
	// producerExpireInterval is how often SnapshotProducers looks for
	// producers idle for producerIDExpiration (in memory; the next
	// snapshot leaves them out).
	producerExpireInterval = 30 * time.Second
)

// checkSequenceLocked runs the idempotence check of one batch
// (CheckTransactional for a transactional batch, verified when the
// replica's cache says so). It returns the duplicate result, a Connect
// error to answer, or, with wait true, that the batch is ahead of the
// expected sequence and may be waited for.
func (p *Replica) checkSequenceLocked(h record.BatchHeader) (res producerstate.Result, wait bool, err error) {
	txn := h.Attributes.Transactional()
	if h.ProducerID < 0 && !txn {
		return res, false, nil
	}
	b, _ := producerstate.FromHeader(h)
	if txn {
		res, err = p.pstate.CheckTransactional(h.ProducerID, h.ProducerEpoch, h.BaseSequence, b.LastSequence, p.verifiedLocked(h.ProducerID, h.ProducerEpoch))
	} else {
		res, err = p.pstate.Check(h.ProducerID, h.ProducerEpoch, h.BaseSequence, b.LastSequence)
	}
	var se *producerstate.SequenceError
	if errors.As(err, &se) {
		// Ahead by less than half the sequence space (for a producer or
		// epoch not seen yet: anything but 0): batches before it are
		// probably in flight.
		expected := se.Expected
		if se.Unknown || se.NewEpoch {
			expected = 0
		}
		if ahead := (se.Got - expected) & math.MaxInt32; ahead > 0 && ahead < 1<<30 {
			wait = true
		}
	}
	return res, wait, err
}

// fencedLocked reports whether the batch's producer epoch is older than
// the producer's here: refused without asking the coordinator.
func (p *Replica) fencedLocked(h record.BatchHeader) bool {
	_, err := p.pstate.CheckTransactional(h.ProducerID, h.ProducerEpoch, 0, 0, true)
	return errors.Is(err, producerstate.ErrProducerFenced)
}

// producerError maps the producer state's refusals to domain errors with
// a producer refusal (the API's ProducerError detail), and, for a
// transactional batch or a marker (txn), a transaction reason too when
// the refusal is about the transaction (fenced); the refusals only
// transactions have (ErrInvalidTxnState, ErrTransactionNotVerified,
// ErrCoordinatorFenced) carry a transaction reason alone.
func producerError(m *Metrics, err error, txn bool) error {
	var se *producerstate.SequenceError
	e := &derr.Error{Err: err, Producer: &derr.ProducerRefusal{}}
	var label string
	switch {
	case errors.As(err, &se):
		e.Kind, label = derr.OutOfOrderSequenceNumber, "out_of_order_sequence"
		e.Producer.Reason, e.Producer.ExpectedSequence = derr.ProducerReasonOutOfOrderSequence, se.Expected
		if se.Unknown {
			e.Producer.ExpectedSequence = -1
		}
	case errors.Is(err, producerstate.ErrProducerFenced):
		// An epoch older than the producer's here (Kafka's
		// INVALID_PRODUCER_EPOCH at a partition).
		e.Kind, label, e.Producer.Reason = derr.InvalidProducerEpoch, "producer_fenced", derr.ProducerReasonFenced
		if txn {
			e.Txn = derr.TxnReasonProducerFenced
		}
	case errors.Is(err, producerstate.ErrDuplicateSequence):
		e.Kind, label, e.Producer.Reason = derr.DuplicateSequenceNumber, "duplicate_sequence", derr.ProducerReasonDuplicateSequence
	case errors.Is(err, producerstate.ErrInvalidSequence), errors.Is(err, producerstate.ErrInvalidProducer):
		e.Kind, label, e.Producer.Reason = derr.InvalidSequence, "invalid_sequence", derr.ProducerReasonInvalidSequence
	case errors.Is(err, producerstate.ErrInvalidTxnState):
		// A non-transactional batch of a producer whose transaction is
		// open here.
		return transactionError(derr.InvalidTxnState, derr.TxnReasonInvalidTxnState, err)
	case errors.Is(err, producerstate.ErrTransactionNotVerified):
		// A transactional batch no coordinator vouched for (a produce
		// without a transactional id never reaches here: the broker
		// refuses it).
		return transactionError(derr.InvalidTxnState, derr.TxnReasonInvalidTxnState, err)
	case errors.Is(err, producerstate.ErrCoordinatorFenced):
		// A marker of a coordinator that was replaced: its writer is
		// fenced (Kafka's TRANSACTION_COORDINATOR_FENCED).
		return transactionError(derr.TransactionCoordinatorFenced, derr.TxnReasonProducerFenced, err)
	default:
		return err
	}
	if m != nil {
		m.SequenceErrors.WithLabelValues(label).Inc()
	}
	return e
}

// waitSequenceGap waits, without the lock, for the partition to change
// (an append, a role change) or for the deadline. It reports false when
// the wait is over.
func waitSequenceGap(ctx context.Context, ch <-chan struct{}, deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// applyAppendedLocked records batches just appended to the log (leader
// or follower) in the producer state. The log checked them (the leader's
// at the produce request, a follower's in AppendFollower), so only the
// headers of data batches are read here: no second CRC. A control batch
// (a transaction marker) is applied with its control record
// (applyMarkerLocked).
func (p *Replica) applyAppendedLocked(data []byte) {
	now := time.Now().UnixMilli()
	for len(data) >= record.PrefixSize {
		n := record.Size(data)
		if n < record.HeaderSize || n > int64(len(data)) {
			return // the log accepted these bytes, so this cannot happen
		}
		h, err := record.ParseBatchHeader(data[:n])
		if err != nil {
			return // as above
		}
		if h.Attributes.Control() {
			p.applyMarkerLocked(record.Batch(data[:n]), now)
			data = data[n:]
			continue
		}
		pb, ok := producerstate.FromHeader(h)
		p.pstate.Apply(pb)
		if ok {
			p.pstate.Seen(pb.ProducerID, now)
		}
		data = data[n:]
	}
}

// rebuildProducerStateLocked recomputes the producer state from the
// snapshots and the log after the log was truncated: it replays from the
// newest snapshot at or below the new LEO, at most the active segment
// (and the one before it for an interval after a roll; see
// SnapshotProducers), under the replica lock, as Kafka reloads its
// producer state at a truncation.
//
// A replica whose producer state cannot be rebuilt could later lead
// without deduplication, so a failure stops the broker (as a failed log
// write does): its partitions move to replicas that have their state.
func (p *Replica) rebuildProducerStateLocked() error {
	s, from, err := producerstate.Rebuild(p.dir, p.log)
	if err != nil {
		err = fmt.Errorf("rebuild producer state: %w", err)
		go p.h.failStop(p, err)
		return err
	}
	s.Touch(time.Now().UnixMilli())
	p.pstate, p.snapOffset, p.unreplicated = s, from, nil
	if from == 0 {
		p.noteRebuiltFromLogLocked()
	}
	return nil
}

// noteRebuiltFromLogLocked: the producer state was rebuilt from the log
// alone (no snapshot), so it knows the aborted transactions only from the
// log start on.
func (p *Replica) noteRebuiltFromLogLocked() {
	if start := p.log.LogStartOffset(); start > 0 {
		if err := p.setAbortedKnownLocked(start); err != nil {
			p.h.Logger.Warn("producer state", "topic", p.topicID, "partition", p.id, "err", err)
		}
	}
}

// resetProducerStateLocked forgets every producer before a log Reset to
// start: the state then knows the aborted transactions from start on.
func (p *Replica) resetProducerStateLocked(start int64) error {
	p.pstate, p.snapOffset, p.unreplicated = producerstate.New(), 0, nil
	if err := p.setAbortedKnownLocked(start); err != nil {
		return err
	}
	return producerstate.DeleteAbove(p.dir, -1)
}

// SnapshotProducers expires the producers idle for producerIDExpiration
// (every producerExpireInterval, in memory) and writes the producer state
// as a snapshot when the log rolled since the newest one, or always with
// force (at close), then deletes the snapshots below the log start. As in
// Kafka, snapshots follow segment rolls, not appends: a replica whose log
// never rolls writes none until it closes, and a rebuild after a crash
// replays from the newest snapshot, at most the active segment (which an
// unclean log open scans anyway), and for the interval between a roll and
// the next call also the tail of the segment before it. It runs under the
// replica lock, so no truncation can race the write.
func (p *Replica) SnapshotProducers(now time.Time, force bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pstate == nil || p.log.Failed() != nil {
		return nil
	}
	if force || now.Sub(p.expiredAt) >= producerExpireInterval {
		p.pstate.Expire(now.Add(-producerIDExpiration).UnixMilli())
		p.expiredAt = now
	}
	off := p.pstate.Offset()
	if off == p.snapOffset || off > p.log.LEO() || (!force && p.log.ActiveSegmentBase() <= p.snapOffset) {
		return nil // nothing new, or no roll since the newest snapshot
	}
	if err := producerstate.WriteSnapshot(p.dir, p.pstate, off); err != nil {
		return err
	}
	p.snapOffset = off
	return producerstate.DeleteBelow(p.dir, p.log.LogStartOffset())
}
