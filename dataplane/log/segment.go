package log

import (
	"github.com/sluicemq/sluice/record"

	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// segment is one .log file with its indexes. base, dir and file never
// change. The other fields belong to the writer; readers use a segView
// snapshot. The .log file is opened through file (acquire and release, see
// FileCache), by readers and the writer alike.
type segment struct {
	base int64
	dir  string
	file *segFile

	size         int64 // bytes of whole batches
	next         int64 // offset after the last batch
	index        []indexEntry
	tindex       []timeEntry
	maxTs        int64 // math.MinInt64 when empty
	maxTsRel     uint32
	firstTs      int64 // max timestamp of the first batch, for roll by age
	lastIndexPos int64
}

// segView is an immutable snapshot of a segment for readers. Entries of
// index and tindex below their length are never changed while a reader can
// hold the view.
type segView struct {
	seg    *segment
	size   int64
	next   int64
	index  []indexEntry
	tindex []timeEntry
	maxTs  int64
}

func (s *segment) view() segView {
	return segView{seg: s, size: s.size, next: s.next, index: s.index, tindex: s.tindex, maxTs: s.maxTs}
}

func segName(base int64, ext string) string { return fmt.Sprintf("%020d%s", base, ext) }

func (s *segment) path(ext string) string { return filepath.Join(s.dir, segName(s.base, ext)) }

// reset forgets everything but the identity of the segment.
func (s *segment) reset() {
	s.size, s.next = 0, s.base
	s.index, s.tindex = nil, nil
	s.maxTs, s.maxTsRel, s.firstTs = math.MinInt64, 0, math.MinInt64
	s.lastIndexPos = 0
}

// track records the batch with header h written at pos: indexes, timestamps,
// size and next offset. Entries are added exactly as a rebuild adds them.
func (s *segment) track(pos int64, h *record.BatchHeader, interval int64) {
	rel := uint32(h.BaseOffset - s.base)
	if pos == 0 {
		s.firstTs = h.MaxTimestamp
	}
	if h.MaxTimestamp > s.maxTs {
		s.maxTs, s.maxTsRel = h.MaxTimestamp, rel
	}
	if pos-s.lastIndexPos >= interval {
		s.index = append(s.index, indexEntry{rel: rel, pos: uint32(pos)})
		s.lastIndexPos = pos
		if n := len(s.tindex); n == 0 || s.maxTs > s.tindex[n-1].ts {
			s.tindex = append(s.tindex, timeEntry{ts: s.maxTs, rel: s.maxTsRel})
		}
	}
	s.size = pos + int64(h.Size())
	s.next = h.LastOffset() + 1
}

// seal adds the final time index entry, fsyncs the .log and writes and
// fsyncs both index files. It is called when the segment stops being active.
func (s *segment) seal() error {
	if n := len(s.tindex); s.maxTs != math.MinInt64 && (n == 0 || s.maxTs > s.tindex[n-1].ts) {
		s.tindex = append(s.tindex, timeEntry{ts: s.maxTs, rel: s.maxTsRel})
	}
	if err := s.file.sync(); err != nil {
		return fmt.Errorf("sync segment %d: %w", s.base, err)
	}
	if err := writeFileSync(s.path(".index"), encodeIndex(s.index, s.size)); err != nil {
		return fmt.Errorf("write index of segment %d: %w", s.base, err)
	}
	if err := writeFileSync(s.path(".timeindex"), encodeTimeIndex(s.tindex, s.size)); err != nil {
		return fmt.Errorf("write time index of segment %d: %w", s.base, err)
	}
	return nil
}

// syncAll fsyncs the .log even when this process wrote nothing to it.
func (s *segment) syncAll() error {
	f, err := s.file.acquire()
	if err != nil {
		return err
	}
	defer s.file.release()
	return s.file.fsync(f)
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// removeIndexes deletes the index files, which no longer describe the .log.
func (s *segment) removeIndexes() error {
	for _, ext := range []string{".index", ".timeindex"} {
		if err := os.Remove(s.path(ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// remove closes and deletes the segment's files, the .log last so that a
// crash in between leaves a segment whose index is rebuilt. Nobody uses the
// file (the caller holds structMu for writing and writeMu); were it in use,
// it would close when released, and the bytes stay readable until then.
func (s *segment) remove() error {
	_ = s.file.forget()
	if err := s.removeIndexes(); err != nil {
		return err
	}
	return os.Remove(s.path(".log"))
}

// scanStop says why a scan ended before the end of the range.
type scanStop struct {
	pos    int64 // position of the first bad batch
	reason error // wraps ErrTruncated or ErrCorrupt
}

// scan reads the batches of f in [s.size, end), checking framing, offset
// continuity from s.next, the size limit and (when verify) the CRC, and
// tracks each good one; fn, when not nil, sees each good header. It stops at
// the first bad batch and returns where and why (nil stop at a clean end).
// An I/O error is returned as err.
func (s *segment) scan(f *os.File, end int64, verify bool, interval int64, maxBatch int, fn func(*record.BatchHeader)) (*scanStop, error) {
	r := bufio.NewReaderSize(io.NewSectionReader(f, s.size, end-s.size), 256<<10)
	var buf []byte
	for s.size < end {
		pos := s.size
		var prefix [lengthPrefix]byte
		if _, err := io.ReadFull(r, prefix[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return &scanStop{pos, fmt.Errorf("%d bytes at the end: %w", end-pos, record.ErrTruncated)}, nil
			}
			return nil, err
		}
		length := record.Size(prefix[:]) - lengthPrefix
		switch {
		case length < record.HeaderSize-lengthPrefix || length+lengthPrefix > int64(maxBatch):
			return &scanStop{pos, fmt.Errorf("batch length %d: %w", length, record.ErrCorrupt)}, nil
		case pos+lengthPrefix+length > end:
			return &scanStop{pos, fmt.Errorf("batch of %d bytes with %d left: %w", length+lengthPrefix, end-pos, record.ErrTruncated)}, nil
		}
		size := int(length) + lengthPrefix
		if cap(buf) < size {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		copy(buf, prefix[:])
		if _, err := io.ReadFull(r, buf[lengthPrefix:]); err != nil {
			return nil, err
		}
		var h record.BatchHeader
		var err error
		if verify {
			if _, _, err = record.ReadBatch(buf); err == nil {
				h, err = record.ParseBatchHeader(buf)
			}
		} else {
			h, err = record.ParseBatchHeader(buf)
		}
		if err == nil && h.BaseOffset != s.next {
			err = fmt.Errorf("batch base offset %d, expected %d: %w", h.BaseOffset, s.next, record.ErrCorrupt)
		}
		if err == nil && h.LastOffset()-s.base > math.MaxUint32 {
			err = fmt.Errorf("batch offset %d too far from segment base: %w", h.LastOffset(), record.ErrCorrupt)
		}
		if err != nil {
			return &scanStop{pos, err}, nil
		}
		s.track(pos, &h, interval)
		if fn != nil {
			fn(&h)
		}
	}
	return nil, nil
}

// batchAt reads and fully checks the batch at pos, which must end by end.
func batchAt(f *os.File, pos, end int64, maxBatch int) (record.Batch, error) {
	var prefix [lengthPrefix]byte
	if end-pos < lengthPrefix {
		return nil, record.ErrTruncated
	}
	if _, err := f.ReadAt(prefix[:], pos); err != nil {
		return nil, err
	}
	length := record.Size(prefix[:]) - lengthPrefix
	if length < record.HeaderSize-lengthPrefix || length+lengthPrefix > int64(maxBatch) || pos+lengthPrefix+length > end {
		return nil, record.ErrCorrupt
	}
	buf := make([]byte, lengthPrefix+length)
	if _, err := f.ReadAt(buf, pos); err != nil {
		return nil, err
	}
	b, _, err := record.ReadBatch(buf)
	return b, err
}

// corruptNotTorn reports whether the bad batch at pos is followed by a valid
// batch, which a torn write cannot produce: the damage is corruption.
func corruptNotTorn(f *os.File, pos, end int64, maxBatch int) bool {
	var prefix [lengthPrefix]byte
	if end-pos < lengthPrefix {
		return false
	}
	if _, err := f.ReadAt(prefix[:], pos); err != nil {
		return false
	}
	length := record.Size(prefix[:]) - lengthPrefix
	if length < record.HeaderSize-lengthPrefix || length+lengthPrefix > int64(maxBatch) {
		return false
	}
	next := pos + lengthPrefix + length
	b, err := batchAt(f, next, end, maxBatch)
	return err == nil && b.BaseOffset() > int64(binary.BigEndian.Uint64(prefix[:]))
}

// headerAt reads the header of the batch at pos without checking its CRC.
func headerAt(f *os.File, pos int64, buf *[record.HeaderSize]byte) (record.BatchHeader, error) {
	if _, err := f.ReadAt(buf[:], pos); err != nil {
		if errors.Is(err, io.EOF) {
			return record.BatchHeader{}, fmt.Errorf("header at %d: %w", pos, record.ErrTruncated)
		}
		return record.BatchHeader{}, err
	}
	return record.ParseBatchHeader(buf[:])
}

// findBatch returns the position and header of the first batch in
// [from, end) whose last offset is at least offset, or end and a zero header
// when there is none. It checks offset continuity starting at expect (-1 to
// skip the check for the first batch).
func findBatch(f *os.File, from, end, offset int64) (int64, record.BatchHeader, error) {
	var buf [record.HeaderSize]byte
	pos := from
	expect := int64(-1)
	for pos < end {
		h, err := headerAt(f, pos, &buf)
		if err != nil {
			return pos, h, err
		}
		if expect >= 0 && h.BaseOffset != expect {
			return pos, h, fmt.Errorf("batch base offset %d, expected %d: %w", h.BaseOffset, expect, record.ErrCorrupt)
		}
		if pos+int64(h.Size()) > end {
			return pos, h, fmt.Errorf("batch at %d runs past %d: %w", pos, end, record.ErrCorrupt)
		}
		if h.LastOffset() >= offset {
			return pos, h, nil
		}
		expect = h.LastOffset() + 1
		pos += int64(h.Size())
	}
	return end, record.BatchHeader{}, nil
}

// loadIndexes reads both index files, checked against the .log size.
func (s *segment) loadIndexes(logSize int64) ([]indexEntry, []timeEntry, error) {
	ib, err := os.ReadFile(s.path(".index"))
	if err != nil {
		return nil, nil, err
	}
	idx, err := decodeIndex(ib, logSize)
	if err != nil {
		return nil, nil, err
	}
	tb, err := os.ReadFile(s.path(".timeindex"))
	if err != nil {
		return nil, nil, err
	}
	tidx, err := decodeTimeIndex(tb, logSize)
	if err != nil {
		return nil, nil, err
	}
	return idx, tidx, nil
}

// lengthPrefix is the part of a batch that its length field does not count.
const lengthPrefix = record.PrefixSize
