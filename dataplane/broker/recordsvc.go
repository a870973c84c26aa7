package broker

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/records"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// The record path (produce, fetch, list offsets, metadata, producer ids)
// is dataplane/records' Service, served over Connect by connectapi's
// Records adapter; this file wires them and keeps the entry points the
// broker's other handlers still call.

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
		AllocateProducerIDs: b.allocateProducerIDs,
		Registerer:          b.registry,
	})
	b.recordsAPI = connectapi.NewRecords(b.records, connectapi.RecordsDeps{
		Logger:                    b.logger,
		Leader:                    b.recordClient,
		Forwarded:                 b.metrics.forwarded.Inc,
		InitTransactionalProducer: b.txnAPI.InitProducerId,
	})
}

// allocateProducerIDs reserves a block of producer ids for this broker
// from the control plane (records.Deps.AllocateProducerIDs).
func (b *Broker) allocateProducerIDs(ctx context.Context) (int64, int32, error) {
	epoch := b.brokerEpoch.Load()
	if epoch == 0 {
		return 0, 0, connect.NewError(connect.CodeUnavailable, errors.New("this broker has not registered with the control plane yet; retry"))
	}
	res, err := b.cp.AllocateProducerIds(ctx, connect.NewRequest(&sluicev1.AllocateProducerIdsRequest{BrokerId: b.cfg.ID, BrokerEpoch: epoch}))
	if err != nil {
		b.logger.Warn("reserve producer ids", "err", err)
		return 0, 0, connect.NewError(connect.CodeUnavailable, fmt.Errorf("could not reserve producer ids from the control plane; retry: %w", err))
	}
	if res.Msg.GetCount() <= 0 || res.Msg.GetFirstProducerId() < 0 {
		return 0, 0, connect.NewError(connect.CodeInternal, fmt.Errorf("control plane returned an empty producer-id block"))
	}
	b.logger.Info("reserved producer ids", "first", res.Msg.GetFirstProducerId(), "count", res.Msg.GetCount())
	return res.Msg.GetFirstProducerId(), res.Msg.GetCount(), nil
}

// newProducerID is records.Service.NewProducerID, the transaction
// coordinators' AllocateProducerID (txn.go).
func (b *Broker) newProducerID(ctx context.Context) (int64, error) {
	return b.records.NewProducerID(ctx)
}
