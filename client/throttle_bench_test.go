package client_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// BenchmarkThrottleAdmitted measures how much of its produce quota a
// tenant over it is admitted: one producer offers a 1 MiB/s (cluster-wide)
// tenant as much as its buffer takes, over three partitions of the
// package's three-broker cluster, and the acknowledged bytes over 20 s
// after a 20 s warm-up are reported as admitted/quota (1 is the quota; a
// broker that leads none of the partitions holds the division's floor, so
// the ceiling is 0.93 when one broker leads all three). Each iteration is
// one 40 s run with a tenant of its own; run it with -benchtime 1x:
//
//	go test -run '^$' -bench BenchmarkThrottleAdmitted -benchtime 1x ./client/
func BenchmarkThrottleAdmitted(b *testing.B) {
	for _, inflight := range []int{5, 1} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				b.ReportMetric(admittedShare(b, inflight, i), "admitted/quota")
			}
		})
	}
}

func admittedShare(b *testing.B, inflight, run int) float64 {
	const limit = 1 << 20
	rate := int64(limit)
	name := strings.ToLower(fmt.Sprintf("bench-admitted-%d-%d-%d", inflight, run, time.Now().UnixNano()))
	_, key := quotaTenant(b, name, &sluicev1.LimitOverrides{ProduceBytesPerSec: &rate})
	c, err := client.New(b.Context(), endpoint, client.APIKey(key))
	require.NoError(b, err)
	defer c.Close()
	const topic = "admitted"
	require.NoError(b, createTopicAs(key, topic, 3, nil))
	p, err := c.NewProducer(b.Context(), client.WithDeliveryTimeout(2*time.Minute), client.WithMaxInFlight(inflight), client.WithBufferBytes(2<<20))
	require.NoError(b, err)
	var acked atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i += 64 {
			select {
			case <-stop:
				return
			default:
			}
			for _, r := range recordsOf(topic, i, 64, 1024) {
				p.Produce(b.Context(), r, func(r *client.Record, err error) {
					if err == nil {
						acked.Add(int64(len(r.Value)))
					}
				})
			}
		}
	}()
	time.Sleep(20 * time.Second) // window: warm-up, the allotments settle
	a0, t0 := acked.Load(), time.Now()
	time.Sleep(20 * time.Second) // window: the measured window
	a1, t1 := acked.Load(), time.Now()
	close(stop)
	<-done
	p.Close(b.Context())
	share := float64(a1-a0) / t1.Sub(t0).Seconds() / limit
	b.Logf("inflight %d: %.3f of the quota admitted; throttled %+v", inflight, share, c.Stats().Throttle[client.KindProduce])
	return share
}
