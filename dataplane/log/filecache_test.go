package log

import (
	"github.com/sluicemq/sluice/record"

	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// segmentFDs counts this process's open file descriptors on .log files
// under dir, and how many of those name a deleted file.
func segmentFDs(t testing.TB, dir string) (open, deleted int) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+"/") {
			continue // closed meanwhile, or not ours
		}
		name, gone := strings.CutSuffix(target, " (deleted)")
		if strings.HasSuffix(name, ".log") {
			open++
			if gone {
				deleted++
			}
		}
	}
	return open, deleted
}

// TestFileCacheManyLogs: ten logs share a cache of two files. Appends,
// reads, timestamp lookups, syncs, truncations, retention and restarts
// return what a model says, and the segment files open never exceed the
// capacity (twice it and the one the cleaner fsyncs with FlushOS, see
// FileCache) once each operation has returned.
func TestFileCacheManyLogs(t *testing.T) {
	t.Parallel()
	for _, flush := range []FlushPolicy{FlushAlways, FlushInterval, FlushOS} {
		t.Run(flush.String(), func(t *testing.T) {
			t.Parallel()
			const capacity, n = 2, 10
			files := NewFileCache(capacity)
			root := t.TempDir()
			cfg := Config{SegmentBytes: 1500, IndexIntervalBytes: 200, RetentionBytes: 4000, Flush: flush, FlushInterval: time.Millisecond, Files: files}
			logs := make([]*Log, n)
			models := make([][]record.Batch, n)
			dirs := make([]string, n)
			for i := range logs {
				dirs[i] = filepath.Join(root, fmt.Sprint(i))
				logs[i] = openLog(t, dirs[i], cfg)
			}
			bound := capacity
			if flush == FlushOS {
				bound = 2*capacity + 1 // and one in use by the cleaner's fsync
			}
			rng := rand.New(rand.NewPCG(uint64(flush), 5))
			ctx := context.Background()
			for step := range 1500 {
				i := rng.IntN(n)
				l := logs[i]
				msg := fmt.Sprintf("step %d, log %d", step, i)
				switch op := rng.IntN(100); {
				case op < 45:
					b := mkBatch(t, 1+rng.IntN(4), rng.IntN(200), int64(step), fmt.Sprint(step))
					_, leo, err := l.Append(b, int32(step/300))
					require.NoError(t, err, msg)
					require.NoError(t, l.MakeDurable(ctx, leo), msg)
					models[i] = append(models[i], record.Batch(b))
				case op < 75 && len(models[i]) > 0:
					j := rng.IntN(len(models[i]))
					want := models[i][j]
					data, err := l.Read(want.BaseOffset(), 1)
					require.NoError(t, err, msg)
					require.Equal(t, []byte(want), data, msg)
				case op < 82 && len(models[i]) > 0:
					j := rng.IntN(len(models[i]))
					off, ok, err := l.OffsetForTimestamp(models[i][j].Header().MaxTimestamp)
					require.NoError(t, err, msg)
					require.True(t, ok, msg)
					require.LessOrEqual(t, off, models[i][j].BaseOffset(), msg)
				case op < 86:
					require.NoError(t, l.Sync(), msg)
				case op < 89 && len(models[i]) > 0:
					j := rng.IntN(len(models[i]))
					require.NoError(t, l.TruncateTo(models[i][j].BaseOffset()), msg)
					models[i] = models[i][:j]
				case op < 93:
					_, err := l.ApplyRetention()
					require.NoError(t, err, msg)
					for len(models[i]) > 0 && models[i][0].BaseOffset() < l.LogStartOffset() {
						models[i] = models[i][1:]
					}
				case op < 96:
					require.NoError(t, l.Close(), msg)
					logs[i] = openLog(t, dirs[i], cfg)
				default:
					// A crash: reopen a copy of the files without Close.
					require.NoError(t, l.Close(), msg)
					require.NoError(t, os.Remove(filepath.Join(dirs[i], cleanShutdownName)))
					logs[i] = openLog(t, dirs[i], cfg)
				}
				open, _ := segmentFDs(t, root)
				require.LessOrEqual(t, open, bound, msg)
				require.LessOrEqual(t, files.OpenFiles(), bound, msg)
				// A deleted segment's file closes at once, or when the
				// cleaner, fsyncing it, releases it.
				require.True(t, assertEventually(func() bool { _, deleted := segmentFDs(t, root); return deleted == 0 }), msg)
			}
			closed := 0
			for i, l := range logs {
				require.Equal(t, models[i], readAll(t, l), "log %d", i)
				closed += len(l.ClosedSegments())
			}
			require.Greater(t, closed, n, "logs of several segments")
			// Quiet: the cleaner brings the cache down to its capacity, and
			// its count is the process's.
			require.Eventually(t, func() bool { return files.OpenFiles() <= capacity }, 10*time.Second, time.Millisecond)
			if flush != FlushInterval { // (its flushers may open a file at any time)
				open, _ := segmentFDs(t, root)
				require.Equal(t, files.OpenFiles(), open)
			}
			for _, l := range logs {
				require.NoError(t, l.Close())
			}
			require.Zero(t, files.OpenFiles())
			open, _ := segmentFDs(t, root)
			require.Zero(t, open)
		})
	}
}

// TestFileCacheEvictionWhileReading: a file a reader uses stays open while
// other logs take the cache's one slot, and the read returns its batch.
func TestFileCacheEvictionWhileReading(t *testing.T) {
	t.Parallel()
	files := NewFileCache(1)
	root := t.TempDir()
	cfg := Config{Files: files}
	a := openLog(t, filepath.Join(root, "a"), cfg)
	want := mkBatch(t, 3, 100, 1, "a")
	_, _, err := a.Append(want, 0)
	require.NoError(t, err)
	inRead, release := make(chan struct{}), make(chan struct{})
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	a.afterAcquire = func() {
		close(inRead)
		<-release
	}
	got := make(chan []byte, 1)
	go func() {
		data, err := a.Read(0, 1<<20)
		if err != nil {
			data = []byte(err.Error())
		}
		got <- data
	}()
	<-inRead
	for i := range 5 {
		o := openLog(t, filepath.Join(root, fmt.Sprint(i)), cfg)
		b := mkBatch(t, 1, 10, 0, fmt.Sprint(i))
		_, _, err := o.Append(b, 0)
		require.NoError(t, err)
		data, err := o.Read(0, 1<<20)
		require.NoError(t, err)
		require.Equal(t, b, data)
		require.NoError(t, o.Close())
		open, _ := segmentFDs(t, filepath.Join(root, "a"))
		require.Equal(t, 1, open, "the file in use stays open")
	}
	released = true
	close(release)
	require.Equal(t, want, <-got)
}

// TestFileCacheForgetInUse: a removed segment's file that is in use stays
// readable until released, then closes and never opens again.
func TestFileCacheForgetInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "x.log")
	require.NoError(t, os.WriteFile(path, []byte("hello"), 0o644))
	c := NewFileCache(1)
	h := c.newFile(path, nil, func(error) {})
	f, err := h.acquire()
	require.NoError(t, err)
	require.NoError(t, os.Remove(path))
	require.NoError(t, h.forget())
	buf := make([]byte, 5)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf))
	require.Equal(t, 1, c.OpenFiles())
	h.release()
	require.Equal(t, 0, c.OpenFiles())
	_, err = h.acquire()
	require.ErrorIs(t, err, ErrClosed)
}

// TestFileCacheRetentionAndTruncationOfClosedFiles: segments whose files
// the cache closed are deleted by retention and cut by truncation, leaving
// no descriptor behind; reads below the new log start are out of range.
func TestFileCacheRetentionAndTruncationOfClosedFiles(t *testing.T) {
	t.Parallel()
	files := NewFileCache(1)
	root := t.TempDir()
	cfg := Config{SegmentBytes: 1000, IndexIntervalBytes: 100, Files: files}
	dir := filepath.Join(root, "a")
	a := openLog(t, dir, cfg)
	for i := range 40 {
		_, _, err := a.Append(mkBatch(t, 2, 40, int64(i), fmt.Sprint(i)), 0)
		require.NoError(t, err)
	}
	all := readAll(t, a)
	segs := a.ClosedSegments()
	require.Greater(t, len(segs), 4)
	other := openLog(t, filepath.Join(root, "b"), cfg)
	evict := func() {
		t.Helper()
		// a's files hold no unsynced writes (else the cache may keep them
		// and close b's), and b's is used last: a's close.
		require.NoError(t, a.Sync())
		_, _, err := other.Append(mkBatch(t, 1, 10, 0, "b"), 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool { open, _ := segmentFDs(t, dir); return open == 0 }, 10*time.Second, time.Millisecond, "a's files are closed")
		_, deleted := segmentFDs(t, dir)

		require.Zero(t, deleted)
	}
	evict()

	a.SetRetention(0, a.Size()-segs[0].Size-segs[1].Size, 0)
	n, err := a.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, segs[2].BaseOffset, a.LogStartOffset())
	_, err = a.Read(segs[1].BaseOffset, 1)
	require.ErrorIs(t, err, ErrOffsetOutOfRange)
	evict()

	cut := segs[3].BaseOffset + 2
	require.NoError(t, a.TruncateTo(cut))
	evict()
	var want []record.Batch
	for _, b := range all {
		if b.BaseOffset() >= segs[2].BaseOffset && b.BaseOffset() < cut {
			want = append(want, b)
		}
	}
	require.Equal(t, want, readAll(t, a))
	_, _, err = a.Append(mkBatch(t, 1, 10, 0, "after"), 1)
	require.NoError(t, err)
	evict()
	require.Equal(t, cut+1, a.LEO())
	crash := openLog(t, copyDir(t, dir), cfg)
	require.Equal(t, readAll(t, a), readAll(t, crash))
	_, deleted := segmentFDs(t, root)
	require.Zero(t, deleted)
}

// TestFileCacheFailedFsyncFailsTheLog: a file with unsynced writes
// (FlushOS) is fsynced before the cache closes it, and when that fsync
// fails, its log fails: appends and syncs return the error.
func TestFileCacheFailedFsyncFailsTheLog(t *testing.T) {
	t.Parallel()
	files := NewFileCache(1)
	root := t.TempDir()
	cfg := Config{Flush: FlushOS, Files: files}
	a := openLog(t, filepath.Join(root, "a"), cfg)
	_, _, err := a.Append(mkBatch(t, 1, 10, 0, "a"), 0)
	require.NoError(t, err)
	// The disk fails a's writeback: its next fsync fails.
	closeUnder(a.segs[0].file)
	b := openLog(t, filepath.Join(root, "b"), cfg)
	_, _, err = b.Append(mkBatch(t, 1, 10, 0, "b"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.Failed() != nil }, 10*time.Second, time.Millisecond,
		"the cache closed a's file without the fsync that reports the failure")
	require.Eventually(t, func() bool { return files.OpenFiles() <= 1 }, 10*time.Second, time.Millisecond)
	_, _, err = a.Append(mkBatch(t, 1, 10, 0, "a2"), 0)
	require.ErrorContains(t, err, "log failed earlier")
	require.Error(t, a.Sync(), "a later fsync does not pretend the writes are durable")
	require.NoError(t, b.Failed())
}

// TestFileCacheCleanFilesNeedNoFsync: with FlushOS the cleaner fsyncs the
// active segment it closes, and then a Sync has nothing left to do.
func TestFileCacheDirtyFileFsyncedBeforeClose(t *testing.T) {
	t.Parallel()
	files := NewFileCache(1)
	root := t.TempDir()
	cfg := Config{Flush: FlushOS, Files: files}
	a := openLog(t, filepath.Join(root, "a"), cfg)
	_, _, err := a.Append(mkBatch(t, 1, 10, 0, "a"), 0)
	require.NoError(t, err)
	h := a.segs[0].file
	dirty := func() bool {
		files.mu.Lock()
		defer files.mu.Unlock()
		return h.gen != h.syncedGen
	}
	require.True(t, dirty())
	b := openLog(t, filepath.Join(root, "b"), cfg)
	_, _, err = b.Append(mkBatch(t, 1, 10, 0, "b"), 0)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return files.OpenFiles() <= 1 }, 10*time.Second, time.Millisecond)
	require.False(t, dirty(), "closed only after an fsync")
	open, _ := segmentFDs(t, filepath.Join(root, "a"))
	require.Zero(t, open)
	require.NoError(t, a.Sync())
	open, _ = segmentFDs(t, filepath.Join(root, "a"))
	require.Zero(t, open, "Sync had nothing to fsync")
	require.NoError(t, errors.Join(a.Close(), b.Close()))
}

// TestFileCacheOneFlusherForAllLogs: fifty FlushInterval logs sharing a
// cache are flushed by one goroutine (not one each), every append is made
// durable within the interval's reach, and the goroutine ends with the
// last Close. Not parallel: it counts the process's goroutines.
func TestFileCacheOneFlusherForAllLogs(t *testing.T) {
	const n = 50
	files := NewFileCache(0)
	root := t.TempDir()
	cfg := Config{Flush: FlushInterval, FlushInterval: 2 * time.Millisecond, Files: files}
	before := runtime.NumGoroutine()
	logs := make([]*Log, n)
	for i := range logs {
		logs[i] = openLog(t, filepath.Join(root, fmt.Sprint(i)), cfg)
	}
	require.LessOrEqual(t, runtime.NumGoroutine()-before, 1, "one flusher for all logs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 3 {
		errs := make(chan error, n)
		for _, l := range logs {
			_, leo, err := l.Append(mkBatch(t, 1, 10, int64(round), "x"), 0)
			require.NoError(t, err)
			go func() { errs <- l.MakeDurable(ctx, leo) }()
		}
		for range n {
			require.NoError(t, <-errs)
		}
	}
	for _, l := range logs {
		require.Equal(t, l.LEO(), l.FlushedOffset())
		require.NoError(t, l.Close())
	}
	if !assertEventually(func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Fatalf("the flusher ends with the last log: %d goroutines, %d before\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

func assertEventually(cond func() bool) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) { // poll: until cond holds
		if cond() {
			return true
		}
	}
	return false
}
