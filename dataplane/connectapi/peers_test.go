package connectapi

import (
	"context"
	"errors"
	"fmt"
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
