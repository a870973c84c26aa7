package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// BenchmarkFetcherApply is the follower side of a round-robin produce over
// many partitions: each op applies, to every one of n following replicas
// (real logs in their own directories, --flush always), the leader's
// answer with one 1-record batch, as a fetch round does (applyFetch), and
// with sync also makes each durable first, as the next round of its
// fetcher does (dataplane/partition/fetcher; one at a time here). It reports the time per
// partition.
func BenchmarkFetcherApply(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, sync := range []bool{false, true} {
			b.Run(fmt.Sprintf("partitions=%d/sync=%v", n, sync), func(b *testing.B) {
				benchFetcherApply(b, n, sync)
			})
		}
	}
}

func benchFetcherApply(b *testing.B, n int, sync bool) {
	h := newTestHost(b)
	type part struct {
		p   *Replica
		fol *replica.Follower
	}
	parts := make([]part, n)
	for i := range parts {
		p, err := Open(h, Spec{TenantID: "t1", TopicID: "topic-b", Partition: int32(i), Dir: b.TempDir(), Config: TopicConfig{MinISR: 2}})
		require.NoError(b, err)
		b.Cleanup(func() { p.log.Close() })
		fol, err := replica.NewFollower(replica.FollowerParams{Self: 1, BrokerEpoch: 1, Leader: 2, LeaderEpoch: 3})
		require.NoError(b, err)
		p.mu.Lock()
		p.role, p.fol = RoleFollower, fol
		p.meta = Assignment{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 3, ISR: []int32{1, 2, 3}}
		p.mu.Unlock()
		parts[i] = part{p, fol}
	}
	val := make([]byte, 100)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	b.ResetTimer()
	for b.Loop() {
		for _, pt := range parts {
			p := pt.p
			if sync {
				require.NoError(b, p.log.MakeDurable(ctx, p.log.LEO()))
			}
			p.mu.Lock()
			q := pt.fol.Next(logState(p.log))
			p.mu.Unlock()
			batch, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: q.FetchOffset, LeaderEpoch: 3, FirstTimestamp: now, MaxTimestamp: now, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
				[]record.Record{{Value: val}})
			if err != nil {
				b.Fatal(err)
			}
			res := &sluicev1.FetchReplicaResponse{Batches: batch, HighWatermark: q.FetchOffset}
			if err := p.applyFetch(pt.fol, q, res); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/partition")
}
