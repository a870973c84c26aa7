package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// txnJobEnv, when set, makes the test binary run as the
// consume-transform-produce job of TestTxnUnderFaults (TestMain
// dispatches to runTxnJob) instead of running tests: the job is a
// separate process so that the test can SIGKILL it at any point.
const txnJobEnv = "SLUICE_E2E_TXN_JOB"

// txnJobConfig is the job's configuration, JSON in txnJobEnv.
type txnJobConfig struct {
	ControlPlane    string
	APIKey          string
	Group           string
	TransactionalID string
	In, Out         string
	Incarnation     int
	Seed            uint64
	// Kafka, when set, makes the job a Kafka client (runKafkaTxnJob):
	// franz-go's GroupTransactSession on these bootstrap servers, with
	// SASL PLAIN as Tenant and APIKey.
	Kafka  []string
	Tenant string
	// BeforeKIP890p2 caps the Kafka job's versions below KIP-890 part 2's
	// (Produce 11, EndTxn 4, TxnOffsetCommit 4).
	BeforeKIP890p2 bool
	// Sarama makes the Kafka job sarama's transactional producer and
	// consumer group instead (runSaramaTxnJob).
	Sarama bool
}

// Output records of the job carry, in headers, the transaction that wrote
// them and how many records that transaction wrote, so that the checker
// can tell a whole transaction from a torn one.
const (
	txnHeaderID    = "txn"
	txnHeaderCount = "txn-records"
)

// runTxnJob is the job: a read_committed group consumer of In and a
// transactional producer to Out; per poll, one transaction writes every
// polled value transformed ("out-" + value, keyed by the value) to Out and
// commits the poll's next offsets of In in the same transaction. It runs
// until it is killed; it prints one line per committed transaction.
func runTxnJob() int {
	var cfg txnJobConfig
	if err := json.Unmarshal([]byte(os.Getenv(txnJobEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "txn job: config:", err)
		return 2
	}
	if cfg.Sarama {
		return runSaramaTxnJob(cfg)
	}
	if len(cfg.Kafka) > 0 {
		return runKafkaTxnJob(cfg)
	}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cl, err := client.New(ctx, cfg.ControlPlane, client.APIKey(cfg.APIKey), client.WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, "txn job: client:", err)
		return 2
	}
	defer cl.Close()
	tp, err := cl.NewTransactionalProducer(ctx, cfg.TransactionalID, client.WithTransactionTimeout(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "txn job: transactional producer:", err)
		return 2
	}
	gc, err := cl.NewGroupConsumer(ctx, cfg.Group, []string{cfg.In},
		client.WithCommitMode(client.CommitTransactional()),
		client.WithConsumerOptions(client.WithIsolation(client.ReadCommitted)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "txn job: group consumer:", err)
		return 2
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Incarnation)))
	for seq := 0; ; seq++ {
		recs, err := gc.Poll(ctx)
		if err != nil {
			logger.Warn("txn job: poll", "err", err)
			continue
		}
		if len(recs) == 0 {
			continue
		}
		if len(recs) > 20 {
			// Smaller transactions than a whole poll: more of them, so
			// more of the faults land inside one. The rest is read again
			// after the rewind below.
			recs = recs[:20]
		}
		id := fmt.Sprintf("%d-%d", cfg.Incarnation, seq)
		err = txnStep(ctx, tp, gc, recs, id, cfg.Out, rng)
		switch {
		case err == nil:
			fmt.Printf("COMMIT %s %d\n", id, len(recs))
		case errors.Is(err, client.ErrTransactionFatal):
			fmt.Fprintln(os.Stderr, "txn job: fatal:", err)
			return 3
		default:
			logger.Warn("txn job: transaction failed; aborting", "txn", id, "err", err)
			if aerr := tp.Abort(ctx); aerr != nil {
				logger.Warn("txn job: abort", "txn", id, "err", aerr)
				if errors.Is(aerr, client.ErrTransactionFatal) {
					return 3
				}
			}
		}
		// Read from the committed offsets again: after an abort the
		// transaction's input is processed anew; after a commit of part
		// of a poll, the rest.
		for {
			if err := gc.RewindToCommitted(ctx); err != nil {
				logger.Warn("txn job: rewind", "err", err)
				time.Sleep(100 * time.Millisecond) // backoff: the rewind failed
				continue
			}
			break
		}
	}
}

// txnStep is one transaction of the job.
func txnStep(ctx context.Context, tp *client.TransactionalProducer, gc *client.GroupConsumer, recs []*client.Record, id, out string, rng *rand.Rand) error {
	if err := tp.Begin(); err != nil {
		return err
	}
	n := strconv.Itoa(len(recs))
	for _, r := range recs {
		tp.Produce(ctx, &client.Record{Topic: out, Key: r.Value, Value: append([]byte("out-"), r.Value...),
			Headers: []client.Header{{Key: txnHeaderID, Value: []byte(id)}, {Key: txnHeaderCount, Value: []byte(n)}}}, nil)
	}
	// Pacing, not synchronisation: the transaction stays open a little,
	// so that kills land inside transactions as well as between them.
	time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // pacing: the transaction stays open a little, so that kills land inside transactions too
	if err := tp.SendOffsets(ctx, gc.Member(), client.NextOffsets(recs)); err != nil {
		return err
	}
	return tp.Commit(ctx)
}

// txnJob is one incarnation of the job process.
type txnJob struct {
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

func startTxnJob(t *testing.T, dir string, cfg txnJobConfig) *txnJob {
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("txn-job-%d.log", cfg.Incarnation)))
	require.NoError(t, err)
	j := &txnJob{done: make(chan struct{}), out: &syncBuffer{}}
	j.cmd = exec.Command(os.Args[0], "-test.run=^$")
	j.cmd.Env = append(os.Environ(), txnJobEnv+"="+string(b))
	j.cmd.Stdout, j.cmd.Stderr = j.out, logf
	require.NoError(t, j.cmd.Start())
	go func() {
		_ = j.cmd.Wait()
		logf.Close()
		close(j.done)
	}()
	return j
}

func (j *txnJob) kill() {
	_ = j.cmd.Process.Kill()
	<-j.done
}

// exited reports whether the job ended by itself (a fatal error).
func (j *txnJob) exited() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

// committed are the transactions the job saw commit: id → record count.
func (j *txnJob) committed() map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(j.out.String(), "\n") {
		var id string
		var n int
		if _, err := fmt.Sscanf(line, "COMMIT %s %d", &id, &n); err == nil {
			out[id] = n
		}
	}
	return out
}

// txnOut is one record of Out as a reader saw it.
type txnOut struct {
	Partition int32
	Offset    int64
	Value     string
	Txn       string
	Count     int
}

// txnReader reads Out's partitions from a broker's RecordService with an
// isolation level, following leaders.
type txnReader struct {
	c         *testcluster.Cluster
	tc        *testcluster.Client
	topic     string
	isolation sluicev1.IsolationLevel
}

// fetch reads one partition from offset, through whichever live broker
// answers (forwarding finds the leader).
func (r *txnReader) fetch(ctx context.Context, partition int32, offset int64, wait time.Duration) (recs []txnOut, next, lso, hw int64, err error) {
	ids := r.c.BrokerIDs()
	id := ids[rand.IntN(len(ids))]
	req := connect.NewRequest(&sluicev1.FetchRequest{Topic: r.topic, Partition: partition, Offset: offset, MaxBytes: 256 << 10,
		MaxWaitMs: wait.Milliseconds(), IsolationLevel: r.isolation})
	cctx, cancel := context.WithTimeout(ctx, wait+3*time.Second)
	defer cancel()
	res, err := r.tc.Records(id).Fetch(cctx, req)
	if err != nil {
		return nil, offset, 0, 0, err
	}
	for _, rec := range res.Msg.GetRecords() {
		o := txnOut{Partition: partition, Offset: rec.GetOffset(), Value: string(rec.GetValue())}
		for _, h := range rec.GetHeaders() {
			switch h.GetKey() {
			case txnHeaderID:
				o.Txn = string(h.GetValue())
			case txnHeaderCount:
				o.Count, _ = strconv.Atoi(string(h.GetValue()))
			}
		}
		recs = append(recs, o)
	}
	return recs, res.Msg.GetNextOffset(), res.Msg.GetLastStableOffset(), res.Msg.GetHighWatermark(), nil
}

// readAll reads every partition to its end (the LSO for read_committed),
// retrying across faults until ctx ends.
func (r *txnReader) readAll(ctx context.Context, partitions int32) (map[int32][]txnOut, error) {
	out := map[int32][]txnOut{}
	for p := range partitions {
		off := int64(0)
		for {
			recs, next, lso, hw, err := r.fetch(ctx, p, off, 0)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				time.Sleep(100 * time.Millisecond) // backoff: the fetch failed
				continue
			}
			out[p] = append(out[p], recs...)
			end := hw
			if r.isolation == sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
				end = lso
			}
			if next <= off && off < end {
				return nil, fmt.Errorf("partition %d: fetch at %d below its end %d did not move on", p, off, end)
			}
			off = next
			if off >= end {
				break
			}
		}
	}
	return out, nil
}

// TestTxnUnderFaults is issue 16's checker: a
// consume-transform-produce job (a separate process: runTxnJob) reads
// topic in (pre-filled with unique values) with a read_committed group
// consumer and, in one transaction per step, writes each value
// transformed to topic out and commits its input offsets, while the test
// SIGKILLs the job at random points (and restarts it with the same
// transactional id), SIGKILLs or SIGSTOPs the broker coordinating the
// job's transactional id, SIGKILLs the leader of one of out's partitions,
// and once the whole cluster. A read_committed reader tails out all along. Once the
// group's committed offsets reach the end of in, the checker proves:
//
//  1. every input value appears in out exactly once (nothing lost,
//     nothing repeated: an aborted transaction's records would show up
//     as a repeat, since its input is processed again);
//  2. every transaction seen in out is whole: as many records as it
//     wrote (no torn transaction), and every transaction the job saw
//     commit is there;
//  3. what the tailer read with read_committed at any point is exactly
//     what the final read has at the same offsets (no aborted read, no
//     committed record that later vanished), and offsets only grow;
//  4. read_uncommitted sees at least as many records (aborted ones too:
//     how many is logged, as proof the kills landed inside transactions).
func TestTxnUnderFaults(t *testing.T) {
	t.Parallel()
	testTxnUnderFaults(t, nil, 3000)
}

// TestTxnUnderFaultsKafka is TestTxnUnderFaults with the job a Kafka
// client, through the brokers' Kafka listeners, with the same faults and
// the same checker: franz-go's GroupTransactSession (a classic group's
// consumer whose offsets commit in the producer's transaction:
// TxnOffsetCommit), its versions capped below KIP-890 part 2, as every
// Kafka client but the newest speaks (docs/kafka.md, Transactions:
// partitions and groups added by the client, the epoch kept across
// transactions, the leaders only verifying); and sarama's transactional
// producer with its consumer group (runSaramaTxnJob), which speaks before
// part 2 by itself. franz-go with part 2, which is the SDK's way, runs too
// with SLUICE_SOAK=1 (make soak).
func TestTxnUnderFaultsKafka(t *testing.T) {
	t.Parallel()
	jobs := []kafkaJob{{name: "franz-go before KIP-890 part 2", beforeKIP890p2: true}, {name: "sarama", sarama: true}}
	if soak() {
		jobs = append(jobs, kafkaJob{name: "franz-go with KIP-890 part 2"})
	}
	for _, job := range jobs {
		t.Run(job.name, func(t *testing.T) { testTxnUnderFaults(t, &job, 1500) })
	}
}

// kafkaJob is how TestTxnUnderFaults's job speaks Kafka.
type kafkaJob struct {
	name string
	// beforeKIP890p2 caps franz-go's versions below KIP-890 part 2's.
	beforeKIP890p2 bool
	// sarama makes the job sarama's instead of franz-go's.
	sarama bool
}

func testTxnUnderFaults(t *testing.T, kafka *kafkaJob, values int) {
	const (
		partitions = 3
		group      = "transformer"
		txnID      = "transformer-1"
		deadline   = 4 * time.Minute
	)
	seed := faultSeed(t)
	rng := rand.New(rand.NewPCG(seed, 16))
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		GroupHeartbeatInterval: 250 * time.Millisecond, GroupSessionTimeout: 3 * time.Second,
		Kafka: kafka != nil,
	})
	tc := c.NewClient(t, "acme", "in", partitions, 2)
	ctx := t.Context()
	createTopic(t, c, tc, "out", partitions, 2)

	// Pre-fill in.
	admin, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	p, err := admin.NewProducer(ctx)
	require.NoError(t, err)
	batch := make([]*client.Record, 0, 500)
	for v := range values {
		batch = append(batch, &client.Record{Topic: "in", Value: []byte(strconv.Itoa(v))})
		if len(batch) == cap(batch) {
			require.NoError(t, p.ProduceSync(ctx, batch...))
			batch = batch[:0]
		}
	}
	require.NoError(t, p.Close(ctx))
	inEnd := map[int32]int64{}
	for part := range int32(partitions) {
		_, hw, err := admin.Watermarks(ctx, "in", part)
		require.NoError(t, err)
		inEnd[part] = hw
	}

	readerFor := func(iso sluicev1.IsolationLevel) *txnReader {
		return &txnReader{c: c, tc: tc, topic: "out", isolation: iso}
	}

	// The tailer: read_committed, all along.
	tailCtx, stopTail := context.WithCancel(ctx)
	var tailMu sync.Mutex
	tailed := map[int32][]txnOut{}
	var tailErr error
	var tailWG sync.WaitGroup
	for part := range int32(partitions) {
		tailWG.Add(1)
		go func() {
			defer tailWG.Done()
			r := readerFor(sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED)
			off := int64(0)
			for tailCtx.Err() == nil {
				recs, next, _, _, err := r.fetch(tailCtx, part, off, 500*time.Millisecond)
				if err != nil {
					time.Sleep(50 * time.Millisecond) // backoff: the fetch failed
					continue
				}
				tailMu.Lock()
				for _, rec := range recs {
					if n := len(tailed[part]); n > 0 && rec.Offset <= tailed[part][n-1].Offset && tailErr == nil {
						tailErr = fmt.Errorf("partition %d: offset %d read after %d", part, rec.Offset, tailed[part][n-1].Offset)
					}
					tailed[part] = append(tailed[part], rec)
				}
				tailMu.Unlock()
				off = max(off, next)
			}
		}()
	}

	jobCfg := txnJobConfig{ControlPlane: c.ControlPlane(), APIKey: tc.APIKey, Group: group, TransactionalID: txnID, In: "in", Out: "out", Seed: seed}
	if kafka != nil {
		jobCfg.Kafka, jobCfg.Tenant, jobCfg.BeforeKIP890p2, jobCfg.Sarama = c.KafkaBootstrap(), "acme", kafka.beforeKIP890p2, kafka.sarama
	}
	var jobs []*txnJob
	startJob := func() {
		jobCfg.Incarnation = len(jobs)
		jobs = append(jobs, startTxnJob(t, c.Dir, jobCfg))
		c.Mark("txn job incarnation %d started", jobCfg.Incarnation)
	}
	t.Cleanup(func() {
		for _, j := range jobs {
			j.kill()
		}
	})
	startJob()

	groups, err := admin.GroupAdmin()
	require.NoError(t, err)
	txns := sluicev1connect.NewTransactionServiceClient(http.DefaultClient, "http://"+c.Broker(1).ListenAddr, bearerOf(tc.Token()))
	progress := func() (int64, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := groups.FetchOffsets(cctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: group}))
		if err != nil {
			return 0, err
		}
		var left int64
		got := map[int32]int64{}
		for _, o := range res.Msg.GetOffsets() {
			got[o.GetPartition()] = o.GetOffset()
		}
		for part, end := range inEnd {
			left += end - max(got[part], 0)
		}
		return left, nil
	}
	coordinatorBroker := func() int32 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := txns.FindTransactionCoordinator(cctx, connect.NewRequest(&sluicev1.FindTransactionCoordinatorRequest{TransactionalId: txnID}))
		if err != nil {
			return -1
		}
		return res.Msg.GetBrokerId()
	}
	// outLeader is the leader of a random partition of out, or a random
	// broker when no broker answers.
	outLeader := func() int32 {
		ids := c.BrokerIDs()
		for _, id := range ids {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			res, err := tc.Records(id).GetMetadata(cctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{"out"}}))
			cancel()
			if err != nil || len(res.Msg.GetTopics()) != 1 {
				continue
			}
			ps := res.Msg.GetTopics()[0].GetPartitions()
			if l := ps[rng.IntN(len(ps))].GetLeader(); l > 0 {
				return l
			}
		}
		return ids[rng.IntN(len(ids))]
	}

	// Faults until the job is through in, or the deadline.
	start := time.Now()
	wholeCluster := false
	var faults []string
	for {
		left, err := progress()
		if err == nil && left == 0 {
			break
		}
		require.Less(t, time.Since(start), deadline, "the job did not get through in (%d offsets left, last error %v); faults: %v", left, err, faults)
		if j := jobs[len(jobs)-1]; j.exited() {
			t.Fatalf("txn job incarnation %d exited by itself; its log: %s", len(jobs)-1, filepath.Join(c.Dir, fmt.Sprintf("txn-job-%d.log", len(jobs)-1)))
		}
		time.Sleep(time.Duration(1000+rng.IntN(2500)) * time.Millisecond) // fault: the schedule
		switch k := rng.IntN(10); {
		case k < 4:
			faults = append(faults, "job")
			jobs[len(jobs)-1].kill()
			c.Mark("SIGKILL txn job")
			startJob()
		case k < 6:
			if id := coordinatorBroker(); id > 0 {
				faults = append(faults, fmt.Sprintf("coordinator %d", id))
				c.Kill(id)
				time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond) // fault: the schedule
				c.Restart(id, false)
			}
		case k < 7:
			if id := coordinatorBroker(); id > 0 {
				faults = append(faults, fmt.Sprintf("pause coordinator %d", id))
				c.Pause(id)
				time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond) // fault: the schedule
				c.Resume(id)
			}
		case k < 9:
			id := outLeader()
			faults = append(faults, fmt.Sprintf("broker %d", id))
			c.Kill(id)
			time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond) // fault: the schedule
			c.Restart(id, false)
		case !wholeCluster:
			wholeCluster = true
			faults = append(faults, "whole cluster")
			for _, id := range c.BrokerIDs() {
				c.Kill(id)
			}
			time.Sleep(time.Second) // fault: the whole cluster down for a second
			for _, id := range c.BrokerIDs() {
				c.Restart(id, false)
			}
		}
	}
	t.Logf("faults (seed %d): %v; job incarnations: %d", seed, faults, len(jobs))
	for _, j := range jobs {
		j.kill()
	}
	stopTail()
	tailWG.Wait()

	// The final reads.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	final, err := readerFor(sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED).readAll(rctx, partitions)
	require.NoError(t, err)
	uncommitted, err := readerFor(sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED).readAll(rctx, partitions)
	require.NoError(t, err)

	// 1. Every value exactly once.
	seen := map[string]txnOut{}
	var problems []string
	txnRecords := map[string]int{}
	txnCount := map[string]int{}
	total := 0
	for part := range int32(partitions) {
		for _, rec := range final[part] {
			total++
			if prev, dup := seen[rec.Value]; dup {
				problems = append(problems, fmt.Sprintf("%s twice: partition %d offset %d (txn %s) and partition %d offset %d (txn %s)",
					rec.Value, prev.Partition, prev.Offset, prev.Txn, rec.Partition, rec.Offset, rec.Txn))
			}
			seen[rec.Value] = rec
			txnRecords[rec.Txn]++
			txnCount[rec.Txn] = rec.Count
		}
	}
	for v := range values {
		if _, ok := seen["out-"+strconv.Itoa(v)]; !ok {
			problems = append(problems, fmt.Sprintf("out-%d missing", v))
		}
	}
	// 2. Whole transactions, and every one the job saw commit.
	for id, n := range txnRecords {
		if n != txnCount[id] {
			problems = append(problems, fmt.Sprintf("transaction %s torn: %d of its %d records", id, n, txnCount[id]))
		}
	}
	for _, j := range jobs {
		for id, n := range j.committed() {
			if txnRecords[id] != n {
				problems = append(problems, fmt.Sprintf("transaction %s committed (the job saw it) with %d records; read_committed has %d", id, n, txnRecords[id]))
			}
		}
	}
	// 3. The tailer saw nothing the final read does not have.
	require.NoError(t, tailErr)
	for part, recs := range tailed {
		byOffset := map[int64]txnOut{}
		for _, rec := range final[part] {
			byOffset[rec.Offset] = rec
		}
		for _, rec := range recs {
			if f, ok := byOffset[rec.Offset]; !ok || f != rec {
				problems = append(problems, fmt.Sprintf("partition %d offset %d: the tailer read %+v, the final read has %+v", part, rec.Offset, rec, f))
			}
		}
	}
	// 4. read_uncommitted: a superset.
	all := 0
	for _, recs := range uncommitted {
		all += len(recs)
	}
	if all < total {
		problems = append(problems, fmt.Sprintf("read_uncommitted has %d records, read_committed %d", all, total))
	}
	if len(problems) > 20 {
		problems = append(problems[:20], fmt.Sprintf("... and %d more", len(problems)-20))
	}
	require.Empty(t, problems, "cluster logs in %s", c.Dir)
	t.Logf("%d values, %d committed transactions in out, %d records of aborted transactions seen by read_uncommitted only", values, len(txnRecords), all-total)
}

// createTopic creates another topic of tc's tenant and waits until every
// broker knows its leaders.
func createTopic(t *testing.T, c *testcluster.Cluster, tc *testcluster.Client, name string, partitions, minISR int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rf := min(int32(3), int32(len(c.BrokerIDs())))
	_, err := sluicev1connect.NewTopicServiceClient(http.DefaultClient, c.ControlPlane(), bearerOf(tc.Token())).CreateTopic(ctx,
		connect.NewRequest(&sluicev1.CreateTopicRequest{Name: name, PartitionCount: partitions, ReplicationFactor: rf,
			Config: &sluicev1.TopicConfig{MinInsyncReplicas: &minISR}}))
	require.NoError(t, err)
	testenv.Wait(t, 30*time.Second, "topic "+name+" led on every broker", func() error {
		for _, id := range c.BrokerIDs() {
			res, err := tc.Records(id).GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{Topics: []string{name}}))
			if err != nil {
				return err
			}
			if len(res.Msg.GetTopics()) != 1 || len(res.Msg.GetTopics()[0].GetPartitions()) != int(partitions) {
				return fmt.Errorf("broker %d does not know %s yet", id, name)
			}
			for _, p := range res.Msg.GetTopics()[0].GetPartitions() {
				if p.GetLeader() < 0 {
					return fmt.Errorf("broker %d: %s/%d has no leader", id, name, p.GetPartition())
				}
			}
		}
		return nil
	})
}

// bearerOf is a client option sending token as the bearer credential.
func bearerOf(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", "Bearer "+token)
			return next(ctx, req)
		}
	}))
}

// TestTxnLateProduceRefused is the late batch that breaks
// undefended KIP-98 (Jepsen's Redpanda and Bufstream analyses): a produce
// of transaction T, held in the network (a proxy in HoldRequests mode)
// until T has committed and T+1 has begun, reaches the brokers only then.
// It must be refused, never appended into T+1: to a partition that was in
// T (its marker bumped the producer's epoch there) and to one that was
// not and that the producer has not written to since (the partition's
// verification with the coordinator finds the epoch ended). read_committed readers then see T's and T+1's records and never
// the late ones.
func TestTxnLateProduceRefused(t *testing.T) {
	t.Parallel()
	const txnID = "late-1"
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t)})
	tc := c.NewClient(t, "acme", "events", 2, 2)
	ctx := t.Context()
	brokers := tc.Records(1)
	txns := sluicev1connect.NewTransactionServiceClient(http.DefaultClient, "http://"+c.Broker(1).ListenAddr, bearerOf(tc.Token()))

	var pid int64
	var epoch int16
	testenv.Wait(t, 60*time.Second, "InitProducerId with a transactional id", func() error {
		res, err := brokers.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{TransactionalId: txnID}))
		if err != nil {
			return err // the transaction-state topic may not be led yet
		}
		pid, epoch = res.Msg.GetProducerId(), int16(res.Msg.GetProducerEpoch())
		return nil
	})
	produceReq := func(partition int32, epoch int16, seq int32, value string) *connect.Request[sluicev1.ProduceRequest] {
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, ProducerID: pid, ProducerEpoch: epoch,
			BaseSequence: seq, FirstTimestamp: time.Now().UnixMilli()}, []record.Record{{Value: []byte(value)}})
		require.NoError(t, err)
		return connect.NewRequest(&sluicev1.ProduceRequest{Topic: "events", Partition: partition, Acks: sluicev1.Acks_ACKS_ALL,
			TransactionalId: txnID, Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b}}})
	}
	produce := func(partition int32, epoch int16, seq int32, value string) {
		t.Helper()
		err := testenv.Retry(30*time.Second, func() error {
			_, err := brokers.Produce(ctx, produceReq(partition, epoch, seq, value))
			if connect.CodeOf(err) == connect.CodeUnavailable {
				return err
			}
			return testenv.Permanent(err)
		})
		require.NoError(t, err, "produce %q", value)
	}
	end := func(epoch int16, commit bool) int16 {
		t.Helper()
		res, err := txns.EndTransaction(ctx, connect.NewRequest(&sluicev1.EndTransactionRequest{TransactionalId: txnID, ProducerId: pid, ProducerEpoch: int32(epoch), Commit: commit}))
		require.NoError(t, err)
		require.Equal(t, pid, res.Msg.GetProducerId(), "the producer id stays while the epoch has room")
		require.Greater(t, int16(res.Msg.GetProducerEpoch()), epoch, "every end bumps the epoch")
		return int16(res.Msg.GetProducerEpoch())
	}

	// T: one record to partition 0.
	produce(0, epoch, 0, "t0-p0")

	// The late produces of T, through a proxy holding the requests: one to
	// partition 0 (in T), one to partition 1 (never in T).
	proxy := testcluster.NewProxy(t, c.Broker(2).ListenAddr)
	proxy.SetMode(testcluster.HoldRequests)
	late := sluicev1connect.NewRecordServiceClient(&http.Client{Transport: &http.Transport{}}, "http://"+proxy.Addr(), bearerOf(tc.Token()))
	lateErrs := make(chan error, 2)
	for _, lp := range []struct {
		partition int32
		seq       int32
	}{{0, 1}, {1, 0}} {
		go func() {
			_, err := late.Produce(ctx, produceReq(lp.partition, epoch, lp.seq, fmt.Sprintf("late-p%d", lp.partition)))
			lateErrs <- err
		}()
	}

	// T commits; T+1 begins, on partition 0 only: partition 1 has no
	// state of the producer, so only the coordinator (verification) can
	// tell that the late batch's epoch ended.
	next := end(epoch, true)
	produce(0, next, 0, "t1-p0")

	// The late produces arrive now.
	proxy.SetMode(testcluster.Pass)
	for range 2 {
		err := <-lateErrs
		require.Error(t, err, "a produce of an ended transaction was appended")
		te, ok := client.ErrorDetail[*sluicev1.TransactionError](err)
		require.True(t, ok, "the refusal carries a TransactionError: %v", err)
		require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, te.GetReason(), "%v", err)
	}
	end(next, true)

	// read_committed: T's and T+1's records only.
	r := &txnReader{c: c, tc: tc, topic: "events", isolation: sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED}
	got, err := r.readAll(ctx, 2)
	require.NoError(t, err)
	values := map[int32][]string{}
	for p, recs := range got {
		for _, rec := range recs {
			values[p] = append(values[p], rec.Value)
		}
	}
	require.Equal(t, map[int32][]string{0: {"t0-p0", "t1-p0"}}, values)
	// And read_uncommitted too: the late batches were never written.
	r.isolation = sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
	got, err = r.readAll(ctx, 2)
	require.NoError(t, err)
	for p, recs := range got {
		for _, rec := range recs {
			require.NotContains(t, rec.Value, "late", "partition %d offset %d", p, rec.Offset)
		}
	}
}
