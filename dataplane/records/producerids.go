package records

import (
	"context"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
)

// producerIDs hands out producer ids from blocks this broker reserves in
// the control plane (Deps.AllocateProducerIDs): ids are unique across the
// cluster and never reused, and InitProducerID costs a control-plane
// round trip only once per block.
type producerIDs struct {
	mu         sync.Mutex
	next, end  int64 // the current block is [next, end)
	allocating chan struct{}
}

// InitProducerIDRequest asks for an idempotent producer's id. A
// transactional producer's (with a transactional id) is the transaction
// coordinator's to give.
type InitProducerIDRequest struct {
	// TransactionTimeout must be 0: only a transactional producer has
	// one.
	TransactionTimeout time.Duration
}

// InitProducerID gives an idempotent producer a new producer id at epoch
// 0 (NewProducerID).
func (s *Service) InitProducerID(ctx context.Context, req InitProducerIDRequest) (producerID int64, epoch int16, err error) {
	if req.TransactionTimeout != 0 {
		return 0, 0, derr.New(derr.InvalidRequest, "transaction_timeout_ms: only with a transactional_id")
	}
	id, err := s.NewProducerID(ctx)
	if err != nil {
		return 0, 0, err
	}
	return id, 0, nil
}

// NewProducerID gives the caller a new producer id: the one admission
// point of producer ids, an idempotent producer's (InitProducerID) and a
// transactional id's (its first InitProducerId, or an epoch overflow: the
// transaction coordinators' AllocateProducerID). Refused while the
// caller's tenant's producer-id bucket is in debt (producer_ids_per_hour,
// Quotas.CheckProducerID); an id given is charged to it.
func (s *Service) NewProducerID(ctx context.Context) (int64, error) {
	if err := s.d.Quotas.CheckProducerID(ctx); err != nil {
		return 0, err
	}
	id, err := s.nextProducerID(ctx)
	if err != nil {
		return 0, err
	}
	s.d.Quotas.ChargeProducerID(ctx)
	s.metrics.producerIDs.Inc()
	return id, nil
}

// nextProducerID takes the next id of this broker's block, reserving a
// new block when it is used up. One caller reserves at a time; the others
// wait for its block (or their contexts).
func (s *Service) nextProducerID(ctx context.Context) (int64, error) {
	pids := &s.pids
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

		first, count, err := s.d.AllocateProducerIDs(ctx)
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
