package meter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// fakeControlPlane is ReportUsage as broker.proto specifies it: counters
// applied once per (broker epoch, sequence), a range applied only when it
// starts at the partition's cursor, every named partition's cursor
// answered; a stale broker epoch is refused whole. drop answers are lost
// after the report was handled.
type fakeControlPlane struct {
	mu       sync.Mutex
	epoch    int64
	drop     int
	sent     []*sluicev1.ReportUsageRequest
	applied  map[[2]int64]*sluicev1.ReportUsageRequest
	cursors  map[partKey]int64
	egress   map[string]int64
	requests map[string]int64
	ingress  int64
}

func newFakeControlPlane(epoch int64) *fakeControlPlane {
	return &fakeControlPlane{epoch: epoch, applied: map[[2]int64]*sluicev1.ReportUsageRequest{}, cursors: map[partKey]int64{},
		egress: map[string]int64{}, requests: map[string]int64{}}
}

func (f *fakeControlPlane) send(_ context.Context, req *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, proto.Clone(req).(*sluicev1.ReportUsageRequest))
	if req.GetBrokerEpoch() != f.epoch {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("stale broker epoch"))
	}
	key := [2]int64{req.GetBrokerEpoch(), req.GetSequence()}
	res := &sluicev1.ReportUsageResponse{}
	if prev, ok := f.applied[key]; ok {
		if !proto.Equal(prev, req) {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a retry with other content"))
		}
		res.Duplicate = true
	} else {
		f.applied[key] = proto.Clone(req).(*sluicev1.ReportUsageRequest)
		for _, c := range req.GetCounters() {
			f.egress[c.GetTenantId()] += c.GetEgressBytes()
			f.requests[c.GetTenantId()] += c.GetRequests()
		}
		for _, g := range req.GetIngress() {
			k := partKey{g.GetTopicId(), g.GetPartition()}
			if g.GetEndOffset() > g.GetStartOffset() && g.GetStartOffset() == f.cursors[k] {
				f.cursors[k] = g.GetEndOffset()
				f.ingress += g.GetBytes()
			}
		}
	}
	for _, g := range req.GetIngress() {
		k := partKey{g.GetTopicId(), g.GetPartition()}
		res.Cursors = append(res.Cursors, &sluicev1.IngressCursor{TopicId: k.topicID, Partition: k.partition, NextOffset: f.cursors[k]})
	}
	if f.drop > 0 {
		f.drop--
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("answer lost"))
	}
	return res, nil
}

func (f *fakeControlPlane) last() *sluicev1.ReportUsageRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[len(f.sent)-1]
}

type reporterSetup struct {
	cp       *fakeControlPlane
	epoch    atomic.Int64
	counters *Counters
	leaders  []Leader
	r        *Reporter
}

func setup(t *testing.T, scanBytes int) *reporterSetup {
	t.Helper()
	s := &reporterSetup{cp: newFakeControlPlane(1), counters: &Counters{}}
	s.epoch.Store(1)
	s.r = NewReporter(Config{
		BrokerID: 1, BrokerEpoch: s.epoch.Load, Send: sendVia(s.cp.send), ErrorLabel: codeName,
		Leaders: func() []Leader { return append([]Leader(nil), s.leaders...) }, Counters: s.counters,
		Interval: time.Hour, PartitionScanBytes: scanBytes,
	})
	return s
}

// TestMeterReporterRetriesTheSameReport: a report whose answer is lost
// is sent again with the same sequence and content until answered, and
// applied once; what is counted meanwhile goes into the next report,
// with the next sequence.
func TestMeterReporterRetriesTheSameReport(t *testing.T) {
	t.Parallel()
	s := setup(t, 0)
	ctx := context.Background()
	s.counters.AddEgress("a", 100)
	s.counters.AddRequest("a")
	s.counters.AddRequest("b")
	s.cp.drop = 2
	require.False(t, s.r.step(ctx), "applied, answer lost")
	first := s.cp.last()
	require.EqualValues(t, 1, first.GetSequence())
	require.EqualValues(t, 1, first.GetBrokerEpoch())
	require.Positive(t, s.r.pendingBytes.Load())
	s.counters.AddEgress("a", 5)
	s.counters.AddRequest("a")
	require.False(t, s.r.step(ctx), "a duplicate, answer lost")
	require.True(t, s.r.step(ctx), "a duplicate, answered")
	require.Len(t, s.cp.sent, 3)
	for _, r := range s.cp.sent[1:] {
		require.True(t, proto.Equal(first, r), "a retry is the same report: %v vs %v", first, r)
	}
	require.Zero(t, s.r.pendingBytes.Load())
	require.Equal(t, 2.0, testutil.ToFloat64(s.r.failures.WithLabelValues(connect.CodeUnavailable.String())))

	require.True(t, s.r.step(ctx))
	next := s.cp.last()
	require.EqualValues(t, 2, next.GetSequence())
	require.True(t, proto.Equal(&sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: 1, Sequence: 2,
		Counters: []*sluicev1.TenantUsageCounters{{TenantId: "a", EgressBytes: 5, Requests: 1}}}, next), "%v", next)
	require.Equal(t, map[string]int64{"a": 105, "b": 0}, s.cp.egress)
	require.Equal(t, map[string]int64{"a": 2, "b": 1}, s.cp.requests)

	// Nothing counted: nothing sent.
	require.True(t, s.r.step(ctx))
	require.Len(t, s.cp.sent, 4)
}

// TestMeterReporterNewBrokerEpoch: at a new broker epoch the sequence
// starts over at 1; an unanswered report of the old epoch that may have
// been applied is abandoned (its counts are not sent again), one that
// was only ever refused as stale goes into the next report.
func TestMeterReporterNewBrokerEpoch(t *testing.T) {
	t.Parallel()
	s := setup(t, 0)
	ctx := context.Background()
	s.counters.AddRequest("a")
	require.True(t, s.r.step(ctx))
	s.counters.AddRequest("a")
	s.cp.drop = 1
	require.False(t, s.r.step(ctx), "sequence 2 applied, answer lost")
	require.EqualValues(t, 2, s.cp.last().GetSequence())

	// The broker registers again before the answer comes.
	s.epoch.Store(2)
	s.cp.epoch = 2
	s.counters.AddRequest("a")
	require.True(t, s.r.step(ctx))
	require.True(t, proto.Equal(&sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: 2, Sequence: 1,
		Counters: []*sluicev1.TenantUsageCounters{{TenantId: "a", Requests: 1}}}, s.cp.last()), "%v", s.cp.last())
	require.Equal(t, int64(3), s.cp.requests["a"], "each request counted once")
	require.Equal(t, 1.0, testutil.ToFloat64(s.r.lostCounters))

	// The control plane fenced epoch 2 before the broker knew: refused
	// whole, so the counts go into epoch 3's first report.
	s.cp.epoch = 3
	s.counters.AddRequest("b")
	require.False(t, s.r.step(ctx))
	require.False(t, s.r.step(ctx))
	s.epoch.Store(3)
	require.True(t, s.r.step(ctx))
	require.True(t, proto.Equal(&sluicev1.ReportUsageRequest{BrokerId: 1, BrokerEpoch: 3, Sequence: 1,
		Counters: []*sluicev1.TenantUsageCounters{{TenantId: "b", Requests: 1}}}, s.cp.last()), "%v", s.cp.last())
	require.Equal(t, map[string]int64{"a": 3, "b": 1}, s.cp.requests)
	require.Equal(t, 1.0, testutil.ToFloat64(s.r.lostCounters))

	// Not registered: nothing is sent.
	s.epoch.Store(0)
	s.counters.AddRequest("b")
	n := len(s.cp.sent)
	require.True(t, s.r.step(ctx))
	require.Len(t, s.cp.sent, n)
}

// TestMeterReporterIngress: a new leadership first asks where metering
// stands, then reports the log from the answered cursor in bounded,
// consecutive ranges (a lost answer resends the same range, applied
// once) until the HW; the metered bytes are the data batches' exactly.
// When another leader moved the cursor meanwhile, the stale range is not
// applied and metering continues from the answered cursor.
func TestMeterReporterIngress(t *testing.T) {
	t.Parallel()
	s := setup(t, 1) // about one batch per report
	ctx := context.Background()
	p := soleLeader(t, 1<<20, partition.TopicConfig{})
	bs := mixedLog(t, p)
	s.leaders = []Leader{{TopicID: "topic-1", Partition: 0, LeaderEpoch: 0, Replica: p}}
	k := partKey{"topic-1", 0}

	require.True(t, s.r.step(ctx))
	ask := s.cp.last().GetIngress()
	require.Len(t, ask, 1)
	require.Equal(t, ask[0].GetStartOffset(), ask[0].GetEndOffset(), "an empty range asks")

	reports := 0
	for s.cp.cursors[k] < p.HighWatermark() {
		from := s.cp.cursors[k]
		if reports == 2 {
			s.cp.drop = 1
			require.False(t, s.r.step(ctx))
		}
		require.True(t, s.r.step(ctx))
		g := s.cp.last().GetIngress()
		require.Len(t, g, 1)
		require.Equal(t, from, g[0].GetStartOffset(), "from the cursor")
		require.Less(t, g[0].GetStartOffset(), g[0].GetEndOffset())
		reports++
		require.Less(t, reports, 20)
	}
	require.Equal(t, 6, reports, "one data batch per report")
	require.Equal(t, dataBytes(bs), s.cp.ingress)
	require.Equal(t, float64(dataBytes(bs)), testutil.ToFloat64(s.r.ingressBytes))

	// At the HW: nothing to report.
	n := len(s.cp.sent)
	require.True(t, s.r.step(ctx))
	require.Len(t, s.cp.sent, n)

	// More data; another leader (the broker lost and regained the
	// leadership unnoticed) metered part of it.
	produce(t, p, 4, 10, -1, 0)
	produce(t, p, 4, 10, -1, 0)
	more := rawLog(t, p, bs[len(bs)-1].end)
	s.cp.cursors[k] = more[0].end
	s.cp.ingress += more[0].size
	require.True(t, s.r.step(ctx))
	require.EqualValues(t, bs[len(bs)-1].end, s.cp.last().GetIngress()[0].GetStartOffset(), "the broker's stale cursor")
	require.Equal(t, more[0].end, s.cp.cursors[k], "not applied")
	require.True(t, s.r.step(ctx))
	require.Equal(t, more[0].end, s.cp.last().GetIngress()[0].GetStartOffset(), "from the answered cursor")
	require.Equal(t, p.HighWatermark(), s.cp.cursors[k])
	require.Equal(t, dataBytes(rawLog(t, p, 0)), s.cp.ingress)

	// A new leader epoch asks again.
	s.leaders[0].LeaderEpoch = 1
	require.True(t, s.r.step(ctx))
	g := s.cp.last().GetIngress()[0]
	require.Equal(t, g.GetStartOffset(), g.GetEndOffset())
	require.EqualValues(t, 1, g.GetLeaderEpoch())
}

// TestMeterReporterFinal: the last report on shutdown sends the
// unanswered report until it is answered, then one with what was counted
// since (until answered too); it gives up when its context ends.
func TestMeterReporterFinal(t *testing.T) {
	t.Parallel()
	s := setup(t, 0)
	ctx := context.Background()
	s.counters.AddRequest("a")
	s.cp.drop = 1
	require.False(t, s.r.step(ctx))
	s.counters.AddRequest("b")
	s.cp.drop = 2 // two more answers of sequence 1 lost
	s.r.Final(ctx)
	require.Len(t, s.cp.sent, 5)
	for _, r := range s.cp.sent[1:4] {
		require.True(t, proto.Equal(s.cp.sent[0], r))
	}
	require.EqualValues(t, 2, s.cp.last().GetSequence())
	require.Equal(t, map[string]int64{"a": 1, "b": 1}, s.cp.requests)
	require.Zero(t, s.r.pendingBytes.Load())

	// Nothing counted since: nothing sent.
	s.r.Final(ctx)
	require.Len(t, s.cp.sent, 5)

	// A control plane that never answers: Final ends with its context.
	s.counters.AddRequest("c")
	s.cp.drop = 1 << 30
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	s.r.Final(ctx)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Greater(t, len(s.cp.sent), 6, "retried")
}

// sendVia wires a Connect-style fake control plane as the broker wires its
// client: errors translated to domain errors (connecterr.FromConnect).
func sendVia(f func(context.Context, *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error)) func(context.Context, *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error) {
	return func(ctx context.Context, req *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error) {
		res, err := f(ctx, req)
		return res, connecterr.FromConnect(err)
	}
}

// codeName labels failures as the broker does: the Connect code's name.
func codeName(err error) string { return connect.CodeOf(connecterr.ToConnect(err)).String() }
