package log

import (
	"github.com/sluicemq/sluice/record"

	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FlushPolicy says when appended batches are fsynced; the package doc states
// what each policy promises after a crash.
type FlushPolicy int

// Flush policies. The zero value is FlushAlways, the durable one.
const (
	FlushAlways FlushPolicy = iota
	FlushInterval
	FlushOS
)

func (p FlushPolicy) String() string {
	switch p {
	case FlushAlways:
		return "always"
	case FlushInterval:
		return "interval"
	case FlushOS:
		return "os"
	}
	return "FlushPolicy(" + strconv.Itoa(int(p)) + ")"
}

// Config configures a Log. Zero fields take the defaults noted.
type Config struct {
	// SegmentBytes rolls the active segment before a batch that would take
	// it past this size. Default 1 GiB, at most math.MaxInt32.
	SegmentBytes int64
	// SegmentAge rolls the active segment once its first batch's max
	// timestamp is this old. Zero never rolls by age.
	SegmentAge time.Duration
	// IndexIntervalBytes is the log bytes between offset index entries.
	// Default 4096.
	IndexIntervalBytes int
	// MaxBatchBytes is the largest batch accepted and read. Default 8 MiB.
	MaxBatchBytes int
	// RetentionBytes deletes the oldest closed segments while the log
	// without them would still hold at least this many bytes. Zero keeps
	// everything.
	RetentionBytes int64
	// RetentionTime deletes closed segments whose newest record is older.
	// Zero keeps everything.
	RetentionTime time.Duration
	// Flush is the flush policy.
	Flush FlushPolicy
	// FlushInterval is the group commit period of FlushInterval. Default 10ms.
	FlushInterval time.Duration
	// Now is the clock for retention and roll by age. Default time.Now.
	Now func() time.Time
	// CanDelete, when set, is asked before retention deletes a closed
	// segment (tiered storage answers true once the segment is uploaded).
	// Retention stops at the first segment it refuses.
	CanDelete func(SegmentInfo) bool
	// Files is the cache of open segment files this log shares with
	// others (a broker's, bounded by its --max-open-segment-files). Nil
	// gives the log a cache of its own without a limit: each segment's
	// file opens at its first use (Open uses them all) and stays open
	// until the segment is deleted or the log closed.
	Files *FileCache
}

func (c Config) withDefaults() Config {
	if c.SegmentBytes == 0 {
		c.SegmentBytes = 1 << 30
	}
	if c.IndexIntervalBytes == 0 {
		c.IndexIntervalBytes = 4096
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 8 << 20
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = 10 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Files == nil {
		c.Files = testFiles
	}
	if c.Files == nil {
		c.Files = NewFileCache(0)
	}
	return c
}

// testFiles, when set (by TestMain, before any Open), is the FileCache of
// every log opened without one, so the package's tests can run with a tiny
// shared cache.
var testFiles *FileCache

// Validate names the first field outside its allowed range. Zero fields are
// valid (they take defaults).
func (c Config) Validate() error {
	switch {
	case c.SegmentBytes < 0 || c.SegmentBytes > math.MaxInt32:
		return fmt.Errorf("SegmentBytes %d: must be in [1, %d]", c.SegmentBytes, math.MaxInt32)
	case c.SegmentBytes > 0 && c.SegmentBytes < record.HeaderSize:
		return fmt.Errorf("SegmentBytes %d: must be at least %d", c.SegmentBytes, record.HeaderSize)
	case c.SegmentAge < 0:
		return fmt.Errorf("SegmentAge %v: must not be negative", c.SegmentAge)
	case c.IndexIntervalBytes < 0:
		return fmt.Errorf("IndexIntervalBytes %d: must not be negative", c.IndexIntervalBytes)
	case c.MaxBatchBytes < 0 || (c.MaxBatchBytes > 0 && c.MaxBatchBytes < record.HeaderSize):
		return fmt.Errorf("MaxBatchBytes %d: must be at least %d", c.MaxBatchBytes, record.HeaderSize)
	case c.RetentionBytes < 0:
		return fmt.Errorf("RetentionBytes %d: must not be negative", c.RetentionBytes)
	case c.RetentionTime < 0:
		return fmt.Errorf("RetentionTime %v: must not be negative", c.RetentionTime)
	case c.Flush < FlushAlways || c.Flush > FlushOS:
		return fmt.Errorf("flush policy %d: must be always, interval or os", c.Flush)
	case c.FlushInterval < 0:
		return fmt.Errorf("FlushInterval %v: must not be negative", c.FlushInterval)
	}
	return nil
}

// Errors the Log returns; callers branch on them with errors.Is.
var (
	// ErrOffsetOutOfRange: the offset is outside [LogStartOffset, LEO]. The
	// error is an *OffsetOutOfRangeError carrying the valid range.
	ErrOffsetOutOfRange = errors.New("offset out of range")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("log closed")
	// ErrStaleEpoch: the leader epoch is below the latest epoch of the log.
	ErrStaleEpoch = errors.New("stale leader epoch")
	// ErrNonContiguous: follower batches do not continue the log.
	ErrNonContiguous = errors.New("batches do not continue the log")
	// ErrInvalidBatch: a batch given to Append breaks a rule of the format.
	ErrInvalidBatch = errors.New("invalid batch")
	// ErrSegmentNotFound: no closed segment has the given base offset.
	ErrSegmentNotFound = errors.New("segment not found")
)

// OffsetOutOfRangeError reports an offset outside [LogStart, LEO].
type OffsetOutOfRangeError struct {
	Offset, LogStart, LEO int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("offset %d outside [%d, %d]", e.Offset, e.LogStart, e.LEO)
}

// Is makes errors.Is(err, ErrOffsetOutOfRange) true.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// CorruptionError reports damaged bytes in a segment file. The damaged bytes
// are never returned as data. errors.Is(err, ErrCorrupt) is true.
type CorruptionError struct {
	Path     string
	Position int64
	Err      error
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("corrupt %s at byte %d: %v", e.Path, e.Position, e.Err)
}

// Unwrap returns the cause.
func (e *CorruptionError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == record.ErrCorrupt }

// view is what readers see: an immutable snapshot published atomically.
type view struct {
	closed      []segView // never appended to in place
	active      segView
	start, leo  int64
	epochs      []EpochEntry
	closedState bool
}

func (v *view) numSegs() int { return len(v.closed) + 1 }

func (v *view) seg(i int) *segView {
	if i < len(v.closed) {
		return &v.closed[i]
	}
	return &v.active
}

// find returns the index of the segment that holds offset.
func (v *view) find(offset int64) int {
	i := sort.Search(v.numSegs(), func(i int) bool { return v.seg(i).seg.base > offset })
	return max(i-1, 0)
}

// Log is one partition replica's log in a directory. See the package doc for
// goroutine ownership, locks and invariants.
type Log struct {
	dir string
	cfg Config

	writeMu  sync.Mutex
	structMu sync.RWMutex
	flushMu  sync.Mutex
	// syncMu queues MakeDurable's fsyncs (FlushAlways): one runs at a
	// time, and the callers that arrive meanwhile share the next one.
	syncMu sync.Mutex
	syncs  atomic.Int64 // fsyncs of the active segment by Sync, for tests
	// beforeSync, when set (by tests, before any use), runs in Sync right
	// before the fsync, with Sync's locks held.
	beforeSync func()
	// afterAcquire, when set (by tests, before any use), runs in Read once
	// it holds the segment's file.
	afterAcquire func()

	// crashPoint, when set (by tests, before any use), runs at the named
	// steps of roll with writeMu held, so a test can copy the directory
	// there as a crash would leave it.
	crashPoint func(step string)

	// Owned by the writer (writeMu).
	segs   []*segment
	epochs epochCache
	// epochsDirty: the cache holds epochs the checkpoint file does not.
	// They all start in the active segment (roll writes the checkpoint
	// before a segment stops being active), which an unclean Open rescans
	// with assign, so a crash loses none of them.
	epochsDirty bool
	closed      bool

	v       atomic.Pointer[view]
	failed  atomic.Pointer[error]
	flushed atomic.Int64
	flushCh chan struct{} // closed when flushed advances; under flushMu

	// flusher is the FileCache's flush group that fsyncs this log every
	// FlushInterval (nil with other policies); flushQueued says the log
	// is queued there.
	flusher     *flushGroup
	flushQueued atomic.Bool
}

const cleanShutdownName = "clean-shutdown"

// Open opens or creates the log in dir and recovers it: it rebuilds missing
// or stale indexes, and unless the last Close left a clean-shutdown marker it
// checks every batch of the active segment by CRC and truncates a torn tail.
// It returns a *CorruptionError when a segment is damaged in a way a torn
// write cannot explain; it never serves such bytes.
func Open(dir string, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	l := &Log{dir: dir, cfg: cfg.withDefaults(), flushCh: make(chan struct{})}
	if err := l.open(); err != nil {
		for _, s := range l.segs {
			_ = s.file.forget()
		}
		return nil, fmt.Errorf("open log %s: %w", dir, err)
	}
	if l.cfg.Flush == FlushInterval {
		l.flusher = l.cfg.Files.addFlusher(l)
	}
	return l, nil
}

func (l *Log) open() error {
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return err
	}
	names, err := os.ReadDir(l.dir)
	if err != nil {
		return err
	}
	logs := map[int64]bool{}
	var bases []int64
	for _, e := range names {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			if err := os.Remove(filepath.Join(l.dir, name)); err != nil {
				return err
			}
			continue
		}
		stem, ext, ok := strings.Cut(name, ".")
		if !ok || len(stem) != 20 {
			continue
		}
		base, err := strconv.ParseInt(stem, 10, 64)
		if err != nil || base < 0 {
			continue
		}
		if ext == "log" {
			logs[base] = true
			bases = append(bases, base)
		}
	}
	// Index files without a .log are left over from a deletion.
	for _, e := range names {
		stem, ext, _ := strings.Cut(e.Name(), ".")
		base, err := strconv.ParseInt(stem, 10, 64)
		if len(stem) == 20 && err == nil && (ext == "index" || ext == "timeindex") && !logs[base] {
			if err := os.Remove(filepath.Join(l.dir, e.Name())); err != nil {
				return err
			}
		}
	}
	slices.Sort(bases)
	marker := filepath.Join(l.dir, cleanShutdownName)
	_, err = os.Stat(marker)
	clean := err == nil

	if len(bases) == 0 {
		s, err := l.createSegment(0)
		if err != nil {
			return err
		}
		l.segs = []*segment{s}
	}
	for _, base := range bases {
		s := &segment{base: base, dir: l.dir}
		s.file = l.cfg.Files.newFile(s.path(".log"), nil, l.failFile)
		s.reset()
		l.segs = append(l.segs, s)
	}

	// Leader-epoch cache: the checkpoint, plus the epochs that start in
	// segments scanned below (the active one after a crash: appends do not
	// write the checkpoint).
	eb, err := os.ReadFile(filepath.Join(l.dir, epochCheckpointName))
	switch {
	case err == nil:
		entries, err := decodeEpochs(eb)
		if err != nil {
			return &CorruptionError{Path: filepath.Join(l.dir, epochCheckpointName), Err: err}
		}
		l.epochs.entries = entries
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	onDisk := l.epochs.entries
	assign := func(h *record.BatchHeader) { l.epochs.assign(h.LeaderEpoch, h.BaseOffset) }

	for i, s := range l.segs {
		last := i == len(l.segs)-1
		if err := l.loadSegment(s, last && !clean, assign); err != nil {
			return err
		}
		if i > 0 && l.segs[i-1].next != s.base {
			return &CorruptionError{Path: s.path(".log"), Err: fmt.Errorf("segment starts at %d, previous ends at %d: %w", s.base, l.segs[i-1].next, record.ErrCorrupt)}
		}
	}
	active := l.segs[len(l.segs)-1]
	if !clean {
		// The active segment's index files describe an older state.
		if err := active.removeIndexes(); err != nil {
			return err
		}
	}
	// The last process's writes to the active segment may not be durable
	// (closed segments were fsynced before the next one was created).
	if err := active.syncAll(); err != nil {
		return err
	}
	leo := active.next
	l.epochs.truncateFromEnd(leo)
	l.epochs.truncateFromStart(l.segs[0].base)
	switch e := l.epochs.entries; {
	case slices.Equal(e, onDisk):
	case len(e) > len(onDisk) && slices.Equal(e[:len(onDisk)], onDisk) && e[len(onDisk)].StartOffset >= active.base:
		// Only epochs that start in the active segment are new: the next
		// unclean Open finds them again, as appends leave them.
		l.epochsDirty = true
	default:
		// The checkpoint holds entries the log no longer has, or misses
		// one that starts in a closed segment: a later Open could not
		// repair it from the active segment alone.
		if err := l.persistEpochs(); err != nil {
			return err
		}
	}
	if clean {
		if err := os.Remove(marker); err != nil {
			return err
		}
	}
	if err := SyncDir(l.dir); err != nil {
		return err
	}
	l.flushed.Store(leo)
	closed := make([]segView, 0, len(l.segs)-1)
	for _, s := range l.segs[:len(l.segs)-1] {
		closed = append(closed, s.view())
	}
	l.publishWith(closed)
	return nil
}

// loadSegment sets up s from its index files, or rebuilds it from the .log.
// With recover, every batch is checked and a torn tail is truncated.
func (l *Log) loadSegment(s *segment, recover bool, assign func(*record.BatchHeader)) error {
	f, err := s.file.acquire()
	if err != nil {
		return err
	}
	defer s.file.release()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	interval := int64(l.cfg.IndexIntervalBytes)
	if !recover {
		if idx, tidx, err := s.loadIndexes(size); err == nil {
			s.index, s.tindex = idx, tidx
			if n := len(idx); n > 0 {
				s.size, s.next, s.lastIndexPos = int64(idx[n-1].pos), s.base+int64(idx[n-1].rel), int64(idx[n-1].pos)
			}
			if n := len(tidx); n > 0 {
				s.maxTs, s.maxTsRel = tidx[n-1].ts, tidx[n-1].rel
			}
			if s.size > 0 {
				var buf [record.HeaderSize]byte
				h, err := headerAt(f, 0, &buf)
				if err != nil {
					return &CorruptionError{Path: s.path(".log"), Err: err}
				}
				s.firstTs = h.MaxTimestamp
			}
			stop, err := s.scan(f, size, true, interval, l.cfg.MaxBatchBytes, nil)
			if err != nil {
				return err
			}
			if stop == nil {
				return nil
			}
		}
		// Missing, stale or corrupt index (or a bad tail): rebuild.
		s.reset()
	}
	stop, err := s.scan(f, size, true, interval, l.cfg.MaxBatchBytes, assign)
	if err != nil {
		return err
	}
	if stop == nil {
		return nil
	}
	if !recover || corruptNotTorn(f, stop.pos, size, l.cfg.MaxBatchBytes) {
		return &CorruptionError{Path: s.path(".log"), Position: stop.pos, Err: stop.reason}
	}
	// A torn tail: drop it durably before anything is appended after it.
	if err := f.Truncate(stop.pos); err != nil {
		return err
	}
	s.file.written()
	return s.file.fsync(f)
}

func (l *Log) createSegment(base int64) (*segment, error) {
	s := &segment{base: base, dir: l.dir}
	s.reset()
	if err := s.removeIndexes(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.path(".log"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	s.file = l.cfg.Files.newFile(s.path(".log"), f, l.failFile)
	if err := SyncDir(l.dir); err != nil {
		_ = s.file.forget()
		return nil, err
	}
	return s, nil
}

// publishWith publishes a view with the given closed segments and the
// writer's current active segment, epochs and offsets.
func (l *Log) publishWith(closed []segView) {
	active := l.segs[len(l.segs)-1]
	l.v.Store(&view{closed: closed, active: active.view(), start: l.segs[0].base, leo: active.next, epochs: l.epochs.entries})
}

// publish republishes the view after appends to the active segment.
func (l *Log) publish() { l.publishWith(l.v.Load().closed) }

// persistEpochs writes the leader-epoch checkpoint (atomically: a
// temporary file, fsynced, renamed, and the directory fsynced). Caller
// holds writeMu.
func (l *Log) persistEpochs() error {
	if err := WriteFileAtomic(filepath.Join(l.dir, epochCheckpointName), encodeEpochs(l.epochs.entries)); err != nil {
		return err
	}
	l.epochsDirty = false
	return nil
}

// fail puts the log in a failed state after an I/O error that leaves memory
// and disk possibly out of step; every later write returns the error.
// Failed returns the I/O error that made the log refuse writes, or nil.
// A failed log stays failed until it is reopened (which recovers it).
func (l *Log) Failed() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (l *Log) fail(err error) error {
	l.failed.CompareAndSwap(nil, &err)
	return err
}

// failFile is how a segment file fails the log when an fsync that is not
// the log's own (the FileCache's, before it closes the file) fails.
func (l *Log) failFile(err error) { l.fail(fmt.Errorf("sync segment file: %w", err)) }

func (l *Log) writable() error {
	if l.closed {
		return ErrClosed
	}
	if p := l.failed.Load(); p != nil {
		return fmt.Errorf("log failed earlier: %w", *p)
	}
	return nil
}

// LogStartOffset is the first offset still in the log.
func (l *Log) LogStartOffset() int64 { return l.v.Load().start }

// LEO is the log end offset: the offset the next appended record gets.
func (l *Log) LEO() int64 { return l.v.Load().leo }

// FlushedOffset is the offset below which every batch is fsynced.
func (l *Log) FlushedOffset() int64 { return l.flushed.Load() }

// Append appends one batch as the leader: it checks the batch
// (ValidateLeaderBatch: CRC, format, for uncompressed batches record count
// and offset deltas 0..n-1) and appends it with AppendValidated. It fails
// with ErrInvalidBatch for a bad batch, changing nothing; otherwise as
// AppendValidated.
func (l *Log) Append(batch []byte, epoch int32) (base, leo int64, err error) {
	v, err := ValidateLeaderBatch(batch, l.cfg.MaxBatchBytes)
	if err != nil {
		return 0, 0, fmt.Errorf("append: %w", err)
	}
	return l.AppendValidated(v, epoch)
}

// AppendValidated appends a batch that passed ValidateLeaderBatch as the
// leader, without checking its CRC or records again: it rewrites the
// batch's base offset to the LEO and its leader epoch to epoch,
// recomputing the CRC, in the caller's buffer, and writes it. It returns
// the batch's base offset and the new LEO. It does not wait for an fsync:
// MakeDurable does, outside the caller's locks. It fails with ErrStaleEpoch when epoch is
// below the log's latest epoch and ErrInvalidBatch for a zero ValidBatch
// or one over the log's MaxBatchBytes, changing nothing.
func (l *Log) AppendValidated(v ValidBatch, epoch int32) (base, leo int64, err error) {
	switch {
	case v.b == nil:
		return 0, 0, fmt.Errorf("append: %w: not a validated batch", ErrInvalidBatch)
	case len(v.b) > l.cfg.MaxBatchBytes:
		return 0, 0, fmt.Errorf("append: %w: %d bytes, limit %d", ErrInvalidBatch, len(v.b), l.cfg.MaxBatchBytes)
	case epoch < 0:
		return 0, 0, fmt.Errorf("append: %w: negative leader epoch %d", ErrInvalidBatch, epoch)
	}
	b, h := v.b, v.h

	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writable(); err != nil {
		return 0, 0, err
	}
	if e, ok := l.epochs.latest(); ok && epoch < e.Epoch {
		return 0, 0, fmt.Errorf("append with epoch %d, log at %d: %w", epoch, e.Epoch, ErrStaleEpoch)
	}
	base = l.segs[len(l.segs)-1].next
	if v.logAppendTime {
		// Under the write lock: append times grow with offsets (while the
		// wall clock does not step back).
		now := time.Now().UnixMilli()
		b.SetLeaderAppendTime(base, epoch, now)
		h.Attributes |= record.AttrLogAppendTime
		h.MaxTimestamp = now
	} else {
		b.SetLeader(base, epoch)
	}
	h.BaseOffset, h.LeaderEpoch = base, epoch
	if err := l.appendLocked(b, []record.BatchHeader{h}); err != nil {
		return 0, 0, err
	}
	return base, h.LastOffset() + 1, nil
}

// ValidBatch is one batch that passed ValidateLeaderBatch (or was built by
// EncodeLeaderBatch): holding one is the proof that the check ran, so the
// leader checks a produced batch once, where it enters the broker, and
// AppendValidated and the producer state take it from there. Its bytes
// alias the caller's buffer, which must not change until it is appended
// (AppendValidated stamps the offset and epoch into it). The zero value is
// no batch.
type ValidBatch struct {
	b record.Batch
	h record.BatchHeader
	// logAppendTime: AppendValidated stamps the batch with the time of
	// its append (WithLogAppendTime).
	logAppendTime bool
}

// WithLogAppendTime is v to be appended with LogAppendTime (a topic's
// message.timestamp.type=LogAppendTime): AppendValidated sets the batch's
// timestamp type and its max timestamp, every record's timestamp as
// readers see it, to the time of the append, as Kafka's leader does.
func (v ValidBatch) WithLogAppendTime() ValidBatch {
	v.logAppendTime = true
	return v
}

// Batch is the batch's bytes (after AppendValidated: with the offset and
// leader epoch it was written with).
func (v ValidBatch) Batch() record.Batch { return v.b }

// Header is the batch's header as validated (AppendValidated does not
// update it: read Batch().Header() for the written offset and epoch).
func (v ValidBatch) Header() record.BatchHeader { return v.h }

// ValidateLeaderBatch applies every check Append makes of a batch before it
// writes (exactly one whole batch, CRC, format, at most maxBatchBytes — 0
// means the default 8 MiB — and, uncompressed, RecordCount records with
// offset deltas 0..n-1), so a caller can validate several batches before
// appending any, and append them with AppendValidated without checking
// again. Errors wrap ErrInvalidBatch.
func ValidateLeaderBatch(batch []byte, maxBatchBytes int) (ValidBatch, error) {
	if maxBatchBytes <= 0 {
		maxBatchBytes = 8 << 20
	}
	b, rest, err := record.ReadBatch(batch)
	if err != nil {
		return ValidBatch{}, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	if len(rest) != 0 {
		return ValidBatch{}, fmt.Errorf("%w: %d bytes after the batch", ErrInvalidBatch, len(rest))
	}
	if len(b) > maxBatchBytes {
		return ValidBatch{}, fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidBatch, len(b), maxBatchBytes)
	}
	h := b.Header()
	if h.Attributes.Codec() == record.CodecNone {
		if err := checkLeaderRecords(b, &h); err != nil {
			return ValidBatch{}, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
		}
	} else if h.RecordCount != h.LastOffsetDelta+1 {
		return ValidBatch{}, fmt.Errorf("%w: %d records span %d offsets", ErrInvalidBatch, h.RecordCount, h.LastOffsetDelta+1)
	}
	return ValidBatch{b: b, h: h}, nil
}

// CheckLeaderRecords checks the records of an uncompressed batch whose
// framing and CRC are known good without checking them again (the batch
// a compressed one decompresses to): RecordCount well-formed records with
// offset deltas 0..n-1, as ValidateLeaderBatch requires. Errors wrap
// ErrInvalidBatch.
func CheckLeaderRecords(b record.Batch) error {
	h, err := record.ParseBatchHeader(b)
	if err == nil && h.Size() != len(b) {
		err = fmt.Errorf("batch of %d bytes, length says %d", len(b), h.Size())
	}
	if err == nil {
		err = checkLeaderRecords(b, &h)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	return nil
}

// EncodeLeaderBatch encodes records into one uncompressed batch appended
// to dst (record.AppendBatch) and returns it as a ValidBatch: a batch this
// process just encoded, with offset deltas 0..n-1, needs no check. It
// fails with ErrInvalidBatch when the records' offset deltas are not
// 0..n-1 or the encoding fails.
func EncodeLeaderBatch(dst []byte, h record.BatchHeader, records []record.Record) (ValidBatch, error) {
	for i := range records {
		if records[i].OffsetDelta != int32(i) {
			return ValidBatch{}, fmt.Errorf("%w: record %d has offset delta %d", ErrInvalidBatch, i, records[i].OffsetDelta)
		}
	}
	out, err := record.AppendBatch(dst, h, records)
	if err != nil {
		return ValidBatch{}, fmt.Errorf("%w: %w", ErrInvalidBatch, err)
	}
	b := record.Batch(out[len(dst):])
	return ValidBatch{b: b, h: b.Header()}, nil
}

// checkLeaderRecords checks that an uncompressed batch holds exactly
// RecordCount well-formed records with offset deltas 0, 1, 2, ...
func checkLeaderRecords(b record.Batch, h *record.BatchHeader) error {
	if h.RecordCount == 0 || h.RecordCount != h.LastOffsetDelta+1 {
		return fmt.Errorf("%d records span %d offsets", h.RecordCount, int64(h.LastOffsetDelta)+1)
	}
	var it record.RecordIter
	if err := it.Reset(b); err != nil {
		return err
	}
	want := int32(0)
	for it.Next() {
		if it.Record().OffsetDelta != want {
			return fmt.Errorf("record %d has offset delta %d", want, it.Record().OffsetDelta)
		}
		want++
	}
	return it.Err()
}

// AppendFollower appends batches (one or more whole batches, as fetched from
// the leader) unchanged. Every batch must pass its CRC, the first must start
// at the LEO and each next one right after the previous one
// (ErrNonContiguous), and leader epochs must not decrease (ErrStaleEpoch).
// Nothing is written unless every batch passes. It returns the new LEO.
func (l *Log) AppendFollower(batches []byte) (int64, error) {
	var hs []record.BatchHeader
	for rest := batches; len(rest) > 0; {
		b, r, err := record.ReadBatch(rest)
		if err != nil {
			return 0, fmt.Errorf("append follower at byte %d: %w: %w", len(batches)-len(rest), ErrInvalidBatch, err)
		}
		if len(b) > l.cfg.MaxBatchBytes {
			return 0, fmt.Errorf("append follower: %w: %d bytes, limit %d", ErrInvalidBatch, len(b), l.cfg.MaxBatchBytes)
		}
		hs = append(hs, b.Header())
		rest = r
	}
	if len(hs) == 0 {
		return l.LEO(), nil
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	next := l.segs[len(l.segs)-1].next
	epoch := UndefinedEpoch
	if e, ok := l.epochs.latest(); ok {
		epoch = e.Epoch
	}
	for i := range hs {
		h := &hs[i]
		if h.BaseOffset != next {
			return 0, fmt.Errorf("append follower: batch at %d, expected %d: %w", h.BaseOffset, next, ErrNonContiguous)
		}
		if h.LeaderEpoch < epoch {
			return 0, fmt.Errorf("append follower: batch at %d has epoch %d after %d: %w", h.BaseOffset, h.LeaderEpoch, epoch, ErrStaleEpoch)
		}
		epoch = h.LeaderEpoch
		next = h.LastOffset() + 1
	}
	if err := l.appendLocked(batches, hs); err != nil {
		return 0, err
	}
	return next, nil
}

// appendLocked writes the checked batches data (with headers hs, in order)
// at the end of the log, rolling segments as needed, then flushes according
// to the policy and publishes the new end. Caller holds writeMu.
func (l *Log) appendLocked(data []byte, hs []record.BatchHeader) error {
	for i := range hs {
		// Only in memory: a new epoch starts in the active segment (or in
		// the one a roll below starts, after roll wrote the checkpoint),
		// and Open after a crash finds it again by scanning the active
		// segment's batches. roll and Close write the checkpoint before a
		// segment stops being scanned; no fsync on the append path.
		if l.epochs.assign(hs[i].LeaderEpoch, hs[i].BaseOffset) {
			l.epochsDirty = true
		}
	}
	interval := int64(l.cfg.IndexIntervalBytes)
	off := 0
	for i := 0; i < len(hs); {
		if err := l.maybeRoll(&hs[i]); err != nil {
			return err
		}
		s := l.segs[len(l.segs)-1]
		// Group the batches that fit in this segment into one write.
		start, size, j := off, int64(0), i
		for j < len(hs) {
			n := int64(hs[j].Size())
			if j > i && (s.size+size+n > l.cfg.SegmentBytes || hs[j].LastOffset()-s.base > math.MaxUint32) {
				break
			}
			size += n
			j++
		}
		if err := l.write(s, data[start:start+int(size)]); err != nil {
			return err
		}
		pos := s.size
		for ; i < j; i++ {
			s.track(pos, &hs[i], interval)
			pos += int64(hs[i].Size())
		}
		off += int(size)
	}
	l.publish()
	if l.flusher != nil && l.flushQueued.CompareAndSwap(false, true) {
		l.flusher.queue(l)
	}
	return nil
}

// write writes data at the end of the active segment s. Caller holds
// writeMu.
func (l *Log) write(s *segment, data []byte) error {
	f, err := s.file.acquire()
	if err != nil {
		return l.fail(fmt.Errorf("open segment %d: %w", s.base, err))
	}
	defer s.file.release()
	_, err = f.WriteAt(data, s.size)
	s.file.written() // even a failed write may have changed the file
	if err != nil {
		if terr := f.Truncate(s.size); terr != nil {
			err = errors.Join(err, terr)
		}
		return l.fail(fmt.Errorf("write segment %d at %d: %w", s.base, s.size, err))
	}
	return nil
}

// maybeRoll starts a new segment at h's base offset when h does not fit the
// active one (size, offset span or age). Caller holds writeMu.
func (l *Log) maybeRoll(h *record.BatchHeader) error {
	s := l.segs[len(l.segs)-1]
	if s.size == 0 {
		return nil
	}
	full := s.size+int64(h.Size()) > l.cfg.SegmentBytes || h.LastOffset()-s.base > math.MaxUint32
	old := l.cfg.SegmentAge > 0 && l.cfg.Now().UnixMilli()-s.firstTs >= l.cfg.SegmentAge.Milliseconds()
	if !full && !old {
		return nil
	}
	return l.roll()
}

// roll seals the active segment and starts a new one at the LEO.
//
// Once the new segment's file exists, Open loads the sealed one from its
// indexes without scanning its batches for epochs, so the checkpoint is
// written before that: a crash before it leaves the sealed segment active
// (rescanned), one after it finds every epoch in the checkpoint (entries
// past the recovered LEO are dropped by Open). The checkpoint may also
// hold the epochs of batches of this append that go to the new segment;
// they are not written yet, and Open drops them as past the LEO.
func (l *Log) roll() error {
	s := l.segs[len(l.segs)-1]
	if err := s.seal(); err != nil {
		return l.fail(err)
	}
	l.crash("sealed")
	if l.epochsDirty {
		if err := l.persistEpochs(); err != nil {
			return l.fail(fmt.Errorf("persist leader epochs: %w", err))
		}
	}
	l.crash("epochs")
	ns, err := l.createSegment(s.next)
	if err != nil {
		return l.fail(fmt.Errorf("create segment %d: %w", s.next, err))
	}
	old := l.v.Load().closed
	closed := make([]segView, len(old), len(old)+1)
	copy(closed, old)
	closed = append(closed, s.view())
	l.segs = append(l.segs, ns)
	l.publishWith(closed)
	// The sealed segment is durable up to its end.
	l.advanceFlushed(s.next)
	l.crash("rolled")
	return nil
}

func (l *Log) crash(step string) {
	if l.crashPoint != nil {
		l.crashPoint(step)
	}
}

// Roll closes the active segment and starts a new one, unless it is empty.
func (l *Log) Roll() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if l.segs[len(l.segs)-1].size == 0 {
		return nil
	}
	return l.roll()
}

func (l *Log) advanceFlushed(off int64) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if off > l.flushed.Load() {
		l.flushed.Store(off)
		close(l.flushCh)
		l.flushCh = make(chan struct{})
	}
}

// Sync fsyncs the active segment; afterwards FlushedOffset is at least the
// LEO seen when Sync started. Safe to call from any goroutine; it does not
// take writeMu, so appends and reads go on while the disk works.
func (l *Log) Sync() error {
	l.structMu.RLock()
	defer l.structMu.RUnlock()
	v := l.v.Load()
	if v.closedState {
		return ErrClosed
	}
	l.syncs.Add(1)
	if l.beforeSync != nil {
		l.beforeSync()
	}
	if err := v.active.seg.file.sync(); err != nil {
		return l.fail(fmt.Errorf("sync segment %d: %w", v.active.seg.base, err))
	}
	l.advanceFlushed(v.leo)
	return nil
}

// DurableOffset is the end of the log's durable prefix under its flush
// policy: FlushedOffset with FlushAlways and FlushInterval, the LEO with
// FlushOS (which trusts the page cache).
func (l *Log) DurableOffset() int64 {
	if l.cfg.Flush == FlushOS {
		return l.LEO()
	}
	return l.FlushedOffset()
}

// MakeDurable returns once DurableOffset reaches off, which must not be
// above the LEO. With FlushAlways it fsyncs (group commit: one fsync runs
// at a time, and every caller that arrives while it runs shares the next
// one, which covers all of their batches); with FlushInterval it waits for
// the interval flush that covers off, at most one interval (plus the fsync)
// later; with FlushOS it returns at once. While the disk works it holds
// only structMu for reading, so call it after releasing your own locks:
// appends and reads never wait for an fsync (TruncateTo, Reset, retention
// and Close, which take structMu for writing, do). A failed fsync fails
// the log (Failed) and is returned.
func (l *Log) MakeDurable(ctx context.Context, off int64) error {
	switch {
	case l.cfg.Flush == FlushOS || l.FlushedOffset() >= off:
		return nil
	case l.cfg.Flush == FlushInterval:
		return l.WaitFlushed(ctx, off)
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.FlushedOffset() >= off {
		return nil // the fsync that ran while this caller queued covered it
	}
	if err := l.Sync(); err != nil {
		return err
	}
	if l.FlushedOffset() < off {
		// The log was cut below off meanwhile (a follower's truncation):
		// what is left up to the LEO is durable.
		return fmt.Errorf("make durable to %d: the log was truncated to %d", off, l.FlushedOffset())
	}
	return nil
}

// WaitFlushed blocks until FlushedOffset reaches offset, ctx ends or the log
// closes. With FlushInterval it is how a caller acknowledges only durable
// batches (group commit).
func (l *Log) WaitFlushed(ctx context.Context, offset int64) error {
	for {
		l.flushMu.Lock()
		ch := l.flushCh
		done := l.flushed.Load() >= offset
		l.flushMu.Unlock()
		if done {
			return nil
		}
		if l.v.Load().closedState {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Read returns whole batches starting with the one that holds offset, up to
// maxBytes in total but always at least one whole batch, from one segment.
// At the LEO it returns no bytes and no error; outside [LogStartOffset, LEO]
// it returns an *OffsetOutOfRangeError. Every returned batch passed its CRC;
// when the first batch is damaged Read returns a *CorruptionError (later
// damaged batches are left out and reported by the Read that starts there).
// Read never waits for Append.
func (l *Log) Read(offset int64, maxBytes int) ([]byte, error) {
	l.structMu.RLock()
	defer l.structMu.RUnlock()
	v := l.v.Load()
	if v.closedState {
		return nil, ErrClosed
	}
	if offset < v.start || offset > v.leo {
		return nil, &OffsetOutOfRangeError{Offset: offset, LogStart: v.start, LEO: v.leo}
	}
	for i := v.find(offset); i < v.numSegs(); i++ {
		out, err := l.readSegment(v.seg(i), offset, maxBytes)
		if err != nil || len(out) > 0 {
			return out, err
		}
	}
	return nil, nil
}

func (l *Log) readSegment(sv *segView, offset int64, maxBytes int) ([]byte, error) {
	f, err := sv.seg.file.acquire()
	if err != nil {
		return nil, fmt.Errorf("read segment %d: %w", sv.seg.base, err)
	}
	defer sv.seg.file.release()
	if l.afterAcquire != nil {
		l.afterAcquire()
	}
	from := int64(0)
	if offset > sv.seg.base {
		from = lookupIndex(sv.index, uint32(min(offset-sv.seg.base, math.MaxUint32)))
	}
	pos, h, err := findBatch(f, from, sv.size, offset)
	if err != nil {
		return nil, &CorruptionError{Path: sv.seg.path(".log"), Position: pos, Err: err}
	}
	if pos >= sv.size {
		return nil, nil
	}
	if h.BaseOffset > offset && pos == from && from > 0 {
		// The index pointed past the offset: it cannot be trusted.
		return nil, &CorruptionError{Path: sv.seg.path(".index"), Position: pos, Err: fmt.Errorf("index entry past offset %d: %w", offset, record.ErrCorrupt)}
	}
	n := min(int64(max(maxBytes, h.Size())), sv.size-pos)
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, pos); err != nil {
		return nil, fmt.Errorf("read segment %d at %d: %w", sv.seg.base, pos, err)
	}
	expect := h.BaseOffset
	end := 0
	for rest := buf; len(rest) > 0; {
		b, r, err := record.ReadBatch(rest)
		if err == nil && b.BaseOffset() != expect {
			err = fmt.Errorf("batch base offset %d, expected %d: %w", b.BaseOffset(), expect, record.ErrCorrupt)
		}
		if err != nil {
			if errors.Is(err, record.ErrTruncated) && end > 0 {
				break // the next batch does not fit in maxBytes
			}
			if end == 0 {
				return nil, &CorruptionError{Path: sv.seg.path(".log"), Position: pos, Err: err}
			}
			break
		}
		expect = b.LastOffset() + 1
		end += len(b)
		rest = r
	}
	return buf[:end:end], nil
}

// OffsetForTimestamp returns the base offset of the first batch whose max
// timestamp is at least ts (Kafka's ListOffsets, at batch granularity: the
// consumer skips the earlier records of that batch), and false when no batch
// is that recent.
func (l *Log) OffsetForTimestamp(ts int64) (int64, bool, error) {
	l.structMu.RLock()
	defer l.structMu.RUnlock()
	v := l.v.Load()
	if v.closedState {
		return 0, false, ErrClosed
	}
	for i := 0; i < v.numSegs(); i++ {
		sv := v.seg(i)
		if sv.size == 0 || sv.maxTs < ts {
			continue
		}
		from := int64(0)
		if rel, ok := lookupTime(sv.tindex, ts); ok {
			from = lookupIndex(sv.index, rel)
		}
		off, ok, err := offsetForTimestamp(sv, from, ts)
		if err != nil || ok {
			return off, ok, err
		}
	}
	return 0, false, nil
}

// MaxTimestamp returns the largest record timestamp of the log's batches
// (Kafka's ListOffsets max-timestamp spec, KIP-734), and false when the
// log holds none. OffsetForTimestamp of it finds the batch that holds it.
func (l *Log) MaxTimestamp() (int64, bool, error) {
	l.structMu.RLock()
	defer l.structMu.RUnlock()
	v := l.v.Load()
	if v.closedState {
		return 0, false, ErrClosed
	}
	ts, ok := int64(math.MinInt64), false
	for i := 0; i < v.numSegs(); i++ {
		if sv := v.seg(i); sv.size > 0 && sv.maxTs > ts {
			ts, ok = sv.maxTs, true
		}
	}
	return ts, ok, nil
}

// offsetForTimestamp scans the segment of sv from position from for the
// first batch whose max timestamp is at least ts.
func offsetForTimestamp(sv *segView, from, ts int64) (int64, bool, error) {
	f, err := sv.seg.file.acquire()
	if err != nil {
		return 0, false, fmt.Errorf("read segment %d: %w", sv.seg.base, err)
	}
	defer sv.seg.file.release()
	var buf [record.HeaderSize]byte
	for pos := from; pos < sv.size; {
		h, err := headerAt(f, pos, &buf)
		if err != nil {
			return 0, false, &CorruptionError{Path: sv.seg.path(".log"), Position: pos, Err: err}
		}
		if h.MaxTimestamp >= ts {
			return h.BaseOffset, true, nil
		}
		pos += int64(h.Size())
	}
	return 0, false, nil
}

// EndOffsetFor answers a follower's OffsetsForLeaderEpoch (KIP-101/279): for
// the latest epoch, the LEO; for an older epoch, the largest known epoch at
// or below it and the start offset of the first epoch above it; for an epoch
// below every known one, that epoch and the first known start offset;
// UndefinedEpoch and UndefinedOffset when the log has no epochs or epoch is
// above them all.
func (l *Log) EndOffsetFor(epoch int32) (int32, int64) {
	v := l.v.Load()
	return endOffsetFor(v.epochs, epoch, v.leo)
}

// Epochs returns a copy of the leader-epoch cache, oldest first.
func (l *Log) Epochs() []EpochEntry { return slices.Clone(l.v.Load().epochs) }

// TruncateTo removes every batch that holds an offset at or above offset, so
// the LEO becomes offset, or the base of the batch holding offset when offset
// falls inside a batch. It is durable when it returns and drops the
// leader-epoch entries that start at or after the new LEO. An offset at or
// above the LEO changes nothing; one below LogStartOffset is an
// *OffsetOutOfRangeError (use Reset).
func (l *Log) TruncateTo(offset int64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	leo := l.segs[len(l.segs)-1].next
	if offset >= leo {
		return nil
	}
	if start := l.segs[0].base; offset < start {
		return &OffsetOutOfRangeError{Offset: offset, LogStart: start, LEO: leo}
	}
	l.structMu.Lock()
	defer l.structMu.Unlock()
	k := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset }) - 1
	for i := len(l.segs) - 1; i > k; i-- {
		if err := l.segs[i].remove(); err != nil {
			return l.fail(fmt.Errorf("truncate: remove segment %d: %w", l.segs[i].base, err))
		}
		l.segs = l.segs[:i]
	}
	s := l.segs[k]
	if err := l.truncateSegment(s, offset); err != nil {
		return err
	}
	if err := SyncDir(l.dir); err != nil {
		return l.fail(err)
	}
	if l.epochs.truncateFromEnd(s.next) {
		if err := l.persistEpochs(); err != nil {
			return l.fail(fmt.Errorf("persist leader epochs: %w", err))
		}
	}
	l.flushMu.Lock()
	if l.flushed.Load() > s.next {
		l.flushed.Store(s.next)
	}
	l.flushMu.Unlock()
	l.publishWith(l.v.Load().closed[:k:k])
	return nil
}

// truncateSegment cuts s before the batch that holds offset, durably.
// Caller holds writeMu and structMu.
func (l *Log) truncateSegment(s *segment, offset int64) error {
	f, err := s.file.acquire()
	if err != nil {
		return l.fail(fmt.Errorf("truncate: open segment %d: %w", s.base, err))
	}
	defer s.file.release()
	cut, _, err := findBatch(f, lookupIndex(s.index, uint32(offset-s.base)), s.size, offset)
	if err != nil {
		return l.fail(&CorruptionError{Path: s.path(".log"), Position: cut, Err: err})
	}
	s.reset()
	if stop, err := s.scan(f, cut, false, int64(l.cfg.IndexIntervalBytes), l.cfg.MaxBatchBytes, nil); err != nil || stop != nil {
		if err == nil {
			err = &CorruptionError{Path: s.path(".log"), Position: stop.pos, Err: stop.reason}
		}
		return l.fail(fmt.Errorf("truncate: rescan segment %d: %w", s.base, err))
	}
	if err := s.removeIndexes(); err != nil {
		return l.fail(err)
	}
	err = f.Truncate(cut)
	s.file.written()
	if err != nil {
		return l.fail(fmt.Errorf("truncate segment %d: %w", s.base, err))
	}
	if err := s.file.fsync(f); err != nil {
		return l.fail(fmt.Errorf("sync segment %d: %w", s.base, err))
	}
	return nil
}

// Reset deletes every segment and starts an empty log at offset (a follower
// whose LEO is below the leader's LogStartOffset). The leader-epoch cache is
// cleared. It is durable when it returns.
func (l *Log) Reset(offset int64) error {
	if offset < 0 {
		return fmt.Errorf("reset to negative offset %d", offset)
	}
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	l.structMu.Lock()
	defer l.structMu.Unlock()
	for i := len(l.segs) - 1; i >= 0; i-- {
		if err := l.segs[i].remove(); err != nil {
			return l.fail(fmt.Errorf("reset: remove segment %d: %w", l.segs[i].base, err))
		}
	}
	l.segs = nil
	s, err := l.createSegment(offset)
	if err != nil {
		return l.fail(fmt.Errorf("reset: %w", err))
	}
	l.segs = []*segment{s}
	l.epochs.entries = nil
	if err := l.persistEpochs(); err != nil {
		return l.fail(fmt.Errorf("persist leader epochs: %w", err))
	}
	l.flushMu.Lock()
	l.flushed.Store(offset)
	close(l.flushCh)
	l.flushCh = make(chan struct{})
	l.flushMu.Unlock()
	l.publishWith(nil)
	return nil
}

// SegmentInfo describes a closed segment.
type SegmentInfo struct {
	BaseOffset    int64 // first offset
	NextOffset    int64 // offset after the last batch
	Size          int64 // bytes of the .log file
	MaxTimestamp  int64 // largest record timestamp
	LogPath       string
	IndexPath     string
	TimeIndexPath string
}

func (sv *segView) info() SegmentInfo {
	s := sv.seg
	return SegmentInfo{BaseOffset: s.base, NextOffset: sv.next, Size: sv.size, MaxTimestamp: sv.maxTs,
		LogPath: s.path(".log"), IndexPath: s.path(".index"), TimeIndexPath: s.path(".timeindex")}
}

// SetRetention changes RetentionTime, RetentionBytes and SegmentAge (a
// topic's config was altered). Negative values are treated as zero (no
// limit, no roll by age). It takes effect at the next append and
// ApplyRetention.
func (l *Log) SetRetention(retention time.Duration, retentionBytes int64, segmentAge time.Duration) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.cfg.RetentionTime = max(retention, 0)
	l.cfg.RetentionBytes = max(retentionBytes, 0)
	l.cfg.SegmentAge = max(segmentAge, 0)
}

// ApplyRetention deletes the oldest closed segments that RetentionTime or
// RetentionBytes allow and CanDelete approves, and advances LogStartOffset
// to the first remaining segment. The active segment is never deleted. It
// returns how many segments it deleted. The owner calls it periodically.
func (l *Log) ApplyRetention() (int, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.writable(); err != nil {
		return 0, err
	}
	now := l.cfg.Now().UnixMilli()
	var total int64
	for _, s := range l.segs {
		total += s.size
	}
	v := l.v.Load()
	n := 0
	for ; n < len(v.closed); n++ {
		sv := &v.closed[n]
		byTime := l.cfg.RetentionTime > 0 && now-sv.maxTs > l.cfg.RetentionTime.Milliseconds()
		bySize := l.cfg.RetentionBytes > 0 && total-sv.size >= l.cfg.RetentionBytes
		if !byTime && !bySize {
			break
		}
		if l.cfg.CanDelete != nil && !l.cfg.CanDelete(sv.info()) {
			break
		}
		total -= sv.size
	}
	if n == 0 {
		return 0, nil
	}
	l.structMu.Lock()
	defer l.structMu.Unlock()
	for i := range n {
		if err := l.segs[0].remove(); err != nil {
			return i, l.fail(fmt.Errorf("retention: remove segment %d: %w", l.segs[0].base, err))
		}
		l.segs = l.segs[1:]
	}
	if err := SyncDir(l.dir); err != nil {
		return n, l.fail(err)
	}
	if l.epochs.truncateFromStart(l.segs[0].base) {
		if err := l.persistEpochs(); err != nil {
			return n, l.fail(fmt.Errorf("persist leader epochs: %w", err))
		}
	}
	l.publishWith(v.closed[n:])
	return n, nil
}

// ActiveSegmentBase is the first offset of the active segment: where the
// last closed segment ends, or the log start when there is none.
func (l *Log) ActiveSegmentBase() int64 { return l.v.Load().active.seg.base }

// Size is the bytes of every segment's .log, the active one included.
func (l *Log) Size() int64 {
	v := l.v.Load()
	n := v.active.size
	for i := range v.closed {
		n += v.closed[i].size
	}
	return n
}

// ClosedSegments lists the closed segments, oldest first. Tiered storage
// uploads them and then lets CanDelete approve their deletion.
func (l *Log) ClosedSegments() []SegmentInfo {
	v := l.v.Load()
	out := make([]SegmentInfo, len(v.closed))
	for i := range v.closed {
		out[i] = v.closed[i].info()
	}
	return out
}

// SegmentFiles are open read-only handles on a closed segment's files. They
// stay readable even if retention deletes the segment meanwhile. Close them.
type SegmentFiles struct {
	Info      SegmentInfo
	Log       *os.File
	Index     *os.File
	TimeIndex *os.File
}

// Close closes the three files.
func (f *SegmentFiles) Close() error {
	return errors.Join(f.Log.Close(), f.Index.Close(), f.TimeIndex.Close())
}

// OpenSegment opens the files of the closed segment with base offset base,
// or fails with ErrSegmentNotFound.
func (l *Log) OpenSegment(base int64) (*SegmentFiles, error) {
	l.structMu.RLock()
	defer l.structMu.RUnlock()
	v := l.v.Load()
	if v.closedState {
		return nil, ErrClosed
	}
	i := sort.Search(len(v.closed), func(i int) bool { return v.closed[i].seg.base >= base })
	if i == len(v.closed) || v.closed[i].seg.base != base {
		return nil, fmt.Errorf("open segment %d: %w", base, ErrSegmentNotFound)
	}
	info := v.closed[i].info()
	var files [3]*os.File
	for j, p := range []string{info.LogPath, info.IndexPath, info.TimeIndexPath} {
		f, err := os.Open(p)
		if err != nil {
			for _, g := range files[:j] {
				g.Close()
			}
			return nil, fmt.Errorf("open segment %d: %w", base, err)
		}
		files[j] = f
	}
	return &SegmentFiles{Info: info, Log: files[0], Index: files[1], TimeIndex: files[2]}, nil
}

// Close flushes and seals the active segment, writes the clean-shutdown
// marker so the next Open skips the recovery scan, and closes every file.
// Readers that start later get ErrClosed. Close is idempotent; after a
// write failure it closes without the marker.
func (l *Log) Close() error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.flusher != nil {
		l.cfg.Files.removeFlusher(l.flusher)
	}
	var err error
	if l.failed.Load() == nil {
		active := l.segs[len(l.segs)-1]
		err = active.seal()
		if err == nil && l.epochsDirty {
			// The clean Open loads the active segment from its indexes
			// without scanning it for epochs.
			err = l.persistEpochs()
		}
		if err == nil {
			err = writeFileSync(filepath.Join(l.dir, cleanShutdownName), nil)
		}
		if err == nil {
			err = SyncDir(l.dir)
		}
	}
	l.structMu.Lock()
	defer l.structMu.Unlock()
	for _, s := range l.segs {
		if cerr := s.file.forget(); err == nil {
			err = cerr
		}
	}
	l.v.Store(&view{closedState: true})
	l.flushMu.Lock()
	close(l.flushCh)
	l.flushCh = make(chan struct{})
	l.flushMu.Unlock()
	return err
}
