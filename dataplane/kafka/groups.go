package kafka

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/groups"
	"github.com/sluicemq/sluice/tenants"
)

// Groups is the consumer-group service (dataplane/groups.Service) as the
// listener calls it. A call for a group another broker coordinates fails
// with a *groups.NotCoordinatorError, answered NOT_COORDINATOR: a Kafka
// client asks FindCoordinator again, nothing is forwarded.
type Groups interface {
	FindCoordinator(tenantID, groupID string) (groups.Coordinator, error)
	CommitOffsets(ctx context.Context, req groups.CommitRequest) error
	TxnCommitOffsets(ctx context.Context, req groups.TxnCommitRequest) error
	FetchOffsets(ctx context.Context, req groups.FetchOffsetsRequest) ([]groups.PartitionOffset, error)
	Heartbeat(ctx context.Context, req groups.HeartbeatRequest) (group.HeartbeatResponse, error)
	ListGroups(ctx context.Context, req groups.ListGroupsRequest) ([]groups.GroupSummary, error)
	DescribeGroup(ctx context.Context, req groups.DescribeRequest) (groups.Description, error)
	DeleteGroup(ctx context.Context, tenantID, groupID string) error
	DeleteOffsets(ctx context.Context, req groups.DeleteOffsetsRequest) ([]groups.DeletedOffsets, error)
	// The classic protocol's.
	JoinGroup(ctx context.Context, req groups.JoinRequest) (group.JoinResponse, error)
	SyncGroup(ctx context.Context, tenantID, groupID string, req group.SyncRequest) (group.SyncResponse, error)
	HeartbeatClassic(ctx context.Context, tenantID, groupID, memberID, instanceID string, generation int32) error
	LeaveClassic(ctx context.Context, tenantID, groupID, memberID, instanceID string) error
	DescribeClassic(ctx context.Context, tenantID, groupID string) (group.ClassicDescription, error)
}

// Coordinator types of FindCoordinator.
const (
	coordinatorGroup       = 0
	coordinatorTransaction = 1
)

// consumerProtocol is the protocol type and group type ListGroups answers
// for every group (the summaries do not say which protocol a group uses:
// a classic group of another protocol type, Kafka Connect's say, is
// listed as "consumer" too; DescribeGroups has its own).
const consumerProtocol = "consumer"

// credentials are the session's, for the group service's calls to
// partition leaders on the client's behalf.
func (c *conn) credentials() groups.Credentials {
	return groups.Credentials{Authorization: "Bearer " + c.sess.token}
}

// groupCode is the Kafka error code of a group call's err: NOT_COORDINATOR
// for a group this broker does not coordinate (the client looks it up
// again), the domain error's code otherwise.
func groupCode(err error) int16 {
	var nc *groups.NotCoordinatorError
	if errors.As(err, &nc) {
		return kerr.NotCoordinator.Code
	}
	return errorCode(err, atCoordinator)
}

// commitCode is groupCode for an offset commit at version v: a member
// epoch that is not the member's current one, or a partition it does not
// hold, is STALE_MEMBER_EPOCH from v9 (KIP-848: the member heartbeats and
// commits again), ILLEGAL_GENERATION before.
func commitCode(err error, v int16) int16 {
	var e *derr.Error
	if errors.As(err, &e) && (e.Kind == derr.FencedMemberEpoch || e.Group == derr.GroupReasonNotOwned) {
		if v >= 9 {
			return kerr.StaleMemberEpoch.Code
		}
		return kerr.IllegalGeneration.Code
	}
	return classicCode(err)
}

func (c *conn) findCoordinator(ctx context.Context, req *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	res := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	keys := req.CoordinatorKeys
	if req.Version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	for _, key := range keys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key, co.NodeID, co.Port = key, -1, -1
		var err error
		switch {
		case req.CoordinatorType == coordinatorTransaction:
			err = c.findTxnCoordinator(ctx, &co)
		case req.CoordinatorType != coordinatorGroup:
			err = derr.New(derr.InvalidRequest, "coordinator type %d: only groups (0) and transactions (1) have coordinators", req.CoordinatorType)
		case !c.sess.p.Has(tenants.ScopeConsume):
			err = derr.New(derr.GroupAuthorizationFailed, "group %q: consumer groups need the consume scope", key)
		default:
			var gc groups.Coordinator
			if gc, err = c.s.d.Groups.FindCoordinator(c.sess.tenantID, key); err == nil {
				host, port, ok := kafkaNode(c.s.d.View().Brokers[gc.BrokerID])
				if ok {
					co.NodeID, co.Host, co.Port = gc.BrokerID, host, port
				} else {
					err = derr.New(derr.CoordinatorNotAvailable, "group coordinator: broker %d has no Kafka listener in this cluster's view; retry", gc.BrokerID)
				}
			}
		}
		if err != nil {
			co.ErrorCode, co.ErrorMessage = groupCode(err), errorMessage(err)
		}
		res.Coordinators = append(res.Coordinators, co)
	}
	if req.Version < 4 && len(res.Coordinators) == 1 {
		co := res.Coordinators[0]
		res.ErrorCode, res.ErrorMessage, res.NodeID, res.Host, res.Port = co.ErrorCode, co.ErrorMessage, co.NodeID, co.Host, co.Port
		res.Coordinators = nil
	}
	return res
}

func (c *conn) offsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	res := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	// Each partition's answer, by position: those refused on their own
	// (an unknown topic or partition) get their code here, the others the
	// commit's.
	type slot struct{ t, p int }
	var commit []slot
	creq := groups.CommitRequest{
		TenantID: c.sess.tenantID, Group: req.Group, MemberID: req.MemberID, MemberEpoch: req.Generation,
		Credentials: c.credentials(),
	}
	if req.InstanceID != nil {
		creq.InstanceID = *req.InstanceID
	}
	if req.MemberID == "" && req.Generation < 0 {
		creq.MemberEpoch = 0 // a commit from outside the group (kadm, tools)
	}
	v := c.s.d.View()
	denied := !c.sess.p.Has(tenants.ScopeConsume)
	for ti, rt := range req.Topics {
		tr := kmsg.NewOffsetCommitResponseTopic()
		tr.Topic = rt.Topic
		t, topicOK := v.Topic(c.sess.tenantID, rt.Topic)
		for pi, rp := range rt.Partitions {
			pr := kmsg.NewOffsetCommitResponseTopicPartition()
			pr.Partition = rp.Partition
			po, code := commitEntry(denied, t, topicOK, rt.Topic, rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata)
			if pr.ErrorCode = code; code == 0 {
				creq.Offsets = append(creq.Offsets, po)
				commit = append(commit, slot{ti, pi})
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		res.Topics = append(res.Topics, tr)
	}
	if len(commit) == 0 {
		return res
	}
	code := c.commitAnswer(c.s.d.Groups.CommitOffsets(ctx, creq), req.Version, req.Group)
	for _, s := range commit {
		res.Topics[s.t].Partitions[s.p].ErrorCode = code
	}
	return res
}

// commitEntry checks one partition of an offset commit (OffsetCommit,
// TxnOffsetCommit) on its own: the partition offset to commit, or the
// code that answers it without committing.
func commitEntry(denied bool, t *cluster.Topic, topicOK bool, topic string, partition int32, offset int64, leaderEpoch int32, metadata *string) (groups.PartitionOffset, int16) {
	switch {
	case denied:
		return groups.PartitionOffset{}, kerr.GroupAuthorizationFailed.Code
	case !topicOK || partition < 0 || int(partition) >= len(t.Partitions):
		return groups.PartitionOffset{}, kerr.UnknownTopicOrPartition.Code
	case offset < 0:
		return groups.PartitionOffset{}, kerr.InvalidCommitOffsetSize.Code
	}
	po := groups.PartitionOffset{Topic: topic, Partition: partition, Offset: offset, LeaderEpoch: leaderEpoch}
	if metadata != nil {
		po.Metadata = *metadata
	}
	return po, 0
}

// commitAnswer is the code of a commit's err (commitCode) for the
// partitions it covered: an offset past the partition's end is
// INVALID_COMMIT_OFFSET_SIZE (Kafka has no such refusal for commits; its
// closest is a bad offset); a malformed or failed commit is logged.
func (c *conn) commitAnswer(err error, version int16, group string) int16 {
	if err == nil {
		return 0
	}
	code := commitCode(err, version)
	if code == kerr.InvalidRequest.Code || code == kerr.UnknownServerError.Code {
		c.s.logger.Debug("kafka offset commit refused", "tenant", c.sess.tenantID, "group", group, "err", err)
	}
	if code == kerr.OffsetOutOfRange.Code {
		code = kerr.InvalidCommitOffsetSize.Code
	}
	return code
}

// offsetFetchGroup is one group of an OffsetFetch: its topics (nil: every
// partition with an offset).
type offsetFetchGroup struct {
	group  string
	topics []kmsg.OffsetFetchRequestGroupTopic
}

func (c *conn) offsetFetch(ctx context.Context, req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	res := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version < 8 {
		g := offsetFetchGroup{group: req.Group}
		if req.Topics != nil {
			g.topics = []kmsg.OffsetFetchRequestGroupTopic{}
			for _, rt := range req.Topics {
				g.topics = append(g.topics, kmsg.OffsetFetchRequestGroupTopic{Topic: rt.Topic, Partitions: rt.Partitions})
			}
		}
		rg := c.fetchGroupOffsets(ctx, g)
		res.ErrorCode = rg.ErrorCode
		for _, gt := range rg.Topics {
			tr := kmsg.NewOffsetFetchResponseTopic()
			tr.Topic = gt.Topic
			for _, gp := range gt.Partitions {
				pr := kmsg.NewOffsetFetchResponseTopicPartition()
				pr.Partition, pr.Offset, pr.LeaderEpoch, pr.Metadata, pr.ErrorCode = gp.Partition, gp.Offset, gp.LeaderEpoch, gp.Metadata, gp.ErrorCode
				tr.Partitions = append(tr.Partitions, pr)
			}
			res.Topics = append(res.Topics, tr)
		}
		return res
	}
	for _, rg := range req.Groups {
		res.Groups = append(res.Groups, c.fetchGroupOffsets(ctx, offsetFetchGroup{group: rg.Group, topics: rg.Topics}))
	}
	return res
}

// fetchGroupOffsets answers one group's committed offsets. A partition
// with offsets pending in an open transaction refuses the group's answer
// (UNSTABLE_OFFSET_COMMIT, retriable), whether or not the client asked
// for stable offsets only: Sluice answers no offset that a transaction
// may still replace.
func (c *conn) fetchGroupOffsets(ctx context.Context, g offsetFetchGroup) kmsg.OffsetFetchResponseGroup {
	out := kmsg.NewOffsetFetchResponseGroup()
	out.Group = g.group
	if !c.sess.p.Has(tenants.ScopeConsume) {
		out.ErrorCode = kerr.GroupAuthorizationFailed.Code
		return out
	}
	v := c.s.d.View()
	freq := groups.FetchOffsetsRequest{TenantID: c.sess.tenantID, Group: g.group}
	// Partitions of topics that do not exist are answered here; the
	// others come from the coordinator, in the request's order.
	type slot struct{ t, p int }
	var asked []slot
	for ti, rt := range g.topics {
		tr := kmsg.NewOffsetFetchResponseGroupTopic()
		tr.Topic = rt.Topic
		t, ok := v.Topic(c.sess.tenantID, rt.Topic)
		var known []int32
		for pi, p := range rt.Partitions {
			pr := kmsg.NewOffsetFetchResponseGroupTopicPartition()
			pr.Partition, pr.Offset = p, -1
			if !ok || p < 0 || int(p) >= len(t.Partitions) {
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				known = append(known, p)
				asked = append(asked, slot{ti, pi})
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		if len(known) > 0 {
			freq.Partitions = append(freq.Partitions, groups.TopicPartitions{Topic: rt.Topic, Partitions: known})
		}
		out.Topics = append(out.Topics, tr)
	}
	if g.topics != nil && len(asked) == 0 {
		return out
	}
	offsets, err := c.s.d.Groups.FetchOffsets(ctx, freq)
	if err != nil {
		out.ErrorCode = groupCode(err)
		return out
	}
	if g.topics != nil {
		for i, s := range asked {
			if i < len(offsets) {
				setFetched(&out.Topics[s.t].Partitions[s.p], offsets[i])
			}
		}
		return out
	}
	for _, o := range offsets {
		if n := len(out.Topics); n == 0 || out.Topics[n-1].Topic != o.Topic {
			tr := kmsg.NewOffsetFetchResponseGroupTopic()
			tr.Topic = o.Topic
			out.Topics = append(out.Topics, tr)
		}
		pr := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		pr.Partition = o.Partition
		setFetched(&pr, o)
		tr := &out.Topics[len(out.Topics)-1]
		tr.Partitions = append(tr.Partitions, pr)
	}
	return out
}

// setFetched fills a partition's answer from its committed offset.
func setFetched(pr *kmsg.OffsetFetchResponseGroupTopicPartition, o groups.PartitionOffset) {
	pr.Offset, pr.LeaderEpoch = o.Offset, o.LeaderEpoch
	if o.Offset >= 0 {
		pr.Metadata = ptr(o.Metadata)
	}
}

func (c *conn) consumerGroupHeartbeat(ctx context.Context, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	res := req.ResponseKind().(*kmsg.ConsumerGroupHeartbeatResponse)
	fail := func(err error) *kmsg.ConsumerGroupHeartbeatResponse {
		res.ErrorCode, res.ErrorMessage = groupCode(err), errorMessage(err)
		return res
	}
	if !c.sess.p.Has(tenants.ScopeConsume) {
		return fail(derr.New(derr.GroupAuthorizationFailed, "group %q: consumer groups need the consume scope", req.Group))
	}
	if req.SubscribedTopicRegex != nil && *req.SubscribedTopicRegex != "" {
		return fail(derr.New(derr.InvalidRequest, "subscribed topic regex %q: regular-expression subscriptions are not served; subscribe to topic names", *req.SubscribedTopicRegex))
	}
	v := c.s.d.View()
	hr := group.HeartbeatRequest{
		MemberID: req.MemberID, MemberEpoch: req.MemberEpoch,
		// v1: the client names itself (a v0 join leaves the id to us).
		ClientMemberID: req.Version >= 1,
		Subscriptions:  req.SubscribedTopicNames,
	}
	if req.InstanceID != nil {
		hr.InstanceID = *req.InstanceID
	}
	if req.RebalanceTimeoutMillis > 0 {
		hr.RebalanceTimeout = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	if len(req.MemberID) > groups.MaxGroupName {
		return fail(derr.New(derr.InvalidRequest, "member id: at most %d bytes", groups.MaxGroupName))
	}
	if req.Topics != nil {
		hr.Owned = group.TopicPartitions{}
		for _, rt := range req.Topics {
			if t, ok := byTopicID(v, c.sess.tenantID, rt.TopicID); ok {
				hr.Owned[t.Name] = append(hr.Owned[t.Name], rt.Partitions...)
			}
			// A topic deleted since: the member owns nothing of it.
		}
	}
	assignor := ""
	if req.ServerAssignor != nil {
		assignor = *req.ServerAssignor
	}
	gr, err := c.s.d.Groups.Heartbeat(ctx, groups.HeartbeatRequest{TenantID: c.sess.tenantID, Group: req.Group, Assignor: assignor, Member: hr})
	if err != nil {
		return fail(err)
	}
	res.MemberID, res.MemberEpoch = ptr(gr.MemberID), gr.MemberEpoch
	res.HeartbeatIntervalMillis = int32(gr.HeartbeatInterval.Milliseconds())
	if gr.Assignment != nil {
		a := kmsg.NewConsumerGroupHeartbeatResponseAssignment()
		for _, name := range sortedTopics(gr.Assignment) {
			t, ok := v.Topic(c.sess.tenantID, name)
			if !ok {
				continue
			}
			at := kmsg.NewConsumerGroupHeartbeatResponseAssignmentTopic()
			at.TopicID, at.Partitions = topicID(t.ID), slices.Sorted(slices.Values(gr.Assignment[name]))
			a.Topics = append(a.Topics, at)
		}
		res.Assignment = &a
	}
	return res
}

// sortedTopics are the topic names of tps in order.
func sortedTopics(tps group.TopicPartitions) []string {
	names := make([]string, 0, len(tps))
	for name := range tps {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// groupState is a group state as Kafka names it (ConsumerGroupState).
func groupState(s string) string {
	switch group.State(s) {
	case group.StateEmpty:
		return "Empty"
	case group.StateAssigning:
		return "Assigning"
	case group.StateReconciling:
		return "Reconciling"
	case group.StateStable:
		return "Stable"
	case group.State(strings.ToLower(string(group.ClassicPreparingRebalance))):
		return string(group.ClassicPreparingRebalance)
	case group.State(strings.ToLower(string(group.ClassicCompletingRebalance))):
		return string(group.ClassicCompletingRebalance)
	}
	return "Unknown"
}

func (c *conn) consumerGroupDescribe(ctx context.Context, req *kmsg.ConsumerGroupDescribeRequest) *kmsg.ConsumerGroupDescribeResponse {
	res := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	v := c.s.d.View()
	for _, id := range req.Groups {
		g := kmsg.NewConsumerGroupDescribeResponseGroup()
		g.Group = id
		d, err := c.s.d.Groups.DescribeGroup(ctx, groups.DescribeRequest{TenantID: c.sess.tenantID, Group: id, Credentials: c.credentials()})
		if err != nil {
			g.ErrorCode, g.ErrorMessage = groupCode(err), errorMessage(err)
			res.Groups = append(res.Groups, g)
			continue
		}
		g.State, g.Epoch, g.AssignmentEpoch, g.AssignorName = groupState(string(d.State)), d.GroupEpoch, d.GroupEpoch, d.Assignor
		for _, md := range d.Members {
			m := kmsg.NewConsumerGroupDescribeResponseGroupMember()
			m.MemberID, m.MemberEpoch, m.SubscribedTopics = md.MemberID, md.MemberEpoch, md.Subscriptions
			if md.InstanceID != "" {
				m.InstanceID = ptr(md.InstanceID)
			}
			m.Assignment, m.TargetAssignment = assignment(v, c.sess.tenantID, md.Assignment), assignment(v, c.sess.tenantID, md.Target)
			m.MemberType = 1 // a consumer-protocol member (KIP-1099)
			g.Members = append(g.Members, m)
		}
		res.Groups = append(res.Groups, g)
	}
	return res
}

// assignment is tps as ConsumerGroupDescribe lists it, with topic ids.
func assignment(v *cluster.View, tenantID string, tps group.TopicPartitions) kmsg.Assignment {
	a := kmsg.NewAssignment()
	for _, name := range sortedTopics(tps) {
		at := kmsg.NewAssignmentTopicPartition()
		at.Topic, at.Partitions = name, slices.Sorted(slices.Values(tps[name]))
		if t, ok := v.Topic(tenantID, name); ok {
			at.TopicID = topicID(t.ID)
		}
		a.TopicPartitions = append(a.TopicPartitions, at)
	}
	return a
}

func (c *conn) listGroups(ctx context.Context, req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	res := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if len(req.TypesFilter) > 0 && !slices.ContainsFunc(req.TypesFilter, func(t string) bool { return strings.EqualFold(t, consumerProtocol) }) {
		return res // only consumer groups here
	}
	all, err := c.s.d.Groups.ListGroups(ctx, groups.ListGroupsRequest{TenantID: c.sess.tenantID, Credentials: c.credentials()})
	if err != nil {
		res.ErrorCode = groupCode(err)
		return res
	}
	for _, s := range all {
		state := groupState(s.State)
		if len(req.StatesFilter) > 0 && !slices.ContainsFunc(req.StatesFilter, func(f string) bool { return strings.EqualFold(f, state) }) {
			continue
		}
		g := kmsg.NewListGroupsResponseGroup()
		g.Group, g.ProtocolType, g.GroupState, g.GroupType = s.Group, consumerProtocol, state, consumerProtocol
		res.Groups = append(res.Groups, g)
	}
	return res
}

func (c *conn) deleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	res := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range req.Groups {
		g := kmsg.NewDeleteGroupsResponseGroup()
		g.Group = id
		var err error
		if !c.sess.p.Has(tenants.ScopeAdmin) {
			err = derr.New(derr.GroupAuthorizationFailed, "group %q: deleting a group needs the admin scope", id)
		} else {
			err = c.s.d.Groups.DeleteGroup(ctx, c.sess.tenantID, id)
		}
		if err != nil {
			g.ErrorCode, g.ErrorMessage = groupCode(err), errorMessage(err)
		}
		res.Groups = append(res.Groups, g)
	}
	return res
}

// offsetDelete deletes a group's committed offsets of some partitions
// (KIP-496), with the admin scope (Kafka asks Delete on the group): not of
// a topic its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC, per
// partition); the members' subscriptions of a classic group are read from
// their consumer-protocol metadata.
func (c *conn) offsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	res := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	dreq := groups.DeleteOffsetsRequest{TenantID: c.sess.tenantID, Group: req.Group, Classic: consumerSubscriptions}
	for _, rt := range req.Topics {
		tp := groups.TopicPartitions{Topic: rt.Topic}
		for _, p := range rt.Partitions {
			tp.Partitions = append(tp.Partitions, p.Partition)
		}
		dreq.Topics = append(dreq.Topics, tp)
	}
	var deleted []groups.DeletedOffsets
	var err error
	if !c.sess.p.Has(tenants.ScopeAdmin) {
		err = derr.New(derr.GroupAuthorizationFailed, "group %q: deleting its offsets needs the admin scope", req.Group)
	} else {
		deleted, err = c.s.d.Groups.DeleteOffsets(ctx, dreq)
	}
	if err != nil {
		res.ErrorCode = groupCode(err)
		return res
	}
	for ti, d := range deleted { // in the request's order
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = d.Topic
		for i, p := range dreq.Topics[ti].Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p
			if d.Errs[i] != nil {
				rp.ErrorCode = errorCode(d.Errs[i], atCoordinator)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		res.Topics = append(res.Topics, rt)
	}
	return res
}

// consumerSubscriptions reads the topics a classic group's members
// subscribe to from their protocol metadata, when the group speaks the
// consumer protocol (groups.DeleteOffsetsRequest.Classic).
func consumerSubscriptions(protocolType string, metadata [][]byte) ([]string, bool) {
	if protocolType != consumerProtocol {
		return nil, false
	}
	var topics []string
	for _, md := range metadata {
		var m kmsg.ConsumerMemberMetadata
		if err := m.ReadFrom(md); err != nil {
			return nil, false // unreadable: not known, so nothing is deleted under a member
		}
		topics = append(topics, m.Topics...)
	}
	return topics, true
}

// classicCode is the Kafka error code of a classic group call's err: the
// classic protocol's own refusals (dataplane/group's), else groupCode's.
func classicCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, group.ErrMemberIDRequired):
		return kerr.MemberIDRequired.Code
	case errors.Is(err, group.ErrRebalanceInProgress):
		return kerr.RebalanceInProgress.Code
	case errors.Is(err, group.ErrIllegalGeneration):
		return kerr.IllegalGeneration.Code
	case errors.Is(err, group.ErrInconsistentProtocol):
		return kerr.InconsistentGroupProtocol.Code
	case errors.Is(err, group.ErrInvalidSessionTimeout):
		return kerr.InvalidSessionTimeout.Code
	case errors.Is(err, group.ErrGroupFull):
		return kerr.GroupMaxSizeReached.Code
	}
	return groupCode(err)
}

// classicDenied refuses a classic group call without the consume scope.
func (c *conn) classicDenied(groupID string) error {
	if c.sess.p.Has(tenants.ScopeConsume) {
		return nil
	}
	return derr.New(derr.GroupAuthorizationFailed, "group %q: consumer groups need the consume scope", groupID)
}

func (c *conn) joinGroup(ctx context.Context, clientID string, req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	res := req.ResponseKind().(*kmsg.JoinGroupResponse)
	res.Generation = -1
	if err := c.classicDenied(req.Group); err != nil {
		res.ErrorCode = classicCode(err)
		return res
	}
	m := group.JoinRequest{
		MemberID: req.MemberID, ClientID: clientID, ClientHost: c.remoteHost(),
		SessionTimeout:   time.Duration(req.SessionTimeoutMillis) * time.Millisecond,
		RebalanceTimeout: time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond,
		ProtocolType:     req.ProtocolType,
		// KIP-394 (v4+): a new member learns its id first.
		RequireKnownMemberID: req.Version >= 4,
		// v9+: a restarted static leader can be told to keep the
		// assignment.
		SkipAssignment: req.Version >= 9,
	}
	if req.Version == 0 {
		m.RebalanceTimeout = m.SessionTimeout
	}
	if req.InstanceID != nil {
		m.InstanceID = *req.InstanceID
	}
	for _, p := range req.Protocols {
		m.Protocols = append(m.Protocols, group.Protocol{Name: p.Name, Metadata: p.Metadata})
	}
	jr, err := c.s.d.Groups.JoinGroup(ctx, groups.JoinRequest{TenantID: c.sess.tenantID, Group: req.Group, Member: m})
	res.MemberID = jr.MemberID
	if err != nil {
		res.ErrorCode = classicCode(err)
		if res.ErrorCode != kerr.MemberIDRequired.Code {
			res.MemberID = req.MemberID
		}
		return res
	}
	res.Generation, res.LeaderID, res.SkipAssignment = jr.Generation, jr.Leader, jr.SkipAssignment
	res.ProtocolType, res.Protocol = ptr(jr.ProtocolType), ptr(jr.Protocol)
	for _, jm := range jr.Members {
		rm := kmsg.NewJoinGroupResponseMember()
		rm.MemberID, rm.ProtocolMetadata = jm.MemberID, jm.Metadata
		if jm.InstanceID != "" {
			rm.InstanceID = ptr(jm.InstanceID)
		}
		res.Members = append(res.Members, rm)
	}
	return res
}

func (c *conn) syncGroup(ctx context.Context, req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	res := req.ResponseKind().(*kmsg.SyncGroupResponse)
	if err := c.classicDenied(req.Group); err != nil {
		res.ErrorCode = classicCode(err)
		return res
	}
	sr := group.SyncRequest{MemberID: req.MemberID, Generation: req.Generation}
	if req.InstanceID != nil {
		sr.InstanceID = *req.InstanceID
	}
	if req.ProtocolType != nil {
		sr.ProtocolType = *req.ProtocolType
	}
	if req.Protocol != nil {
		sr.Protocol = *req.Protocol
	}
	if len(req.GroupAssignment) > 0 {
		sr.Assignments = make(map[string][]byte, len(req.GroupAssignment))
		for _, a := range req.GroupAssignment {
			sr.Assignments[a.MemberID] = a.MemberAssignment
		}
	}
	out, err := c.s.d.Groups.SyncGroup(ctx, c.sess.tenantID, req.Group, sr)
	if err != nil {
		res.ErrorCode = classicCode(err)
		return res
	}
	res.ProtocolType, res.Protocol, res.MemberAssignment = ptr(out.ProtocolType), ptr(out.Protocol), out.Assignment
	if res.MemberAssignment == nil {
		res.MemberAssignment = []byte{}
	}
	return res
}

func (c *conn) heartbeat(ctx context.Context, req *kmsg.HeartbeatRequest) *kmsg.HeartbeatResponse {
	res := req.ResponseKind().(*kmsg.HeartbeatResponse)
	err := c.classicDenied(req.Group)
	if err == nil {
		instance := ""
		if req.InstanceID != nil {
			instance = *req.InstanceID
		}
		err = c.s.d.Groups.HeartbeatClassic(ctx, c.sess.tenantID, req.Group, req.MemberID, instance, req.Generation)
	}
	res.ErrorCode = classicCode(err)
	return res
}

func (c *conn) leaveGroup(ctx context.Context, req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	res := req.ResponseKind().(*kmsg.LeaveGroupResponse)
	if err := c.classicDenied(req.Group); err != nil {
		res.ErrorCode = classicCode(err)
		return res
	}
	if req.Version < 3 {
		res.ErrorCode = classicCode(c.s.d.Groups.LeaveClassic(ctx, c.sess.tenantID, req.Group, req.MemberID, ""))
		return res
	}
	for _, rm := range req.Members {
		m := kmsg.NewLeaveGroupResponseMember()
		m.MemberID, m.InstanceID = rm.MemberID, rm.InstanceID
		instance := ""
		if rm.InstanceID != nil {
			instance = *rm.InstanceID
		}
		m.ErrorCode = classicCode(c.s.d.Groups.LeaveClassic(ctx, c.sess.tenantID, req.Group, rm.MemberID, instance))
		res.Members = append(res.Members, m)
	}
	return res
}

// remoteHost is the client's address without its port.
func (c *conn) remoteHost() string {
	if h, _, err := net.SplitHostPort(c.remote); err == nil {
		return h
	}
	return c.remote
}

func (c *conn) describeGroups(ctx context.Context, req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	res := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		g := kmsg.NewDescribeGroupsResponseGroup()
		g.Group = id
		d, err := c.s.d.Groups.DescribeClassic(ctx, c.sess.tenantID, id)
		if err != nil {
			g.ErrorCode = classicCode(err)
			res.Groups = append(res.Groups, g)
			continue
		}
		g.State, g.ProtocolType, g.Protocol = string(d.State), d.ProtocolType, d.Protocol
		for _, m := range d.Members {
			rm := kmsg.NewDescribeGroupsResponseGroupMember()
			rm.MemberID, rm.ClientID, rm.ClientHost, rm.ProtocolMetadata, rm.MemberAssignment = m.MemberID, m.ClientID, m.ClientHost, m.Metadata, m.Assignment
			if m.InstanceID != "" {
				rm.InstanceID = ptr(m.InstanceID)
			}
			if rm.MemberAssignment == nil {
				rm.MemberAssignment = []byte{}
			}
			g.Members = append(g.Members, rm)
		}
		res.Groups = append(res.Groups, g)
	}
	return res
}
