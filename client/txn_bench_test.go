package client_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicemq/sluice/client"
)

// BenchmarkTransactionCommit measures transactions of 1, 10, 100 and 1000
// records of 100 bytes to a 3-partition RF 3 topic of the in-process
// cluster (three brokers, like sluice dev): one op is Begin, the records,
// Commit (which waits for every record, then for the markers on every
// partition of the transaction). It reports the commit latency (Begin to
// Commit's return) p50 and p99 and the records committed per second.
//
//	go test -run '^$' -bench BenchmarkTransactionCommit -benchtime 200x ./client/
func BenchmarkTransactionCommit(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			topic := fmt.Sprintf("txn-bench-%d-%d", n, time.Now().UnixNano())
			createTopic(b, topic, 3, nil)
			c, err := client.New(b.Context(), endpoint, client.APIKey(apiKey))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			tp, err := c.NewTransactionalProducer(b.Context(), topic)
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close(b.Context())
			value := make([]byte, 100)
			recs := make([]*client.Record, n)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			start := time.Now()
			for b.Loop() {
				t0 := time.Now()
				if err := tp.Begin(); err != nil {
					b.Fatal(err)
				}
				for i := range recs {
					recs[i] = &client.Record{Topic: topic, Key: fmt.Appendf(nil, "%d", i), Value: value}
					tp.Produce(b.Context(), recs[i], nil)
				}
				if err := tp.Commit(b.Context()); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			elapsed := time.Since(start)
			slices.Sort(lat)
			q := func(f float64) float64 { return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))]) / 1e6 }
			b.ReportMetric(q(0.50), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(float64(len(lat)*n)/elapsed.Seconds(), "records/s")
		})
	}
}
