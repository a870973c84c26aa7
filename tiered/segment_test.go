package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
)

// testLog writes batches of random sizes (some larger than a cache chunk)
// under rising leader epochs into a log with small segments, and returns
// it with its closed segments.
func testLog(t *testing.T) (*log.Log, []log.SegmentInfo) {
	t.Helper()
	l, err := log.Open(t.TempDir(), log.Config{SegmentBytes: 3 << 20, Flush: log.FlushOS})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	rng := rand.New(rand.NewPCG(1, 2))
	ts := int64(1_700_000_000_000)
	for i := range 400 {
		n := 1 + rng.IntN(20)
		size := 100 + rng.IntN(30_000)
		if i%97 == 0 {
			size = chunkSize + 1000 // spans cache chunks
		}
		var recs []record.Record
		for j := range n {
			recs = append(recs, record.Record{OffsetDelta: int32(j), TimestampDelta: int64(j), Value: bytes.Repeat([]byte{byte(i)}, size/n)})
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: ts + int64(i)*1000, ProducerID: -1, BaseSequence: -1}, recs)
		require.NoError(t, err)
		_, _, err = l.Append(b, int32(1+i/150))
		require.NoError(t, err)
	}
	require.NoError(t, l.Roll())
	segs := l.ClosedSegments()
	require.Greater(t, len(segs), 3)
	return l, segs
}

// upload copies the local segment from offset from as Tier.Copy would,
// without the metadata, and describes it.
func upload(t *testing.T, l *log.Log, st *folder.Store, si log.SegmentInfo, from int64) *sluicev1.RemoteSegment {
	t.Helper()
	f, err := l.OpenSegment(si.BaseOffset)
	require.NoError(t, err)
	defer f.Close()
	sc, err := scanSegment(f.Log, si.Size, from)
	require.NoError(t, err)
	key := fmt.Sprintf("tenants/t/topics/x/0/%020d-1-seg%d", sc.base, sc.base)
	ctx := context.Background()
	data := make([]byte, sc.size)
	_, err = f.Log.ReadAt(data, sc.start)
	require.NoError(t, err)
	require.NoError(t, st.Put(ctx, key+".log", bytes.NewReader(data), sc.size))
	idx := encodeIndex(sc.index, sc.size)
	require.NoError(t, st.Put(ctx, key+".index", bytes.NewReader(idx), int64(len(idx))))
	return &sluicev1.RemoteSegment{SegmentId: fmt.Sprintf("seg%d", sc.base), ObjectKey: key, BaseOffset: sc.base, EndOffset: sc.end, SizeBytes: sc.size, MaxTimestampMs: sc.maxTs}
}

func TestScanSegment(t *testing.T) {
	l, segs := testLog(t)
	for _, si := range segs {
		f, err := l.OpenSegment(si.BaseOffset)
		require.NoError(t, err)
		sc, err := scanSegment(f.Log, si.Size, si.BaseOffset)
		require.NoError(t, err)
		require.Equal(t, si.BaseOffset, sc.base)
		require.Equal(t, si.NextOffset-1, sc.end)
		require.Equal(t, si.MaxTimestamp, sc.maxTs)
		require.Equal(t, int64(0), sc.start)
		require.Equal(t, si.Size, sc.size)
		require.Equal(t, indexEntry{offset: si.BaseOffset, pos: 0, tsBefore: -1}, sc.index[0])
		for i := 1; i < len(sc.epochs); i++ {
			require.Greater(t, sc.epochs[i].epoch, sc.epochs[i-1].epoch)
		}
		// From the second batch: the copy starts at that batch.
		data, err := l.Read(si.BaseOffset, 1)
		require.NoError(t, err)
		first, _, err := record.ReadBatch(data)
		require.NoError(t, err)
		second := first.LastOffset() + 1
		sc2, err := scanSegment(f.Log, si.Size, second)
		require.NoError(t, err)
		require.Equal(t, second, sc2.base)
		require.Equal(t, int64(len(first)), sc2.start)
		require.Equal(t, si.Size-int64(len(first)), sc2.size)
		// Inside a batch: refused (copies start at batch boundaries).
		if first.LastOffset() > first.BaseOffset() {
			_, err = scanSegment(f.Log, si.Size, first.BaseOffset()+1)
			require.ErrorContains(t, err, "inside the batch")
		}
		f.Close()
	}
	// The epochs of the whole log: 1, 2, 3 in order, starting where the
	// log says.
	var all []epochStart
	for _, si := range segs {
		f, err := l.OpenSegment(si.BaseOffset)
		require.NoError(t, err)
		sc, err := scanSegment(f.Log, si.Size, si.BaseOffset)
		f.Close()
		require.NoError(t, err)
		for _, e := range sc.epochs {
			if len(all) == 0 || all[len(all)-1].epoch != e.epoch {
				all = append(all, e)
			}
		}
	}
	var want []epochStart
	for _, e := range l.Epochs() {
		want = append(want, epochStart{epoch: e.Epoch, start: e.StartOffset})
	}
	require.Equal(t, want, all)
}

func TestIndexCodec(t *testing.T) {
	entries := []indexEntry{{offset: 100, pos: 0, tsBefore: -1}, {offset: 150, pos: 70_000, tsBefore: 1000}, {offset: 190, pos: 140_000, tsBefore: 1000}}
	b := encodeIndex(entries, 200_000)
	got, err := decodeIndex(b, 200_000, 100)
	require.NoError(t, err)
	require.Equal(t, entries, got)
	require.Equal(t, int64(0), lookup(got, 120))
	require.Equal(t, int64(70_000), lookup(got, 150))
	require.Equal(t, int64(140_000), lookup(got, 1_000))
	require.Equal(t, int64(100), lookupTime(got, 999))
	require.Equal(t, int64(100), lookupTime(got, 1000))
	require.Equal(t, int64(190), lookupTime(got, 1001))

	for name, bad := range map[string]func() ([]byte, int64, int64){
		"flipped bit":    func() ([]byte, int64, int64) { c := bytes.Clone(b); c[9] ^= 1; return c, 200_000, 100 },
		"other log size": func() ([]byte, int64, int64) { return b, 199_999, 100 },
		"other base":     func() ([]byte, int64, int64) { return b, 200_000, 101 },
		"truncated":      func() ([]byte, int64, int64) { return b[:len(b)-1], 200_000, 100 },
		"empty":          func() ([]byte, int64, int64) { return nil, 200_000, 100 },
		"no entries":     func() ([]byte, int64, int64) { return encodeIndex(nil, 200_000), 200_000, 100 },
		"out of order": func() ([]byte, int64, int64) {
			return encodeIndex([]indexEntry{{100, 0, -1}, {150, 70_000, 5}, {140, 80_000, 5}}, 200_000), 200_000, 100
		},
		"timestamps going back": func() ([]byte, int64, int64) {
			return encodeIndex([]indexEntry{{100, 0, -1}, {150, 70_000, 5}, {160, 80_000, 4}}, 200_000), 200_000, 100
		},
	} {
		data, size, base := bad()
		_, err := decodeIndex(data, size, base)
		require.ErrorIs(t, err, ErrCorrupt, name)
	}
}

func TestCacheReadServesTheLogsBatches(t *testing.T) {
	l, segs := testLog(t)
	st, err := folder.New(t.TempDir())
	require.NoError(t, err)
	c, err := newChunkCache(t.TempDir(), 4*chunkSize, st, 2, 0, NewMetrics(nil))
	require.NoError(t, err)
	defer c.close()
	ctx := context.Background()
	var remote []*sluicev1.RemoteSegment
	for _, si := range segs {
		remote = append(remote, upload(t, l, st, si, si.BaseOffset))
	}
	// Every offset of the log, with several read sizes: the remote read
	// answers exactly what the local log does.
	rng := rand.New(rand.NewPCG(3, 4))
	for off := int64(0); off < segs[len(segs)-1].NextOffset; off += 1 + rng.Int64N(40) {
		seg := find(remote, off)
		require.NotNil(t, seg, "offset %d", off)
		maxBytes := []int{1, 40_000, 1 << 20}[rng.IntN(3)]
		got, err := c.read(ctx, seg, off, maxBytes)
		require.NoError(t, err, "offset %d", off)
		want, err := l.Read(off, maxBytes)
		require.NoError(t, err)
		// The local read may go on into the next segment; the remote one
		// stops at the end of its segment.
		require.True(t, bytes.HasPrefix(want, got), "offset %d max %d: remote read differs from local", off, maxBytes)
		first, _, err := record.ReadBatch(got)
		require.NoError(t, err)
		require.LessOrEqual(t, first.BaseOffset(), off)
		require.GreaterOrEqual(t, first.LastOffset(), off)
	}
	m := c.metrics
	require.Positive(t, testutilValue(m.cacheHits))
	require.Positive(t, testutilValue(m.cacheMisses))
}

func TestCacheReadRefusesCorruptObjects(t *testing.T) {
	l, segs := testLog(t)
	dir := t.TempDir()
	st, err := folder.New(dir)
	require.NoError(t, err)
	seg := upload(t, l, st, segs[1], segs[1].BaseOffset)
	// Flip one bit in the middle of the stored .log.
	path := filepath.Join(dir, "objects", seg.GetObjectKey()+".log")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	data[len(data)/2] ^= 0x10
	require.NoError(t, os.WriteFile(path, data, 0o644))

	c, err := newChunkCache(t.TempDir(), 4*chunkSize, st, 2, 0, NewMetrics(nil))
	require.NoError(t, err)
	defer c.close()
	ctx := context.Background()
	corrupt := 0
	for off := seg.GetBaseOffset(); off <= seg.GetEndOffset(); off += 5 {
		got, err := c.read(ctx, seg, off, 1<<20)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt, "offset %d", off)
			require.Nil(t, got)
			corrupt++
			continue
		}
		// What is served is intact.
		for b := got; len(b) > 0; {
			_, rest, err := record.ReadBatch(b)
			require.NoError(t, err)
			b = rest
		}
	}
	require.Positive(t, corrupt, "the flipped bit was found")

	// A damaged index is refused too.
	ipath := filepath.Join(dir, "objects", seg.GetObjectKey()+".index")
	idx, err := os.ReadFile(ipath)
	require.NoError(t, err)
	idx[0] ^= 1
	require.NoError(t, os.WriteFile(ipath, idx, 0o644))
	c2, err := newChunkCache(t.TempDir(), 4*chunkSize, st, 2, 0, NewMetrics(nil))
	require.NoError(t, err)
	defer c2.close()
	_, err = c2.read(ctx, seg, seg.GetBaseOffset(), 1<<20)
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestCacheStaysWithinItsBound(t *testing.T) {
	l, segs := testLog(t)
	st, err := folder.New(t.TempDir())
	require.NoError(t, err)
	cacheDir := t.TempDir()
	c, err := newChunkCache(cacheDir, 2*chunkSize, st, 2, 0, NewMetrics(nil))
	require.NoError(t, err)
	defer c.close()
	ctx := context.Background()
	for _, si := range segs {
		seg := upload(t, l, st, si, si.BaseOffset)
		for off := seg.GetBaseOffset(); off <= seg.GetEndOffset(); off += 50 {
			_, err := c.read(ctx, seg, off, 1<<20)
			require.NoError(t, err)
		}
	}
	c.close() // waits for prefetches
	var total int64
	entries, err := os.ReadDir(cacheDir)
	require.NoError(t, err)
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		total += fi.Size()
	}
	require.LessOrEqual(t, total, int64(2*chunkSize+chunkSize), "cache holds %d bytes on disk", total) // one chunk may be in flight past the bound
	require.Positive(t, total)
}

func TestTokenBucket(t *testing.T) {
	b := newTokenBucket(1 << 20)
	w, err := b.take(context.Background(), 1<<20) // the burst
	require.NoError(t, err)
	require.Zero(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = b.take(ctx, 10<<20) // would wait ~10 s
	require.True(t, errors.Is(err, context.Canceled))
	unlimited := newTokenBucket(0)
	w, err = unlimited.take(ctx, 1<<40)
	require.NoError(t, err)
	require.Zero(t, w)
}

func testutilValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// TestTimestampLookup: the remote index's timestamps lead to the same
// first batch reaching a timestamp as the local log's time index.
func TestTimestampLookup(t *testing.T) {
	l, segs := testLog(t)
	st, err := folder.New(t.TempDir())
	require.NoError(t, err)
	c, err := newChunkCache(t.TempDir(), 4*chunkSize, st, 2, 0, NewMetrics(nil))
	require.NoError(t, err)
	defer c.close()
	ctx := context.Background()
	for _, si := range segs {
		seg := upload(t, l, st, si, si.BaseOffset)
		idx, err := c.index(ctx, seg)
		require.NoError(t, err)
		require.Greater(t, len(idx), 1, "several index entries")
		for ts := seg.GetMaxTimestampMs() - 200_000; ts <= seg.GetMaxTimestampMs(); ts += 7_000 {
			want, ok, err := l.OffsetForTimestamp(ts)
			require.NoError(t, err)
			require.True(t, ok)
			if want < seg.GetBaseOffset() {
				continue // in an earlier segment
			}
			off := lookupTime(idx, ts)
			require.LessOrEqual(t, off, want, "ts %d", ts)
			// Scanning from off finds it.
			got := int64(-1)
			for got < 0 {
				b, err := c.read(ctx, seg, off, 1<<20)
				require.NoError(t, err)
				for len(b) > 0 && got < 0 {
					batch, rest, err := record.ReadBatch(b)
					require.NoError(t, err)
					if batch.MaxTimestamp() >= ts {
						got = batch.BaseOffset()
					}
					off, b = batch.LastOffset()+1, rest
				}
			}
			require.Equal(t, want, got, "ts %d", ts)
		}
	}
}
