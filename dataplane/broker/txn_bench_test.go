package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// BenchmarkTransactionCommit: transactions of 1, 10, 100 and 1000 records
// (100 bytes each, one batch) on an in-process cluster (control plane,
// three brokers, RF 3, fsync per append): each transaction produces its
// batch to the partition's leader (verified with the coordinator, acks=all)
// and commits at the coordinator, which answers once the markers are on
// the partition (three acks=all writes: PrepareCommit, the marker,
// CompleteCommit). Reported: the commit's latency (EndTransaction) p50 and
// p99, the whole transaction's p50, and records per second.
//
//	go test -run '^$' -bench BenchmarkTransactionCommit -benchtime 200x ./dataplane/broker/
func BenchmarkTransactionCommit(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			c := startTestCluster(b, testClusterOpts{})
			c.waitTopicLed(b, systemTenantID, txnStateTopic)
			ctx := context.Background()
			id := fmt.Sprintf("bench-%d", n)
			coord := c.txnCoordinatorIndex(b, 0, id)
			tm, _ := c.brokers[0].metadata().Topic(c.tenantID, "orders")
			txns := c.clientsOf(coord).txns
			records := c.clientsOf(int(tm.Partitions[0].Leader) - 1).records
			init, err := c.clientsOf(coord).records.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{TransactionalId: id}))
			require.NoError(b, err)
			pid, epoch := init.Msg.GetProducerId(), init.Msg.GetProducerEpoch()
			recs := make([]record.Record, n)
			for i := range recs {
				recs[i] = record.Record{OffsetDelta: int32(i), Value: make([]byte, 100)}
			}
			var commits, totals []time.Duration
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				t0 := time.Now()
				batch, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, FirstTimestamp: t0.UnixMilli(), ProducerID: pid, ProducerEpoch: int16(epoch), BaseSequence: 0}, recs)
				require.NoError(b, err)
				_, err = records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders", Acks: sluicev1.Acks_ACKS_ALL, TransactionalId: id,
					Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: batch}}}))
				require.NoError(b, err)
				t1 := time.Now()
				end, err := txns.EndTransaction(ctx, connect.NewRequest(&sluicev1.EndTransactionRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, Commit: true}))
				require.NoError(b, err)
				commits, totals = append(commits, time.Since(t1)), append(totals, time.Since(t0))
				pid, epoch = end.Msg.GetProducerId(), end.Msg.GetProducerEpoch()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(commits)
			slices.Sort(totals)
			q := func(d []time.Duration, p float64) float64 {
				return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
			}
			b.ReportMetric(q(commits, 0.5), "commit-p50-ms")
			b.ReportMetric(q(commits, 0.99), "commit-p99-ms")
			b.ReportMetric(q(totals, 0.5), "txn-p50-ms")
			b.ReportMetric(float64(n*len(commits))/elapsed.Seconds(), "records/s")
		})
	}
}
