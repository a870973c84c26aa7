package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// TestBrokerTransactionBounds (issue 29 item 4): a transaction holds at
// most its tenant's max_groups_per_transaction groups and
// max_partitions_per_transaction partitions. 20,000 groups in one
// AddPartitionsToTransaction (about 2 MiB; accepted before, and its
// EndTransaction then took 9 to 16 s) are refused resource_exhausted
// with a QuotaFailure naming the limit and no retry delay, and nothing of
// the request is added; the transaction takes groups up to the limit
// (the pro plan's 100) and then no more, also not through the
// verification of a TxnCommitOffsets, and commits. With the partitions
// bound overridden to 1, a second partition is refused, also through the
// verification of a transactional produce.
func TestBrokerTransactionBounds(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	tc := c.clientsOf(0)
	ctx := context.Background()
	p, err := initProducer(t, tc, "job", 0)
	require.NoError(t, err)
	pid, epoch := p.GetProducerId(), p.GetProducerEpoch()
	addGroups := func(from, n int) error {
		groups := make([]string, n)
		for i := range groups {
			groups[i] = fmt.Sprintf("group-%05d", from+i)
		}
		_, err := retry(t, "AddPartitionsToTransaction", func() (*connect.Response[sluicev1.AddPartitionsToTransactionResponse], error) {
			return tc.txns.AddPartitionsToTransaction(ctx, connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{
				TransactionalId: "job", ProducerId: pid, ProducerEpoch: epoch, Groups: groups}))
		})
		return err
	}
	requireRefused := func(err error, limit, msg string) {
		t.Helper()
		ri, v := quotaDetails(t, err)
		require.Nil(t, ri, "no retry delay")
		require.Equal(t, limit, v.GetDescription())
		require.Equal(t, "tenant:"+c.tenantID, v.GetSubject())
		require.ErrorContains(t, err, msg)
	}
	groupsIn := func() int {
		d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job"}))
		require.NoError(t, err)
		return len(d.Msg.GetTransaction().GetGroups())
	}

	err = addGroups(0, 20000)
	requireRefused(err, "max_groups_per_transaction", `would hold 20000 groups, over its max_groups_per_transaction limit of 100`)
	require.NoError(t, addGroups(0, 60))
	err = addGroups(60, 41)
	requireRefused(err, "max_groups_per_transaction", "would hold 101 groups")
	require.Equal(t, 60, groupsIn(), "nothing of the refused request added")
	require.NoError(t, addGroups(30, 70), "up to the limit; groups in it already do not count twice")
	require.Equal(t, 100, groupsIn())
	// A TxnCommitOffsets verifies its group into the transaction: refused
	// past the limit too.
	_, err = c.groups.TxnCommitOffsets(ctx, connect.NewRequest(&sluicev1.TxnCommitOffsetsRequest{
		Group: "one-more", TransactionalId: "job", ProducerId: pid, ProducerEpoch: epoch,
		Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 0}},
	}))
	requireRefused(err, "max_groups_per_transaction", "would hold 101 groups")
	start := time.Now()
	end, err := endTxn(t, tc, "job", pid, epoch, true)
	require.NoError(t, err)
	t.Logf("EndTransaction of a transaction of %d groups: %s", 100, time.Since(start).Round(time.Millisecond))

	// Partitions: overridden to one per transaction.
	operator := sluicev1connect.NewOperatorServiceClient(h2c.Client(), c.endpoint, connect.WithInterceptors(tenants.Bearer(testOperatorToken)))
	_, err = operator.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: c.tenantID,
		Overrides: &sluicev1.LimitOverrides{MaxPartitionsPerTransaction: ptrTo[int32](1)}}))
	require.NoError(t, err)
	coord := c.brokers[c.txnCoordinatorIndex(t, 0, "job")]
	testenv.Wait(t, 30*time.Second, "the coordinator's allotment carrying the override", func() error {
		if got := coord.quota.Allotment(c.tenantID).GetLimits().GetMaxPartitionsPerTransaction(); got != 1 {
			return fmt.Errorf("max_partitions_per_transaction %d", got)
		}
		return nil
	})
	epoch = end.GetProducerEpoch()
	produce := func(partition int32) error {
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, FirstTimestamp: time.Now().UnixMilli(),
			ProducerID: pid, ProducerEpoch: int16(epoch)}, []record.Record{{Value: []byte("v")}})
		require.NoError(t, err)
		_, err = retry(t, "Produce", func() (*connect.Response[sluicev1.ProduceResponse], error) {
			return tc.records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders", Partition: partition, Acks: sluicev1.Acks_ACKS_ALL,
				TransactionalId: "job", Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b}}}))
		})
		return err
	}
	err = addPartitions(t, tc, "job", pid, epoch, "orders", 0, 1)
	requireRefused(err, "max_partitions_per_transaction", "would hold 2 partitions, over its max_partitions_per_transaction limit of 1")
	require.NoError(t, produce(0))
	err = produce(1)
	requireRefused(err, "max_partitions_per_transaction", "would hold 2 partitions")
	_, err = endTxn(t, tc, "job", pid, epoch, true)
	require.NoError(t, err, "the transaction commits what it holds")
}
