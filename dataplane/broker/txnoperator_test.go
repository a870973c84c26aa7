package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/tenants"
)

// txnLines writes transactions as "tenant id state", in order.
func txnLines(ts []*sluicev1.TransactionDescription, names map[string]string) []string {
	out := make([]string, 0, len(ts))
	for _, d := range ts {
		out = append(out, fmt.Sprintf("%s %s %v", names[d.GetTenantId()], d.GetTransactionalId(), d.GetState()))
	}
	return out
}

// TestOperatorListsEveryTenantsTransactions: on a real cluster (control
// plane and three brokers), two tenants each with an open transaction
// under the same transactional id: the operator's
// OperatorService.ListTransactions shows both (and the filters narrow
// it), each tenant's TransactionService only its own, with its tenant id;
// a tenant's token is refused by OperatorService.ListTransactions and by
// the brokers' ReplicaService.ListAllTransactions; a broker that does not
// answer makes the operator's list Unavailable, naming it.
func TestOperatorListsEveryTenantsTransactions(t *testing.T) {
	t.Parallel()
	// The lease outlasts the stop of a broker at the end, however long a
	// loaded machine takes over it: a lapsed lease would have the control
	// plane stop asking the broker (and the controller move its
	// leaderships), and the list be complete again.
	c := startTestCluster(t, testClusterOpts{controlPlane: func(cfg *controlplane.Config) { cfg.BrokerLease = time.Minute }})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	ctx := context.Background()
	hc := h2c.Client()

	// Tenant B, with a topic of its own.
	su, err := sluicev1connect.NewTenantServiceClient(hc, c.endpoint).Signup(ctx,
		connect.NewRequest(&sluicev1.SignupRequest{Email: "bravo@example.com", TenantName: "bravo"}))
	require.NoError(t, err)
	bTenant := su.Msg.GetTenant().GetId()
	tok, err := sluicev1connect.NewAuthServiceClient(hc, c.endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: su.Msg.GetApiKeySecret()}))
	require.NoError(t, err)
	bToken := tok.Msg.GetToken()
	bBearer := connect.WithInterceptors(tenants.Bearer(bToken))
	_, err = sluicev1connect.NewTopicServiceClient(hc, c.endpoint, bBearer).CreateTopic(ctx,
		connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "ledger", PartitionCount: 1, ReplicationFactor: 3}))
	require.NoError(t, err)
	c.waitTopicLed(t, bTenant, "ledger")
	names := map[string]string{c.tenantID: "A", bTenant: "B"}

	a := c.clientsOf(0)
	base := "http://" + c.brokerCfgs[1].Advertised()
	b := txnClients{records: sluicev1connect.NewRecordServiceClient(hc, base, bBearer), txns: sluicev1connect.NewTransactionServiceClient(hc, base, bBearer)}
	open := func(tc txnClients, id, topic string) {
		t.Helper()
		p, err := initProducer(t, tc, id, 0)
		require.NoError(t, err)
		require.NoError(t, addPartitions(t, tc, id, p.GetProducerId(), p.GetProducerEpoch(), topic, 0))
	}
	open(a, "job-1", "orders")
	open(a, "a-only", "orders")
	open(b, "job-1", "ledger")

	// Each tenant sees its own, with its tenant id.
	for _, x := range []struct {
		tc   txnClients
		want []string
	}{
		{a, []string{"A a-only TXN_STATE_ONGOING", "A job-1 TXN_STATE_ONGOING"}},
		{b, []string{"B job-1 TXN_STATE_ONGOING"}},
	} {
		l, err := x.tc.txns.ListTransactions(ctx, connect.NewRequest(&sluicev1.ListTransactionsRequest{}))
		require.NoError(t, err)
		require.Equal(t, x.want, txnLines(l.Msg.GetTransactions(), names))
	}
	d, err := b.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job-1"}))
	require.NoError(t, err)
	require.Equal(t, bTenant, d.Msg.GetTransaction().GetTenantId())
	require.Equal(t, "ledger", d.Msg.GetTransaction().GetTopics()[0].GetTopic())

	// The operator sees both tenants', sorted by tenant then id.
	op := sluicev1connect.NewOperatorServiceClient(hc, c.endpoint, connect.WithInterceptors(tenants.Bearer(testOperatorToken)))
	list := func(tenantID, id string) ([]*sluicev1.TransactionDescription, error) {
		res, err := op.ListTransactions(ctx, connect.NewRequest(&sluicev1.OperatorServiceListTransactionsRequest{TenantId: tenantID, TransactionalId: id}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetTransactions(), nil
	}
	all, err := list("", "")
	require.NoError(t, err)
	want := []string{"A a-only TXN_STATE_ONGOING", "A job-1 TXN_STATE_ONGOING", "B job-1 TXN_STATE_ONGOING"}
	if bTenant < c.tenantID {
		want = []string{"B job-1 TXN_STATE_ONGOING", "A a-only TXN_STATE_ONGOING", "A job-1 TXN_STATE_ONGOING"}
	}
	require.Equal(t, want, txnLines(all, names))
	for _, d := range all {
		require.Equal(t, c.txnCoordinatorIndexOf(t, d.GetTenantId(), d.GetTransactionalId())+1, int(d.GetCoordinatorId()), "%s", d.GetTransactionalId())
		topic := map[string]string{"A": "orders", "B": "ledger"}[names[d.GetTenantId()]]
		require.Equal(t, topic, d.GetTopics()[0].GetTopic(), "topic names of every tenant")
	}
	got, err := list(bTenant, "")
	require.NoError(t, err)
	require.Equal(t, []string{"B job-1 TXN_STATE_ONGOING"}, txnLines(got, names))
	got, err = list("", "job-1")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"A job-1 TXN_STATE_ONGOING", "B job-1 TXN_STATE_ONGOING"}, txnLines(got, names))
	got, err = list(c.tenantID, "a-only")
	require.NoError(t, err)
	require.Equal(t, []string{"A a-only TXN_STATE_ONGOING"}, txnLines(got, names))
	got, err = list(bTenant, "a-only")
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = list("acme", "")
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)

	// A tenant's token is refused, on the control plane and on a broker;
	// the broker credential lists every tenant's at that broker.
	for _, tok := range []string{c.token, bToken} {
		_, err := sluicev1connect.NewOperatorServiceClient(hc, c.endpoint, connect.WithInterceptors(tenants.Bearer(tok))).ListTransactions(ctx,
			connect.NewRequest(&sluicev1.OperatorServiceListTransactionsRequest{}))
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
		for _, bc := range c.brokerCfgs {
			_, err := sluicev1connect.NewReplicaServiceClient(hc, "http://"+bc.Advertised(), connect.WithInterceptors(tenants.Bearer(tok))).ListAllTransactions(ctx,
				connect.NewRequest(&sluicev1.ListAllTransactionsRequest{}))
			require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "broker %d: %v", bc.ID, err)
		}
	}
	var fromBrokers []string
	for _, bc := range c.brokerCfgs {
		res, err := sluicev1connect.NewReplicaServiceClient(hc, "http://"+bc.Advertised(), connect.WithInterceptors(tenants.Bearer(testBrokerToken))).ListAllTransactions(ctx,
			connect.NewRequest(&sluicev1.ListAllTransactionsRequest{}))
		require.NoError(t, err, "broker %d", bc.ID)
		for _, d := range res.Msg.GetTransactions() {
			require.Equal(t, bc.ID, d.GetCoordinatorId())
		}
		fromBrokers = append(fromBrokers, txnLines(res.Msg.GetTransactions(), names)...)
	}
	require.ElementsMatch(t, want, fromBrokers, "each coordinator answers its own, every tenant's")

	// A broker that does not answer (stopped; its lease has not lapsed):
	// the list would be incomplete.
	c.stopBroker(2)
	_, err = list("", "")
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, fmt.Sprintf("broker 3 (%s)", c.brokerCfgs[2].Advertised()))
}

// txnCoordinatorIndexOf is the index of the broker coordinating a
// tenant's transactional id, in broker 1's view.
func (c *lagCluster) txnCoordinatorIndexOf(t *testing.T, tenantID, id string) int {
	t.Helper()
	return c.txnCoordinatorIndexAt(t, 0, tenantID, id)
}
