package record

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func testRecords() []Record {
	return []Record{
		{TimestampDelta: 0, OffsetDelta: 0, Key: []byte("k0"), Value: []byte("value zero")},
		{TimestampDelta: 5, OffsetDelta: 1, Key: nil, Value: []byte{}},
		{TimestampDelta: -3, OffsetDelta: 2, Key: []byte{}, Value: nil,
			Headers: []RecordHeader{{Key: []byte("h"), Value: []byte("v")}, {Key: []byte{}, Value: nil}}},
	}
}

func TestLogBatchRoundTrip(t *testing.T) {
	t.Parallel()
	h := BatchHeader{BaseOffset: 42, LeaderEpoch: 7, Attributes: AttrTransactional, FirstTimestamp: 1_700_000_000_000,
		ProducerID: 99, ProducerEpoch: 3, BaseSequence: 11}
	recs := testRecords()
	prefix := []byte("prefix")
	enc, err := AppendBatch(prefix, h, recs)
	require.NoError(t, err)
	require.Equal(t, "prefix", string(enc[:6]))

	b, rest, err := ReadBatch(enc[6:])
	require.NoError(t, err)
	require.Empty(t, rest)
	got := b.Header()
	require.Equal(t, int64(42), got.BaseOffset)
	require.Equal(t, int32(len(enc)-6-lengthPrefix), got.Length)
	require.Equal(t, Magic, got.Magic)
	require.Equal(t, int32(7), got.LeaderEpoch)
	require.True(t, got.Attributes.Transactional())
	require.False(t, got.Attributes.Control())
	require.Equal(t, CodecNone, got.Attributes.Codec())
	require.Equal(t, int32(2), got.LastOffsetDelta)
	require.Equal(t, int64(1_700_000_000_000), got.FirstTimestamp)
	require.Equal(t, int64(1_700_000_000_005), got.MaxTimestamp)
	require.Equal(t, int64(99), got.ProducerID)
	require.Equal(t, int16(3), got.ProducerEpoch)
	require.Equal(t, int32(11), got.BaseSequence)
	require.Equal(t, int32(3), got.RecordCount)
	require.Equal(t, int64(44), b.LastOffset())

	it, err := b.Records()
	require.NoError(t, err)
	var i int
	for it.Next() {
		r := it.Record()
		want := recs[i]
		require.Equal(t, want.TimestampDelta, r.TimestampDelta)
		require.Equal(t, want.OffsetDelta, r.OffsetDelta)
		require.Equal(t, want.Key == nil, r.Key == nil, "record %d key null", i)
		require.Equal(t, want.Value == nil, r.Value == nil, "record %d value null", i)
		require.Equal(t, string(want.Key), string(r.Key))
		require.Equal(t, string(want.Value), string(r.Value))
		require.Len(t, r.Headers, len(want.Headers))
		for j, hh := range want.Headers {
			require.Equal(t, string(hh.Key), string(r.Headers[j].Key))
			require.Equal(t, hh.Value == nil, r.Headers[j].Value == nil)
		}
		i++
	}
	require.NoError(t, it.Err())
	require.Equal(t, len(recs), i)
}

// TestLogBatchGolden pins the byte layout: a change here is a format change
// and needs a new magic.
func TestLogBatchGolden(t *testing.T) {
	t.Parallel()
	enc, err := AppendBatch(nil, BatchHeader{BaseOffset: 1, LeaderEpoch: 2, FirstTimestamp: 3, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]Record{{Key: []byte("k"), Value: []byte("v"), Headers: []RecordHeader{{Key: []byte("a"), Value: []byte("b")}}}})
	require.NoError(t, err)
	require.Equal(t, goldenBatch, hex.EncodeToString(enc))
	require.Equal(t, int64(1), int64(binary.BigEndian.Uint64(enc[0:])))
	require.Equal(t, uint32(len(enc)-12), binary.BigEndian.Uint32(enc[8:]))
	require.Equal(t, byte(1), enc[16])
	require.Equal(t, uint32(2), binary.BigEndian.Uint32(enc[17:]))
	require.Equal(t, uint32(1), binary.BigEndian.Uint32(enc[57:]))
}

const goldenBatch = "00000000000000010000003e5f99956a010000000200000000000000000000000000030000000000000003ffffffffffffffffffffffffffff0000000118000000026b02760202610262"

func TestLogBatchEncodeErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		h    BatchHeader
		recs []Record
	}{
		"no records":     {recs: nil},
		"compressed":     {h: BatchHeader{Attributes: Attributes(0).WithCodec(CodecZstd)}, recs: testRecords()},
		"unknown bits":   {h: BatchHeader{Attributes: 1 << 9}, recs: testRecords()},
		"negative base":  {h: BatchHeader{BaseOffset: -1}, recs: testRecords()},
		"deltas repeat":  {recs: []Record{{OffsetDelta: 0}, {OffsetDelta: 0}}},
		"negative delta": {recs: []Record{{OffsetDelta: -1}}},
	} {
		dst := []byte("x")
		out, err := AppendBatch(dst, tc.h, tc.recs)
		require.Error(t, err, name)
		require.Equal(t, "x", string(out), name)
	}
}

func TestLogBatchDecodeTruncatedAndFlipped(t *testing.T) {
	t.Parallel()
	enc, err := AppendBatch(nil, BatchHeader{FirstTimestamp: 10}, testRecords())
	require.NoError(t, err)
	for n := range len(enc) {
		_, _, err := ReadBatch(enc[:n])
		require.ErrorIs(t, err, ErrTruncated, "prefix of %d bytes", n)
	}
	// Every bit after the base offset is covered by the length check or the CRC.
	for bit := 8 * 8; bit < len(enc)*8; bit++ {
		c := append([]byte(nil), enc...)
		c[bit/8] ^= 1 << (bit % 8)
		_, _, err := ReadBatch(c)
		require.Error(t, err, "bit %d", bit)
		require.True(t, errors.Is(err, ErrCorrupt) || errors.Is(err, ErrTruncated), "bit %d: %v", bit, err)
	}
}

func TestLogBatchRecordErrors(t *testing.T) {
	t.Parallel()
	// A record section that lies, re-signed with a valid CRC, must fail
	// cleanly in the iterator.
	enc, err := AppendBatch(nil, BatchHeader{}, testRecords())
	require.NoError(t, err)
	for i := HeaderSize; i < len(enc); i++ {
		for _, v := range []byte{0x00, 0x01, 0x7f, 0x80, 0xff} {
			c := append([]byte(nil), enc...)
			c[i] = v
			setCRC(c)
			b, _, err := ReadBatch(c)
			require.NoError(t, err)
			it, err := b.Records()
			require.NoError(t, err)
			for it.Next() {
				_ = it.Record()
			}
			if it.Err() != nil {
				require.ErrorIs(t, it.Err(), ErrCorrupt)
			}
		}
	}
	// Record count above what the records hold.
	c := append([]byte(nil), enc...)
	binary.BigEndian.PutUint32(c[posRecordCount:], 3)
	binary.BigEndian.PutUint32(c[posLastOffsetDelta:], 3)
	setCRC(c)
	b, _, err := ReadBatch(c)
	require.NoError(t, err)
	it, err := b.Records()
	require.NoError(t, err)
	for it.Next() {
	}
	require.NoError(t, it.Err()) // 3 records present, count 3: fine
	binary.BigEndian.PutUint32(c[posRecordCount:], 4)
	setCRC(c)
	b, _, err = ReadBatch(c)
	require.NoError(t, err)
	it, err = b.Records()
	require.NoError(t, err)
	for it.Next() {
	}
	require.ErrorIs(t, it.Err(), ErrCorrupt)
}

func TestLogBatchCompressedRecords(t *testing.T) {
	t.Parallel()
	enc, err := AppendBatch(nil, BatchHeader{}, testRecords())
	require.NoError(t, err)
	binary.BigEndian.PutUint16(enc[posAttributes:], uint16(Attributes(0).WithCodec(CodecLZ4)))
	setCRC(enc)
	b, _, err := ReadBatch(enc)
	require.NoError(t, err)
	_, err = b.Records()
	require.ErrorIs(t, err, ErrCompressed)
}

func TestLogBatchAllocations(t *testing.T) {
	recs := testRecords()
	buf := make([]byte, 0, 4096)
	enc, err := AppendBatch(buf, BatchHeader{}, recs)
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_, _ = AppendBatch(buf[:0], BatchHeader{}, recs)
	}))
	var it RecordIter
	require.NoError(t, it.Reset(Batch(enc))) // warm the header slice
	for it.Next() {
	}
	require.Zero(t, testing.AllocsPerRun(100, func() {
		b, _, err := ReadBatch(enc)
		if err != nil {
			panic(err)
		}
		if err := it.Reset(b); err != nil {
			panic(err)
		}
		for it.Next() {
		}
	}))
}

// SetLogAppendTime marks a batch's timestamps as its append time: the
// type bit and max timestamp read back, the CRC matches again, every
// record's timestamp reads as the append time, and nothing else changes.
func TestLogBatchSetLogAppendTime(t *testing.T) {
	t.Parallel()
	h := BatchHeader{FirstTimestamp: 1_700_000_000_000, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, Attributes: AttrTransactional}
	enc, err := AppendBatch(nil, h, testRecords())
	require.NoError(t, err)
	b, _, err := ReadBatch(enc)
	require.NoError(t, err)
	before := b.Header()
	require.False(t, before.Attributes.LogAppendTime())
	require.Equal(t, before.FirstTimestamp+5, before.Timestamp(5), "CreateTime: the record's own")

	b.SetLogAppendTime(1_800_000_000_000)
	again, _, err := ReadBatch(enc)
	require.NoError(t, err, "the CRC covers the new fields")
	got := again.Header()
	require.True(t, got.Attributes.LogAppendTime())
	require.True(t, got.Attributes.Transactional(), "the other bits stay")
	require.Equal(t, int64(1_800_000_000_000), got.MaxTimestamp)
	require.Equal(t, int64(1_800_000_000_000), got.Timestamp(5), "LogAppendTime: the batch's")
	got.Attributes, got.MaxTimestamp, got.CRC = before.Attributes, before.MaxTimestamp, before.CRC
	require.Equal(t, before, got, "no other header field changed")

	// With the leader's stamp in the same pass (one CRC).
	again.SetLeaderAppendTime(40, 3, 1_900_000_000_000)
	led, _, err := ReadBatch(enc)
	require.NoError(t, err, "the CRC covers all three")
	h2 := led.Header()
	require.Equal(t, [3]int64{40, 3, 1_900_000_000_000}, [3]int64{h2.BaseOffset, int64(h2.LeaderEpoch), h2.MaxTimestamp})
	require.True(t, h2.Attributes.LogAppendTime())
}

// SetProducer renumbers a batch in place: the new producer fields read
// back, the CRC matches again, and nothing else changes.
func TestLogBatchSetProducer(t *testing.T) {
	t.Parallel()
	h := BatchHeader{LeaderEpoch: 2, FirstTimestamp: 1_700_000_000_000, ProducerID: 5, ProducerEpoch: 1, BaseSequence: 40}
	enc, err := AppendBatch(nil, h, testRecords())
	require.NoError(t, err)
	b, _, err := ReadBatch(enc)
	require.NoError(t, err)
	before := b.Header()

	b.SetProducer(77, 3, 9)
	again, rest, err := ReadBatch(enc)
	require.NoError(t, err, "the CRC covers the new fields")
	require.Empty(t, rest)
	got := again.Header()
	require.Equal(t, int64(77), got.ProducerID)
	require.Equal(t, int16(3), got.ProducerEpoch)
	require.Equal(t, int32(9), got.BaseSequence)
	got.ProducerID, got.ProducerEpoch, got.BaseSequence, got.CRC = before.ProducerID, before.ProducerEpoch, before.BaseSequence, before.CRC
	require.Equal(t, before, got, "no other header field changed")
	it, err := again.Records()
	require.NoError(t, err)
	n := 0
	for it.Next() {
		n++
	}
	require.NoError(t, it.Err())
	require.Equal(t, 3, n)
}

// TestLogBatchNextChecked: NextChecked splits checked batches by their
// length and header without checking the CRC again, and refuses framing
// that does not hold.
func TestLogBatchNextChecked(t *testing.T) {
	t.Parallel()
	b1, err := AppendBatch(nil, BatchHeader{BaseOffset: 0}, testRecords())
	require.NoError(t, err)
	b2, err := AppendBatch(nil, BatchHeader{BaseOffset: 3}, testRecords()[:1])
	require.NoError(t, err)
	data := append(append([]byte{}, b1...), b2...)
	data[posCRC] ^= 0xff // a CRC check would refuse the first batch

	b, rest, err := NextChecked(data)
	require.NoError(t, err)
	require.Equal(t, len(b1), len(b))
	require.EqualValues(t, 2, b.LastOffset())
	b, rest, err = NextChecked(rest)
	require.NoError(t, err)
	require.EqualValues(t, 3, b.BaseOffset())
	require.Empty(t, rest)

	_, _, err = NextChecked(b1[:HeaderSize-1])
	require.ErrorIs(t, err, ErrTruncated)
	_, _, err = NextChecked(b1[:len(b1)-1])
	require.ErrorIs(t, err, ErrCorrupt, "a length past the end")
}
