package api

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
)

// growAttempts bounds how often CreatePartitions places again after a
// concurrent growth of the same topic changed its count under it.
const growAttempts = 5

// CreatePartitions raises a topic's partition count (Kafka's
// CreatePartitions: the request names the new total). The new partitions
// are placed like a new topic's (place: rack-aware over the live brokers,
// balancing the load they already hold, the topic's own partitions
// included), start led by their preferred leader with every replica in the
// ISR, and reach the brokers through their assignment streams, like a new
// topic's. The existing partitions are untouched.
//
// The placement is computed outside the store's transaction, against the
// count read first; the store adds the partitions only if the topic still
// has that count (else ErrConflict: a concurrent growth went first, and the
// request is decided again against the new count), checking the tenant's
// partition limit in the same transaction, serialised with every creation
// and growth of the tenant's topics.
func (s *topicService) CreatePartitions(ctx context.Context, req *connect.Request[sluicev1.CreatePartitionsRequest]) (*connect.Response[sluicev1.CreatePartitionsResponse], error) {
	m := req.Msg
	name := m.GetName()
	tenant, limits, err := s.topicTenant(ctx, name)
	if err != nil {
		return nil, err
	}
	n := m.GetPartitionCount()
	if err := validPartitionCount(n, " (the new total, not the number to add)"); err != nil {
		return nil, err
	}
	countLimits := store.CountLimits{MaxPartitions: limits[limit.MaxPartitions]}
	for attempt := 1; ; attempt++ {
		t, err := s.getTopic(ctx, tenant.ID, name)
		if err != nil {
			return nil, err
		}
		if n <= t.Partitions {
			return nil, invalid("partition_count", "topic %q has %d partitions; partitions can be added but never removed, so the new count must be more than %d; got %d",
				name, t.Partitions, t.Partitions, n)
		}
		add := n - t.Partitions
		// A cheap check before placement, on the tenant's real usage (the
		// create path's, with no topic limit: growth adds no topic); the
		// store checks again atomically.
		if err := s.checkCountLimits(ctx, tenant.ID, tenant.Plan, countLimits, add); err != nil {
			return nil, err
		}
		now := s.now().UTC()
		assignment, err := s.place(ctx, now, add, t.ReplicationFactor)
		if err != nil {
			return nil, err
		}
		grown, err := s.store.AddPartitions(ctx, tenant.ID, t.ID, t.Partitions, newPartitions(t.ID, t.Partitions, assignment), countLimits, now)
		var le *store.LimitError
		switch {
		case errors.Is(err, store.ErrConflict) && attempt < growAttempts:
			continue // grown concurrently: decide again against the new count
		case errors.Is(err, store.ErrConflict):
			return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("topic %q is being grown concurrently; retry", name))
		case errors.As(err, &le):
			return nil, limitExceeded(tenant.ID, tenant.Plan, le)
		case errors.Is(err, store.ErrNotFound):
			return nil, notFound("topic %q not found", name)
		case err != nil:
			return nil, err
		}
		parts, err := s.store.ListPartitions(ctx, grown.ID)
		if err != nil {
			return nil, err
		}
		// As of this growth, should another one have followed already.
		parts = slices.DeleteFunc(parts, func(p store.Partition) bool { return p.Partition >= grown.Partitions })
		s.logger.InfoContext(ctx, "partitions added", "tenant", tenant.ID, "topic", name, "id", t.ID,
			"from", t.Partitions, "to", grown.Partitions, "rf", t.ReplicationFactor)
		return connect.NewResponse(&sluicev1.CreatePartitionsResponse{Topic: toTopicPB(grown), Partitions: toPartitionsPB(parts)}), nil
	}
}
