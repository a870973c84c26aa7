package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// producerIDs hands out producer ids from blocks this broker reserves in
// the control plane (AllocateProducerIds): ids are unique across the
// cluster and never reused, and InitProducerId costs a control-plane round
// trip only once per block.
type producerIDs struct {
	mu         sync.Mutex
	next, end  int64 // the current block is [next, end)
	allocating chan struct{}
}

// newProducerID gives the caller a new producer id: the one admission
// point of producer ids, an idempotent producer's (InitProducerId) and a
// transactional id's (its first InitProducerId, or an epoch overflow: the
// transaction coordinators' AllocateProducerID). Refused while the
// caller's tenant's producer-id bucket is in debt (producer_ids_per_hour);
// an id given is charged to it.
func (b *Broker) newProducerID(ctx context.Context) (int64, error) {
	if err := b.quota.CheckProducerID(ctx); err != nil {
		return 0, err
	}
	id, err := b.nextProducerID(ctx)
	if err != nil {
		return 0, err
	}
	b.quota.ChargeProducerID(ctx)
	b.metrics.producerIDs.Inc()
	return id, nil
}

// nextProducerID takes the next id of this broker's block, reserving a
// new block when it is used up.
func (b *Broker) nextProducerID(ctx context.Context) (int64, error) {
	pids := &b.pids
	for {
		pids.mu.Lock()
		if pids.next < pids.end {
			id := pids.next
			pids.next++
			pids.mu.Unlock()
			return id, nil
		}
		if wait := pids.allocating; wait != nil {
			pids.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		done := make(chan struct{})
		pids.allocating = done
		pids.mu.Unlock()

		first, count, err := b.allocateProducerIDs(ctx)
		pids.mu.Lock()
		if err == nil {
			pids.next, pids.end = first, first+int64(count)
		}
		pids.allocating = nil
		close(done)
		pids.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
}

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

// InitProducerId gives an idempotent producer a new producer id at epoch
// 0, or, with a transactional id, asks the id's transaction coordinator
// (initTransactionalProducer).
func (s *recordService) InitProducerId(ctx context.Context, req *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	if req.Msg.GetTransactionalId() != "" {
		return s.initTransactionalProducer(ctx, req)
	}
	if req.Msg.GetTransactionTimeoutMs() != 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("transaction_timeout_ms: only with a transactional_id"))
	}
	id, err := s.b.newProducerID(ctx)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: 0}), nil
}
