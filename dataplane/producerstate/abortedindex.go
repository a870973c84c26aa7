package producerstate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// ErrCorruptAbortedIndex: bytes that are not an aborted-transaction index
// (EncodeAbortedIndex's format): a wrong size, version or checksum, or
// entries that are not well formed.
var ErrCorruptAbortedIndex = errors.New("corrupt aborted-transaction index")

const (
	abortedIndexVersion   = 1
	abortedIndexEntrySize = 32
)

// EncodeAbortedIndex encodes aborted transactions (those overlapping one
// tiered segment) as an aborted-transaction index, big-endian:
//
//	offset size field
//	     0    1 version  1
//	     1    4 count    uint32
//	     5    - entries  32 bytes each, as AbortedTransactions orders them:
//	                      producer id, first offset, last offset (the
//	                      abort marker), last stable offset, int64 each
//	 end-4    4 crc      CRC32C (Castagnoli) of bytes [0, end-4)
func EncodeAbortedIndex(txns []AbortedTxn) []byte {
	b := make([]byte, 0, 1+4+len(txns)*abortedIndexEntrySize+4)
	b = append(b, abortedIndexVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(txns)))
	for _, t := range txns {
		b = binary.BigEndian.AppendUint64(b, uint64(t.ProducerID))
		b = binary.BigEndian.AppendUint64(b, uint64(t.FirstOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(t.LastOffset))
		b = binary.BigEndian.AppendUint64(b, uint64(t.LastStableOffset))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// DecodeAbortedIndex decodes EncodeAbortedIndex's bytes; anything else is
// an error matching ErrCorruptAbortedIndex.
func DecodeAbortedIndex(b []byte) ([]AbortedTxn, error) {
	if len(b) < 1+4+4 {
		return nil, fmt.Errorf("%d bytes: %w", len(b), ErrCorruptAbortedIndex)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("crc %08x, trailer says %08x: %w", got, sum, ErrCorruptAbortedIndex)
	}
	if body[0] != abortedIndexVersion {
		return nil, fmt.Errorf("version %d: %w", body[0], ErrCorruptAbortedIndex)
	}
	n := binary.BigEndian.Uint32(body[1:])
	entries := body[5:]
	if uint64(len(entries)) != uint64(n)*abortedIndexEntrySize {
		return nil, fmt.Errorf("%d entries in %d bytes: %w", n, len(entries), ErrCorruptAbortedIndex)
	}
	var out []AbortedTxn
	for e := entries; len(e) > 0; e = e[abortedIndexEntrySize:] {
		t := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(e)),
			FirstOffset:      int64(binary.BigEndian.Uint64(e[8:])),
			LastOffset:       int64(binary.BigEndian.Uint64(e[16:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(e[24:])),
		}
		if t.ProducerID < 0 || t.FirstOffset < 0 || t.LastOffset <= t.FirstOffset || t.LastStableOffset < 0 || t.LastStableOffset > t.LastOffset+1 {
			return nil, fmt.Errorf("entry %+v: %w", t, ErrCorruptAbortedIndex)
		}
		out = append(out, t)
	}
	return out, nil
}
