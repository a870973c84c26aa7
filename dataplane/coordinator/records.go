package coordinator

import (
	"fmt"
	"hash/fnv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/runtime"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// PartitionOf is the offsets-topic partition, of partitions, that
// coordinates a tenant's group. The mapping is part of the offsets topic's
// format: a group's records are in this partition, so changing it would
// orphan them.
func PartitionOf(tenantID, group string, partitions int) int32 {
	h := fnv.New32a()
	h.Write([]byte(tenantID))
	h.Write([]byte{0})
	h.Write([]byte(group))
	return int32(h.Sum32() % uint32(partitions))
}

// recordOffset is a committed offset as the offsets topic's records hold
// it.
func recordOffset(po *sluicev1.PartitionOffset) *coordinatorv1.CommittedOffset {
	if po == nil {
		return nil
	}
	return &coordinatorv1.CommittedOffset{Topic: po.GetTopic(), Partition: po.GetPartition(), Offset: po.GetOffset(), LeaderEpoch: po.GetLeaderEpoch(), Metadata: po.GetMetadata()}
}

// partitionOffset is a record's committed offset as the API answers it.
func partitionOffset(co *coordinatorv1.CommittedOffset) *sluicev1.PartitionOffset {
	if co == nil {
		return nil
	}
	return &sluicev1.PartitionOffset{Topic: co.GetTopic(), Partition: co.GetPartition(), Offset: co.GetOffset(), LeaderEpoch: co.GetLeaderEpoch(), Metadata: co.GetMetadata()}
}

// groupRecord is one record to write to the offsets partition: a
// GroupRecordKey and, except for a group's deletion, a GroupRecordValue.
type groupRecord struct {
	key   *coordinatorv1.GroupRecordKey
	value *coordinatorv1.GroupRecordValue
}

// offsetRecord commits one partition's offset.
func offsetRecord(tenantID, groupID string, oc OffsetCommit, now time.Time) groupRecord {
	return groupRecord{
		key: &coordinatorv1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &coordinatorv1.GroupRecordKey_Offset{
			Offset: &coordinatorv1.OffsetKey{TopicId: oc.TopicID, Topic: oc.Offset.GetTopic(), Partition: oc.Offset.GetPartition()},
		}},
		value: &coordinatorv1.GroupRecordValue{Offset: recordOffset(oc.Offset), CommitTimeMs: now.UnixMilli()},
	}
}

// offsetDeletedRecord deletes one partition's committed offset: the offset
// key with no value, a tombstone.
func offsetDeletedRecord(tenantID, groupID string, d OffsetDeletion) groupRecord {
	return groupRecord{key: &coordinatorv1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &coordinatorv1.GroupRecordKey_Offset{
		Offset: &coordinatorv1.OffsetKey{TopicId: d.TopicID, Topic: d.Topic, Partition: d.Partition},
	}}}
}

// staticMemberRecord records the member id of a static member's latest
// incarnation.
func staticMemberRecord(tenantID, groupID, instanceID, memberID string, now time.Time) groupRecord {
	return groupRecord{
		key: &coordinatorv1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &coordinatorv1.GroupRecordKey_StaticMember{
			StaticMember: &coordinatorv1.StaticMemberKey{InstanceId: instanceID},
		}},
		value: &coordinatorv1.GroupRecordValue{MemberId: memberID, CommitTimeMs: now.UnixMilli()},
	}
}

// groupDeletedRecord deletes a group: its offsets and incarnations.
func groupDeletedRecord(tenantID, groupID string) groupRecord {
	return groupRecord{key: &coordinatorv1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &coordinatorv1.GroupRecordKey_GroupDeleted{GroupDeleted: true}}}
}

// encode is r as a record of the offsets partition.
func (r groupRecord) encode() (runtime.Record, error) {
	k, err := proto.Marshal(r.key)
	if err != nil {
		return runtime.Record{}, err
	}
	var v []byte
	if r.value != nil {
		if v, err = proto.Marshal(r.value); err != nil {
			return runtime.Record{}, err
		}
	}
	return runtime.Record{Key: k, Value: v}, nil
}

// encodeAll is recs as records of the offsets partition.
func encodeAll(recs []groupRecord) ([]runtime.Record, error) {
	out := make([]runtime.Record, len(recs))
	for i, r := range recs {
		var err error
		if out[i], err = r.encode(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeGroupRecord reads one record of the offsets partition.
func decodeGroupRecord(r runtime.Record) (*coordinatorv1.GroupRecordKey, *coordinatorv1.GroupRecordValue, error) {
	k := &coordinatorv1.GroupRecordKey{}
	if err := proto.Unmarshal(r.Key, k); err != nil {
		return nil, nil, fmt.Errorf("record key: %w", err)
	}
	if r.Value == nil {
		return k, nil, nil // a deletion
	}
	v := &coordinatorv1.GroupRecordValue{}
	if err := proto.Unmarshal(r.Value, v); err != nil {
		return nil, nil, fmt.Errorf("record value: %w", err)
	}
	return k, v, nil
}

// state is what a coordinator rebuilds from its offsets partition and
// keeps up to date with its own writes: records apply to it in log order.
type state struct {
	groups map[GroupKey]*groupState
	// fences: per (group, producer id), the last transaction marker
	// applied (TxnCommitOffsets and WriteTxnMarker check against it).
	// Kept when the group is deleted, so a late commit of an ended
	// transaction stays fenced.
	fences map[producerKey]fence
	// deleted: the log offset of each group's last deletion, so that a
	// record older in the log, applied after it (a concurrent write
	// returning later), does not bring the group back.
	deleted map[GroupKey]int64
}

func newState() state {
	return state{groups: map[GroupKey]*groupState{}, fences: map[producerKey]fence{}, deleted: map[GroupKey]int64{}}
}

// group returns gk's state, creating it.
func (st *state) group(gk GroupKey) *groupState {
	g := st.groups[gk]
	if g == nil {
		g = &groupState{offsets: map[TopicPartition]Committed{}}
		st.groups[gk] = g
	}
	return g
}

// apply applies one record (v nil: a deletion); a record older (in the
// log) than what a key holds is ignored, so concurrent commits resolve in
// log order, and so is one older than the group's deletion or than its
// offset's.
func (st *state) apply(logOffset int64, k *coordinatorv1.GroupRecordKey, v *coordinatorv1.GroupRecordValue) {
	gk := GroupKey{k.GetTenantId(), k.GetGroup()}
	if del, ok := st.deleted[gk]; ok && logOffset < del {
		if _, marker := k.GetKind().(*coordinatorv1.GroupRecordKey_TxnMarker); !marker {
			return // a marker's fence outlives the group
		}
	}
	switch kind := k.GetKind().(type) {
	case *coordinatorv1.GroupRecordKey_GroupDeleted:
		delete(st.groups, gk)
		st.deleted[gk] = logOffset
	case *coordinatorv1.GroupRecordKey_StaticMember:
		g := st.group(gk)
		if g.instances == nil {
			g.instances = map[string]string{}
		}
		g.instances[kind.StaticMember.GetInstanceId()] = v.GetMemberId()
	case *coordinatorv1.GroupRecordKey_Offset:
		g := st.group(gk)
		tk := TopicPartition{kind.Offset.GetTopicId(), kind.Offset.GetPartition()}
		if cur, ok := g.offsets[tk]; ok && cur.logOffset > logOffset || g.offsetDeletedAfter(tk, logOffset) {
			return
		}
		if v == nil { // deleted (DeleteOffsets)
			delete(g.offsets, tk)
			if g.offsetsDeleted == nil {
				g.offsetsDeleted = map[TopicPartition]int64{}
			}
			g.offsetsDeleted[tk] = logOffset
			return
		}
		g.offsets[tk] = Committed{
			Topic: kind.Offset.GetTopic(), Offset: partitionOffset(v.GetOffset()), logOffset: logOffset,
			CommitTime: time.UnixMilli(v.GetCommitTimeMs()),
		}
	case *coordinatorv1.GroupRecordKey_TxnOffset:
		st.applyTxnOffset(gk, logOffset, kind.TxnOffset, v)
	case *coordinatorv1.GroupRecordKey_TxnMarker:
		st.applyTxnMarker(gk, logOffset, kind.TxnMarker.GetProducerId(), v)
	}
}

// offsetDeletedAfter reports whether tk's offset was deleted at a log
// offset past logOffset.
func (g *groupState) offsetDeletedAfter(tk TopicPartition, logOffset int64) bool {
	at, ok := g.offsetsDeleted[tk]
	return ok && at > logOffset
}
