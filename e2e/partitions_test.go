package e2e

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// growthProducer records the fate of every record an SDK producer sent, as
// checker ops (one record each), in the order Produce was called.
type growthProducer struct {
	mu  sync.Mutex
	ops []testcluster.Op
	key []string // ops[i]'s key
}

func (h *growthProducer) sent(key, value string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, testcluster.Op{Values: []string{value}, Start: time.Now(), Outcome: testcluster.Indefinite, Partition: -1})
	h.key = append(h.key, key)
	return len(h.ops) - 1
}

func (h *growthProducer) outcome(i int, r *client.Record, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op := &h.ops[i]
	op.End, op.Partition = time.Now(), r.Partition
	var de *client.DeliveryError
	switch {
	case err == nil:
		op.Outcome, op.Offset = testcluster.Acked, r.Offset
	case errors.As(err, &de) && de.Indefinite:
		op.Outcome, op.Err = testcluster.Indefinite, err.Error()
	default:
		op.Outcome, op.Err = testcluster.Failed, err.Error()
	}
}

// snapshot returns a copy of the ops and keys.
func (h *growthProducer) snapshot() ([]testcluster.Op, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]testcluster.Op(nil), h.ops...), append([]string(nil), h.key...)
}

// ackedOn counts acknowledged records per partition.
func (h *growthProducer) ackedOn() map[int32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := map[int32]int{}
	for _, op := range h.ops {
		if op.Outcome == testcluster.Acked && !op.End.IsZero() {
			n[op.Partition]++
		}
	}
	return n
}

// growthGroup records what the group's members processed, as checker
// polls: consumer id member*100 + partition, so each of a member's
// partitions reads as one consumer that must not skip or re-read.
type growthGroup struct {
	mu      sync.Mutex
	polls   []testcluster.Poll
	revoked []string // "member i revoked [...] at t"
	done    map[string]bool
}

func (g *growthGroup) processed(member int, r *client.Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.polls = append(g.polls, testcluster.Poll{Consumer: member*100 + int(r.Partition), Partition: r.Partition, Offset: r.Offset, Value: string(r.Value)})
	g.done[string(r.Value)] = true
}

func (g *growthGroup) onPartition() map[int32]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := map[int32]int{}
	for _, p := range g.polls {
		n[p.Partition]++
	}
	return n
}

func fnvPartition(key string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int32(h.Sum32() % uint32(n))
}

// TestClusterPartitionGrowthUnderLoad grows a topic from 3 to 6 partitions with
// `sluice topic alter --partitions` (the real binary) while an idempotent
// acks=all SDK producer writes keyed records to it and a two-member
// consumer group (at-least-once) reads it, then checks:
//
//  1. the producer moves to the new partition count within its metadata
//     max age (2 s here): every record goes to hash(key) mod 3 before and
//     hash(key) mod 6 after its first record on a new partition, and
//     records land on every new partition;
//  2. the group gets the new partitions by a cooperative rebalance: stable
//     with all 6 partitions, each held once, and no member gives up a
//     partition it had;
//  3. the checker (internal/testcluster) over the whole history and the
//     final logs of all 6 partitions: no acknowledged record lost, no
//     duplicate, no gap, and no member skipped or re-read a record of a
//     partition it held; every record was acknowledged, and every
//     acknowledged record was processed, on the new partitions too;
//  4. the replicas of every partition, new ones included, are
//     byte-identical.
func TestClusterPartitionGrowthUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		topic   = "events"
		group   = "growers"
		before  = 3
		after   = 6
		members = 2
		keys    = 64
		maxAge  = 2 * time.Second
	)
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		GroupHeartbeatInterval: 250 * time.Millisecond,
		// A busy machine must not expire a member: the test asserts that
		// nothing moves but the new partitions.
		GroupSessionTimeout: 15 * time.Second,
	})
	tc := c.NewClient(t, "acme", topic, before, 2)
	ctx := t.Context()
	newClient := func(name string, opts ...client.Option) *client.Client {
		f, err := os.Create(filepath.Join(c.Dir, name+".log"))
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		opts = append(opts, client.WithLogger(slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin := &groupAdmin{cl: newClient("admin"), group: group, topic: topic}
	waitStable := func(what string, partitions int) {
		t.Helper()
		testenv.Wait(t, 60*time.Second, what, func() error {
			d, err := admin.describe(ctx)
			if err != nil {
				return err
			}
			return stableWithAll(d, topic, members, partitions)
		})
	}

	// The group, stable before anything is produced: every member reads
	// each of its partitions from offset 0.
	gh := &growthGroup{done: map[string]bool{}}
	var (
		mu             sync.Mutex
		producingSince time.Time // revocations after it are failures
	)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var runs sync.WaitGroup
	var gcs []*client.GroupConsumer
	for i := range members {
		gc, err := newClient(fmt.Sprintf("member-%d", i)).NewGroupConsumer(ctx, group, []string{topic},
			client.WithCommitMode(client.CommitEvery(20)), client.WithDelivery(client.AtLeastOnce),
			client.WithOnRevoked(func(tps []client.TopicPartition) {
				mu.Lock()
				since := producingSince
				mu.Unlock()
				if !since.IsZero() {
					gh.mu.Lock()
					gh.revoked = append(gh.revoked, fmt.Sprintf("member %d revoked %v %s after production began", i, tps, time.Since(since).Round(time.Millisecond)))
					gh.mu.Unlock()
				}
			}))
		require.NoError(t, err)
		gcs = append(gcs, gc)
		runs.Go(func() {
			err := gc.Run(runCtx, func(_ context.Context, r *client.Record) error {
				gh.processed(i, r)
				return nil
			})
			if runCtx.Err() == nil {
				t.Errorf("member %d: Run: %v", i, err)
			}
		})
	}
	defer func() {
		stopRun()
		runs.Wait()
	}()
	waitStable("the group stable on 3 partitions", before)

	// The producer: keyed records (64 keys), values unique, one every 5 ms.
	ph := &growthProducer{}
	p, err := newClient("producer", client.WithMetadataMaxAge(maxAge)).NewProducer(ctx,
		client.WithAcks(client.AcksAll), client.WithIdempotence(true), client.WithDeliveryTimeout(60*time.Second))
	require.NoError(t, err)
	require.True(t, p.Idempotent())
	t.Cleanup(func() { // after an early failure; a no-op after Close
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	})
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	prodDone := make(chan struct{})
	mu.Lock()
	producingSince = time.Now()
	mu.Unlock()
	go func() {
		defer close(prodDone)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for v := 0; ; v++ {
			select {
			case <-prodCtx.Done():
				return
			case <-tick.C:
			}
			key, value := fmt.Sprintf("k%d", v%keys), fmt.Sprintf("v%07d", v)
			i := ph.sent(key, value)
			p.Produce(ctx, &client.Record{Topic: topic, Key: []byte(key), Value: []byte(value)},
				func(r *client.Record, err error) { ph.outcome(i, r, err) })
		}
	}()
	atLeast := func(what string, count func() map[int32]int, from, to int32, n int) {
		t.Helper()
		testenv.Wait(t, 90*time.Second, what, func() error {
			got := count()
			for q := from; q < to; q++ {
				if got[q] < n {
					return fmt.Errorf("partition %d: %d, want %d (all: %v)", q, got[q], n, got)
				}
			}
			return nil
		})
	}
	atLeast("records processed on the first partitions", gh.onPartition, 0, before, 20)

	// Grow, with the CLI, under the stream.
	cfgPath := filepath.Join(t.TempDir(), "cli.json")
	account := []string{"--endpoint", c.ControlPlane(), "--api-key", tc.APIKey}
	grownAt := time.Now()
	out, errOut, code := cli(t, cfgPath, append(account, "topic", "alter", topic, "--partitions", fmt.Sprint(after))...)
	require.Equal(t, 0, code, "topic alter --partitions: %s%s", out, errOut)
	require.Contains(t, errOut, "records with keys now map to other partitions (hash(key) mod 6)")
	require.Regexp(t, `(?m)^partitions:\s+6$`, out)
	for q := range after {
		require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+\d`, q), out, "partition %d in the table", q)
	}
	c.Mark("topic grown to %d partitions", after)
	out, errOut, code = cli(t, cfgPath, append(account, "topic", "describe", topic)...)
	require.Equal(t, 0, code, "%s%s", out, errOut)
	require.Regexp(t, `(?m)^partitions:\s+6$`, out)
	require.Regexp(t, `(?m)^5\s+\d+\s+\d+\s+\d`, out, "describe lists the new partitions")
	_, errOut, code = cli(t, cfgPath, append(account, "topic", "alter", topic, "--partitions", "4")...)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `topic "events" has 6 partitions; partitions can be added but never removed`)

	// 1 and 2: records land on, and are consumed from, the new partitions;
	// the group ends stable over all six.
	atLeast("acknowledged records on the new partitions", ph.ackedOn, before, after, 20)
	atLeast("records processed from the new partitions", gh.onPartition, before, after, 20)
	waitStable("the group stable on 6 partitions", after)
	t.Logf("group stable on %d partitions %s after the growth", after, time.Since(grownAt).Round(time.Millisecond))

	// Drain: stop producing; every record is acknowledged, then processed.
	stopProducing()
	<-prodDone
	fctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	require.NoError(t, p.Flush(fctx))
	require.NoError(t, p.Close(fctx))
	cancel()
	ops, opKeys := ph.snapshot()
	var acked []string
	for _, op := range ops {
		require.Equal(t, testcluster.Acked, op.Outcome, "every record is acknowledged: %s (%s)", op.Values[0], op.Err)
		acked = append(acked, op.Values[0])
	}
	testenv.Wait(t, 90*time.Second, "every acknowledged record processed", func() error {
		gh.mu.Lock()
		defer gh.mu.Unlock()
		for _, v := range acked {
			if !gh.done[v] {
				return fmt.Errorf("%s not processed yet (%d of %d processed)", v, len(gh.done), len(acked))
			}
		}
		return nil
	})
	stopRun()
	runs.Wait()
	for i, gc := range gcs {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		assert.NoError(t, gc.Close(cctx), "member %d closes", i)
		cancel()
	}
	// Closing committed every position: the group's committed offsets are
	// the high watermarks, on the new partitions too (no lag left).
	committed, err := admin.committed(ctx)
	require.NoError(t, err)
	for q := range int32(after) {
		_, hw, err := admin.cl.Watermarks(ctx, topic, q)
		require.NoError(t, err)
		assert.Positive(t, hw, "partition %d holds records", q)
		assert.Equal(t, hw, committed[q], "partition %d: committed offset at the high watermark", q)
	}

	// 1. Routing by key: the old count until the producer's first record on
	// a new partition, the new one from then on.
	switched := -1
	for i, op := range ops {
		if op.Partition >= before {
			switched = i
			break
		}
	}
	require.GreaterOrEqual(t, switched, 0)
	t.Logf("the producer's first record on a new partition was sent %s after the growth (metadata max age %s)",
		ops[switched].Start.Sub(grownAt).Round(time.Millisecond), maxAge)
	assert.Less(t, ops[switched].Start.Sub(grownAt), maxAge+30*time.Second, "the producer noticed the growth within its metadata max age")
	for i, op := range ops {
		old, grown := fnvPartition(opKeys[i], before), fnvPartition(opKeys[i], after)
		switch {
		case i >= switched:
			assert.Equal(t, grown, op.Partition, "record %s (key %s) after the switch goes to hash mod 6", op.Values[0], opKeys[i])
		default:
			assert.Equal(t, old, op.Partition, "record %s (key %s) before the switch goes to hash mod 3", op.Values[0], opKeys[i])
		}
	}

	// 2. Cooperative: nobody gave up a partition while the records flowed.
	gh.mu.Lock()
	revoked := append([]string(nil), gh.revoked...)
	polls := append([]testcluster.Poll(nil), gh.polls...)
	gh.mu.Unlock()
	assert.Empty(t, revoked, "members gave up partitions during the growth")

	// 3. The checker over everything.
	all := []int32{0, 1, 2, 3, 4, 5}
	testcluster.WaitQuiesced(t, tc, all, 60*time.Second)
	final := testcluster.ReadFinal(t, tc, all)
	r := testcluster.Check(ops, polls, final)
	t.Logf("checker: %s", r)
	assert.True(t, r.OK(), "checker anomalies:\n%s", r)
	assert.Equal(t, len(ops), r.AckedRecords)
	assert.GreaterOrEqual(t, r.Polled, len(ops))
	var lines []string
	for q := range int32(after) {
		lines = append(lines, fmt.Sprintf("partition %d: %d records", q, len(final[q])))
		assert.NotEmpty(t, final[q], "partition %d holds records", q)
	}
	t.Logf("final logs: %s", strings.Join(lines, ", "))

	// 4. Replicas of old and new partitions alike.
	testcluster.WaitReplicasIdentical(t, tc, all, 60*time.Second)
}

// TestTieredGrownPartitions: partitions added to a tiered topic are tiered
// like the first ones: after producing three times the local retention
// into each new partition, every broker holds only its hot tail (the rest
// copied to the object store with no gap, then deleted locally: local
// retention applies), and reading it back from offset 0, mostly from the
// object store, returns every record at its offset, byte-identical.
func TestTieredGrownPartitions(t *testing.T) {
	t.Parallel()
	e := startTier(t, tierOpts{Partitions: 1})
	ctx := t.Context()
	topics := sluicev1connect.NewTopicServiceClient(e.c.HTTPClient(), e.c.ControlPlane(), connect.WithGRPC(),
		connect.WithInterceptors(tenants.Bearer(e.cl.Token())))
	res, err := topics.CreatePartitions(ctx, connect.NewRequest(&sluicev1.CreatePartitionsRequest{Name: tierTopic, PartitionCount: 3}))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetPartitions(), 3)
	testenv.Wait(t, 30*time.Second, "every broker knows the new partitions, and the test client their leaders", func() error {
		for _, id := range e.c.BrokerIDs() {
			md, err := e.cl.Metadata(ctx, id)
			if err != nil {
				return err
			}
			if len(md) != 3 {
				return fmt.Errorf("broker %d knows %d partitions", id, len(md))
			}
		}
		// A NotLeader from a follower teaches the test client the leader.
		for p := int32(1); p < 3; p++ {
			leader := e.leader(p).Leader
			for _, id := range e.c.BrokerIDs() {
				_, err := e.cl.FetchFrom(ctx, id, p, 0, 0)
				if (id == leader) != (err == nil) {
					return fmt.Errorf("partition %d (leader %d) from broker %d: %v", p, leader, id, err)
				}
			}
		}
		return nil
	})
	pl := newPayloads(4 << 10)
	for p := int32(1); p < 3; p++ {
		pr := e.newProducer(pl, p, 64) // 256 KiB per request
		require.NoError(t, pr.produceBytes(ctx, 3*e.localRetention))
		n, size, failures := pr.stats()
		require.Zero(t, failures, "partition %d: failed produce attempts without a fault (last: %v)", p, pr.lastErr)
		r := e.waitHotTail(p, e.c.BrokerIDs(), n-e.tailRecords(pl.size), 2*time.Minute)
		t.Logf("new partition %d: %d records, %d MiB; %d remote segments through offset %d", p, n, size>>20, len(r.Finished), r.Through)
		st, err := e.readAll(ctx, pl, p, 0, 8<<20, pr, true)
		require.NoError(t, err)
		require.Equal(t, n, st.Records, "partition %d: records read back", p)
		require.Equal(t, size, st.Bytes)
	}
}
