package meter

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// soleLeader opens a partition replica in a fresh directory that leads
// alone (RF 1) at leader epoch 0, its log rolling every segBytes, with
// cfg.
func soleLeader(t testing.TB, segBytes int64, cfg partition.TopicConfig) *partition.Replica {
	t.Helper()
	h := &partition.Host{
		ID:          1,
		BrokerEpoch: func() int64 { return 1 },
		Logger:      slog.New(slog.DiscardHandler),
		Metrics: &partition.Metrics{
			Duplicates:     prometheus.NewCounter(prometheus.CounterOpts{Name: "duplicates"}),
			SequenceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sequence_errors"}, []string{"reason"}),
			ISRShrinks:     prometheus.NewCounter(prometheus.CounterOpts{Name: "isr_shrinks"}),
			ISRExpands:     prometheus.NewCounter(prometheus.CounterOpts{Name: "isr_expands"}),
		},
		SegmentBytes:      segBytes,
		SegmentAge:        7 * 24 * time.Hour,
		Flush:             log.FlushOS,
		ReplicaLagTimeMax: 30 * time.Second,
		LeaderAddress:     func(int32) string { return "" },
		FailStop:          func(string, int32, error) {},
	}
	cfg.MinISR = 1
	p, err := partition.Open(h, partition.Spec{TenantID: "t1", TopicID: "topic-1", Partition: 0, Dir: t.TempDir(), Config: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { p.Log().Close() })
	p.Update(context.Background(), partition.Assignment{Replicas: []int32{1}, Leader: 1, LeaderEpoch: 0, ISR: []int32{1}}, cfg)
	require.Equal(t, partition.RoleLeader, p.Status().Role)
	return p
}

// produce appends one batch of n records of size bytes each; with pid
// ≥ 0 as producer pid's transactional batch at seq (epoch 0).
func produce(t testing.TB, p *partition.Replica, n, size int, pid int64, seq int32) {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte(strings.Repeat("v", size))}
	}
	h := record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, BaseSequence: -1}
	if pid >= 0 {
		h.Attributes, h.ProducerID, h.BaseSequence = record.AttrTransactional, pid, seq
	}
	b, err := log.EncodeLeaderBatch(nil, h, recs)
	require.NoError(t, err)
	ctx := context.Background()
	if pid >= 0 {
		_, err = p.ProduceTransactional(ctx, []log.ValidBatch{b}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil, func(context.Context, int64, int16) error { return nil })
	} else {
		_, err = p.Produce(ctx, []log.ValidBatch{b}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	}
	require.NoError(t, err)
}

// endTxn writes producer pid's commit or abort marker (a control batch).
func endTxn(t *testing.T, p *partition.Replica, pid int64, commit bool) {
	t.Helper()
	_, err := p.WriteMarker(context.Background(), partition.Marker{ProducerID: pid, ProducerEpoch: 0, Commit: commit}, 10*time.Second)
	require.NoError(t, err)
}

// rawBatch is one batch of the log as it lies on disk.
type rawBatch struct {
	base, end int64 // [base, end)
	size      int64
	control   bool
}

// rawLog reads every batch of p's local log from offset from, markers
// included, straight from the log (not the read path Scan uses).
func rawLog(t *testing.T, p *partition.Replica, from int64) []rawBatch {
	t.Helper()
	var out []rawBatch
	for off := from; off < p.Log().LEO(); {
		data, err := p.Log().Read(off, 1<<20)
		require.NoError(t, err)
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			require.NoError(t, err)
			h := b.Header()
			out = append(out, rawBatch{base: h.BaseOffset, end: h.LastOffset() + 1, size: int64(len(b)), control: h.Attributes.Control()})
			off, data = h.LastOffset()+1, rest
		}
	}
	return out
}

// dataBytes sums the sizes of the data batches of bs.
func dataBytes(bs []rawBatch) (n int64) {
	for _, b := range bs {
		if !b.control {
			n += b.size
		}
	}
	return n
}

// mixedLog writes data batches of several sizes, a committed and an
// aborted transaction (each a data batch and a marker) and more data,
// and returns the log's batches.
func mixedLog(t *testing.T, p *partition.Replica) []rawBatch {
	t.Helper()
	produce(t, p, 1, 10, -1, 0)
	produce(t, p, 5, 100, -1, 0)
	produce(t, p, 3, 50, 7, 0)
	endTxn(t, p, 7, true)
	produce(t, p, 20, 30, -1, 0)
	produce(t, p, 2, 500, 8, 0)
	endTxn(t, p, 8, false)
	produce(t, p, 1, 1000, -1, 0)
	bs := rawLog(t, p, 0)
	require.Len(t, bs, 8)
	require.EqualValues(t, p.HighWatermark(), bs[len(bs)-1].end)
	return bs
}

// TestMeterScanCountsDataBatchesOnly: one scan of a log with data
// batches, a committed and an aborted transaction meters [0, HW) with
// the sizes of the data batches (the aborted transaction's included,
// the two markers not), as read straight from the log.
func TestMeterScanCountsDataBatchesOnly(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, 1<<20, partition.TopicConfig{})
	bs := mixedLog(t, p)
	var all int64
	for _, b := range bs {
		all += b.size
	}
	want := dataBytes(bs)
	require.Less(t, want, all, "the markers take bytes the scan must leave out")

	s, err := Scan(context.Background(), p, 0, 1<<20)
	require.NoError(t, err)
	require.Equal(t, Scanned{End: p.HighWatermark(), Bytes: want}, s)

	// At the HW there is nothing to meter.
	s, err = Scan(context.Background(), p, p.HighWatermark(), 1<<20)
	require.NoError(t, err)
	require.Equal(t, Scanned{End: p.HighWatermark()}, s)
}

// TestMeterScanIsBoundedAndBatchAligned: scans of at most one batch's
// worth meter the log in several consecutive ranges, each ending at a
// batch boundary, whose bytes add up to the data batches'.
func TestMeterScanIsBoundedAndBatchAligned(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, 1<<20, partition.TopicConfig{})
	bs := mixedLog(t, p)
	ends := map[int64]bool{}
	for _, b := range bs {
		ends[b.end] = true
	}
	var sum int64
	ranges := 0
	for from := int64(0); from < p.HighWatermark(); ranges++ {
		s, err := Scan(context.Background(), p, from, 1)
		require.NoError(t, err)
		require.Greater(t, s.End, from, "every scan below the HW makes progress")
		require.True(t, ends[s.End], "range [%d, %d) ends at a batch boundary", from, s.End)
		require.False(t, s.Skipped)
		sum += s.Bytes
		from = s.End
	}
	require.Equal(t, dataBytes(bs), sum)
	// One range per data batch: a read that finds only a marker goes on
	// to the batch after it.
	require.Equal(t, 6, ranges)
}

// TestMeterScanFromInsideABatch: a cursor inside a batch (a leader
// elected uncleanly, whose log was shorter than the cursor, wrote a
// batch across it) meters that batch in full, up to its end.
func TestMeterScanFromInsideABatch(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, 1<<20, partition.TopicConfig{})
	bs := mixedLog(t, p)
	b := bs[4] // 20 records
	require.False(t, b.control)
	s, err := Scan(context.Background(), p, b.base+7, 1)
	require.NoError(t, err)
	require.Equal(t, Scanned{End: b.end, Bytes: b.size}, s)
}

// TestMeterScanSkipsWhatLeftTheLog: a cursor below the log start
// (retention deleted segments metering had not reached) is a range to
// the log start without bytes, marked Skipped; metering goes on from
// there with the bytes of what is left.
func TestMeterScanSkipsWhatLeftTheLog(t *testing.T) {
	t.Parallel()
	cfg := partition.TopicConfig{RetentionBytes: 3000}
	p := soleLeader(t, 1024, cfg)
	for range 20 {
		produce(t, p, 1, 400, -1, 0)
	}
	_, err := p.ApplyRetention()
	require.NoError(t, err)
	start := p.Log().LogStartOffset()
	require.Greater(t, start, int64(0), "retention deleted segments")

	s, err := Scan(context.Background(), p, 0, 1<<20)
	require.NoError(t, err)
	require.Equal(t, Scanned{End: start, Skipped: true}, s)

	var sum int64
	for from := start; from < p.HighWatermark(); {
		s, err := Scan(context.Background(), p, from, 1<<20)
		require.NoError(t, err)
		require.False(t, s.Skipped)
		require.Greater(t, s.End, from, "from %d", from)
		sum += s.Bytes
		from = s.End
	}
	require.Equal(t, dataBytes(rawLog(t, p, start)), sum, fmt.Sprintf("from the log start %d", start))
}

// BenchmarkMeterScan meters a 32 MiB log of 100-record batches of 1 KiB
// records (in the page cache) at 8 MiB per Scan, as reports would.
func BenchmarkMeterScan(b *testing.B) {
	p := soleLeader(b, 256<<20, partition.TopicConfig{})
	for range 320 {
		produce(b, p, 100, 1000, -1, 0)
	}
	hw := p.HighWatermark()
	b.SetBytes(p.Log().Size())
	for b.Loop() {
		for from := int64(0); from < hw; {
			s, err := Scan(context.Background(), p, from, 8<<20)
			if err != nil {
				b.Fatal(err)
			}
			from = s.End
		}
	}
}
