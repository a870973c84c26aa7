package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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
)

// TestGroupCoordinatorKilledWithLiveMembers SIGKILLs the coordinator of a
// group whose three SDK members (at-least-once, commit every 20 records)
// are consuming a 6-partition RF 3 topic that an idempotent acks=all
// producer feeds at a steady rate, keeps the stream going, restarts the
// broker (which takes the coordinator back as preferred leader), and
// checks, once the group drained to the end:
//
//  1. every acknowledged record was processed (at-least-once);
//  2. committed offsets never went backwards: sampled all along, and
//     before the kill vs. once the new coordinator is stable;
//  3. the members kept their positions: per partition, records processed
//     more than once are at most the commit window (20);
//  4. the group is stable again with all 6 partitions assigned, once each,
//     after each coordinator move, and commits resume; the longest
//     consumption stall (group-wide and per partition) is logged and
//     bounded by the session timeout + 10 s.
//
// And (0): Run never fails across the failover. A member whose Run fails
// logs it and calls Run again, as an application might, so that the other
// checks still run.
func TestGroupCoordinatorKilledWithLiveMembers(t *testing.T) {
	t.Parallel()
	const (
		topic       = "events"
		group       = "billing"
		partitions  = 6
		members     = 3
		commitEvery = 20
		rate        = 600 // records/s over all partitions
		heartbeat   = 250 * time.Millisecond
		session     = 3 * time.Second
	)
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		GroupHeartbeatInterval: heartbeat, GroupSessionTimeout: session,
		// The restarted broker takes its leaderships back (the group's
		// coordinator among them) while the stream still runs.
		PreferredLeaderDelay: 2 * time.Second,
	})
	tc := c.NewClient(t, "acme", topic, partitions, 2)
	ctx := t.Context()
	start := time.Now()

	// Each SDK client logs to a file kept with the cluster's logs; the
	// members' debug logs say why commits and heartbeats failed.
	newClient := func(name string, level slog.Level) *client.Client {
		f, err := os.Create(filepath.Join(c.Dir, name+".log"))
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey),
			client.WithLogger(slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: level}))))
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	admin := &groupAdmin{cl: newClient("admin", slog.LevelInfo), group: group, topic: topic}

	// The members: each processes a record by recording it.
	h := &groupHistory{}
	type member struct {
		gc   *client.GroupConsumer
		done chan struct{}
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var ms []member
	for i := range members {
		cl := newClient(fmt.Sprintf("member-%d", i), slog.LevelDebug)
		gc, err := cl.NewGroupConsumer(ctx, group, []string{topic},
			client.WithCommitMode(client.CommitEvery(commitEvery)), client.WithDelivery(client.AtLeastOnce),
			client.WithOnAssigned(func(tps []client.TopicPartition) { h.assignment(i, "assigned", tps) }),
			client.WithOnRevoked(func(tps []client.TopicPartition) { h.assignment(i, "revoked", tps) }))
		require.NoError(t, err)
		m := member{gc: gc, done: make(chan struct{})}
		t.Cleanup(func() { // after an early failure; a no-op after Close
			stopRun()
			<-m.done
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = gc.Close(cctx)
		})
		go func() {
			defer close(m.done)
			// An application that logs a failed Run and calls it again:
			// the test fails on any such error (below), and keeps the
			// member consuming meanwhile so the other checks still run.
			for runCtx.Err() == nil {
				err := gc.Run(runCtx, func(_ context.Context, r *client.Record) error {
					v, err := strconv.Atoi(string(r.Value))
					if err != nil {
						return err
					}
					h.processed(i, r.Partition, r.Offset, v)
					return nil
				})
				if runCtx.Err() == nil {
					h.runError(i, err)
					time.Sleep(100 * time.Millisecond) // backoff: the member's Run failed; start it again
				}
			}
		}()
		ms = append(ms, m)
	}

	// The producer: values 0, 1, 2, ... round robin over the partitions,
	// every acknowledgement recorded.
	p, err := newClient("producer", slog.LevelInfo).NewProducer(ctx, client.WithAcks(client.AcksAll), client.WithIdempotence(true),
		client.WithManualPartitioner(), client.WithDeliveryTimeout(60*time.Second), client.WithRequestTimeout(5*time.Second))
	require.NoError(t, err)
	require.True(t, p.Idempotent())
	t.Cleanup(func() { // after an early failure; a no-op after Close
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	})
	prod := &producerHistory{acked: map[int]ackedAt{}, failed: map[int]error{}}
	prodCtx, stopProducing := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for v := 0; ; {
			select {
			case <-prodCtx.Done():
				prod.setSent(v)
				return
			case <-tick.C:
			}
			for range rate / 100 {
				val := v
				p.Produce(ctx, &client.Record{Topic: topic, Partition: int32(val % partitions), Value: []byte(strconv.Itoa(val))},
					func(r *client.Record, err error) { prod.outcome(val, r, err) })
				v++
			}
		}
	}()
	defer stopProducing()

	// Committed offsets, sampled all along.
	sampler := &offsetSampler{}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for sampleCtx.Err() == nil {
			cctx, cancel := context.WithTimeout(sampleCtx, time.Second)
			offs, err := admin.committed(cctx)
			cancel()
			if err == nil {
				sampler.add(offs)
			}
			select {
			case <-sampleCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer stopSampling()

	// waitStable waits until the group is stable with every member and
	// every partition assigned once, and every partition's committed
	// offset is above floor (commits go on).
	waitStable := func(what string, floor map[int32]int64) (*sluicev1.DescribeGroupResponse, map[int32]int64) {
		t.Helper()
		var d *sluicev1.DescribeGroupResponse
		var offs map[int32]int64
		testenv.Wait(t, 30*time.Second, what, func() error {
			var err error
			if d, err = admin.describe(ctx); err != nil {
				return err
			}
			if err := stableWithAll(d, topic, members, partitions); err != nil {
				return err
			}
			if offs, err = admin.committed(ctx); err != nil {
				return err
			}
			for p := range int32(partitions) {
				if offs[p] <= floor[p] {
					return fmt.Errorf("partition %d: committed %d, not above %d yet", p, offs[p], floor[p])
				}
			}
			return nil
		})
		return d, offs
	}

	// committedNow is the first answer of FetchOffsets.
	committedNow := func(what string) map[int32]int64 {
		t.Helper()
		var offs map[int32]int64
		testenv.Wait(t, 30*time.Second, what, func() error {
			var err error
			offs, err = admin.committed(ctx)
			return err
		})
		return offs
	}

	// 1. Warm up: the group settles and commits on every partition.
	d, _ := waitStable("the group stable with every partition committed", map[int32]int64{})
	time.Sleep(time.Second) // window: a second of steady state to compare with
	warmAt := time.Now()
	coordinator := admin.findCoordinator(t, ctx, func(int32) bool { return true })
	ledByCoordinator := map[int32]bool{}
	for part, info := range tc.NewestMetadata(ctx) {
		ledByCoordinator[part] = info.Leader == coordinator
	}
	before := committedNow("the committed offsets before the kill")
	t.Logf("before the kill: coordinator broker %d (also leads partitions %v), group epoch %d, committed %v",
		coordinator, keysWhere(ledByCoordinator), d.GetGroupEpoch(), before)

	// 2. SIGKILL the coordinator mid-stream; a new one takes over.
	killAt := time.Now()
	c.Kill(coordinator)
	next := admin.findCoordinator(t, ctx, func(id int32) bool { return id != coordinator })
	movedAt := time.Now()
	// What the new coordinator rebuilt from the offsets partition.
	rebuilt := committedNow("the committed offsets from the new coordinator")
	for part := range int32(partitions) {
		require.GreaterOrEqual(t, rebuilt[part], before[part], "(2) partition %d: the committed offset went backwards across the failover", part)
	}
	d, after := waitStable("the group stable again under the new coordinator, committing", before)
	stableAt := time.Now()
	t.Logf("coordinator moved %d → %d in %s (it rebuilt committed %v); group stable again (epoch %d, %d rebalances) and committing %s after the kill; committed %v",
		coordinator, next, movedAt.Sub(killAt).Round(time.Millisecond), rebuilt, d.GetGroupEpoch(), d.GetRebalances(),
		stableAt.Sub(killAt).Round(time.Millisecond), after)

	// 3. Restart the killed broker; as preferred leader it takes the
	// coordinator back.
	time.Sleep(time.Second) // fault: the killed broker stays down a second longer
	restartAt := time.Now()
	c.Restart(coordinator, false)
	c.WaitLive(c.BrokerIDs()...)
	admin.findCoordinator(t, ctx, func(id int32) bool { return id == coordinator })
	backAt := time.Now()
	rebuilt = committedNow("the committed offsets from the restarted coordinator")
	for part := range int32(partitions) {
		require.GreaterOrEqual(t, rebuilt[part], after[part], "(2) partition %d: the committed offset went backwards when the coordinator moved back", part)
	}
	d, _ = waitStable("the group stable again under the restarted coordinator, committing", rebuilt)
	t.Logf("coordinator back on broker %d %s after the restart; group stable (epoch %d, %d rebalances) %s after the restart",
		coordinator, backAt.Sub(restartAt).Round(time.Millisecond), d.GetGroupEpoch(), d.GetRebalances(), time.Since(restartAt).Round(time.Millisecond))

	// 4. Stop producing; the group drains to the end.
	time.Sleep(time.Second) // window: a second of steady state under the restarted coordinator
	stopProducing()
	<-prodDone
	stopAt := time.Now()
	fctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	require.NoError(t, p.Flush(fctx))
	require.NoError(t, p.Close(fctx))
	cancel()
	acked, failed, sent := prod.snapshot()
	require.Empty(t, failed, "every record is acknowledged within the delivery timeout (%d sent)", sent)
	drained := testenv.Retry(30*time.Second, func() error {
		if missing := h.missing(acked); len(missing) > 0 {
			return fmt.Errorf("%d acknowledged records not processed yet, e.g. %v", len(missing), missing[:min(5, len(missing))])
		}
		return nil
	})
	stopRun()
	for i, m := range ms {
		<-m.done
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		assert.NoError(t, m.gc.Close(cctx), "member %d closes", i)
		cancel()
	}
	stopSampling()
	<-sampleDone

	// The verdict. Every check reports; the first failure does not hide
	// the others.
	ev := h.snapshot()
	t.Logf("%d records acknowledged at %d/s over %s; %d processing events; run took %s",
		len(acked), rate, stopAt.Sub(start).Round(time.Millisecond), len(ev), time.Since(start).Round(time.Millisecond))
	t.Logf("assignment changes (relative to the kill): %s", h.assignmentLog(killAt))

	// (0) The members ride through the failover: Run never fails.
	//
	// KNOWN FAILURE at 0d82191 (SDK, client/group.go), in most runs: a
	// heartbeat answered UNKNOWN_MEMBER by the new coordinator clears the
	// member id (heartbeat), and a commit sent before the rejoin completes
	// carries an empty member id (commitPartitions); the coordinator takes
	// it for a commit from outside the group and refuses it while the
	// other members are back (REASON_GROUP_ACTIVE); maybeCommit passes
	// that refusal on, and Run returns it in the middle of a fetched
	// batch. The consumer has already moved past the rest of that batch,
	// so the Run called again skips those records: (1) and (3) then
	// report them lost and skipped.
	assert.Empty(t, h.runErrors(), "(0) GroupConsumer.Run failed during the failover (the member called Run again)")

	// (1) at-least-once: every acknowledged record was processed, at the
	// offset it was acknowledged at.
	if missing := h.missing(acked); !assert.NoError(t, drained, "(1) at-least-once: acknowledged records never processed") {
		for _, v := range missing[:min(5, len(missing))] {
			a := acked[v]
			t.Logf("value %d, acknowledged at partition %d offset %d, was never processed; around it:%s", v, a.partition, a.offset, h.around(a.partition, a.offset, killAt))
		}
	}
	assert.Empty(t, h.misplaced(acked), "(1) acknowledged records processed at another offset")
	// Every position was committed on Close: the committed offsets are the
	// high watermarks.
	final, err := admin.committed(ctx)
	require.NoError(t, err)
	for part := range int32(partitions) {
		_, hw, err := admin.cl.Watermarks(ctx, topic, part)
		require.NoError(t, err)
		assert.Equal(t, hw, final[part], "(1) partition %d: everything is committed once the members closed", part)
	}

	// (2) committed offsets never went backwards (samples all along; the
	// samples before and after each move were compared above).
	t.Logf("committed offsets: %d samples; final %v", sampler.count(), final)
	assert.Empty(t, sampler.regressions(), "(2) committed offsets went backwards")

	// (3) bounded replays: a member that keeps its partitions replays
	// nothing; one that moved replays at most what was processed since
	// the last commit: the commit window. Within one assignment a member
	// neither re-reads nor skips (I8).
	replays := h.replaysPerPartition(partitions)
	t.Logf("records processed more than once, per partition: %v (bound %d each, the commit window)", replays, commitEvery)
	for part, n := range replays {
		assert.LessOrEqual(t, n, commitEvery, "(3) partition %d: %d records processed twice; the members lost their positions", part, n)
	}
	rewinds, skips := h.withinAssignment()
	assert.Empty(t, rewinds, "(3) a member re-read records of a partition it kept")
	assert.Empty(t, skips, "(3) a member skipped records of a partition it kept")

	// (4) how long consumption stalled, group-wide and per partition
	// (stability after each move was waited for above).
	bound := session + 10*time.Second
	gw := h.largestGap(func(int32) bool { return true }, warmAt, stopAt)
	t.Logf("largest gap between processed records, group-wide: %s, from %+.3fs to %+.3fs after the kill",
		gw.d.Round(time.Millisecond), gw.from.Sub(killAt).Seconds(), gw.to.Sub(killAt).Seconds())
	assert.Less(t, gw.d, bound, "(4) the group stalled for %s", gw.d)
	for part := range int32(partitions) {
		g := h.largestGap(func(q int32) bool { return q == part }, warmAt, stopAt)
		led := ""
		if ledByCoordinator[part] {
			led = " (led by the killed broker)"
		}
		t.Logf("partition %d%s: longest stall %s, from %+.3fs to %+.3fs after the kill", part, led,
			g.d.Round(time.Millisecond), g.from.Sub(killAt).Seconds(), g.to.Sub(killAt).Seconds())
		assert.Less(t, g.d, bound, "(4) partition %d stalled for %s", part, g.d)
	}
}

// groupAdmin asks the group's coordinator through any live broker.
type groupAdmin struct {
	cl           *client.Client
	group, topic string
}

// call tries fn on the GroupService of a few brokers (GroupAdmin picks one
// at random; a dead one fails at once).
func (a *groupAdmin) call(ctx context.Context, fn func(gs sluicev1connect.GroupServiceClient) error) error {
	var err error
	for range 6 {
		var gs sluicev1connect.GroupServiceClient
		if gs, err = a.cl.GroupAdmin(); err == nil {
			if err = fn(gs); err == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return err
}

// committed returns the group's committed offset per partition of the
// topic (-1: none).
func (a *groupAdmin) committed(ctx context.Context) (map[int32]int64, error) {
	out := map[int32]int64{}
	err := a.call(ctx, func(gs sluicev1connect.GroupServiceClient) error {
		res, err := gs.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: a.group}))
		if err != nil {
			return err
		}
		for _, o := range res.Msg.GetOffsets() {
			if o.GetTopic() == a.topic {
				out[o.GetPartition()] = o.GetOffset()
			}
		}
		return nil
	})
	return out, err
}

func (a *groupAdmin) describe(ctx context.Context) (*sluicev1.DescribeGroupResponse, error) {
	var d *sluicev1.DescribeGroupResponse
	err := a.call(ctx, func(gs sluicev1connect.GroupServiceClient) error {
		res, err := gs.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: a.group}))
		if err == nil {
			d = res.Msg
		}
		return err
	})
	return d, err
}

// findCoordinator waits until a live broker names a coordinator that ok
// accepts, and returns it.
func (a *groupAdmin) findCoordinator(t *testing.T, ctx context.Context, ok func(int32) bool) int32 {
	t.Helper()
	var id int32
	testenv.Wait(t, 30*time.Second, "a coordinator", func() error {
		return a.call(ctx, func(gs sluicev1connect.GroupServiceClient) error {
			res, err := gs.FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: a.group}))
			if err != nil {
				return err
			}
			if !ok(res.Msg.GetBrokerId()) {
				return fmt.Errorf("coordinator is still broker %d", res.Msg.GetBrokerId())
			}
			id = res.Msg.GetBrokerId()
			return nil
		})
	})
	return id
}

// stableWithAll checks that a group is stable with n members that hold
// the topic's partitions, each exactly once, with nothing pending or being
// revoked.
func stableWithAll(d *sluicev1.DescribeGroupResponse, topic string, n, partitions int) error {
	if d.GetState() != "stable" || len(d.GetMembers()) != n {
		return fmt.Errorf("group %s with %d members", d.GetState(), len(d.GetMembers()))
	}
	held := map[int32]int{}
	for _, m := range d.GetMembers() {
		if len(m.GetPending())+len(m.GetRevoking()) > 0 {
			return fmt.Errorf("member %s: pending %v, revoking %v", m.GetMemberId(), m.GetPending(), m.GetRevoking())
		}
		for _, tp := range m.GetAssignment() {
			if tp.GetTopic() != topic {
				continue
			}
			for _, p := range tp.GetPartitions() {
				held[p]++
			}
		}
	}
	for p := range int32(partitions) {
		if held[p] != 1 {
			return fmt.Errorf("partition %d assigned %d times: %v", p, held[p], d.GetMembers())
		}
	}
	return nil
}

func keysWhere(m map[int32]bool) []int32 {
	var out []int32
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// producerHistory is every produced value's outcome.
type producerHistory struct {
	mu     sync.Mutex
	acked  map[int]ackedAt
	failed map[int]error
	sent   int
}

type ackedAt struct {
	partition int32
	offset    int64 // -1: a duplicate whose original offset is unknown
}

func (p *producerHistory) outcome(v int, r *client.Record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.failed[v] = err
		return
	}
	p.acked[v] = ackedAt{r.Partition, r.Offset}
}

func (p *producerHistory) setSent(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent = n
}

func (p *producerHistory) snapshot() (map[int]ackedAt, map[int]error, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.acked), maps.Clone(p.failed), p.sent
}

// groupHistory is what the members processed, in order, and their
// assignment changes.
type groupHistory struct {
	mu      sync.Mutex
	events  []processedEvent
	changes []assignmentChange
	errs    []string
}

type processedEvent struct {
	member    int
	partition int32
	offset    int64
	value     int
	at        time.Time
}

type assignmentChange struct {
	member int
	what   string
	tps    []client.TopicPartition
	at     time.Time
}

func (h *groupHistory) processed(member int, partition int32, offset int64, value int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, processedEvent{member, partition, offset, value, time.Now()})
}

func (h *groupHistory) assignment(member int, what string, tps []client.TopicPartition) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, assignmentChange{member, what, slices.Clone(tps), time.Now()})
}

func (h *groupHistory) runError(member int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, fmt.Sprintf("member %d at %s: %v", member, time.Now().Format("15:04:05.000"), err))
}

func (h *groupHistory) runErrors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.errs)
}

func (h *groupHistory) snapshot() []processedEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// missing lists acknowledged values nobody processed.
func (h *groupHistory) missing(acked map[int]ackedAt) []int {
	seen := map[int]bool{}
	for _, e := range h.snapshot() {
		seen[e.value] = true
	}
	var out []int
	for v := range acked {
		if !seen[v] {
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out
}

// misplaced lists processed records whose partition or offset differs from
// the acknowledgement's.
func (h *groupHistory) misplaced(acked map[int]ackedAt) []string {
	var out []string
	for _, e := range h.snapshot() {
		a, ok := acked[e.value]
		if !ok {
			continue
		}
		if a.partition != e.partition || (a.offset >= 0 && a.offset != e.offset) {
			out = append(out, fmt.Sprintf("%d acknowledged at %d/%d, processed at %d/%d", e.value, a.partition, a.offset, e.partition, e.offset))
		}
	}
	return out
}

// replaysPerPartition counts, per partition, the processings of an offset
// beyond its first.
func (h *groupHistory) replaysPerPartition(partitions int) map[int32]int {
	type pos struct {
		p   int32
		off int64
	}
	seen := map[pos]bool{}
	out := map[int32]int{}
	for p := range int32(partitions) {
		out[p] = 0
	}
	for _, e := range h.snapshot() {
		k := pos{e.partition, e.offset}
		if seen[k] {
			out[e.partition]++
		}
		seen[k] = true
	}
	return out
}

// withinAssignment lists the times a member processed, in a partition it
// was not assigned again since its previous record there, an offset at or
// below the previous one (a rewind) or more than one above it (a skip).
// I8: a consumer never skips or re-reads within one assignment.
func (h *groupHistory) withinAssignment() (rewinds, skips []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	type mp struct {
		member int
		p      int32
	}
	last := map[mp]int64{}
	ci := 0
	for _, e := range h.events {
		for ci < len(h.changes) && !h.changes[ci].at.After(e.at) {
			ch := h.changes[ci]
			for _, tp := range ch.tps {
				delete(last, mp{ch.member, tp.Partition})
			}
			ci++
		}
		k := mp{e.member, e.partition}
		if l, ok := last[k]; ok {
			what := fmt.Sprintf("member %d partition %d: offset %d after %d at %s", e.member, e.partition, e.offset, l, e.at.Format("15:04:05.000"))
			switch {
			case e.offset <= l:
				rewinds = append(rewinds, what)
			case e.offset > l+1:
				skips = append(skips, what)
			}
		}
		last[k] = e.offset
	}
	return rewinds, skips
}

// around renders who processed the offsets of a partition near offset, with
// times relative to t0.
func (h *groupHistory) around(partition int32, offset int64, t0 time.Time) string {
	var b strings.Builder
	for _, e := range h.snapshot() {
		if e.partition == partition && e.offset >= offset-3 && e.offset <= offset+3 {
			fmt.Fprintf(&b, "\n  %+.3fs member %d offset %d value %d", e.at.Sub(t0).Seconds(), e.member, e.offset, e.value)
		}
	}
	return b.String()
}

type gap struct {
	d        time.Duration
	from, to time.Time
}

// largestGap is the longest time without a first processing of any record
// of the partitions in, among the gaps that overlap [from, to).
func (h *groupHistory) largestGap(in func(int32) bool, from, to time.Time) gap {
	type pos struct {
		p   int32
		off int64
	}
	seen := map[pos]bool{}
	var times []time.Time
	for _, e := range h.snapshot() {
		k := pos{e.partition, e.offset}
		if seen[k] || !in(e.partition) {
			seen[k] = true
			continue
		}
		seen[k] = true
		times = append(times, e.at)
	}
	var g gap
	for i := 1; i < len(times); i++ {
		if !times[i].After(from) || !times[i-1].Before(to) {
			continue
		}
		if d := times[i].Sub(times[i-1]); d > g.d {
			g = gap{d, times[i-1], times[i]}
		}
	}
	return g
}

// assignmentLog renders the assignment changes with times relative to t0.
func (h *groupHistory) assignmentLog(t0 time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, ch := range h.changes {
		var ps []int32
		for _, tp := range ch.tps {
			ps = append(ps, tp.Partition)
		}
		slices.Sort(ps)
		fmt.Fprintf(&b, "\n  %+.3fs member %d %s %v", ch.at.Sub(t0).Seconds(), ch.member, ch.what, ps)
	}
	return b.String()
}

// offsetSampler keeps the committed offsets seen over time.
type offsetSampler struct {
	mu      sync.Mutex
	n       int
	highest map[int32]int64
	regress []string
}

func (s *offsetSampler) add(offs map[int32]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.highest == nil {
		s.highest = map[int32]int64{}
	}
	s.n++
	for p, o := range offs {
		if h, ok := s.highest[p]; ok && o < h {
			s.regress = append(s.regress, fmt.Sprintf("partition %d: %d after %d at %s", p, o, h, time.Now().Format("15:04:05.000")))
			continue
		}
		s.highest[p] = o
	}
}

func (s *offsetSampler) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func (s *offsetSampler) regressions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.regress)
}
