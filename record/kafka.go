package record

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Kafka's RecordBatch (magic 2) and this package's batch (magic 1) differ
// only in the order of three header fields and in what the CRC covers:
//
//	offset  Kafka v2                         Sluice (magic 1)
//	    12  partition leader epoch (4)       crc (4): bytes [16, end)
//	    16  magic (1) = 2                    magic (1) = 1
//	    17  crc (4): bytes [21, end)         leader epoch (4)
//	    21  attributes onward: identical, records included
//
// So a batch converts in place by moving nine header bytes and deriving
// the other CRC from the one the batch carries: CRC32C is linear, so the
// CRC of (magic, epoch, rest) follows from the CRC of rest, its length and
// the five bytes in front, in O(log n) time (crc32cCombine), without
// reading the records. A conversion checks nothing the CRC does not: a
// batch whose Kafka CRC was wrong gets a Sluice CRC that is wrong the same
// way, and the validation every produced batch gets anyway refuses it. See
// docs/design/kafka-batches.md for the measurements behind this choice.

// KafkaMagic is the magic byte of Kafka's RecordBatch v2.
const KafkaMagic int8 = 2

// Kafka v2 header positions that differ from this package's.
const (
	posKafkaLeaderEpoch = 12
	posKafkaMagic       = 16
	posKafkaCRC         = 17
)

// FromKafka converts the Kafka RecordBatch v2 batches in b to this
// package's format in place, batch by batch, and returns how many it
// converted. It reads only the headers: b must hold whole batches (a
// length that frames past the end, or below a header, is ErrCorrupt, as
// is a magic other than 2: Kafka's message sets v0 and v1 are not
// supported); on an error the batches before the bad one are converted
// already. Record contents and CRCs are checked afterwards by the
// validation every produced batch gets (a CRC that was wrong in Kafka's
// form is wrong in this one).
func FromKafka(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		size, err := kafkaBatchSize(b)
		if err != nil {
			return n, fmt.Errorf("batch %d: %w", n+1, err)
		}
		if m := int8(b[posKafkaMagic]); m != KafkaMagic {
			return n, fmt.Errorf("batch %d: magic %d: %w (Kafka clients must send RecordBatch v2: produce v3 or later)", n+1, m, ErrUnsupportedMagic)
		}
		batch := b[:size]
		epoch := binary.BigEndian.Uint32(batch[posKafkaLeaderEpoch:])
		rest := binary.BigEndian.Uint32(batch[posKafkaCRC:])
		batch[posMagic] = byte(Magic)
		binary.BigEndian.PutUint32(batch[posLeaderEpoch:], epoch)
		binary.BigEndian.PutUint32(batch[posCRC:], crc32cCombine(crc32.Checksum(batch[posMagic:posAttributes], castagnoli), rest, len(batch)-posAttributes))
		b = b[size:]
		n++
	}
	return n, nil
}

// AppendKafka appends the batches of data (this package's format, whole
// batches as a log read returns them; a partial batch at the end is
// appended as it is, since Kafka clients ignore a truncated last batch)
// to dst in Kafka's RecordBatch v2 form and returns the extended slice.
// The CRCs are derived, not recomputed: batches whose CRC was right stay
// right.
func AppendKafka(dst, data []byte) []byte {
	for len(data) > 0 {
		size, err := kafkaBatchSize(data)
		if err != nil || int8(data[posMagic]) != Magic {
			// A torn tail: give it as is (its length frames past
			// the end, so a Kafka client reads it as partial).
			return append(dst, data...)
		}
		start := len(dst)
		dst = append(dst, data[:size]...)
		batch := dst[start:]
		crc := binary.BigEndian.Uint32(batch[posCRC:])
		epoch := binary.BigEndian.Uint32(batch[posLeaderEpoch:])
		head := crc32.Checksum(batch[posMagic:posAttributes], castagnoli)
		binary.BigEndian.PutUint32(batch[posKafkaLeaderEpoch:], epoch)
		batch[posKafkaMagic] = byte(KafkaMagic)
		binary.BigEndian.PutUint32(batch[posKafkaCRC:], crc32cUncombine(crc, head, len(batch)-posAttributes))
		data = data[size:]
	}
	return dst
}

// kafkaBatchSize is the size of the batch b starts with (both formats
// frame it the same way).
func kafkaBatchSize(b []byte) (int, error) {
	if len(b) < HeaderSize {
		return 0, fmt.Errorf("%d bytes, less than a batch header: %w", len(b), ErrCorrupt)
	}
	n := Size(b)
	if n < HeaderSize || n > int64(len(b)) {
		return 0, fmt.Errorf("length field says %d bytes of %d: %w", n, len(b), ErrCorrupt)
	}
	return int(n), nil
}

// CRC32C (Castagnoli, reflected polynomial) arithmetic over GF(2): the
// CRC of a concatenation from the CRCs of its parts.
const castagnoliPoly = 0x82f63b78

// gf2Mul multiplies a and b modulo the polynomial (reflected: bit 31 is
// x^0).
func gf2Mul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo the polynomial.
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = gf2Mul(p, p)
	}
	return t
}()

// xPow8n is x^(8n) modulo the polynomial: the factor that shifts a CRC
// past n zero bytes.
func xPow8n(n int) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = gf2Mul(x2n[k&31], p)
		}
	}
	return p
}

// crc32cCombine is the CRC of A followed by B from crcA, crcB and B's
// length.
func crc32cCombine(crcA, crcB uint32, lenB int) uint32 {
	return gf2Mul(xPow8n(lenB), crcA) ^ crcB
}

// crc32cUncombine is the CRC of B from the CRC of A followed by B, crcA
// and B's length.
func crc32cUncombine(crcAB, crcA uint32, lenB int) uint32 {
	return gf2Mul(xPow8n(lenB), crcA) ^ crcAB
}
