package broker

import (
	"context"

	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/records"
)

// The record path (produce, fetch, list offsets, metadata, producer ids)
// is dataplane/records' Service, served over Connect by connectapi's
// Records adapter; this file wires them (the producer-id blocks are
// reserved from the control plane through connectapi.AllocateProducerIDs)
// and keeps the entry points the broker's other handlers still call.

// NoForwardHeader is connectapi.NoForwardHeader.
const NoForwardHeader = connectapi.NoForwardHeader

// newRecords builds the record service and its Connect adapter, and
// registers the service's metrics.
func (b *Broker) newRecords() {
	b.records = records.New(records.Deps{
		BrokerID:            b.cfg.ID,
		View:                b.metadata,
		Replica:             b.partition,
		Quotas:              b.quota,
		Usage:               b.usageCounters,
		UntilSuspended:      b.revoked.UntilSuspended,
		VerifyTransaction:   b.verifyTransaction,
		AllocateProducerIDs: connectapi.AllocateProducerIDs(b.cp.AllocateProducerIds, b.cfg.ID, b.brokerEpoch.Load, b.logger),
		Registerer:          b.registry,
	})
	b.recordsAPI = connectapi.NewRecords(b.records, connectapi.RecordsDeps{
		Logger:                    b.logger,
		Leader:                    b.peers.Record,
		Forwarded:                 b.metrics.forwarded.Inc,
		InitTransactionalProducer: b.txnAPI.InitProducerId,
	})
}

// newProducerID is records.Service.NewProducerID, the transaction
// coordinators' AllocateProducerID (txn.go).
func (b *Broker) newProducerID(ctx context.Context) (int64, error) {
	return b.records.NewProducerID(ctx)
}
