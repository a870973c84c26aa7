package log

import (
	"encoding/binary"
	"github.com/sluicemq/sluice/record"

	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testenv"
)

// mkBatch encodes n records of valueSize bytes with first timestamp ts; the
// values carry tag so batches are distinguishable.
func mkBatch(t testing.TB, n, valueSize int, ts int64, tag string) []byte {
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, valueSize)
		copy(v, fmt.Sprintf("%s/%d", tag, i))
		recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Value: v}
	}
	b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
	require.NoError(t, err)
	return b
}

func openLog(t testing.TB, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// readAll reads every batch from the log start to the LEO.
func readAll(t testing.TB, l *Log) []record.Batch {
	t.Helper()
	var out []record.Batch
	for off := l.LogStartOffset(); off < l.LEO(); {
		data, err := l.Read(off, 1<<20)
		require.NoError(t, err)
		require.NotEmpty(t, data, "read at %d of LEO %d", off, l.LEO())
		for rest := data; len(rest) > 0; {
			b, r, err := record.ReadBatch(rest)
			require.NoError(t, err)
			require.Equal(t, off, b.BaseOffset())
			out = append(out, b)
			off = b.LastOffset() + 1
			rest = r
		}
	}
	return out
}

func TestLogAppendRead(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{IndexIntervalBytes: 256})
	var batches [][]byte
	for i := range 20 {
		b := mkBatch(t, 1+i%4, 100, int64(1000+i), fmt.Sprint(i))
		wantBase := l.LEO()
		base, leo, err := l.Append(b, 1)
		require.NoError(t, err)
		require.Equal(t, wantBase, base)
		require.Equal(t, base+int64(1+i%4), leo)
		require.Equal(t, leo, l.LEO())
		require.Equal(t, base, l.FlushedOffset(), "Append does not fsync")
		require.NoError(t, l.MakeDurable(context.Background(), leo))
		require.Equal(t, leo, l.FlushedOffset())
		require.Equal(t, leo, l.DurableOffset())
		batches = append(batches, b) // Append stamped it in place
	}
	got := readAll(t, l)
	require.Len(t, got, len(batches))
	for i := range got {
		require.Equal(t, batches[i], []byte(got[i]))
		require.Equal(t, int32(1), got[i].LeaderEpoch())
	}
	// An offset inside a batch returns that whole batch.
	data, err := l.Read(record.Batch(batches[3]).BaseOffset()+1, 1)
	require.NoError(t, err)
	require.Equal(t, batches[3], data, "at least one whole batch even above maxBytes")
	// At the LEO: nothing, no error.
	data, err = l.Read(l.LEO(), 100)
	require.NoError(t, err)
	require.Empty(t, data)
	// Beyond: the valid range.
	_, err = l.Read(l.LEO()+1, 100)
	var oor *OffsetOutOfRangeError
	require.ErrorAs(t, err, &oor)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	require.Equal(t, OffsetOutOfRangeError{Offset: l.LEO() + 1, LogStart: 0, LEO: l.LEO()}, *oor)
	// maxBytes bounds the result to whole batches.
	data, err = l.Read(0, len(batches[0])+len(batches[1])+10)
	require.NoError(t, err)
	require.Equal(t, len(batches[0])+len(batches[1]), len(data))
}

func TestLogAppendRejects(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{MaxBatchBytes: 2000})
	_, _, err := l.Append(mkBatch(t, 1, 10, 0, "a"), 5)
	require.NoError(t, err)
	_, _, err = l.Append(mkBatch(t, 1, 10, 0, "a"), 4)
	require.ErrorIs(t, err, ErrStaleEpoch)
	_, _, err = l.Append(mkBatch(t, 1, 3000, 0, "a"), 5)
	require.ErrorIs(t, err, ErrInvalidBatch)
	bad := mkBatch(t, 2, 10, 0, "a")
	bad[30] ^= 1
	_, _, err = l.Append(bad, 5)
	require.ErrorIs(t, err, ErrInvalidBatch)
	require.ErrorIs(t, err, record.ErrCorrupt)
	two := append(mkBatch(t, 1, 10, 0, "a"), mkBatch(t, 1, 10, 0, "b")...)
	_, _, err = l.Append(two, 5)
	require.ErrorIs(t, err, ErrInvalidBatch)
	// Offset deltas must be 0..n-1 for a leader append.
	gap, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{OffsetDelta: 0}, {OffsetDelta: 2}})
	require.NoError(t, err)
	_, _, err = l.Append(gap, 5)
	require.ErrorIs(t, err, ErrInvalidBatch)
	require.Equal(t, int64(1), l.LEO())
}

func TestLogAppendFollower(t *testing.T) {
	t.Parallel()
	cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 200}
	leader := openLog(t, t.TempDir(), cfg)
	fdir := t.TempDir()
	follower := openLog(t, fdir, cfg)
	for i := range 30 {
		_, _, err := leader.Append(mkBatch(t, 1+i%3, 90, int64(i), fmt.Sprint(i)), int32(1+i/10))
		require.NoError(t, err)
	}
	// Replicate in fetches of ~700 bytes.
	for follower.LEO() < leader.LEO() {
		data, err := leader.Read(follower.LEO(), 700)
		require.NoError(t, err)
		leo, err := follower.AppendFollower(data)
		require.NoError(t, err)
		require.Equal(t, follower.LEO(), leo)
	}
	require.Equal(t, leader.Epochs(), follower.Epochs())
	require.Equal(t, []EpochEntry{{1, 0}, {2, 19}, {3, 39}}, follower.Epochs()) // batch i holds 1+i%3 records
	lb, fb := readAll(t, leader), readAll(t, follower)
	require.Equal(t, lb, fb)
	// Segment files are byte-identical.
	require.NoError(t, leader.Close())
	require.NoError(t, follower.Close())
	entries, err := os.ReadDir(leader.dir)
	require.NoError(t, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) != ".log" {
			continue
		}
		a, err := os.ReadFile(filepath.Join(leader.dir, e.Name()))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(fdir, e.Name()))
		require.NoError(t, err)
		require.Equal(t, a, b, e.Name())
	}

	f2 := openLog(t, t.TempDir(), cfg)
	b0 := mkBatch(t, 2, 10, 0, "x")
	_, _, err = leader.Append(b0, 9) // closed log
	require.ErrorIs(t, err, ErrClosed)
	_, err = f2.AppendFollower(b0) // base 0 epoch 0: fine
	require.NoError(t, err)
	_, err = f2.AppendFollower(b0) // base 0 again
	require.ErrorIs(t, err, ErrNonContiguous)
	b1 := mkBatch(t, 1, 10, 0, "y")
	setBase(b1, 2)
	_, err = f2.AppendFollower(b1)
	require.NoError(t, err)
	bad := append([]byte(nil), b1...)
	setBase(bad, 3)
	bad[40] ^= 4
	_, err = f2.AppendFollower(bad)
	require.ErrorIs(t, err, record.ErrCorrupt)
	require.Equal(t, int64(3), f2.LEO())
}

// setBase sets the base offset (outside the CRC) for tests.
func setBase(b []byte, off int64) {
	binary.BigEndian.PutUint64(b, uint64(off))
}

func TestLogRollAndReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 1000, IndexIntervalBytes: 150}
	l := openLog(t, dir, cfg)
	for i := range 40 {
		_, _, err := l.Append(mkBatch(t, 2, 50, int64(100+i), fmt.Sprint(i)), 0)
		require.NoError(t, err)
	}
	segs := l.ClosedSegments()
	require.Greater(t, len(segs), 3)
	for i, s := range segs {
		require.LessOrEqual(t, s.Size, int64(1000))
		require.Equal(t, filepath.Join(dir, fmt.Sprintf("%020d.log", s.BaseOffset)), s.LogPath)
		if i > 0 {
			require.Equal(t, segs[i-1].NextOffset, s.BaseOffset)
		}
		require.FileExists(t, s.IndexPath)
		require.FileExists(t, s.TimeIndexPath)
	}
	before := readAll(t, l)
	leo := l.LEO()
	require.NoError(t, l.Close())
	require.FileExists(t, filepath.Join(dir, cleanShutdownName))

	l2 := openLog(t, dir, cfg)
	require.NoFileExists(t, filepath.Join(dir, cleanShutdownName))
	require.Equal(t, leo, l2.LEO())
	require.Equal(t, before, readAll(t, l2))
	require.Equal(t, segs, l2.ClosedSegments())
	// Reading from every offset finds its batch through the index.
	for off := int64(0); off < leo; off++ {
		data, err := l2.Read(off, 1)
		require.NoError(t, err)
		b, _, err := record.ReadBatch(data)
		require.NoError(t, err)
		require.True(t, b.BaseOffset() <= off && off <= b.LastOffset())
	}
	_, _, err := l2.Append(mkBatch(t, 1, 50, 1, "after"), 0)
	require.NoError(t, err)
	require.Equal(t, leo+1, l2.LEO())
}

func TestLogRollByAge(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(10_000)
	cfg := Config{SegmentAge: time.Second, Now: func() time.Time { return time.UnixMilli(now.Load()) }}
	l := openLog(t, t.TempDir(), cfg)
	_, _, err := l.Append(mkBatch(t, 1, 10, 10_000, "a"), 0)
	require.NoError(t, err)
	now.Store(10_999)
	_, _, err = l.Append(mkBatch(t, 1, 10, 10_999, "b"), 0)
	require.NoError(t, err)
	require.Empty(t, l.ClosedSegments())
	now.Store(11_000)
	_, _, err = l.Append(mkBatch(t, 1, 10, 11_000, "c"), 0)
	require.NoError(t, err)
	require.Len(t, l.ClosedSegments(), 1)
	require.Equal(t, int64(2), l.ClosedSegments()[0].NextOffset)
}

func TestLogRetention(t *testing.T) {
	t.Parallel()
	t.Run("size", func(t *testing.T) {
		t.Parallel()
		l := openLog(t, t.TempDir(), Config{SegmentBytes: 600, RetentionBytes: 1500})
		for i := range 30 {
			_, _, err := l.Append(mkBatch(t, 1, 100, int64(i), fmt.Sprint(i)), int32(i/10))
			require.NoError(t, err)
		}
		n, err := l.ApplyRetention()
		require.NoError(t, err)
		require.Positive(t, n)
		segs := l.ClosedSegments()
		var total int64
		for _, s := range segs {
			total += s.Size
		}
		require.Equal(t, segs[0].BaseOffset, l.LogStartOffset())
		require.GreaterOrEqual(t, total+600, int64(1500))
		_, err = l.Read(l.LogStartOffset()-1, 100)
		require.ErrorIs(t, err, ErrOffsetOutOfRange)
		require.Len(t, readAll(t, l), int(l.LEO()-l.LogStartOffset()))
		require.Equal(t, l.LogStartOffset(), l.Epochs()[0].StartOffset)
		for _, e := range l.Epochs() {
			require.GreaterOrEqual(t, e.StartOffset, l.LogStartOffset())
		}
	})
	t.Run("time and gate", func(t *testing.T) {
		t.Parallel()
		var allow atomic.Int64
		allow.Store(-1)
		cfg := Config{SegmentBytes: 400, RetentionTime: time.Hour,
			Now:       func() time.Time { return time.UnixMilli(10 * 3_600_000) },
			CanDelete: func(s SegmentInfo) bool { return s.BaseOffset <= allow.Load() }}
		l := openLog(t, t.TempDir(), cfg)
		for i := range 20 {
			ts := int64(0) // ancient
			if i >= 15 {
				ts = 10*3_600_000 - 1000 // recent
			}
			_, _, err := l.Append(mkBatch(t, 1, 100, ts, fmt.Sprint(i)), 0)
			require.NoError(t, err)
		}
		n, err := l.ApplyRetention()
		require.NoError(t, err)
		require.Zero(t, n, "the gate refuses everything")
		allow.Store(4)
		n, err = l.ApplyRetention()
		require.NoError(t, err)
		require.Positive(t, n)
		require.Greater(t, l.LogStartOffset(), int64(4))
		for _, s := range l.ClosedSegments()[:1] {
			require.Greater(t, s.BaseOffset, int64(4))
		}
		allow.Store(1 << 40)
		_, err = l.ApplyRetention()
		require.NoError(t, err)
		for _, s := range l.ClosedSegments() {
			require.Greater(t, s.MaxTimestamp, int64(9*3_600_000), "only recent segments remain")
		}
		require.LessOrEqual(t, l.LogStartOffset(), int64(15))
	})
}

func TestLogSetRetention(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(100_000)
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 1 << 20, Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	for i := range 5 {
		_, _, err := l.Append(mkBatch(t, 1, 10, now.Load(), fmt.Sprint(i)), 0)
		require.NoError(t, err)
	}
	require.Empty(t, l.ClosedSegments(), "no roll by age yet")
	l.SetRetention(10*time.Second, -1, 10*time.Second)
	now.Add(11_000)
	_, _, err := l.Append(mkBatch(t, 1, 10, now.Load(), "new"), 0)
	require.NoError(t, err)
	require.Len(t, l.ClosedSegments(), 1, "rolled by the new segment age")
	n, err := l.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the old segment passed the new retention")
	require.Equal(t, int64(5), l.LogStartOffset())

	l.SetRetention(0, 0, 0)
	now.Add(time.Hour.Milliseconds())
	_, _, err = l.Append(mkBatch(t, 1, 10, now.Load(), "later"), 0)
	require.NoError(t, err)
	require.Empty(t, l.ClosedSegments(), "no roll by age after it was switched off")
}

func TestLogTruncateTo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 700, IndexIntervalBytes: 100}
	l := openLog(t, dir, cfg)
	for i := range 30 {
		_, _, err := l.Append(mkBatch(t, 3, 40, int64(i), fmt.Sprint(i)), int32(i/5))
		require.NoError(t, err)
	}
	require.NoError(t, l.TruncateTo(1000)) // beyond LEO: no-op
	require.Equal(t, int64(90), l.LEO())
	require.NoError(t, l.TruncateTo(50)) // inside the batch at 48
	require.Equal(t, int64(48), l.LEO())
	require.Equal(t, int32(3), l.Epochs()[len(l.Epochs())-1].Epoch) // batch 15 had epoch 3 at offset 45
	_, e := l.EndOffsetFor(3)
	require.Equal(t, int64(48), e)
	require.Len(t, readAll(t, l), 16)
	require.NoError(t, l.TruncateTo(30)) // a batch boundary, epoch 2 starts at 30
	require.Equal(t, int64(30), l.LEO())
	require.Equal(t, []EpochEntry{{0, 0}, {1, 15}}, l.Epochs())
	_, _, err := l.Append(mkBatch(t, 1, 40, 0, "new"), 7)
	require.NoError(t, err)
	require.ErrorIs(t, l.TruncateTo(-1), ErrOffsetOutOfRange)
	got := readAll(t, l)
	require.Len(t, got, 11)
	require.Equal(t, int32(7), got[10].LeaderEpoch())
	// Survives a crash (no Close: simulate by reopening a copy of the files).
	crashDir := copyDir(t, dir)
	l2 := openLog(t, crashDir, cfg)
	require.Equal(t, int64(31), l2.LEO())
	require.Equal(t, got, readAll(t, l2))
	require.Equal(t, l.Epochs(), l2.Epochs())
}

// copyDir copies a log directory as it is on disk now, as a crash would
// leave it (without a clean-shutdown marker).
func copyDir(t testing.TB, dir string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() == cleanShutdownName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
	return dst
}

func TestLogReset(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 300})
	for i := range 10 {
		_, _, err := l.Append(mkBatch(t, 1, 100, 0, fmt.Sprint(i)), 1)
		require.NoError(t, err)
	}
	require.NoError(t, l.Reset(500))
	require.Equal(t, int64(500), l.LogStartOffset())
	require.Equal(t, int64(500), l.LEO())
	require.Empty(t, l.Epochs())
	b := mkBatch(t, 1, 10, 0, "x")
	setBase(b, 500)
	_, err := l.AppendFollower(b)
	require.NoError(t, err)
	require.Len(t, readAll(t, l), 1)
}

func TestLogEndOffsetFor(t *testing.T) {
	t.Parallel()
	entries := []EpochEntry{{1, 0}, {3, 10}, {6, 25}}
	for _, tc := range []struct {
		epoch     int32
		wantEpoch int32
		wantOff   int64
	}{
		{6, 6, 40},                           // latest: the LEO
		{5, 3, 25},                           // KIP-279: largest epoch below, next start
		{3, 3, 25},                           // known epoch: start of the next
		{2, 1, 10},                           // unknown, between
		{1, 1, 10},                           // first
		{0, 0, 0},                            // below every epoch: requested epoch, first start
		{7, UndefinedEpoch, UndefinedOffset}, // above every epoch
		{UndefinedEpoch, UndefinedEpoch, UndefinedOffset},
	} {
		e, o := endOffsetFor(entries, tc.epoch, 40)
		require.Equal(t, tc.wantEpoch, e, "epoch %d", tc.epoch)
		require.Equal(t, tc.wantOff, o, "epoch %d", tc.epoch)
	}
	e, o := endOffsetFor(nil, 3, 40)
	require.Equal(t, UndefinedEpoch, e)
	require.Equal(t, UndefinedOffset, o)
}

func TestLogEpochCache(t *testing.T) {
	t.Parallel()
	var c epochCache
	require.True(t, c.assign(1, 0))
	require.False(t, c.assign(1, 5))
	require.True(t, c.assign(3, 10))
	require.True(t, c.assign(4, 10)) // epoch 3 wrote nothing: replaced
	require.Equal(t, []EpochEntry{{1, 0}, {4, 10}}, c.entries)
	require.True(t, c.assign(5, 20))
	require.True(t, c.truncateFromStart(15))
	require.Equal(t, []EpochEntry{{4, 15}, {5, 20}}, c.entries)
	require.True(t, c.truncateFromEnd(20))
	require.Equal(t, []EpochEntry{{4, 15}}, c.entries)
	b := encodeEpochs([]EpochEntry{{4, 15}, {9, 100}})
	got, err := decodeEpochs(b)
	require.NoError(t, err)
	require.Equal(t, []EpochEntry{{4, 15}, {9, 100}}, got)
	for _, bad := range []string{"", "1\n0\n", "0\n2\n1 1\n", "0\n2\n2 5\n1 9\n", "0\n1\n1 -1\n", "0\n1\nx y\n", "0\n0\nextra\n"} {
		_, err := decodeEpochs([]byte(bad))
		require.ErrorIs(t, err, record.ErrCorrupt, "%q", bad)
	}
}

func TestLogOffsetForTimestamp(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 800, IndexIntervalBytes: 100})
	for i := range 40 {
		_, _, err := l.Append(mkBatch(t, 2, 50, int64(1000+10*i), fmt.Sprint(i)), 0)
		require.NoError(t, err) // batch i: offsets 2i, 2i+1, max ts 1000+10i+1
	}
	for _, tc := range []struct {
		ts   int64
		want int64
		ok   bool
	}{{0, 0, true}, {1001, 0, true}, {1002, 2, true}, {1201, 40, true}, {1391, 78, true}, {1392, 0, false}} {
		off, ok, err := l.OffsetForTimestamp(tc.ts)
		require.NoError(t, err)
		require.Equal(t, tc.ok, ok, "ts %d", tc.ts)
		require.Equal(t, tc.want, off, "ts %d", tc.ts)
	}
}

// MaxTimestamp is the largest timestamp of any segment, not the last
// batch's: clients may send timestamps out of order.
func TestLogMaxTimestamp(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 800, IndexIntervalBytes: 100})
	_, ok, err := l.MaxTimestamp()
	require.NoError(t, err)
	require.False(t, ok, "an empty log")
	for i := range 40 {
		ts := int64(1000 + 10*i)
		if i == 17 {
			ts = 9000 // in a closed segment, followed by older timestamps
		}
		_, _, err := l.Append(mkBatch(t, 2, 50, ts, fmt.Sprint(i)), 0)
		require.NoError(t, err)
	}
	require.Greater(t, len(l.ClosedSegments()), 2)
	ts, ok, err := l.MaxTimestamp()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(9001), ts)
	off, ok, err := l.OffsetForTimestamp(ts)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(34), off, "the batch of the largest timestamp")
}

func TestLogFlushInterval(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{Flush: FlushInterval, FlushInterval: 5 * time.Millisecond})
	_, leo, err := l.Append(mkBatch(t, 3, 10, 0, "a"), 0)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, l.WaitFlushed(ctx, leo))
	require.GreaterOrEqual(t, l.FlushedOffset(), leo)

	o := openLog(t, t.TempDir(), Config{Flush: FlushOS})
	_, leo, err = o.Append(mkBatch(t, 3, 10, 0, "a"), 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), o.FlushedOffset())
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, o.WaitFlushed(short, leo), context.DeadlineExceeded)
	require.NoError(t, o.Sync())
	require.Equal(t, leo, o.FlushedOffset())
}

// MakeDurable with FlushAlways is a group commit: callers that queue while
// an fsync runs share the next one.
func TestLogMakeDurableGroupCommit(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{})
	const n = 8
	l.syncMu.Lock() // an fsync is running: every caller below queues behind it
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, leo, err := l.Append(mkBatch(t, 1, 10, 0, fmt.Sprint(i)), 0)
			if err == nil {
				err = l.MakeDurable(context.Background(), leo)
			}
			errs <- err
		}()
	}
	testenv.Wait(t, 10*time.Second, "all appended", func() error {
		if l.LEO() != n {
			return fmt.Errorf("LEO %d", l.LEO())
		}
		return nil
	})
	before := l.syncs.Load()
	l.syncMu.Unlock()
	for range n {
		require.NoError(t, <-errs)
	}
	require.Equal(t, int64(1), l.syncs.Load()-before, "one fsync covers every queued caller")
	require.Equal(t, int64(n), l.DurableOffset())
}

// An fsync in progress holds up only the callers waiting for durability:
// appends and reads go on.
func TestLogAppendAndReadDoNotWaitForSync(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{})
	_, leo, err := l.Append(mkBatch(t, 1, 10, 0, "a"), 0)
	require.NoError(t, err)
	inSync, release := make(chan struct{}), make(chan struct{})
	l.beforeSync = func() {
		close(inSync)
		<-release
	}
	synced := make(chan error, 1)
	go func() { synced <- l.MakeDurable(context.Background(), leo) }()
	<-inSync
	done := make(chan error, 1)
	go func() {
		_, _, err := l.Append(mkBatch(t, 1, 10, 0, "b"), 0)
		if err == nil {
			_, err = l.Read(0, 1<<20)
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("an append or read waited for the fsync")
	}
	require.Equal(t, int64(0), l.DurableOffset(), "the fsync has not finished")
	close(release)
	require.NoError(t, <-synced)
	require.Equal(t, leo, l.DurableOffset())
}

// A failed fsync fails the log: MakeDurable returns the error, nothing
// counts as durable, and later appends are refused.
func TestLogMakeDurableFailedSyncFailsTheLog(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{})
	_, leo, err := l.Append(mkBatch(t, 1, 10, 0, "a"), 0)
	require.NoError(t, err)
	// The fsync fails: its file was closed under it.
	l.beforeSync = func() { closeUnder(l.segs[len(l.segs)-1].file) }
	require.Error(t, l.MakeDurable(context.Background(), leo))
	require.Error(t, l.Failed())
	require.Equal(t, int64(0), l.DurableOffset())
	_, _, err = l.Append(mkBatch(t, 1, 10, 0, "b"), 0)
	require.Error(t, err, "a failed log takes no more appends")
}

// closeUnder closes a segment's open file behind the cache's back, so that
// its next fsync fails.
func closeUnder(h *segFile) {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	_ = h.f.Close()
}

func TestLogMakeDurablePolicies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o := openLog(t, t.TempDir(), Config{Flush: FlushOS})
	_, leo, err := o.Append(mkBatch(t, 3, 10, 0, "a"), 0)
	require.NoError(t, err)
	require.Equal(t, leo, o.DurableOffset(), "os trusts the page cache")
	require.NoError(t, o.MakeDurable(ctx, leo))
	require.Equal(t, int64(0), o.syncs.Load(), "os never fsyncs for MakeDurable")

	i := openLog(t, t.TempDir(), Config{Flush: FlushInterval, FlushInterval: 5 * time.Millisecond})
	_, leo, err = i.Append(mkBatch(t, 3, 10, 0, "a"), 0)
	require.NoError(t, err)
	require.NoError(t, i.MakeDurable(ctx, leo), "waits for the interval flush")
	require.GreaterOrEqual(t, i.DurableOffset(), leo)
}

func TestLogConcurrentReaders(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 4000, IndexIntervalBytes: 300, Flush: FlushOS})
	const n = 300
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(0)
			for ctx.Err() == nil || off < l.LEO() {
				data, err := l.Read(off, 2000)
				if err != nil {
					errs <- err
					return
				}
				for rest := data; len(rest) > 0; {
					b, r, err := record.ReadBatch(rest)
					if err != nil || b.BaseOffset() != off {
						errs <- fmt.Errorf("at %d: %v", off, err)
						return
					}
					off = b.LastOffset() + 1
					rest = r
				}
				if off >= n*2 {
					return
				}
			}
		}()
	}
	for i := range n {
		_, _, err := l.Append(mkBatch(t, 2, 60, int64(i), fmt.Sprint(i)), 0)
		require.NoError(t, err)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestLogOpenSegment(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Config{SegmentBytes: 500})
	for i := range 10 {
		_, _, err := l.Append(mkBatch(t, 1, 100, 0, fmt.Sprint(i)), 0)
		require.NoError(t, err)
	}
	segs := l.ClosedSegments()
	require.NotEmpty(t, segs)
	f, err := l.OpenSegment(segs[0].BaseOffset)
	require.NoError(t, err)
	defer f.Close()
	data := make([]byte, segs[0].Size)
	_, err = f.Log.ReadAt(data, 0)
	require.NoError(t, err)
	want, err := l.Read(segs[0].BaseOffset, int(segs[0].Size))
	require.NoError(t, err)
	require.Equal(t, want, data)
	_, err = l.OpenSegment(l.LEO()) // the active segment is not closed
	require.ErrorIs(t, err, ErrSegmentNotFound)
}

func TestLogConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Validate())
	for _, c := range []Config{{SegmentBytes: -1}, {SegmentBytes: 10}, {SegmentBytes: 1 << 32}, {MaxBatchBytes: 5},
		{RetentionBytes: -1}, {Flush: 7}, {SegmentAge: -1}} {
		require.Error(t, c.Validate(), "%+v", c)
		_, err := Open(t.TempDir(), c)
		require.Error(t, err)
	}
	require.True(t, errors.Is(&CorruptionError{Err: errors.New("x")}, record.ErrCorrupt))
}

// TestLogWriteFailureIsSticky: after an I/O error the log refuses every
// later write and reports the cause, until reopened (brokers fail-stop on it).
func TestLogWriteFailureIsSticky(t *testing.T) {
	t.Parallel()
	l, err := Open(t.TempDir(), Config{})
	require.NoError(t, err)
	defer l.Close()
	require.NoError(t, l.Failed())
	b, err := record.AppendBatch(nil, record.BatchHeader{}, []record.Record{{Value: []byte("x")}})
	require.NoError(t, err)
	_, _, err = l.Append(append([]byte{}, b...), 0)
	require.NoError(t, err)

	closeUnder(l.segs[len(l.segs)-1].file) // the disk goes away
	_, _, err = l.Append(append([]byte{}, b...), 0)
	require.Error(t, err)
	require.Error(t, l.Failed())
	_, _, err = l.Append(append([]byte{}, b...), 0)
	require.ErrorContains(t, err, "log failed earlier")
}
