package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition/fetcher"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// newTestHost is broker 1 as its replicas see it, with the broker's
// defaults (--flush always, 256 MiB segments, a 30 s lag time), never
// registered (broker epoch 0), knowing brokers 1 to 3 at made-up
// addresses, and no leader a follower could reach: a test drives
// replication itself.
func newTestHost(t testing.TB) *Host {
	t.Helper()
	return &Host{
		ID:          1,
		BrokerEpoch: func() int64 { return 0 },
		Logger:      slog.New(slog.DiscardHandler),
		Metrics: &Metrics{
			Duplicates:     prometheus.NewCounter(prometheus.CounterOpts{Name: "duplicates"}),
			SequenceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sequence_errors"}, []string{"reason"}),
			ISRShrinks:     prometheus.NewCounter(prometheus.CounterOpts{Name: "isr_shrinks"}),
			ISRExpands:     prometheus.NewCounter(prometheus.CounterOpts{Name: "isr_expands"}),
		},
		SegmentBytes:      256 << 20,
		SegmentAge:        7 * 24 * time.Hour,
		Flush:             log.FlushAlways,
		FlushInterval:     10 * time.Millisecond,
		ReplicaLagTimeMax: 30 * time.Second,
		LeaderAddress: func(id int32) string {
			if id < 1 || id > 3 {
				return ""
			}
			return fmt.Sprintf("127.0.0.1:900%d", id)
		},
		ReplicaClient: func(int32) fetcher.LeaderClient { return leaderVia{unreachable{}} },
		// A broker stops; a test has no broker to stop (and a replica may
		// report after its test ended, from a produce a crash interrupted).
		FailStop: func(string, int32, error) {},
	}
}

// unreachable is a leader no follower reaches: a test that lets a
// follower's fetcher run gets the network error a real follower
// would, and drives replication itself.
type unreachable struct {
	sluicev1connect.ReplicaServiceClient
}

func (unreachable) FetchReplica(context.Context, *connect.Request[sluicev1.FetchReplicaRequest]) (*connect.Response[sluicev1.FetchReplicaResponse], error) {
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("the leader is unreachable in this test"))
}

func (unreachable) FetchReplicas(context.Context, *connect.Request[sluicev1.FetchReplicasRequest]) (*connect.Response[sluicev1.FetchReplicasResponse], error) {
	return nil, connect.NewError(connect.CodeUnavailable, errors.New("the leader is unreachable in this test"))
}

// open opens replica 0 of topic-1 in a fresh directory, closed at the
// end of the test.
func open(t *testing.T, h *Host, cfg TopicConfig) *Replica {
	t.Helper()
	p, err := Open(h, Spec{TenantID: "t1", TopicID: "topic-1", Partition: 0, Dir: t.TempDir(), Config: cfg})
	require.NoError(t, err)
	t.Cleanup(func() { p.log.Close() })
	return p
}

// batchOf encodes n one-record batches for offsets from, as a leader would
// have stamped them at epoch.
func batchesOf(t *testing.T, from int64, n int, epoch int32) []byte {
	t.Helper()
	var out []byte
	for i := range n {
		b, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: from + int64(i), LeaderEpoch: epoch}, []record.Record{{Value: []byte("v")}})
		require.NoError(t, err)
		out = append(out, b...)
	}
	return out
}

// validBatch checks b as the produce handler checks a request's batch.
func validBatch(t *testing.T, b []byte) log.ValidBatch {
	t.Helper()
	v, err := log.ValidateLeaderBatch(b, 0)
	require.NoError(t, err)
	return v
}

// newFollower opens a replica following broker 2 at leader epoch 3 with
// records [0, 10) of epoch 3 and HW 8.
func newFollower(t *testing.T, h *Host, unclean bool) *Replica {
	t.Helper()
	cfg := TopicConfig{MinISR: 2, Unclean: unclean}
	p := open(t, h, cfg)
	_, err := p.log.AppendFollower(batchesOf(t, 0, 10, 3))
	require.NoError(t, err)
	p.mu.Lock()
	p.role, p.cfg = RoleFollower, cfg
	p.meta = Assignment{Replicas: []int32{1, 2, 3}, Leader: 2, LeaderEpoch: 3, ISR: []int32{1, 2, 3}}
	p.fol, err = replica.NewFollower(replica.FollowerParams{Self: 1, BrokerEpoch: 1, Leader: 2, LeaderEpoch: 3, HW: 8, Unclean: unclean})
	p.mu.Unlock()
	require.NoError(t, err)
	return p
}

// nextFetch is the fetch p's follower state machine sends next.
func nextFetch(p *Replica) (*replica.Follower, replica.FetchRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fol, p.fol.Next(logState(p.log))
}

// applyNext applies res as the answer to p's next fetch.
func applyNext(p *Replica, res *sluicev1.FetchReplicaResponse) error {
	fol, q := nextFetch(p)
	return p.applyFetch(fol, q, res)
}

func TestPartitionFollowerDropsStaleFetchAnswers(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	fol, q := nextFetch(p)
	// An answer for the previous leadership (epoch 2) is ignored.
	old := q
	old.LeaderEpoch = 2
	require.NoError(t, p.applyFetch(fol, old, &sluicev1.FetchReplicaResponse{Batches: batchesOf(t, 10, 2, 3), HighWatermark: 12}))
	require.EqualValues(t, 8, p.HighWatermark())
	// So is one for a follower state machine that was replaced.
	stale, err := replica.NewFollower(replica.FollowerParams{Self: 1, Leader: 2, LeaderEpoch: 3})
	require.NoError(t, err)
	require.NoError(t, p.applyFetch(stale, q, &sluicev1.FetchReplicaResponse{Batches: batchesOf(t, 10, 2, 3), HighWatermark: 12}))
	require.EqualValues(t, 10, p.log.LEO())
	require.EqualValues(t, 8, p.HighWatermark())
	// The current leadership's answer is applied.
	require.NoError(t, p.applyFetch(fol, q, &sluicev1.FetchReplicaResponse{Batches: batchesOf(t, 10, 2, 3), HighWatermark: 12}))
	require.EqualValues(t, 12, p.log.LEO())
	require.EqualValues(t, 12, p.HighWatermark())
	// A lower HW from the leader does not move the follower's back.
	fol, q = nextFetch(p)
	require.NoError(t, p.applyFetch(fol, q, &sluicev1.FetchReplicaResponse{HighWatermark: 9}))
	require.EqualValues(t, 12, p.HighWatermark())
}

func TestPartitionFollowerNeverTruncatesCommittedRecords(t *testing.T) {
	t.Parallel()
	diverge := &sluicev1.FetchReplicaResponse{DivergingEpoch: &sluicev1.DivergingEpoch{Epoch: 3, EndOffset: 5}}

	p := newFollower(t, newTestHost(t), false)
	err := applyNext(p, diverge)
	require.ErrorIs(t, err, replica.ErrTruncateBelowHW)
	require.ErrorContains(t, err, "refusing to truncate")
	require.EqualValues(t, 10, p.log.LEO(), "nothing truncated")
	require.EqualValues(t, 8, p.HighWatermark())

	// Unclean election opted in: the loss is accepted.
	p = newFollower(t, newTestHost(t), true)
	require.NoError(t, applyNext(p, diverge))
	require.EqualValues(t, 5, p.log.LEO())
	require.EqualValues(t, 5, p.HighWatermark())

	// A divergence above the HW is an ordinary truncation.
	p = newFollower(t, newTestHost(t), false)
	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{DivergingEpoch: &sluicev1.DivergingEpoch{Epoch: 3, EndOffset: 9}}))
	require.EqualValues(t, 9, p.log.LEO())
	require.EqualValues(t, 8, p.HighWatermark())
}

// lead makes p the leader at epoch 4 with the given HW.
func lead(t *testing.T, p *Replica, hw int64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.meta = Assignment{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2, 3}}
	p.endRoleLocked()
	p.roleHW = hw
	l, err := p.newLeaderLocked(p.meta, p.cfg, time.Now())
	require.NoError(t, err)
	p.startLeadingLocked(context.Background(), l)
}

// waitHW waits until p's HW is hw.
func waitHW(t *testing.T, p *Replica, hw int64) {
	t.Helper()
	testenv.Wait(t, 10*time.Second, fmt.Sprintf("HW %d", hw), func() error {
		if got := p.HighWatermark(); got != hw {
			return fmt.Errorf("HW %d", got)
		}
		return nil
	})
}

func TestPartitionNewLeaderHidesHWUntilEstablished(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8) // LEO 10: the epoch starts at 10, the HW is 8
	_, err := p.ReaderHW()
	require.ErrorIs(t, err, ErrHWCatchingUp)
	_, _, err = p.Fetch(context.Background(), 0, 1<<20, 0, nil)
	require.Equal(t, connect.CodeUnavailable, codeOf(err))

	// Once the ISR has fetched up to the LEO the HW is established.
	p.mu.Lock()
	for _, f := range []int32{2, 3} {
		_, ferr := p.lead.FollowerFetch(replica.FetchRequest{Replica: f, BrokerEpoch: 1, LeaderEpoch: 4, FetchOffset: 10, LastFetchedEpoch: 3, Durable: 10}, time.Now())
		require.NoError(t, ferr)
	}
	p.mu.Unlock()
	// The leader's own tail, fetched as a follower, is synced by the
	// leadership's start.
	waitHW(t, p, 10)
	hw, err := p.ReaderHW()
	require.NoError(t, err)
	require.EqualValues(t, 10, hw)
}

// produceAsync produces one acks=all batch to p in the background and
// waits until the leader state machine holds its acks=all wait.
func produceAsync(t *testing.T, p *Replica, timeout time.Duration) <-chan error {
	t.Helper()
	p.mu.Lock()
	before := len(p.ackWaiters)
	p.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := p.Produce(context.Background(), []log.ValidBatch{validBatch(t, batchesOf(t, 0, 1, 0))}, sluicev1.Acks_ACKS_ALL, timeout, nil)
		done <- err
	}()
	testenv.Wait(t, 10*time.Second, "the produce's acks=all wait", func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.ackWaiters) == before {
			return errors.New("not registered")
		}
		return nil
	})
	return done
}

// followerFetch sends follower id's fetch from offset through the leader's
// replication handler, as a follower broker would.
func followerFetch(t *testing.T, p *Replica, id int32, offset int64, lastEpoch int32) {
	t.Helper()
	_, err := p.serveReplica(&sluicev1.FetchReplicaRequest{FollowerId: id, FollowerBrokerEpoch: 1, TopicId: p.topicID,
		LeaderEpoch: 4, FetchOffset: offset, LastFetchedEpoch: lastEpoch, MaxBytes: 1 << 20}, 1<<20)
	require.NoError(t, err)
}

// TestPartitionAcksAllCompletesFromTheStateMachine: an acks=all produce is
// answered when the leader state machine reports its wait done, which the
// followers' fetches through the replication handler cause.
func TestPartitionAcksAllCompletesFromTheStateMachine(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8)
	for _, f := range []int32{2, 3} {
		followerFetch(t, p, f, 10, 3)
	}
	waitHW(t, p, 10)
	done := produceAsync(t, p, time.Minute)
	followerFetch(t, p, 2, 11, 4)
	select {
	case err := <-done:
		t.Fatalf("acknowledged before 3 had the record: %v", err)
	default:
	}
	followerFetch(t, p, 3, 11, 4)
	require.NoError(t, <-done)
	require.EqualValues(t, 11, p.HighWatermark())
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.ackWaiters)
}

// TestPartitionHWCountsFollowersDurableOffsets: a follower that reports the
// record fetched but not yet durable does not count toward the HW, so the
// acks=all produce waits for its sync.
func TestPartitionHWCountsFollowersDurableOffsets(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8)
	for _, f := range []int32{2, 3} {
		followerFetch(t, p, f, 10, 3)
	}
	waitHW(t, p, 10)
	done := produceAsync(t, p, time.Minute)
	fetchDurable := func(id int32, durable int64) {
		t.Helper()
		_, err := p.serveReplica(&sluicev1.FetchReplicaRequest{FollowerId: id, FollowerBrokerEpoch: 1, TopicId: p.topicID,
			LeaderEpoch: 4, FetchOffset: 11, LastFetchedEpoch: 4, DurableOffset: &durable, MaxBytes: 1 << 20}, 1<<20)
		require.NoError(t, err)
	}
	fetchDurable(2, 11)
	fetchDurable(3, 10) // fetched, not synced
	testenv.Consistently(t, 200*time.Millisecond, "no ack before 3 synced", func() error {
		select {
		case err := <-done:
			return fmt.Errorf("acknowledged before 3 synced the record: %v", err)
		default:
		}
		if hw := p.HighWatermark(); hw != 10 {
			return fmt.Errorf("HW %d", hw)
		}
		return nil
	})
	fetchDurable(3, 11)
	require.NoError(t, <-done)
	require.EqualValues(t, 11, p.HighWatermark())
}

func TestPartitionAcksAllWaitEndsWithItsLeadership(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8)
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	done := produceAsync(t, p, time.Minute)
	// A new leadership (here: this broker again, at a new epoch, alone in
	// the ISR) takes over and its HW passes the record as soon as its log
	// tail is durable (startLeadingLocked syncs it in the background, or
	// the produce's own sync did), perhaps over different records: the old
	// wait must not report success.
	cfg.MinISR = 1
	p.Update(context.Background(), Assignment{Replicas: []int32{1}, Leader: 1, LeaderEpoch: 5, ISR: []int32{1}}, cfg)
	err := <-done
	require.Equal(t, connect.CodeUnavailable, codeOf(err), "%v", err)
	require.Contains(t, err.Error(), "leadership moved before acks=all completed; the records may or may not be committed")
	// The wait can end before the new leadership's sync does: the HW
	// passes the record after it, not necessarily before the answer.
	testenv.Wait(t, 10*time.Second, "the new leadership's HW passes the record", func() error {
		if hw := p.HighWatermark(); hw != 11 {
			return fmt.Errorf("HW %d", hw)
		}
		return nil
	})
}

func TestPartitionAcksAllWaitFailsWhenTheISRShrinksBelowMin(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8)
	p.mu.Lock()
	cfg, pm := p.cfg, p.meta
	p.mu.Unlock()
	done := produceAsync(t, p, time.Minute)
	pm.ISR, pm.PartitionEpoch = []int32{1}, pm.PartitionEpoch+1
	p.Update(context.Background(), pm, cfg)
	err := <-done
	require.Equal(t, connect.CodeUnavailable, codeOf(err), "%v", err)
	require.Contains(t, err.Error(), "the ISR shrank below min.insync.replicas before acks=all completed")
}

func TestPartitionAcksAllWaitTimesOut(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	lead(t, p, 8)
	// Not produceAsync: its wait for the registration can miss a wait
	// that a busy machine times out first.
	_, err := p.Produce(context.Background(), []log.ValidBatch{validBatch(t, batchesOf(t, 0, 1, 0))}, sluicev1.Acks_ACKS_ALL, 50*time.Millisecond, nil)
	require.Equal(t, connect.CodeDeadlineExceeded, codeOf(err), "%v", err)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.ackWaiters, "the wait was withdrawn")
	require.Empty(t, p.lead.TakeAcks())
}

// TestPartitionHWRestoredOnOpen: Open starts from the HW the broker's
// checkpoint holds, capped at the LEO; without one, from the legacy
// per-partition file an older broker wrote, which HWCheckpointed removes;
// with neither, from 0.
func TestPartitionHWRestoredOnOpen(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	p := newFollower(t, h, false) // LEO 10, HW 8
	require.NoError(t, p.log.Close())
	reopen := func(s Spec) *Replica {
		t.Helper()
		s.TenantID, s.TopicID, s.Dir = "t1", "topic-1", p.Dir()
		p2, err := Open(h, s)
		require.NoError(t, err)
		t.Cleanup(func() { p2.log.Close() })
		return p2
	}
	legacy := filepath.Join(p.Dir(), "high-watermark")

	require.EqualValues(t, 0, reopen(Spec{}).HighWatermark(), "no checkpoint")
	require.EqualValues(t, 8, reopen(Spec{HW: 8, HWKnown: true}).HighWatermark(), "the broker's checkpoint")
	require.EqualValues(t, 10, reopen(Spec{HW: 12, HWKnown: true}).HighWatermark(), "capped at the LEO")
	require.EqualValues(t, 0, reopen(Spec{HW: 0, HWKnown: true}).HighWatermark())

	require.NoError(t, os.WriteFile(legacy, []byte("7\n"), 0o644))
	require.EqualValues(t, 6, reopen(Spec{HW: 6, HWKnown: true}).HighWatermark(), "the broker's checkpoint wins")
	p2 := reopen(Spec{})
	require.EqualValues(t, 7, p2.HighWatermark(), "upgraded: the legacy file")
	require.FileExists(t, legacy)
	require.NoError(t, p2.HWCheckpointed())
	require.NoFileExists(t, legacy, "gone once the broker's checkpoint holds the partition")
	require.NoError(t, p2.HWCheckpointed())

	require.NoError(t, os.WriteFile(legacy, []byte("garbage"), 0o644))
	p3 := reopen(Spec{})
	require.EqualValues(t, 0, p3.HighWatermark(), "a damaged legacy file is ignored")
	require.NoError(t, p3.HWCheckpointed())
	require.NoFileExists(t, legacy)
}

// TestPartitionRetentionNeverDeletesAboveTheHW: retention deletes expired
// segments only up to the high watermark: a segment holding records not
// yet committed stays, however old its records, since a new leader may
// still need it (its replicas could truncate otherwise-committed data).
func TestPartitionRetentionNeverDeletesAboveTheHW(t *testing.T) {
	t.Parallel()
	cfg := TopicConfig{MinISR: 2, RetentionMs: 1000}
	p := open(t, newTestHost(t), cfg)
	// Three segments of records stamped in 1970: [0, 5), [5, 10), [10, 12).
	for _, r := range [][2]int{{0, 5}, {5, 5}, {10, 2}} {
		_, err := p.log.AppendFollower(batchesOf(t, int64(r[0]), r[1], 3))
		require.NoError(t, err)
		require.NoError(t, p.log.Roll())
	}
	p.mu.Lock()
	p.role, p.cfg, p.roleHW = RoleNone, cfg, 8
	p.mu.Unlock()

	n, err := p.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 1, n, "only [0, 5) lies wholly below the HW")
	require.EqualValues(t, 5, p.log.LogStartOffset())

	p.mu.Lock()
	p.roleHW = 12
	p.mu.Unlock()
	n, err = p.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 2, n, "once committed, the rest goes")
	require.EqualValues(t, 12, p.log.LogStartOffset())
}

// TestPartitionNamedLeaderNotTakenOverIsUnavailable: a produce to the broker
// the metadata names as leader, before its replica has taken over, is
// answered Unavailable (retry here shortly), not "not the leader: broker 1
// leads" pointing at itself (issue 12: a client following that NotLeader
// looped back to the same broker and gave up); a produce to a broker that
// does not lead still gets FailedPrecondition with the leader's address.
// (TestBrokerNotLeaderForwardedOnlyToAnotherBroker: the broker forwards
// only the second.)
func TestPartitionNamedLeaderNotTakenOverIsUnavailable(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	batch := batchesOf(t, 0, 1, 0)
	p.mu.Lock()
	p.meta.Leader, p.meta.LeaderEpoch = 1, 4 // this broker, still a follower
	p.mu.Unlock()
	_, err := p.Produce(context.Background(), []log.ValidBatch{validBatch(t, batch)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
	require.Equal(t, connect.CodeUnavailable, codeOf(err), "%v", err)
	require.ErrorContains(t, err, "is named the leader at epoch 4 but is not leading")
	nl, ok := notLeaderDetail(err)
	require.True(t, ok, "the NotLeader detail says it was refused, not written")
	require.EqualValues(t, 1, nl.GetLeaderId())
	var nle *NotLeaderError
	require.ErrorAs(t, err, &nle)
	require.True(t, nle.Self)

	p.mu.Lock()
	p.meta.Leader = 2 // another broker leads
	p.mu.Unlock()
	_, err = p.Produce(context.Background(), []log.ValidBatch{validBatch(t, batch)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err), "%v", err)
	require.ErrorContains(t, err, "not the leader: broker 2 (127.0.0.1:9002) leads at epoch 4")
	nl, ok = notLeaderDetail(err)
	require.True(t, ok)
	require.Equal(t, "127.0.0.1:9002", nl.GetLeaderAddress())
	require.ErrorAs(t, err, &nle)
	require.False(t, nle.Self)
}

func notLeaderDetail(err error) (*sluicev1.NotLeader, bool) {
	var ce *connect.Error
	if !errors.As(connecterr.ToConnect(err), &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if nl, ok := v.(*sluicev1.NotLeader); ok {
				return nl, true
			}
		}
	}
	return nil, false
}

// TestPartitionProduceRefusalWhileTheViewChanges: produces refused as
// not-leader while new views arrive read the partition's metadata under its
// lock (the race detector flagged the refusal reading it after unlocking,
// in e2e runs with a -race binary).
func TestPartitionProduceRefusalWhileTheViewChanges(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false)
	batch := batchesOf(t, 0, 1, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the follower's fetching
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := int32(4); e < 200; e++ {
			p.Update(ctx, Assignment{Replicas: []int32{1, 2, 3}, Leader: 2 + e%2, LeaderEpoch: e, ISR: []int32{1, 2, 3}}, cfg)
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		_, err := p.Produce(context.Background(), []log.ValidBatch{validBatch(t, batch)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
		require.Equal(t, connect.CodeFailedPrecondition, codeOf(err), "%v", err)
	}
}

func TestPartitionBelowHW(t *testing.T) {
	t.Parallel()
	var data []byte
	var sizes []int
	for i := range 3 {
		b, err := record.AppendBatch(nil, record.BatchHeader{BaseOffset: int64(2 * i)}, []record.Record{{Value: []byte("x")}, {OffsetDelta: 1, Value: []byte("y")}})
		require.NoError(t, err)
		data = append(data, b...)
		sizes = append(sizes, len(b))
	}
	belowHW := func(data []byte, hw int64) []byte {
		kept, _ := keepBatches(data, 0, hw, nil, false, false)
		return kept
	}
	require.Len(t, belowHW(data, 0), 0)
	require.Len(t, belowHW(data, 2), sizes[0])
	require.Len(t, belowHW(data, 4), sizes[0]+sizes[1])
	require.Len(t, belowHW(data, 100), len(data))
}

func TestPartitionClientLeaderEpochFencing(t *testing.T) {
	t.Parallel()
	p := &Replica{meta: Assignment{LeaderEpoch: 3}}
	e := func(v int32) *int32 { return &v }
	require.NoError(t, p.checkClientEpochLocked(nil), "unset: no check")
	require.NoError(t, p.checkClientEpochLocked(e(3)))
	err := p.checkClientEpochLocked(e(2))
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.Contains(t, err.Error(), "fenced leader epoch 2")
	err = p.checkClientEpochLocked(e(4))
	require.Equal(t, connect.CodeUnavailable, codeOf(err))
	require.Contains(t, err.Error(), "unknown leader epoch 4")
}

// TestPartitionDeadFollowerNotProposedBack: the controller dropped broker
// 3 from the ISR (its lease expired) while the partition was idle and 3 at
// the leader's LEO. The ISR loop sends no AlterPartition for it while it
// does not fetch, and after a refusal (the controller still sees it dead)
// at most one per fetch of 3, however often the loop runs (issue 15: a dead
// broker was proposed every round, 400–900 refused AlterPartition/s with
// one broker down).
func TestPartitionDeadFollowerNotProposedBack(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	var calls atomic.Int32
	h.AlterPartition = alterVia(func(_ context.Context, req *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
		calls.Add(1)
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("broker 3 is not live; it cannot join the ISR"))
		d, err := connect.NewErrorDetail(&sluicev1.PartitionAssignment{TopicId: "topic-1", Replicas: []int32{1, 2, 3},
			Leader: 1, LeaderEpoch: 4, Isr: []int32{1, 2}, PartitionEpoch: req.Msg.GetPartitionEpoch()})
		require.NoError(t, err)
		ce.AddDetail(d)
		return nil, ce
	})
	p := newFollower(t, h, false)
	lead(t, p, 8)
	for _, f := range []int32{2, 3} {
		followerFetch(t, p, f, 10, 3)
	}
	waitHW(t, p, 10)
	p.Update(context.Background(), Assignment{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4, ISR: []int32{1, 2}, PartitionEpoch: 1}, p.cfg)

	for range 20 {
		followerFetch(t, p, 2, 10, 3)
		p.MaybeAlterISR(context.Background())
	}
	require.Zero(t, calls.Load(), "proposed a follower that has not fetched since it left the ISR")

	followerFetch(t, p, 3, 10, 3) // a zombie fetch the controller refuses to count
	for range 20 {
		p.MaybeAlterISR(context.Background())
	}
	require.EqualValues(t, 1, calls.Load(), "one refused proposal per fetch")
	followerFetch(t, p, 3, 10, 3)
	for range 20 {
		p.MaybeAlterISR(context.Background())
	}
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 2, p.Status().ISR)
}
