package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// TestBrokerFetchIsolation: the Fetch handler with read_committed returns
// records below the last stable offset without those of aborted
// transactions, as decoded records and as raw batches; read_uncommitted
// returns the aborted ones too; neither returns markers; next_offset
// passes dropped batches; last_stable_offset is filled, and ListOffsets
// LATEST answers the LSO with read_committed.
func TestBrokerFetchIsolation(t *testing.T) {
	t.Parallel()
	pb := setupProduceBench(t)
	ctx := context.Background()
	verified := func(context.Context, int64, int16) error { return nil } // the coordinator's part, faked
	produce := func(pid int64, epoch int16, seq int32, attrs record.Attributes, value string) {
		t.Helper()
		v, err := log.EncodeLeaderBatch(nil, record.BatchHeader{Attributes: attrs, FirstTimestamp: time.Now().UnixMilli(), ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq},
			[]record.Record{{Value: []byte(value)}})
		require.NoError(t, err)
		if attrs.Transactional() {
			_, err = pb.p.ProduceTransactional(ctx, []log.ValidBatch{v}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil, verified)
		} else {
			_, err = pb.p.Produce(ctx, []log.ValidBatch{v}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
		}
		require.NoError(t, err)
	}
	produce(-1, -1, -1, 0, "plain-0")
	produce(9, 0, 0, record.AttrTransactional, "aborted-1")
	produce(11, 0, 0, record.AttrTransactional, "committed-2")
	_, err := pb.p.WriteMarker(ctx, partition.Marker{ProducerID: 9, ProducerEpoch: 1}, 10*time.Second) // 3
	require.NoError(t, err)
	produce(-1, -1, -1, 0, "plain-4")

	fetch := func(offset int64, iso sluicev1.IsolationLevel, raw bool) *sluicev1.FetchResponse {
		t.Helper()
		res, err := pb.svc.Fetch(pb.ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "bench", Partition: 0, Offset: offset, IsolationLevel: iso, RawBatches: raw}))
		require.NoError(t, err)
		return res.Msg
	}
	values := func(res *sluicev1.FetchResponse) []string {
		t.Helper()
		var out []string
		for _, r := range res.GetRecords() {
			out = append(out, string(r.GetValue()))
		}
		for data := res.GetBatches().GetData(); len(data) > 0; {
			b, rest, err := record.ReadBatch(data)
			require.NoError(t, err)
			require.False(t, b.Header().Attributes.Control(), "no marker in raw batches")
			it, err := b.Records()
			require.NoError(t, err)
			for it.Next() {
				out = append(out, string(it.Record().Value))
			}
			data = rest
		}
		return out
	}
	rc, ru := sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	for _, raw := range []bool{false, true} {
		res := fetch(0, rc, raw)
		require.Equal(t, []string{"plain-0"}, values(res), "raw %v: producer 11's transaction is open at 2", raw)
		require.EqualValues(t, 2, res.GetNextOffset())
		require.EqualValues(t, 2, res.GetLastStableOffset())
		require.EqualValues(t, 5, res.GetHighWatermark())
		res = fetch(0, ru, raw)
		require.Equal(t, []string{"plain-0", "aborted-1", "committed-2", "plain-4"}, values(res), "raw %v", raw)
		require.EqualValues(t, 5, res.GetNextOffset())
		require.EqualValues(t, 2, res.GetLastStableOffset())
		res = fetch(0, sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED, raw)
		require.Equal(t, []string{"plain-0", "aborted-1", "committed-2", "plain-4"}, values(res), "raw %v: unspecified is read_uncommitted", raw)
	}
	list := func(iso sluicev1.IsolationLevel) *sluicev1.ListOffsetsResponse {
		t.Helper()
		res, err := pb.svc.ListOffsets(pb.ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "bench", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, IsolationLevel: iso}))
		require.NoError(t, err)
		return res.Msg
	}
	require.EqualValues(t, 2, list(rc).GetOffset())
	require.EqualValues(t, 2, list(rc).GetLastStableOffset())
	require.EqualValues(t, 5, list(ru).GetOffset())
	require.EqualValues(t, 2, list(ru).GetLastStableOffset())

	_, err = pb.p.WriteMarker(ctx, partition.Marker{ProducerID: 11, ProducerEpoch: 1, Commit: true}, 10*time.Second) // 5
	require.NoError(t, err)
	for _, raw := range []bool{false, true} {
		res := fetch(0, rc, raw)
		require.Equal(t, []string{"plain-0", "committed-2", "plain-4"}, values(res), "raw %v", raw)
		require.EqualValues(t, 6, res.GetNextOffset(), "past the marker at 5")
		require.EqualValues(t, 6, res.GetLastStableOffset())
		res = fetch(5, rc, raw)
		require.Empty(t, values(res))
		require.EqualValues(t, 6, res.GetNextOffset(), "a range of only a marker is passed")
	}
	require.EqualValues(t, 6, list(rc).GetOffset())

	_, err = pb.svc.Fetch(pb.ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "bench", Offset: 0, IsolationLevel: 7}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(toConnect(err)))
}

// BenchmarkFetchIsolation is BenchmarkFetchHandler's read (from offset 0,
// up to 1 MiB of 64 batches of 16 1-KiB records) in both isolation
// levels, on a log where every fourth batch belongs to a transaction and
// half of those were aborted (each transaction ends with its marker):
// what read_committed filtering costs over read_uncommitted, which drops
// only the markers.
func BenchmarkFetchIsolation(b *testing.B) {
	pb := setupProduceBench(b)
	ctx := context.Background()
	recs := benchRecords(16, 1024)
	verified := func(context.Context, int64, int16) error { return nil }
	for i := range 64 {
		h := record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
		pid := int64(100 + i)
		if i%4 == 3 {
			h.Attributes, h.ProducerID, h.ProducerEpoch, h.BaseSequence = record.AttrTransactional, pid, 0, 0
		}
		v, err := log.EncodeLeaderBatch(nil, h, recs)
		require.NoError(b, err)
		if i%4 == 3 {
			_, err = pb.p.ProduceTransactional(ctx, []log.ValidBatch{v}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil, verified)
			require.NoError(b, err)
			_, err = pb.p.WriteMarker(ctx, partition.Marker{ProducerID: pid, ProducerEpoch: 1, Commit: i%8 == 3}, 10*time.Second)
		} else {
			_, err = pb.p.Produce(ctx, []log.ValidBatch{v}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
		}
		require.NoError(b, err)
	}
	for _, iso := range []sluicev1.IsolationLevel{sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED} {
		for _, raw := range []bool{true, false} {
			name := "records"
			if raw {
				name = "raw"
			}
			b.Run(strings.ToLower(strings.TrimPrefix(iso.String(), "ISOLATION_LEVEL_"))+"/"+name, func(b *testing.B) {
				req := &sluicev1.FetchRequest{Topic: "bench", MaxBytes: 1 << 20, RawBatches: raw, IsolationLevel: iso}
				b.ReportAllocs()
				cpu := cpuTime()
				defer reportCPU(b, cpu)
				for b.Loop() {
					res, err := pb.svc.Fetch(pb.ctx, connect.NewRequest(req))
					if err != nil {
						b.Fatal(err)
					}
					if res.Msg.GetNextOffset() == 0 {
						b.Fatal("nothing fetched")
					}
				}
			})
		}
	}
}
