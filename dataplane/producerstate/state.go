package producerstate

import (
	"cmp"
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
	// ErrTransactionNotVerified: a transactional batch that the caller did
	// not verify as part of the producer's current transaction (KIP-890:
	// the partition asks the transaction coordinator before it appends).
	// Refusing it keeps a delayed batch of an ended transaction out of
	// the next one.
	ErrTransactionNotVerified = errors.New("transactional batch not verified")
	// ErrInvalidTxnState: a non-transactional batch from a producer with
	// an ongoing transaction on the partition. Kafka's INVALID_TXN_STATE.
	ErrInvalidTxnState = errors.New("invalid transaction state")
	// ErrCoordinatorFenced: a marker from a transaction coordinator with an
	// epoch older than that of the last marker of the producer (a
	// coordinator that was replaced). Kafka's
	// TRANSACTION_COORDINATOR_FENCED.
	ErrCoordinatorFenced = errors.New("transaction coordinator fenced")
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
	// Transactional: the batch has the transactional attribute bit; a
	// data batch of a transaction (or, with Control, a marker).
	Transactional bool
	// Control: the batch is a marker (control batch) ending the
	// producer's transaction; Marker says how. Markers carry no sequence
	// numbers (BaseSequence and LastSequence are -1) and are never cached
	// as batches.
	Control bool
	Marker  record.ControlRecord
}

// FromHeader returns the Batch of an appended data batch (its header
// carries the offsets the log assigned). ok is false when the batch is not
// idempotent (ProducerID < 0) and for control batches, whose marker type
// is in their record (use FromBatch for them); the Batch then has
// ProducerID -1 and only the offsets and timestamp, so applying it only
// advances Offset.
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
		Transactional: h.Attributes.Transactional(),
	}, true
}

// FromBatch is FromHeader for a whole batch (its CRC checked, as by
// record.ReadBatch), markers included: for a control batch of a producer
// it decodes the control record (an error matching
// record.ErrInvalidControlRecord when it does not decode) and returns a
// Batch with Control set, ok true.
func FromBatch(b record.Batch) (_ Batch, ok bool, _ error) {
	h := b.Header()
	if !h.Attributes.Control() || h.ProducerID < 0 {
		pb, ok := FromHeader(h)
		return pb, ok, nil
	}
	c, err := record.ReadControlRecord(b)
	if err != nil {
		return Batch{}, false, err
	}
	return Batch{
		ProducerID:    h.ProducerID,
		ProducerEpoch: h.ProducerEpoch,
		BaseSequence:  -1,
		LastSequence:  -1,
		FirstOffset:   h.BaseOffset,
		LastOffset:    h.LastOffset(),
		MaxTimestamp:  h.MaxTimestamp,
		Transactional: h.Attributes.Transactional(),
		Control:       true,
		Marker:        c,
	}, true, nil
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
	// Epoch is the producer's current epoch: the epoch of its newest batch
	// or marker.
	Epoch int16
	// Batches are its newest data batches of that epoch, oldest first
	// (sequence numbers, offsets and timestamp; Transactional, Control and
	// Marker are not kept): at most MaxCachedBatches, and at least one
	// unless a marker opened the epoch (KIP-890: a marker carries the
	// bumped epoch, and the first batch of the new epoch starts at
	// sequence 0).
	Batches []Batch
	// TxnFirstOffset is the first offset of the producer's ongoing
	// transaction on the partition, -1 without one.
	TxnFirstOffset int64
	// CoordinatorEpoch is the coordinator epoch of the producer's last
	// marker, -1 before its first.
	CoordinatorEpoch int32
	// lastTimestamp is the MaxTimestamp of the newest batch or marker.
	lastTimestamp int64
	// seenMs is this replica's clock when it last applied a batch of the
	// producer (Seen, Touch); not replicated or snapshotted.
	seenMs int64
}

// LastTimestamp is the MaxTimestamp of the producer's newest batch or
// marker; Expire compares it with the cutoff.
func (e *Entry) LastTimestamp() int64 { return e.lastTimestamp }

// OngoingTxn is a transaction whose marker the partition has not seen.
type OngoingTxn struct {
	ProducerID  int64
	Epoch       int16 // the producer's current epoch
	FirstOffset int64 // the offset of its first batch on the partition
}

// AbortedTxn is a transaction ended by an abort marker: a read_committed
// reader drops the batches of ProducerID in FirstOffset..LastOffset.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64 // the transaction's first batch
	LastOffset  int64 // the abort marker's offset
	// LastStableOffset is the LSO right after the marker (ignoring the
	// HW): the first offset of the oldest transaction still ongoing, or
	// LastOffset+1. Kafka keeps it in its .txnindex entries so that a
	// fetch knows where to stop looking.
	LastStableOffset int64
}

// State is the producer state of one partition replica: per producer id, its
// epoch, its newest batches and its ongoing transaction, and the aborted
// transactions not yet dropped (DropAbortedBelow). It is a pure function of
// the batches applied to it, in log order (and of Expire and
// DropAbortedBelow). Not safe for concurrent use; the caller's partition
// lock guards it. The zero value is an empty state, like New.
type State struct {
	producers map[int64]*Entry
	offset    int64
	// ongoing holds the ongoing transactions by first offset, ascending:
	// transactions begin in log order, so appending keeps it sorted.
	ongoing []OngoingTxn
	// aborted holds the aborted transactions by LastOffset, ascending.
	aborted []AbortedTxn
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

// Check decides what a leader does with a client's idempotent,
// non-transactional batch before appending it: a zero Result means append
// it; Duplicate means answer with the original offsets without appending.
// Errors: ErrInvalidProducer, ErrInvalidSequence, ErrProducerFenced,
// ErrInvalidTxnState (the producer has an ongoing transaction here),
// ErrDuplicateSequence and a *SequenceError (ErrOutOfOrderSequence). Check
// changes nothing; after a successful append the caller Applies the batch
// before the next Check, under the same lock as the append. Markers never
// come through Check (see CheckMarker).
func (s *State) Check(pid int64, epoch int16, baseSeq, lastSeq int32) (Result, error) {
	return s.check(pid, epoch, baseSeq, lastSeq, false, false)
}

// CheckTransactional is Check for a transactional data batch. verified is
// the caller's answer to whether the transaction coordinator has this
// partition in the producer's current transaction for this epoch (KIP-890;
// the caller asks and caches, this package does not); an unverified batch
// is refused with ErrTransactionNotVerified. An older epoch is refused
// with ErrProducerFenced first, verified or not: that is a late batch of a
// transaction whose marker bumped the epoch. The sequence rules are
// Check's.
func (s *State) CheckTransactional(pid int64, epoch int16, baseSeq, lastSeq int32, verified bool) (Result, error) {
	return s.check(pid, epoch, baseSeq, lastSeq, true, verified)
}

func (s *State) check(pid int64, epoch int16, baseSeq, lastSeq int32, txn, verified bool) (Result, error) {
	if pid < 0 || epoch < 0 {
		return Result{}, fmt.Errorf("check producer %d epoch %d: %w", pid, epoch, ErrInvalidProducer)
	}
	if baseSeq < 0 || lastSeq < 0 {
		return Result{}, fmt.Errorf("producer %d epoch %d: negative sequence in %d..%d: %w", pid, epoch, baseSeq, lastSeq, ErrInvalidSequence)
	}
	e := s.producers[pid]
	if e != nil && epoch < e.Epoch {
		return Result{}, fmt.Errorf("producer %d: producer epoch %d is older than %d: %w", pid, epoch, e.Epoch, ErrProducerFenced)
	}
	if txn && !verified {
		return Result{}, fmt.Errorf("producer %d epoch %d: the partition is not verified as part of the producer's current transaction: %w",
			pid, epoch, ErrTransactionNotVerified)
	}
	if !txn && e != nil && e.TxnFirstOffset >= 0 {
		return Result{}, fmt.Errorf("producer %d epoch %d: non-transactional batch while the transaction from offset %d is ongoing: %w",
			pid, epoch, e.TxnFirstOffset, ErrInvalidTxnState)
	}
	switch {
	case e == nil:
		if baseSeq != 0 {
			return Result{}, &SequenceError{ProducerID: pid, Epoch: epoch, Got: baseSeq, Unknown: true}
		}
		return Result{}, nil
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

// CheckMarker decides whether a leader appends a marker (control batch)
// that the transaction coordinator sends for producer pid: it refuses a
// producer epoch older than the producer's (ErrProducerFenced) and a
// coordinator epoch older than that of the producer's last marker
// (ErrCoordinatorFenced). A marker for a producer without an ongoing
// transaction here (a retried marker, or a transaction that wrote nothing
// to this partition) passes: appending it ends nothing. Client batches
// with the control bit must be refused before this; only the
// coordinator writes markers.
func (s *State) CheckMarker(pid int64, epoch int16, coordinatorEpoch int32) error {
	if pid < 0 || epoch < 0 {
		return fmt.Errorf("check marker of producer %d epoch %d: %w", pid, epoch, ErrInvalidProducer)
	}
	e := s.producers[pid]
	if e == nil {
		return nil
	}
	if epoch < e.Epoch {
		return fmt.Errorf("marker of producer %d: producer epoch %d is older than %d: %w", pid, epoch, e.Epoch, ErrProducerFenced)
	}
	if coordinatorEpoch < e.CoordinatorEpoch {
		return fmt.Errorf("marker of producer %d: coordinator epoch %d is older than %d: %w", pid, coordinatorEpoch, e.CoordinatorEpoch, ErrCoordinatorFenced)
	}
	return nil
}

// Apply records an appended batch: on the leader after its append, on a
// follower after replicating it, and when replaying the log. It never fails
// and does not validate: the log is the truth, so a batch whose epoch
// differs from the producer's (in either direction) starts the producer's
// entry afresh, as Kafka does for replicated batches. Batches of
// non-idempotent producers (ProducerID < 0) only advance Offset. A
// transactional data batch of a producer without an ongoing transaction
// begins one at its first offset. A marker (Control) sets the producer's
// epoch (dropping its cached batches when the epoch changes, so the new
// epoch's sequence numbers start at 0) and coordinator epoch and ends its
// ongoing transaction, if any; an abort marker records an AbortedTxn. b
// must come from FromHeader or FromBatch (offsets non-negative,
// FirstOffset <= LastOffset).
func (s *State) Apply(b Batch) {
	s.offset = max(s.offset, b.LastOffset+1)
	if b.ProducerID < 0 {
		return
	}
	if s.producers == nil {
		s.producers = map[int64]*Entry{}
	}
	e := s.producers[b.ProducerID]
	if e == nil {
		e = &Entry{Epoch: b.ProducerEpoch, Batches: make([]Batch, 0, MaxCachedBatches), TxnFirstOffset: -1, CoordinatorEpoch: -1}
		s.producers[b.ProducerID] = e
	}
	e.lastTimestamp = b.MaxTimestamp
	if b.Control {
		s.applyMarker(e, b)
		return
	}
	switch {
	case e.Epoch != b.ProducerEpoch:
		e.Epoch = b.ProducerEpoch
		e.Batches = e.Batches[:0]
	case len(e.Batches) == MaxCachedBatches:
		copy(e.Batches, e.Batches[1:])
		e.Batches = e.Batches[:MaxCachedBatches-1]
	}
	// The cache answers retries by sequence numbers; it keeps no flags.
	c := b
	c.Transactional = false
	e.Batches = append(e.Batches, c)
	if b.Transactional && e.TxnFirstOffset < 0 {
		e.TxnFirstOffset = b.FirstOffset
		s.ongoing = append(s.ongoing, OngoingTxn{ProducerID: b.ProducerID, FirstOffset: b.FirstOffset})
	}
}

func (s *State) applyMarker(e *Entry, b Batch) {
	if e.Epoch != b.ProducerEpoch {
		e.Epoch = b.ProducerEpoch
		e.Batches = e.Batches[:0]
	}
	e.CoordinatorEpoch = b.Marker.CoordinatorEpoch
	first := e.TxnFirstOffset
	if first < 0 {
		return // nothing of the transaction reached this partition
	}
	e.TxnFirstOffset = -1
	s.removeOngoing(b.ProducerID)
	if b.Marker.Type == record.ControlAbort {
		lso := b.LastOffset + 1
		if len(s.ongoing) > 0 {
			lso = s.ongoing[0].FirstOffset
		}
		s.aborted = append(s.aborted, AbortedTxn{ProducerID: b.ProducerID, FirstOffset: first, LastOffset: b.LastOffset, LastStableOffset: lso})
	}
}

func (s *State) removeOngoing(pid int64) {
	i := slices.IndexFunc(s.ongoing, func(t OngoingTxn) bool { return t.ProducerID == pid })
	if i >= 0 {
		s.ongoing = slices.Delete(s.ongoing, i, i+1)
	}
	if len(s.ongoing) == 0 {
		s.ongoing = nil
	}
}

// FirstUnstableOffset is the first offset of the oldest ongoing
// transaction; ok is false without one. The partition's last stable offset
// is min(this, HW), or the HW when ok is false.
func (s *State) FirstUnstableOffset() (_ int64, ok bool) {
	if len(s.ongoing) == 0 {
		return 0, false
	}
	return s.ongoing[0].FirstOffset, true
}

// OngoingTransactions returns the ongoing transactions, oldest first.
func (s *State) OngoingTransactions() []OngoingTxn {
	out := make([]OngoingTxn, len(s.ongoing))
	for i, t := range s.ongoing {
		t.Epoch = s.producers[t.ProducerID].Epoch
		out[i] = t
	}
	return out
}

// AbortedTransactions returns the aborted transactions (not yet dropped)
// whose range FirstOffset..LastOffset overlaps [from, to), by marker
// offset ascending: what a read_committed fetch of [from, to) filters
// (nil, without allocating, when none does). As Kafka's fetch does with its
// transaction index, it stops at the first transaction whose
// LastStableOffset is at or past to: every transaction aborted later began
// at or after that LSO, so none of them overlaps.
func (s *State) AbortedTransactions(from, to int64) []AbortedTxn {
	i, _ := slices.BinarySearchFunc(s.aborted, from, func(t AbortedTxn, off int64) int { return cmp.Compare(t.LastOffset, off) })
	var out []AbortedTxn
	for _, t := range s.aborted[i:] {
		if t.FirstOffset < to {
			out = append(out, t)
		}
		if t.LastStableOffset >= to {
			break
		}
	}
	return out
}

// DropAbortedBelow forgets the aborted transactions whose marker lies
// below offset (the partition keeps them elsewhere, such as a sealed
// segment's index), keeping the in-memory list bounded.
func (s *State) DropAbortedBelow(offset int64) {
	i, _ := slices.BinarySearchFunc(s.aborted, offset, func(t AbortedTxn, off int64) int { return cmp.Compare(t.LastOffset, off) })
	s.aborted = slices.Delete(s.aborted, 0, i)
	if len(s.aborted) == 0 {
		s.aborted = nil
	}
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

// Expire drops the producers whose newest batch or marker has a
// MaxTimestamp below cutoffMs, that this replica has not seen (Seen,
// Touch) since cutoffMs either (Kafka's producer.id.expiration.ms) and
// that have no ongoing transaction (as in Kafka: the coordinator's
// timeout ends those), and returns how many. A dropped producer that
// writes again must start at sequence 0, that is, bump its epoch or
// re-initialise.
func (s *State) Expire(cutoffMs int64) int {
	n := 0
	for pid, e := range s.producers {
		if e.TxnFirstOffset < 0 && max(e.LastTimestamp(), e.seenMs) < cutoffMs {
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
	c := *e
	c.Batches, c.seenMs = slices.Clone(e.Batches), 0
	return c, true
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
	c := &State{producers: make(map[int64]*Entry, len(s.producers)), offset: s.offset,
		ongoing: slices.Clone(s.ongoing), aborted: slices.Clone(s.aborted)}
	for pid, e := range s.producers {
		b := make([]Batch, len(e.Batches), MaxCachedBatches)
		copy(b, e.Batches)
		ce := *e
		ce.Batches = b
		c.producers[pid] = &ce
	}
	return c
}
