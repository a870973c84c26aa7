package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testcluster"
)

// BenchmarkTiered measures tiered storage with real processes (the
// TestTiered… cluster: 3 brokers, RF 3, flush=always, 1 MiB segments,
// a 32 MiB cold-read cache, the default cold-read limits of 8 GETs in
// flight and 200 MiB/s, versitygw on loopback). One partition holds 96 MiB
// in the object store only ("cold"); another partition with the same
// leader takes produce ("hot"). Sub-benchmarks:
//
//   - cold-read: each op reads the whole cold range twice in a row: with
//     raw 1 MiB ranged GETs of the segments' .log objects straight from
//     versitygw (what the broker itself asks the server for), then through
//     the leader (Fetch of raw batches from offset 0, 8 MiB at a time,
//     gzip not accepted). It reports both rates and broker/raw. The cache
//     is smaller than the range, so every broker read is a miss.
//   - cold-read-sdk: the same range through the Go SDK's consumer, which
//     accepts gzip (Connect's default) so the broker compresses every
//     fetch response.
//   - hot-produce/idle, hot-produce/cold-replay and
//     hot-produce/cold-replay-nogzip: 8 goroutines each sending 16 × 1 KiB
//     acks=all requests to the hot partition in a closed loop; the second
//     while two SDK consumers replay the cold partition from offset 0 over
//     and over against the same leader, the third while two readers as in
//     cold-read (no gzip) do.
//
// Run it with:
//
//	go test -run '^$' -bench Tiered -benchtime 5s ./e2e/
//
// SLUICE_TIER_BENCH_SEGMENT_BYTES sets another --segment-bytes (the cold
// range stays 96 MiB).
func BenchmarkTiered(b *testing.B) {
	segmentBytes := int64(tierSegmentBytes)
	if v := os.Getenv("SLUICE_TIER_BENCH_SEGMENT_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatalf("SLUICE_TIER_BENCH_SEGMENT_BYTES: %v", err)
		}
		segmentBytes = n
	}
	e := startTier(b, tierOpts{Partitions: 4, SegmentBytes: segmentBytes})
	e.waitControllerGrace()
	ctx := context.Background()
	md := e.cl.NewestMetadata(ctx)
	cold, hot := int32(-1), int32(-1)
	for p := range int32(4) {
		for q := p + 1; q < 4; q++ {
			if cold < 0 && md[p].Leader > 0 && md[p].Leader == md[q].Leader {
				cold, hot = p, q
			}
		}
	}
	if cold < 0 {
		b.Fatalf("no two partitions share a leader: %v", md)
	}
	leader := md[cold].Leader

	pl := newPayloads(4 << 10)
	pr := e.newProducer(pl, cold, 64)
	if err := pr.produceBytes(ctx, 96<<20); err != nil {
		b.Fatal(err)
	}
	records, _, _ := pr.stats()
	r := e.waitHotTail(cold, e.c.BrokerIDs(), records-e.tailRecords(pl.size), 2*time.Minute)
	l, err := e.localLog(leader, cold)
	if err != nil {
		b.Fatal(err)
	}
	// Only what lies below every local log start is read: all of it cold.
	end := min(r.Through, l.Start()-1) // last offset to read
	var segs []*sluicev1.RemoteSegment
	var coldBytes int64
	for _, s := range r.Finished {
		if s.GetEndOffset() <= end {
			segs = append(segs, s)
			coldBytes += s.GetSizeBytes()
		}
	}
	end = segs[len(segs)-1].GetEndOffset()
	b.Logf("cold partition %d, hot partition %d, leader %d: %d remote segments, %d MiB, offsets [0, %d]", cold, hot, leader, len(segs), coldBytes>>20, end)

	s3c := awss3.New(awss3.Options{
		Region: e.s3.Region, BaseEndpoint: aws.String(e.s3.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(e.s3.AccessKey, e.s3.SecretKey, ""),
	})
	rawPass := func() (int64, time.Duration) {
		start := time.Now()
		var n int64
		for _, s := range segs {
			for off := int64(0); off < s.GetSizeBytes(); off += 1 << 20 {
				last := min(off+1<<20, s.GetSizeBytes()) - 1
				out, err := s3c.GetObject(ctx, &awss3.GetObjectInput{
					Bucket: aws.String(e.s3.Bucket), Key: aws.String(s.GetObjectKey() + ".log"),
					Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, last)),
				})
				if err != nil {
					b.Fatal(err)
				}
				m, err := io.Copy(io.Discard, out.Body)
				out.Body.Close()
				if err != nil {
					b.Fatal(err)
				}
				n += m
			}
		}
		return n, time.Since(start)
	}
	records16 := make([]*sluicev1.Record, 16)
	for i := range records16 {
		records16[i] = &sluicev1.Record{Value: pl.value(hot, int64(i))[:1024]}
	}
	brokerPass := func(ctx context.Context) (int64, time.Duration, error) {
		start := time.Now()
		var n int64
		rc := e.cl.Records(leader, noGzip)
		for off := int64(0); off <= end; {
			req := connect.NewRequest(&sluicev1.FetchRequest{Topic: tierTopic, Partition: cold, Offset: off, MaxBytes: 8 << 20, RawBatches: true})
			testcluster.NoForward(req.Header())
			res, err := rc.Fetch(ctx, req)
			if err != nil {
				return n, 0, err
			}
			data := res.Msg.GetBatches().GetData()
			if len(data) == 0 {
				return n, 0, fmt.Errorf("no batch at offset %d", off)
			}
			n += int64(len(data))
			off = res.Msg.GetNextOffset()
		}
		return n, time.Since(start), nil
	}
	sdk, err := client.New(ctx, e.c.ControlPlane(), client.APIKey(e.cl.APIKey))
	if err != nil {
		b.Fatal(err)
	}
	defer sdk.Close()
	sdkPass := func(ctx context.Context) (int64, error) {
		cs, err := sdk.NewConsumer(client.WithFetchMaxBytes(8 << 20))
		if err != nil {
			return 0, err
		}
		defer cs.Close()
		if err := cs.Assign(ctx, tierTopic, cold, client.Earliest()); err != nil {
			return 0, err
		}
		var n int64
		for {
			recs, err := cs.Poll(ctx)
			if err != nil {
				return n, err
			}
			for _, r := range recs {
				n += int64(len(r.Value))
				if r.Offset >= end {
					return n, nil
				}
			}
		}
	}
	mbps := func(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

	b.Run("cold-read", func(b *testing.B) {
		var rawN, brokerN int64
		var rawD, brokerD time.Duration
		for b.Loop() {
			n, d := rawPass()
			rawN, rawD = rawN+n, rawD+d
			n, d, err := brokerPass(ctx)
			if err != nil {
				b.Fatal(err)
			}
			brokerN, brokerD = brokerN+n, brokerD+d
		}
		var diag []string
		for _, m := range []string{"sluice_tier_read_throttled_seconds_total", "sluice_tier_cache_hits_total", "sluice_tier_cache_misses_total",
			"sluice_tier_prefetched_chunks_total", "sluice_tier_remote_read_bytes_total"} {
			v, err := e.metric(leader, m)
			if err != nil {
				b.Fatal(err)
			}
			diag = append(diag, fmt.Sprintf("%s=%v", strings.TrimPrefix(m, "sluice_tier_"), v))
		}
		b.Logf("leader %d after %d ops: %s", leader, b.N, strings.Join(diag, " "))
		b.ReportMetric(mbps(rawN, rawD), "raw-get-MB/s")
		b.ReportMetric(mbps(brokerN, brokerD), "broker-MB/s")
		b.ReportMetric(mbps(brokerN, brokerD)/mbps(rawN, rawD), "broker/raw")
	})
	b.Run("cold-read-sdk", func(b *testing.B) {
		var total int64
		start := time.Now()
		for b.Loop() {
			n, err := sdkPass(ctx)
			if err != nil {
				b.Fatal(err)
			}
			total += n
		}
		b.ReportMetric(mbps(total, time.Since(start)), "sdk-MB/s")
	})
	hotProduce := func(b *testing.B) {
		rc := e.cl.Records(md[hot].Leader)
		b.SetBytes(16 * 1024)
		closedLoop(b, 16, func(int64) error {
			req := connect.NewRequest(&sluicev1.ProduceRequest{
				Topic: tierTopic, Partition: hot, Acks: sluicev1.Acks_ACKS_ALL,
				Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: records16}},
			})
			testcluster.NoForward(req.Header())
			_, err := rc.Produce(ctx, req)
			return err
		})
	}
	// withReplay runs hotProduce while two replays loop over the cold
	// partition.
	withReplay := func(pass func(context.Context) (int64, error)) func(b *testing.B) {
		return func(b *testing.B) {
			rctx, stop := context.WithCancel(ctx)
			var replayed atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for range 2 {
				wg.Go(func() {
					for rctx.Err() == nil {
						n, err := pass(rctx)
						replayed.Add(n)
						if err != nil && rctx.Err() == nil {
							b.Error(err)
							return
						}
					}
				})
			}
			hotProduce(b)
			stop()
			wg.Wait()
			b.ReportMetric(mbps(replayed.Load(), time.Since(start)), "replay-MB/s")
		}
	}
	b.Run("hot-produce/idle", hotProduce)
	b.Run("hot-produce/cold-replay", withReplay(sdkPass))
	b.Run("hot-produce/cold-replay-nogzip", withReplay(func(ctx context.Context) (int64, error) {
		n, _, err := brokerPass(ctx)
		return n, err
	}))
}
