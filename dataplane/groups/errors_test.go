package groups

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TestGroupErrorCodes: the coordinator's and the group state machine's
// refusals become the Connect codes and GroupError reasons clients branch
// on (through the adapter's one mapping, connecterr); anything else
// passes unchanged.
func TestGroupErrorCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		kind   derr.Kind
		code   connect.Code
		reason sluicev1.GroupError_Reason
	}{
		{fmt.Errorf("x: %w", group.ErrUnknownMember), derr.UnknownMemberID, connect.CodeNotFound, sluicev1.GroupError_REASON_UNKNOWN_MEMBER},
		{fmt.Errorf("x: %w", group.ErrFencedMemberEpoch), derr.FencedMemberEpoch, connect.CodeFailedPrecondition, sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH},
		{fmt.Errorf("x: %w", group.ErrFencedInstanceID), derr.FencedInstanceID, connect.CodeFailedPrecondition, sluicev1.GroupError_REASON_FENCED_INSTANCE_ID},
		{fmt.Errorf("x: %w", group.ErrNotOwned), derr.FailedPrecondition, connect.CodeFailedPrecondition, sluicev1.GroupError_REASON_NOT_OWNED},
		{fmt.Errorf("group %q %w: stop them first", "g", coordinator.ErrGroupActive), derr.NonEmptyGroup, connect.CodeFailedPrecondition, sluicev1.GroupError_REASON_GROUP_ACTIVE},
		{fmt.Errorf("x: %w", group.ErrInvalid), derr.InvalidRequest, connect.CodeInvalidArgument, 0},
	} {
		err := groupError(c.err)
		require.ErrorIs(t, err, c.kind, "%v", c.err)
		ce := connecterr.ToConnect(err)
		require.Equal(t, c.code, connect.CodeOf(ce), "%v", c.err)
		require.Equal(t, c.reason, groupReason(t, ce), "%v", c.err)
		require.Contains(t, ce.Error(), c.err.Error())
	}
	require.Equal(t, `failed_precondition: group "g" has members: stop them first`,
		connecterr.ToConnect(groupError(fmt.Errorf("group %q %w: stop them first", "g", coordinator.ErrGroupActive))).Error())
	require.Equal(t, `failed_precondition: group "g" has members: stop them first`,
		connecterr.ToConnect(groupActive("g", "stop them first")).Error())
	other := errors.New("disk on fire")
	require.Same(t, other, groupError(other))
	require.NoError(t, groupError(nil))
}

// groupReason is err's GroupError reason (0: none).
func groupReason(t *testing.T, err error) sluicev1.GroupError_Reason {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ge, ok := v.(*sluicev1.GroupError); ok {
				return ge.GetReason()
			}
		}
	}
	return 0
}

// TestOffsetsErrorCodes: the group coordinator's refusals of offsets in
// transactions become the codes clients branch on: pending offsets
// Unavailable (retry), a fenced producer FailedPrecondition with
// TransactionError PRODUCER_FENCED, a fenced transaction coordinator
// FailedPrecondition; the group's own refusals keep their GroupError.
func TestOffsetsErrorCodes(t *testing.T) {
	t.Parallel()
	unstable := fmt.Errorf("group %q topic %q partition 0 %w (producer 7); retry once it commits or aborts", "g", "orders", coordinator.ErrUnstableOffset)
	err := connecterr.ToConnect(offsetsError(unstable))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err))
	require.Equal(t, `unavailable: group "g" topic "orders" partition 0 has offsets pending in an open transaction (producer 7); retry once it commits or aborts`, err.Error())

	err = connecterr.ToConnect(offsetsError(fmt.Errorf("%w: producer 7 epoch 0", coordinator.ErrProducerFenced)))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(t, err))
	err = connecterr.ToConnect(offsetsError(fmt.Errorf("%w: marker", coordinator.ErrCoordinatorFenced)))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err))
	require.Zero(t, txnReason(t, err))

	err = connecterr.ToConnect(offsetsError(fmt.Errorf("x: %w", group.ErrNotOwned)))
	require.Equal(t, sluicev1.GroupError_REASON_NOT_OWNED, groupReason(t, err))
}

// txnReason is err's TransactionError reason (0: none).
func txnReason(t *testing.T, err error) sluicev1.TransactionError_Reason {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if te, ok := v.(*sluicev1.TransactionError); ok {
				return te.GetReason()
			}
		}
	}
	return 0
}
