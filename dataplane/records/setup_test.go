package records

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/meter"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// quotaCalls records the service's quota calls, in order, and refuses
// those set to fail.
type quotaCalls struct {
	mu       sync.Mutex
	calls    []string
	admitErr error // AdmitProduce answers it
	fetchErr error // CheckFetch answers it
	pidErr   error // CheckProducerID answers it
}

func (q *quotaCalls) add(format string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.calls = append(q.calls, fmt.Sprintf(format, args...))
}

// take returns the calls so far and forgets them.
func (q *quotaCalls) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	c := q.calls
	q.calls = nil
	return c
}

func (q *quotaCalls) AdmitProduce(_ context.Context, cost int) error {
	q.add("admit %d", cost)
	return q.admitErr
}

func (q *quotaCalls) RefundProduce(_ context.Context, batches, cost int, duplicate bool, err error) {
	q.add("settle %d batches %d bytes duplicate=%v err=%v", batches, cost, duplicate, err != nil)
}

func (q *quotaCalls) RefundUnwritten(_ context.Context, cost int) { q.add("refund %d", cost) }

func (q *quotaCalls) CheckFetch(_ context.Context, maxBytes int) error {
	q.add("check fetch %d", maxBytes)
	return q.fetchErr
}

func (q *quotaCalls) ChargeFetch(_ context.Context, n int) { q.add("charge fetch %d", n) }

func (q *quotaCalls) CheckProducerID(context.Context) error {
	q.add("check pid")
	return q.pidErr
}

func (q *quotaCalls) ChargeProducerID(context.Context) { q.add("charge pid") }

// fixture is a Service of broker 1 leading partition 0 of tenant t1's
// topic "bench" (RF 1, a real replica on a temporary directory), with a
// view that can be swapped, recorded quotas and a tenant principal.
type fixture struct {
	svc    *Service
	p      *partition.Replica
	view   atomic.Pointer[cluster.View]
	quotas *quotaCalls
	usage  *meter.Counters
	ctx    context.Context
	// verified counts the transactional verifications asked for.
	verified atomic.Int32
	// allocate is AllocateProducerIDs.
	allocate func(ctx context.Context) (int64, int32, error)
	// suspend ends the long polls UntilSuspended watches.
	suspend chan struct{}
}

const benchTopicID = "topic-bench"

func benchView(leader int32, maxMessageBytes int32) *cluster.View {
	pm := cluster.Partition{TopicID: benchTopicID, Partition: 0, Replicas: []int32{1, 2}, Leader: leader, LeaderEpoch: 1, ISR: []int32{1, 2}}
	m := cluster.EmptyView()
	m.Loaded = true
	m.Brokers[1] = cluster.Node{ID: 1, Address: "b1:9092"}
	m.Brokers[2] = cluster.Node{ID: 2, Address: "b2:9092"}
	m.AddTopic(&cluster.Topic{TenantID: "t1", ID: benchTopicID, Name: "bench", Config: cluster.TopicConfig{MinISR: 1, MaxMessageBytes: maxMessageBytes}, Partitions: []cluster.Partition{pm}})
	return m
}

func setup(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{quotas: &quotaCalls{}, usage: &meter.Counters{}, suspend: make(chan struct{})}
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
		SegmentBytes:      1 << 20,
		SegmentAge:        7 * 24 * time.Hour,
		Flush:             log.FlushOS,
		ReplicaLagTimeMax: 30 * time.Second,
		LeaderAddress:     func(int32) string { return "" },
		FailStop:          func(string, int32, error) {},
	}
	cfg := partition.TopicConfig{MinISR: 1}
	p, err := partition.Open(h, partition.Spec{TenantID: "t1", TopicID: benchTopicID, Partition: 0, Dir: t.TempDir(), Config: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { p.Log().Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p.Update(ctx, partition.Assignment{Replicas: []int32{1}, Leader: 1, LeaderEpoch: 1, ISR: []int32{1}}, cfg)
	f.p = p
	f.view.Store(benchView(1, 1<<20))
	f.svc = New(Deps{
		BrokerID: 1,
		View:     f.view.Load,
		Replica: func(topicID string, partition int32) *partition.Replica {
			if topicID == benchTopicID && partition == 0 {
				return p
			}
			return nil
		},
		Quotas: f.quotas,
		Usage:  f.usage,
		UntilSuspended: func(ctx context.Context, _ string) (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(ctx)
			go func() {
				select {
				case <-f.suspend:
					cancel(fmt.Errorf("%w: tenant is suspended", tenants.ErrPermissionDenied))
				case <-ctx.Done():
				}
			}()
			return ctx, func() { cancel(nil) }
		},
		VerifyTransaction: func(context.Context, http.Header, Verification) error {
			f.verified.Add(1)
			return nil
		},
		AllocateProducerIDs: func(ctx context.Context) (int64, int32, error) {
			if f.allocate == nil {
				return 0, 0, errors.New("no producer ids here")
			}
			return f.allocate(ctx)
		},
	})
	f.ctx = tenants.WithPrincipal(ctx, tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: tenants.AllScopes()})
	return f
}

// codeOf is err's Connect code, as the Connect adapter answers it.
func codeOf(err error) connect.Code { return connect.CodeOf(connecterr.ToConnect(err)) }

// testRecords is n records of size bytes each, as an SDK sends them.
func testRecords(n, size int) []record.Record {
	recs := make([]record.Record, n)
	for i := range recs {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(i + j)
		}
		recs[i] = record.Record{OffsetDelta: int32(i), Key: fmt.Appendf(nil, "key-%d", i), Value: v}
	}
	return recs
}

// batch is one batch of n records; with pid >= 0 of that producer at
// epoch 0 from sequence seq, with attrs.
func batch(t testing.TB, n int, pid int64, seq int32, attrs record.Attributes) []byte {
	t.Helper()
	h := record.BatchHeader{Attributes: attrs, FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	if pid >= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, 0, seq
	}
	b, err := record.AppendBatch(nil, h, testRecords(n, 100))
	require.NoError(t, err)
	return b
}

// corrupt flips a byte of the last record, so the CRC no longer matches.
func corrupt(b []byte) []byte {
	c := append([]byte{}, b...)
	c[len(c)-2] ^= 0xff
	return c
}

// decoded is a decoded record of a batch.
type decoded struct {
	offsetDelta int32
	ts          int64
	key, value  []byte
	headers     []record.RecordHeader
}

// decode reads the records of an uncompressed batch.
func decode(t testing.TB, b record.Batch) []decoded {
	t.Helper()
	h := b.Header()
	it, err := b.Records()
	require.NoError(t, err)
	var out []decoded
	for it.Next() {
		r := it.Record()
		out = append(out, decoded{offsetDelta: r.OffsetDelta, ts: h.FirstTimestamp + r.TimestampDelta, key: r.Key, value: r.Value, headers: slices.Clone(r.Headers)})
	}
	require.NoError(t, it.Err())
	return out
}
