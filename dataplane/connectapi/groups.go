package connectapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/groups"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/tenants"
)

// Groups is the GroupService's Connect handler over groups.Service. A
// call for a group another broker coordinates (groups.NotCoordinatorError)
// is forwarded once to that broker, unless the caller routes itself
// (NoForwardHeader).
type Groups struct {
	svc *groups.Service
	// peer is the GroupService of another broker; forwarded, when set,
	// counts a forwarded answer.
	peer      func(broker int32) sluicev1connect.GroupServiceClient
	forwarded func()
}

var _ sluicev1connect.GroupServiceHandler = (*Groups)(nil)

// NewGroups returns the GroupService handler over svc; peer gives the
// GroupService client of another broker, forwarded (when set) counts the
// calls forwarded to one.
func NewGroups(svc *groups.Service, peer func(broker int32) sluicev1connect.GroupServiceClient, forwarded func()) *Groups {
	return &Groups{svc: svc, peer: peer, forwarded: forwarded}
}

// callerTenant is the caller's tenant, as authentication put it in ctx.
func callerTenant(ctx context.Context) (string, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return "", errors.New("no tenant principal in context")
	}
	return p.TenantID, nil
}

// clientCredentials forward the credentials of the client request h.
func clientCredentials(h http.Header) groups.Credentials {
	return groups.Credentials{Authorization: h.Get("Authorization")}
}

// coordinatorElsewhere returns the broker to forward a refused call to:
// err is the service's NotCoordinatorError naming another broker, and the
// caller (headers h) did not ask to route itself.
func coordinatorElsewhere(h http.Header, err error) (int32, bool) {
	var nc *groups.NotCoordinatorError
	if !errors.As(err, &nc) || !Forwardable(h, nc.Leader) {
		return 0, false
	}
	return nc.Leader.Leader, true
}

// answer is the handler's answer: res, the call forwarded to the group's
// coordinator (with call, the method of the GroupService client), or err.
func answer[Req, Res any](ctx context.Context, g *Groups, req *connect.Request[Req], err error, call func(sluicev1connect.GroupServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error), res func() *Res) (*connect.Response[Res], error) {
	if leader, ok := coordinatorElsewhere(req.Header(), err); ok {
		client := g.peer(leader)
		return Forward(ctx, leader, req, func(ctx context.Context, r *connect.Request[Req]) (*connect.Response[Res], error) {
			return call(client, ctx, r)
		}, g.forwarded)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res()), nil
}

func (g *Groups) FindCoordinator(ctx context.Context, req *connect.Request[sluicev1.FindCoordinatorRequest]) (*connect.Response[sluicev1.FindCoordinatorResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	c, err := g.svc.FindCoordinator(tenantID, req.Msg.GetGroup())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.FindCoordinatorResponse{BrokerId: c.BrokerID, Address: endpoint.For(ctx, c.Address, c.ExternalAddress)}), nil
}

// commitRequest decodes the fields CommitOffsets and TxnCommitOffsets
// share.
func commitRequest(tenantID string, h http.Header, groupID, memberID, instanceID string, memberEpoch int32, offsets []*sluicev1.PartitionOffset) groups.CommitRequest {
	r := groups.CommitRequest{TenantID: tenantID, Group: groupID, MemberID: memberID, InstanceID: instanceID, MemberEpoch: memberEpoch, Credentials: clientCredentials(h)}
	r.Offsets = make([]groups.PartitionOffset, len(offsets))
	for i, po := range offsets {
		r.Offsets[i] = groups.PartitionOffset{Topic: po.GetTopic(), Partition: po.GetPartition(), Offset: po.GetOffset(), LeaderEpoch: po.GetLeaderEpoch(), Metadata: po.GetMetadata()}
	}
	return r
}

func (g *Groups) CommitOffsets(ctx context.Context, req *connect.Request[sluicev1.CommitOffsetsRequest]) (*connect.Response[sluicev1.CommitOffsetsResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	err = g.svc.CommitOffsets(ctx, commitRequest(tenantID, req.Header(), m.GetGroup(), m.GetMemberId(), m.GetInstanceId(), m.GetMemberEpoch(), m.GetOffsets()))
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.CommitOffsets, func() *sluicev1.CommitOffsetsResponse { return &sluicev1.CommitOffsetsResponse{} })
}

func (g *Groups) TxnCommitOffsets(ctx context.Context, req *connect.Request[sluicev1.TxnCommitOffsetsRequest]) (*connect.Response[sluicev1.TxnCommitOffsetsResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	err = g.svc.TxnCommitOffsets(ctx, groups.TxnCommitRequest{
		CommitRequest:   commitRequest(tenantID, req.Header(), m.GetGroup(), m.GetMemberId(), m.GetInstanceId(), m.GetMemberEpoch(), m.GetOffsets()),
		TransactionalID: m.GetTransactionalId(), ProducerID: m.GetProducerId(), ProducerEpoch: m.GetProducerEpoch(),
	})
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.TxnCommitOffsets, func() *sluicev1.TxnCommitOffsetsResponse { return &sluicev1.TxnCommitOffsetsResponse{} })
}

func (g *Groups) FetchOffsets(ctx context.Context, req *connect.Request[sluicev1.FetchOffsetsRequest]) (*connect.Response[sluicev1.FetchOffsetsResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	r := groups.FetchOffsetsRequest{TenantID: tenantID, Group: m.GetGroup()}
	for _, tp := range m.GetPartitions() {
		r.Partitions = append(r.Partitions, groups.TopicPartitions{Topic: tp.GetTopic(), Partitions: tp.GetPartitions()})
	}
	offsets, err := g.svc.FetchOffsets(ctx, r)
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.FetchOffsets, func() *sluicev1.FetchOffsetsResponse {
		res := &sluicev1.FetchOffsetsResponse{Offsets: make([]*sluicev1.PartitionOffset, len(offsets))}
		for i, o := range offsets {
			res.Offsets[i] = &sluicev1.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
		}
		return res
	})
}

func (g *Groups) GroupHeartbeat(ctx context.Context, req *connect.Request[sluicev1.GroupHeartbeatRequest]) (*connect.Response[sluicev1.GroupHeartbeatResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
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
	res, err := g.svc.Heartbeat(ctx, groups.HeartbeatRequest{TenantID: tenantID, Group: m.GetGroup(), Assignor: m.GetAssignor(), Member: hr})
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.GroupHeartbeat, func() *sluicev1.GroupHeartbeatResponse {
		return &sluicev1.GroupHeartbeatResponse{
			MemberId: res.MemberID, MemberEpoch: res.MemberEpoch,
			HeartbeatIntervalMs: res.HeartbeatInterval.Milliseconds(),
			Assignment:          toTopicPartitions(res.Assignment),
		}
	})
}

func (g *Groups) LeaveGroup(ctx context.Context, req *connect.Request[sluicev1.LeaveGroupRequest]) (*connect.Response[sluicev1.LeaveGroupResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	err = g.svc.LeaveGroup(ctx, groups.LeaveRequest{TenantID: tenantID, Group: m.GetGroup(), MemberID: m.GetMemberId(), InstanceID: m.GetInstanceId()})
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.LeaveGroup, func() *sluicev1.LeaveGroupResponse { return &sluicev1.LeaveGroupResponse{} })
}

// ListGroups asks every broker that coordinates groups (any broker asks
// all of them; with NoForwardHeader it answers for itself only).
func (g *Groups) ListGroups(ctx context.Context, req *connect.Request[sluicev1.ListGroupsRequest]) (*connect.Response[sluicev1.ListGroupsResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	all, err := g.svc.ListGroups(ctx, groups.ListGroupsRequest{
		TenantID: tenantID, Local: req.Header().Get(NoForwardHeader) == "1", Credentials: clientCredentials(req.Header()),
	})
	if err != nil {
		return nil, err
	}
	res := &sluicev1.ListGroupsResponse{}
	for _, s := range all {
		res.Groups = append(res.Groups, &sluicev1.GroupSummary{Group: s.Group, State: s.State, Members: s.Members})
	}
	return connect.NewResponse(res), nil
}

func (g *Groups) DescribeGroup(ctx context.Context, req *connect.Request[sluicev1.DescribeGroupRequest]) (*connect.Response[sluicev1.DescribeGroupResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	d, err := g.svc.DescribeGroup(ctx, groups.DescribeRequest{TenantID: tenantID, Group: req.Msg.GetGroup(), Credentials: clientCredentials(req.Header())})
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.DescribeGroup, func() *sluicev1.DescribeGroupResponse { return describeGroupResponse(d) })
}

func describeGroupResponse(d groups.Description) *sluicev1.DescribeGroupResponse {
	res := &sluicev1.DescribeGroupResponse{Group: d.Group, State: string(d.State), GroupEpoch: d.GroupEpoch, Assignor: d.Assignor, Rebalances: d.Rebalances}
	for _, md := range d.Members {
		res.Members = append(res.Members, &sluicev1.GroupMember{
			MemberId: md.MemberID, InstanceId: md.InstanceID, MemberEpoch: md.MemberEpoch, SubscribedTopics: md.Subscriptions,
			Assignment: toTopicPartitions(md.Assignment), Pending: toTopicPartitions(md.Pending), Revoking: toTopicPartitions(md.Revoking),
		})
	}
	for _, pl := range d.Partitions {
		l := &sluicev1.PartitionLag{
			Topic: pl.Topic, Partition: pl.Partition, CommittedOffset: pl.CommittedOffset,
			HighWatermark: pl.HighWatermark, LogStartOffset: pl.LogStartOffset, Lag: pl.Lag, LagSeconds: pl.LagSeconds,
			MemberId: pl.MemberID, PartitionBytes: pl.PartitionBytes,
		}
		for _, po := range pl.PendingOffsets {
			l.PendingOffsets = append(l.PendingOffsets, &sluicev1.PendingOffset{ProducerId: po.ProducerID, Offset: po.Offset})
		}
		res.Partitions = append(res.Partitions, l)
	}
	return res
}

func (g *Groups) DeleteGroup(ctx context.Context, req *connect.Request[sluicev1.DeleteGroupRequest]) (*connect.Response[sluicev1.DeleteGroupResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	err = g.svc.DeleteGroup(ctx, tenantID, req.Msg.GetGroup())
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.DeleteGroup, func() *sluicev1.DeleteGroupResponse { return &sluicev1.DeleteGroupResponse{} })
}

// DeleteOffsets deletes the group's committed offsets of one topic's
// partitions (groups.Service.DeleteOffsets): refused as a whole when its
// members subscribe to the topic, or a partition is not the topic's.
func (g *Groups) DeleteOffsets(ctx context.Context, req *connect.Request[sluicev1.DeleteOffsetsRequest]) (*connect.Response[sluicev1.DeleteOffsetsResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	var deleted []groups.DeletedOffsets
	if m.GetTopic() == "" {
		err = derr.New(derr.InvalidRequest, "topic: must not be empty")
	} else {
		deleted, err = g.svc.DeleteOffsets(ctx, groups.DeleteOffsetsRequest{
			TenantID: tenantID, Group: m.GetGroup(),
			Topics: []groups.TopicPartitions{{Topic: m.GetTopic(), Partitions: m.GetPartitions()}}, AllPartitions: len(m.GetPartitions()) == 0,
		})
	}
	for _, d := range deleted {
		for _, e := range d.Errs {
			if e != nil && err == nil {
				err = e
			}
		}
	}
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.DeleteOffsets, func() *sluicev1.DeleteOffsetsResponse { return &sluicev1.DeleteOffsetsResponse{} })
}

func (g *Groups) ResetOffsets(ctx context.Context, req *connect.Request[sluicev1.ResetOffsetsRequest]) (*connect.Response[sluicev1.ResetOffsetsResponse], error) {
	tenantID, err := callerTenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	offsets, err := g.svc.ResetOffsets(ctx, groups.ResetRequest{
		TenantID: tenantID, Group: m.GetGroup(), Topic: m.GetTopic(), Partitions: m.GetPartitions(),
		Spec: groups.OffsetSpec(m.GetSpec()), Offset: m.GetOffset(), TimestampMs: m.GetTimestampMs(), Force: m.GetForce(),
		Credentials: clientCredentials(req.Header()),
	})
	return answer(ctx, g, req, err, sluicev1connect.GroupServiceClient.ResetOffsets, func() *sluicev1.ResetOffsetsResponse {
		res := &sluicev1.ResetOffsetsResponse{}
		for _, o := range offsets {
			res.Offsets = append(res.Offsets, &sluicev1.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata})
		}
		return res
	})
}

// fromTopicPartitions is a request's partitions as a set: each topic's
// sorted, without duplicates.
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

// toTopicPartitions is a set of partitions as the API lists them, by
// topic.
func toTopicPartitions(a group.TopicPartitions) []*sluicev1.TopicPartitions {
	out := make([]*sluicev1.TopicPartitions, 0, len(a))
	for t, ps := range a {
		out = append(out, &sluicev1.TopicPartitions{Topic: t, Partitions: slices.Clone(ps)})
	}
	slices.SortFunc(out, func(a, b *sluicev1.TopicPartitions) int { return strings.Compare(a.GetTopic(), b.GetTopic()) })
	return out
}
