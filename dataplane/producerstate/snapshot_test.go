package producerstate_test

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
)

// randomState applies random batches of random producers, with epoch
// changes, wrapping sequences, non-idempotent batches, odd timestamps,
// transactional batches and commit and abort markers (some of which drop
// the aborted transactions below them).
func randomState(r *rand.Rand) *producerstate.State {
	s := producerstate.New()
	off := r.Int64N(1000)
	pids := []int64{0, math.MaxInt64, r.Int64N(1 << 40), r.Int64N(100), r.Int64N(100)}
	for range r.IntN(60) {
		pid := pids[r.IntN(len(pids))]
		epoch := int16(r.IntN(3))
		if r.IntN(20) == 0 {
			epoch = math.MaxInt16
		}
		switch r.IntN(10) {
		case 0:
			n := 1 + r.Int64N(5)
			s.Apply(producerstate.Batch{ProducerID: -1, FirstOffset: off, LastOffset: off + n - 1})
			off += n
			continue
		case 1, 2:
			m := marker(pid, epoch, record.ControlType(r.IntN(2)), off, r.Int64()-math.MaxInt64/2)
			m.Marker.CoordinatorEpoch = r.Int32N(5) - 1
			s.Apply(m)
			off += 1 + r.Int64N(3)
			if r.IntN(4) == 0 {
				s.DropAbortedBelow(off - r.Int64N(100))
			}
			continue
		}
		count := 1 + r.Int32N(20)
		base := r.Int32N(math.MaxInt32)
		if e, ok := s.Producer(pid); ok && len(e.Batches) > 0 && r.IntN(4) != 0 {
			base = e.Batches[len(e.Batches)-1].LastSequence + 1
			if base < 0 {
				base = 0
			}
		}
		b := batch(pid, epoch, base, count, off, r.Int64()-math.MaxInt64/2)
		b.Transactional = r.IntN(3) == 0
		s.Apply(b)
		off += int64(count) + r.Int64N(3)
	}
	return s
}

// A version 1 snapshot (testdata/v1.snapshot, written by the code before
// version 2 existed, of checkState) still loads, without transactions.
func TestProducerStateSnapshotVersion1(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/v1.snapshot")
	require.NoError(t, err)
	require.Equal(t, byte(1), data[0])
	var got producerstate.State
	require.NoError(t, got.UnmarshalBinary(data))
	require.Equal(t, checkState(), &got)
	_, ok := got.FirstUnstableOffset()
	require.False(t, ok)
	for _, pid := range got.ProducerIDs() {
		e, _ := got.Producer(pid)
		require.Equal(t, int64(-1), e.TxnFirstOffset)
		require.Equal(t, int32(-1), e.CoordinatorEpoch)
		require.Equal(t, e.Batches[len(e.Batches)-1].MaxTimestamp, e.LastTimestamp())
	}
	// Written again, it is version 2 and loads to the same state.
	v2, err := got.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, byte(2), v2[0])
	var again producerstate.State
	require.NoError(t, again.UnmarshalBinary(v2))
	require.Equal(t, &got, &again)

	// The version 1 checks still apply: an entry needs a batch.
	b := append([]byte(nil), data...)
	b[13+10] = 0
	require.ErrorIs(t, got.UnmarshalBinary(withCRC(b)), producerstate.ErrCorruptSnapshot)
	b = append([]byte(nil), data...)
	b = append(b[:len(b)-4], 0, 0, 0, 0, 0, 0, 0, 0) // trailing bytes
	require.ErrorIs(t, got.UnmarshalBinary(withCRC(b)), producerstate.ErrCorruptSnapshot)
}

func TestProducerStateSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		s := randomState(r)
		data, err := s.MarshalBinary()
		require.NoError(t, err)
		var got producerstate.State
		require.NoError(t, got.UnmarshalBinary(data), "state %d", i)
		require.Equal(t, s, &got, "state %d", i)
		again, err := got.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, data, again, "the encoding is canonical")
		require.Equal(t, s.Clone(), s)
	}
}

func TestProducerStateSnapshotCorrupt(t *testing.T) {
	t.Parallel()
	s := checkState()
	data, err := s.MarshalBinary()
	require.NoError(t, err)
	want := checkState()
	for i := range data {
		for _, mask := range []byte{0x01, 0x10, 0x80, 0xff} {
			bad := append([]byte(nil), data...)
			bad[i] ^= mask
			got := checkState()
			err := got.UnmarshalBinary(bad)
			require.ErrorIs(t, err, producerstate.ErrCorruptSnapshot, "byte %d ^ %#x", i, mask)
			require.Equal(t, want, got, "a failed decode changes nothing")
		}
	}
	for n := range len(data) {
		var got producerstate.State
		require.ErrorIs(t, got.UnmarshalBinary(data[:n]), producerstate.ErrCorruptSnapshot, "first %d bytes", n)
	}
	var got producerstate.State
	require.ErrorIs(t, got.UnmarshalBinary(append(data, 0)), producerstate.ErrCorruptSnapshot)
}

// withCRC returns b with its CRC trailer recomputed, to reach the field checks.
func withCRC(b []byte) []byte {
	b = append([]byte(nil), b...)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestProducerStateSnapshotFieldChecks(t *testing.T) {
	t.Parallel()
	// Producer 5 aborts a transaction at 100..101 with a marker at 104
	// that bumps its epoch, then writes one batch; producer 9 one batch.
	s := producerstate.New()
	s.Apply(txnBatch(5, 0, 0, 2, 100, 7))
	s.Apply(marker(5, 1, record.ControlAbort, 104, 7))
	s.Apply(batch(5, 1, 0, 1, 105, 7))
	s.Apply(batch(9, 2, 0, 10, 110, 7))
	good, err := s.MarshalBinary()
	require.NoError(t, err)
	// Layout: version 0, offset 1, count 9, producers at 13 (31-byte header:
	// pid 0, epoch 8, coordinator epoch 10, txn first offset 14, last
	// timestamp 22, batch count 30; 32-byte batches), aborted count, aborted
	// transactions (32 bytes), crc at end-4.
	const p1, p2 = 13, 13 + 31 + 32
	const ab = p2 + 31 + 32
	tests := []struct {
		name   string
		mutate func(b []byte)
	}{
		{"version", func(b []byte) { b[0] = 3 }},
		{"version 1", func(b []byte) { b[0] = 1 }},
		{"negative offset", func(b []byte) { binary.BigEndian.PutUint64(b[1:], math.MaxUint64) }},
		{"offset below a batch", func(b []byte) { binary.BigEndian.PutUint64(b[1:], 119) }},
		{"too many producers", func(b []byte) { binary.BigEndian.PutUint32(b[9:], math.MaxUint32) }},
		{"one producer too many", func(b []byte) { binary.BigEndian.PutUint32(b[9:], 3) }},
		{"one producer too few", func(b []byte) { binary.BigEndian.PutUint32(b[9:], 1) }},
		{"unsorted producers", func(b []byte) { binary.BigEndian.PutUint64(b[p2:], 5) }},
		{"negative producer id", func(b []byte) { binary.BigEndian.PutUint64(b[p1:], math.MaxUint64) }},
		{"coordinator epoch -2", func(b []byte) { binary.BigEndian.PutUint32(b[p1+10:], math.MaxUint32-1) }},
		{"txn first offset -2", func(b []byte) { binary.BigEndian.PutUint64(b[p1+14:], math.MaxUint64-1) }},
		{"txn first offset at the snapshot offset", func(b []byte) { binary.BigEndian.PutUint64(b[p1+14:], 120) }},
		{"no batches", func(b []byte) { b[p1+30] = 0 }},
		{"six batches", func(b []byte) { b[p1+30] = 6 }},
		{"two batches", func(b []byte) { b[p1+30] = 2 }},
		{"negative first offset", func(b []byte) { binary.BigEndian.PutUint64(b[p1+31+8:], math.MaxUint64) }},
		{"last offset before first", func(b []byte) { binary.BigEndian.PutUint64(b[p1+31+16:], 99) }},
		{"too many aborted", func(b []byte) { binary.BigEndian.PutUint32(b[ab:], 2) }},
		{"too few aborted", func(b []byte) { binary.BigEndian.PutUint32(b[ab:], 0) }},
		{"aborted negative producer", func(b []byte) { binary.BigEndian.PutUint64(b[ab+4:], math.MaxUint64) }},
		{"aborted negative first", func(b []byte) { binary.BigEndian.PutUint64(b[ab+4+8:], math.MaxUint64) }},
		{"aborted marker at first", func(b []byte) { binary.BigEndian.PutUint64(b[ab+4+16:], 100) }},
		{"aborted marker at the snapshot offset", func(b []byte) { binary.BigEndian.PutUint64(b[ab+4+16:], 120) }},
		{"aborted LSO past the marker", func(b []byte) { binary.BigEndian.PutUint64(b[ab+4+24:], 106) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := append([]byte(nil), good...)
			tt.mutate(b)
			var got producerstate.State
			require.ErrorIs(t, got.UnmarshalBinary(withCRC(b)), producerstate.ErrCorruptSnapshot)
		})
	}
	var got producerstate.State
	require.NoError(t, got.UnmarshalBinary(withCRC(good)), "the checks accept the original")
}

func snapshotPath(dir string, off int64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d.snapshot", off))
}

// stateAt returns a state whose Offset is off, different for every off.
func stateAt(off int64) *producerstate.State {
	s := producerstate.New()
	s.Apply(batch(off, 0, 0, 1, off-1, off))
	return s
}

func TestProducerStateSnapshotFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, off, err := producerstate.LoadLatest(dir, 100)
	require.NoError(t, err)
	require.Equal(t, producerstate.New(), s)
	require.Equal(t, int64(0), off)

	for _, o := range []int64{10, 20, 30} {
		require.NoError(t, producerstate.WriteSnapshot(dir, stateAt(o), o))
	}
	// A snapshot may claim more of the log than the state's own offset.
	require.NoError(t, producerstate.WriteSnapshot(dir, stateAt(35), 40))
	require.ErrorContains(t, producerstate.WriteSnapshot(dir, stateAt(50), 45), "reflects the log up to 50")
	// Files that are not snapshots are ignored.
	for _, name := range []string{"foo.snapshot", "10.snapshot", "00000000000000000050.snapshot.tmp", "00000000000000000060.log"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644))
	}
	offs, err := producerstate.Snapshots(dir)
	require.NoError(t, err)
	require.Equal(t, []int64{10, 20, 30, 40}, offs)

	load := func(maxOffset int64) (*producerstate.State, int64) {
		t.Helper()
		s, off, err := producerstate.LoadLatest(dir, maxOffset)
		require.NoError(t, err)
		return s, off
	}
	s, off = load(100)
	require.Equal(t, int64(40), off)
	require.Equal(t, int64(40), s.Offset())
	_, ok := s.Producer(35)
	require.True(t, ok)
	s, off = load(29)
	require.Equal(t, int64(20), off)
	require.Equal(t, stateAt(20), s)
	s, off = load(9)
	require.Equal(t, int64(0), off)
	require.Equal(t, producerstate.New(), s)

	// A corrupt newest snapshot is removed in favour of the older one.
	data, err := os.ReadFile(snapshotPath(dir, 40))
	require.NoError(t, err)
	data[len(data)/2] ^= 1
	require.NoError(t, os.WriteFile(snapshotPath(dir, 40), data, 0o644))
	// So is one whose content does not match its name.
	good, err := os.ReadFile(snapshotPath(dir, 20))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(snapshotPath(dir, 30), good, 0o644))
	s, off = load(100)
	require.Equal(t, int64(20), off)
	require.Equal(t, stateAt(20), s)
	offs, err = producerstate.Snapshots(dir)
	require.NoError(t, err)
	require.Equal(t, []int64{10, 20}, offs)

	// An empty file too.
	require.NoError(t, os.WriteFile(snapshotPath(dir, 20), nil, 0o644))
	s, off = load(100)
	require.Equal(t, int64(10), off)
	require.Equal(t, stateAt(10), s)

	s, off, err = producerstate.LoadLatest(filepath.Join(dir, "missing"), 100)
	require.NoError(t, err)
	require.Equal(t, producerstate.New(), s)
	require.Equal(t, int64(0), off)
}

func TestProducerStateSnapshotDelete(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, o := range []int64{0, 10, 20, 30, 40} {
		require.NoError(t, producerstate.WriteSnapshot(dir, producerstate.New(), o))
	}
	steps := []struct {
		name string
		do   func() error
		want []int64
	}{
		{"above 25", func() error { return producerstate.DeleteAbove(dir, 25) }, []int64{0, 10, 20}},
		{"above 20 keeps 20", func() error { return producerstate.DeleteAbove(dir, 20) }, []int64{0, 10, 20}},
		{"above max", func() error { return producerstate.DeleteAbove(dir, math.MaxInt64) }, []int64{0, 10, 20}},
		{"below 15 keeps 10", func() error { return producerstate.DeleteBelow(dir, 15) }, []int64{10, 20}},
		{"below 10 keeps 10", func() error { return producerstate.DeleteBelow(dir, 10) }, []int64{10, 20}},
		{"below 0", func() error { return producerstate.DeleteBelow(dir, 0) }, []int64{10, 20}},
		{"below 100 keeps the newest", func() error { return producerstate.DeleteBelow(dir, 100) }, []int64{20}},
		{"above -1 removes all", func() error { return producerstate.DeleteAbove(dir, -1) }, nil},
		{"on nothing", func() error { return producerstate.DeleteBelow(dir, 100) }, nil},
	}
	for _, st := range steps {
		require.NoError(t, st.do(), st.name)
		offs, err := producerstate.Snapshots(dir)
		require.NoError(t, err)
		require.Equal(t, st.want, offs, st.name)
	}
}
