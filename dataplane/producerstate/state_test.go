package producerstate_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
)

const maxSeq = math.MaxInt32

// batch is the batch of producer pid with count records from sequence base
// at offset first.
func batch(pid int64, epoch int16, base, count int32, first, ts int64) producerstate.Batch {
	return producerstate.Batch{
		ProducerID: pid, ProducerEpoch: epoch,
		BaseSequence: base, LastSequence: producerstate.LastSequence(base, count),
		FirstOffset: first, LastOffset: first + int64(count) - 1, MaxTimestamp: ts,
	}
}

// txnBatch is batch with the transactional bit.
func txnBatch(pid int64, epoch int16, base, count int32, first, ts int64) producerstate.Batch {
	b := batch(pid, epoch, base, count, first, ts)
	b.Transactional = true
	return b
}

// marker is the marker of producer pid's transaction, with epoch (the
// bumped one, KIP-890), at offset off.
func marker(pid int64, epoch int16, typ record.ControlType, off, ts int64) producerstate.Batch {
	return producerstate.Batch{
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: -1, LastSequence: -1,
		FirstOffset: off, LastOffset: off, MaxTimestamp: ts,
		Transactional: true, Control: true, Marker: record.ControlRecord{Type: typ, CoordinatorEpoch: 3},
	}
}

// checkState holds:
//   - producer 1, epoch 0: six batches of 10 records, sequences 0..59 at
//     offsets 100*i..100*i+9, so the cached ones are 10..59;
//   - producer 2, epoch 3: sequences 0..4;
//   - producer 3, epoch 0: sequences maxSeq-4..maxSeq (the next is 0);
//   - producer 4, epoch 0: a batch wrapping from maxSeq-1 to 1.
func checkState() *producerstate.State {
	s := producerstate.New()
	for i := range int32(6) {
		s.Apply(batch(1, 0, 10*i, 10, 100*int64(i), 1000+int64(i)))
	}
	s.Apply(batch(2, 3, 0, 5, 1000, 2000))
	s.Apply(batch(3, 0, maxSeq-4, 5, 2000, 3000))
	s.Apply(batch(4, 0, maxSeq-1, 4, 3000, 4000))
	return s
}

func TestProducerStateCheck(t *testing.T) {
	t.Parallel()
	dup := func(first int64, n int64) producerstate.Result {
		return producerstate.Result{Duplicate: true, FirstOffset: first, LastOffset: first + n - 1}
	}
	tests := []struct {
		name      string
		pid       int64
		epoch     int16
		base      int32
		last      int32
		want      producerstate.Result
		wantErr   error
		wantSeq   *producerstate.SequenceError // when wantErr is ErrOutOfOrderSequence
		errSubstr string
	}{
		{name: "new producer at 0", pid: 9, base: 0, last: 4},
		{name: "new producer at 5", pid: 9, base: 5, last: 9, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq:   &producerstate.SequenceError{ProducerID: 9, Expected: 0, Got: 5, Unknown: true},
			errSubstr: "no state for this producer"},
		{name: "in order", pid: 1, base: 60, last: 69},
		{name: "in order, other size", pid: 1, base: 60, last: 60},
		{name: "duplicate of newest", pid: 1, base: 50, last: 59, want: dup(500, 10)},
		{name: "duplicate of 2nd newest", pid: 1, base: 40, last: 49, want: dup(400, 10)},
		{name: "duplicate of 3rd newest", pid: 1, base: 30, last: 39, want: dup(300, 10)},
		{name: "duplicate of 4th newest", pid: 1, base: 20, last: 29, want: dup(200, 10)},
		{name: "duplicate of 5th newest", pid: 1, base: 10, last: 19, want: dup(100, 10)},
		{name: "duplicate of 6th newest", pid: 1, base: 0, last: 9, wantErr: producerstate.ErrDuplicateSequence},
		{name: "just before the window", pid: 1, base: 9, last: 9, wantErr: producerstate.ErrDuplicateSequence},
		{name: "gap", pid: 1, base: 70, last: 79, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 1, Expected: 60, Got: 70}},
		{name: "far gap", pid: 1, base: 60 + 1<<30 - 1, last: 60 + 1<<30 - 1, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 1, Expected: 60, Got: 60 + 1<<30 - 1}},
		{name: "inside the window, not a batch", pid: 1, base: 15, last: 24, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 1, Expected: 60, Got: 15}},
		{name: "same base, different last", pid: 1, base: 30, last: 35, wantErr: producerstate.ErrInvalidSequence},
		{name: "fenced epoch", pid: 2, epoch: 2, base: 5, last: 9, wantErr: producerstate.ErrProducerFenced,
			errSubstr: "producer epoch 2 is older than 3"},
		{name: "fenced epoch even at 0", pid: 2, epoch: 0, base: 0, last: 0, wantErr: producerstate.ErrProducerFenced},
		{name: "same epoch in order", pid: 2, epoch: 3, base: 5, last: 9},
		{name: "epoch bump at 0", pid: 2, epoch: 4, base: 0, last: 9},
		{name: "epoch bump at 3", pid: 2, epoch: 4, base: 3, last: 9, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 2, Epoch: 4, Expected: 0, Got: 3, NewEpoch: true}},
		{name: "epoch bump retrying the old batch", pid: 2, epoch: 4, base: 0, last: 4},
		{name: "wrap to 0", pid: 3, base: 0, last: 9},
		{name: "wrap duplicate", pid: 3, base: maxSeq - 4, last: maxSeq, want: dup(2000, 5)},
		{name: "wrap gap", pid: 3, base: 1, last: 1, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 3, Expected: 0, Got: 1}},
		{name: "before the window across the wrap", pid: 3, base: maxSeq - 5, last: maxSeq - 5, wantErr: producerstate.ErrDuplicateSequence},
		{name: "after a wrapping batch", pid: 4, base: 2, last: 2},
		{name: "duplicate of a wrapping batch", pid: 4, base: maxSeq - 1, last: 1, want: dup(3000, 4)},
		{name: "0 inside a wrapping batch", pid: 4, base: 0, last: 1, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 4, Expected: 2, Got: 0}},
		{name: "negative producer id", pid: -1, base: 0, last: 0, wantErr: producerstate.ErrInvalidProducer},
		{name: "negative epoch", pid: 1, epoch: -1, base: 60, last: 60, wantErr: producerstate.ErrInvalidProducer},
		{name: "negative base", pid: 1, base: -1, last: 0, wantErr: producerstate.ErrInvalidSequence},
		{name: "negative last", pid: 1, base: 60, last: -1, wantErr: producerstate.ErrInvalidSequence},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := checkState()
			before := s.Clone()
			got, err := s.Check(tt.pid, tt.epoch, tt.base, tt.last)
			require.Equal(t, before, s, "Check changes nothing")
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Zero(t, got)
			for _, other := range []error{producerstate.ErrOutOfOrderSequence, producerstate.ErrDuplicateSequence,
				producerstate.ErrProducerFenced, producerstate.ErrInvalidSequence, producerstate.ErrInvalidProducer} {
				if other != tt.wantErr {
					require.NotErrorIs(t, err, other)
				}
			}
			if tt.wantSeq != nil {
				var se *producerstate.SequenceError
				require.ErrorAs(t, err, &se)
				require.Equal(t, tt.wantSeq, se)
			}
			if tt.errSubstr != "" {
				require.ErrorContains(t, err, tt.errSubstr)
			}
		})
	}
}

// TestProducerStateCheckApplySequence drives a leader: Check, then Apply
// with the next offsets, across a sequence wrap and an epoch bump.
func TestProducerStateCheckApplySequence(t *testing.T) {
	t.Parallel()
	s := producerstate.New()
	next := int64(0)
	seq := int32(0)
	epoch := int16(0)
	appendBatch := func(count int32) producerstate.Batch {
		t.Helper()
		last := producerstate.LastSequence(seq, count)
		res, err := s.Check(7, epoch, seq, last)
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		b := batch(7, epoch, seq, count, next, next)
		s.Apply(b)
		next += int64(count)
		seq = producerstate.LastSequence(seq, count+1)
		return b
	}
	for range 20 {
		b := appendBatch(3)
		res, err := s.Check(7, epoch, b.BaseSequence, b.LastSequence)
		require.NoError(t, err)
		require.Equal(t, producerstate.Result{Duplicate: true, FirstOffset: b.FirstOffset, LastOffset: b.LastOffset}, res)
	}
	seq = maxSeq - 5
	epoch = 1
	_, err := s.Check(7, epoch, seq, seq)
	require.ErrorIs(t, err, producerstate.ErrOutOfOrderSequence, "a new epoch starts at 0")
	seq = 0
	appendBatch(1)
	// Jump to near the wrap with one huge batch (whose base the later
	// batches avoid: after it the window spans the whole circle), then
	// cross the wrap.
	s.Apply(batch(7, epoch, 1, maxSeq-7, next, next))
	next += maxSeq - 7
	seq = maxSeq - 6
	for range 6 {
		appendBatch(3)
	}
	require.Equal(t, int32(11), seq, "wrapped")
	e, ok := s.Producer(7)
	require.True(t, ok)
	require.Len(t, e.Batches, producerstate.MaxCachedBatches)
	require.Equal(t, int32(maxSeq), e.Batches[1].BaseSequence)
	require.Equal(t, int32(1), e.Batches[1].LastSequence)
	_, err = s.Check(7, epoch, maxSeq-6, maxSeq-4)
	require.ErrorIs(t, err, producerstate.ErrDuplicateSequence)
	require.Equal(t, next, s.Offset())
}

func TestProducerStateLastSequence(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ base, count, want int32 }{
		{0, 1, 0},
		{5, 10, 14},
		{maxSeq, 1, maxSeq},
		{maxSeq, 2, 0},
		{maxSeq - 1, 4, 1},
		{maxSeq, maxSeq, maxSeq - 2},
	} {
		require.Equal(t, tt.want, producerstate.LastSequence(tt.base, tt.count), "LastSequence(%d, %d)", tt.base, tt.count)
	}
}

func TestProducerStateFromHeader(t *testing.T) {
	t.Parallel()
	h := record.BatchHeader{BaseOffset: 100, LastOffsetDelta: 4, RecordCount: 5, MaxTimestamp: 1234,
		ProducerID: 42, ProducerEpoch: 3, BaseSequence: maxSeq - 1}
	b, ok := producerstate.FromHeader(h)
	require.True(t, ok)
	require.Equal(t, producerstate.Batch{ProducerID: 42, ProducerEpoch: 3, BaseSequence: maxSeq - 1, LastSequence: 2,
		FirstOffset: 100, LastOffset: 104, MaxTimestamp: 1234}, b)

	offsetsOnly := producerstate.Batch{ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, LastSequence: -1,
		FirstOffset: 100, LastOffset: 104, MaxTimestamp: 1234}
	h.ProducerID = -1
	b, ok = producerstate.FromHeader(h)
	require.False(t, ok, "not idempotent")
	require.Equal(t, offsetsOnly, b)

	h.ProducerID = 42
	h.Attributes = record.AttrControl | record.AttrTransactional
	b, ok = producerstate.FromHeader(h)
	require.False(t, ok, "control batch")
	require.Equal(t, offsetsOnly, b)

	s := producerstate.New()
	s.Apply(b)
	require.Equal(t, 0, s.Len())
	require.Equal(t, int64(105), s.Offset())
}

func TestProducerStateApply(t *testing.T) {
	t.Parallel()
	s := producerstate.New()
	var all []producerstate.Batch
	for i := range int32(8) {
		b := batch(1, 2, 3*i, 3, 10*int64(i), int64(i))
		all = append(all, b)
		s.Apply(b)
		e, ok := s.Producer(1)
		require.True(t, ok)
		require.Equal(t, int16(2), e.Epoch)
		require.Equal(t, all[max(0, len(all)-producerstate.MaxCachedBatches):], e.Batches, "after %d batches", i+1)
		require.Equal(t, b.LastOffset+1, s.Offset())
	}
	require.Equal(t, 1, s.Len())

	// Producer returns a copy.
	e, _ := s.Producer(1)
	e.Batches[0].FirstOffset = -5
	e2, _ := s.Producer(1)
	require.Equal(t, all[3], e2.Batches[0])

	// A non-idempotent batch only moves the offset.
	s.Apply(producerstate.Batch{ProducerID: -1, FirstOffset: 80, LastOffset: 89})
	require.Equal(t, 1, s.Len())
	require.Equal(t, int64(90), s.Offset())

	// Another epoch, newer or older (the log is the truth), starts afresh.
	for _, epoch := range []int16{5, 1} {
		b := batch(1, epoch, 0, 1, s.Offset(), 100)
		s.Apply(b)
		e, _ = s.Producer(1)
		require.Equal(t, epoch, e.Epoch)
		require.Equal(t, []producerstate.Batch{b}, e.Batches)
		require.Equal(t, int64(-1), e.TxnFirstOffset)
	}
	_, ok := s.Producer(2)
	require.False(t, ok)

	var zero producerstate.State
	zero.Apply(batch(3, 0, 0, 1, 0, 0))
	require.Equal(t, 1, zero.Len(), "the zero State is usable")
}

func TestProducerStateExpire(t *testing.T) {
	t.Parallel()
	s := producerstate.New()
	s.Apply(batch(1, 0, 0, 1, 0, 5000))
	s.Apply(batch(1, 0, 1, 1, 1, 1000)) // the newest batch counts, not the largest timestamp
	s.Apply(batch(2, 0, 0, 1, 2, 2000))
	s.Apply(batch(3, 0, 0, 1, 3, 3000))
	s.Apply(batch(4, 0, 0, 1, 4, 1999))
	require.Equal(t, 0, s.Expire(1000))
	require.Equal(t, 2, s.Expire(2000), "below the cutoff, not at it")
	require.Equal(t, []int64{2, 3}, s.ProducerIDs())
	require.Equal(t, int64(5), s.Offset(), "expiry does not move the offset")
	_, err := s.Check(1, 0, 2, 2)
	var se *producerstate.SequenceError
	require.ErrorAs(t, err, &se)
	require.True(t, se.Unknown)
	require.Equal(t, 2, s.Expire(math.MaxInt64))
	require.Equal(t, 0, s.Len())
}

func TestProducerStateClone(t *testing.T) {
	t.Parallel()
	s := checkState()
	c := s.Clone()
	require.Equal(t, s, c)
	c.Apply(batch(1, 0, 60, 1, 600, 0))
	c.Apply(batch(2, 9, 0, 1, 601, 0))
	require.Equal(t, checkState(), s, "the original is unchanged")
	require.NotEqual(t, s, c)
}

func TestProducerStateSequenceErrorIs(t *testing.T) {
	t.Parallel()
	var err error = &producerstate.SequenceError{ProducerID: 1, Expected: 4, Got: 6}
	require.ErrorIs(t, err, producerstate.ErrOutOfOrderSequence)
	require.False(t, errors.Is(err, producerstate.ErrDuplicateSequence))
	require.EqualError(t, err, "producer 1 epoch 0: out of order sequence 6, expected 4")
}

// A producer writing records with old timestamps is not expired while this
// replica keeps seeing it; Touch gives every producer a fresh period.
func TestExpireGoesByLocalSightings(t *testing.T) {
	s := producerstate.New()
	s.Apply(producerstate.Batch{ProducerID: 1, BaseSequence: 0, LastSequence: 0, FirstOffset: 0, LastOffset: 0, MaxTimestamp: 1_000})
	s.Apply(producerstate.Batch{ProducerID: 2, BaseSequence: 0, LastSequence: 0, FirstOffset: 1, LastOffset: 1, MaxTimestamp: 1_000})
	s.Seen(1, 100_000)
	require.Equal(t, 1, s.Expire(50_000), "only the producer not seen since the cutoff")
	_, ok := s.Producer(1)
	require.True(t, ok)
	s.Touch(200_000)
	require.Zero(t, s.Expire(150_000))
	require.Equal(t, 1, s.Clone().Expire(250_000), "clones keep the sightings")
}
