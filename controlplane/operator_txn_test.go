package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants/system"
)

// TestControlPlaneOperatorTransactions: OperatorService.ListTransactions
// needs the operator token (a tenant's is refused), checks its filters,
// answers an empty list while __transaction_state does not exist, and
// once it does, asks the brokers: one that does not answer makes it
// Unavailable, naming the broker. (The brokers' side, with two tenants'
// transactions, is dataplane/broker's TestOperatorListsEveryTenantsTransactions.)
func TestControlPlaneOperatorTransactions(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL, func(cfg *controlplane.Config) {
			cfg.TransactionStateTopicReplicationFactor = 1
			cfg.TransactionStateTopicPartitions = 2
			cfg.BrokerLease = 5 * time.Minute // the broker below never heartbeats
		})
		ctx := context.Background()
		a := c.signup(t, "ledgers")
		list := func(token string, req *sluicev1.OperatorServiceListTransactionsRequest) ([]*sluicev1.TransactionDescription, error) {
			res, err := c.operator(token).ListTransactions(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetTransactions(), nil
		}

		_, err := list(a.token, &sluicev1.OperatorServiceListTransactionsRequest{})
		requireCode(t, connect.CodeUnauthenticated, err, "invalid operator credential")
		_, err = list("wrong-operator-token-123", &sluicev1.OperatorServiceListTransactionsRequest{})
		requireCode(t, connect.CodeUnauthenticated, err)
		_, err = list(operatorToken, &sluicev1.OperatorServiceListTransactionsRequest{TenantId: "ledgers"})
		requireCode(t, connect.CodeInvalidArgument, err, "tenant_id")
		_, err = list(operatorToken, &sluicev1.OperatorServiceListTransactionsRequest{TransactionalId: string(make([]byte, 256))})
		requireCode(t, connect.CodeInvalidArgument, err, "transactional_id")

		// No brokers, so no __transaction_state: nothing to list.
		got, err := list(operatorToken, &sluicev1.OperatorServiceListTransactionsRequest{TenantId: a.tenantID})
		require.NoError(t, err)
		require.Empty(t, got)

		// A broker that registers (the topic is created on it) but does not
		// serve: the list cannot be complete.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		_, err = c.brokers(brokerToken).RegisterBroker(ctx, connect.NewRequest(&sluicev1.RegisterBrokerRequest{BrokerId: 1, Address: addr, Rack: "a"}))
		require.NoError(t, err)
		testenv.Wait(t, 30*time.Second, "the transaction-state topic created", func() error {
			_, err := c.srv.Store().GetTopic(ctx, system.TenantID, system.TransactionStateTopic)
			if errors.Is(err, store.ErrNotFound) {
				return errors.New("not yet")
			}
			return err
		})
		_, err = list(operatorToken, &sluicev1.OperatorServiceListTransactionsRequest{})
		requireCode(t, connect.CodeUnavailable, err, fmt.Sprintf("list transactions: broker 1 (%s)", addr))
	})
}
