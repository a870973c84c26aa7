package compress

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
)

func TestRoundTrip(t *testing.T) {
	src := bytes.Repeat([]byte("sluice compresses batches, not records. "), 1000)
	for _, c := range []record.Codec{record.CodecNone, record.CodecZstd, record.CodecLZ4} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			prefix := []byte("keep")
			z, err := Compress(c, prefix, src)
			require.NoError(t, err)
			require.Equal(t, "keep", string(z[:4]), "appends to dst")
			if c != record.CodecNone {
				require.Less(t, len(z), len(src)/5, "repetitive input compresses")
			}
			out, err := Decompress(c, nil, z[4:], 0)
			require.NoError(t, err)
			require.Equal(t, src, out)

			_, err = Decompress(c, nil, z[4:], len(src)-1)
			require.ErrorIs(t, err, ErrTooLarge, "the limit is enforced")
		})
	}
}

func TestDecompressGarbage(t *testing.T) {
	for _, c := range []record.Codec{record.CodecZstd, record.CodecLZ4} {
		z, err := Compress(c, nil, bytes.Repeat([]byte{1, 2, 3}, 5000))
		require.NoError(t, err)
		for i := range z {
			bad := bytes.Clone(z)
			bad[i] ^= 0x55
			out, err := Decompress(c, nil, bad, 1<<20)
			if err == nil {
				require.LessOrEqual(t, len(out), 1<<20)
			}
		}
	}
	_, err := Decompress(record.CodecSnappy, nil, []byte{1}, 0)
	require.ErrorIs(t, err, ErrUnsupported)
	_, err = Compress(record.CodecGzip, nil, []byte{1})
	require.ErrorIs(t, err, ErrUnsupported)
}

func TestBatchRoundTrip(t *testing.T) {
	recs := make([]record.Record, 50)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte(fmt.Sprint("k", i)), Value: bytes.Repeat([]byte{byte(i)}, 200),
			Headers: []record.RecordHeader{{Key: []byte("h"), Value: []byte("v")}}}
	}
	plain, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: 1000, ProducerID: 7, ProducerEpoch: 1, BaseSequence: 42}, recs)
	require.NoError(t, err)
	for _, c := range []record.Codec{record.CodecZstd, record.CodecLZ4} {
		z, err := CompressBatch(nil, plain, c)
		require.NoError(t, err)
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

		_, err = CompressBatch(nil, zb, c)
		require.Error(t, err, "compressing twice is refused")
	}
	same, err := DecompressBatch(nil, plain, 0)
	require.NoError(t, err)
	require.Equal(t, []byte(plain), []byte(same))
}

func TestParseCodec(t *testing.T) {
	for name, want := range map[string]record.Codec{"": record.CodecNone, "none": record.CodecNone, "zstd": record.CodecZstd, "lz4": record.CodecLZ4} {
		got, err := ParseCodec(name)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ParseCodec("gzip")
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrTooLarge))
}
