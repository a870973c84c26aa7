package compress

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
)

// codecs are every codec the package implements, compressed ones first.
var codecs = []record.Codec{record.CodecGzip, record.CodecSnappy, record.CodecLZ4, record.CodecZstd, record.CodecNone}

var codecNames = map[record.Codec]string{
	record.CodecNone: "none", record.CodecGzip: "gzip", record.CodecSnappy: "snappy", record.CodecLZ4: "lz4", record.CodecZstd: "zstd",
}

func TestRoundTrip(t *testing.T) {
	repetitive := bytes.Repeat([]byte("sluice compresses batches, not records. "), 1000)
	random := make([]byte, 100_000)
	for i := range random {
		random[i] = byte(rand.Uint32())
	}
	for _, c := range codecs {
		for _, tc := range []struct {
			name string
			src  []byte
		}{
			{"repetitive", repetitive},
			{"random", random},
			{"one byte", []byte{7}},
			{"empty", []byte{}},
		} {
			t.Run(codecNames[c]+"/"+tc.name, func(t *testing.T) {
				prefix := []byte("keep")
				z, err := Compress(c, prefix, tc.src)
				require.NoError(t, err)
				require.Equal(t, "keep", string(z[:4]), "appends to dst")
				if c != record.CodecNone && tc.name == "repetitive" {
					require.Less(t, len(z), len(tc.src)/5, "repetitive input compresses")
				}
				out, err := Decompress(c, []byte("pre"), z[4:], 0)
				require.NoError(t, err)
				require.Equal(t, "pre", string(out[:3]), "appends to dst")
				require.Equal(t, tc.src, out[3:])

				out, err = Decompress(c, nil, z[4:], max(len(tc.src), 1))
				require.NoError(t, err, "output of exactly the limit is allowed")
				require.Equal(t, string(tc.src), string(out))
				if len(tc.src) > 1 {
					_, err = Decompress(c, nil, z[4:], len(tc.src)-1)
					require.ErrorIs(t, err, ErrTooLarge, "the limit is enforced")
				}
			})
		}
	}
}

// xerialFrame frames blocks as snappy-java's SnappyOutputStream does: the
// magic, version 1, minimum compatible version 1, then each block after its
// big-endian int32 length.
func xerialFrame(blocks ...[]byte) []byte {
	out := []byte("\x82SNAPPY\x00")
	out = binary.BigEndian.AppendUint32(out, 1)
	out = binary.BigEndian.AppendUint32(out, 1)
	for _, b := range blocks {
		out = binary.BigEndian.AppendUint32(out, uint32(len(b)))
		out = append(out, b...)
	}
	return out
}

// densestSnappy is the valid snappy block expanding the most: one literal
// byte, then copies of 64 bytes at offset 1, 3 bytes each (k of them).
func densestSnappy(k int) (block, want []byte) {
	block = binary.AppendUvarint(nil, uint64(1+64*k))
	block = append(block, 0x00, 'z') // a literal of 1 byte
	for range k {
		block = append(block, 63<<2|2, 1, 0) // copy 64 from offset 1
	}
	return block, bytes.Repeat([]byte{'z'}, 1+64*k)
}

func TestSnappyFramings(t *testing.T) {
	part1 := bytes.Repeat([]byte("kafka java client "), 2000)
	part2 := []byte("a short second chunk")
	part3 := bytes.Repeat([]byte{0}, 40_000)
	all := bytes.Join([][]byte{part1, part2, part3}, nil)
	dense, denseWant := densestSnappy(100_000)
	require.Greater(t, float64(len(denseWant))/float64(len(dense)), 21.3)
	for _, tc := range []struct {
		name string
		src  []byte
		want []byte
	}{
		{"raw block", snappy.Encode(nil, all), all},
		{"xerial, one chunk", xerialFrame(snappy.Encode(nil, all)), all},
		{"xerial, three chunks", xerialFrame(snappy.Encode(nil, part1), snappy.Encode(nil, part2), snappy.Encode(nil, part3)), all},
		{"xerial, no chunks", xerialFrame(), []byte{}},
		{"xerial, empty block", xerialFrame(snappy.Encode(nil, nil)), []byte{}},
		{"raw block expanding the most snappy can", dense, denseWant},
		{"xerial, chunk expanding the most snappy can", xerialFrame(snappy.Encode(nil, part1), dense), append(bytes.Clone(part1), denseWant...)},
		// A third-party xerial writer (a fork of the one sarama used),
		// which also writes chunks of 32 KiB.
		{"xerial package", xerial.Encode(nil, all), all},
		{"our block read by xerial package", nil, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.src == nil {
				z, err := Compress(record.CodecSnappy, nil, tc.want)
				require.NoError(t, err)
				out, err := xerial.Decode(z)
				require.NoError(t, err)
				require.Equal(t, tc.want, out)
				return
			}
			out, err := Decompress(record.CodecSnappy, nil, tc.src, 0)
			require.NoError(t, err)
			require.Equal(t, string(tc.want), string(out))
		})
	}
}

func TestLimit(t *testing.T) {
	const limit = 1 << 20
	zeros := make([]byte, limit+1)
	chunk := snappy.Encode(nil, make([]byte, limit/2))
	for _, tc := range []struct {
		name  string
		codec record.Codec
		src   func() []byte
	}{
		{"gzip", record.CodecGzip, func() []byte { z, _ := Compress(record.CodecGzip, nil, zeros); return z }},
		{"snappy raw", record.CodecSnappy, func() []byte { z, _ := Compress(record.CodecSnappy, nil, zeros); return z }},
		{"snappy xerial, one chunk", record.CodecSnappy, func() []byte { return xerialFrame(snappy.Encode(nil, zeros)) }},
		{"snappy xerial, chunks each under the limit", record.CodecSnappy, func() []byte {
			return xerialFrame(chunk, chunk, snappy.Encode(nil, []byte{1}))
		}},
		// A header claiming 4 GiB (varint 0xffffffff), refused before
		// any allocation.
		{"snappy claims 4 GiB", record.CodecSnappy, func() []byte { return []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0} }},
		{"lz4", record.CodecLZ4, func() []byte { z, _ := Compress(record.CodecLZ4, nil, zeros); return z }},
		{"zstd", record.CodecZstd, func() []byte { z, _ := Compress(record.CodecZstd, nil, zeros); return z }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.src()
			require.Less(t, len(src), limit/10, "the input is small")
			out, err := Decompress(tc.codec, []byte("pre"), src, limit)
			require.ErrorIs(t, err, ErrTooLarge)
			require.Equal(t, "pre", string(out), "dst is returned unchanged")
		})
	}
}

// TestSnappyAllocation: a block claiming more than snappy can expand to is
// refused before its output is allocated, even under the limit.
func TestSnappyAllocation(t *testing.T) {
	claim := binary.AppendUvarint(nil, 60<<20)                       // 60 MiB, under DefaultLimit
	claim = append(claim, bytes.Repeat([]byte{0xfe, 1, 0}, 1000)...) // 3000 bytes: at most 64000 out
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Decompress(record.CodecSnappy, nil, claim, 0)
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, snappy.ErrCorrupt)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "nothing like 60 MiB allocated")

	_, err = Decompress(record.CodecSnappy, nil, xerialFrame(snappy.Encode(nil, []byte("ok")), claim), 0)
	require.ErrorIs(t, err, snappy.ErrCorrupt, "in a xerial chunk too")
}

func TestDecompressGarbage(t *testing.T) {
	// A block in the s2 extension of snappy: literal "ab", a copy of 4
	// from offset 1, then a copy with offset 0 (s2's "repeat the last
	// offset"). snappy.Decode accepts it; Kafka's clients would not.
	s2Block := []byte{10, 0x04, 'a', 'b', 0x01, 0x01, 0x01, 0x00}
	if out, err := snappy.Decode(nil, s2Block); err != nil || len(out) != 10 {
		t.Fatalf("the s2 block does not decode with s2 as expected: %q %v", out, err)
	}
	good := snappy.Encode(nil, bytes.Repeat([]byte("abc"), 1000))
	header := xerialFrame()
	for _, tc := range []struct {
		name  string
		codec record.Codec
		src   []byte
	}{
		{"gzip empty", record.CodecGzip, nil},
		{"gzip not gzip", record.CodecGzip, []byte("hello, world")},
		{"gzip trailing garbage", record.CodecGzip, append(mustCompress(t, record.CodecGzip, []byte("x")), 1, 2, 3)},
		{"snappy empty", record.CodecSnappy, nil},
		{"snappy bad varint", record.CodecSnappy, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"snappy truncated block", record.CodecSnappy, good[:len(good)/2]},
		{"snappy claims more than it holds", record.CodecSnappy, append([]byte{0x80, 0x80, 0x04}, good[2:]...)},
		{"snappy s2 extension", record.CodecSnappy, s2Block},
		{"xerial header truncated", record.CodecSnappy, header[:12]},
		{"xerial chunk length truncated", record.CodecSnappy, append(bytes.Clone(header), 0, 0)},
		{"xerial chunk longer than what remains", record.CodecSnappy, xerialFrame(good)[:len(header)+4+len(good)-1]},
		{"xerial chunk length 2^32-1", record.CodecSnappy, append(bytes.Clone(header), 0xff, 0xff, 0xff, 0xff, 1, 2, 3)},
		{"xerial empty chunk", record.CodecSnappy, xerialFrame(nil)},
		{"xerial garbage chunk", record.CodecSnappy, xerialFrame(good, []byte("not snappy"))},
		{"codec 5", 5, []byte{1}},
		{"codec 7", 7, []byte{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Decompress(tc.codec, []byte("pre"), tc.src, 0)
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrTooLarge)
			require.Equal(t, "pre", string(out), "dst is returned unchanged")
			if tc.codec > record.CodecZstd {
				require.ErrorIs(t, err, ErrUnsupported)
			}
		})
	}
	_, err := Compress(6, nil, []byte{1})
	require.ErrorIs(t, err, ErrUnsupported)

	// Flipping any byte of a valid payload may give an error, never a
	// panic or output beyond the limit. Truncating it gives an error,
	// except where the format cannot tell: at a xerial chunk boundary
	// (the framing has no end marker), and to nothing for lz4 and zstd
	// (which decode empty input to no records).
	src := bytes.Repeat([]byte{1, 2, 3}, 5000)
	chunk1, chunk2 := snappy.Encode(nil, src[:7000]), snappy.Encode(nil, src[7000:])
	payloads := []struct {
		name   string
		codec  record.Codec
		z      []byte
		endsAt []int // truncations that decode
	}{
		{"xerial", record.CodecSnappy, xerialFrame(chunk1, chunk2), []int{len(header), len(header) + 4 + len(chunk1)}},
	}
	for _, c := range codecs[:4] {
		p := payloads[0]
		p.name, p.codec, p.z, p.endsAt = codecNames[c], c, mustCompress(t, c, src), nil
		if c == record.CodecLZ4 || c == record.CodecZstd {
			p.endsAt = []int{0}
		}
		payloads = append(payloads, p)
	}
	for _, p := range payloads {
		for i := range p.z {
			bad := bytes.Clone(p.z)
			bad[i] ^= 0x55
			if out, err := Decompress(p.codec, nil, bad, 1<<20); err == nil {
				require.LessOrEqual(t, len(out), 1<<20, p.name)
			}
			if _, err := Decompress(p.codec, nil, p.z[:i], 1<<20); err == nil && !slices.Contains(p.endsAt, i) {
				t.Errorf("%s truncated to %d of %d bytes decodes", p.name, i, len(p.z))
			}
		}
	}
}

func mustCompress(t *testing.T, c record.Codec, src []byte) []byte {
	t.Helper()
	z, err := Compress(c, nil, src)
	require.NoError(t, err)
	return z
}

func TestBatchRoundTrip(t *testing.T) {
	recs := make([]record.Record, 50)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{byte(i)}, 200),
			Headers: []record.RecordHeader{{Key: []byte("h"), Value: []byte("v")}}}
	}
	plain, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: 1000, ProducerID: 7, ProducerEpoch: 1, BaseSequence: 42}, recs)
	require.NoError(t, err)
	for _, c := range codecs[:4] {
		t.Run(codecNames[c], func(t *testing.T) {
			z, err := CompressBatch(nil, plain, c)
			require.NoError(t, err)
			require.Less(t, len(z), len(plain)/2)
			zb, rest, err := record.ReadBatch(z)
			require.NoError(t, err, "a compressed batch passes its CRC")
			require.Empty(t, rest)
			h := zb.Header()
			require.Equal(t, c, h.Attributes.Codec())
			require.Equal(t, int64(7), h.ProducerID)
			require.Equal(t, int32(42), h.BaseSequence)
			require.Equal(t, int32(50), h.RecordCount)
			_, err = log.ValidateLeaderBatch(z, 0)
			require.NoError(t, err)
			_, err = zb.Records()
			require.ErrorIs(t, err, record.ErrCompressed)

			back, err := DecompressBatch(nil, zb, 0)
			require.NoError(t, err)
			require.Equal(t, []byte(plain), []byte(back), "decompressing restores the original batch byte for byte")

			_, err = DecompressBatch(nil, zb, len(plain)/2)
			require.ErrorIs(t, err, ErrTooLarge)

			_, err = CompressBatch(nil, zb, c)
			require.Error(t, err, "compressing twice is refused")
		})
	}
	same, err := DecompressBatch(nil, plain, 0)
	require.NoError(t, err)
	require.Equal(t, []byte(plain), []byte(same))
}

// TestXerialBatch decodes a batch as Kafka's Java client writes it with
// compression.type=snappy: the records section xerial-framed.
func TestXerialBatch(t *testing.T) {
	recs := []record.Record{{Value: []byte("one")}, {OffsetDelta: 1, Key: []byte("k"), Value: []byte("two")}}
	plain, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: 1000}, recs)
	require.NoError(t, err)
	z, err := record.RecodeBatch(nil, plain, record.CodecSnappy, func(dst, src []byte) ([]byte, error) {
		return append(dst, xerialFrame(snappy.Encode(nil, src[:5]), snappy.Encode(nil, src[5:]))...), nil
	})
	require.NoError(t, err)
	back, err := DecompressBatch(nil, record.Batch(z), 0)
	require.NoError(t, err)
	require.Equal(t, []byte(plain), []byte(back))
}

func TestParseCodec(t *testing.T) {
	for name, want := range map[string]record.Codec{
		"": record.CodecNone, "none": record.CodecNone, "gzip": record.CodecGzip, "snappy": record.CodecSnappy,
		"lz4": record.CodecLZ4, "zstd": record.CodecZstd,
	} {
		got, err := ParseCodec(name)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	for _, name := range []string{"brotli", "GZIP", "lz4 "} {
		_, err := ParseCodec(name)
		require.ErrorContains(t, err, "choose none, gzip, snappy, lz4 or zstd")
		require.False(t, errors.Is(err, ErrTooLarge))
	}
}
