package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// newTestBroker is a broker that is never started: enough for partition
// logic that needs its config, logger and metadata.
func newTestBroker(t *testing.T) *Broker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = t.TempDir()
	cfg.BrokerToken = "broker-token-0123456789"
	b, err := New(cfg, Deps{})
	require.NoError(t, err)
	return b
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

// newFollower opens a partition following broker 2 at leader epoch 3 with
// records [0, 10) of epoch 3 and HW 8.
func newFollower(t *testing.T, b *Broker, unclean bool) *partition {
	t.Helper()
	tm := &topicMeta{tenantID: "t1", id: "topic-1", name: "orders", config: topicConfig{minISR: 2, unclean: unclean}}
	p, err := b.openPartition(tm, partMeta{partition: 0})
	require.NoError(t, err)
	t.Cleanup(func() { p.log.Close() })
	_, err = p.log.AppendFollower(batchesOf(t, 0, 10, 3))
	require.NoError(t, err)
	p.mu.Lock()
	p.role, p.cfg = roleFollower, tm.config
	p.meta = partMeta{partition: 0, replicas: []int32{1, 2, 3}, leader: 2, leaderEpoch: 3, isr: []int32{1, 2, 3}}
	p.fol, err = replica.NewFollower(replica.FollowerParams{Self: 1, BrokerEpoch: 1, Leader: 2, LeaderEpoch: 3, HW: 8, Unclean: unclean})
	p.mu.Unlock()
	require.NoError(t, err)
	return p
}

// nextFetch is the fetch p's follower state machine sends next.
func nextFetch(p *partition) (*replica.Follower, replica.FetchRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fol, p.fol.Next(logState(p.log))
}

// applyNext applies res as the answer to p's next fetch.
func applyNext(p *partition, res *sluicev1.FetchReplicaResponse) error {
	fol, q := nextFetch(p)
	return p.applyFetch(fol, q, res)
}

func TestBrokerFollowerDropsStaleFetchAnswers(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	fol, q := nextFetch(p)
	// An answer for the previous leadership (epoch 2) is ignored.
	old := q
	old.LeaderEpoch = 2
	require.NoError(t, p.applyFetch(fol, old, &sluicev1.FetchReplicaResponse{Batches: batchesOf(t, 10, 2, 3), HighWatermark: 12}))
	require.EqualValues(t, 8, p.highWatermark())
	// So is one for a follower state machine that was replaced.
	stale, err := replica.NewFollower(replica.FollowerParams{Self: 1, Leader: 2, LeaderEpoch: 3})
	require.NoError(t, err)
	require.NoError(t, p.applyFetch(stale, q, &sluicev1.FetchReplicaResponse{Batches: batchesOf(t, 10, 2, 3), HighWatermark: 12}))
	require.EqualValues(t, 10, p.log.LEO())
	require.EqualValues(t, 8, p.highWatermark())
	// The current leadership's answer is applied.
	require.NoError(t, p.applyFetch(fol, q, &sluicev1.FetchReplicaResponse{Batches: batchesOf(t, 10, 2, 3), HighWatermark: 12}))
	require.EqualValues(t, 12, p.log.LEO())
	require.EqualValues(t, 12, p.highWatermark())
	// A lower HW from the leader does not move the follower's back.
	fol, q = nextFetch(p)
	require.NoError(t, p.applyFetch(fol, q, &sluicev1.FetchReplicaResponse{HighWatermark: 9}))
	require.EqualValues(t, 12, p.highWatermark())
}

func TestBrokerFollowerNeverTruncatesCommittedRecords(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	diverge := &sluicev1.FetchReplicaResponse{DivergingEpoch: &sluicev1.DivergingEpoch{Epoch: 3, EndOffset: 5}}

	p := newFollower(t, b, false)
	err := applyNext(p, diverge)
	require.ErrorIs(t, err, replica.ErrTruncateBelowHW)
	require.ErrorContains(t, err, "refusing to truncate")
	require.EqualValues(t, 10, p.log.LEO(), "nothing truncated")
	require.EqualValues(t, 8, p.highWatermark())

	// Unclean election opted in: the loss is accepted.
	p = newFollower(t, newTestBroker(t), true)
	require.NoError(t, applyNext(p, diverge))
	require.EqualValues(t, 5, p.log.LEO())
	require.EqualValues(t, 5, p.highWatermark())

	// A divergence above the HW is an ordinary truncation.
	p = newFollower(t, newTestBroker(t), false)
	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{DivergingEpoch: &sluicev1.DivergingEpoch{Epoch: 3, EndOffset: 9}}))
	require.EqualValues(t, 9, p.log.LEO())
	require.EqualValues(t, 8, p.highWatermark())
}

// lead makes p the leader at epoch 4 with the given HW.
func lead(t *testing.T, p *partition, hw int64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.meta = partMeta{partition: 0, replicas: []int32{1, 2, 3}, leader: 1, leaderEpoch: 4, isr: []int32{1, 2, 3}}
	p.endRoleLocked()
	p.roleHW = hw
	l, err := p.newLeaderLocked(p.meta, p.cfg, time.Now())
	require.NoError(t, err)
	p.startLeadingLocked(context.Background(), l)
}

// waitHW waits until p's HW is hw.
func waitHW(t *testing.T, p *partition, hw int64) {
	t.Helper()
	testenv.Wait(t, 10*time.Second, fmt.Sprintf("HW %d", hw), func() error {
		if got := p.highWatermark(); got != hw {
			return fmt.Errorf("HW %d", got)
		}
		return nil
	})
}

func TestBrokerNewLeaderHidesHWUntilEstablished(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	lead(t, p, 8) // LEO 10: the epoch starts at 10, the HW is 8
	_, err := p.readerHW()
	require.ErrorIs(t, err, errHWCatchingUp)
	_, _, err = p.fetch(context.Background(), 0, 1<<20, 0, nil)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err))

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
	hw, err := p.readerHW()
	require.NoError(t, err)
	require.EqualValues(t, 10, hw)
}

// produceAsync produces one acks=all batch to p in the background and
// waits until the leader state machine holds its acks=all wait.
func produceAsync(t *testing.T, p *partition, timeout time.Duration) <-chan error {
	t.Helper()
	p.mu.Lock()
	before := len(p.ackWaiters)
	p.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := p.produce(context.Background(), []log.ValidBatch{validBatch(t, batchesOf(t, 0, 1, 0))}, sluicev1.Acks_ACKS_ALL, timeout, nil)
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
func followerFetch(t *testing.T, p *partition, id int32, offset int64, lastEpoch int32) {
	t.Helper()
	_, _, err := p.serveReplica(&sluicev1.FetchReplicaRequest{FollowerId: id, FollowerBrokerEpoch: 1, TopicId: p.topicID,
		LeaderEpoch: 4, FetchOffset: offset, LastFetchedEpoch: lastEpoch, MaxBytes: 1 << 20}, 1<<20)
	require.NoError(t, err)
}

// TestBrokerAcksAllCompletesFromTheStateMachine: an acks=all produce is
// answered when the leader state machine reports its wait done, which the
// followers' fetches through the replication handler cause.
func TestBrokerAcksAllCompletesFromTheStateMachine(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
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
	require.EqualValues(t, 11, p.highWatermark())
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.ackWaiters)
}

// TestBrokerHWCountsFollowersDurableOffsets: a follower that reports the
// record fetched but not yet durable does not count toward the HW, so the
// acks=all produce waits for its sync.
func TestBrokerHWCountsFollowersDurableOffsets(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	lead(t, p, 8)
	for _, f := range []int32{2, 3} {
		followerFetch(t, p, f, 10, 3)
	}
	waitHW(t, p, 10)
	done := produceAsync(t, p, time.Minute)
	fetchDurable := func(id int32, durable int64) {
		t.Helper()
		_, _, err := p.serveReplica(&sluicev1.FetchReplicaRequest{FollowerId: id, FollowerBrokerEpoch: 1, TopicId: p.topicID,
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
		if hw := p.highWatermark(); hw != 10 {
			return fmt.Errorf("HW %d", hw)
		}
		return nil
	})
	fetchDurable(3, 11)
	require.NoError(t, <-done)
	require.EqualValues(t, 11, p.highWatermark())
}

func TestBrokerAcksAllWaitEndsWithItsLeadership(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	lead(t, p, 8)
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	done := produceAsync(t, p, time.Minute)
	// A new leadership (here: this broker again, at a new epoch, alone in
	// the ISR) takes over and its HW passes the record at once, perhaps
	// over different records: the old wait must not report success.
	cfg.minISR = 1
	p.update(context.Background(), partMeta{partition: 0, replicas: []int32{1}, leader: 1, leaderEpoch: 5, isr: []int32{1}}, cfg)
	err := <-done
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "leadership moved before acks=all completed; the records may or may not be committed")
	require.EqualValues(t, 11, p.highWatermark())
}

func TestBrokerAcksAllWaitFailsWhenTheISRShrinksBelowMin(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	lead(t, p, 8)
	p.mu.Lock()
	cfg, pm := p.cfg, p.meta
	p.mu.Unlock()
	done := produceAsync(t, p, time.Minute)
	pm.isr, pm.partitionEpoch = []int32{1}, pm.partitionEpoch+1
	p.update(context.Background(), pm, cfg)
	err := <-done
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), "the ISR shrank below min.insync.replicas before acks=all completed")
}

func TestBrokerAcksAllWaitTimesOut(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	lead(t, p, 8)
	err := <-produceAsync(t, p, 50*time.Millisecond)
	require.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "%v", err)
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.ackWaiters, "the wait was withdrawn")
	require.Empty(t, p.lead.TakeAcks())
}

func TestBrokerHWRestoredOnOpen(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	p := newFollower(t, b, false)
	require.NoError(t, p.checkpointHW())
	require.NoError(t, p.log.Close())
	b.mu.Lock()
	delete(b.parts, partKey{p.topicID, p.id})
	b.mu.Unlock()

	p2, err := b.openPartition(&topicMeta{tenantID: "t1", id: "topic-1"}, partMeta{partition: 0})
	require.NoError(t, err)
	defer p2.log.Close()
	require.EqualValues(t, 8, p2.highWatermark(), "the checkpoint, capped at the LEO")
}

func TestBrokerFailStopCancelsRun(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	b.stopRun = cancel
	b.failStop(&partition{topicID: "topic-1", id: 0}, errors.New("disk on fire"))
	<-ctx.Done()
	require.ErrorContains(t, context.Cause(ctx), "partition topic-1/0 log failed: disk on fire")
}

func TestBrokerFailsClosedUntilRevocationsLoad(t *testing.T) {
	t.Parallel()
	iss := tenants.NewIssuer(tenants.IssuerConfig{Issuer: "sluice", Audience: "sluice"})
	k, err := tenants.GenerateSigningKey(time.Now().Add(-time.Minute))
	require.NoError(t, err)
	iss.SetKeys([]tenants.SigningKey{k})
	tok, _, err := iss.Mint(time.Now(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", APIKeyID: "0123456789abcdef", Scopes: []string{tenants.ScopeConsume}})
	require.NoError(t, err)
	a := &authenticator{
		verifier:    tenants.NewVerifier(tenants.VerifierConfig{Issuer: "sluice", Audience: "sluice"}, iss.KeySource()),
		revoked:     newRevocations(),
		brokerToken: "broker-token-0123456789",
	}
	h := http.Header{"Authorization": []string{"Bearer " + tok}}
	const fetch = "/sluice.v1.RecordService/Fetch"
	_, err = a.Authenticate(context.Background(), fetch, h)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "no answer from the revocation feed yet")

	a.revoked.loaded.Store(true)
	p, err := a.Authenticate(context.Background(), fetch, h)
	require.NoError(t, err)
	require.Equal(t, "t1", p.TenantID)

	a.revoked.add("0123456789abcdef", time.Now().Add(time.Hour))
	_, err = a.Authenticate(context.Background(), fetch, h)
	require.ErrorContains(t, err, "revoked")
}

// TestBrokerRetentionNeverDeletesAboveTheHW: retention deletes expired
// segments only up to the high watermark: a segment holding records not
// yet committed stays, however old its records, since a new leader may
// still need it (its replicas could truncate otherwise-committed data).
func TestBrokerRetentionNeverDeletesAboveTheHW(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	tm := &topicMeta{tenantID: "t1", id: "topic-r", name: "old", config: topicConfig{minISR: 2, retentionMs: 1000}}
	p, err := b.openPartition(tm, partMeta{partition: 0})
	require.NoError(t, err)
	t.Cleanup(func() { p.log.Close() })
	// Three segments of records stamped in 1970: [0, 5), [5, 10), [10, 12).
	for _, r := range [][2]int{{0, 5}, {5, 5}, {10, 2}} {
		_, err = p.log.AppendFollower(batchesOf(t, int64(r[0]), r[1], 3))
		require.NoError(t, err)
		require.NoError(t, p.log.Roll())
	}
	p.mu.Lock()
	p.role, p.cfg, p.roleHW = roleNone, tm.config, 8
	p.mu.Unlock()

	n, err := p.applyRetention()
	require.NoError(t, err)
	require.Equal(t, 1, n, "only [0, 5) lies wholly below the HW")
	require.EqualValues(t, 5, p.log.LogStartOffset())

	p.mu.Lock()
	p.roleHW = 12
	p.mu.Unlock()
	n, err = p.applyRetention()
	require.NoError(t, err)
	require.Equal(t, 2, n, "once committed, the rest goes")
	require.EqualValues(t, 12, p.log.LogStartOffset())
}

// TestBrokerFindCoordinatorWhileItsBrokerIsGone: while the metadata still
// names a coordinator whose broker left the live list (its lease expired,
// no new leader elected yet), FindCoordinator answers Unavailable (retry),
// not an empty address; once that broker is back it answers its address.
func TestBrokerFindCoordinatorWhileItsBrokerIsGone(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	meta := emptyMeta()
	ot := &topicMeta{tenantID: systemTenantID, id: "offsets", name: offsetsTopic}
	for i := range int32(4) {
		ot.partitions = append(ot.partitions, partMeta{partition: i, replicas: []int32{2}, leader: 2, leaderEpoch: 1})
	}
	meta.addTopic(ot)
	b.meta.Store(meta)
	gs := &groupService{b}
	ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})
	req := connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "billing"})
	_, err := gs.FindCoordinator(ctx, req)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)

	meta.brokers[2] = brokerMeta{id: 2, address: "127.0.0.1:9002"}
	res, err := gs.FindCoordinator(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9002", res.Msg.GetAddress())
	require.EqualValues(t, 2, res.Msg.GetBrokerId())
}

// TestBrokerNamedLeaderNotTakenOverIsUnavailable: a produce to the broker
// the metadata names as leader, before its replica has taken over, is
// answered Unavailable (retry here shortly), not "not the leader: broker 1
// leads" pointing at itself (issue 12: a client following that NotLeader
// looped back to the same broker and gave up); a produce to a broker that
// does not lead still gets FailedPrecondition with the leader's address.
func TestBrokerNamedLeaderNotTakenOverIsUnavailable(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
	batch := batchesOf(t, 0, 1, 0)
	p.mu.Lock()
	p.meta.leader, p.meta.leaderEpoch = 1, 4 // this broker, still a follower
	p.mu.Unlock()
	_, err := p.produce(context.Background(), []log.ValidBatch{validBatch(t, batch)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "is named the leader at epoch 4 but is not leading")
	nl, ok := notLeaderDetail(err)
	require.True(t, ok, "the NotLeader detail says it was refused, not written")
	require.EqualValues(t, 1, nl.GetLeaderId())
	require.False(t, forwardable(http.Header{}, p.b.notLeader(p.meta)), "never forwarded to itself")

	p.mu.Lock()
	p.meta.leader = 2 // another broker leads
	p.mu.Unlock()
	_, err = p.produce(context.Background(), []log.ValidBatch{validBatch(t, batch)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.True(t, forwardable(http.Header{}, p.b.notLeader(p.meta)))
}

func notLeaderDetail(err error) (*sluicev1.NotLeader, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
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

// TestBrokerProduceRefusalWhileTheViewChanges: produces refused as
// not-leader while new views arrive read the partition's metadata under its
// lock (the race detector flagged the refusal reading it after unlocking,
// in e2e runs with a -race binary).
func TestBrokerProduceRefusalWhileTheViewChanges(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestBroker(t), false)
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
			p.update(ctx, partMeta{partition: 0, replicas: []int32{1, 2, 3}, leader: 2 + e%2, leaderEpoch: e, isr: []int32{1, 2, 3}}, cfg)
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		_, err := p.produce(context.Background(), []log.ValidBatch{validBatch(t, batch)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	}
}
