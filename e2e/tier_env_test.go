package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// Helpers of the TestTiered… family and BenchmarkTiered: a real versitygw,
// a cluster of real brokers tiering to it, a producer of self-describing
// payloads, a reader that checks every record byte for byte, and probes of
// the brokers' disks, the control plane's remote segment metadata and the
// brokers' metrics.

const (
	tierSegmentBytes = 1 << 20 // default --segment-bytes: the minimum, so that many segments close
	tierTopic        = "logs"
)

// tierOpts configure startTier. Zero values take the defaults.
type tierOpts struct {
	Partitions int32 // default 1
	// LocalRetentionBytes is the topic's local_retention_bytes (default
	// 4 MiB).
	LocalRetentionBytes int64
	// CopyInterval is --tier-copy-interval (default 200ms).
	CopyInterval time.Duration
	// SegmentBytes is --segment-bytes (default tierSegmentBytes).
	SegmentBytes int64
	// Link puts a testcluster.Proxy between the brokers and the S3 server,
	// to slow or cut that link.
	Link bool
	// PreferredLeaderDelay is the control plane's (default 10s).
	PreferredLeaderDelay time.Duration
	// ExtraBrokerArgs are more broker flags.
	ExtraBrokerArgs []string
	// Plain starts the race-free build (plainBin) even with
	// SLUICE_E2E_RACE=1 under -race: for a test whose subject is volume,
	// not concurrency under faults.
	Plain bool
}

// tierEnv is a versitygw, a 3-broker cluster tiering to it, and a tenant's
// client for a topic with replication factor 3, min ISR 2 and a short
// local retention.
type tierEnv struct {
	t              testing.TB
	s3             *testenv.S3Server
	link           *testcluster.Proxy // nil without tierOpts.Link
	c              *testcluster.Cluster
	cl             *testcluster.Client
	localRetention int64
	segmentBytes   int64
	started        time.Time
}

// startTier starts the S3 server, the cluster and the topic.
func startTier(t testing.TB, o tierOpts) *tierEnv {
	t.Helper()
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	if o.LocalRetentionBytes == 0 {
		o.LocalRetentionBytes = 4 << 20
	}
	if o.CopyInterval == 0 {
		o.CopyInterval = 200 * time.Millisecond
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = tierSegmentBytes
	}
	start := time.Now()
	s3 := testenv.S3(t)
	e := &tierEnv{t: t, s3: s3, localRetention: o.LocalRetentionBytes, segmentBytes: o.SegmentBytes, started: start}
	endpoint := s3.Endpoint
	if o.Link {
		e.link = testcluster.NewProxy(t, strings.TrimPrefix(s3.Endpoint, "http://"))
		endpoint = "http://" + e.link.Addr()
	}
	args := []string{
		"--segment-bytes", strconv.FormatInt(o.SegmentBytes, 10),
		"--retention-check-interval", "200ms",
		"--tier-copy-interval", o.CopyInterval.String(),
		"--tier-cache-bytes", strconv.Itoa(32 << 20),
		"--tier-s3-bucket", s3.Bucket,
		"--tier-s3-region", s3.Region,
		"--tier-s3-endpoint", endpoint,
		"--tier-s3-path-style",
	}
	bin := sluiceBin
	if o.Plain {
		bin = plainBin
	}
	e.c = testcluster.Start(t, testcluster.Options{
		Bin: bin, DatabaseURL: testenv.PostgresURL(t),
		PreferredLeaderDelay: o.PreferredLeaderDelay,
		ExtraBrokerArgs:      append(args, o.ExtraBrokerArgs...),
		BrokerEnv: []string{
			"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey, "AWS_REGION=" + s3.Region,
			"AWS_EC2_METADATA_DISABLED=true",
		},
	})
	minISR := int32(2)
	e.cl = e.c.NewClientWithConfig(t, "acme", tierTopic, o.Partitions, &sluicev1.TopicConfig{
		MinInsyncReplicas: &minISR, LocalRetentionBytes: &o.LocalRetentionBytes,
	})
	t.Logf("tiered cluster up in %s (dir %s, S3 %s)", time.Since(start).Round(time.Millisecond), e.c.Dir, s3.Endpoint)
	return e
}

// noMeteringArgs are broker flags for tests that damage a stored object
// and need the brokers not to have read it before: usage metering scans
// the logs of the partitions a broker leads through their read path
// (meter.Scan), which reads the object store below the local log start
// and fills the chunk and index caches with what it read. Its first scan
// comes with the second report, 10-20 s after the topic appears: on a
// busy machine, after the first segments left the disks, and a fetch of
// the damaged batch is then served (correctly) from the cache. A report
// interval longer than any test keeps metering from reading.
var noMeteringArgs = []string{"--usage-report-interval", "1h"}

// requireNoColdRead fails the test unless the broker has read nothing from
// the object store yet (sluice_tier_remote_read_bytes_total and
// sluice_tier_cache_misses_total are 0): none of its caches holds a chunk
// or an index of a remote segment.
func (e *tierEnv) requireNoColdRead(broker int32) {
	e.t.Helper()
	read := e.mustMetric(broker, "sluice_tier_remote_read_bytes_total")
	misses := e.mustMetric(broker, "sluice_tier_cache_misses_total")
	if read != 0 || misses != 0 {
		e.t.Fatalf("broker %d already read %g bytes from the object store (%g chunks): its cache may hold what the test damages", broker, read, misses)
	}
}

// waitControllerGrace waits until the controller's startup grace (the
// broker lease, 3s) is over, so that it elects leaders at once.
func (e *tierEnv) waitControllerGrace() {
	e.t.Helper()
	testenv.Wait(e.t, 10*time.Second, "the controller's startup grace to end", func() error {
		if d := time.Since(e.started); d < 4*time.Second {
			return fmt.Errorf("cluster up for %s", d)
		}
		return nil
	})
}

// leader is the partition's leader in the newest metadata, or -1.
func (e *tierEnv) leader(partition int32) testcluster.PartitionInfo {
	// NewestMetadata gives each broker a second; on a loaded machine none
	// may answer in time, which says nothing of the partition: ask again
	// (for up to 30 s) until one does.
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		md, ok := e.cl.NewestMetadata(ctx)[partition]
		cancel()
		if ok {
			return md
		}
		if time.Now().After(deadline) {
			return testcluster.PartitionInfo{Partition: partition, Leader: -1}
		}
		time.Sleep(100 * time.Millisecond) // backoff: before asking the brokers again
	}
}

// payloads makes record values that say what they must be: a header with
// the partition and a sequence number, then bytes of a fixed random pool
// at a place the sequence number chooses. Every value is distinct and can
// be checked byte for byte without keeping what was sent.
type payloads struct {
	pool []byte
	size int
}

const payloadHeader = len("p0000-s000000000000|")

func newPayloads(size int) *payloads {
	pool := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{'s', 'l', 'u', 'i', 'c', 'e'})
	_, _ = r.Read(pool)
	return &payloads{pool: pool, size: max(size, payloadHeader+1)}
}

func (pl *payloads) value(partition int32, seq int64) []byte {
	v := make([]byte, 0, pl.size)
	v = fmt.Appendf(v, "p%04d-s%012d|", partition, seq)
	return append(v, pl.body(seq)...)
}

// body is what follows the header in the value of seq.
func (pl *payloads) body(seq int64) []byte {
	n := pl.size - payloadHeader
	at := int(uint64(seq)*7919) % (len(pl.pool) - n)
	return pl.pool[at : at+n]
}

// check returns the sequence number of a value of partition, or an error
// if the value is not exactly what value produced for it. It allocates
// nothing, as it runs for every record read back.
func (pl *payloads) check(partition int32, v []byte) (int64, error) {
	if len(v) != pl.size {
		return 0, fmt.Errorf("value of %d bytes, want %d", len(v), pl.size)
	}
	p, ok1 := parseDigits(v[1:5])
	seq, ok2 := parseDigits(v[7:19])
	if v[0] != 'p' || v[5] != '-' || v[6] != 's' || v[19] != '|' || !ok1 || !ok2 {
		return 0, fmt.Errorf("value header %q", v[:payloadHeader])
	}
	if p != int64(partition) {
		return 0, fmt.Errorf("value of partition %d in partition %d", p, partition)
	}
	if !bytes.Equal(v[payloadHeader:], pl.body(seq)) {
		return seq, fmt.Errorf("value of seq %d differs from what was produced", seq)
	}
	return seq, nil
}

func parseDigits(b []byte) (int64, bool) {
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// ackedRange is one acknowledged produce: seqs [Seq, Seq+N) at offsets
// [Offset, Offset+N).
type ackedRange struct {
	Offset, Seq int64
	N           int
}

// tierProducer produces payloads to one partition with acks=all, perReq
// records per request, and records where each request was acknowledged.
// A request that fails is sent again (to the new leader after a
// failover) until it is acknowledged or retryFor passes, so a record may
// be in the log twice only if an attempt failed indefinitely.
type tierProducer struct {
	e         *tierEnv
	pl        *payloads
	partition int32
	perReq    int
	retryFor  time.Duration

	mu       sync.Mutex
	next     int64 // next sequence number
	acked    []ackedRange
	bytes    int64
	failures int // attempts that failed
	lastErr  error
}

func (e *tierEnv) newProducer(pl *payloads, partition int32, perReq int) *tierProducer {
	return &tierProducer{e: e, pl: pl, partition: partition, perReq: perReq, retryFor: 60 * time.Second}
}

// produceOne sends the next request and retries it until it is
// acknowledged; it returns the last error after retryFor.
func (p *tierProducer) produceOne(ctx context.Context) error {
	p.mu.Lock()
	seq := p.next
	p.next += int64(p.perReq)
	p.mu.Unlock()
	values := make([]string, p.perReq)
	size := 0
	for i := range values {
		values[i] = string(p.pl.value(p.partition, seq+int64(i)))
		size += len(values[i])
	}
	deadline := time.Now().Add(p.retryFor)
	for {
		// 30 s: on a loaded machine (make test-busy) an acks=all request
		// of 256 KiB once took over 10 s without any fault, which the
		// tests would count as a failed attempt.
		res := p.e.cl.Produce(ctx, p.partition, values, sluicev1.Acks_ACKS_ALL, 30*time.Second)
		if res.Err == nil {
			p.mu.Lock()
			p.acked = append(p.acked, ackedRange{Offset: res.Base, Seq: seq, N: len(values)})
			p.bytes += int64(size)
			p.mu.Unlock()
			return nil
		}
		p.mu.Lock()
		p.failures++
		p.lastErr = res.Err
		p.mu.Unlock()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("produce seqs [%d, %d) to partition %d: %w", seq, seq+int64(len(values)), p.partition, res.Err)
		}
		time.Sleep(50 * time.Millisecond) // backoff: before the retry
	}
}

// produceBytes produces until at least n more bytes are acknowledged.
func (p *tierProducer) produceBytes(ctx context.Context, n int64) error {
	p.mu.Lock()
	target := p.bytes + n
	p.mu.Unlock()
	for {
		p.mu.Lock()
		done := p.bytes >= target
		p.mu.Unlock()
		if done {
			return nil
		}
		if err := p.produceOne(ctx); err != nil {
			return err
		}
	}
}

// run produces until ctx ends (or a request fails for retryFor) in the
// background; wait returns the error that stopped it, if any.
func (p *tierProducer) run(ctx context.Context) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := p.produceOne(ctx); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return func() error { return <-done }
}

// stats returns what the producer has had acknowledged.
func (p *tierProducer) stats() (records int64, bytes int64, failures int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.acked {
		records += int64(a.N)
	}
	return records, p.bytes, p.failures
}

// noGzip stops a client from accepting gzip-compressed responses, which
// the broker otherwise sends (Connect's default): gunzipping hundreds of
// MB in a test binary built with -race takes minutes.
var noGzip = connect.WithAcceptCompression("gzip", nil, nil)

// readStats is what readAll read.
type readStats struct {
	Records, Bytes int64
	HW             int64
	Elapsed        time.Duration
}

// readAll reads the partition from offset 0 up to its high watermark
// through broker via (the current leader when via is 0), maxBytes per
// fetch, and checks: offsets are consecutive from 0; every value is a
// payload of this partition, byte for byte; every acknowledged record is
// at its acknowledged offset; with strict, record i is sequence number i
// (nothing was produced twice). Unavailable answers (a leader change, a
// new leader catching up) are retried for up to a minute; any other error
// fails.
func (e *tierEnv) readAll(ctx context.Context, pl *payloads, partition int32, via int32, maxBytes int32, p *tierProducer, strict bool) (readStats, error) {
	start := time.Now()
	var seqs []int64 // by offset
	var it record.RecordIter
	var st readStats
	hw := int64(-1)
	var lastErr error
	retryUntil := time.Time{}
	broker := via
	for hw < 0 || int64(len(seqs)) < hw {
		if broker <= 0 {
			broker = e.leader(partition).Leader // again after an error, when following the leader
		}
		off := int64(len(seqs))
		if broker <= 0 {
			// Offline for now (an election under way), or no broker
			// answered: retried below like an unavailable leader.
			if retryUntil.IsZero() {
				retryUntil = time.Now().Add(time.Minute)
			}
			if time.Now().After(retryUntil) {
				return st, fmt.Errorf("partition %d has had no leader for a minute (fetching offset %d; first error: %v)", partition, off, lastErr)
			}
			time.Sleep(50 * time.Millisecond) // backoff: before asking for the leader again
			continue
		}
		req := connect.NewRequest(&sluicev1.FetchRequest{Topic: e.cl.Topic, Partition: partition, Offset: off, MaxBytes: maxBytes, RawBatches: true})
		testcluster.NoForward(req.Header())
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		res, err := e.cl.Records(broker, noGzip).Fetch(cctx, req)
		cancel()
		if err != nil {
			code := connect.CodeOf(err)
			if code != connect.CodeUnavailable && code != connect.CodeFailedPrecondition && code != connect.CodeDeadlineExceeded {
				return st, fmt.Errorf("fetch offset %d of partition %d from broker %d: %w", off, partition, broker, err)
			}
			if retryUntil.IsZero() {
				retryUntil = time.Now().Add(time.Minute)
			}
			if time.Now().After(retryUntil) {
				return st, fmt.Errorf("fetch offset %d of partition %d from broker %d, retried for a minute: %w (first: %v)", off, partition, broker, err, lastErr)
			}
			if lastErr == nil {
				lastErr = err
			}
			if via == 0 {
				broker = 0
			}
			time.Sleep(50 * time.Millisecond) // backoff: before the retry
			continue
		}
		retryUntil, lastErr = time.Time{}, nil
		if hw < 0 {
			hw = res.Msg.GetHighWatermark()
			seqs = make([]int64, 0, hw)
		}
		data := res.Msg.GetBatches().GetData()
		if len(data) == 0 {
			return st, fmt.Errorf("fetch offset %d of partition %d (HW %d) from broker %d returned no batch", off, partition, hw, broker)
		}
		// Decoded as the SDK's consumer does (it fetches raw batches too).
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			if err != nil {
				return st, fmt.Errorf("partition %d: batch fetched at offset %d: %w", partition, off, err)
			}
			data = rest
			if b.Header().Attributes.Control() {
				return st, fmt.Errorf("partition %d: control batch at offset %d", partition, b.BaseOffset())
			}
			if err := it.Reset(b); err != nil {
				return st, fmt.Errorf("partition %d: batch at offset %d: %w", partition, b.BaseOffset(), err)
			}
			for it.Next() {
				r := it.Record()
				offset := b.BaseOffset() + int64(r.OffsetDelta)
				if offset >= hw {
					break
				}
				if offset < int64(len(seqs)) {
					continue // the start of a batch that holds the offset asked for
				}
				if offset != int64(len(seqs)) {
					return st, fmt.Errorf("partition %d: record at offset %d after offset %d", partition, offset, len(seqs)-1)
				}
				seq, err := pl.check(partition, r.Value)
				if err != nil {
					return st, fmt.Errorf("partition %d offset %d: %w", partition, offset, err)
				}
				if strict && seq != offset {
					return st, fmt.Errorf("partition %d offset %d holds seq %d", partition, offset, seq)
				}
				seqs = append(seqs, seq)
				st.Bytes += int64(len(r.Value))
			}
			if err := it.Err(); err != nil {
				return st, fmt.Errorf("partition %d: records of the batch at offset %d: %w", partition, b.BaseOffset(), err)
			}
		}
	}
	st.Records, st.HW, st.Elapsed = int64(len(seqs)), hw, time.Since(start)
	if p != nil {
		p.mu.Lock()
		acked := slices.Clone(p.acked)
		p.mu.Unlock()
		for _, a := range acked {
			for i := range int64(a.N) {
				off := a.Offset + i
				if off >= int64(len(seqs)) {
					return st, fmt.Errorf("partition %d: acknowledged seq %d at offset %d is at or above the HW %d: lost", partition, a.Seq+i, off, hw)
				}
				if seqs[off] != a.Seq+i {
					return st, fmt.Errorf("partition %d: offset %d holds seq %d, acknowledged seq %d there", partition, off, seqs[off], a.Seq+i)
				}
			}
		}
	}
	return st, nil
}

// localLog is what a broker holds on disk of a partition: the base offsets
// of its segment files and their total size (.log files only).
type localLog struct {
	Bases []int64
	Bytes int64
}

// Start is the first offset on disk, or -1 without a segment.
func (l localLog) Start() int64 {
	if len(l.Bases) == 0 {
		return -1
	}
	return l.Bases[0]
}

func (e *tierEnv) localLog(broker, partition int32) (localLog, error) {
	dir := e.c.PartitionDir(broker, e.cl.TenantID, e.cl.TopicID, partition)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return localLog{}, err
	}
	var l localLog
	for _, ent := range ents {
		name, ok := strings.CutSuffix(ent.Name(), ".log")
		if !ok || len(name) != 20 {
			continue
		}
		base, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		info, err := ent.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted by retention meanwhile
		}
		if err != nil {
			return localLog{}, err
		}
		l.Bases = append(l.Bases, base)
		l.Bytes += info.Size()
	}
	slices.Sort(l.Bases)
	return l, nil
}

// remoteState is the control plane's remote segment metadata of a
// partition.
type remoteState struct {
	All      []*sluicev1.RemoteSegment
	Finished []*sluicev1.RemoteSegment // COPY_FINISHED, by base offset
	// Through is the last offset the finished segments hold (-1: none).
	Through int64
}

func (r remoteState) count(state sluicev1.RemoteSegmentState) int {
	n := 0
	for _, s := range r.All {
		if s.GetState() == state {
			n++
		}
	}
	return n
}

// remote reads the partition's remote segments and checks the finished
// ones: they start at offset 0 and follow each other with no gap, no
// overlap and no duplicate (each starts right after the previous one
// ends).
func (e *tierEnv) remote(ctx context.Context, partition int32) (remoteState, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all, err := e.c.RemoteSegments(cctx, e.cl.TopicID, partition)
	if err != nil {
		return remoteState{}, err
	}
	r := remoteState{All: all, Through: -1}
	for _, s := range all {
		if s.GetState() == sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED {
			r.Finished = append(r.Finished, s)
		}
	}
	slices.SortFunc(r.Finished, func(a, b *sluicev1.RemoteSegment) int { return int(a.GetBaseOffset() - b.GetBaseOffset()) })
	for i, s := range r.Finished {
		want := r.Through + 1
		if s.GetBaseOffset() != want || s.GetEndOffset() < s.GetBaseOffset() {
			return r, fmt.Errorf("partition %d: finished remote segment %d is [%d, %d], want it to start at %d (gap, overlap or duplicate): %s",
				partition, i, s.GetBaseOffset(), s.GetEndOffset(), want, describeRemote(r.Finished))
		}
		r.Through = s.GetEndOffset()
	}
	return r, nil
}

func describeRemote(segs []*sluicev1.RemoteSegment) string {
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, "[%d,%d]e%d/b%d/%s ", s.GetBaseOffset(), s.GetEndOffset(), s.GetLeaderEpoch(), s.GetBrokerId(),
			strings.TrimPrefix(s.GetState().String(), "REMOTE_SEGMENT_STATE_"))
	}
	return b.String()
}

// tailRecords is how many records of size bytes the last two segments
// hold at most: what may not be copied yet when production stops.
func (e *tierEnv) tailRecords(size int) int64 { return 2 * e.segmentBytes / int64(size) }

// waitHotTail waits until every broker in brokers holds only the hot tail
// of the partition: its local log starts after offset 0 and no later than
// one past the last copied offset (nothing uncopied was deleted), and its
// segment files total at most the local retention plus two segments (the
// oldest one retention cannot drop without going under the limit, and
// the active one). It also waits until the remote segments reach at least
// through (e.g. what was produced before the last segment rolled).
func (e *tierEnv) waitHotTail(partition int32, brokers []int32, through int64, timeout time.Duration) remoteState {
	e.t.Helper()
	var r remoteState
	bound := e.localRetention + 2*e.segmentBytes
	testenv.Wait(e.t, timeout, fmt.Sprintf("partition %d tiered: only the hot tail on brokers %v", partition, brokers), func() error {
		// The disks first: what is copied only grows, so a local log start
		// seen before the metadata can be compared with it.
		locals := make([]localLog, len(brokers))
		for i, b := range brokers {
			var err error
			if locals[i], err = e.localLog(b, partition); err != nil {
				return err
			}
		}
		var err error
		if r, err = e.remote(context.Background(), partition); err != nil {
			return testenv.Permanent(err)
		}
		for i, b := range brokers {
			l := locals[i]
			if l.Start() > r.Through+1 {
				return testenv.Permanent(fmt.Errorf("broker %d deleted offsets [%d, %d) that are not copied (copied through %d)", b, r.Through+1, l.Start(), r.Through))
			}
		}
		if r.Through < through {
			return fmt.Errorf("copied through %d, want %d", r.Through, through)
		}
		for i, b := range brokers {
			l := locals[i]
			if l.Start() <= 0 {
				return fmt.Errorf("broker %d still holds offset 0 (segments %v)", b, l.Bases)
			}
			if l.Bytes > bound {
				return fmt.Errorf("broker %d holds %d bytes of partition %d (bound %d)", b, l.Bytes, partition, bound)
			}
		}
		return nil
	})
	return r
}

// metric sums a metric's samples in a broker's /metrics: every label set,
// or those with all of labels (e.g. `result="error"`).
func (e *tierEnv) metric(broker int32, name string, labels ...string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.c.Broker(broker).MetricsAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	res, err := e.c.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics of broker %d: %s", broker, res.Status)
	}
	var sum float64
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(rest, l) }) {
			continue
		}
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:]) // value [timestamp]
		if !strings.Contains(line, "}") {
			f = f[1:] // name value [timestamp]
		}
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// mustMetric is metric failing the test on error.
func (e *tierEnv) mustMetric(broker int32, name string, labels ...string) float64 {
	e.t.Helper()
	v, err := e.metric(broker, name, labels...)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// objectKeys lists the bucket's object files under the partition's
// prefix, as the S3 server's posix backend stores them (relative keys).
func (e *tierEnv) objectKeys(partition int32) ([]string, error) {
	prefix := fmt.Sprintf("tenants/%s/topics/%s/%d/", e.cl.TenantID, e.cl.TopicID, partition)
	dir := e.s3.ObjectPath(prefix)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, ent := range ents {
		if ent.Type().IsRegular() {
			keys = append(keys, prefix+ent.Name())
		}
	}
	return keys, nil
}

// objectPath is where the S3 server keeps an object's bytes.
func (e *tierEnv) objectPath(key string) string { return filepath.Clean(e.s3.ObjectPath(key)) }
