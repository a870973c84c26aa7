package api

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Remote segment metadata (tiered storage; Kafka's KIP-405 remote log
// metadata). The store decides every write in one transaction: the caller's
// fence (broker epoch, leadership, leader epoch), the partition's next base
// offset and the segment's state. This layer validates the request, chooses
// the segment id and object key, and turns refusals into FailedPrecondition,
// with a RemoteSegmentsState detail when the base offset is the reason.

// AddRemoteSegment records a copy about to start (COPY_STARTED).
func (s *brokerService) AddRemoteSegment(ctx context.Context, req *connect.Request[sluicev1.AddRemoteSegmentRequest]) (*connect.Response[sluicev1.AddRemoteSegmentResponse], error) {
	m := req.Msg
	seg, err := validateNewRemoteSegment(m)
	if err != nil {
		return nil, err
	}
	// The object key names the topic's tenant: a broker's word for it must
	// agree (the store checks it again in the write's transaction).
	topic, err := s.store.GetTopicByID(ctx, seg.TopicID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("topic %q not found", seg.TopicID)
	}
	if err != nil {
		return nil, err
	}
	if tenantID, ok := store.CanonicalID(seg.TenantID); !ok || tenantID != topic.TenantID {
		return nil, invalid("segment.tenant_id", "%q is not the tenant of topic %s", seg.TenantID, topic.ID)
	}
	seg.TenantID, seg.TopicID = topic.TenantID, topic.ID // canonical, as stored
	id, err := uuid.NewRandom()
	if err != nil {
		return nil, fmt.Errorf("new remote segment id: %w", err)
	}
	seg.ID = id.String()
	seg.ObjectKey = remoteObjectKey(seg)
	seg.CreatedAt = s.now().UTC()
	f := store.LeaderFence{BrokerID: m.GetBrokerId(), BrokerEpoch: m.GetBrokerEpoch(), LeaderEpoch: m.GetLeaderEpoch()}
	out, err := s.store.AddRemoteSegment(ctx, f, seg)
	if err != nil {
		return nil, remoteError(f, err)
	}
	s.logger.DebugContext(ctx, "remote segment copy started", "topic_id", out.TopicID, "partition", out.Partition,
		"segment", out.ID, "base_offset", out.BaseOffset, "end_offset", out.EndOffset, "broker", f.BrokerID, "leader_epoch", f.LeaderEpoch)
	return connect.NewResponse(&sluicev1.AddRemoteSegmentResponse{Segment: toRemoteSegmentPB(out)}), nil
}

// UpdateRemoteSegment moves a segment to the next state of its life.
func (s *brokerService) UpdateRemoteSegment(ctx context.Context, req *connect.Request[sluicev1.UpdateRemoteSegmentRequest]) (*connect.Response[sluicev1.UpdateRemoteSegmentResponse], error) {
	m := req.Msg
	if err := validatePartitionRef(m.GetTopicId(), m.GetPartition()); err != nil {
		return nil, err
	}
	if m.GetSegmentId() == "" {
		return nil, invalid("segment_id", "must not be empty")
	}
	to, ok := fromRemoteStatePB(m.GetState())
	if !ok {
		return nil, invalid("state", "%v is not a remote segment state", m.GetState())
	}
	f := store.LeaderFence{BrokerID: m.GetBrokerId(), BrokerEpoch: m.GetBrokerEpoch(), LeaderEpoch: m.GetLeaderEpoch()}
	out, err := s.store.UpdateRemoteSegmentState(ctx, f, m.GetTopicId(), m.GetPartition(), m.GetSegmentId(), to, s.now().UTC())
	if err != nil {
		return nil, remoteError(f, err)
	}
	s.logger.DebugContext(ctx, "remote segment state", "topic_id", out.TopicID, "partition", out.Partition,
		"segment", out.ID, "state", out.State, "broker", f.BrokerID, "leader_epoch", f.LeaderEpoch)
	return connect.NewResponse(&sluicev1.UpdateRemoteSegmentResponse{Segment: toRemoteSegmentPB(out)}), nil
}

// ListRemoteSegments answers a partition's remote segments in base-offset
// order.
func (s *brokerService) ListRemoteSegments(ctx context.Context, req *connect.Request[sluicev1.ListRemoteSegmentsRequest]) (*connect.Response[sluicev1.ListRemoteSegmentsResponse], error) {
	m := req.Msg
	if err := validatePartitionRef(m.GetTopicId(), m.GetPartition()); err != nil {
		return nil, err
	}
	var states []store.RemoteSegmentState
	for i, st := range m.GetStates() {
		to, ok := fromRemoteStatePB(st)
		if !ok {
			return nil, invalid(fmt.Sprintf("states[%d]", i), "%v is not a remote segment state", st)
		}
		states = append(states, to)
	}
	topic, _, err := s.partition(ctx, m.GetTopicId(), m.GetPartition())
	if err != nil {
		return nil, err
	}
	all, err := s.store.ListRemoteSegments(ctx, topic.ID, m.GetPartition(), nil)
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListRemoteSegmentsResponse{NextBaseOffset: -1}
	for _, seg := range all {
		if seg.CopyFinished {
			res.NextBaseOffset = max(res.NextBaseOffset, seg.EndOffset+1)
		}
		if len(states) == 0 || slices.Contains(states, seg.State) {
			res.Segments = append(res.Segments, toRemoteSegmentPB(seg))
		}
	}
	return connect.NewResponse(res), nil
}

func validatePartitionRef(topicID string, partition int32) error {
	if topicID == "" {
		return invalid("topic_id", "must not be empty")
	}
	if partition < 0 {
		return invalid("partition", "must not be negative; got %d", partition)
	}
	return nil
}

// validateNewRemoteSegment checks the segment of an AddRemoteSegment request
// field by field (the store checks the same again) and returns it without
// the fields the server sets.
func validateNewRemoteSegment(m *sluicev1.AddRemoteSegmentRequest) (store.RemoteSegment, error) {
	p := m.GetSegment()
	if p == nil {
		return store.RemoteSegment{}, invalid("segment", "must be set")
	}
	if p.GetTenantId() == "" {
		return store.RemoteSegment{}, invalid("segment.tenant_id", "must not be empty")
	}
	if p.GetTopicId() == "" {
		return store.RemoteSegment{}, invalid("segment.topic_id", "must not be empty")
	}
	switch {
	case p.GetPartition() < 0:
		return store.RemoteSegment{}, invalid("segment.partition", "must not be negative; got %d", p.GetPartition())
	case m.GetLeaderEpoch() < 0:
		return store.RemoteSegment{}, invalid("leader_epoch", "must not be negative; got %d", m.GetLeaderEpoch())
	case p.GetLeaderEpoch() != m.GetLeaderEpoch():
		return store.RemoteSegment{}, invalid("segment.leader_epoch", "%d differs from the request's leader_epoch %d", p.GetLeaderEpoch(), m.GetLeaderEpoch())
	case p.GetBaseOffset() < 0:
		return store.RemoteSegment{}, invalid("segment.base_offset", "must not be negative; got %d", p.GetBaseOffset())
	case p.GetEndOffset() < p.GetBaseOffset():
		return store.RemoteSegment{}, invalid("segment.end_offset", "%d is below the base offset %d", p.GetEndOffset(), p.GetBaseOffset())
	case p.GetSizeBytes() <= 0:
		return store.RemoteSegment{}, invalid("segment.size_bytes", "must be positive; got %d", p.GetSizeBytes())
	case p.GetMaxTimestampMs() < -1:
		return store.RemoteSegment{}, invalid("segment.max_timestamp_ms", "must be -1 (no timestamp) or more; got %d", p.GetMaxTimestampMs())
	case len(p.GetEpochs()) == 0:
		return store.RemoteSegment{}, invalid("segment.epochs", "must list the segment's leader epochs")
	}
	epochs := make([]store.EpochStart, len(p.GetEpochs()))
	for i, e := range p.GetEpochs() {
		field := fmt.Sprintf("segment.epochs[%d]", i)
		switch {
		case e.GetEpoch() < 0:
			return store.RemoteSegment{}, invalid(field, "epoch must not be negative; got %d", e.GetEpoch())
		case e.GetEpoch() > m.GetLeaderEpoch():
			return store.RemoteSegment{}, invalid(field, "epoch %d is above the leader epoch %d", e.GetEpoch(), m.GetLeaderEpoch())
		case i == 0 && e.GetStartOffset() != p.GetBaseOffset():
			return store.RemoteSegment{}, invalid(field, "starts at %d; the first epoch must start at the base offset %d", e.GetStartOffset(), p.GetBaseOffset())
		case e.GetStartOffset() > p.GetEndOffset():
			return store.RemoteSegment{}, invalid(field, "starts at %d, after the end offset %d", e.GetStartOffset(), p.GetEndOffset())
		case i > 0 && (e.GetEpoch() <= epochs[i-1].Epoch || e.GetStartOffset() <= epochs[i-1].StartOffset):
			return store.RemoteSegment{}, invalid(field, "epochs must increase strictly in epoch and start offset")
		}
		epochs[i] = store.EpochStart{Epoch: e.GetEpoch(), StartOffset: e.GetStartOffset()}
	}
	return store.RemoteSegment{
		TenantID:       p.GetTenantId(),
		TopicID:        p.GetTopicId(),
		Partition:      p.GetPartition(),
		BaseOffset:     p.GetBaseOffset(),
		EndOffset:      p.GetEndOffset(),
		LeaderEpoch:    p.GetLeaderEpoch(),
		SizeBytes:      p.GetSizeBytes(),
		MaxTimestampMs: p.GetMaxTimestampMs(),
		Epochs:         epochs,
	}, nil
}

// remoteObjectKey is the object key prefix of a segment (the broker appends
// .log and .index): tenants/<tenant>/topics/<topic id>/<partition>/<base
// offset, 20 digits>-<leader epoch>-<segment id>. The segment id keeps two
// copies of one range apart.
func remoteObjectKey(seg store.RemoteSegment) string {
	return fmt.Sprintf("tenants/%s/topics/%s/%d/%020d-%d-%s", seg.TenantID, seg.TopicID, seg.Partition, seg.BaseOffset, seg.LeaderEpoch, seg.ID)
}

// remoteError maps the store's refusals of a remote-segment write by f to
// Connect errors: NotFound naming what is missing, FailedPrecondition for a
// fenced caller, an illegal transition or a base offset that is not the next
// one (with the RemoteSegmentsState detail).
func remoteError(f store.LeaderFence, err error) error {
	var re *store.RemoteSegmentError
	switch {
	case errors.As(err, &re):
		var msg error = re
		switch re.Reason {
		case store.RemoteStaleBrokerEpoch:
			msg = fmt.Errorf("broker %d epoch %d is stale (current %d); register again", f.BrokerID, f.BrokerEpoch, re.BrokerEpoch)
		case store.RemoteNotLeader:
			msg = fmt.Errorf("broker %d is not the leader of the partition (leader %d at leader epoch %d)", f.BrokerID, re.Leader, re.LeaderEpoch)
		case store.RemoteStaleLeaderEpoch:
			msg = fmt.Errorf("stale leader epoch %d (current %d)", f.LeaderEpoch, re.LeaderEpoch)
		}
		ce := connect.NewError(connect.CodeFailedPrecondition, msg)
		if re.Reason == store.RemoteBaseOffset {
			if d, derr := connect.NewErrorDetail(&sluicev1.RemoteSegmentsState{NextBaseOffset: re.NextBaseOffset}); derr == nil {
				ce.AddDetail(d)
			}
		}
		return ce
	case errors.Is(err, store.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	}
	return err
}

func fromRemoteStatePB(s sluicev1.RemoteSegmentState) (store.RemoteSegmentState, bool) {
	switch s {
	case sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_STARTED:
		return store.RemoteCopyStarted, true
	case sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED:
		return store.RemoteCopyFinished, true
	case sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED:
		return store.RemoteDeleteStarted, true
	case sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETED:
		return store.RemoteDeleted, true
	}
	return "", false
}

func toRemoteStatePB(s store.RemoteSegmentState) sluicev1.RemoteSegmentState {
	switch s {
	case store.RemoteCopyStarted:
		return sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_STARTED
	case store.RemoteCopyFinished:
		return sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_COPY_FINISHED
	case store.RemoteDeleteStarted:
		return sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETE_STARTED
	case store.RemoteDeleted:
		return sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_DELETED
	}
	return sluicev1.RemoteSegmentState_REMOTE_SEGMENT_STATE_UNSPECIFIED
}

func toRemoteSegmentPB(seg store.RemoteSegment) *sluicev1.RemoteSegment {
	epochs := make([]*sluicev1.EpochStart, len(seg.Epochs))
	for i, e := range seg.Epochs {
		epochs[i] = &sluicev1.EpochStart{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	return &sluicev1.RemoteSegment{
		SegmentId:      seg.ID,
		TenantId:       seg.TenantID,
		TopicId:        seg.TopicID,
		Partition:      seg.Partition,
		BaseOffset:     seg.BaseOffset,
		EndOffset:      seg.EndOffset,
		LeaderEpoch:    seg.LeaderEpoch,
		SizeBytes:      seg.SizeBytes,
		MaxTimestampMs: seg.MaxTimestampMs,
		ObjectKey:      seg.ObjectKey,
		State:          toRemoteStatePB(seg.State),
		BrokerId:       seg.BrokerID,
		CreateTime:     ts(seg.CreatedAt),
		UpdateTime:     ts(seg.UpdatedAt),
		Epochs:         epochs,
		CopyFinished:   seg.CopyFinished,
	}
}
