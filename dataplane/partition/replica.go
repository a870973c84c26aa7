package partition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Replica is one partition replica on this broker: its log, its role and
// the replication state machine of that role (replica.Leader or
// replica.Follower), which own the HW, the ISR and acks=all waits; the
// replica keeps no copy of them. mu guards everything but log (which has
// its own single-writer discipline: only the goroutine holding mu appends)
// and serialises every call to the state machines.
type Replica struct {
	h        *Host
	tenantID string
	topicID  string
	id       int32
	dir      string
	log      *log.Log

	mu sync.Mutex
	// meta is the assignment last applied from the control plane's
	// stream: the input a role's state machine starts from. Its ISR and
	// partition epoch are not the leader's: the leader state machine also
	// applies AlterPartition answers and holds the confirmed ISR
	// (Leader.ISR) and the maximal ISR it counts for the HW; read those.
	meta Assignment
	cfg  TopicConfig
	role Role
	hwCh chan struct{}     // closed and replaced on every append, HW or role change
	lead *replica.Leader   // set while leader
	fol  *replica.Follower // set while following a leader
	// ackWaiters are the produce requests waiting for lead's acks=all
	// registrations (WaitAcksAll), by id; settleAcksLocked hands them the
	// results lead reports (TakeAcks).
	ackWaiters map[replica.AckID]chan replica.AckResult
	// roleHW is the HW while neither state machine is set: the
	// checkpointed one at open, then what the last one had when its role
	// ended. It seeds the next role's state machine.
	roleHW int64
	// legacyHW: the replica's directory has a legacy per-partition HW
	// checkpoint file, which HWCheckpointed removes.
	legacyHW atomic.Bool
	// watchers are the fetch sessions (fetchsession.Sessions) that carry
	// this replica as leader: notifyLocked signals them.
	watchers map[fetchsession.Watcher]struct{}
	// pstate is the idempotent producers' state, kept in step with the
	// log on leaders and followers alike.
	pstate *producerstate.State
	// snapOffset is where a rebuild of pstate would start replaying the
	// log: the offset of the newest producer-state snapshot (0: none).
	snapOffset int64
	expiredAt  time.Time // when SnapshotProducers last expired producers
	// verified caches, per producer id, the epoch whose transaction the
	// coordinator confirmed this partition is in (KIP-890's verification,
	// asked before the first transactional batch of that epoch): cleared
	// for the producer by its every marker, and whole at every role
	// change.
	verified map[int64]*verification
	// unreplicated are the transactions ended by a marker the HW has not
	// passed yet (lsoLocked drops the others): they still hold the LSO.
	unreplicated []unreplicatedTxn
	// abortedKnown: the producer state knows every aborted transaction
	// from this offset on (abortedKnownName).
	abortedKnown int64
	// retainBelow bounds what retention may delete (the log's CanDelete).
	retainBelow *atomic.Int64
	// With tiered storage: the last offset copied to the object store (-1:
	// none or unknown), as the leader knows it (followers learn it from
	// the leader's fetch responses). Local retention deletes nothing above
	// it, except what total retention deletes anyway.
	remoteThrough atomic.Int64
	tiered        bool
}

// TenantID, TopicID and Partition name the replica's partition.
func (p *Replica) TenantID() string { return p.tenantID }
func (p *Replica) TopicID() string  { return p.topicID }
func (p *Replica) Partition() int32 { return p.id }

// Dir is the replica's directory.
func (p *Replica) Dir() string { return p.dir }

// Tiered reports whether the replica was opened with tiered storage.
func (p *Replica) Tiered() bool { return p.tiered }

// Log is the replica's log, for reads (its offsets, Read) and for Close
// once the replica is stopped. Only the replica appends to it.
func (p *Replica) Log() *log.Log { return p.log }

// Status is a replica's state at one moment.
type Status struct {
	Role Role
	HW   int64
	// LSO is the last stable offset (LastStableOffset): HW - LSO is how far
	// open (or unreplicated-ended) transactions hold read_committed
	// readers back.
	LSO int64
	// ISR and Replicas are the leader's confirmed ISR and replica set
	// sizes; 0 while not leading.
	ISR      int
	Replicas int
	// CopiedThrough is the last offset copied to the object store as this
	// replica knows it (-1: none or unknown; followers learn it from the
	// leader).
	CopiedThrough int64
}

// UnderReplicated reports whether the replica leads with an ISR smaller
// than the replica set.
func (s Status) UnderReplicated() bool { return s.ISR < s.Replicas }

// Status returns the replica's role, HW and, while leading, ISR.
func (p *Replica) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Status{Role: p.role, HW: p.hwLocked(), LSO: p.lsoLocked(), CopiedThrough: p.remoteThrough.Load()}
	if p.lead != nil {
		s.ISR, s.Replicas = len(p.lead.ISR()), len(p.lead.Replicas())
	}
	return s
}

// LeadsAt reports whether the replica leads at leader epoch epoch.
func (p *Replica) LeadsAt(epoch int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.role == RoleLeader && p.meta.LeaderEpoch == epoch
}

// notifyLocked wakes whoever waits for a change of the replica: readers
// and old-style follower fetches (hwCh), and the fetch sessions that carry
// it (a non-blocking signal each).
func (p *Replica) notifyLocked() {
	close(p.hwCh)
	p.hwCh = make(chan struct{})
	for w := range p.watchers {
		w.Changed(sessionReplica{p})
	}
}

// HighWatermark is the replica's HW: the leader's, what a follower learned
// from its leader, or the last one it had while it has no role.
func (p *Replica) HighWatermark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hwLocked()
}

// hwLocked is the replica's HW, read from the state machine of its role.
func (p *Replica) hwLocked() int64 {
	switch {
	case p.lead != nil:
		return p.lead.HW()
	case p.fol != nil:
		return p.fol.HW()
	}
	return p.roleHW
}

// ReaderHW is the HW to show readers on the leader, ErrHWCatchingUp
// while a new leader's HW is still below where its epoch started, or
// NotLeader (a *NotLeaderError) when this replica does not lead.
func (p *Replica) ReaderHW() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != RoleLeader || p.lead == nil {
		return 0, p.notLeader(p.meta)
	}
	if p.lead.HW() < p.lead.EpochStartOffset() {
		return 0, ErrHWCatchingUp
	}
	return p.lead.HW(), nil
}

// ProduceResult is what a produce returns.
type ProduceResult struct {
	Base      int64 // first offset written (the original's for a duplicate); -1 with acks=0
	Duplicate bool  // the first batch was a retry of one already written
	// LogAppendTime is the first batch's append time on a LogAppendTime
	// topic (TopicConfig.LogAppendTime), in ms; -1 otherwise, and for a
	// duplicate.
	LogAppendTime int64
}

// Produce appends batches as leader and waits for the acknowledgement acks
// asks for, at most timeout for acks=all. Idempotent batches are checked
// against the producer state first: a retry of a batch already written is
// not written again but answered with the original offsets (after waiting,
// with acks=all, until those are committed); a batch ahead of the expected
// sequence waits up to a second for the batches before it, unless acks=all
// is refused first for an ISR below min ISR. clientEpoch,
// when set, fences a client whose leader epoch is not this leader's. The
// errors are domain errors (NotLeader, NotEnoughReplicas, the producer
// and transaction refusals; the outcome-unknown kinds of the package doc
// when the records were written but their fate is unknown) or I/O failures.
// Transactional batches are refused (ErrTransactionNotVerified, as a
// TransactionError): ProduceTransactional verifies them.
func (p *Replica) Produce(ctx context.Context, batches []log.ValidBatch, acks sluicev1.Acks, timeout time.Duration, clientEpoch *int32) (ProduceResult, error) {
	return p.produce(ctx, batches, acks, timeout, clientEpoch, nil)
}

// ProduceTransactional is Produce for batches of a transactional producer
// (all of one producer id and epoch, as the broker checks): before the
// first transactional batch of an epoch the replica has not verified since
// the producer's last marker (or since it began leading), it asks verify,
// without the replica lock, whether the partition is in the producer's
// current transaction (KIP-890), and answers with verify's error if not.
// The batches are then checked by producerstate's CheckTransactional,
// which also fences an epoch older than the producer's here: a marker
// bumps the epoch, so a delayed batch of an ended transaction is refused
// even when its verification raced the marker.
func (p *Replica) ProduceTransactional(ctx context.Context, batches []log.ValidBatch, acks sluicev1.Acks, timeout time.Duration, clientEpoch *int32, verify Verifier) (ProduceResult, error) {
	if verify == nil {
		return ProduceResult{}, errors.New("produce transactional: no verifier")
	}
	return p.produce(ctx, batches, acks, timeout, clientEpoch, verify)
}

// appendedKey is the context key of AfterAppend's function.
type appendedKey struct{}

// AfterAppend returns ctx carrying f, which Produce and
// ProduceTransactional call with ctx once the batches are in the leader's
// log, before they wait for the acknowledgement acks asks for: a caller
// that must keep appends in order (the Kafka listener's requests of one
// connection) can start the next one then. f is not called when the
// produce ends before appending anything.
func AfterAppend(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, appendedKey{}, f)
}

// maxVerifyRounds bounds how often one produce verifies when markers of
// its producer keep clearing the verification meanwhile.
const maxVerifyRounds = 3

func (p *Replica) produce(ctx context.Context, batches []log.ValidBatch, acks sluicev1.Acks, timeout time.Duration, clientEpoch *int32, verify Verifier) (ProduceResult, error) {
	gapDeadline := time.Now().Add(sequenceGapWait)
	waitedOut := false
	verifyRounds := 0
	p.mu.Lock()
	for {
		// Checked again after every wait: the partition may have changed
		// hands while the lock was released.
		if p.role != RoleLeader || p.lead == nil || p.lead.Resigned() {
			meta := p.meta // read under the lock: Update replaces it
			p.mu.Unlock()
			return ProduceResult{}, p.notLeader(meta)
		}
		if err := p.checkClientEpochLocked(clientEpoch); err != nil {
			p.mu.Unlock()
			return ProduceResult{}, err
		}
		h := batches[0].Header()
		if verify != nil && h.Attributes.Transactional() && h.ProducerID >= 0 && !p.verifiedLocked(h.ProducerID, h.ProducerEpoch) && !p.fencedLocked(h) {
			if verifyRounds == maxVerifyRounds {
				p.mu.Unlock()
				return ProduceResult{}, transactionError(derr.ConcurrentTransactions, derr.TxnReasonConcurrentTransactions,
					fmt.Errorf("producer %d epoch %d: transaction markers kept ending the verification of this partition; retry", h.ProducerID, h.ProducerEpoch))
			}
			started, err := p.verifyLocked(ctx, verify, h.ProducerID, h.ProducerEpoch)
			if err != nil {
				p.mu.Unlock()
				return ProduceResult{}, err
			}
			if started {
				verifyRounds++
			}
			continue // the lock was released: check everything again
		}
		// Below min ISR, acks=all is refused before the sequence is looked
		// at, as Kafka does: a batch held for a gap would otherwise wait
		// out the second for the batches before it, which were refused the
		// same way and come back only after the client's backoff.
		if acks == sluicev1.Acks_ACKS_ALL {
			if err := p.lead.CanAcceptAcksAll(); err != nil {
				err = p.replicaError(err)
				p.mu.Unlock()
				return ProduceResult{}, err
			}
		}
		_, wait, err := p.checkSequenceLocked(h)
		if err == nil || !wait || waitedOut {
			break // a refusal is answered by the check below
		}
		ch := p.hwCh
		p.mu.Unlock()
		waitedOut = !waitSequenceGap(ctx, ch, gapDeadline)
		p.mu.Lock()
	}
	lead := p.lead
	epoch := p.meta.LeaderEpoch
	appendTime := p.cfg.LogAppendTime
	res := ProduceResult{Base: -1, LogAppendTime: -1}
	waitFor := int64(-1) // with acks=all: the end of the records to wait for
	var appendErr error
	for i, b := range batches {
		dup, _, err := p.checkSequenceLocked(b.Header())
		if err != nil {
			appendErr = producerError(p.h.Metrics, err, b.Header().Attributes.Transactional())
			if i > 0 {
				appendErr = fmt.Errorf("batch %d of %d: %w (the batches before it were written)", i+1, len(batches), appendErr)
			}
			break
		}
		if dup.Duplicate {
			if m := p.h.Metrics; m != nil {
				m.Duplicates.Inc()
			}
			if i == 0 {
				res.Base, res.Duplicate = dup.FirstOffset, true
			}
			waitFor = max(waitFor, dup.LastOffset+1)
			continue
		}
		if appendTime {
			b = b.WithLogAppendTime()
		}
		bo, leo, err := p.log.AppendValidated(b, epoch)
		if err != nil {
			appendErr = fmt.Errorf("append batch %d of %d: %w", i+1, len(batches), err)
			if i > 0 {
				appendErr = fmt.Errorf("%w (the batches before it were written)", appendErr)
			}
			break
		}
		p.applyAppendedLocked(b.Batch())
		waitFor = max(waitFor, leo)
		if i == 0 {
			res.Base = bo
			if appendTime {
				res.LogAppendTime = b.Batch().MaxTimestamp()
			}
		}
	}
	a, err := p.publishAppendLocked(lead, waitFor, acks == sluicev1.Acks_ACKS_ALL, appendErr)
	if err != nil {
		return ProduceResult{}, err
	}
	if f, ok := ctx.Value(appendedKey{}).(func()); ok {
		f()
	}
	if err := p.awaitAppend(ctx, a, timeout); err != nil {
		return ProduceResult{}, err
	}
	if acks == sluicev1.Acks_ACKS_NONE {
		return ProduceResult{Base: -1, Duplicate: res.Duplicate, LogAppendTime: -1}, nil
	}
	return res, nil
}

// pendingAppend is what a leader appended under the replica lock
// (publishAppendLocked), to be made durable and acknowledged outside it
// (awaitAppend).
type pendingAppend struct {
	lead    *replica.Leader // the leadership that appended
	leo     int64           // the LEO after the append
	durable int64           // the log's durable end when the lock was released
	// ack and acked are the acks=all wait; acked is nil without one.
	ack   replica.AckID
	acked chan replica.AckResult
}

// publishAppendLocked ends a leader's append under p.mu and releases the
// lock: whatever reached the log (even after a failure part way, such as
// an I/O error: the state machine follows the log) is handed to the
// leadership lead for replication and counting, an acks=all wait for the
// offsets below waitFor is registered when acksAll is set and appendErr
// is nil, and readers, follower fetches and sessions are woken. It
// returns appendErr (after asking the broker to stop when the log failed)
// or the state machine's refusal.
func (p *Replica) publishAppendLocked(lead *replica.Leader, waitFor int64, acksAll bool, appendErr error) (pendingAppend, error) {
	leo := p.log.LEO()
	if err := lead.Append(leo, time.Now()); err != nil {
		p.mu.Unlock()
		return pendingAppend{}, fmt.Errorf("record append: %w", err)
	}
	durable := p.log.DurableOffset() // the LEO with flush=os: nothing to sync
	if err := lead.Flushed(durable); err != nil {
		p.mu.Unlock()
		return pendingAppend{}, fmt.Errorf("record durable end: %w", err)
	}
	a := pendingAppend{lead: lead, leo: leo, durable: durable}
	if appendErr == nil && acksAll {
		// Registered under the same lock as the append, so no HW change
		// can slip between them.
		id, err := lead.WaitAcksAll(waitFor)
		if err != nil {
			appendErr = fmt.Errorf("acks=all wait: %w (the records were written)", p.replicaError(err))
		} else {
			a.ack, a.acked = id, make(chan replica.AckResult, 1)
			if p.ackWaiters == nil {
				p.ackWaiters = map[replica.AckID]chan replica.AckResult{}
			}
			p.ackWaiters[id] = a.acked
		}
	}
	p.settleAcksLocked()
	p.notifyLocked() // wakes follower fetches (new data) and readers (HW)
	p.mu.Unlock()
	if appendErr != nil {
		if ferr := p.log.Failed(); ferr != nil {
			go p.h.failStop(p, ferr)
		}
		return pendingAppend{}, appendErr
	}
	return a, nil
}

// awaitAppend waits, without the lock, for append a: the leader's own copy
// durable, then, with an acks=all wait, the ISR's (at most timeout).
// Followers fetch the records while the leader syncs them, and producers
// that arrive meanwhile share the next sync. Every answer, even with
// acks=0, waits for the leader's own copy to be durable: that also makes
// sure somebody syncs every appended record. With nothing left to sync
// (flush=os, or only duplicates) the lock is not taken again.
func (p *Replica) awaitAppend(ctx context.Context, a pendingAppend, timeout time.Duration) error {
	if a.durable < a.leo {
		if err := p.makeDurable(ctx, a.lead, a.leo); err != nil {
			if a.acked != nil {
				p.mu.Lock()
				if a.lead.CancelAck(a.ack) && p.lead == a.lead {
					delete(p.ackWaiters, a.ack)
				}
				p.mu.Unlock()
			}
			return err
		}
	}
	if a.acked == nil {
		return nil
	}
	return p.waitAck(ctx, a.lead, a.ack, a.acked, timeout)
}

// makeDurable makes the leader's log durable below off under the flush
// policy (log.MakeDurable: a shared fsync with "always", the next interval
// flush with "interval", nothing with "os"), without holding the partition
// lock, and then tells the leadership lead that appended it, which may
// advance the HW. A failed sync fails the log, and the broker stops
// serving the partition (Host.FailStop); the records' fate is then unknown.
func (p *Replica) makeDurable(ctx context.Context, lead *replica.Leader, off int64) error {
	if err := p.log.MakeDurable(ctx, off); err != nil {
		if ferr := p.log.Failed(); ferr != nil {
			go p.h.failStop(p, ferr)
			return derr.New(derr.StorageUnavailable, "the records were written but could not be synced to disk; they may or may not be committed: %w", ferr)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return derr.New(derr.StorageUnavailable, "the records were written but not synced to disk; they may or may not be committed: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lead != lead {
		return nil // the leadership ended: its waits failed with it
	}
	hw := lead.HW()
	if err := lead.Flushed(p.log.DurableOffset()); err != nil && !errors.Is(err, replica.ErrNotLeader) {
		return fmt.Errorf("record durable end: %w", err)
	}
	p.settleAcksLocked()
	if lead.HW() != hw {
		p.notifyLocked() // wakes readers waiting for the HW
	}
	return nil
}

// settleAcksLocked hands the acks=all results the leader state machine
// reports to the produce requests waiting for them. Every call to p.lead
// that can end waits (Append, WaitAcksAll, FollowerFetch, ISRChanged,
// SetMinISR, Resign, Close) is followed by it under the same lock hold.
func (p *Replica) settleAcksLocked() {
	if p.lead == nil {
		return
	}
	for _, r := range p.lead.TakeAcks() {
		if ch, ok := p.ackWaiters[r.ID]; ok {
			delete(p.ackWaiters, r.ID)
			ch <- r
		}
	}
}

// waitAck waits for the end of acks=all wait id of the leadership that
// appended the records (lead): success once every ISR member has them, a
// failure when that leadership ends first (the records may have been
// truncated since, even if a later HW passes them) or the ISR falls below
// min ISR, or when the timeout passes or ctx ends (the wait is cancelled).
func (p *Replica) waitAck(ctx context.Context, lead *replica.Leader, id replica.AckID, acked <-chan replica.AckResult, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var r replica.AckResult
	select {
	case r = <-acked:
	case <-timer.C:
	case <-ctx.Done():
	}
	if r.ID == 0 { // timed out or cancelled: withdraw the wait unless it just ended
		p.mu.Lock()
		if lead.CancelAck(id) {
			if p.lead == lead {
				delete(p.ackWaiters, id)
			}
			p.mu.Unlock()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return derr.New(derr.RequestTimedOut, "acks=all not confirmed within the timeout; the records may or may not be committed")
		}
		if p.lead == lead {
			p.settleAcksLocked()
		}
		p.mu.Unlock()
		r = <-acked // it ended: settleAcksLocked delivered it under the lock
	}
	switch {
	case r.Err == nil:
		return nil
	case errors.Is(r.Err, replica.ErrNotEnoughReplicas):
		// The records are in the log and may yet be committed: this is
		// an unknown outcome, not a refusal (no NotEnoughReplicas detail).
		return derr.New(derr.NotEnoughReplicasAfterAppend, "the ISR shrank below min.insync.replicas before acks=all completed; the records may or may not be committed: %v", r.Err)
	case errors.Is(r.Err, replica.ErrNotLeader):
		p.mu.Lock()
		meta := p.meta
		p.mu.Unlock()
		return derr.New(derr.NotLeaderAfterAppend, "leadership moved before acks=all completed; the records may or may not be committed: %v", p.notLeader(meta))
	}
	return fmt.Errorf("acks=all wait: %w", r.Err)
}

// checkClientEpochLocked fences a client request that names a leader epoch
// (KIP-320): older than this leader's → FailedPrecondition (the client's
// metadata is stale), newer → Unavailable (this broker has not caught up).
func (p *Replica) checkClientEpochLocked(e *int32) error {
	switch {
	case e == nil:
		return nil
	case *e < p.meta.LeaderEpoch:
		return derr.New(derr.FencedLeaderEpoch, "fenced leader epoch %d: the current epoch is %d; refresh metadata", *e, p.meta.LeaderEpoch)
	case *e > p.meta.LeaderEpoch:
		return derr.New(derr.UnknownLeaderEpoch, "unknown leader epoch %d: this broker is at %d; retry", *e, p.meta.LeaderEpoch)
	}
	return nil
}
