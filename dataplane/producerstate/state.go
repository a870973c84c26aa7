package producerstate

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/sluicemq/sluice/record"
)

// MaxCachedBatches is how many of its newest batches each producer's entry
// keeps. A client has at most this many batches in flight per partition
// (Kafka's max.in.flight.requests.per.connection <= 5), so a retry of any of
// them is answered with its original offsets.
const MaxCachedBatches = 5

// Sentinel errors of Check. Callers branch on them with errors.Is; the broker
// maps them to wire error codes once, at its API seam.
var (
	// ErrOutOfOrderSequence: the batch does not continue the producer's
	// sequence (a gap, a new epoch or an unknown producer not starting at 0).
	// The error is a *SequenceError carrying the expected sequence. Kafka's
	// OUT_OF_ORDER_SEQUENCE_NUMBER.
	ErrOutOfOrderSequence = errors.New("out of order sequence number")
	// ErrDuplicateSequence: the batch is a retry of one older than the cached
	// batches, so its offsets are no longer known. It was appended before;
	// the client may treat it as a success without offsets. Kafka's
	// DUPLICATE_SEQUENCE_NUMBER.
	ErrDuplicateSequence = errors.New("duplicate sequence number")
	// ErrProducerFenced: the batch carries an epoch older than the
	// producer's current one; a newer instance of the producer has taken
	// over. Kafka's INVALID_PRODUCER_EPOCH.
	ErrProducerFenced = errors.New("producer fenced")
	// ErrInvalidSequence: the batch's sequence numbers cannot be right: a
	// negative sequence, or the first sequence of a cached batch with a
	// different last sequence (a client bug). Kafka's INVALID_RECORD.
	ErrInvalidSequence = errors.New("invalid sequence number")
	// ErrInvalidProducer: a negative producer id or epoch was given to
	// Check. A negative id is a caller bug (non-idempotent batches are not
	// checked, see FromHeader); a negative epoch with an id is a malformed
	// client batch.
	ErrInvalidProducer = errors.New("invalid producer id or epoch")
)

// SequenceError is an out of order sequence number. errors.Is(err,
// ErrOutOfOrderSequence) is true.
type SequenceError struct {
	ProducerID int64
	Epoch      int16 // the batch's epoch
	Expected   int32 // the sequence number the next batch must start with
	Got        int32 // the batch's first sequence number
	// Unknown: the replica has no state for the producer (it expired, its
	// batches were deleted by retention, or it was never seen). The client
	// must bump its epoch or re-initialise (KIP-360).
	Unknown bool
	// NewEpoch: the batch opens a new epoch, which must start at 0.
	NewEpoch bool
}

func (e *SequenceError) Error() string {
	switch {
	case e.Unknown:
		return fmt.Sprintf("producer %d epoch %d: out of order sequence %d, expected 0: "+
			"the broker has no state for this producer (it expired or was never seen); "+
			"the client must bump its epoch or re-initialise", e.ProducerID, e.Epoch, e.Got)
	case e.NewEpoch:
		return fmt.Sprintf("producer %d: out of order sequence %d opening epoch %d, expected 0",
			e.ProducerID, e.Got, e.Epoch)
	}
	return fmt.Sprintf("producer %d epoch %d: out of order sequence %d, expected %d",
		e.ProducerID, e.Epoch, e.Got, e.Expected)
}

// Is makes errors.Is(err, ErrOutOfOrderSequence) true.
func (e *SequenceError) Is(target error) bool { return target == ErrOutOfOrderSequence }

// Batch is the producer-relevant part of one appended batch.
type Batch struct {
	ProducerID    int64
	ProducerEpoch int16
	BaseSequence  int32
	LastSequence  int32 // see LastSequence
	FirstOffset   int64
	LastOffset    int64
	MaxTimestamp  int64 // ms since the Unix epoch
}

// FromHeader returns the Batch of an appended batch (its header carries the
// offsets the log assigned). ok is false when the batch is not idempotent
// (ProducerID < 0) and for control batches, which carry no sequence numbers;
// the Batch then has ProducerID -1 and only the offsets and timestamp, so
// applying it only advances Offset.
//
// The last sequence is computed from LastOffsetDelta, as Kafka does: for a
// batch a leader accepted it equals RecordCount-1 (the log checks it), and
// unlike the record count it survives compaction.
func FromHeader(h record.BatchHeader) (Batch, bool) {
	if h.ProducerID < 0 || h.Attributes.Control() {
		return Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, LastSequence: -1,
			FirstOffset: h.BaseOffset, LastOffset: h.LastOffset(), MaxTimestamp: h.MaxTimestamp}, false
	}
	return Batch{
		ProducerID:    h.ProducerID,
		ProducerEpoch: h.ProducerEpoch,
		BaseSequence:  h.BaseSequence,
		LastSequence:  LastSequence(h.BaseSequence, h.LastOffsetDelta+1),
		FirstOffset:   h.BaseOffset,
		LastOffset:    h.LastOffset(),
		MaxTimestamp:  h.MaxTimestamp,
	}, true
}

// LastSequence is the sequence number of the last of count (>= 1) records
// whose first has sequence base: base+count-1, wrapping past math.MaxInt32
// to 0 as Kafka's sequence numbers do.
func LastSequence(base, count int32) int32 { return (base + count - 1) & math.MaxInt32 }

// nextSequence is the sequence number after seq, wrapping to 0.
func nextSequence(seq int32) int32 { return (seq + 1) & math.MaxInt32 }

// seqAhead is how far b is ahead of a on the circle of 2^31 sequence
// numbers: (b - a) mod 2^31.
func seqAhead(a, b int32) int32 { return (b - a) & math.MaxInt32 }

// Entry is the state of one producer.
type Entry struct {
	// Epoch is the producer's current epoch: the epoch of its newest batch.
	Epoch int16
	// Batches are its newest batches of that epoch, oldest first: at least
	// one, at most MaxCachedBatches.
	Batches []Batch
	// seenMs is this replica's clock when it last applied a batch of the
	// producer (Seen, Touch); not replicated or snapshotted.
	seenMs int64
}

// LastTimestamp is the MaxTimestamp of the producer's newest batch; Expire
// compares it with the cutoff.
func (e *Entry) LastTimestamp() int64 { return e.Batches[len(e.Batches)-1].MaxTimestamp }

// State is the producer state of one partition replica: per producer id, its
// epoch and its newest batches. It is a pure function of the batches applied
// to it, in log order (and of Expire). Not safe for concurrent use; the
// caller's partition lock guards it. The zero value is an empty state, like
// New.
type State struct {
	producers map[int64]*Entry
	offset    int64
}

// New returns an empty state, the state of an empty log.
func New() *State { return &State{producers: map[int64]*Entry{}} }

// Offset is the log offset the state reflects: every batch below it was
// applied. Apply advances it past each applied batch, Rebuild sets it to the
// log's LEO, a loaded snapshot to the snapshot's offset.
func (s *State) Offset() int64 { return s.offset }

// Len is the number of producers.
func (s *State) Len() int { return len(s.producers) }

// Result is the outcome of a successful Check.
type Result struct {
	// Duplicate: the batch is a retry of a cached batch, which was
	// appended at FirstOffset..LastOffset. The leader must not append it
	// again and answers the client with those offsets.
	Duplicate               bool
	FirstOffset, LastOffset int64
}

// Check decides what a leader does with a client's idempotent batch before
// appending it: a zero Result means append it; Duplicate means answer with
// the original offsets without appending. Errors: ErrInvalidProducer,
// ErrInvalidSequence, ErrProducerFenced, ErrDuplicateSequence and a
// *SequenceError (ErrOutOfOrderSequence). Check changes nothing; after a
// successful append the caller Applies the batch before the next Check, under
// the same lock as the append.
func (s *State) Check(pid int64, epoch int16, baseSeq, lastSeq int32) (Result, error) {
	if pid < 0 || epoch < 0 {
		return Result{}, fmt.Errorf("check producer %d epoch %d: %w", pid, epoch, ErrInvalidProducer)
	}
	if baseSeq < 0 || lastSeq < 0 {
		return Result{}, fmt.Errorf("producer %d epoch %d: negative sequence in %d..%d: %w", pid, epoch, baseSeq, lastSeq, ErrInvalidSequence)
	}
	e := s.producers[pid]
	switch {
	case e == nil:
		if baseSeq != 0 {
			return Result{}, &SequenceError{ProducerID: pid, Epoch: epoch, Got: baseSeq, Unknown: true}
		}
		return Result{}, nil
	case epoch < e.Epoch:
		return Result{}, fmt.Errorf("producer %d: producer epoch %d is older than %d: %w", pid, epoch, e.Epoch, ErrProducerFenced)
	case epoch > e.Epoch || len(e.Batches) == 0:
		if baseSeq != 0 {
			return Result{}, &SequenceError{ProducerID: pid, Epoch: epoch, Got: baseSeq, NewEpoch: true}
		}
		return Result{}, nil
	}
	for i := len(e.Batches) - 1; i >= 0; i-- {
		c := &e.Batches[i]
		if c.BaseSequence != baseSeq {
			continue
		}
		if c.LastSequence != lastSeq {
			return Result{}, fmt.Errorf("producer %d epoch %d: batch %d..%d has the first sequence of the batch %d..%d appended at offset %d: %w",
				pid, epoch, baseSeq, lastSeq, c.BaseSequence, c.LastSequence, c.FirstOffset, ErrInvalidSequence)
		}
		return Result{Duplicate: true, FirstOffset: c.FirstOffset, LastOffset: c.LastOffset}, nil
	}
	expected := nextSequence(e.Batches[len(e.Batches)-1].LastSequence)
	if baseSeq == expected {
		return Result{}, nil
	}
	// On the circle of sequence numbers, the half ahead of expected is a
	// gap; the half behind it is either inside the cached window (a batch
	// that does not match a cached one) or before it (an old duplicate).
	oldest := e.Batches[0].BaseSequence
	if seqAhead(expected, baseSeq) >= 1<<30 && seqAhead(oldest, baseSeq) >= seqAhead(oldest, expected) {
		return Result{}, fmt.Errorf("producer %d epoch %d: sequence %d is before the oldest cached batch, which starts at %d: %w",
			pid, epoch, baseSeq, oldest, ErrDuplicateSequence)
	}
	return Result{}, &SequenceError{ProducerID: pid, Epoch: epoch, Expected: expected, Got: baseSeq}
}

// Apply records an appended batch: on the leader after its append, on a
// follower after replicating it, and when replaying the log. It never fails
// and does not validate: the log is the truth, so a batch whose epoch
// differs from the producer's (in either direction) starts the producer's
// entry afresh, as Kafka does for replicated batches. Batches of
// non-idempotent producers (ProducerID < 0) only advance Offset. b must come
// from FromHeader (offsets non-negative, FirstOffset <= LastOffset).
func (s *State) Apply(b Batch) {
	s.offset = max(s.offset, b.LastOffset+1)
	if b.ProducerID < 0 {
		return
	}
	if s.producers == nil {
		s.producers = map[int64]*Entry{}
	}
	e := s.producers[b.ProducerID]
	switch {
	case e == nil:
		e = &Entry{Epoch: b.ProducerEpoch, Batches: make([]Batch, 0, MaxCachedBatches)}
		s.producers[b.ProducerID] = e
	case e.Epoch != b.ProducerEpoch:
		e.Epoch = b.ProducerEpoch
		e.Batches = e.Batches[:0]
	case len(e.Batches) == MaxCachedBatches:
		copy(e.Batches, e.Batches[1:])
		e.Batches = e.Batches[:MaxCachedBatches-1]
	}
	e.Batches = append(e.Batches, b)
}

// Seen records that this replica applied a batch of producer pid at its
// local time nowMs, so that Expire does not go by the client's record
// timestamps alone (a producer backfilling old timestamps stays known).
func (s *State) Seen(pid int64, nowMs int64) {
	if e := s.producers[pid]; e != nil {
		e.seenMs = max(e.seenMs, nowMs)
	}
}

// Touch marks every producer as seen at nowMs: after a load or rebuild,
// when the replica's own append times are unknown, producers get a full
// expiration period again.
func (s *State) Touch(nowMs int64) {
	for _, e := range s.producers {
		e.seenMs = max(e.seenMs, nowMs)
	}
}

// Expire drops the producers whose newest batch has a MaxTimestamp below
// cutoffMs and that this replica has not seen (Seen, Touch) since cutoffMs
// either (Kafka's producer.id.expiration.ms), and returns how many. A
// dropped producer that writes again must start at sequence 0, that is,
// bump its epoch or re-initialise.
func (s *State) Expire(cutoffMs int64) int {
	n := 0
	for pid, e := range s.producers {
		if max(e.LastTimestamp(), e.seenMs) < cutoffMs {
			delete(s.producers, pid)
			n++
		}
	}
	return n
}

// Producer returns a copy of one producer's entry.
func (s *State) Producer(pid int64) (Entry, bool) {
	e, ok := s.producers[pid]
	if !ok {
		return Entry{}, false
	}
	return Entry{Epoch: e.Epoch, Batches: slices.Clone(e.Batches)}, true
}

// ProducerIDs returns the producer ids, ascending.
func (s *State) ProducerIDs() []int64 {
	ids := make([]int64, 0, len(s.producers))
	for pid := range s.producers {
		ids = append(ids, pid)
	}
	slices.Sort(ids)
	return ids
}

// Clone returns a deep copy, for example to write a snapshot outside the
// partition lock.
func (s *State) Clone() *State {
	c := &State{producers: make(map[int64]*Entry, len(s.producers)), offset: s.offset}
	for pid, e := range s.producers {
		b := make([]Batch, len(e.Batches), MaxCachedBatches)
		copy(b, e.Batches)
		c.producers[pid] = &Entry{Epoch: e.Epoch, Batches: b, seenMs: e.seenMs}
	}
	return c
}
