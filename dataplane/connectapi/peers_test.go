package connectapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TestHostCallsTranslateConnectErrors: the calls replicas make through
// partition.Host get the controller's answers as domain errors: a stale
// partition epoch by its typed detail, the current state beside a
// refusal, the whole call's failure as its generic kind.
func TestHostCallsTranslateConnectErrors(t *testing.T) {
	cur := &sluicev1.PartitionAssignment{TopicId: "t", PartitionEpoch: 3}
	refusal := func(stale bool) *connect.Error {
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("stale partition epoch 2 (current 3)"))
		details := []proto.Message{cur}
		if stale {
			details = append(details, &sluicev1.StalePartitionEpoch{PartitionEpoch: 2, CurrentPartitionEpoch: 3})
		}
		for _, m := range details {
			d, err := connect.NewErrorDetail(m)
			require.NoError(t, err)
			ce.AddDetail(d)
		}
		return ce
	}
	var answer error
	alter := AlterPartition(func(context.Context, *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
		if answer != nil {
			return nil, answer
		}
		return connect.NewResponse(&sluicev1.AlterPartitionResponse{Partition: cur}), nil
	})
	got, err := alter(t.Context(), &sluicev1.AlterPartitionRequest{})
	require.NoError(t, err)
	require.True(t, proto.Equal(cur, got))

	answer = refusal(true)
	got, err = alter(t.Context(), &sluicev1.AlterPartitionRequest{})
	require.ErrorIs(t, err, derr.InvalidUpdateVersion)
	require.True(t, proto.Equal(cur, got), "the current state beside the refusal")
	answer = refusal(false)
	_, err = alter(t.Context(), &sluicev1.AlterPartitionRequest{})
	require.ErrorIs(t, err, derr.FailedPrecondition, "the message alone says nothing")
	require.NotErrorIs(t, err, derr.InvalidUpdateVersion)
	answer = connect.NewError(connect.CodeUnavailable, errors.New("down"))
	got, err = alter(t.Context(), &sluicev1.AlterPartitionRequest{})
	require.ErrorIs(t, err, derr.Unavailable)
	require.Nil(t, got)

	var many error
	alterMany := AlterPartitions(func(context.Context, *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error) {
		if many != nil {
			return nil, many
		}
		return connect.NewResponse(&sluicev1.AlterPartitionsResponse{Results: []*sluicev1.AlterPartitionsResult{
			{Outcome: &sluicev1.AlterPartitionsResult_Partition{Partition: cur}},
			{Outcome: &sluicev1.AlterPartitionsResult_Error{Error: &sluicev1.AlterPartitionsError{Code: "failed_precondition", Message: "stale partition epoch 2 (current 3)",
				Current: cur, StalePartitionEpoch: &sluicev1.StalePartitionEpoch{PartitionEpoch: 2, CurrentPartitionEpoch: 3}}}},
			{Outcome: &sluicev1.AlterPartitionsResult_Error{Error: &sluicev1.AlterPartitionsError{Code: "invalid_argument", Message: "new_isr: must not be empty"}}},
		}}), nil
	})
	rs, err := alterMany(t.Context(), &sluicev1.AlterPartitionsRequest{})
	require.NoError(t, err)
	require.Len(t, rs, 3)
	require.NoError(t, rs[0].Err)
	require.True(t, proto.Equal(cur, rs[0].Partition))
	require.ErrorIs(t, rs[1].Err, derr.InvalidUpdateVersion)
	require.True(t, proto.Equal(cur, rs[1].Partition))
	require.ErrorIs(t, rs[2].Err, derr.InvalidRequest)
	require.Nil(t, rs[2].Partition)
	many = connect.NewError(connect.CodeUnimplemented, errors.New("old control plane"))
	_, err = alterMany(t.Context(), &sluicev1.AlterPartitionsRequest{})
	require.ErrorIs(t, err, derr.UnsupportedVersion)
}

// TestFetchErrorAnswer: a follower's session answer says a partition's
// failure with the Connect code and message a client would read; an
// error that maps to none is Internal.
func TestFetchErrorAnswer(t *testing.T) {
	nl := &partition.NotLeaderError{TopicID: "t", Leader: 2, Epoch: 4, Address: "b2"}
	code, msg := FetchErrorAnswer(nl)
	require.Equal(t, uint32(connect.CodeFailedPrecondition), code)
	require.Equal(t, "failed_precondition: "+nl.Error(), msg)
	code, msg = FetchErrorAnswer(fmt.Errorf("replication state: %w", errors.New("boom")))
	require.Equal(t, uint32(connect.CodeInternal), code)
	require.Equal(t, "replication state: boom", msg)
	require.Equal(t, "unavailable", CodeName(derr.New(derr.StorageUnavailable, "disk")))
	require.Equal(t, "unknown", CodeName(errors.New("plain")))
}

// TestAllocateProducerIDs: a producer-id block is reserved at the
// broker's current epoch; the refusals are domain errors, mapped once at
// the door: Unavailable before the broker registered and when the control
// plane reserves nothing (a stale epoch), Internal for an empty block.
func TestAllocateProducerIDs(t *testing.T) {
	t.Parallel()
	var epoch int64
	var got *sluicev1.AllocateProducerIdsRequest
	var answer *sluicev1.AllocateProducerIdsResponse
	var refusal error
	allocate := AllocateProducerIDs(func(_ context.Context, req *connect.Request[sluicev1.AllocateProducerIdsRequest]) (*connect.Response[sluicev1.AllocateProducerIdsResponse], error) {
		got = req.Msg
		if refusal != nil {
			return nil, refusal
		}
		return connect.NewResponse(answer), nil
	}, 3, func() int64 { return epoch }, slog.New(slog.DiscardHandler))

	_, _, err := allocate(t.Context())
	require.ErrorIs(t, err, derr.Unavailable)
	require.Equal(t, connect.CodeUnavailable, AsConnect(err).Code())
	require.ErrorContains(t, err, "has not registered with the control plane yet")
	require.Nil(t, got, "not asked")

	epoch = 7
	answer = &sluicev1.AllocateProducerIdsResponse{FirstProducerId: 5000, Count: 1000}
	first, count, err := allocate(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 5000, first)
	require.EqualValues(t, 1000, count)
	require.True(t, proto.Equal(&sluicev1.AllocateProducerIdsRequest{BrokerId: 3, BrokerEpoch: 7}, got))

	refusal = connect.NewError(connect.CodeFailedPrecondition, errors.New("broker 3 epoch 7 is stale; register again"))
	_, _, err = allocate(t.Context())
	require.ErrorIs(t, err, derr.Unavailable)
	require.Equal(t, connect.CodeUnavailable, AsConnect(err).Code(), "retriable, as the control plane's refusal is not the client's")
	require.ErrorContains(t, err, "could not reserve producer ids from the control plane; retry: failed_precondition: broker 3 epoch 7 is stale")

	refusal = nil
	answer = &sluicev1.AllocateProducerIdsResponse{FirstProducerId: 5000}
	_, _, err = allocate(t.Context())
	require.ErrorIs(t, err, derr.Internal)
	require.Equal(t, connect.CodeInternal, AsConnect(err).Code())
}
