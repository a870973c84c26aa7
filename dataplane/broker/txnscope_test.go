package broker

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/txns"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants"
)

// TestBrokerTxnAddGroupsNeedConsume: groups in AddPartitionsToTransaction
// are refused, PermissionDenied, before the call looks for the
// transaction coordinator, when the token lacks the consume scope (the
// access rules themselves: access.TestBrokerTxnOffsetsNeedProduceAndConsume).
func TestBrokerTxnAddGroupsNeedConsume(t *testing.T) {
	t.Parallel()
	s := connectapi.NewTransactions(txns.New(txns.Config{}, txns.Deps{}), connectapi.TransactionsDeps{})
	pctx := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1", Scopes: []string{tenants.ScopeProduce}})
	_, err := s.AddPartitionsToTransaction(pctx, connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{TransactionalId: "tx", Groups: []string{"g"}}))
	err = toConnect(err) // as the handlers' interceptor maps it
	require.Equal(t, connect.CodePermissionDenied, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, `needs the "consume" scope`)
}
