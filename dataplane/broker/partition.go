package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/dataplane/replica"
	"github.com/sluicemq/sluice/tiered"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

type role int

const (
	roleNone role = iota
	roleLeader
	roleFollower
)

// partition is one partition replica on this broker: its log, its role and
// the replication state machine of that role (replica.Leader or
// replica.Follower), which own the HW, the ISR and acks=all waits; the
// partition keeps no copy of them. mu guards everything but log (which has
// its own single-writer discipline: only the goroutine holding mu appends)
// and serialises every call to the state machines.
type partition struct {
	b        *Broker
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
	meta partMeta
	cfg  topicConfig
	role role
	hwCh chan struct{}     // closed and replaced on every append, HW or role change
	lead *replica.Leader   // set while leader
	fol  *replica.Follower // set while following a leader
	// ackWaiters are the produce requests waiting for lead's acks=all
	// registrations (WaitAcksAll), by id; settleAcksLocked hands them the
	// results lead reports (TakeAcks).
	ackWaiters map[replica.AckID]chan replica.AckResult
	// roleHW is the HW while neither state machine is set: read from the
	// checkpoint at open, then what the last one had when its role ended.
	// It seeds the next role's state machine.
	roleHW int64
	// savedHW is the HW last written to the checkpoint file.
	savedHW int64
	stopF   context.CancelFunc
	// pstate is the idempotent producers' state, kept in step with the
	// log on leaders and followers alike.
	pstate     *producerstate.State
	snapOffset int64     // offset of the last producer-state snapshot
	snapAt     time.Time // when it was written
	// retainBelow bounds what retention may delete (the log's CanDelete).
	retainBelow *atomic.Int64
	// With tiered storage: the last offset copied to the object store (-1:
	// none or unknown), as the leader knows it (followers learn it from
	// the leader's fetch responses). Local retention deletes nothing above
	// it, except what total retention deletes anyway.
	remoteThrough atomic.Int64
	tiered        bool
}

// notLeaderError says this broker cannot serve the partition as leader.
type notLeaderError struct {
	leader  int32
	epoch   int32
	address string
	// self: the metadata names this very broker, whose replica is not
	// leading: it has not taken over yet (still opening the log, applying
	// the view), or it stepped down and the next view has not arrived.
	self bool
}

func (e *notLeaderError) Error() string {
	switch {
	case e.leader < 0:
		return "partition is offline: no in-sync replica is alive"
	case e.self:
		return fmt.Sprintf("this broker (%d) is named the leader at epoch %d but is not leading the partition (yet); retry shortly", e.leader, e.epoch)
	}
	return fmt.Sprintf("not the leader: broker %d (%s) leads at epoch %d", e.leader, e.address, e.epoch)
}

// notLeader builds the error for a partition this broker does not lead.
func (b *Broker) notLeader(pm partMeta) error {
	e := &notLeaderError{leader: pm.leader, epoch: pm.leaderEpoch, self: pm.leader == b.cfg.ID}
	if bm, ok := b.metadata().brokers[pm.leader]; ok {
		e.address = bm.address
	}
	return e
}

// toConnect maps the partition's errors to Connect errors with details a
// client can act on.
func toConnect(err error) error {
	var nl *notLeaderError
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
		if nl.leader < 0 || nl.self {
			code = connect.CodeUnavailable
		}
		ce := connect.NewError(code, nl)
		if d, derr := connect.NewErrorDetail(&sluicev1.NotLeader{LeaderId: nl.leader, LeaderAddress: nl.address, LeaderEpoch: nl.epoch}); derr == nil {
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

func (p *partition) notifyLocked() {
	close(p.hwCh)
	p.hwCh = make(chan struct{})
}

func (p *partition) highWatermark() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hwLocked()
}

// hwLocked is the replica's HW, read from the state machine of its role.
func (p *partition) hwLocked() int64 {
	switch {
	case p.lead != nil:
		return p.lead.HW()
	case p.fol != nil:
		return p.fol.HW()
	}
	return p.roleHW
}

// readerHW is the HW to show readers on the leader, or errHWCatchingUp
// while a new leader's HW is still below where its epoch started.
func (p *partition) readerHW() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != roleLeader || p.lead == nil {
		return 0, toConnect(p.b.notLeader(p.meta))
	}
	if p.lead.HW() < p.lead.EpochStartOffset() {
		return 0, errHWCatchingUp
	}
	return p.lead.HW(), nil
}

// produceResult is what a produce returns.
type produceResult struct {
	base      int64 // first offset written (the original's for a duplicate); -1 with acks=0
	duplicate bool  // the first batch was a retry of one already written
}

// produce appends batches as leader and waits for the acknowledgement acks
// asks for. Idempotent batches are checked against the producer state
// first: a retry of a batch already written is not written again but
// answered with the original offsets (after waiting, with acks=all, until
// those are committed); a batch ahead of the expected sequence waits up
// to sequenceGapWait for the batches before it.
func (p *partition) produce(ctx context.Context, batches []log.ValidBatch, acks sluicev1.Acks, timeout time.Duration, clientEpoch *int32) (produceResult, error) {
	gapDeadline := time.Now().Add(sequenceGapWait)
	waitedOut := false
	p.mu.Lock()
	for {
		// Checked again after every wait: the partition may have changed
		// hands while the lock was released.
		if p.role != roleLeader || p.lead == nil || p.lead.Resigned() {
			meta := p.meta // read under the lock: update replaces it
			p.mu.Unlock()
			return produceResult{}, toConnect(p.b.notLeader(meta))
		}
		if err := p.checkClientEpochLocked(clientEpoch); err != nil {
			p.mu.Unlock()
			return produceResult{}, err
		}
		_, wait, err := p.checkSequenceLocked(batches[0].Header())
		if err == nil || !wait || waitedOut {
			break // a refusal is answered by the check below
		}
		ch := p.hwCh
		p.mu.Unlock()
		waitedOut = !waitSequenceGap(ctx, ch, gapDeadline)
		p.mu.Lock()
	}
	if acks == sluicev1.Acks_ACKS_ALL {
		if err := p.lead.CanAcceptAcksAll(); err != nil {
			err = p.replicaError(err)
			p.mu.Unlock()
			return produceResult{}, err
		}
	}
	lead := p.lead
	epoch := p.meta.leaderEpoch
	res := produceResult{base: -1}
	waitFor := int64(-1) // with acks=all: the end of the records to wait for
	var appendErr error
	for i, b := range batches {
		dup, _, err := p.checkSequenceLocked(b.Header())
		if err != nil {
			appendErr = producerError(p.b.metrics, err)
			if i > 0 {
				appendErr = fmt.Errorf("batch %d of %d: %w (the batches before it were written)", i+1, len(batches), appendErr)
			}
			break
		}
		if dup.Duplicate {
			if p.b.metrics != nil {
				p.b.metrics.duplicates.Inc()
			}
			if i == 0 {
				res.base, res.duplicate = dup.FirstOffset, true
			}
			waitFor = max(waitFor, dup.LastOffset+1)
			continue
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
			res.base = bo
		}
	}
	// Whatever reached the log is replicated and counted, even after a
	// failure part way (an I/O error): the state machine follows the log.
	leo := p.log.LEO()
	if err := lead.Append(leo, time.Now()); err != nil {
		p.mu.Unlock()
		return produceResult{}, fmt.Errorf("record append: %w", err)
	}
	if err := lead.Flushed(p.log.DurableOffset()); err != nil { // at once with flush=os
		p.mu.Unlock()
		return produceResult{}, fmt.Errorf("record durable end: %w", err)
	}
	var ack replica.AckID
	var acked chan replica.AckResult
	if appendErr == nil && acks == sluicev1.Acks_ACKS_ALL {
		// Registered under the same lock as the append, so no HW change
		// can slip between them.
		id, err := lead.WaitAcksAll(waitFor)
		if err != nil {
			appendErr = fmt.Errorf("acks=all wait: %w (the records were written)", p.replicaError(err))
		} else {
			ack, acked = id, make(chan replica.AckResult, 1)
			if p.ackWaiters == nil {
				p.ackWaiters = map[replica.AckID]chan replica.AckResult{}
			}
			p.ackWaiters[id] = acked
		}
	}
	p.settleAcksLocked()
	p.notifyLocked() // wakes follower fetches (new data) and readers (HW)
	p.mu.Unlock()
	if appendErr != nil {
		if ferr := p.log.Failed(); ferr != nil {
			go p.b.failStop(p, ferr)
		}
		return produceResult{}, appendErr
	}
	// Outside the lock: followers fetch the records while the leader
	// syncs them, and producers that arrive meanwhile share the next sync.
	// Every answer, even with acks=0, waits for the leader's own copy to be
	// durable: that also makes sure somebody syncs every appended record.
	if err := p.makeDurable(ctx, lead, leo); err != nil {
		if acked != nil {
			p.mu.Lock()
			if lead.CancelAck(ack) && p.lead == lead {
				delete(p.ackWaiters, ack)
			}
			p.mu.Unlock()
		}
		return produceResult{}, err
	}

	switch acks {
	case sluicev1.Acks_ACKS_NONE:
		return produceResult{base: -1, duplicate: res.duplicate}, nil
	case sluicev1.Acks_ACKS_LEADER:
		return res, nil
	}
	if err := p.waitAck(ctx, lead, ack, acked, timeout); err != nil {
		return produceResult{}, err
	}
	return res, nil
}

// makeDurable makes the leader's log durable below off under the flush
// policy (log.MakeDurable: a shared fsync with "always", the next interval
// flush with "interval", nothing with "os"), without holding the partition
// lock, and then tells the leadership lead that appended it, which may
// advance the HW. A failed sync fails the log, and the broker stops
// serving the partition (failStop); the records' fate is then unknown.
func (p *partition) makeDurable(ctx context.Context, lead *replica.Leader, off int64) error {
	if err := p.log.MakeDurable(ctx, off); err != nil {
		if ferr := p.log.Failed(); ferr != nil {
			go p.b.failStop(p, ferr)
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the records were written but could not be synced to disk; they may or may not be committed: %w", ferr))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the records were written but not synced to disk; they may or may not be committed: %w", err))
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
func (p *partition) settleAcksLocked() {
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
func (p *partition) waitAck(ctx context.Context, lead *replica.Leader, id replica.AckID, acked <-chan replica.AckResult, timeout time.Duration) error {
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
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("acks=all not confirmed within the timeout; the records may or may not be committed"))
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
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the ISR shrank below min.insync.replicas before acks=all completed; the records may or may not be committed: %v", r.Err))
	case errors.Is(r.Err, replica.ErrNotLeader):
		p.mu.Lock()
		meta := p.meta
		p.mu.Unlock()
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("leadership moved before acks=all completed; the records may or may not be committed: %v", p.b.notLeader(meta)))
	}
	return fmt.Errorf("acks=all wait: %w", r.Err)
}

// fetch returns whole batches from offset that lie below the high
// watermark, waiting up to wait for some to arrive.
func (p *partition) fetch(ctx context.Context, offset int64, maxBytes int, wait time.Duration, clientEpoch *int32) ([]byte, int64, error) {
	var timer *time.Timer
	for {
		p.mu.Lock()
		if err := p.checkClientEpochLocked(clientEpoch); err != nil {
			p.mu.Unlock()
			return nil, 0, err
		}
		hw, ch, isLeader, meta := p.hwLocked(), p.hwCh, p.role == roleLeader && p.lead != nil, p.meta
		catchingUp := isLeader && p.lead.HW() < p.lead.EpochStartOffset()
		p.mu.Unlock()
		if !isLeader {
			return nil, hw, toConnect(p.b.notLeader(meta))
		}
		if catchingUp {
			return nil, hw, errHWCatchingUp
		}
		start, leo := p.log.LogStartOffset(), p.log.LEO()
		if offset < start && p.tiered {
			tp := tiered.Partition{TenantID: p.tenantID, TopicID: p.topicID, Partition: p.id, LeaderEpoch: meta.leaderEpoch}
			data, err := p.readRemote(ctx, tp, offset, maxBytes, hw)
			return data, hw, err
		}
		if offset < start || offset > leo {
			return nil, hw, toConnect(&log.OffsetOutOfRangeError{Offset: offset, LogStart: start, LEO: leo})
		}
		if offset < hw {
			data, err := p.log.Read(offset, maxBytes)
			if err != nil {
				return nil, hw, toConnect(err)
			}
			return belowHW(data, hw), hw, nil
		}
		if wait <= 0 {
			return nil, hw, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil, hw, nil
		case <-ctx.Done():
			return nil, hw, ctx.Err()
		}
	}
}

// checkClientEpochLocked fences a client request that names a leader epoch
// (KIP-320): older than this leader's → FailedPrecondition (the client's
// metadata is stale), newer → Unavailable (this broker has not caught up).
func (p *partition) checkClientEpochLocked(e *int32) error {
	switch {
	case e == nil:
		return nil
	case *e < p.meta.leaderEpoch:
		return toConnect(connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("fenced leader epoch %d: the current epoch is %d; refresh metadata", *e, p.meta.leaderEpoch)))
	case *e > p.meta.leaderEpoch:
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("unknown leader epoch %d: this broker is at %d; retry", *e, p.meta.leaderEpoch))
	}
	return nil
}

// errHWCatchingUp: a new leader has not yet learned a high watermark as
// high as the previous leader's (its followers have not all fetched). It
// must not answer with a HW that went backwards; clients retry shortly
// (Kafka's OFFSET_NOT_AVAILABLE).
var errHWCatchingUp = connect.NewError(connect.CodeUnavailable, errors.New("the new leader is still establishing its high watermark; retry shortly"))

// belowHW keeps the whole batches of data that start below hw. Replicas
// append whole batches, so the HW always falls on a batch boundary. The
// read that returned data has checked its batches.
func belowHW(data []byte, hw int64) []byte {
	n := 0
	rest := data
	for len(rest) > 0 {
		b, r, err := nextChecked(rest)
		if err != nil || b.BaseOffset() >= hw {
			break
		}
		n += len(b)
		rest = r
	}
	return data[:n]
}
