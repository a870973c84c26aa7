package broker

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// produceBench is a broker leading one partition (RF 1, page-cache flush)
// of tenant t1's topic "bench", with a tenant principal to call its
// record service's Connect handler as the auth interceptor would.
type produceBench struct {
	b   *Broker
	svc *connectapi.Records
	p   *partition.Replica
	ctx context.Context
}

func setupProduceBench(tb testing.TB) *produceBench {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = tb.TempDir()
	cfg.BrokerToken = "broker-token-0123456789"
	cfg.Flush = "os"
	b, err := New(cfg, Deps{})
	require.NoError(tb, err)
	pm := cluster.Partition{Partition: 0, Replicas: []int32{1}, Leader: 1, LeaderEpoch: 1, ISR: []int32{1}}
	tm := &cluster.Topic{TenantID: "t1", ID: "topic-bench", Name: "bench", Config: cluster.TopicConfig{MinISR: 1, MaxMessageBytes: 1 << 20}, Partitions: []cluster.Partition{pm}}
	m := cluster.EmptyView()
	m.Loaded = true
	m.AddTopic(tm)
	b.meta.Store(m)
	p, err := b.replicas.Open(tm, pm)
	require.NoError(tb, err)
	tb.Cleanup(func() { p.Log().Close() })
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	p.Update(ctx, pm.Assignment(), tm.Config.Replica())
	pctx := tenants.WithPrincipal(ctx, tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: tenants.AllScopes()})
	return &produceBench{b: b, svc: b.recordsAPI, p: p, ctx: pctx}
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per op since start: on a shared machine
// it varies less than the wall time does.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

// benchRecords is n records of size bytes each, as an SDK sends them.
func benchRecords(n, size int) []record.Record {
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

// BenchmarkProduceHandler runs the broker's Produce handler in process
// against a real log on a temporary directory: request validation, the
// idempotence check, the append and the acks=all wait (RF 1, so the HW
// follows the append), for a batch given as bytes (what the Go SDK sends)
// and as records (what plain gRPC/Connect clients send). Flush is "os":
// the benchmark measures the broker's CPU and allocations, not the disk.
func BenchmarkProduceHandler(b *testing.B) {
	for _, shape := range []struct {
		name      string
		n, size   int
		asRecords bool
	}{
		{"batch/16x1KiB", 16, 1024, false},
		{"batch/256x1KiB", 256, 1024, false},
		{"records/16x1KiB", 16, 1024, true},
	} {
		b.Run(shape.name, func(b *testing.B) {
			pb := setupProduceBench(b)
			recs := benchRecords(shape.n, shape.size)
			batch, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
			require.NoError(b, err)
			var pl []*sluicev1.Record
			for _, r := range recs {
				pl = append(pl, &sluicev1.Record{Key: r.Key, Value: r.Value})
			}
			req := &sluicev1.ProduceRequest{Topic: "bench", Acks: sluicev1.Acks_ACKS_ALL}
			data := make([]byte, len(batch))
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			cpu := cpuTime()
			defer reportCPU(b, cpu)
			for b.Loop() {
				if shape.asRecords {
					req.Payload = &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: pl}}
				} else {
					// A fresh request buffer each time, as Connect decodes
					// one per request (the leader stamps offsets into it).
					copy(data, batch)
					req.Payload = &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: data}}
				}
				if _, err := pb.svc.Produce(pb.ctx, connect.NewRequest(req)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFetchHandler runs the broker's Fetch handler in process on the
// leader of a real log holding 64 batches of 16 1-KiB records, reading
// from offset 0 up to 1 MiB: as raw batches (what the Go SDK asks for) and
// as records (plain gRPC/Connect clients).
func BenchmarkFetchHandler(b *testing.B) {
	pb := setupProduceBench(b)
	recs := benchRecords(16, 1024)
	for range 64 {
		batch, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, recs)
		require.NoError(b, err)
		_, err = pb.svc.Produce(pb.ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "bench", Acks: sluicev1.Acks_ACKS_ALL,
			Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: batch}}}))
		require.NoError(b, err)
	}
	for _, raw := range []bool{true, false} {
		name := "records"
		if raw {
			name = "raw"
		}
		b.Run(name, func(b *testing.B) {
			req := &sluicev1.FetchRequest{Topic: "bench", MaxBytes: 1 << 20, RawBatches: raw}
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
