package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tenants"
)

// groupService implements sluicev1connect.GroupServiceHandler.
type groupService struct{ b *Broker }

// maxGroupName bounds group ids (Kafka has none; 255 is plenty).
const maxGroupName = 255

func validGroup(group string) error {
	if group == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("group: must not be empty"))
	}
	if len(group) > maxGroupName {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("group: at most %d bytes; got %d", maxGroupName, len(group)))
	}
	for i, r := range group {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("group: character %q at byte %d is not printable", r, i))
		}
	}
	return nil
}

// tenantOf is the caller's tenant.
func tenantOf(ctx context.Context) (string, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return "", errors.New("no tenant principal in context")
	}
	return p.TenantID, nil
}

// groupCall resolves the group's coordinator: here (c), or an error to
// answer; forward says the caller should forward to pm's leader instead.
func (s *groupService) groupCall(ctx context.Context, h interface{ Get(string) string }, group string) (c *groupCoordinator, tenantID string, pm cluster.Partition, forward bool, err error) {
	if tenantID, err = tenantOf(ctx); err != nil {
		return nil, "", pm, false, err
	}
	if err = validGroup(group); err != nil {
		return nil, tenantID, pm, false, err
	}
	c, pm, err = s.b.coordinatorFor(ctx, tenantID, group)
	var nl *partition.NotLeaderError
	if errors.As(err, &nl) && nl.Leader >= 0 && h.Get(NoForwardHeader) != "1" {
		return nil, tenantID, pm, true, nil
	}
	return c, tenantID, pm, false, toConnect(err)
}

func (s *groupService) FindCoordinator(ctx context.Context, req *connect.Request[sluicev1.FindCoordinatorRequest]) (*connect.Response[sluicev1.FindCoordinatorResponse], error) {
	tenantID, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := validGroup(req.Msg.GetGroup()); err != nil {
		return nil, err
	}
	meta := s.b.metadata()
	t, ok := meta.Topic(systemTenantID, offsetsTopic)
	if !ok || len(t.Partitions) == 0 {
		return nil, errNoOffsetsTopic
	}
	pm := t.Partitions[coordinator.PartitionOf(tenantID, req.Msg.GetGroup(), len(t.Partitions))]
	if pm.Leader < 0 {
		return nil, toConnect(s.b.notLeader(pm))
	}
	addr := meta.Brokers[pm.Leader].Address
	if addr == "" {
		// The leader's lease expired and no new leader is elected yet.
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("group coordinator: broker %d, leader of the group's offsets partition, is not reachable; retry", pm.Leader))
	}
	return connect.NewResponse(&sluicev1.FindCoordinatorResponse{BrokerId: pm.Leader, Address: addr}), nil
}

func (s *groupService) CommitOffsets(ctx context.Context, req *connect.Request[sluicev1.CommitOffsetsRequest]) (*connect.Response[sluicev1.CommitOffsetsResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.CommitOffsets)
	}
	if err != nil {
		return nil, err
	}
	commits, err := s.checkCommit(ctx, req.Header(), c, tenantID, m.GetGroup(), m.GetMemberId(), m.GetInstanceId(), m.GetMemberEpoch(), m.GetOffsets())
	if err != nil {
		return nil, err
	}
	if err := c.CommitOffsets(ctx, time.Now(), tenantID, m.GetGroup(), commits); err != nil {
		return nil, offsetsError(err)
	}
	return connect.NewResponse(&sluicev1.CommitOffsetsResponse{}), nil
}

// checkCommit checks a commit of offsets (CommitOffsets, TxnCommitOffsets):
// the request's bounds, the committer (CheckCommitter), each offset
// against its partition's high watermark; it returns the commits to write.
func (s *groupService) checkCommit(ctx context.Context, h http.Header, c *groupCoordinator, tenantID, groupID, memberID, instanceID string, memberEpoch int32, offsets []*sluicev1.PartitionOffset) ([]coordinator.OffsetCommit, error) {
	if len(offsets) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("offsets: must not be empty"))
	}
	if len(offsets) > 10000 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("offsets: at most 10000 per request; got %d", len(offsets)))
	}
	if len(instanceID) > maxGroupName {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("instance_id: at most %d bytes", maxGroupName))
	}
	if err := c.CheckCommitter(tenantID, groupID, memberID, instanceID, memberEpoch, offsets); err != nil {
		return nil, groupError(err)
	}
	meta := s.b.metadata()
	commits := make([]coordinator.OffsetCommit, 0, len(offsets))
	seen := map[cluster.PartKey]bool{}
	for i, po := range offsets {
		field := fmt.Sprintf("offsets[%d]", i)
		t, ok := meta.Topic(tenantID, po.GetTopic())
		if !ok {
			e := unknownTopic(meta, po.GetTopic())
			return nil, connect.NewError(e.Code(), fmt.Errorf("%s: %s", field, e.Message()))
		}
		if po.GetPartition() < 0 || int(po.GetPartition()) >= len(t.Partitions) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: topic %q has partitions 0..%d; got %d", field, po.GetTopic(), len(t.Partitions)-1, po.GetPartition()))
		}
		if po.GetOffset() < 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: offset must not be negative; got %d", field, po.GetOffset()))
		}
		if len(po.GetMetadata()) > 4096 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: metadata is at most 4096 bytes; got %d", field, len(po.GetMetadata())))
		}
		tk := cluster.PartKey{TopicID: t.ID, Partition: po.GetPartition()}
		if seen[tk] {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s: topic %q partition %d appears twice", field, po.GetTopic(), po.GetPartition()))
		}
		seen[tk] = true
		bounds, err := s.b.listOffsets(ctx, clientCredentials(h), t, t.Partitions[po.GetPartition()], sluicev1.OffsetSpec_OFFSET_SPEC_LATEST, 0)
		if err != nil {
			return nil, err
		}
		if hw := bounds.GetHighWatermark(); po.GetOffset() > hw {
			return nil, connect.NewError(connect.CodeOutOfRange, fmt.Errorf("%s: offset %d is beyond the end of topic %q partition %d (high watermark %d)", field, po.GetOffset(), po.GetTopic(), po.GetPartition(), hw))
		}
		commits = append(commits, coordinator.OffsetCommit{TopicID: t.ID, Offset: &sluicev1.PartitionOffset{
			Topic: t.Name, Partition: po.GetPartition(), Offset: po.GetOffset(), LeaderEpoch: po.GetLeaderEpoch(), Metadata: po.GetMetadata(),
		}})
	}
	return commits, nil
}

func (s *groupService) FetchOffsets(ctx context.Context, req *connect.Request[sluicev1.FetchOffsetsRequest]) (*connect.Response[sluicev1.FetchOffsetsResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.FetchOffsets)
	}
	if err != nil {
		return nil, err
	}
	meta := s.b.metadata()
	res := &sluicev1.FetchOffsetsResponse{}
	if len(m.GetPartitions()) == 0 {
		committed, err := c.StableOffsets(tenantID, m.GetGroup(), nil)
		if err != nil {
			return nil, offsetsError(err)
		}
		for k, co := range committed {
			t, ok := meta.ByID[k.TopicID]
			if !ok || t.TenantID != tenantID {
				continue // the topic was deleted since
			}
			o := proto.Clone(co.Offset).(*sluicev1.PartitionOffset)
			o.Topic = t.Name
			res.Offsets = append(res.Offsets, o)
		}
		slices.SortFunc(res.Offsets, func(a, b *sluicev1.PartitionOffset) int {
			if c := strings.Compare(a.GetTopic(), b.GetTopic()); c != 0 {
				return c
			}
			return int(a.GetPartition() - b.GetPartition())
		})
		return connect.NewResponse(res), nil
	}
	var keys []coordinator.TopicPartition
	for _, tp := range m.GetPartitions() {
		t, ok := meta.Topic(tenantID, tp.GetTopic())
		if !ok {
			return nil, unknownTopic(meta, tp.GetTopic())
		}
		for _, p := range tp.GetPartitions() {
			if p < 0 || int(p) >= len(t.Partitions) {
				return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("topic %q has partitions 0..%d; got %d", t.Name, len(t.Partitions)-1, p))
			}
			res.Offsets = append(res.Offsets, &sluicev1.PartitionOffset{Topic: t.Name, Partition: p, Offset: -1, LeaderEpoch: -1})
			keys = append(keys, coordinator.TopicPartition{TopicID: t.ID, Partition: p})
		}
	}
	committed, err := c.StableOffsets(tenantID, m.GetGroup(), keys)
	if err != nil {
		return nil, offsetsError(err)
	}
	for i, k := range keys {
		if co, ok := committed[k]; ok {
			o := res.Offsets[i]
			o.Offset, o.LeaderEpoch, o.Metadata = co.Offset.GetOffset(), co.Offset.GetLeaderEpoch(), co.Offset.GetMetadata()
		}
	}
	return connect.NewResponse(res), nil
}

func (s *groupService) GroupHeartbeat(ctx context.Context, req *connect.Request[sluicev1.GroupHeartbeatRequest]) (*connect.Response[sluicev1.GroupHeartbeatResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.GroupHeartbeat)
	}
	if err != nil {
		return nil, err
	}
	if m.GetRebalanceTimeoutMs() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("rebalance_timeout_ms: must not be negative; got %d", m.GetRebalanceTimeoutMs()))
	}
	if len(m.GetInstanceId()) > maxGroupName {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("instance_id: at most %d bytes", maxGroupName))
	}
	hr := group.HeartbeatRequest{
		MemberID: m.GetMemberId(), InstanceID: m.GetInstanceId(), MemberEpoch: m.GetMemberEpoch(),
		RebalanceTimeout: time.Duration(m.GetRebalanceTimeoutMs()) * time.Millisecond,
	}
	if m.GetSubscriptionSet() {
		hr.Subscriptions = append([]string{}, m.GetSubscribedTopics()...)
	}
	if m.GetOwnedSet() {
		hr.Owned = fromTopicPartitions(m.GetOwned())
	}
	res, err := c.Heartbeat(ctx, time.Now(), tenantID, m.GetGroup(), m.GetAssignor(), groupTopics(s.b.metadata(), tenantID), hr)
	if err != nil {
		return nil, groupError(err)
	}
	return connect.NewResponse(&sluicev1.GroupHeartbeatResponse{
		MemberId: res.MemberID, MemberEpoch: res.MemberEpoch,
		HeartbeatIntervalMs: res.HeartbeatInterval.Milliseconds(),
		Assignment:          toTopicPartitions(res.Assignment),
	}), nil
}

func (s *groupService) LeaveGroup(ctx context.Context, req *connect.Request[sluicev1.LeaveGroupRequest]) (*connect.Response[sluicev1.LeaveGroupResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.LeaveGroup)
	}
	if err != nil {
		return nil, err
	}
	if m.GetMemberId() == "" && m.GetInstanceId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("member_id or instance_id: one must be set"))
	}
	if err := c.Leave(time.Now(), tenantID, m.GetGroup(), m.GetMemberId(), m.GetInstanceId()); err != nil {
		return nil, groupError(err)
	}
	return connect.NewResponse(&sluicev1.LeaveGroupResponse{}), nil
}

func fromTopicPartitions(tps []*sluicev1.TopicPartitions) group.TopicPartitions {
	out := group.TopicPartitions{}
	for _, tp := range tps {
		out[tp.GetTopic()] = append(out[tp.GetTopic()], tp.GetPartitions()...)
	}
	for t, ps := range out {
		slices.Sort(ps)
		out[t] = slices.Compact(ps)
	}
	return out
}

func toTopicPartitions(a group.TopicPartitions) []*sluicev1.TopicPartitions {
	out := make([]*sluicev1.TopicPartitions, 0, len(a))
	for t, ps := range a {
		out = append(out, &sluicev1.TopicPartitions{Topic: t, Partitions: slices.Clone(ps)})
	}
	slices.SortFunc(out, func(a, b *sluicev1.TopicPartitions) int { return strings.Compare(a.GetTopic(), b.GetTopic()) })
	return out
}
