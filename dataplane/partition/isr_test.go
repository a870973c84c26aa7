package partition

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// laggingLeaders opens n replicas (partitions 0..n-1 of topic-1) leading
// at leader epoch 4 over ISR {1,2,3} whose followers never fetch, with a
// lag time short enough that each proposes shrinking the ISR to {1} at once.
func laggingLeaders(t *testing.T, h *Host, n int) []*Replica {
	t.Helper()
	h.ReplicaLagTimeMax = time.Millisecond
	out := make([]*Replica, n)
	for i := range n {
		cfg := TopicConfig{MinISR: 1}
		p, err := Open(h, Spec{TenantID: "t1", TopicID: "topic-1", Partition: int32(i), Dir: t.TempDir(), Config: cfg})
		require.NoError(t, err)
		t.Cleanup(func() { p.log.Close() })
		_, err = p.log.AppendFollower(batchesOf(t, 0, 10, 3))
		require.NoError(t, err)
		p.mu.Lock()
		p.cfg = cfg
		p.mu.Unlock()
		lead(t, p, 8)
		out[i] = p
	}
	// Taking a proposal makes it pending: the round takes it again.
	for _, p := range out {
		testenv.Wait(t, 10*time.Second, "a shrink proposal", func() error {
			if _, ok := p.TakeISRProposal(); !ok {
				return errors.New("none yet")
			}
			return nil
		})
	}
	return out
}

// TestPartitionAlterISRsOneCallPerRound: a round of AlterISRs sends every
// leader's proposal in one AlterPartitions call and applies each item's
// answer as MaybeAlterISR applies AlterPartition's: a failed call leaves
// every proposal pending (resent unchanged next round); per item, an
// acceptance applies, a stale partition epoch carrying the applied state
// applies it, a definitive refusal drops the proposal, a newer leader epoch
// resigns, an unknown outcome keeps it pending.
func TestPartitionAlterISRsOneCallPerRound(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	h.AlterPartition = alterVia(func(context.Context, *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
		t.Error("AlterPartition called; AlterPartitions expected")
		return nil, errors.New("unexpected")
	})
	var (
		mu     sync.Mutex
		calls  []*sluicev1.AlterPartitionsRequest
		answer func(*sluicev1.AlterPartitionsRequest) (*sluicev1.AlterPartitionsResponse, error)
	)
	h.AlterPartitions = alterManyVia(func(_ context.Context, req *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, proto.CloneOf(req.Msg))
		res, err := answer(req.Msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(res), nil
	})
	reps := laggingLeaders(t, h, 5)
	shrunk := func(it *sluicev1.AlterPartitionsItem, leaderEpoch int32) *sluicev1.PartitionAssignment {
		return &sluicev1.PartitionAssignment{TopicId: it.GetTopicId(), Partition: it.GetPartition(), Replicas: []int32{1, 2, 3},
			Leader: 1, LeaderEpoch: leaderEpoch, Isr: []int32{1}, PartitionEpoch: it.GetPartitionEpoch() + 1}
	}

	// Round 1: the call fails; every outcome is unknown.
	answer = func(*sluicev1.AlterPartitionsRequest) (*sluicev1.AlterPartitionsResponse, error) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("control plane down"))
	}
	AlterISRs(t.Context(), h, reps)
	require.Len(t, calls, 1)
	first := calls[0]
	require.Len(t, first.GetItems(), 5)
	for i, it := range first.GetItems() {
		require.EqualValues(t, i, it.GetPartition())
		require.Equal(t, []int32{1}, it.GetNewIsr())
		require.EqualValues(t, 4, it.GetLeaderEpoch())
	}
	for _, p := range reps {
		require.Equal(t, 3, p.Status().ISR)
	}

	// Round 2: the same proposals again, in one call, each answered its own way.
	answer = func(req *sluicev1.AlterPartitionsRequest) (*sluicev1.AlterPartitionsResponse, error) {
		its := req.GetItems()
		refuse := func(code connect.Code, msg string, cur *sluicev1.PartitionAssignment) *sluicev1.AlterPartitionsResult {
			return &sluicev1.AlterPartitionsResult{Outcome: &sluicev1.AlterPartitionsResult_Error{Error: &sluicev1.AlterPartitionsError{Code: code.String(), Message: msg, Current: cur}}}
		}
		// The controller says a stale partition epoch by type, not by the message.
		stale := func(r *sluicev1.AlterPartitionsResult) *sluicev1.AlterPartitionsResult {
			r.GetError().StalePartitionEpoch = &sluicev1.StalePartitionEpoch{PartitionEpoch: 0, CurrentPartitionEpoch: 1}
			return r
		}
		return &sluicev1.AlterPartitionsResponse{Results: []*sluicev1.AlterPartitionsResult{
			{Outcome: &sluicev1.AlterPartitionsResult_Partition{Partition: shrunk(its[0], 4)}},
			stale(refuse(connect.CodeFailedPrecondition, "stale partition epoch 0 (current 1)", shrunk(its[1], 4))),
			refuse(connect.CodeFailedPrecondition, "broker 1's lease has expired; heartbeat before changing the ISR", nil),
			refuse(connect.CodeFailedPrecondition, "stale leader epoch 4 (current 5)", shrunk(its[3], 5)),
			refuse(connect.CodeUnavailable, "store unreachable", nil),
		}}, nil
	}
	AlterISRs(t.Context(), h, reps)
	require.Len(t, calls, 2)
	require.True(t, proto.Equal(first, calls[1]), "pending proposals resent unchanged:\n%v\n%v", first, calls[1])
	require.Equal(t, 1, reps[0].Status().ISR, "accepted")
	require.Equal(t, 1, reps[1].Status().ISR, "stale partition epoch with the applied state")
	require.Equal(t, 3, reps[2].Status().ISR, "refused")
	reps[3].mu.Lock()
	require.True(t, reps[3].lead.Resigned(), "deposed")
	reps[3].mu.Unlock()
	require.Equal(t, 3, reps[4].Status().ISR, "unknown")
	require.EqualValues(t, 1, testutil.ToFloat64(h.Metrics.ISRShrinks), "only the accepted change counts")
	reps[4].mu.Lock()
	_, pending := reps[4].lead.Pending()
	reps[4].mu.Unlock()
	require.True(t, pending)

	// Round 3: partition 4's pending proposal is resent as it was; the
	// refused 2 proposes afresh; 0, 1 and 3 have nothing to say.
	answer = func(req *sluicev1.AlterPartitionsRequest) (*sluicev1.AlterPartitionsResponse, error) {
		var res sluicev1.AlterPartitionsResponse
		for _, it := range req.GetItems() {
			res.Results = append(res.Results, &sluicev1.AlterPartitionsResult{Outcome: &sluicev1.AlterPartitionsResult_Partition{Partition: shrunk(it, 4)}})
		}
		return &res, nil
	}
	AlterISRs(t.Context(), h, reps)
	require.Len(t, calls, 3)
	items := calls[2].GetItems()
	require.Len(t, items, 2)
	require.EqualValues(t, 2, items[0].GetPartition())
	require.True(t, proto.Equal(first.GetItems()[4], items[1]))
	for _, i := range []int{0, 1, 2, 4} {
		require.Equal(t, 1, reps[i].Status().ISR, "partition %d", i)
	}

	// Round 4: nothing to propose, no call.
	AlterISRs(t.Context(), h, reps)
	require.Len(t, calls, 3)
}

// TestPartitionAlterISRsFallsBackToAlterPartition: against a control plane
// without AlterPartitions, each proposal goes alone through AlterPartition.
func TestPartitionAlterISRsFallsBackToAlterPartition(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	var batched, single int
	h.AlterPartitions = alterManyVia(func(context.Context, *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error) {
		batched++
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("old control plane"))
	})
	h.AlterPartition = alterVia(func(_ context.Context, req *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
		single++
		m := req.Msg
		return connect.NewResponse(&sluicev1.AlterPartitionResponse{Partition: &sluicev1.PartitionAssignment{
			TopicId: m.GetTopicId(), Partition: m.GetPartition(), Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4,
			Isr: m.GetNewIsr(), PartitionEpoch: m.GetPartitionEpoch() + 1,
		}}), nil
	})
	reps := laggingLeaders(t, h, 3)
	AlterISRs(t.Context(), h, reps)
	require.Equal(t, 1, batched)
	require.Equal(t, 3, single)
	for _, p := range reps {
		require.Equal(t, 1, p.Status().ISR)
	}
}

// TestPartitionAcksAllAcceptedOnTheControllersAnswer: a leader refusing
// acks=all below min ISR accepts it again as soon as the controller's
// answer to its own ISR expansion arrives (AlterISRs applies it to the
// leader state machine), without waiting for the assignment stream to
// bring the new ISR (Update is never called here). Issue 29 asked whether
// a leader answers NotEnoughReplicas from an ISR older than a change it
// made itself: it does not.
func TestPartitionAcksAllAcceptedOnTheControllersAnswer(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	var asked []*sluicev1.AlterPartitionsItem
	h.AlterPartitions = alterManyVia(func(_ context.Context, req *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error) {
		var res sluicev1.AlterPartitionsResponse
		for _, it := range req.Msg.GetItems() {
			asked = append(asked, it)
			res.Results = append(res.Results, &sluicev1.AlterPartitionsResult{Outcome: &sluicev1.AlterPartitionsResult_Partition{Partition: &sluicev1.PartitionAssignment{
				TopicId: it.GetTopicId(), Partition: it.GetPartition(), Replicas: []int32{1, 2, 3}, Leader: 1,
				LeaderEpoch: it.GetLeaderEpoch(), Isr: it.GetNewIsr(), PartitionEpoch: it.GetPartitionEpoch() + 1,
			}}})
		}
		return connect.NewResponse(&res), nil
	})
	p := newFollower(t, h, false) // min ISR 2; records [0, 10) of epoch 3
	p.mu.Lock()
	p.meta = Assignment{Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 4, ISR: []int32{1}, PartitionEpoch: 7}
	p.endRoleLocked()
	p.roleHW = 8
	l, err := p.newLeaderLocked(p.meta, p.cfg, time.Now())
	require.NoError(t, err)
	p.startLeadingLocked(context.Background(), l)
	p.mu.Unlock()

	produce := func() error {
		_, err := p.Produce(context.Background(), []log.ValidBatch{validBatch(t, batchesOf(t, 0, 1, 0))}, sluicev1.Acks_ACKS_ALL, time.Minute, nil)
		return err
	}
	err = produce()
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err), "%v", err)
	require.ErrorContains(t, err, "not enough replicas: 1 in sync")

	// The followers catch up; the ISR round proposes both and the
	// controller accepts.
	followerFetch(t, p, 2, 10, 3)
	followerFetch(t, p, 3, 10, 3)
	AlterISRs(t.Context(), h, []*Replica{p})
	require.Len(t, asked, 1)
	require.Equal(t, []int32{1, 2, 3}, asked[0].GetNewIsr())
	require.Equal(t, 3, p.Status().ISR)

	// Accepted at once: the produce waits for the followers, not refused.
	done := produceAsync(t, p, time.Minute)
	followerFetch(t, p, 2, 11, 4)
	followerFetch(t, p, 3, 11, 4)
	require.NoError(t, <-done)
}
