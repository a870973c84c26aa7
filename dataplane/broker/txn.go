package broker

import (
	"context"
	"net/http"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/dataplane/txns"
	"github.com/sluicemq/sluice/limit"
)

// Transactions (issue 16, docs/design/transactions.md) are served by
// dataplane/txns (b.txns: the coordinators of the transaction-state
// partitions this broker leads, hosted by the runtime as coordinator.go
// says, their verification and marker writes) through its Connect adapter
// (b.txnAPI: the TransactionService, InitProducerId's transactional half,
// ReplicaService.WriteTxnMarkers and ListAllTransactions). This file wires
// them, and keeps the broker's old names for the callers in the files
// other slices move (the produce path's and the group path's
// verification, the hosting loop, the quota exchange).

// newTxns builds the transaction service and its adapter (New).
func (b *Broker) newTxns() {
	b.txns = txns.New(txns.Config{
		BrokerID:                  b.cfg.ID,
		MaxTransactionTimeout:     b.cfg.MaxTransactionTimeout,
		TransactionalIDExpiration: b.cfg.TransactionalIDExpiration,
	}, txns.Deps{
		Logger: b.logger, Registerer: b.registry,
		View: b.metadata, Replica: b.partition,
		Hosted: func() []*txn.Coordinator { return hostedOf[*txnCoordinator](b) },
		Host: func(ctx context.Context, t *cluster.Topic, pm cluster.Partition, mk func(runtime.Partition, int32) *txn.Coordinator) (*txn.Coordinator, error) {
			return hostAt(ctx, b, t, pm, func(p offsetsPartition, epoch int32) *txnCoordinator { return mk(p, epoch) })
		},
		AllocateProducerID: b.newProducerID, // late-bound: b.records is built after the transactions
		Admission:          b.quota,
		Limits:             b.txnLimits,
		Peers:              connectapi.TxnPeers{Txn: b.peers.Txn, Replica: b.peers.Replica},
		GroupMarker:        b.writeGroupMarker,
	})
	b.txnAPI = connectapi.NewTransactions(b.txns, connectapi.TransactionsDeps{
		Logger:     b.logger,
		Peer:       b.peers.Txn,
		RecordPeer: b.peers.Record,
		Forwarded:  b.metrics.forwarded.Inc,
		BrokerID:   b.cfg.ID,
		View:       b.metadata,
	})
}

// writeGroupMarker writes a transaction marker to the group's coordinator
// on this broker (txns.Deps.GroupMarker).
func (b *Broker) writeGroupMarker(ctx context.Context, m txn.Marker) error {
	c, _, err := b.coordinatorFor(ctx, m.Tenant, m.Group)
	if err != nil {
		return err
	}
	return c.WriteTxnMarker(ctx, m.Tenant, m.Group, m.ProducerID, m.ProducerEpoch, m.CoordinatorEpoch, m.Commit, m.KeptEpoch)
}

// verifyTransaction is txns.Service.VerifyPartition for the produce path:
// h carries the producing client's credential.
func (b *Broker) verifyTransaction(ctx context.Context, h http.Header, v records.Verification) error {
	return b.txns.VerifyPartition(ctx, txns.Verification{TenantID: v.TenantID, TransactionalID: v.TransactionalID, ProducerID: v.ProducerID, ProducerEpoch: v.Epoch,
		Authorization: h.Get("Authorization"), VerifyOnly: v.VerifyOnly}, v.TopicID, v.Partition)
}

// txnLimits are a tenant's limits as the last quota exchange carried them
// (txns.Deps.Limits): zero when this broker has no allotment for the
// tenant, for which it asks an exchange at once.
func (b *Broker) txnLimits(tenantID string) limit.Values {
	b.quota.NoticeTenant(tenantID)
	return b.quota.Limits(tenantID)
}
