package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/tenants"
)

// BenchmarkTransactions measures transactions of the SDK's
// TransactionalProducer against a real `sluice dev` process (control
// plane + 3 brokers, --flush always) on loopback: one topic of 3
// partitions, RF 3, min ISR 2; 100-byte values spread evenly over the
// three partitions. One op of records=N is Begin, ProduceSync of N
// records (each partition's leader verifies its first batch with the
// transaction coordinator), Commit (PrepareCommit, a marker on each of the
// 3 partitions, CompleteCommit: three acks=all writes after another).
// offsets/records=100 also commits the offsets of a consumer group in the
// transaction (SendOffsets before Commit: a fourth partition, the group's
// offsets partition, gets a marker). baseline/records=N is the same
// records with the idempotent producer (ProduceSync, acks=all), so the
// transaction's cost is the difference. One op at a time, one producer.
//
// Reported: commit-p50/p99-ms (the Commit call alone), txn-p50/p99-ms
// (Begin to Commit's return; for the baseline, ProduceSync), records/s
// and txns/s (ops per second).
//
//	go test -run '^$' -bench BenchmarkTransactions -benchtime 200x ./e2e/
func BenchmarkTransactions(b *testing.B) {
	dir := b.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli.json"), testcluster.FreeAddr(b)
	dev := startDev(b, dataDir, cfgPath, addr)
	endpoint := "http://" + addr
	apiKey := devAPIKey(b, cfgPath)
	ctx := context.Background()
	hc := h2c()
	tok, err := sluicev1connect.NewAuthServiceClient(hc, endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey}))
	if err != nil {
		b.Fatal(err)
	}
	auth := connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken()))
	const topic, partitions = "txn-bench", 3
	minISR := int32(2) // the default, said here because it is what is measured
	if _, err := sluicev1connect.NewTopicServiceClient(hc, endpoint, auth).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{
		Name: topic, PartitionCount: partitions, ReplicationFactor: 3,
		Config: &sluicev1.TopicConfig{MinInsyncReplicas: &minISR},
	})); err != nil {
		b.Fatal(err)
	}
	brokers := strings.Fields(devLine(dev.out.String(), "brokers"))
	waitLeaders(b, hc, "http://"+brokers[0], auth, topic, partitions)
	cl, err := client.New(ctx, endpoint, client.APIKey(apiKey))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()

	value := make([]byte, 100)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	records := func(n int) []*client.Record {
		recs := make([]*client.Record, n)
		for i := range recs {
			recs[i] = &client.Record{Topic: topic, Partition: int32(i % partitions), Value: value}
		}
		return recs
	}
	// run does b.N ops after one untimed warm-up op; op returns how long
	// its commit took (0 when it has none).
	run := func(b *testing.B, n int, op func() (time.Duration, error)) {
		if _, err := op(); err != nil {
			b.Fatal(err)
		}
		commits := make([]time.Duration, 0, b.N)
		totals := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		start := time.Now()
		for b.Loop() {
			t0 := time.Now()
			commit, err := op()
			if err != nil {
				b.Fatal(err)
			}
			totals = append(totals, time.Since(t0))
			if commit > 0 {
				commits = append(commits, commit)
			}
		}
		elapsed := time.Since(start)
		b.StopTimer()
		if len(commits) > 0 {
			reportQuantiles(b, "commit", commits)
		}
		reportQuantiles(b, "txn", totals)
		b.ReportMetric(float64(n*len(totals))/elapsed.Seconds(), "records/s")
		b.ReportMetric(float64(len(totals))/elapsed.Seconds(), "txns/s")
	}

	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			tp, err := cl.NewTransactionalProducer(ctx, fmt.Sprintf("bench-%d", n), client.WithManualPartitioner())
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close(ctx)
			run(b, n, func() (time.Duration, error) {
				if err := tp.Begin(); err != nil {
					return 0, err
				}
				if err := tp.ProduceSync(ctx, records(n)...); err != nil {
					return 0, err
				}
				t := time.Now()
				err := tp.Commit(ctx)
				return time.Since(t), err
			})
		})
	}
	b.Run("offsets/records=100", func(b *testing.B) {
		tp, err := cl.NewTransactionalProducer(ctx, "bench-offsets", client.WithManualPartitioner())
		if err != nil {
			b.Fatal(err)
		}
		defer tp.Close(ctx)
		// A group without members: its offsets are committed without a
		// member id, as an admin or a standalone consumer does.
		member := client.GroupMember{Group: "txn-bench-group"}
		var next int64
		run(b, 100, func() (time.Duration, error) {
			if err := tp.Begin(); err != nil {
				return 0, err
			}
			if err := tp.ProduceSync(ctx, records(100)...); err != nil {
				return 0, err
			}
			next++
			offsets := make([]client.PartitionOffset, partitions)
			for p := range offsets {
				offsets[p] = client.PartitionOffset{Topic: topic, Partition: int32(p), Offset: next}
			}
			if err := tp.SendOffsets(ctx, member, offsets); err != nil {
				return 0, err
			}
			t := time.Now()
			err := tp.Commit(ctx)
			return time.Since(t), err
		})
	})
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("baseline/records=%d", n), func(b *testing.B) {
			p, err := cl.NewProducer(ctx, client.WithManualPartitioner())
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			run(b, n, func() (time.Duration, error) { return 0, p.ProduceSync(ctx, records(n)...) })
		})
	}
}

// devAPIKey is the dev profile's API key that `sluice dev` saved in
// cfgPath.
func devAPIKey(b testing.TB, cfgPath string) string {
	var prof struct {
		Profiles map[string]struct {
			APIKey string `json:"api_key"`
		} `json:"profiles"`
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(raw, &prof); err != nil {
		b.Fatal(err)
	}
	return prof.Profiles["dev"].APIKey
}

// reportQuantiles reports the p50 and p99 of lat (sorting it) in ms as
// name-p50-ms and name-p99-ms.
func reportQuantiles(b *testing.B, name string, lat []time.Duration) {
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), name+"-p50-ms")
	b.ReportMetric(q(0.99), name+"-p99-ms")
}
