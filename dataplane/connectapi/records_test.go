package connectapi

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/records"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
)

// TestRecordsFetchDecodeRecords: records decoded for a fetch are right
// across uncompressed and compressed batches and headers, do not alias
// the fetched bytes of uncompressed batches (the read's buffer stays the
// caller's), and take allocations that do not grow with the records
// (without headers; header keys are strings, one each).
func TestRecordsFetchDecodeRecords(t *testing.T) { // not parallel: AllocsPerRun
	mk := func(base int64, n int, codec record.Codec) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Key: fmt.Appendf(nil, "k%d", base+int64(i)), Value: fmt.Appendf(nil, "v%d", base+int64(i))}
			if i%2 == 0 {
				recs[i].Headers = []record.RecordHeader{{Key: []byte("h"), Value: []byte("x")}}
			}
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: base, FirstTimestamp: 1000, LeaderEpoch: 2}, recs)
		require.NoError(t, err)
		if codec != record.CodecNone {
			b, err = compress.CompressBatch(nil, record.Batch(b), codec)
			require.NoError(t, err)
		}
		return b
	}
	data := append(append(mk(0, 3, record.CodecNone), mk(3, 4, record.CodecZstd)...), mk(7, 2, record.CodecNone)...)
	recs, err := decodeRecords(data, 1)
	require.NoError(t, err)
	require.Len(t, recs, 8, "from offset 1")
	for i, r := range recs {
		off := int64(i + 1)
		require.Equal(t, off, r.GetOffset())
		require.Equal(t, fmt.Sprintf("k%d", off), string(r.GetKey()))
		require.Equal(t, fmt.Sprintf("v%d", off), string(r.GetValue()))
		require.EqualValues(t, 2, r.GetLeaderEpoch())
	}
	require.Len(t, recs[1].GetHeaders(), 1, "offset 2 is record 2 of its batch")
	require.Equal(t, "h", recs[1].GetHeaders()[0].GetKey())
	require.Empty(t, recs[3].GetHeaders(), "offset 4 is record 1 of its batch")
	for i := range data {
		data[i] = 0
	}
	require.Equal(t, "k1", string(recs[0].GetKey()), "a copy, not the fetched bytes")
	require.Equal(t, "x", string(recs[1].GetHeaders()[0].GetValue()))
	require.Equal(t, "v8", string(recs[7].GetValue()))

	_, err = decodeRecords(mk(0, 2, record.CodecNone)[:30], 0)
	require.ErrorIs(t, err, record.ErrTruncated)

	plain := func(n int) []byte {
		recs := make([]record.Record, n)
		for i := range recs {
			recs[i] = record.Record{OffsetDelta: int32(i), Key: []byte("key"), Value: make([]byte, 100)}
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{}, recs)
		require.NoError(t, err)
		return b
	}
	var allocs []float64
	for _, n := range []int{10, 1000} {
		d := plain(n)
		allocs = append(allocs, testing.AllocsPerRun(10, func() {
			if _, err := decodeRecords(d, 0); err != nil {
				t.Fatal(err)
			}
		}))
	}
	t.Logf("allocations for 10, 1000 records: %v", allocs)
	require.Equal(t, allocs[0], allocs[1], "allocations do not grow with records: %v", allocs)
}

// TestRecordsDecodeFromInsideABatch: a fetch that starts inside a batch
// is answered the records from its offset on, with their timestamps,
// keys, values and headers.
func TestRecordsDecodeFromInsideABatch(t *testing.T) {
	t.Parallel()
	b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: 1_600_000_000_000}, []record.Record{
		{Key: []byte("k1"), Value: []byte("v1"), Headers: []record.RecordHeader{{Key: []byte("h"), Value: []byte("x")}}},
		{OffsetDelta: 1, TimestampDelta: 5, Value: []byte("v2")},
	})
	require.NoError(t, err)
	recs, err := decodeRecords(b, 0)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "k1", string(recs[0].GetKey()))
	require.Equal(t, "h", recs[0].GetHeaders()[0].GetKey())
	require.Nil(t, recs[1].GetKey())
	require.Equal(t, int64(1_600_000_000_005), recs[1].GetTimestampMs())
	// Decoding from inside the batch skips earlier records.
	recs, err = decodeRecords(b, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, int64(1), recs[0].GetOffset())
}

// TestRecordsAdapterRequests: the adapter hands the service the API's
// enum values unchanged (the service's enums number them as the API
// does, so an unknown value is reported with the client's number),
// milliseconds as durations (saturated), and a records payload read in
// place.
func TestRecordsAdapterRequests(t *testing.T) {
	t.Parallel()
	for v := range sluicev1.Acks_name {
		require.Equal(t, map[int32]records.Acks{0: records.AcksDefault, 1: records.AcksNone, 2: records.AcksLeader, 3: records.AcksAll}[v], records.Acks(v), "acks %d", v)
	}
	require.Len(t, sluicev1.Acks_name, 4)
	for v := range sluicev1.IsolationLevel_name {
		require.Equal(t, map[int32]records.IsolationLevel{0: records.IsolationDefault, 1: records.ReadUncommitted, 2: records.ReadCommitted}[v], records.IsolationLevel(v), "isolation %d", v)
	}
	require.Len(t, sluicev1.IsolationLevel_name, 3)
	for v := range sluicev1.OffsetSpec_name {
		if v == 0 {
			continue // unspecified: refused
		}
		require.Equal(t, map[int32]records.OffsetSpec{1: records.Earliest, 2: records.Latest, 3: records.Timestamp, 4: records.MaxTimestamp}[v], records.OffsetSpec(v), "spec %d", v)
	}
	require.Len(t, sluicev1.OffsetSpec_name, 5)

	require.Equal(t, 1500*time.Millisecond, millis(1500))
	require.Equal(t, -time.Millisecond, millis(-1))
	require.Equal(t, time.Duration(math.MaxInt64), millis(math.MaxInt64))
	require.Equal(t, time.Duration(math.MinInt64), millis(math.MinInt64))

	epoch := int32(4)
	pr := produceRequest(&sluicev1.ProduceRequest{Topic: "t", Partition: 2, Acks: 9, TimeoutMs: 250, CurrentLeaderEpoch: &epoch, TransactionalId: "tx",
		Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: []*sluicev1.Record{
			{TimestampMs: 7, Key: []byte("k"), Value: []byte("v"), Headers: []*sluicev1.Header{{Key: "h", Value: []byte("x")}}},
		}}}})
	require.Equal(t, "t", pr.Topic)
	require.EqualValues(t, 2, pr.Partition)
	require.EqualValues(t, 9, pr.Acks)
	require.Equal(t, 250*time.Millisecond, pr.Timeout)
	require.Same(t, &epoch, pr.CurrentLeaderEpoch)
	require.Equal(t, "tx", pr.TransactionalID)
	l := &recordList{Records: []*sluicev1.Record{
		{TimestampMs: 7, Key: []byte("k"), Value: []byte("v"), Headers: []*sluicev1.Header{{Key: "h", Value: []byte("x")}}},
	}}
	require.Equal(t, 1, l.Len())
	ts, k, v, nh := l.Record(0)
	require.Equal(t, int64(7), ts)
	require.Equal(t, "k", string(k))
	require.Equal(t, "v", string(v))
	require.Equal(t, 1, nh)
	hk, hv := l.Header(0, 0)
	require.Equal(t, "h", hk)
	require.Equal(t, "x", string(hv))
	require.Zero(t, (*recordList)(nil).Len(), "an unset records payload is empty")
}
