package txns

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants/system"
)

// txnReason is err's TransactionError reason once the Connect adapter
// mapped it (0: none).
func txnReason(err error) sluicev1.TransactionError_Reason {
	var ce *connect.Error
	if !errors.As(connecterr.ToConnect(err), &ce) {
		return 0
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if te, ok := v.(*sluicev1.TransactionError); ok {
				return te.GetReason()
			}
		}
	}
	return 0
}

// TestTxnsErrorCodes: the coordinator's refusals become the kinds, and
// through the Connect adapter the codes and TransactionError reasons,
// that transaction.proto documents; anything else passes unchanged.
func TestTxnsErrorCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		kind   derr.Kind
		code   connect.Code
		reason sluicev1.TransactionError_Reason
	}{
		{fmt.Errorf("x: %w", txn.ErrProducerFenced), derr.ProducerFenced, connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED},
		{fmt.Errorf("x: %w", txn.ErrTransactionAbortable), derr.TransactionAbortable, connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_TRANSACTION_ABORTABLE},
		{fmt.Errorf("x: %w", txn.ErrInvalidProducerEpoch), derr.InvalidProducerEpoch, connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_INVALID_PRODUCER_EPOCH},
		{fmt.Errorf("x: %w", txn.ErrUnknownTransactionalID), derr.TransactionalIDNotFound, connect.CodeNotFound, sluicev1.TransactionError_REASON_UNKNOWN_TRANSACTIONAL_ID},
		{fmt.Errorf("x: %w", txn.ErrInvalidTimeout), derr.InvalidTransactionTimeout, connect.CodeInvalidArgument, sluicev1.TransactionError_REASON_INVALID_TIMEOUT},
		{fmt.Errorf("x: %w: markers: %w", txn.ErrConcurrentTransactions, errors.New("no leader")), derr.ConcurrentTransactions, connect.CodeUnavailable, sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS},
		{fmt.Errorf("x: %w", txn.ErrNotCoordinator), derr.NotCoordinator, connect.CodeUnavailable, 0},
	} {
		err := txnError(c.err)
		require.ErrorIs(t, err, c.kind, "%v", c.err)
		require.ErrorIs(t, err, c.err, "the cause stays")
		ce := connecterr.ToConnect(err)
		require.Equal(t, c.code, connect.CodeOf(ce), "%v", c.err)
		require.Equal(t, c.reason, txnReason(err), "%v", c.err)
		require.Contains(t, ce.Error(), c.err.Error())
	}
	other := errors.New("disk on fire")
	require.Same(t, other, txnError(other))
	require.NoError(t, txnError(nil))
}

// TestTxnsVerificationKeepsCoordinatorRefusals: the coordinator's own
// refusals pass to the produce unchanged, with their reason.
func TestTxnsVerificationKeepsCoordinatorRefusals(t *testing.T) {
	t.Parallel()
	fenced := txnError(txn.ErrProducerFenced)
	require.Same(t, fenced, coordinatorUnavailable(fenced))
	other := errors.New("disk on fire")
	require.Same(t, other, coordinatorUnavailable(other))
	var e *derr.Error
	require.ErrorAs(t, fenced, &e)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(fenced))
}

// TestTxnsCoordinatorUnavailableSaysTheAnswer: the coordinator's
// whereabouts become CoordinatorNotAvailable, saying the message its
// adapter would have answered (the outermost error's, a Connect error's
// without its code), with no NotLeader left to route by.
func TestTxnsCoordinatorUnavailableSaysTheAnswer(t *testing.T) {
	t.Parallel()
	nl := &partition.NotLeaderError{TopicID: "ts", Partition: 3, Leader: 2, Epoch: 4, Address: "b2"}
	for _, c := range []struct {
		name string
		err  error
		msg  string
	}{
		{"bare", nl, nl.Error()},
		{"wrapped in text", fmt.Errorf("load: %w", nl), nl.Error()},
		{"inside a refusal", derr.Wrap(derr.NotCoordinator, fmt.Errorf("write: %w", nl)), "write: " + nl.Error()},
		{"a Connect error around it", connect.NewError(connect.CodeUnavailable, fmt.Errorf("taking over; retry: %w", nl)), "taking over; retry: " + nl.Error()},
		{"relayed from a peer", connecterr.Relay(connecterr.ToConnect(nl)), nl.Error()},
	} {
		err := coordinatorUnavailable(c.err)
		require.ErrorIs(t, err, derr.CoordinatorNotAvailable, c.name)
		var got *partition.NotLeaderError
		require.False(t, errors.As(err, &got), "%s: no NotLeader left: %v", c.name, err)
		require.Equal(t, "the transaction coordinator is not available ("+c.msg+"); retry", err.Error(), c.name)
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(connecterr.ToConnect(err)), c.name)
	}
}

// TestTxnsBoundsFromLimits: a tenant's limits bound its transactions;
// where the quota exchange has not carried them yet, the largest plan's
// do. The system tenant's are not bounded.
func TestTxnsBoundsFromLimits(t *testing.T) {
	t.Parallel()
	known := map[string]limit.Values{}
	var asked []string
	s := New(Config{}, Deps{Limits: func(tenantID string) limit.Values {
		asked = append(asked, tenantID)
		return known[tenantID]
	}})
	require.Equal(t, txn.Bounds{Partitions: 3000, Groups: 100}, s.bounds("t1"), "no limits here yet: the largest plan's")
	var l limit.Values
	l[limit.MaxPartitionsPerTransaction], l[limit.MaxGroupsPerTransaction] = 1, 7
	known["t1"] = l
	require.Equal(t, txn.Bounds{Partitions: 1, Groups: 7}, s.bounds("t1"))
	l[limit.MaxGroupsPerTransaction] = 0
	known["t1"] = l
	require.Equal(t, txn.Bounds{Partitions: 1, Groups: 100}, s.bounds("t1"), "a limit not carried: the largest plan's")
	require.Equal(t, txn.Bounds{}, s.bounds(system.TenantID))
	require.Equal(t, []string{"t1", "t1", "t1"}, asked, "the system tenant's limits are not asked for")
}
