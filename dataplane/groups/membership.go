package groups

import (
	"context"
	"math"
	"slices"
	"strings"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/group"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Credentials are on whose behalf the service asks a partition's leader
// (this broker included) for its offsets or records.
type Credentials struct {
	// Authorization is a client's Authorization header, forwarded: the
	// leader checks the client's own token and scopes.
	Authorization string
	// Broker: this broker's own credential, acting for the topic's
	// tenant, for background work no client asked for (the group lag
	// metrics). Leaders accept it for ListOffsets and Fetch only.
	Broker bool
}

// BrokerCredentials act as this broker on behalf of a topic's tenant.
var BrokerCredentials = Credentials{Broker: true}

// PartitionOffset is a group's offset on one partition.
type PartitionOffset struct {
	Topic     string
	Partition int32
	// Offset is the next record to consume; -1: none committed.
	Offset int64
	// LeaderEpoch is the leader epoch of the record before Offset, -1
	// when unknown.
	LeaderEpoch int32
	Metadata    string
}

// proto is o as the coordinator records it.
func (o PartitionOffset) proto() *sluicev1.PartitionOffset {
	return &sluicev1.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch, Metadata: o.Metadata}
}

// TopicPartitions names partitions of one topic.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// Coordinator is where a group's coordinator is.
type Coordinator struct {
	BrokerID int32
	// Address and ExternalAddress are the broker's (cluster.Node).
	Address, ExternalAddress string
}

// FindCoordinator returns the broker that coordinates the group (the
// leader of its offsets partition), wherever that is: CoordinatorNotAvailable
// before the offsets topic exists and while the leader is not reachable,
// LeaderNotAvailable while the partition has none.
func (s *Service) FindCoordinator(tenantID, groupID string) (Coordinator, error) {
	if err := ValidGroup(groupID); err != nil {
		return Coordinator{}, err
	}
	meta := s.deps.View()
	t, ok := offsetsTopic(meta)
	if !ok {
		return Coordinator{}, ErrNoOffsetsTopic
	}
	pm := t.Partitions[coordinator.PartitionOf(tenantID, groupID, len(t.Partitions))]
	if pm.Leader < 0 {
		return Coordinator{}, meta.NotLeader(s.cfg.BrokerID, pm)
	}
	n := meta.Brokers[pm.Leader]
	if n.Address == "" {
		// The leader's lease expired and no new leader is elected yet.
		return Coordinator{}, derr.New(derr.CoordinatorNotAvailable, "group coordinator: broker %d, leader of the group's offsets partition, is not reachable; retry", pm.Leader)
	}
	return Coordinator{BrokerID: pm.Leader, Address: n.Address, ExternalAddress: n.ExternalAddress}, nil
}

// CommitRequest commits a group's offsets: from a member (MemberID,
// InstanceID, MemberEpoch), or, with MemberID "", from outside the group.
type CommitRequest struct {
	TenantID, Group      string
	MemberID, InstanceID string
	MemberEpoch          int32
	Offsets              []PartitionOffset
	// Credentials read the partitions' high watermarks at their leaders.
	Credentials Credentials
}

// CommitOffsets commits the group's offsets, once its coordinator's
// partition has them (acks=all). Each offset is at most its partition's
// high watermark; the committer must be a member that owns the partitions
// at its epoch, or no member (CheckCommitter). A partition with offsets
// pending in an open transaction is refused (UnstableOffsetCommit).
func (s *Service) CommitOffsets(ctx context.Context, req CommitRequest) error {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return err
	}
	commits, err := s.checkCommit(ctx, c, req, true)
	if err != nil {
		return err
	}
	if err := c.CommitOffsets(ctx, s.deps.Now(), req.TenantID, req.Group, commits); err != nil {
		return offsetsError(err)
	}
	return nil
}

// TxnCommitRequest commits a group's offsets inside the producer's
// transaction.
type TxnCommitRequest struct {
	CommitRequest
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int32
	// VerifyOnly: the producer added the group to its transaction itself
	// (Kafka's AddOffsetsToTxn before a TxnOffsetCommit below v5), so its
	// coordinator only checks that it is in it (KIP-890 part 1).
	VerifyOnly bool
	// Unfenced: the producer commits as no member of the group (no
	// MemberID; Kafka's TxnOffsetCommit with generation -1, which
	// sendOffsetsToTransaction(offsets, groupId) before KIP-447 and
	// sarama's AddOffsetsToTxn send). The group does not check the
	// committer, as Kafka's coordinators do not: the producer's epoch
	// fences its zombies (and, before KIP-447, one transactional id per
	// input partition kept two producers off one partition).
	Unfenced bool
}

// TxnCommitOffsets commits a group's offsets inside a transaction
// (KIP-447): after the checks of CommitOffsets (the committer, so a zombie
// member is fenced by the group, unless Unfenced; and each offset against
// its partition's high watermark), the group joins the producer's current transaction at
// its transaction coordinator (Deps.VerifyTransactionGroup), and then the
// group's coordinator writes the offsets as pending offsets of the
// producer (coordinator.TxnCommitOffsets), to become committed offsets at
// the transaction's commit marker.
func (s *Service) TxnCommitOffsets(ctx context.Context, req TxnCommitRequest) error {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return err
	}
	if req.TransactionalID == "" {
		return derr.New(derr.InvalidRequest, "transactional_id: must not be empty")
	}
	if req.ProducerID < 0 {
		return derr.New(derr.InvalidRequest, "producer_id: must not be negative; got %d", req.ProducerID)
	}
	if e := req.ProducerEpoch; e < 0 || e > math.MaxInt16 {
		return derr.New(derr.InvalidRequest, "producer_epoch: must be in [0, %d]; got %d", math.MaxInt16, e)
	}
	if req.Unfenced && req.MemberID != "" {
		return derr.New(derr.InvalidRequest, "member_id: a commit from no member of the group has none; got %q", req.MemberID)
	}
	commits, err := s.checkCommit(ctx, c, req.CommitRequest, !req.Unfenced)
	if err != nil {
		return err
	}
	pid, epoch := req.ProducerID, int16(req.ProducerEpoch)
	if err := s.deps.VerifyTransactionGroup(ctx, req.Credentials, req.TenantID, req.TransactionalID, req.Group, pid, epoch, req.VerifyOnly); err != nil {
		return err
	}
	if err := c.TxnCommitOffsets(ctx, s.deps.Now(), req.TenantID, req.Group, pid, epoch, commits); err != nil {
		return offsetsError(err)
	}
	return nil
}

// maxCommitOffsets bounds the offsets of one commit.
const maxCommitOffsets = 10000

// checkCommit checks a commit of offsets (CommitOffsets, TxnCommitOffsets):
// the request's bounds, the committer (CheckCommitter) when committer is
// set, each offset against its partition's high watermark; it returns the
// commits to write.
func (s *Service) checkCommit(ctx context.Context, c *coordinator.Coordinator, req CommitRequest, committer bool) ([]coordinator.OffsetCommit, error) {
	if len(req.Offsets) == 0 {
		return nil, derr.New(derr.InvalidRequest, "offsets: must not be empty")
	}
	if len(req.Offsets) > maxCommitOffsets {
		return nil, derr.New(derr.InvalidRequest, "offsets: at most %d per request; got %d", maxCommitOffsets, len(req.Offsets))
	}
	if len(req.InstanceID) > MaxGroupName {
		return nil, derr.New(derr.InvalidRequest, "instance_id: at most %d bytes", MaxGroupName)
	}
	offsets := make([]*sluicev1.PartitionOffset, len(req.Offsets))
	for i, po := range req.Offsets {
		offsets[i] = po.proto()
	}
	if committer {
		if err := c.CheckCommitter(req.TenantID, req.Group, req.MemberID, req.InstanceID, req.MemberEpoch, offsets); err != nil {
			return nil, groupError(err)
		}
	}
	meta := s.deps.View()
	commits := make([]coordinator.OffsetCommit, 0, len(offsets))
	seen := map[cluster.PartKey]bool{}
	for i, po := range req.Offsets {
		t, ok := meta.Topic(req.TenantID, po.Topic)
		if !ok {
			return nil, fieldError(i, meta.TopicNotFound(po.Topic))
		}
		if po.Partition < 0 || int(po.Partition) >= len(t.Partitions) {
			return nil, derr.New(derr.InvalidRequest, "offsets[%d]: topic %q has partitions 0..%d; got %d", i, po.Topic, len(t.Partitions)-1, po.Partition)
		}
		if po.Offset < 0 {
			return nil, derr.New(derr.InvalidRequest, "offsets[%d]: offset must not be negative; got %d", i, po.Offset)
		}
		if len(po.Metadata) > 4096 {
			return nil, derr.New(derr.InvalidRequest, "offsets[%d]: metadata is at most 4096 bytes; got %d", i, len(po.Metadata))
		}
		tk := cluster.PartKey{TopicID: t.ID, Partition: po.Partition}
		if seen[tk] {
			return nil, derr.New(derr.InvalidRequest, "offsets[%d]: topic %q partition %d appears twice", i, po.Topic, po.Partition)
		}
		seen[tk] = true
		bounds, err := s.listOffsets(ctx, req.Credentials, t, t.Partitions[po.Partition], SpecLatest, 0)
		if err != nil {
			return nil, err
		}
		if hw := bounds.HighWatermark; po.Offset > hw {
			return nil, derr.New(derr.OffsetOutOfRange, "offsets[%d]: offset %d is beyond the end of topic %q partition %d (high watermark %d)", i, po.Offset, po.Topic, po.Partition, hw)
		}
		po.Topic = t.Name
		commits = append(commits, coordinator.OffsetCommit{TopicID: t.ID, Offset: po.proto()})
	}
	return commits, nil
}

// fieldError is err, a domain error, about request field offsets[i]: the
// same kind, its text after the field's name.
func fieldError(i int, err error) error {
	kind, _ := derr.KindOf(err)
	return derr.New(kind, "offsets[%d]: %s", i, err.Error())
}

// FetchOffsetsRequest asks for a group's committed offsets: of the
// partitions named, or, with none, of every partition it has one for.
type FetchOffsetsRequest struct {
	TenantID, Group string
	Partitions      []TopicPartitions
}

// FetchOffsets returns the group's committed offsets: with partitions
// named, one per partition in the request's order (Offset and LeaderEpoch
// -1 where the group has none); otherwise every committed offset of the
// group on a topic that still exists, by topic and partition. A partition
// with offsets pending in an open transaction (any of the group's, with
// none named) is refused (UnstableOffsetCommit), so that a consumer taking
// it over does not resume from before the transaction.
func (s *Service) FetchOffsets(ctx context.Context, req FetchOffsetsRequest) ([]PartitionOffset, error) {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return nil, err
	}
	meta := s.deps.View()
	var out []PartitionOffset
	if len(req.Partitions) == 0 {
		committed, err := c.StableOffsets(req.TenantID, req.Group, nil)
		if err != nil {
			return nil, offsetsError(err)
		}
		for k, co := range committed {
			t, ok := meta.ByID[k.TopicID]
			if !ok || t.TenantID != req.TenantID {
				continue // the topic was deleted since
			}
			o := co.Offset
			out = append(out, PartitionOffset{Topic: t.Name, Partition: o.GetPartition(), Offset: o.GetOffset(), LeaderEpoch: o.GetLeaderEpoch(), Metadata: o.GetMetadata()})
		}
		slices.SortFunc(out, func(a, b PartitionOffset) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
		return out, nil
	}
	var keys []coordinator.TopicPartition
	for _, tp := range req.Partitions {
		t, ok := meta.Topic(req.TenantID, tp.Topic)
		if !ok {
			return nil, meta.TopicNotFound(tp.Topic)
		}
		for _, p := range tp.Partitions {
			if p < 0 || int(p) >= len(t.Partitions) {
				return nil, derr.New(derr.InvalidRequest, "topic %q has partitions 0..%d; got %d", t.Name, len(t.Partitions)-1, p)
			}
			out = append(out, PartitionOffset{Topic: t.Name, Partition: p, Offset: -1, LeaderEpoch: -1})
			keys = append(keys, coordinator.TopicPartition{TopicID: t.ID, Partition: p})
		}
	}
	committed, err := c.StableOffsets(req.TenantID, req.Group, keys)
	if err != nil {
		return nil, offsetsError(err)
	}
	for i, k := range keys {
		if co, ok := committed[k]; ok {
			o := &out[i]
			o.Offset, o.LeaderEpoch, o.Metadata = co.Offset.GetOffset(), co.Offset.GetLeaderEpoch(), co.Offset.GetMetadata()
		}
	}
	return out, nil
}

// HeartbeatRequest is one member's heartbeat (KIP-848's
// ConsumerGroupHeartbeat).
type HeartbeatRequest struct {
	TenantID, Group string
	// Assignor names the group's assignor, used when the heartbeat
	// creates the group ("" for the default).
	Assignor string
	// Member is the member's heartbeat: its id and epoch, its
	// subscriptions and the partitions it owns (nil: unchanged).
	Member group.HeartbeatRequest
}

// Heartbeat runs one member heartbeat at the group's coordinator,
// creating the group on first use (if admitted), and answers the member's
// id, epoch, next heartbeat and full assignment.
func (s *Service) Heartbeat(ctx context.Context, req HeartbeatRequest) (group.HeartbeatResponse, error) {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return group.HeartbeatResponse{}, err
	}
	if req.Member.RebalanceTimeout < 0 {
		return group.HeartbeatResponse{}, derr.New(derr.InvalidRequest, "rebalance_timeout_ms: must not be negative; got %d", req.Member.RebalanceTimeout.Milliseconds())
	}
	if len(req.Member.InstanceID) > MaxGroupName {
		return group.HeartbeatResponse{}, derr.New(derr.InvalidRequest, "instance_id: at most %d bytes", MaxGroupName)
	}
	res, err := c.Heartbeat(ctx, s.deps.Now(), req.TenantID, req.Group, req.Assignor, topicsOf(s.deps.View(), req.TenantID), req.Member)
	if err != nil {
		return group.HeartbeatResponse{}, groupError(err)
	}
	return res, nil
}

// LeaveRequest removes a member: by member id, or a static member by
// instance id.
type LeaveRequest struct {
	TenantID, Group      string
	MemberID, InstanceID string
}

// LeaveGroup removes a member from the group at once (its partitions go
// to the others at their next heartbeat).
func (s *Service) LeaveGroup(ctx context.Context, req LeaveRequest) error {
	c, err := s.call(ctx, req.TenantID, req.Group)
	if err != nil {
		return err
	}
	if req.MemberID == "" && req.InstanceID == "" {
		return derr.New(derr.InvalidRequest, "member_id or instance_id: one must be set")
	}
	if err := c.Leave(s.deps.Now(), req.TenantID, req.Group, req.MemberID, req.InstanceID); err != nil {
		return groupError(err)
	}
	return nil
}
