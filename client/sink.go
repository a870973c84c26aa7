package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
)

// pending is one produced record awaiting its outcome.
type pending struct {
	rec  *Record
	cb   func(*Record, error)
	size int
	at   time.Time
}

// pbatch is one batch of a partition, from sealing to its outcome.
type pbatch struct {
	recs     []*pending
	deadline time.Time // the first record's delivery deadline
	data     []byte    // encoded; identical on every retry of one numbering
	numbered bool      // epoch and baseSeq are set (at its first send)
	epoch    int16
	baseSeq  int32

	sent     bool  // sent at least once
	unknown  bool  // an attempt ended without saying whether it was written
	lastErr  error // the last attempt's error
	fatalErr error // a refusal that retrying cannot fix
	outOfSeq bool  // the last attempt was refused for a sequence gap
	tooLarge bool  // the last attempt was refused as over max.message.bytes: split it
	front    bool  // every batch before it was finished when the last attempt started
	reauthed bool  // retried once after Unauthenticated (an expired token)
	done     bool
	offset   int64
	// appendTime is the leader's append time (ms) on a LogAppendTime
	// topic; -1 otherwise.
	appendTime int64
}

// sink sends the batches of one partition. One goroutine (run) seals
// batches, starts requests (up to maxInFlight), handles failures once no
// request is in flight (the rewind), and runs callbacks in order. A
// request is one batch of the partition; it travels to the leader with the
// other partitions' requests to that broker in one ProduceMany (see
// leaderConn), and comes back with its own answer, as if alone.
//
// Batching is natural (franz-go's, and Kafka's accumulator): records go
// into the open batch, which is sealed and sent as soon as a request slot
// is free and every batch before it was sent, so on an idle partition a
// record leaves at once, and while the slots are busy the records that
// arrive gather into one batch, up to the batch limit (a full batch is
// sealed and waits in the queue; the next records open another). A linger
// (WithLinger) only delays the sealing of an open batch that has a free
// slot, by at most the linger after its first record; it never seals a
// batch early. So under load requests grow, instead of queuing up behind
// one another.
//
// With idempotence a batch is numbered (producer epoch and sequence) when
// it is first sent, in queue order, so the numbered batches are always a
// prefix of the unfinished ones. A numbered batch keeps its numbers across
// retries, so the leader writes it once whatever the network does. Numbers
// are only taken back from batches that cannot have been written:
//   - behind a batch that failed for certain (never written), the batches
//     are renumbered from its first sequence in the same epoch, unless one
//     of them had an attempt of unknown outcome, which could still land
//     with its old number: then the epoch is bumped instead;
//   - behind a batch that failed with an unknown outcome (it and every
//     batch sent after it fail as indefinite), and when the leader lost
//     the producer's state, the epoch is bumped (Kafka's KIP-360).
//
// Bumps are rare (one per failure of unknown outcome, not one per failed
// batch), and when the epoch is exhausted the sink takes a new producer id
// rather than give up.
type sink struct {
	p         *Producer
	topic     string
	partition int32

	mu        sync.Mutex
	cur       []*pending
	curBytes  int
	limit     int // bytes of a batch of several records (see Producer.batchLimit), as of the last add
	curSince  time.Time
	flush     bool
	queue     []*pbatch // sealed, outcome not delivered yet, in order
	next      int       // index in queue of the next batch to send
	inflight  int
	rewind    bool          // an attempt failed: send nothing new until in-flight requests end
	attempts  int           // consecutive rewinds after failed attempts, for backoff
	throttled bool          // an attempt since the last rewind was a rate refusal ...
	throttle  time.Duration // ... asking for this delay (the longest of them)
	// window, when not 0, is how many requests may be in flight, less than
	// the producer's maxInFlight: 1 after a rate refusal, one more after
	// each acknowledgement (see sendWindowLocked).
	window    int
	notBefore time.Time
	pid       int64 // the producer id this partition's batches carry; -1 without idempotence
	epoch     int16
	seq       int32 // the sequence the next numbered batch gets
	newPID    bool  // the epoch is exhausted: send nothing until a new producer id arrives
	lastErr   error // the partition's last failed attempt, for batches that never had one of their own
	fenced    error
	closed    bool // run returned: add refuses records
	wake      chan struct{}

	// sealed counts the batches sealed so far. The sticky partitioner
	// reads it without the lock, to move on once the batch its records went
	// into was sealed.
	sealed atomic.Int64
}

func newSink(p *Producer, topic string, partition int32) *sink {
	return &sink{p: p, topic: topic, partition: partition, pid: p.pid, epoch: p.epoch, limit: p.cfg.maxBatchBytes, wake: make(chan struct{}, 1)}
}

func (s *sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// addResult is what became of a record given to sink.add.
type addResult int

const (
	added       addResult = iota
	addClosed             // the sink stopped (the producer closed): not added
	addNewBatch           // it would have sealed the open batch: not added (see add)
)

// add puts a record in the open batch, batched with others up to limit
// bytes; a record larger than limit goes in a batch of its own. A record
// that does not fit seals the open batch first, unless moveOn: then it is
// not added (addNewBatch), so that the sticky partitioner sends it to
// another partition instead (Kafka's KIP-480). It also returns how many
// batches the sink sealed before the one the record joined.
func (s *sink) add(pd *pending, limit int, moveOn bool) (addResult, int64) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return addClosed, 0
	}
	s.limit = limit
	if len(s.cur) > 0 && s.curBytes+pd.size+record.HeaderSize > limit {
		if moveOn {
			s.mu.Unlock()
			return addNewBatch, 0
		}
		s.sealLocked()
	}
	if len(s.cur) == 0 {
		s.curSince = pd.at
	}
	s.cur = append(s.cur, pd)
	s.curBytes += pd.size
	full := s.curBytes+record.HeaderSize >= limit
	first := len(s.cur) == 1
	sealed := s.sealed.Load()
	s.mu.Unlock()
	if full || first {
		// Send it if a slot is free, arm the linger timer, or seal the
		// full batch. Later records of an open batch need no wake-up: run
		// seals the batch with whatever it holds when a slot frees.
		s.signal()
	}
	return added, sealed
}

func (s *sink) flushNow() {
	s.mu.Lock()
	s.flush = true
	s.mu.Unlock()
	s.signal()
}

// sealLocked closes the current batch and encodes it; it is numbered when
// it is first sent.
func (s *sink) sealLocked() {
	if len(s.cur) == 0 {
		return
	}
	b := &pbatch{recs: s.cur, deadline: s.cur[0].at.Add(s.p.cfg.deliveryTimeout), offset: -1}
	s.cur, s.curBytes = nil, 0
	s.sealed.Add(1)
	if err := s.encode(b, s.epoch, 0); err != nil {
		b.fatalErr = err
		s.rewind = true
	}
	s.queue = append(s.queue, b)
}

// numberLocked gives b, about to be sent for the first time in this
// numbering, the sink's epoch and next sequences.
func (s *sink) numberLocked(b *pbatch) {
	b.epoch, b.baseSeq, b.numbered = s.epoch, s.seq, true
	s.seq = nextSeq(s.seq, int32(len(b.recs)))
	record.Batch(b.data).SetProducer(s.pid, b.epoch, b.baseSeq)
}

// unnumberLocked takes the numbers back from every unfinished batch (none
// of which can have been written with them) and restarts numbering at seq.
// The batches' attempts so far no longer count: none can land.
func (s *sink) unnumberLocked(seq int32) {
	s.seq = seq
	for _, b := range s.queue {
		if !b.done {
			b.numbered, b.sent, b.unknown = false, false, false
		}
	}
}

// encode encodes b with the given producer epoch and first sequence.
func (s *sink) encode(b *pbatch, epoch int16, seq int32) error {
	recs := make([]record.Record, len(b.recs))
	first := b.recs[0].rec.Timestamp.UnixMilli()
	for i, pd := range b.recs {
		r := pd.rec
		hs := make([]record.RecordHeader, len(r.Headers))
		for j, h := range r.Headers {
			hs[j] = record.RecordHeader{Key: []byte(h.Key), Value: h.Value}
		}
		recs[i] = record.Record{TimestampDelta: r.Timestamp.UnixMilli() - first, OffsetDelta: int32(i), Key: r.Key, Value: r.Value, Headers: hs}
	}
	h := record.BatchHeader{FirstTimestamp: first, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	if s.pid >= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = s.pid, epoch, seq
	}
	if s.p.txnID != "" {
		h.Attributes |= record.AttrTransactional
	}
	plain, err := record.AppendBatch(nil, h, recs)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	if s.p.cfg.codec == record.CodecNone {
		b.data = plain
		return nil
	}
	z, err := compress.CompressBatch(nil, plain, s.p.cfg.codec)
	if err != nil {
		return err
	}
	b.data = z
	return nil
}

// nextSeq is the sequence after n records from seq, wrapping at MaxInt32.
func nextSeq(seq, n int32) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}

func (s *sink) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		s.mu.Lock()
		// A full batch is sealed (it waits in the queue for a slot), and so
		// is one whose first record reached its delivery deadline, for the
		// rewind to fail it even if nothing can be sent. Any other open
		// batch is sealed only when it can be sent (below).
		if len(s.cur) > 0 && (s.curBytes+record.HeaderSize >= s.limit || !now.Before(s.cur[0].at.Add(s.p.cfg.deliveryTimeout))) {
			s.sealLocked()
		}
		if s.fenced != nil || (s.inflight == 0 && (s.rewind || s.frontBlockedLocked(now))) {
			s.rewindLocked(now)
		}
		wait := time.Hour
		for !s.rewind && s.fenced == nil && !s.newPID && s.inflight < s.sendWindowLocked() {
			if s.next == len(s.queue) {
				// A slot is free and every sealed batch was sent: the open
				// batch goes now, with every record that gathered while
				// the slots were busy, unless a linger still holds it.
				if len(s.cur) == 0 {
					break
				}
				if age := now.Sub(s.curSince); !s.flush && age < s.p.cfg.linger {
					wait = s.p.cfg.linger - age
					break
				}
				s.sealLocked() // may fail to encode: the rewind settles it
				continue
			}
			b := s.queue[s.next]
			if b.done {
				s.next++ // acknowledged: never sent again
				continue
			}
			if b.fatalErr != nil || b.tooLarge {
				break // settled by the rewind once it is at the front
			}
			if b.sent && now.Before(s.notBefore) {
				break // a retry waits out the backoff; a batch never sent does not
			}
			if s.pid >= 0 && !b.numbered {
				s.numberLocked(b)
			}
			b.front = s.firstUnfinished() == s.next
			s.next++
			s.inflight++
			b.sent = true
			go s.send(b)
		}
		if len(s.cur) == 0 {
			s.flush = false
		}
		done := s.popDoneLocked()
		if len(s.cur) > 0 {
			wait = min(wait, s.cur[0].at.Add(s.p.cfg.deliveryTimeout).Sub(now))
		}
		if s.notBefore.After(now) {
			wait = min(wait, s.notBefore.Sub(now))
		}
		if i := s.firstUnfinished(); i >= 0 && s.inflight == 0 {
			// Wake for the front batch's delivery deadline: it fails then
			// even if nothing else happens; and at once when a batch
			// sealed above failed to encode, for the rewind to settle it.
			wait = min(wait, s.queue[i].deadline.Sub(now))
			if s.rewind {
				wait = 0
			}
		}
		s.mu.Unlock()
		s.deliver(done)

		timer.Reset(max(wait, 0))
		select {
		case <-s.wake:
		case <-timer.C:
		case <-s.p.aborted:
			s.abort()
			return
		case <-s.p.stop:
			// Close flushed first, so anything left is a record produced
			// concurrently with Close: it fails, as do later ones (add
			// refuses them once abort marked the sink closed).
			s.abort()
			return
		}
	}
}

// outcome is a callback to run.
type outcome struct {
	pd  *pending
	err error
}

// deliver runs callbacks, in order. A record's buffer room is freed before
// its callback (which may produce again); it counts as finished, for
// Flush, after.
func (s *sink) deliver(out []outcome) {
	for _, o := range out {
		s.p.freeRoom(o.pd.size)
		o.pd.cb(o.pd.rec, o.err)
		s.p.finished()
	}
}

// popDoneLocked removes finished batches from the front of the queue and
// returns their callbacks, in order.
func (s *sink) popDoneLocked() []outcome {
	var out []outcome
	for len(s.queue) > 0 && s.queue[0].done {
		b := s.queue[0]
		s.queue = s.queue[1:]
		s.next = max(s.next-1, 0)
		for i, pd := range b.recs {
			pd.rec.Offset = -1
			if b.offset >= 0 {
				pd.rec.Offset = b.offset + int64(i)
			}
			if b.appendTime >= 0 {
				pd.rec.Timestamp = time.UnixMilli(b.appendTime)
			}
			out = append(out, outcome{pd: pd})
		}
	}
	return out
}

// failLocked drops batch i from the queue and returns its callbacks.
func (s *sink) failLocked(i int, err error) []outcome {
	b := s.queue[i]
	s.queue = append(s.queue[:i], s.queue[i+1:]...)
	if i < s.next {
		s.next--
	}
	out := make([]outcome, len(b.recs))
	for j, pd := range b.recs {
		out[j] = outcome{pd: pd, err: err}
	}
	return out
}

// frontBlockedLocked reports whether the first unfinished batch needs the
// rewind's decision: refused for good, too large, out of sequence, or past
// its delivery deadline.
func (s *sink) frontBlockedLocked(now time.Time) bool {
	i := s.firstUnfinished()
	if i < 0 {
		return false
	}
	b := s.queue[i]
	return b.fatalErr != nil || b.tooLarge || b.outOfSeq || !now.Before(b.deadline)
}

// rewindLocked runs when no request is in flight and an attempt failed (or
// the front batch is blocked). It settles the batches at the front, in
// order: a batch refused for good, or past its deadline, fails; a batch too
// large for the topic is split; an idempotent batch refused out of
// sequence although nothing before it was pending means the leader lost
// the producer's state. Only the front batch is settled, so a batch's
// callback never runs before those of the batches before it, and the
// batches behind a failed one are renumbered (see sink) only once nothing
// before them may still be written. Sending then restarts from the first
// unfinished batch, after a backoff when an attempt failed; a rewind that
// only fails batches past their deadline does not delay the rest.
func (s *sink) rewindLocked(now time.Time) {
	attempted := s.rewind // an attempt failed since the last rewind
	s.rewind = false
	var failed []outcome
	defer func() {
		if len(failed) > 0 {
			// Callbacks for failures run outside the lock, in order, after
			// those of the batches before them.
			done := s.popDoneLocked()
			s.mu.Unlock()
			s.deliver(done)
			s.deliver(failed)
			s.mu.Lock()
		}
	}()
	if s.fenced != nil {
		failed = s.failAllLocked(s.fenced)
		return
	}
	for {
		i := s.firstUnfinished()
		if i < 0 {
			break
		}
		b := s.queue[i]
		var err *DeliveryError
		switch {
		case b.tooLarge && !b.unknown && now.Before(b.deadline):
			s.splitLocked(i)
			continue
		case b.fatalErr != nil:
			err = &DeliveryError{Err: b.fatalErr, Indefinite: b.unknown}
		case b.tooLarge:
			// An earlier attempt may have written it whole: not split.
			err = &DeliveryError{Err: b.lastErr, Indefinite: b.unknown}
		case !now.Before(b.deadline):
			// A batch queued behind others may never have been sent: the
			// partition's last error says why.
			err = &DeliveryError{Err: fmt.Errorf("%w: not acknowledged within %s", ErrDeliveryTimeout, s.p.cfg.deliveryTimeout), Last: cmp.Or(b.lastErr, s.lastErr), Indefinite: b.unknown}
		case b.outOfSeq && b.front && b.unknown:
			// The leader forgot the producer, and an earlier attempt may
			// have written this batch: sending it again could duplicate.
			err = &DeliveryError{Err: fmt.Errorf("the partition leader lost this producer's state: %w", b.lastErr), Indefinite: true}
		case b.outOfSeq && b.front:
			// The leader lost the producer's state (expiry, unclean
			// election); nothing from here on was written: renumber.
			b.outOfSeq = false
			s.bumpEpochLocked()
			continue
		}
		if err == nil {
			// A gap left by batches that were still in flight is only
			// retried.
			b.outOfSeq = false
			break
		}
		failed = append(failed, s.failLocked(i, err)...)
		if s.p.txnID != "" {
			// The transaction must abort: fail the rest at once, so that
			// Commit learns it without waiting for their timeouts.
			s.poisonLocked(fmt.Errorf("%w: an earlier record of topic %q partition %d failed: %v", ErrTransactionAbortable, s.topic, s.partition, err))
			break
		}
		if s.pid < 0 {
			continue
		}
		if err.Indefinite {
			// It may have been written, and so may anything sent after
			// it: those are indefinite too, and cannot be resent under a
			// new epoch without risking a duplicate.
			for j := i; j < len(s.queue); {
				if s.queue[j].sent && !s.queue[j].done {
					failed = append(failed, s.failLocked(j, &DeliveryError{Err: fmt.Errorf("%w: an earlier batch of the partition failed with an unknown outcome", ErrDeliveryTimeout), Last: s.queue[j].lastErr, Indefinite: true})...)
					continue
				}
				j++
			}
			s.bumpEpochLocked()
			continue
		}
		if b.numbered {
			// Certainly not written: the batches behind it take its
			// sequences, in this epoch if none of them may still land
			// with the numbers they had.
			if s.landableLocked(i) {
				s.bumpEpochLocked()
			} else {
				s.unnumberLocked(b.baseSeq)
			}
		}
	}
	s.next = s.firstUnfinished()
	if s.next < 0 {
		s.next = len(s.queue)
	}
	switch {
	case attempted && s.throttled:
		// A rate refusal: the batches go again, as they are, once the
		// delay the broker asked for has passed (never sooner), and until
		// their delivery deadline like any retry.
		s.notBefore = now.Add(jitterUp(s.throttle))
		s.window = 1
	case attempted:
		s.attempts++
		s.notBefore = now.Add(backoff(s.attempts))
	}
	s.throttled, s.throttle = false, 0
}

// sendWindowLocked is how many requests the sink may have in flight now.
// After a rate refusal it sends one at a time, and one more after each
// acknowledgement, up to maxInFlight. Requests in flight together reach
// the leader in any order (each is a stream of its own), and a leader whose
// tenant is at its rate admits whichever comes when its bucket is out of
// debt: with five in flight, four times in five a batch behind a refused
// one, which the log then refuses as out of sequence (it waits for the
// gap first), and the tenant's rate went to requests that wrote nothing
// (measured with the brokers' refunds, before their offered averages:
// 0.01 to 0.04 of a 1 MiB/s quota over three partitions with five in
// flight, 0.35 to 0.71 with this window). One at a time, the batch
// admitted is the one the log takes next; a tenant held at its rate loses nothing by it, as its
// rate, not the round trip, bounds what it sends.
func (s *sink) sendWindowLocked() int {
	if s.window > 0 {
		return min(s.window, s.p.cfg.maxInFlight)
	}
	return s.p.cfg.maxInFlight
}

// landableLocked reports whether a batch from queue index i on was sent
// with its current numbers and may be (or have been) written with them: an
// attempt of unknown outcome, or an acknowledgement.
func (s *sink) landableLocked(i int) bool {
	for _, b := range s.queue[i:] {
		if b.numbered && (b.unknown || b.done) {
			return true
		}
	}
	return false
}

// failAllLocked settles every queued batch once the producer is fenced:
// acknowledged ones succeed, the rest fail (indefinite when sent).
func (s *sink) failAllLocked(cause error) []outcome {
	s.sealLocked()
	var out []outcome
	for len(s.queue) > 0 {
		if s.queue[0].done {
			out = append(out, s.popDoneLocked()...)
			continue
		}
		b := s.queue[0]
		out = append(out, s.failLocked(0, &DeliveryError{Err: cause, Last: b.lastErr, Indefinite: b.sent || b.unknown})...)
	}
	return out
}

// splitLocked replaces queue[i], refused as larger than the topic's
// max.message.bytes, by its two halves. It was certainly not written, so
// the halves take over its sequence range (first half first) and nothing
// else is renumbered.
func (s *sink) splitLocked(i int) {
	b := s.queue[i]
	half := len(b.recs) / 2
	first := &pbatch{recs: b.recs[:half], deadline: b.deadline, offset: -1, lastErr: b.lastErr}
	second := &pbatch{recs: b.recs[half:], deadline: b.deadline, offset: -1, lastErr: b.lastErr}
	for j, nb := range []*pbatch{first, second} {
		seq := b.baseSeq
		if j == 1 {
			seq = nextSeq(b.baseSeq, int32(half))
		}
		if err := s.encode(nb, b.epoch, seq); err != nil {
			nb.fatalErr = err
			s.rewind = true
		}
		if b.numbered && s.pid >= 0 {
			nb.numbered, nb.epoch, nb.baseSeq = true, b.epoch, seq
		}
	}
	s.queue = append(s.queue[:i], append([]*pbatch{first, second}, s.queue[i+1:]...)...)
	if i < s.next {
		s.next++
	}
	s.p.c.logger.Debug("split a batch over max.message.bytes", "topic", s.topic, "partition", s.partition, "records", len(b.recs))
}

// bumpEpochLocked starts a new epoch of the producer id on this partition;
// the unfinished batches are renumbered from sequence 0 as they are sent
// (Kafka's KIP-360). When the epoch is exhausted the partition gets a new
// producer id instead, and sends nothing until it has it.
func (s *sink) bumpEpochLocked() {
	if s.p.txnID != "" {
		// Only the transaction coordinator bumps a transactional
		// producer's epoch, when the transaction ends: it must abort.
		s.poisonLocked(fmt.Errorf("%w: a batch to topic %q partition %d may or may not have been written, or the leader lost the producer's state", ErrTransactionAbortable, s.topic, s.partition))
		return
	}
	s.unnumberLocked(0)
	if s.epoch < math.MaxInt16 {
		s.epoch++
		return
	}
	if !s.newPID {
		s.newPID = true
		s.p.wg.Add(1)
		go func() { defer s.p.wg.Done(); s.renewProducerID() }()
	}
}

// renewProducerID obtains a new producer id for this partition's batches
// once its epoch is exhausted, retrying until the producer stops.
func (s *sink) renewProducerID() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	pid, epoch, err := s.p.c.initProducerID(ctx)
	if err != nil {
		if ctx.Err() == nil {
			// A refusal that retrying cannot fix (a revoked key, say).
			s.mu.Lock()
			s.fenced = fmt.Errorf("%w: producer epoch exhausted and no new producer id: %v", ErrProducerFenced, err)
			s.newPID = false
			s.mu.Unlock()
			s.signal()
		}
		return
	}
	s.mu.Lock()
	s.pid, s.epoch, s.newPID = pid, epoch, false
	s.unnumberLocked(0)
	s.mu.Unlock()
	s.p.c.logger.Debug("producer epoch exhausted on a partition: continuing under a new producer id", "topic", s.topic, "partition", s.partition, "producer_id", pid)
	s.signal()
}

// poisonLocked makes the sink fail every record it has and is given (as
// when fenced) until resetTxnLocked: a transactional producer's
// transaction that cannot commit. The first cause stays.
func (s *sink) poisonLocked(cause error) {
	if s.fenced == nil {
		s.fenced = cause
	}
	s.signal()
}

// resetTxnLocked starts the next transaction of a transactional producer
// on this partition: the producer id and epoch the coordinator gave, its
// sequences from 0 (KIP-890: every transaction has its own epoch). The
// sink must be idle (nothing queued or in flight).
func (s *sink) resetTxnLocked(pid int64, epoch int16) {
	s.pid, s.epoch, s.fenced = pid, epoch, nil
	s.unnumberLocked(0)
	s.attempts, s.notBefore, s.lastErr, s.rewind = 0, time.Time{}, nil, false
	s.throttled, s.throttle = false, 0
}

func (s *sink) firstUnfinished() int {
	for i, b := range s.queue {
		if !b.done {
			return i
		}
	}
	return -1
}

// leaderCheckInterval is how long an attempt waits for its answer before
// its sink looks for a newer leader of the partition, and how often it
// looks again while the attempt still waits (see watchAttempt).
const leaderCheckInterval = time.Second

// errLeaderMoved is the cause of an attempt abandoned because the
// partition's metadata names a newer leader epoch than the one it was sent
// at (see watchAttempt).
var errLeaderMoved = errors.New("the partition has a newer leader")

// send makes one attempt at b, through the leader's leaderConn, and
// records its outcome.
func (s *sink) send(b *pbatch) {
	timeout := min(s.p.cfg.requestTimeout, time.Until(b.deadline))
	tctx, cancelTimeout := context.WithTimeout(context.Background(), max(timeout, 50*time.Millisecond)+2*time.Second)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	routed := make(chan int32, 1)
	go s.watchAttempt(ctx, cancel, routed)
	var res *sluicev1.ProduceResponse
	rc, epoch, err := s.p.c.leaderOf(ctx, s.topic, s.partition)
	sent := err == nil // a routing error never left this process
	if err != nil {
		s.p.c.observe(s.topic, s.partition, err) // offline in the cache: refresh next time
	} else {
		routed <- epoch
		req := &sluicev1.ProduceRequest{
			Topic: s.topic, Partition: s.partition, Acks: s.p.cfg.acks.proto(),
			TimeoutMs:          max(timeout.Milliseconds(), 50),
			CurrentLeaderEpoch: &epoch,
			Payload:            &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b.data}},
			TransactionalId:    s.p.txnID,
		}
		res, err = s.p.leaderConn(rc).produce(ctx, req, timeout)
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, errLeaderMoved) {
			// Abandoned: Unavailable, outcome unknown. The metadata
			// already names the new leader, which the retry goes to.
			err = cause
		} else {
			err = normalize(ctx, err)
			s.p.c.observe(s.topic, s.partition, err)
		}
	}

	s.mu.Lock()
	defer func() {
		idle := s.inflight == 0
		s.mu.Unlock()
		s.signal()
		if idle && s.p.txnID != "" {
			s.p.wakeWaiters() // a transaction's end waits for idle sinks
		}
	}()
	s.inflight--
	if b.done {
		return // settled already (an earlier attempt's answer)
	}
	if err == nil {
		b.done, b.offset, b.appendTime = true, res.GetBaseOffset(), -1
		if s.p.cfg.acks == AcksNone {
			b.offset = -1
		} else if t := res.GetLogAppendTimeMs(); t > 0 {
			b.appendTime = t // 0: a broker that predates the field
		}
		s.attempts = 0
		if s.window > 0 {
			if s.window++; s.window >= s.p.cfg.maxInFlight {
				s.window = 0
			}
		}
		return
	}
	b.lastErr, s.lastErr = err, err
	b.outOfSeq = false
	b.tooLarge = false
	s.p.c.logger.Debug("produce attempt failed", "topic", s.topic, "partition", s.partition,
		"epoch", b.epoch, "sequence", b.baseSeq, "records", len(b.recs), "sent", sent, "err", err)
	pe := producerErrorOf(err)
	te := txnErrorOf(err)
	switch {
	case s.p.txnID != "" && te != nil && te.GetReason() == sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS:
		// The previous transaction's markers are still being written:
		// refused before writing, retried.
	case s.p.txnID != "" && (te != nil && te.GetReason() == sluicev1.TransactionError_REASON_PRODUCER_FENCED ||
		pe != nil && pe.GetReason() == sluicev1.ProducerError_REASON_PRODUCER_FENCED):
		// A newer epoch reached the partition or its verification:
		// another instance's, or the coordinator's abort of this
		// transaction at its timeout. The coordinator tells which when
		// the transaction ends (ErrProducerFenced, or a new epoch): abort.
		b.fatalErr = fmt.Errorf("%w: the partition refused this producer's epoch (the transaction timed out, or another instance took over; Abort tells which): %w", ErrTransactionAbortable, err)
	case s.p.txnID != "" && te != nil:
		b.fatalErr = classifyTxnErr(err)
	case pe != nil && pe.GetReason() == sluicev1.ProducerError_REASON_DUPLICATE_SEQUENCE:
		// Written before, too long ago for the leader to know the offset.
		b.done, b.offset, b.appendTime = true, -1, -1
		return
	case pe != nil && pe.GetReason() == sluicev1.ProducerError_REASON_PRODUCER_FENCED:
		s.fenced = fmt.Errorf("%w: %v", ErrProducerFenced, err)
	case pe != nil && pe.GetReason() == sluicev1.ProducerError_REASON_OUT_OF_ORDER_SEQUENCE:
		b.outOfSeq = true
	case len(b.recs) > 1 && batchTooLarge(err):
		b.tooLarge = true // certainly not written; halves keep its sequences
	case connect.CodeOf(err) == connect.CodeUnauthenticated && sent && !b.reauthed:
		// The token expired in flight: the interceptor dropped it, the
		// retry mints a new one. A second refusal is final (a revoked key).
		b.reauthed = true
	case connect.CodeOf(err) == connect.CodeNotFound:
		if sent {
			// The control plane knows the topic (routing found it) but
			// this broker has not heard of it yet: retry.
			break
		}
		b.fatalErr = err
	case retriable(err):
		if d, ok := throttleOf(err); ok {
			// Refused before writing: the batch keeps its numbers.
			s.throttled, s.throttle = true, max(s.throttle, d)
		}
		if sent && indefinite(err) {
			b.unknown = true
		}
	default:
		b.fatalErr = err
	}
	s.rewind = true
}

// watchAttempt ends an attempt early. When the producer aborts, it cancels
// ctx at once. When the attempt, sent to the partition's leader at the
// leader epoch that arrives on routed, has had no answer for
// leaderCheckInterval, it refreshes the topic's metadata, and again every
// leaderCheckInterval while the attempt waits; once the metadata names a
// newer leader epoch, it cancels ctx with an errLeaderMoved cause.
//
// A leader that stopped without closing its connections (SIGSTOP, a
// frozen VM, a link that drops packets) answers nothing, and its
// connection lives until HTTP/2's health check drops it (15 s of
// silence) or the request times out; the sink cannot move the partition's
// batches to the new leader before every attempt in flight has ended. The
// new leader, elected from the ISR at a higher epoch, is known within a
// broker lease, so the partition moves then instead. Abandoning is safe
// like any timeout: the attempt's outcome is unknown, its batch keeps its
// producer epoch and sequence, and the new leader answers a retry of a
// batch the old one had replicated with its offset (a duplicate), while
// a batch the old leader appends after it was deposed is never
// acknowledged (its epoch is fenced) and is truncated when it follows.
func (s *sink) watchAttempt(ctx context.Context, cancel context.CancelCauseFunc, routed <-chan int32) {
	var (
		epoch int32
		sent  time.Time
		check *time.Timer
		due   <-chan time.Time
	)
	defer func() {
		if check != nil {
			check.Stop()
		}
	}()
	for {
		select {
		case <-s.p.aborted:
			cancel(nil)
			return
		case <-ctx.Done():
			return
		case epoch = <-routed:
			sent = time.Now()
			check = time.NewTimer(leaderCheckInterval)
			due = check.C
		case <-due:
			call := s.p.c.refreshTopic(s.topic)
			select {
			case <-call.done:
			case <-ctx.Done():
				return
			case <-s.p.aborted:
				cancel(nil)
				return
			}
			if cur, ok := s.p.c.cachedLeaderEpoch(s.topic, s.partition); ok && cur > epoch {
				cancel(connect.NewError(connect.CodeUnavailable, fmt.Errorf("%w (leader epoch %d): gave up on the answer of the leader at epoch %d after %s",
					errLeaderMoved, cur, epoch, time.Since(sent).Round(time.Millisecond))))
				return
			}
			check.Reset(leaderCheckInterval)
		}
	}
}

// abort fails every unfinished record with ErrProducerClosed and closes
// the sink to new records.
func (s *sink) abort() {
	s.mu.Lock()
	s.closed = true
	s.sealLocked()
	var out []outcome
	for len(s.queue) > 0 {
		b := s.queue[0]
		if b.done {
			out = append(out, s.popDoneLocked()...)
			continue
		}
		out = append(out, s.failLocked(0, &DeliveryError{Err: ErrProducerClosed, Indefinite: b.sent})...)
	}
	s.mu.Unlock()
	s.deliver(out)
}
