package tiered

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	"github.com/sluicemq/sluice/record"
)

// A remote segment is two objects under its key prefix:
//
//	<key>.log       the batches [base, end] exactly as the log stores them
//	<key>.index     a sparse offset index of the .log (format below)
//	<key>.txnindex  the aborted transactions overlapping [base, end], when
//	                the copy's Source is a TxnIndexSource (its format is the
//	                source's: producerstate.EncodeAbortedIndex)
//
// The .index holds entries of 24 bytes, (batch base offset int64, byte
// position int64, largest record timestamp of the batches before it
// int64, -1 for none), one for the first batch and then one at least every
// indexInterval bytes, in increasing order, followed by a trailer of
// (.log size int64, entry count uint32, CRC32C of everything before it
// uint32), all big-endian. It serves offset lookups and timestamp lookups
// (the timestamps before an entry only grow). Every batch in the .log carries its own CRC32C,
// checked again on every remote read.

const (
	indexEntrySize   = 24
	indexTrailerSize = 16
	indexInterval    = 64 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt: a remote object fails its checks (a batch CRC, the index
// trailer, offsets that do not line up). Such bytes are never served.
var ErrCorrupt = errors.New("corrupt remote segment")

// segmentScan is what one pass over a local segment learns.
type segmentScan struct {
	start    int64 // byte position of the first batch to copy
	size     int64 // bytes to copy, from start to the end of the segment
	base     int64 // first offset copied
	end      int64 // last offset copied
	maxTs    int64
	epochs   []epochStart
	index    []indexEntry
	sections int // batches copied
}

type epochStart struct {
	epoch int32
	start int64
}

type indexEntry struct {
	offset   int64
	pos      int64 // relative to the start of the .log object
	tsBefore int64 // largest timestamp of the batches before it; -1: none
}

// scanSegment reads the closed segment r of size bytes, checking every
// batch's framing and CRC, and describes the part from offset from on:
// from must be the base offset of one of its batches (or at most its first
// base offset, to copy it whole).
func scanSegment(r io.ReaderAt, size, from int64) (*segmentScan, error) {
	sc := &segmentScan{start: -1, end: -1, maxTs: -1}
	var (
		hdr     = make([]byte, record.HeaderSize)
		buf     []byte
		pos     int64
		lastIdx int64 = -indexInterval
	)
	for pos < size {
		if _, err := r.ReadAt(hdr[:12], pos); err != nil {
			return nil, fmt.Errorf("read batch at %d: %w", pos, err)
		}
		n := 12 + int64(binary.BigEndian.Uint32(hdr[8:12]))
		if n < record.HeaderSize || pos+n > size {
			return nil, fmt.Errorf("batch at %d of %d bytes overruns the %d-byte segment: %w", pos, n, size, ErrCorrupt)
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if _, err := r.ReadAt(b, pos); err != nil {
			return nil, fmt.Errorf("read batch at %d: %w", pos, err)
		}
		batch, _, err := record.ReadBatch(b)
		if err != nil {
			return nil, fmt.Errorf("batch at %d: %w: %w", pos, ErrCorrupt, err)
		}
		h := batch.Header()
		if sc.start < 0 && h.BaseOffset >= from {
			if h.BaseOffset != from && pos > 0 {
				return nil, fmt.Errorf("no batch starts at offset %d (next batch starts at %d)", from, h.BaseOffset)
			}
			sc.start, sc.base = pos, h.BaseOffset
		} else if sc.start < 0 && h.LastOffset() >= from {
			return nil, fmt.Errorf("offset %d is inside the batch [%d, %d]", from, h.BaseOffset, h.LastOffset())
		}
		if sc.start >= 0 {
			if sc.end >= 0 && h.BaseOffset != sc.end+1 {
				return nil, fmt.Errorf("batch at %d starts at offset %d, want %d: %w", pos, h.BaseOffset, sc.end+1, ErrCorrupt)
			}
			rel := pos - sc.start
			if rel-lastIdx >= indexInterval {
				sc.index = append(sc.index, indexEntry{offset: h.BaseOffset, pos: rel, tsBefore: sc.maxTs})
				lastIdx = rel
			}
			if n := len(sc.epochs); n == 0 || sc.epochs[n-1].epoch != h.LeaderEpoch {
				if n > 0 && h.LeaderEpoch < sc.epochs[n-1].epoch {
					return nil, fmt.Errorf("batch at %d has leader epoch %d after %d: %w", pos, h.LeaderEpoch, sc.epochs[n-1].epoch, ErrCorrupt)
				}
				sc.epochs = append(sc.epochs, epochStart{epoch: h.LeaderEpoch, start: h.BaseOffset})
			}
			sc.end = h.LastOffset()
			sc.maxTs = max(sc.maxTs, h.MaxTimestamp)
			sc.sections++
		}
		pos += n
	}
	if sc.start < 0 {
		return nil, fmt.Errorf("segment has no batch at or after offset %d", from)
	}
	sc.size = size - sc.start
	return sc, nil
}

// encodeIndex returns the .index object of a .log of logSize bytes.
func encodeIndex(entries []indexEntry, logSize int64) []byte {
	b := make([]byte, 0, len(entries)*indexEntrySize+indexTrailerSize)
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, uint64(e.offset))
		b = binary.BigEndian.AppendUint64(b, uint64(e.pos))
		b = binary.BigEndian.AppendUint64(b, uint64(e.tsBefore))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(logSize))
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeIndex parses a .index object that must describe a .log of logSize
// bytes holding offsets from base on.
func decodeIndex(b []byte, logSize, base int64) ([]indexEntry, error) {
	if len(b) < indexTrailerSize || (len(b)-indexTrailerSize)%indexEntrySize != 0 {
		return nil, fmt.Errorf("index of %d bytes: %w", len(b), ErrCorrupt)
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("index crc mismatch: %w", ErrCorrupt)
	}
	t := b[len(b)-indexTrailerSize:]
	if got := int64(binary.BigEndian.Uint64(t)); got != logSize {
		return nil, fmt.Errorf("index describes a %d-byte log, the segment has %d: %w", got, logSize, ErrCorrupt)
	}
	n := int(binary.BigEndian.Uint32(t[8:]))
	if n*indexEntrySize != len(b)-indexTrailerSize || n == 0 {
		return nil, fmt.Errorf("index holds %d entries in %d bytes: %w", n, len(b)-indexTrailerSize, ErrCorrupt)
	}
	out := make([]indexEntry, n)
	for i := range out {
		r := b[i*indexEntrySize:]
		e := indexEntry{offset: int64(binary.BigEndian.Uint64(r)), pos: int64(binary.BigEndian.Uint64(r[8:])), tsBefore: int64(binary.BigEndian.Uint64(r[16:]))}
		if (i == 0 && (e.offset != base || e.pos != 0 || e.tsBefore != -1)) ||
			(i > 0 && (e.offset <= out[i-1].offset || e.pos <= out[i-1].pos || e.tsBefore < out[i-1].tsBefore)) || e.pos >= logSize {
			return nil, fmt.Errorf("index entry %d out of order: %w", i, ErrCorrupt)
		}
		out[i] = e
	}
	return out, nil
}

// lookupTime returns the offset of the last indexed batch before which
// every timestamp is below ts: the first batch reaching ts is there or
// after it.
func lookupTime(entries []indexEntry, ts int64) int64 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].tsBefore >= ts })
	if i == 0 {
		return entries[0].offset
	}
	return entries[i-1].offset
}

// lookup returns the position of the last indexed batch starting at or
// before offset.
func lookup(entries []indexEntry, offset int64) int64 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].offset > offset })
	if i == 0 {
		return 0
	}
	return entries[i-1].pos
}
