package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// DefaultWatchInterval is how often a WatchAssignments stream polls the
// store's metadata version and broker list for changes.
const DefaultWatchInterval = 200 * time.Millisecond

// WatchAssignments streams the caller's view of the cluster: a snapshot of
// every partition first, then, when the version moved or the live brokers
// changed, a snapshot again for a broker that did not ask for deltas, or a
// delta for one that did (accept_deltas). Each stream polls the store on
// its own: two small reads (the metadata version and the broker list)
// every WatchInterval; when the version moved, a read of what changed
// since the last message (MetadataChangesSince, whose cost follows the
// changes) for a delta, or a listing of all partitions for a snapshot (the
// first message, an old broker, or a stream behind the store's horizon of
// kept deletions).
func (s *brokerService) WatchAssignments(ctx context.Context, req *connect.Request[sluicev1.WatchAssignmentsRequest], stream *connect.ServerStream[sluicev1.WatchAssignmentsResponse]) error {
	id, epoch, deltas := req.Msg.GetBrokerId(), req.Msg.GetBrokerEpoch(), req.Msg.GetAcceptDeltas()
	ticker := time.NewTicker(s.cfg.WatchInterval)
	defer ticker.Stop()
	var (
		sent        bool
		lastVersion int64
		lastLive    []*sluicev1.BrokerEndpoint
		parts       []*sluicev1.PartitionAssignment
	)
	for {
		// The version is read before the data it announces, so a change
		// committed after this read shows as a newer version next time.
		version, err := s.store.MetadataVersion(ctx)
		if err != nil {
			return err
		}
		brokers, err := s.store.ListBrokers(ctx)
		if err != nil {
			return err
		}
		if err := checkBrokerEpoch(brokers, id, epoch); err != nil {
			return err
		}
		live := liveEndpoints(brokers, s.now())
		var msg *sluicev1.WatchAssignmentsResponse
		switch {
		case sent && version == lastVersion:
			if !slices.EqualFunc(live, lastLive, sameEndpoint) {
				if deltas {
					msg = &sluicev1.WatchAssignmentsResponse{Delta: true, BaseVersion: lastVersion, MetadataVersion: lastVersion, Brokers: live}
				} else {
					msg = &sluicev1.WatchAssignmentsResponse{MetadataVersion: version, Partitions: parts, Brokers: live}
				}
			}
		case sent && deltas:
			ch, err := s.store.MetadataChangesSince(ctx, lastVersion)
			if err == nil {
				msg = &sluicev1.WatchAssignmentsResponse{
					Delta: true, BaseVersion: lastVersion, MetadataVersion: ch.Version,
					Partitions: toAssignmentsPB(ch.Partitions), Brokers: live, DeletedTopicIds: ch.DeletedTopics,
				}
				break
			}
			if !errors.Is(err, store.ErrChangesPruned) {
				return err
			}
			fallthrough // behind the kept deletions: a snapshot
		default:
			all, err := s.store.ListAllPartitions(ctx)
			if err != nil {
				return err
			}
			parts = toAssignmentsPB(all)
			msg = &sluicev1.WatchAssignmentsResponse{MetadataVersion: version, Partitions: parts, Brokers: live}
			if deltas {
				parts = nil // not kept: only snapshots for old brokers repeat it
			}
		}
		if msg != nil {
			if err := stream.Send(msg); err != nil {
				return err
			}
			sent, lastVersion, lastLive = true, msg.GetMetadataVersion(), live
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return connect.NewError(connect.CodeUnavailable, errors.New("control plane shutting down; reconnect"))
		case <-ticker.C:
		}
	}
}

func toAssignmentsPB(ps []store.PartitionWithTopic) []*sluicev1.PartitionAssignment {
	out := make([]*sluicev1.PartitionAssignment, 0, len(ps))
	for _, p := range ps {
		out = append(out, toAssignmentPB(p))
	}
	return out
}

// checkBrokerEpoch refuses an unknown broker (NotFound) and an epoch that is
// not the broker's current one (FailedPrecondition).
func checkBrokerEpoch(brokers []store.Broker, id int32, epoch int64) error {
	b, ok := findBroker(brokers, id)
	if !ok {
		return notFound("broker %d is not registered", id)
	}
	if b.Epoch != epoch {
		return failedPrecondition("broker %d epoch %d is stale (current %d); register again", id, epoch, b.Epoch)
	}
	return nil
}

func findBroker(brokers []store.Broker, id int32) (store.Broker, bool) {
	i := slices.IndexFunc(brokers, func(b store.Broker) bool { return b.ID == id })
	if i < 0 {
		return store.Broker{}, false
	}
	return brokers[i], true
}

func liveEndpoints(brokers []store.Broker, now time.Time) []*sluicev1.BrokerEndpoint {
	var out []*sluicev1.BrokerEndpoint
	for _, b := range brokers { // ordered by id
		if b.Live(now) {
			out = append(out, &sluicev1.BrokerEndpoint{BrokerId: b.ID, Address: b.Address, Rack: b.Rack, ExternalAddress: b.ExternalAddress, KafkaAddress: b.KafkaAddress})
		}
	}
	return out
}

func sameEndpoint(a, b *sluicev1.BrokerEndpoint) bool {
	return a.GetBrokerId() == b.GetBrokerId() && a.GetAddress() == b.GetAddress() && a.GetRack() == b.GetRack() && a.GetExternalAddress() == b.GetExternalAddress() && a.GetKafkaAddress() == b.GetKafkaAddress()
}

// AlterPartition changes the ISR on behalf of the partition's leader.
//
// It writes with the plain UpdatePartition, not the controller's fenced
// write, and so may be served by any control-plane replica: the
// compare-and-set on the partition epoch is enough. The leader, leader epoch
// and replicas validated below were read at that partition epoch, and every
// controller decision bumps it, so the write lands only if nothing —
// no election, no ISR change by the controller or by an earlier request —
// happened in between; otherwise the leader gets the current state back and
// retries from it. The controller epoch fences a controller acting on a stale
// view of broker liveness; a leader request carries no such view beyond the
// liveness of the brokers it adds, which is checked here.
func (s *brokerService) AlterPartition(ctx context.Context, req *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
	m := req.Msg
	r := alterReq{
		brokerID: m.GetBrokerId(), brokerEpoch: m.GetBrokerEpoch(), topicID: m.GetTopicId(), partition: m.GetPartition(),
		leaderEpoch: m.GetLeaderEpoch(), partitionEpoch: m.GetPartitionEpoch(), newISR: m.GetNewIsr(), added: m.GetAddedBrokerEpochs(),
	}
	if err := r.checkShape(); err != nil {
		return nil, err
	}
	topic, cur, err := s.partition(ctx, m.GetTopicId(), m.GetPartition())
	if err != nil {
		return nil, err
	}
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	next, changed, err := decideAlter(r, withTopic(topic, cur), brokers, s.now())
	if err != nil {
		return nil, err
	}
	if !changed {
		return connect.NewResponse(&sluicev1.AlterPartitionResponse{Partition: toAssignmentPB(withTopic(topic, cur))}), nil
	}
	switch err := s.store.UpdatePartition(ctx, next, cur.PartitionEpoch); {
	case errors.Is(err, store.ErrConflict):
		topic, fresh, rerr := s.partition(ctx, m.GetTopicId(), m.GetPartition())
		if rerr != nil {
			return nil, rerr
		}
		return nil, stalePartitionEpoch(topic, fresh, m.GetPartitionEpoch())
	case errors.Is(err, store.ErrNotFound):
		return nil, notFound("partition %d of topic %s not found", m.GetPartition(), m.GetTopicId())
	case err != nil:
		return nil, err
	}
	s.logger.InfoContext(ctx, "ISR changed by leader", "topic", topic.ID, "partition", next.Partition,
		"leader", next.Leader, "leader_epoch", next.LeaderEpoch, "isr_before", cur.ISR, "isr", next.ISR, "partition_epoch", next.PartitionEpoch)
	return connect.NewResponse(&sluicev1.AlterPartitionResponse{Partition: toAssignmentPB(withTopic(topic, next))}), nil
}

// partition reads a topic (any tenant: brokers are cluster-wide) and one of
// its partitions → NotFound.
func (s *brokerService) partition(ctx context.Context, topicID string, n int32) (store.Topic, store.Partition, error) {
	t, err := s.store.GetTopicByID(ctx, topicID)
	if errors.Is(err, store.ErrNotFound) {
		return store.Topic{}, store.Partition{}, notFound("topic %q not found", topicID)
	}
	if err != nil {
		return store.Topic{}, store.Partition{}, err
	}
	parts, err := s.store.ListPartitions(ctx, t.ID)
	if err != nil {
		return store.Topic{}, store.Partition{}, err
	}
	for _, p := range parts {
		if p.Partition == n {
			return t, p, nil
		}
	}
	return store.Topic{}, store.Partition{}, notFound("partition %d of topic %q not found", n, topicID)
}

// partitionPrecondition is FailedPrecondition with the partition's current
// state attached as a PartitionAssignment error detail.
func partitionPrecondition(t store.Topic, p store.Partition, format string, args ...any) error {
	err := connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(format, args...))
	if d, derr := connect.NewErrorDetail(toAssignmentPB(withTopic(t, p))); derr == nil {
		err.AddDetail(d)
	}
	return err
}

// stalePartitionEpoch refuses an ISR change whose partition epoch got is
// not p's: failed_precondition with the current state and a
// StalePartitionEpoch detail, by which a leader tells this refusal (the
// only one that may hide an applied proposal) from the others. The
// message is what brokers before the detail matched on.
func stalePartitionEpoch(t store.Topic, p store.Partition, got int32) error {
	err := partitionPrecondition(t, p, "stale partition epoch %d (current %d)", got, p.PartitionEpoch)
	var ce *connect.Error
	if errors.As(err, &ce) {
		if d, derr := connect.NewErrorDetail(&sluicev1.StalePartitionEpoch{PartitionEpoch: got, CurrentPartitionEpoch: p.PartitionEpoch}); derr == nil {
			ce.AddDetail(d)
		}
	}
	return err
}

func withTopic(t store.Topic, p store.Partition) store.PartitionWithTopic {
	return store.PartitionWithTopic{Partition: p, TenantID: t.TenantID, TopicName: t.Name, Config: t.Config}
}

// dedup returns the sorted distinct values of v (a copy).
func dedup(v []int32) []int32 {
	out := slices.Clone(v)
	slices.Sort(out)
	return slices.Compact(out)
}

func toAssignmentPB(p store.PartitionWithTopic) *sluicev1.PartitionAssignment {
	c := p.Config
	return &sluicev1.PartitionAssignment{
		TenantId:       p.TenantID,
		TopicId:        p.TopicID,
		TopicName:      p.TopicName,
		Partition:      p.Partition.Partition,
		Replicas:       p.Replicas,
		Leader:         p.Leader,
		LeaderEpoch:    p.LeaderEpoch,
		Isr:            p.ISR,
		PartitionEpoch: p.PartitionEpoch,
		Config:         toTopicConfigPB(c),
	}
}
