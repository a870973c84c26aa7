package record

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestControlRecordRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []ControlRecord{
		{Type: ControlAbort}, {Type: ControlCommit, CoordinatorEpoch: 7}, {Type: ControlCommit, CoordinatorEpoch: -1},
		{Type: ControlAbort, CoordinatorEpoch: 1<<31 - 1},
	} {
		key, value := c.AppendKey(nil), c.AppendValue(nil)
		// Kafka's layout: key version 0 + type, value version 0 + epoch.
		require.Equal(t, []byte{0, 0, 0, byte(c.Type)}, key)
		require.Len(t, value, 6)
		require.Equal(t, uint32(c.CoordinatorEpoch), binary.BigEndian.Uint32(value[2:]))
		got, err := ParseControlRecord(key, value)
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	require.Equal(t, "abort", ControlAbort.String())
	require.Equal(t, "commit", ControlCommit.String())
	require.Equal(t, "control type 7", ControlType(7).String())
}

func TestControlRecordParseErrors(t *testing.T) {
	t.Parallel()
	key, value := []byte{0, 0, 0, 1}, []byte{0, 0, 0, 0, 0, 5}
	tests := []struct {
		name       string
		key, value []byte
	}{
		{"nil key", nil, value},
		{"short key", key[:3], value},
		{"long key", append(append([]byte(nil), key...), 0), value},
		{"key version 1", []byte{0, 1, 0, 1}, value},
		{"unknown type", []byte{0, 0, 0, 2}, value},
		{"negative type", []byte{0, 0, 0xff, 0xff}, value},
		{"nil value", key, nil},
		{"short value", key, value[:5]},
		{"long value", key, append(append([]byte(nil), value...), 0)},
		{"value version 1", key, []byte{0, 1, 0, 0, 0, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseControlRecord(tt.key, tt.value)
			require.ErrorIs(t, err, ErrInvalidControlRecord)
		})
	}
}

func TestControlRecordMarkerBatch(t *testing.T) {
	t.Parallel()
	c := ControlRecord{Type: ControlCommit, CoordinatorEpoch: 4}
	h, recs := MarkerBatch(42, 3, 1700, c)
	h.BaseOffset, h.LeaderEpoch = 100, 2
	buf, err := AppendBatch(nil, h, recs)
	require.NoError(t, err)
	b, rest, err := ReadBatch(buf)
	require.NoError(t, err)
	require.Empty(t, rest)
	got := b.Header()
	require.True(t, got.Attributes.Control())
	require.True(t, got.Attributes.Transactional())
	require.Equal(t, CodecNone, got.Attributes.Codec())
	require.Equal(t, int64(42), got.ProducerID)
	require.Equal(t, int16(3), got.ProducerEpoch)
	require.Equal(t, int32(-1), got.BaseSequence)
	require.Equal(t, int32(1), got.RecordCount)
	require.Equal(t, int64(100), got.LastOffset())
	require.Equal(t, int64(1700), got.MaxTimestamp)
	dec, err := ReadControlRecord(b)
	require.NoError(t, err)
	require.Equal(t, c, dec)
}

func TestControlRecordReadErrors(t *testing.T) {
	t.Parallel()
	c := ControlRecord{Type: ControlAbort}
	enc := func(h BatchHeader, recs []Record) Batch {
		buf, err := AppendBatch(nil, h, recs)
		require.NoError(t, err)
		b, _, err := ReadBatch(buf)
		require.NoError(t, err)
		return b
	}
	h, recs := MarkerBatch(1, 0, 0, c)
	tests := []struct {
		name string
		b    Batch
	}{
		{"not a control batch", enc(BatchHeader{ProducerID: 1}, recs)},
		{"two records", enc(h, []Record{recs[0], {OffsetDelta: 1, Key: recs[0].Key, Value: recs[0].Value}})},
		{"bad key", enc(h, []Record{{Key: []byte{0, 0, 0, 9}, Value: recs[0].Value}})},
		{"null value", enc(h, []Record{{Key: recs[0].Key}})},
	}
	compressed := enc(h, recs)
	compressed = append(Batch(nil), compressed...)
	binary.BigEndian.PutUint16(compressed[posAttributes:], uint16((h.Attributes).WithCodec(CodecZstd)))
	tests = append(tests, struct {
		name string
		b    Batch
	}{"compressed", compressed})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadControlRecord(tt.b)
			require.ErrorIs(t, err, ErrInvalidControlRecord)
		})
	}
}

// FuzzControlRecord feeds arbitrary keys and values to ParseControlRecord
// and arbitrary batches to ReadControlRecord: they must never panic, must
// classify every failure as ErrInvalidControlRecord, and what they accept
// must re-encode to the same bytes.
func FuzzControlRecord(f *testing.F) {
	c := ControlRecord{Type: ControlCommit, CoordinatorEpoch: 9}
	h, recs := MarkerBatch(7, 1, 1000, c)
	batch, err := AppendBatch(nil, h, recs)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.AppendKey(nil), c.AppendValue(nil), batch)
	f.Add([]byte{0, 0, 0, 2}, []byte{0, 0}, batch[:len(batch)-1])
	f.Add([]byte{}, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, key, value, batch []byte) {
		got, err := ParseControlRecord(key, value)
		if err != nil {
			if !errors.Is(err, ErrInvalidControlRecord) {
				t.Fatalf("unclassified error %v", err)
			}
		} else if string(got.AppendKey(nil)) != string(key) || string(got.AppendValue(nil)) != string(value) {
			t.Fatalf("accepted %x %x, re-encodes to %x %x", key, value, got.AppendKey(nil), got.AppendValue(nil))
		}
		if len(batch) >= HeaderSize {
			// Let the fuzzer past the CRC.
			batch = append([]byte(nil), batch...)
			if n := int(int32(binary.BigEndian.Uint32(batch[posLength:]))) + lengthPrefix; n >= HeaderSize && n <= len(batch) {
				setCRC(batch[:n])
			}
		}
		b, _, err := ReadBatch(batch)
		if err != nil {
			return
		}
		if _, err := ReadControlRecord(b); err != nil && !errors.Is(err, ErrInvalidControlRecord) {
			t.Fatalf("unclassified error %v", err)
		}
	})
}
