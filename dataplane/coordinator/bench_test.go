package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// delayPartition is an offsets partition whose every append (acks=all)
// takes delay, as a sync and the ISR's fetch do, and appends in flight at
// once overlap, as they share the leader's sync and the followers'
// fetches. It keeps no records: a coordinator loads it empty.
type delayPartition struct {
	delay time.Duration
	next  atomic.Int64
}

func (p *delayPartition) LogStartOffset() int64           { return 0 }
func (p *delayPartition) LEO() int64                      { return p.next.Load() }
func (p *delayPartition) Read(int64, int) ([]byte, error) { return nil, nil }
func (p *delayPartition) CheckLeader() error              { return nil }
func (p *delayPartition) Leads(int32) bool                { return true }

func (p *delayPartition) AppendAcksAll(ctx context.Context, _ int32, b log.ValidBatch) (int64, error) {
	t := time.NewTimer(p.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	n := int64(b.Header().RecordCount)
	return p.next.Add(n) - n, nil
}

// latencies collects durations.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.d = append(l.d, d)
}

// quantile is the q-quantile (0..1) of what was collected.
func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return l.d[int(q*float64(len(l.d)-1))]
}

// BenchmarkGroupCommitsWithHeartbeats: the members of one group commit
// their own partition's offset synchronously, one commit after another
// (b.N commits in all), on an offsets partition whose appends take 2 ms,
// while each member also heartbeats (every millisecond: many more than a
// real member sends, to sample their latency). Reported: commits/s, the
// commits' p50 and the heartbeats' p50 and p99. A group whose commits
// share the appends in flight does members × 1/2ms commits/s; heartbeats
// write nothing and should take microseconds.
func BenchmarkGroupCommitsWithHeartbeats(b *testing.B) {
	for _, members := range []int{1, 3} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			benchGroupCommits(b, members)
		})
	}
}

func benchGroupCommits(b *testing.B, members int) {
	ctx := context.Background()
	p := &delayPartition{delay: 2 * time.Millisecond}
	c := New(p, Config{Partition: 0, LeaderEpoch: 1, SessionTimeout: time.Minute, HeartbeatInterval: time.Second})
	if err := c.Load(ctx); err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	tps := group.TopicMap(map[string]int32{"orders": int32(members)})
	joined := make([]group.HeartbeatResponse, members)
	for i := range joined {
		m, err := c.Heartbeat(ctx, time.Now(), "tenant-a", "g", "", tps, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
		if err != nil {
			b.Fatal(err)
		}
		joined[i] = m
	}

	var hb, commits latencies
	stop := make(chan struct{})
	var beats sync.WaitGroup
	for _, m := range joined {
		beats.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				res, err := c.Heartbeat(ctx, t0, "tenant-a", "g", "", tps, group.HeartbeatRequest{MemberID: m.MemberID, MemberEpoch: m.MemberEpoch})
				hb.add(time.Since(t0))
				if err != nil {
					b.Error(err)
					return
				}
				m.MemberEpoch = res.MemberEpoch
				time.Sleep(time.Millisecond) // pacing: the heartbeats' pace, not synchronisation
			}
		})
	}

	b.ResetTimer()
	start := time.Now()
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() {
			for n := done.Add(1); n <= int64(b.N); n = done.Add(1) {
				oc := OffsetCommit{TopicID: "id-1", Offset: &sluicev1.PartitionOffset{Topic: "orders", Partition: int32(i), Offset: n}}
				t0 := time.Now()
				if err := c.CommitOffsets(ctx, t0, "tenant-a", "g", []OffsetCommit{oc}); err != nil {
					b.Error(err)
					return
				}
				commits.add(time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	beats.Wait()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(commits.quantile(0.5).Microseconds())/1000, "commit-p50-ms")
	b.ReportMetric(float64(hb.quantile(0.5).Microseconds())/1000, "hb-p50-ms")
	b.ReportMetric(float64(hb.quantile(0.99).Microseconds())/1000, "hb-p99-ms")
}
