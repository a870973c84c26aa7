package log

import (
	"github.com/sluicemq/sluice/record"

	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
)

// indexEntry maps the base offset of a batch (relative to the segment base)
// to the batch's byte position in the .log file.
type indexEntry struct {
	rel uint32
	pos uint32
}

// timeEntry says that every batch before the one at base offset rel (relative
// to the segment base) has a max timestamp of at most ts, and that batch
// reaches ts.
type timeEntry struct {
	ts  int64
	rel uint32
}

const (
	indexEntrySize = 8
	timeEntrySize  = 12
	// indexTrailerSize: .log size covered (8), entry count (4), CRC32C of
	// everything before the CRC (4).
	indexTrailerSize = 16
)

// encodeIndex returns the offset index file contents for a .log of logSize bytes.
func encodeIndex(entries []indexEntry, logSize int64) []byte {
	b := make([]byte, 0, len(entries)*indexEntrySize+indexTrailerSize)
	for _, e := range entries {
		b = binary.BigEndian.AppendUint32(b, e.rel)
		b = binary.BigEndian.AppendUint32(b, e.pos)
	}
	return appendTrailer(b, logSize, len(entries))
}

// encodeTimeIndex returns the time index file contents for a .log of logSize bytes.
func encodeTimeIndex(entries []timeEntry, logSize int64) []byte {
	b := make([]byte, 0, len(entries)*timeEntrySize+indexTrailerSize)
	for _, e := range entries {
		b = binary.BigEndian.AppendUint64(b, uint64(e.ts))
		b = binary.BigEndian.AppendUint32(b, e.rel)
	}
	return appendTrailer(b, logSize, len(entries))
}

func appendTrailer(b []byte, logSize int64, n int) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(logSize))
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// checkTrailer validates the trailer of an index file and returns the bytes
// of its entries.
func checkTrailer(b []byte, entrySize int, logSize int64) ([]byte, error) {
	if len(b) < indexTrailerSize {
		return nil, fmt.Errorf("index of %d bytes has no trailer: %w", len(b), record.ErrCorrupt)
	}
	body := b[:len(b)-indexTrailerSize]
	t := b[len(body):]
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(t[12:]) {
		return nil, fmt.Errorf("index crc mismatch: %w", record.ErrCorrupt)
	}
	if got := int64(binary.BigEndian.Uint64(t)); got != logSize {
		return nil, fmt.Errorf("index covers %d log bytes, log has %d: %w", got, logSize, record.ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(t[8:])
	if len(body)%entrySize != 0 || uint64(len(body)/entrySize) != uint64(n) {
		return nil, fmt.Errorf("index holds %d bytes for %d entries: %w", len(body), n, record.ErrCorrupt)
	}
	return body, nil
}

// decodeIndex parses an offset index file for a .log of logSize bytes. Entries
// must strictly increase in offset and position, with positions inside the
// log. It allocates at most len(b) bytes.
func decodeIndex(b []byte, logSize int64) ([]indexEntry, error) {
	body, err := checkTrailer(b, indexEntrySize, logSize)
	if err != nil {
		return nil, err
	}
	entries := make([]indexEntry, 0, len(body)/indexEntrySize)
	for i := 0; i < len(body); i += indexEntrySize {
		e := indexEntry{rel: binary.BigEndian.Uint32(body[i:]), pos: binary.BigEndian.Uint32(body[i+4:])}
		if int64(e.pos) >= logSize {
			return nil, fmt.Errorf("index entry %d at position %d beyond log size %d: %w", i/indexEntrySize, e.pos, logSize, record.ErrCorrupt)
		}
		if n := len(entries); n > 0 && (e.rel <= entries[n-1].rel || e.pos <= entries[n-1].pos) {
			return nil, fmt.Errorf("index entry %d out of order: %w", i/indexEntrySize, record.ErrCorrupt)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// decodeTimeIndex parses a time index file for a .log of logSize bytes.
// Timestamps and offsets must strictly increase.
func decodeTimeIndex(b []byte, logSize int64) ([]timeEntry, error) {
	body, err := checkTrailer(b, timeEntrySize, logSize)
	if err != nil {
		return nil, err
	}
	entries := make([]timeEntry, 0, len(body)/timeEntrySize)
	for i := 0; i < len(body); i += timeEntrySize {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(body[i:])), rel: binary.BigEndian.Uint32(body[i+8:])}
		if n := len(entries); n > 0 && (e.ts <= entries[n-1].ts || e.rel <= entries[n-1].rel) {
			return nil, fmt.Errorf("time index entry %d out of order: %w", i/timeEntrySize, record.ErrCorrupt)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// lookupIndex returns the position of the last indexed batch whose base
// offset is at most rel, or 0.
func lookupIndex(entries []indexEntry, rel uint32) int64 {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].rel > rel })
	if i == 0 {
		return 0
	}
	return int64(entries[i-1].pos)
}

// lookupTime returns the relative offset of the last entry whose timestamp is
// below ts, and whether there is one.
func lookupTime(entries []timeEntry, ts int64) (uint32, bool) {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].ts >= ts })
	if i == 0 {
		return 0, false
	}
	return entries[i-1].rel, true
}

// castagnoli is the CRC32C table of the index trailers; read-only after
// initialisation.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)
