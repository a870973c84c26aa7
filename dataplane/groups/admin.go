package groups

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/tenants/system"
)

// GroupSummary is one group in a list.
type GroupSummary struct {
	Group   string
	State   string
	Members int32
}

// Peers are the other brokers' group services, as this broker calls them.
type Peers interface {
	// ListGroups lists the groups broker coordinates (for itself only),
	// of the tenant cred acts for.
	ListGroups(ctx context.Context, broker int32, cred Credentials) ([]GroupSummary, error)
}

// ListGroupsRequest lists a tenant's groups: those this broker
// coordinates (Local), or all of them.
type ListGroupsRequest struct {
	TenantID string
	// Local: only the groups this broker coordinates (a peer's question).
	Local bool
	// Credentials ask the other coordinators.
	Credentials Credentials
}

// ListGroups lists a tenant's groups, by group id. Without Local it asks
// every broker leading a partition of the offsets topic (this one
// itself, the others through Peers) and merges their lists without the
// duplicates a leadership move can give; a partition without a leader,
// or a broker that fails, makes it Unavailable: the list would be
// incomplete.
func (s *Service) ListGroups(ctx context.Context, req ListGroupsRequest) ([]GroupSummary, error) {
	local := func() ([]GroupSummary, error) {
		coords, err := s.localCoordinators(ctx)
		if err != nil {
			return nil, err
		}
		now := s.deps.Now()
		var out []GroupSummary
		for _, c := range coords {
			for _, g := range c.Summaries(now, req.TenantID) {
				out = append(out, GroupSummary{Group: g.GetGroup(), State: g.GetState(), Members: g.GetMembers()})
			}
		}
		return out, nil
	}
	if req.Local {
		return local()
	}
	return cluster.AskLeaders(s.deps.View(), s.cfg.BrokerID, system.OffsetsTopic, ErrNoOffsetsTopic, "list groups", local,
		func(id int32) ([]GroupSummary, error) { return s.deps.Peers.ListGroups(ctx, id, req.Credentials) },
		func(g GroupSummary) string { return g.Group })
}

// Description is a group as DescribeGroup answers it.
type Description struct {
	Group string
	// State is group.StateEmpty for a group without members here.
	State      group.State
	GroupEpoch int32
	Assignor   string
	Rebalances int64
	// Members by member id.
	Members []group.MemberDescription
	// Partitions are the lags of every partition of the topics the group
	// subscribes to or has offsets (committed or pending) on, by topic and
	// partition.
	Partitions []PartitionLag
}

// PartitionLag is a group's position on one partition.
type PartitionLag struct {
	Topic     string
	Partition int32
	// CommittedOffset is -1 when the group has none.
	CommittedOffset int64
	// HighWatermark, LogStartOffset and Lag are -1 when the partition's
	// leader did not answer.
	HighWatermark, LogStartOffset int64
	// Lag is what a read_committed consumer at the committed offset can
	// still read (see fillLags).
	Lag int64
	// LagSeconds is the age of the oldest record left to read; 0 when
	// caught up or unknown.
	LagSeconds float64
	// MemberID owns the partition (or is revoking it); "" for none.
	MemberID string
	// PartitionBytes is the partition's size at its leader.
	PartitionBytes int64
	// PendingOffsets are offsets of open transactions, by producer id.
	PendingOffsets []PendingOffset
}

// PendingOffset is a transaction's offset of a group, pending until the
// transaction ends.
type PendingOffset struct {
	ProducerID, Offset int64
}

// partKey names a partition by topic name.
type partKey struct {
	topic     string
	partition int32
}

// DescribeRequest describes a group; Credentials read its partitions'
// offsets at their leaders.
type DescribeRequest struct {
	TenantID, Group string
	Credentials     Credentials
}

// DescribeGroup returns the group's members, committed and pending
// offsets and lag (GroupIDNotFound for a group its coordinator does not
// know).
func (s *Service) DescribeGroup(ctx context.Context, req DescribeRequest) (Description, error) {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return Description{}, err
	}
	now := s.deps.Now()
	d, offsets, ok := c.Describe(now, req.TenantID, req.Group)
	if !ok {
		return Description{}, groupNotFound(req.Group)
	}
	res := Description{Group: req.Group, State: d.State, GroupEpoch: d.GroupEpoch, Assignor: d.Assignor, Rebalances: d.Rebalances, Members: d.Members}
	if res.State == "" {
		res.State = group.StateEmpty
	}
	meta := s.deps.View()
	owner := map[partKey]string{}
	topics := map[string]bool{}
	for _, md := range d.Members {
		for t, ps := range md.Assignment {
			for _, p := range ps {
				owner[partKey{t, p}] = md.MemberID
			}
		}
		for t, ps := range md.Revoking {
			for _, p := range ps {
				owner[partKey{t, p}] = md.MemberID
			}
		}
		for _, t := range md.Subscriptions {
			topics[t] = true
		}
	}
	committed := map[partKey]coordinator.Committed{}
	for k, co := range offsets {
		if t, ok := meta.ByID[k.TopicID]; ok && t.TenantID == req.TenantID {
			topics[t.Name] = true
			committed[partKey{t.Name, k.Partition}] = co
		}
	}
	pendingOffsets := map[partKey][]PendingOffset{}
	for pid, p := range c.PendingOffsets(req.TenantID, req.Group) {
		for k, co := range p {
			if t, ok := meta.ByID[k.TopicID]; ok && t.TenantID == req.TenantID {
				topics[t.Name] = true
				tk := partKey{t.Name, k.Partition}
				pendingOffsets[tk] = append(pendingOffsets[tk], PendingOffset{ProducerID: pid, Offset: co.Offset.GetOffset()})
			}
		}
	}
	var toFill []topicLag
	for name := range topics {
		t, ok := meta.Topic(req.TenantID, name)
		if !ok {
			continue
		}
		for _, tpm := range t.Partitions {
			k := partKey{name, tpm.Partition}
			pl := &PartitionLag{Topic: name, Partition: tpm.Partition, CommittedOffset: -1, MemberID: owner[k]}
			if co, ok := committed[k]; ok {
				pl.CommittedOffset = co.Offset.GetOffset()
			}
			pl.PendingOffsets = pendingOffsets[k]
			slices.SortFunc(pl.PendingOffsets, func(a, b PendingOffset) int { return cmp.Compare(a.ProducerID, b.ProducerID) })
			toFill = append(toFill, topicLag{topic: t, lag: pl})
		}
	}
	s.fillLags(ctx, req.Credentials, toFill, now)
	for _, tl := range toFill {
		res.Partitions = append(res.Partitions, *tl.lag)
	}
	slices.SortFunc(res.Partitions, func(a, b PartitionLag) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return res, nil
}

// DeleteGroup deletes a group without members: its committed offsets and
// static members' incarnations (GroupIDNotFound for a group unknown here,
// NonEmptyGroup while it has members).
func (s *Service) DeleteGroup(ctx context.Context, tenantID, groupID string) error {
	c, err := s.call(ctx, tenantID, groupID)
	if err != nil {
		return err
	}
	now := s.deps.Now()
	if _, _, ok := c.Describe(now, tenantID, groupID); !ok {
		return groupNotFound(groupID)
	}
	if c.Active(now, tenantID, groupID) {
		return groupActive(groupID, "stop them first")
	}
	if err := c.DeleteGroup(ctx, tenantID, groupID); err != nil {
		return offsetsError(err)
	}
	return nil
}

// DeleteOffsetsRequest deletes a group's committed offsets of some
// partitions (Kafka's OffsetDelete).
type DeleteOffsetsRequest struct {
	TenantID, Group string
	Topics          []TopicPartitions
	// AllPartitions: each topic's every partition (its Partitions
	// ignored).
	AllPartitions bool
	// Classic tells a classic group's subscribed topics from its members'
	// protocol metadata (the Kafka adapter's reading of the consumer
	// protocol); nil: none can be told.
	Classic coordinator.ClassicSubscriptions
}

// DeletedOffsets is DeleteOffsets' answer for one topic: per partition in
// the request's order (with AllPartitions, the topic's; an unknown topic's
// one answer), nil (deleted, or none was committed) or its
// refusal (UnknownTopicOrPartition, GroupSubscribedToTopic).
type DeletedOffsets struct {
	Topic string
	Errs  []error
}

// DeleteOffsets deletes the group's committed offsets of the request's
// partitions, but for those of a topic its members subscribe to (refused
// GroupSubscribedToTopic, as Kafka does: its consumers would lose their
// place); a partition with no committed offset is no error. A group
// unknown here is GroupIDNotFound; one with members whose subscriptions
// cannot be told (a classic group not of the consumer protocol),
// NonEmptyGroup; one with offsets pending in an open transaction on a
// partition to delete, UnstableOffsetCommit.
func (s *Service) DeleteOffsets(ctx context.Context, req DeleteOffsetsRequest) ([]DeletedOffsets, error) {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return nil, err
	}
	if _, _, ok := c.Describe(s.deps.Now(), req.TenantID, req.Group); !ok {
		return nil, groupNotFound(req.Group)
	}
	meta := s.deps.View()
	out := make([]DeletedOffsets, len(req.Topics))
	type slot struct{ t, p int }
	var parts []coordinator.OffsetDeletion
	var slots []slot
	for ti, rt := range req.Topics {
		t, ok := meta.Topic(req.TenantID, rt.Topic)
		partitions := rt.Partitions
		if req.AllPartitions {
			partitions = []int32{0} // an unknown topic's answer
			if ok {
				partitions = make([]int32, len(t.Partitions))
				for p := range partitions {
					partitions[p] = int32(p)
				}
			}
		}
		out[ti] = DeletedOffsets{Topic: rt.Topic, Errs: make([]error, len(partitions))}
		for pi, p := range partitions {
			switch {
			case !ok:
				out[ti].Errs[pi] = meta.TopicNotFound(rt.Topic)
			case p < 0 || int(p) >= len(t.Partitions):
				out[ti].Errs[pi] = derr.New(derr.UnknownTopicOrPartition, "topic %q has partitions 0..%d; got %d", rt.Topic, len(t.Partitions)-1, p)
			default:
				parts = append(parts, coordinator.OffsetDeletion{TopicID: t.ID, Topic: t.Name, Partition: p})
				slots = append(slots, slot{ti, pi})
			}
		}
	}
	if len(parts) == 0 {
		return out, nil
	}
	classic := req.Classic
	if classic == nil {
		classic = func(string, [][]byte) ([]string, bool) { return nil, false }
	}
	left, err := c.DeleteOffsets(ctx, req.TenantID, req.Group, parts, classic)
	if err != nil {
		return nil, offsetsError(err)
	}
	for i, sl := range slots {
		if left[i] {
			out[sl.t].Errs[sl.p] = derr.New(derr.GroupSubscribedToTopic, "group %q: its members subscribe to topic %q; its offsets stay while they do", req.Group, parts[i].Topic)
		}
	}
	return out, nil
}

// OffsetSpec says which offset a reset or a lookup is for; its values are
// the API's (sluice.v1.OffsetSpec).
type OffsetSpec int32

const (
	// SpecOffset: an explicit offset, clamped to the partition's log.
	SpecOffset OffsetSpec = iota
	// SpecEarliest: the log start offset.
	SpecEarliest
	// SpecLatest: the high watermark.
	SpecLatest
	// SpecTimestamp: the first offset at or after a timestamp (the high
	// watermark when there is none).
	SpecTimestamp
)

// ResetRequest sets a group's offsets on a topic's partitions.
type ResetRequest struct {
	TenantID, Group, Topic string
	// Partitions: none is every partition of the topic.
	Partitions  []int32
	Spec        OffsetSpec
	Offset      int64 // with SpecOffset
	TimestampMs int64 // with SpecTimestamp
	// Force resets the offsets of a group with members (they keep
	// consuming from their own positions until their partitions move).
	Force       bool
	Credentials Credentials
}

// ResetOffsets commits the offsets Spec names on the partitions, by
// partition, and returns them (NonEmptyGroup for a group with members
// unless Force).
func (s *Service) ResetOffsets(ctx context.Context, req ResetRequest) ([]PartitionOffset, error) {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return nil, err
	}
	meta := s.deps.View()
	t, ok := meta.Topic(req.TenantID, req.Topic)
	if !ok {
		return nil, meta.TopicNotFound(req.Topic)
	}
	if req.Spec < SpecOffset || req.Spec > SpecTimestamp {
		return nil, derr.New(derr.InvalidRequest, "spec: unknown value %d", req.Spec)
	}
	if req.Spec == SpecOffset && req.Offset < 0 {
		return nil, derr.New(derr.InvalidRequest, "offset: must not be negative; got %d", req.Offset)
	}
	parts := req.Partitions
	if len(parts) == 0 {
		for i := range t.Partitions {
			parts = append(parts, int32(i))
		}
	}
	for _, p := range parts {
		if p < 0 || int(p) >= len(t.Partitions) {
			return nil, derr.New(derr.InvalidRequest, "partitions: topic %q has partitions 0..%d; got %d", t.Name, len(t.Partitions)-1, p)
		}
	}
	if !req.Force && c.Active(s.deps.Now(), req.TenantID, req.Group) {
		return nil, groupActive(req.Group, "stop them first, or force (members keep consuming from their own positions until their partitions move)")
	}
	now := s.deps.Now()
	var out []PartitionOffset
	var commits []coordinator.OffsetCommit
	for _, p := range slices.Compact(slices.Sorted(slices.Values(parts))) {
		pm := t.Partitions[p]
		bounds, err := s.listOffsets(ctx, req.Credentials, t, pm, SpecLatest, 0)
		if err != nil {
			return nil, err
		}
		var off int64
		switch req.Spec {
		case SpecEarliest:
			off = bounds.LogStartOffset
		case SpecLatest:
			off = bounds.HighWatermark
		case SpecTimestamp:
			at, err := s.listOffsets(ctx, req.Credentials, t, pm, SpecTimestamp, req.TimestampMs)
			if err != nil {
				return nil, err
			}
			if off = at.Offset; off < 0 {
				off = bounds.HighWatermark
			}
		default:
			off = min(max(req.Offset, bounds.LogStartOffset), bounds.HighWatermark)
		}
		po := PartitionOffset{Topic: t.Name, Partition: p, Offset: off, LeaderEpoch: -1, Metadata: "reset"}
		out = append(out, po)
		commits = append(commits, coordinator.OffsetCommit{TopicID: t.ID, Offset: po.proto()})
	}
	if err := c.CommitOffsets(ctx, now, req.TenantID, req.Group, commits); err != nil {
		return nil, offsetsError(err)
	}
	return out, nil
}
