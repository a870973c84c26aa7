package api

import (
	"context"
	"errors"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// MaxAlterPartitionsItems bounds the items of one AlterPartitions call (and
// so the partitions one of its transactions writes).
const MaxAlterPartitionsItems = 1000

// alterReq is one ISR change a leader asks for: an AlterPartitionRequest or
// one item of an AlterPartitionsRequest.
type alterReq struct {
	brokerID       int32
	brokerEpoch    int64
	topicID        string
	partition      int32
	leaderEpoch    int32
	partitionEpoch int32
	newISR         []int32
	added          []*sluicev1.BrokerEpoch
}

// checkShape is what is checked of a request before anything is read
// (InvalidArgument).
func (r alterReq) checkShape() error {
	if r.topicID == "" {
		return invalid("topic_id", "must not be empty")
	}
	if r.partition < 0 {
		return invalid("partition", "must not be negative; got %d", r.partition)
	}
	isr := r.newISR
	if len(isr) == 0 {
		return invalid("new_isr", "must not be empty")
	}
	if !slices.Contains(isr, r.brokerID) {
		return invalid("new_isr", "%v does not contain the leader %d", isr, r.brokerID)
	}
	if len(dedup(isr)) != len(isr) {
		return invalid("new_isr", "%v lists a broker twice", isr)
	}
	return nil
}

// decideAlter checks r against the partition's current state cur and the
// brokers at now, and returns the state to write (changed) or, when r asks
// for the ISR cur already has (as a set), cur itself (not changed).
//
// The partition epoch is checked first: a proposal whose outcome the
// leader does not know (a lost response) may have been applied, and only
// "stale partition epoch" may say so. Every other refusal below is decided
// against the current partition epoch, so it means "not applied", which the
// leader may treat as definitive.
func decideAlter(r alterReq, cur store.PartitionWithTopic, brokers []store.Broker, now time.Time) (next store.Partition, changed bool, err error) {
	topic := store.Topic{ID: cur.TopicID, TenantID: cur.TenantID, Name: cur.TopicName, Config: cur.Config}
	p := cur.Partition
	if p.PartitionEpoch != r.partitionEpoch {
		return store.Partition{}, false, stalePartitionEpoch(topic, p, r.partitionEpoch)
	}
	if err := checkBrokerEpoch(brokers, r.brokerID, r.brokerEpoch); err != nil {
		return store.Partition{}, false, err
	}
	caller, _ := findBroker(brokers, r.brokerID)
	if !caller.Live(now) {
		// Its lease expired: the controller may be moving leadership away;
		// shrinking the ISR to itself now could leave only a dead member.
		return store.Partition{}, false, failedPrecondition("broker %d's lease has expired; heartbeat before changing the ISR", caller.ID)
	}
	switch {
	case p.Leader != r.brokerID:
		return store.Partition{}, false, partitionPrecondition(topic, p, "broker %d is not the leader of partition %d (leader %d)", r.brokerID, p.Partition, p.Leader)
	case p.LeaderEpoch != r.leaderEpoch:
		return store.Partition{}, false, partitionPrecondition(topic, p, "stale leader epoch %d (current %d)", r.leaderEpoch, p.LeaderEpoch)
	}
	added := map[int32]int64{}
	for _, be := range r.added {
		added[be.GetBrokerId()] = be.GetBrokerEpoch()
	}
	for _, b := range r.newISR {
		if !slices.Contains(p.Replicas, b) {
			return store.Partition{}, false, invalid("new_isr", "broker %d is not a replica of partition %d (replicas %v)", b, p.Partition, p.Replicas)
		}
		if slices.Contains(p.ISR, b) {
			continue
		}
		nb, ok := findBroker(brokers, b)
		if !ok || !nb.Live(now) {
			return store.Partition{}, false, partitionPrecondition(topic, p, "broker %d is not live; it cannot join the ISR", b)
		}
		// KIP-903: the leader saw this broker catch up under one broker
		// epoch; if it registered again since, that incarnation may have
		// lost its log.
		if e, ok := added[b]; !ok {
			return store.Partition{}, false, invalid("added_broker_epochs", "broker %d joins the ISR without the broker epoch its catch-up was seen under", b)
		} else if e != nb.Epoch {
			return store.Partition{}, false, partitionPrecondition(topic, p, "broker %d caught up under broker epoch %d but is now at %d (it restarted); it cannot join the ISR", b, e, nb.Epoch)
		}
	}
	// Stored in replica order, so equal sets read back equal.
	next = p
	next.ISR = nil
	for _, rep := range p.Replicas {
		if slices.Contains(r.newISR, rep) {
			next.ISR = append(next.ISR, rep)
		}
	}
	if slices.Equal(dedup(p.ISR), dedup(next.ISR)) {
		return p, false, nil
	}
	next.PartitionEpoch = p.PartitionEpoch + 1
	return next, true, nil
}

// AlterPartitions changes the ISR of many partitions on behalf of their
// leader: each item is decided as AlterPartition decides its request
// (decideAlter), and the accepted changes are written in one transaction
// (store.UpdatePartitions), a compare-and-set per partition. Like
// AlterPartition it uses the plain, unfenced write.
func (s *brokerService) AlterPartitions(ctx context.Context, req *connect.Request[sluicev1.AlterPartitionsRequest]) (*connect.Response[sluicev1.AlterPartitionsResponse], error) {
	m := req.Msg
	items := m.GetItems()
	if len(items) > MaxAlterPartitionsItems {
		return nil, invalid("items", "at most %d per call; got %d", MaxAlterPartitionsItems, len(items))
	}
	results := make([]*sluicev1.AlterPartitionsResult, len(items))
	refuse := func(i int, err error) {
		results[i] = &sluicev1.AlterPartitionsResult{Outcome: &sluicev1.AlterPartitionsResult_Error{Error: s.itemError(ctx, err)}}
	}
	accept := func(i int, p store.PartitionWithTopic) {
		results[i] = &sluicev1.AlterPartitionsResult{Outcome: &sluicev1.AlterPartitionsResult_Partition{Partition: toAssignmentPB(p)}}
	}
	reqs := make([]alterReq, len(items))
	var topics []string
	for i, it := range items {
		reqs[i] = alterReq{
			brokerID: m.GetBrokerId(), brokerEpoch: m.GetBrokerEpoch(), topicID: it.GetTopicId(), partition: it.GetPartition(),
			leaderEpoch: it.GetLeaderEpoch(), partitionEpoch: it.GetPartitionEpoch(), newISR: it.GetNewIsr(), added: it.GetAddedBrokerEpochs(),
		}
		if err := reqs[i].checkShape(); err != nil {
			refuse(i, err)
			continue
		}
		topics = append(topics, it.GetTopicId())
	}
	if len(topics) == 0 {
		return connect.NewResponse(&sluicev1.AlterPartitionsResponse{Results: results}), nil
	}
	cur, err := s.readPartitions(ctx, topics)
	if err != nil {
		return nil, err
	}
	brokers, err := s.store.ListBrokers(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var (
		updates []store.PartitionUpdate
		written []int // item of each update
	)
	for i, r := range reqs {
		if results[i] != nil {
			continue
		}
		c, err := cur.find(r.topicID, r.partition)
		if err != nil {
			refuse(i, err)
			continue
		}
		next, changed, err := decideAlter(r, c, brokers, now)
		switch {
		case err != nil:
			refuse(i, err)
		case !changed:
			accept(i, c)
		default:
			updates = append(updates, store.PartitionUpdate{Partition: next, ExpectedEpoch: c.PartitionEpoch})
			written = append(written, i)
		}
	}
	if len(updates) == 0 {
		return connect.NewResponse(&sluicev1.AlterPartitionsResponse{Results: results}), nil
	}
	outcomes, err := s.store.UpdatePartitions(ctx, updates)
	if err != nil {
		return nil, err // nothing written
	}
	var lost []string
	for j, i := range written {
		if errors.Is(outcomes[j], store.ErrConflict) {
			lost = append(lost, reqs[i].topicID)
		}
	}
	var fresh partitionsRead
	if len(lost) > 0 {
		fresh, err = s.readPartitions(ctx, lost)
	}
	for j, i := range written {
		r, next := reqs[i], updates[j].Partition
		c, _ := cur.find(r.topicID, r.partition)
		switch oerr := outcomes[j]; {
		case errors.Is(oerr, store.ErrConflict):
			if err != nil {
				refuse(i, err) // not applied; the leader resends it
				continue
			}
			f, ferr := fresh.find(r.topicID, r.partition)
			if ferr != nil {
				refuse(i, ferr)
				continue
			}
			topic := store.Topic{ID: f.TopicID, TenantID: f.TenantID, Name: f.TopicName, Config: f.Config}
			refuse(i, stalePartitionEpoch(topic, f.Partition, r.partitionEpoch))
		case errors.Is(oerr, store.ErrNotFound):
			refuse(i, notFound("partition %d of topic %s not found", r.partition, r.topicID))
		case oerr != nil:
			refuse(i, oerr)
		default:
			s.logger.InfoContext(ctx, "ISR changed by leader", "topic", next.TopicID, "partition", next.Partition,
				"leader", next.Leader, "leader_epoch", next.LeaderEpoch, "isr_before", c.ISR, "isr", next.ISR, "partition_epoch", next.PartitionEpoch)
			c.Partition = next
			accept(i, c)
		}
	}
	return connect.NewResponse(&sluicev1.AlterPartitionsResponse{Results: results}), nil
}

// itemError is err as AlterPartition's caller would have received it.
func (s *brokerService) itemError(ctx context.Context, err error) *sluicev1.AlterPartitionsError {
	var ce *connect.Error
	if !errors.As(toConnectError(ctx, s.logger, sluicev1connect.BrokerServiceAlterPartitionsProcedure, err), &ce) {
		return &sluicev1.AlterPartitionsError{Code: connect.CodeUnknown.String(), Message: err.Error()}
	}
	out := &sluicev1.AlterPartitionsError{Code: ce.Code().String(), Message: ce.Message()}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			switch v := v.(type) {
			case *sluicev1.PartitionAssignment:
				out.Current = v
			case *sluicev1.StalePartitionEpoch:
				out.StalePartitionEpoch = v
			}
		}
	}
	return out
}

// partitionsRead is the partitions of some topics, read for AlterPartitions,
// by canonical topic id.
type partitionsRead map[string][]store.PartitionWithTopic

// find returns partition n of topic topicID → NotFound, as
// brokerService.partition says it.
func (r partitionsRead) find(topicID string, n int32) (store.PartitionWithTopic, error) {
	id, _ := store.CanonicalID(topicID)
	parts, ok := r[id]
	if !ok {
		return store.PartitionWithTopic{}, notFound("topic %q not found", topicID)
	}
	for _, p := range parts {
		if p.Partition.Partition == n {
			return p, nil
		}
	}
	return store.PartitionWithTopic{}, notFound("partition %d of topic %q not found", n, topicID)
}

// readPartitions reads the partitions of the given topics (any tenant;
// unknown ones are absent) in one read (store.ListTopicsPartitions).
func (s *brokerService) readPartitions(ctx context.Context, topicIDs []string) (partitionsRead, error) {
	parts, err := s.store.ListTopicsPartitions(ctx, topicIDs)
	if err != nil {
		return nil, err
	}
	out := partitionsRead{}
	for _, p := range parts {
		out[p.TopicID] = append(out[p.TopicID], p)
	}
	return out, nil
}
