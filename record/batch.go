package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
)

// Magic is the batch format version this package writes and reads.
const Magic int8 = 1

// HeaderSize is the size of a batch header; the records start after it.
const HeaderSize = 61

// Byte positions of the header fields (see the package doc).
const (
	posBaseOffset      = 0
	posLength          = 8
	posCRC             = 12
	posMagic           = 16
	posLeaderEpoch     = 17
	posAttributes      = 21
	posLastOffsetDelta = 23
	posFirstTimestamp  = 27
	posMaxTimestamp    = 35
	posProducerID      = 43
	posProducerEpoch   = 51
	posBaseSequence    = 53
	posRecordCount     = 57

	// lengthPrefix is the part of a batch that its length field does not count.
	lengthPrefix = 12
)

// castagnoli is the CRC32C table; it is read-only after initialisation.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors returned by the batch decoder. Callers branch on them with errors.Is.
var (
	// ErrTruncated means the input ends inside a batch: more bytes are
	// needed. In a segment file it marks a torn write.
	ErrTruncated = errors.New("batch truncated")
	// ErrCorrupt means the bytes are not a valid batch: a bad length, a
	// CRC mismatch, an impossible field or a malformed record.
	ErrCorrupt = errors.New("batch corrupt")
	// ErrUnsupportedMagic means the batch has a magic byte this package does
	// not know. The batch is otherwise intact (its CRC matched).
	ErrUnsupportedMagic = errors.New("unsupported batch magic")
	// ErrCompressed means the records of a compressed batch were asked for;
	// this package does not decompress.
	ErrCompressed = errors.New("batch is compressed")
)

// Codec is a compression codec, stored in attribute bits 0-2.
type Codec uint8

// Compression codecs.
const (
	CodecNone Codec = iota
	CodecGzip
	CodecSnappy
	CodecLZ4
	CodecZstd
)

// Attributes are the batch attribute bits.
type Attributes int16

// Attribute bits.
const (
	codecMask Attributes = 0x07
	// AttrLogAppendTime: the batch's timestamp type is LogAppendTime, the
	// time its leader appended it, which is its max timestamp and every
	// record's timestamp (Kafka's message.timestamp.type); without it,
	// CreateTime, each record's own.
	AttrLogAppendTime Attributes = 1 << 3
	AttrTransactional Attributes = 1 << 4
	AttrControl       Attributes = 1 << 5
	attrKnown                    = codecMask | AttrLogAppendTime | AttrTransactional | AttrControl
)

// Codec returns the compression codec of the records section.
func (a Attributes) Codec() Codec { return Codec(a & codecMask) }

// Transactional reports whether the batch belongs to a transaction.
func (a Attributes) Transactional() bool { return a&AttrTransactional != 0 }

// Control reports whether the batch is a control batch (a transaction marker).
func (a Attributes) Control() bool { return a&AttrControl != 0 }

// LogAppendTime reports whether the batch's timestamps are the time its
// leader appended it (AttrLogAppendTime).
func (a Attributes) LogAppendTime() bool { return a&AttrLogAppendTime != 0 }

// WithCodec returns a with its codec bits set to c.
func (a Attributes) WithCodec(c Codec) Attributes { return a&^codecMask | Attributes(c)&codecMask }

// BatchHeader is the decoded header of a batch.
type BatchHeader struct {
	BaseOffset      int64
	Length          int32 // bytes after the length field
	CRC             uint32
	Magic           int8
	LeaderEpoch     int32
	Attributes      Attributes
	LastOffsetDelta int32
	FirstTimestamp  int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     int32
}

// LastOffset is the offset of the last record of the batch.
func (h *BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Size is the encoded size of the whole batch.
func (h *BatchHeader) Size() int { return lengthPrefix + int(h.Length) }

// Timestamp is the timestamp of the batch's record with timestamp delta
// delta: the batch's max timestamp with LogAppendTime, as Kafka's clients
// read it, else the first timestamp plus delta.
func (h *BatchHeader) Timestamp(delta int64) int64 {
	if h.Attributes.LogAppendTime() {
		return h.MaxTimestamp
	}
	return h.FirstTimestamp + delta
}

// RecordHeader is one key/value header of a record. A nil Value is null.
type RecordHeader struct {
	Key   []byte
	Value []byte
}

// Record is one record of a batch. Key and Value nil mean null. When it comes
// from a RecordIter, every slice aliases the batch and is valid only until the
// iterator's next call to Next.
type Record struct {
	Attributes     int8
	TimestampDelta int64
	OffsetDelta    int32
	Key            []byte
	Value          []byte
	Headers        []RecordHeader
}

// AppendBatch appends the encoding of one uncompressed batch to dst and
// returns the extended slice. From h it uses BaseOffset, LeaderEpoch,
// Attributes (the codec must be CodecNone), FirstTimestamp, ProducerID,
// ProducerEpoch and BaseSequence; it computes Magic, Length, CRC,
// RecordCount, LastOffsetDelta (the last record's offset delta) and
// MaxTimestamp. Offset deltas must start at 0 or more and strictly increase.
// It allocates only when dst lacks capacity. On error dst is returned
// unchanged in length.
func AppendBatch(dst []byte, h BatchHeader, records []Record) ([]byte, error) {
	if h.Attributes.Codec() != CodecNone {
		return dst, fmt.Errorf("encode batch: codec %d: %w", h.Attributes.Codec(), ErrCompressed)
	}
	if h.Attributes&^attrKnown != 0 {
		return dst, fmt.Errorf("encode batch: unknown attribute bits %#x", int16(h.Attributes&^attrKnown))
	}
	if h.BaseOffset < 0 {
		return dst, fmt.Errorf("encode batch: negative base offset %d", h.BaseOffset)
	}
	if len(records) == 0 || len(records) > math.MaxInt32 {
		return dst, fmt.Errorf("encode batch: %d records", len(records))
	}
	start := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	maxDelta := int64(0)
	prev := int32(-1)
	for i := range records {
		r := &records[i]
		if r.OffsetDelta <= prev {
			return dst[:start], fmt.Errorf("encode batch: record %d offset delta %d not above %d", i, r.OffsetDelta, prev)
		}
		prev = r.OffsetDelta
		if r.TimestampDelta > maxDelta {
			maxDelta = r.TimestampDelta
		}
		dst = appendRecord(dst, r)
	}
	if len(dst)-start-lengthPrefix > math.MaxInt32 {
		return dst[:start], fmt.Errorf("encode batch: %d bytes is too large", len(dst)-start)
	}
	b := dst[start:]
	binary.BigEndian.PutUint64(b[posBaseOffset:], uint64(h.BaseOffset))
	binary.BigEndian.PutUint32(b[posLength:], uint32(len(b)-lengthPrefix))
	b[posMagic] = byte(Magic)
	binary.BigEndian.PutUint32(b[posLeaderEpoch:], uint32(h.LeaderEpoch))
	binary.BigEndian.PutUint16(b[posAttributes:], uint16(h.Attributes))
	binary.BigEndian.PutUint32(b[posLastOffsetDelta:], uint32(prev))
	binary.BigEndian.PutUint64(b[posFirstTimestamp:], uint64(h.FirstTimestamp))
	binary.BigEndian.PutUint64(b[posMaxTimestamp:], uint64(h.FirstTimestamp+maxDelta))
	binary.BigEndian.PutUint64(b[posProducerID:], uint64(h.ProducerID))
	binary.BigEndian.PutUint16(b[posProducerEpoch:], uint16(h.ProducerEpoch))
	binary.BigEndian.PutUint32(b[posBaseSequence:], uint32(h.BaseSequence))
	binary.BigEndian.PutUint32(b[posRecordCount:], uint32(len(records)))
	setCRC(b)
	return dst, nil
}

func setCRC(b []byte) {
	binary.BigEndian.PutUint32(b[posCRC:], crc32.Checksum(b[posMagic:], castagnoli))
}

func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

func bytesLen(b []byte) int {
	if b == nil {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.AppendVarint(dst, -1)
	}
	dst = binary.AppendVarint(dst, int64(len(b)))
	return append(dst, b...)
}

func appendRecord(dst []byte, r *Record) []byte {
	n := 1 + varintLen(r.TimestampDelta) + varintLen(int64(r.OffsetDelta)) +
		bytesLen(r.Key) + bytesLen(r.Value) + varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		kl := len(h.Key)
		n += varintLen(int64(kl)) + kl + bytesLen(h.Value)
	}
	dst = binary.AppendVarint(dst, int64(n))
	dst = append(dst, byte(r.Attributes))
	dst = binary.AppendVarint(dst, r.TimestampDelta)
	dst = binary.AppendVarint(dst, int64(r.OffsetDelta))
	dst = appendBytes(dst, r.Key)
	dst = appendBytes(dst, r.Value)
	dst = binary.AppendVarint(dst, int64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = binary.AppendVarint(dst, int64(len(h.Key)))
		dst = append(dst, h.Key...)
		dst = appendBytes(dst, h.Value)
	}
	return dst
}

// ParseBatchHeader decodes the header at the start of b without checking the
// CRC or that the whole batch is present. It fails with ErrTruncated when b
// is shorter than HeaderSize and ErrCorrupt when a field is impossible.
func ParseBatchHeader(b []byte) (BatchHeader, error) {
	var h BatchHeader
	if len(b) < HeaderSize {
		return h, fmt.Errorf("header needs %d bytes, have %d: %w", HeaderSize, len(b), ErrTruncated)
	}
	h.BaseOffset = int64(binary.BigEndian.Uint64(b[posBaseOffset:]))
	h.Length = int32(binary.BigEndian.Uint32(b[posLength:]))
	h.CRC = binary.BigEndian.Uint32(b[posCRC:])
	h.Magic = int8(b[posMagic])
	h.LeaderEpoch = int32(binary.BigEndian.Uint32(b[posLeaderEpoch:]))
	h.Attributes = Attributes(binary.BigEndian.Uint16(b[posAttributes:]))
	h.LastOffsetDelta = int32(binary.BigEndian.Uint32(b[posLastOffsetDelta:]))
	h.FirstTimestamp = int64(binary.BigEndian.Uint64(b[posFirstTimestamp:]))
	h.MaxTimestamp = int64(binary.BigEndian.Uint64(b[posMaxTimestamp:]))
	h.ProducerID = int64(binary.BigEndian.Uint64(b[posProducerID:]))
	h.ProducerEpoch = int16(binary.BigEndian.Uint16(b[posProducerEpoch:]))
	h.BaseSequence = int32(binary.BigEndian.Uint32(b[posBaseSequence:]))
	h.RecordCount = int32(binary.BigEndian.Uint32(b[posRecordCount:]))
	if err := h.check(); err != nil {
		return h, err
	}
	return h, nil
}

// check validates the fields that do not need the CRC.
func (h *BatchHeader) check() error {
	switch {
	case h.Length < HeaderSize-lengthPrefix:
		return fmt.Errorf("length %d below header size: %w", h.Length, ErrCorrupt)
	case h.BaseOffset < 0:
		return fmt.Errorf("negative base offset %d: %w", h.BaseOffset, ErrCorrupt)
	case h.LastOffsetDelta < 0:
		return fmt.Errorf("negative last offset delta %d: %w", h.LastOffsetDelta, ErrCorrupt)
	case h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta)-1:
		return fmt.Errorf("last offset overflows: %w", ErrCorrupt)
	case h.RecordCount < 0:
		return fmt.Errorf("negative record count %d: %w", h.RecordCount, ErrCorrupt)
	case int64(h.RecordCount) > int64(h.LastOffsetDelta)+1:
		return fmt.Errorf("record count %d above offset span %d: %w", h.RecordCount, int64(h.LastOffsetDelta)+1, ErrCorrupt)
	}
	return nil
}

// Batch is one whole encoded batch whose framing and CRC have been checked
// (by ReadBatch). It aliases the bytes it was read from.
type Batch []byte

// ReadBatch reads the first batch of b and returns it with the bytes after
// it. It checks the length against the bytes present (ErrTruncated when they
// are too few), the header fields and the CRC (ErrCorrupt) and the magic
// (ErrUnsupportedMagic). It does not decode the records. It never allocates
// except for the error.
func ReadBatch(b []byte) (Batch, []byte, error) {
	if len(b) < lengthPrefix {
		return nil, b, fmt.Errorf("batch needs %d bytes, have %d: %w", lengthPrefix, len(b), ErrTruncated)
	}
	length := int32(binary.BigEndian.Uint32(b[posLength:]))
	if length < HeaderSize-lengthPrefix {
		return nil, b, fmt.Errorf("length %d below header size: %w", length, ErrCorrupt)
	}
	if int64(length) > int64(len(b)-lengthPrefix) {
		return nil, b, fmt.Errorf("batch of %d bytes, have %d: %w", int64(length)+lengthPrefix, len(b), ErrTruncated)
	}
	size := lengthPrefix + int(length)
	h, err := ParseBatchHeader(b[:size])
	if err != nil {
		return nil, b, err
	}
	if got := crc32.Checksum(b[posMagic:size], castagnoli); got != h.CRC {
		return nil, b, fmt.Errorf("crc %08x, header says %08x: %w", got, h.CRC, ErrCorrupt)
	}
	if h.Magic != Magic {
		return nil, b, fmt.Errorf("magic %d: %w", h.Magic, ErrUnsupportedMagic)
	}
	return Batch(b[:size]), b[size:], nil
}

// NextChecked splits the first batch off data whose batches have been
// checked already (by ReadBatch, or by a log read that checks what it
// returns): it reads the length and the header, not the CRC again. It
// fails on bytes too short for a header (ErrTruncated), a length past the
// end or below the header size, and a header that does not parse
// (ErrCorrupt).
func NextChecked(data []byte) (Batch, []byte, error) {
	if len(data) < HeaderSize {
		return nil, data, fmt.Errorf("%d bytes left: %w", len(data), ErrTruncated)
	}
	n := Size(data)
	if n < HeaderSize || n > int64(len(data)) {
		return nil, data, fmt.Errorf("batch of %d bytes, have %d: %w", n, len(data), ErrCorrupt)
	}
	if _, err := ParseBatchHeader(data[:n]); err != nil {
		return nil, data, err
	}
	return Batch(data[:n]), data[n:], nil
}

// Header decodes the header of a checked batch.
func (b Batch) Header() BatchHeader {
	h, _ := ParseBatchHeader(b)
	return h
}

// BaseOffset is the offset of the first record.
func (b Batch) BaseOffset() int64 { return int64(binary.BigEndian.Uint64(b[posBaseOffset:])) }

// LastOffset is the offset of the last record.
func (b Batch) LastOffset() int64 {
	return b.BaseOffset() + int64(int32(binary.BigEndian.Uint32(b[posLastOffsetDelta:])))
}

// LeaderEpoch is the epoch of the leader that appended the batch.
func (b Batch) LeaderEpoch() int32 { return int32(binary.BigEndian.Uint32(b[posLeaderEpoch:])) }

// MaxTimestamp is the largest record timestamp of the batch.
func (b Batch) MaxTimestamp() int64 { return int64(binary.BigEndian.Uint64(b[posMaxTimestamp:])) }

// SetProducer rewrites the producer id, producer epoch and base sequence of
// a checked batch in place and recomputes its CRC. An idempotent producer
// uses it to number a batch when it first sends it, and to renumber one
// that was certainly not written, without encoding (or compressing) the
// records again.
func (b Batch) SetProducer(id int64, epoch int16, baseSequence int32) {
	binary.BigEndian.PutUint64(b[posProducerID:], uint64(id))
	binary.BigEndian.PutUint16(b[posProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(b[posBaseSequence:], uint32(baseSequence))
	setCRC(b)
}

// SetLogAppendTime marks a checked batch's timestamps as LogAppendTime
// ts in place (its timestamp type bit and max timestamp; the records keep
// their deltas, which readers then ignore, as in Kafka) and recomputes its
// CRC.
func (b Batch) SetLogAppendTime(ts int64) {
	b.setLogAppendTime(ts)
	setCRC(b)
}

func (b Batch) setLogAppendTime(ts int64) {
	a := Attributes(binary.BigEndian.Uint16(b[posAttributes:])) | AttrLogAppendTime
	binary.BigEndian.PutUint16(b[posAttributes:], uint16(a))
	binary.BigEndian.PutUint64(b[posMaxTimestamp:], uint64(ts))
}

// SetLeaderAppendTime is SetLeader and SetLogAppendTime in one pass over
// the batch (one CRC): a leader appending to a LogAppendTime topic.
func (b Batch) SetLeaderAppendTime(baseOffset int64, leaderEpoch int32, ts int64) {
	b.setLogAppendTime(ts)
	b.SetLeader(baseOffset, leaderEpoch)
}

// SetLeader stamps the base offset and leader epoch into a checked batch in
// place and recomputes its CRC: a leader does it once when it appends a
// producer's batch, and followers append the leader's bytes unchanged.
func (b Batch) SetLeader(baseOffset int64, leaderEpoch int32) {
	binary.BigEndian.PutUint64(b[posBaseOffset:], uint64(baseOffset))
	binary.BigEndian.PutUint32(b[posLeaderEpoch:], uint32(leaderEpoch))
	setCRC(b)
}

// PrefixSize is the size of a batch's base offset and length fields, the
// part that its length field does not count.
const PrefixSize = lengthPrefix

// Size returns the whole size of the batch that starts with prefix (at
// least PrefixSize bytes), from its length field; it checks nothing.
func Size(prefix []byte) int64 {
	return int64(int32(binary.BigEndian.Uint32(prefix[posLength:]))) + lengthPrefix
}

// Records returns an iterator over the records of an uncompressed batch, or
// ErrCompressed.
func (b Batch) Records() (*RecordIter, error) {
	it := &RecordIter{}
	if err := it.Reset(b); err != nil {
		return nil, err
	}
	return it, nil
}

// RecordIter decodes the records of a batch one at a time. A zero RecordIter
// is ready for Reset; reusing one across batches reuses its header storage.
type RecordIter struct {
	buf       []byte
	left      int32
	lastDelta int32
	prevDelta int64
	rec       Record
	err       error
}

// Reset points the iterator at the records of b. It fails with ErrCompressed
// for a compressed batch.
func (it *RecordIter) Reset(b Batch) error {
	h := b.Header()
	if h.Attributes.Codec() != CodecNone {
		return fmt.Errorf("codec %d: %w", h.Attributes.Codec(), ErrCompressed)
	}
	it.buf = b[HeaderSize:]
	it.left = h.RecordCount
	it.lastDelta = h.LastOffsetDelta
	it.prevDelta = -1
	it.err = nil
	it.rec.Headers = it.rec.Headers[:0]
	return nil
}

// Next decodes the next record. It returns false at the end of the batch or
// on an error, which Err then reports.
func (it *RecordIter) Next() bool {
	if it.err != nil {
		return false
	}
	if it.left == 0 {
		if len(it.buf) != 0 {
			it.err = fmt.Errorf("%d bytes after the last record: %w", len(it.buf), ErrCorrupt)
		}
		return false
	}
	n, body, err := readLen(it.buf)
	if err != nil || n < 0 {
		it.err = fmt.Errorf("record length: %w", ErrCorrupt)
		return false
	}
	rest := body[n:]
	if err := it.decode(body[:n]); err != nil {
		it.err = err
		return false
	}
	it.buf = rest
	it.left--
	return true
}

// Record returns the record decoded by the last Next. Its slices alias the
// batch and its Headers slice is reused by the next call to Next.
func (it *RecordIter) Record() *Record { return &it.rec }

// Err reports the error that stopped the iteration, or nil at a clean end.
func (it *RecordIter) Err() error { return it.err }

func (it *RecordIter) decode(b []byte) error {
	r := &it.rec
	if len(b) < 1 {
		return fmt.Errorf("empty record: %w", ErrCorrupt)
	}
	r.Attributes = int8(b[0])
	b = b[1:]
	ts, n := binary.Varint(b)
	if n <= 0 {
		return fmt.Errorf("timestamp delta: %w", ErrCorrupt)
	}
	b = b[n:]
	od, n := binary.Varint(b)
	if n <= 0 || od <= it.prevDelta || od > int64(it.lastDelta) {
		return fmt.Errorf("offset delta: %w", ErrCorrupt)
	}
	b = b[n:]
	it.prevDelta = od
	r.TimestampDelta = ts
	r.OffsetDelta = int32(od)
	var err error
	if r.Key, b, err = readBytes(b); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	if r.Value, b, err = readBytes(b); err != nil {
		return fmt.Errorf("value: %w", err)
	}
	count, n := binary.Varint(b)
	// Each header needs at least two bytes, which bounds the allocation.
	if n <= 0 || count < 0 || count > int64(len(b)-n)/2 {
		return fmt.Errorf("header count: %w", ErrCorrupt)
	}
	b = b[n:]
	r.Headers = r.Headers[:0]
	for range count {
		kl, rest, err := readLen(b)
		if err != nil || kl < 0 {
			return fmt.Errorf("header key: %w", ErrCorrupt)
		}
		key := rest[:kl:kl]
		var val []byte
		if val, b, err = readBytes(rest[kl:]); err != nil {
			return fmt.Errorf("header value: %w", err)
		}
		r.Headers = append(r.Headers, RecordHeader{Key: key, Value: val})
	}
	if len(b) != 0 {
		return fmt.Errorf("%d bytes after record fields: %w", len(b), ErrCorrupt)
	}
	return nil
}

// readLen reads a varint length that must be -1 or fit in what follows it.
func readLen(b []byte) (int, []byte, error) {
	v, n := binary.Varint(b)
	if n <= 0 || v < -1 || v > int64(len(b)-n) {
		return 0, b, ErrCorrupt
	}
	return int(v), b[n:], nil
}

// readBytes reads a varint-length-prefixed byte string; -1 is nil.
func readBytes(b []byte) ([]byte, []byte, error) {
	l, rest, err := readLen(b)
	if err != nil {
		return nil, b, err
	}
	if l < 0 {
		return nil, rest, nil
	}
	return rest[:l:l], rest[l:], nil
}

// RecodeBatch appends to dst a copy of b whose records section is
// convert(records section of b) and whose codec is c: this is how a
// compressed batch is built from an uncompressed one and decoded back
// (convert compresses or decompresses; this package has no codecs). Every
// other header field is kept; length and CRC are recomputed. b must be a
// whole batch that passed ReadBatch. On error dst is returned unchanged in
// length.
func RecodeBatch(dst []byte, b Batch, c Codec, convert func(dst, src []byte) ([]byte, error)) ([]byte, error) {
	if len(b) < HeaderSize {
		return dst, fmt.Errorf("recode batch: %d bytes: %w", len(b), ErrTruncated)
	}
	start := len(dst)
	dst = append(dst, b[:HeaderSize]...)
	dst, err := convert(dst, b[HeaderSize:])
	if err != nil {
		return dst[:start], fmt.Errorf("recode batch: %w", err)
	}
	if len(dst)-start-lengthPrefix > math.MaxInt32 {
		return dst[:start], fmt.Errorf("recode batch: %d bytes is too large", len(dst)-start)
	}
	out := dst[start:]
	binary.BigEndian.PutUint32(out[posLength:], uint32(len(out)-lengthPrefix))
	attrs := Attributes(binary.BigEndian.Uint16(out[posAttributes:])).WithCodec(c)
	binary.BigEndian.PutUint16(out[posAttributes:], uint16(attrs))
	setCRC(out)
	return dst, nil
}
