package txn

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/runtime"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
)

// PartitionOf is the transaction-state partition, of partitions, that
// coordinates a tenant's transactional id. The mapping is part of the
// topic's format: an id's records are in this partition, so changing it
// would orphan them. The "txn\x00" prefix keeps it apart from the group
// coordinator's mapping (coordinator.PartitionOf), so a group and a
// transactional id of the same name need not share a broker.
func PartitionOf(tenantID, transactionalID string, partitions int) int32 {
	h := fnv.New32a()
	h.Write([]byte("txn\x00"))
	h.Write([]byte(tenantID))
	h.Write([]byte{0})
	h.Write([]byte(transactionalID))
	return int32(h.Sum32() % uint32(partitions))
}

// Key names a transactional id: ids are per tenant.
type Key struct{ Tenant, TransactionalID string }

// TopicPartition names a partition in a transaction by topic id.
type TopicPartition struct {
	TopicID   string
	Partition int32
}

func compareTP(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
}

// State is a transactional id's state.
type State int8

const (
	StateEmpty          State = State(coordinatorv1.TxnState_TXN_STATE_EMPTY)
	StateOngoing        State = State(coordinatorv1.TxnState_TXN_STATE_ONGOING)
	StatePrepareCommit  State = State(coordinatorv1.TxnState_TXN_STATE_PREPARE_COMMIT)
	StatePrepareAbort   State = State(coordinatorv1.TxnState_TXN_STATE_PREPARE_ABORT)
	StateCompleteCommit State = State(coordinatorv1.TxnState_TXN_STATE_COMPLETE_COMMIT)
	StateCompleteAbort  State = State(coordinatorv1.TxnState_TXN_STATE_COMPLETE_ABORT)
)

func (s State) String() string {
	switch s {
	case StateEmpty:
		return "Empty"
	case StateOngoing:
		return "Ongoing"
	case StatePrepareCommit:
		return "PrepareCommit"
	case StatePrepareAbort:
		return "PrepareAbort"
	case StateCompleteCommit:
		return "CompleteCommit"
	case StateCompleteAbort:
		return "CompleteAbort"
	}
	return fmt.Sprintf("State(%d)", int8(s))
}

// preparing reports whether s is PrepareCommit or PrepareAbort: an end
// whose markers are not all written.
func (s State) preparing() bool { return s == StatePrepareCommit || s == StatePrepareAbort }

// complete reports whether s is CompleteCommit or CompleteAbort.
func (s State) complete() bool { return s == StateCompleteCommit || s == StateCompleteAbort }

// EndedBy says who ended a transaction.
type EndedBy int8

const (
	EndedByNone    EndedBy = 0
	EndedByClient  EndedBy = EndedBy(coordinatorv1.TxnEndedBy_TXN_ENDED_BY_CLIENT)
	EndedByTimeout EndedBy = EndedBy(coordinatorv1.TxnEndedBy_TXN_ENDED_BY_TIMEOUT)
	EndedByInit    EndedBy = EndedBy(coordinatorv1.TxnEndedBy_TXN_ENDED_BY_INIT)
)

// Transaction is a transactional id's state, as its last record holds it.
type Transaction struct {
	// ProducerID and Epoch are those the producer uses (Empty, Ongoing,
	// Complete*), or during Prepare* those its markers carry: the ended
	// transaction's producer id with its epoch bumped.
	ProducerID int64
	Epoch      int16
	Timeout    time.Duration
	State      State
	// Partitions (sorted) and Groups (sorted) are in the transaction:
	// the open one (Ongoing), the ending or ended one (Prepare*,
	// Complete*).
	Partitions []TopicPartition
	Groups     []string
	// UpdateTime is the last transition's, StartTime the transaction's
	// first partition or group's (zero while Empty).
	UpdateTime, StartTime time.Time
	// NextProducerID: during Prepare* when Epoch is math.MaxInt16, the
	// producer id the producer moves to (at epoch 0) at Complete*; else 0.
	NextProducerID int64
	// LastProducerID and LastEpoch are what the producer of the ended
	// transaction (Prepare*, Complete*) used, EndedBy who ended it; -1,
	// -1 and EndedByNone otherwise.
	LastProducerID int64
	LastEpoch      int16
	EndedBy        EndedBy
}

// clone returns a deep copy of t.
func (t *Transaction) clone() *Transaction {
	c := *t
	c.Partitions = slices.Clone(t.Partitions)
	c.Groups = slices.Clone(t.Groups)
	return &c
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func timeMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func (t *Transaction) toProto() *coordinatorv1.TxnRecordValue {
	v := &coordinatorv1.TxnRecordValue{
		ProducerId: t.ProducerID, ProducerEpoch: int32(t.Epoch), TimeoutMs: t.Timeout.Milliseconds(),
		State: coordinatorv1.TxnState(t.State), Groups: t.Groups,
		UpdateTimeMs: timeMs(t.UpdateTime), StartTimeMs: timeMs(t.StartTime),
		NextProducerId: t.NextProducerID, LastProducerId: t.LastProducerID, LastProducerEpoch: int32(t.LastEpoch),
		EndedBy: coordinatorv1.TxnEndedBy(t.EndedBy),
	}
	for _, tp := range t.Partitions {
		v.Partitions = append(v.Partitions, &coordinatorv1.TxnPartition{TopicId: tp.TopicID, Partition: tp.Partition})
	}
	return v
}

func fromProto(v *coordinatorv1.TxnRecordValue) *Transaction {
	t := &Transaction{
		ProducerID: v.GetProducerId(), Epoch: int16(v.GetProducerEpoch()), Timeout: time.Duration(v.GetTimeoutMs()) * time.Millisecond,
		State: State(v.GetState()), Groups: v.GetGroups(),
		UpdateTime: msTime(v.GetUpdateTimeMs()), StartTime: msTime(v.GetStartTimeMs()),
		NextProducerID: v.GetNextProducerId(), LastProducerID: v.GetLastProducerId(), LastEpoch: int16(v.GetLastProducerEpoch()),
		EndedBy: EndedBy(v.GetEndedBy()),
	}
	for _, p := range v.GetPartitions() {
		t.Partitions = append(t.Partitions, TopicPartition{p.GetTopicId(), p.GetPartition()})
	}
	return t
}

// encodeRecord is the record of k's state t, or its tombstone when t is
// nil.
func encodeRecord(k Key, t *Transaction) (runtime.Record, error) {
	kb, err := proto.Marshal(&coordinatorv1.TxnRecordKey{TenantId: k.Tenant, TransactionalId: k.TransactionalID})
	if err != nil {
		return runtime.Record{}, err
	}
	var vb []byte
	if t != nil {
		if vb, err = proto.Marshal(t.toProto()); err != nil {
			return runtime.Record{}, err
		}
		if vb == nil {
			vb = []byte{} // never null: null is the tombstone
		}
	}
	return runtime.Record{Key: kb, Value: vb}, nil
}

// decodeRecord reads one transaction-state record; a tombstone comes with
// a nil Transaction.
func decodeRecord(r runtime.Record) (Key, *Transaction, error) {
	k := &coordinatorv1.TxnRecordKey{}
	if err := proto.Unmarshal(r.Key, k); err != nil {
		return Key{}, nil, fmt.Errorf("record key: %w", err)
	}
	var t *Transaction
	if r.Value != nil {
		v := &coordinatorv1.TxnRecordValue{}
		if err := proto.Unmarshal(r.Value, v); err != nil {
			return Key{}, nil, fmt.Errorf("record value: %w", err)
		}
		t = fromProto(v)
	}
	return Key{k.GetTenantId(), k.GetTransactionalId()}, t, nil
}
