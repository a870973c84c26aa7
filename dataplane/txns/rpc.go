package txns

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/tenants/system"
)

// The transactional calls: each is answered by the transactional id's
// coordinator when this broker hosts it, else with the lookup's
// NotLeaderError naming its broker (see the package doc). TenantID is the
// caller's tenant (from its credential), which every id is resolved under.

// Producer is the producer id and epoch a transactional producer uses.
type Producer struct {
	ID    int64
	Epoch int16
}

// Coordinator is where a transactional id's coordinator is.
type Coordinator struct {
	BrokerID int32
	// Address and ExternalAddress are the broker's (cluster.Node).
	Address, ExternalAddress string
}

// FindCoordinator returns the broker coordinating the transactional id, as
// this broker's view knows it: NotLeader (offline) when its partition has
// no leader.
func (s *Service) FindCoordinator(ctx context.Context, tenantID, transactionalID string) (Coordinator, error) {
	if err := validTransactionalID(transactionalID); err != nil {
		return Coordinator{}, err
	}
	meta := s.deps.View()
	t, ok := meta.Topic(system.TenantID, system.TransactionStateTopic)
	if !ok || len(t.Partitions) == 0 {
		return Coordinator{}, ErrNoTopic
	}
	pm := t.Partitions[txn.PartitionOf(tenantID, transactionalID, len(t.Partitions))]
	if pm.Leader < 0 {
		return Coordinator{}, meta.NotLeader(s.cfg.BrokerID, pm)
	}
	n := meta.Brokers[pm.Leader]
	if n.Address == "" {
		return Coordinator{}, derr.New(derr.CoordinatorNotAvailable, "transaction coordinator: broker %d, leader of the transactional id's partition, is not reachable; retry", pm.Leader)
	}
	return Coordinator{BrokerID: pm.Leader, Address: n.Address, ExternalAddress: n.ExternalAddress}, nil
}

// InitRequest is InitProducerId with a transactional id.
type InitRequest struct {
	TenantID, TransactionalID string
	// TimeoutMs is the transaction timeout asked: 0 is the coordinator's
	// default (60 s, or Config.MaxTransactionTimeout if shorter).
	TimeoutMs int64
	// Expect, when set, is the producer id and epoch the caller has
	// (Kafka's InitProducerId v3+, KIP-360): only the id's current
	// producer may ask, else ProducerFenced (txn.Shard.InitProducer).
	Expect *Producer
}

// InitProducer gives the transactional id's new producer incarnation its
// producer id and epoch, fencing the older ones (txn.Coordinator's
// InitProducer); a new id passes the quota admission.
func (s *Service) InitProducer(ctx context.Context, req InitRequest) (Producer, error) {
	if err := validTransactionalID(req.TransactionalID); err != nil {
		return Producer{}, err
	}
	c, _, err := s.coordinatorFor(ctx, req.TenantID, req.TransactionalID)
	if err != nil {
		return Producer{}, err
	}
	timeout, err := s.transactionTimeout(req.TimeoutMs)
	if err != nil {
		return Producer{}, err
	}
	var expect *txn.Producer
	if e := req.Expect; e != nil {
		expect = &txn.Producer{ID: e.ID, Epoch: e.Epoch}
	}
	pid, epoch, err := c.InitProducer(ctx, req.TenantID, req.TransactionalID, timeout, expect)
	if err != nil {
		return Producer{}, txnError(err)
	}
	return Producer{ID: pid, Epoch: epoch}, nil
}

// transactionTimeout checks InitProducer's transaction timeout (0: the
// coordinator's default) against --max-transaction-timeout.
func (s *Service) transactionTimeout(ms int64) (time.Duration, error) {
	if maxTimeout := s.cfg.MaxTransactionTimeout; ms < 0 || ms > maxTimeout.Milliseconds() {
		return 0, &derr.Error{Kind: derr.InvalidTransactionTimeout, Txn: derr.TxnReasonInvalidTimeout,
			Err: fmt.Errorf("transaction_timeout_ms: must be between 1 and %d (--max-transaction-timeout %s), or 0 for the default (60 s, at most the maximum); got %d", maxTimeout.Milliseconds(), maxTimeout, ms)}
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// TopicPartitions are partitions of a topic, by name.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// AddRequest adds partitions (by topic name, in the tenant) and groups
// (whose offsets the producer commits in the transaction) to the
// producer's current transaction: AddPartitionsToTransaction, Kafka's
// AddPartitionsToTxn and AddOffsetsToTxn.
type AddRequest struct {
	TenantID, TransactionalID string
	ProducerID                int64
	ProducerEpoch             int32
	Topics                    []TopicPartitions
	Groups                    []string
	// VerifyOnly checks that the partitions and groups are in the
	// transaction already, adding nothing (txn.Coordinator.Verify: the
	// verification of a write of a Kafka client that adds them itself).
	VerifyOnly bool
}

// maxAddPartitions bounds the partitions of one AddPartitions.
const maxAddPartitions = 10000

// AddPartitions adds req's partitions and groups to the producer's
// transaction, all or none: a group needs the caller's consume scope, and
// the transaction stays within its tenant's bounds.
func (s *Service) AddPartitions(ctx context.Context, req AddRequest) error {
	if err := groupsNeedConsume(ctx, len(req.Groups)); err != nil {
		return err
	}
	if err := validTransactionalID(req.TransactionalID); err != nil {
		return err
	}
	c, _, err := s.coordinatorFor(ctx, req.TenantID, req.TransactionalID)
	if err != nil {
		return err
	}
	if err := validProducer(req.ProducerID, req.ProducerEpoch); err != nil {
		return err
	}
	meta := s.deps.View()
	var tps []txn.TopicPartition
	for i, tp := range req.Topics {
		t, ok := meta.Topic(req.TenantID, tp.Topic)
		if !ok {
			return within(fmt.Sprintf("topics[%d]", i), meta.TopicNotFound(tp.Topic))
		}
		if len(tp.Partitions) == 0 {
			return derr.New(derr.InvalidRequest, "topics[%d]: partitions must not be empty", i)
		}
		for _, p := range tp.Partitions {
			if p < 0 || int(p) >= len(t.Partitions) {
				return within(fmt.Sprintf("topics[%d]", i), cluster.PartitionNotFound(t, p))
			}
			tps = append(tps, txn.TopicPartition{TopicID: t.ID, Partition: p})
		}
		if len(tps) > maxAddPartitions {
			return derr.New(derr.InvalidRequest, "topics: at most %d partitions per request", maxAddPartitions)
		}
	}
	for i, g := range req.Groups {
		if err := validName("group", g); err != nil {
			return within(fmt.Sprintf("groups[%d]", i), err)
		}
	}
	if len(tps) == 0 && len(req.Groups) == 0 {
		return derr.New(derr.InvalidRequest, "topics or groups: at least one must be set")
	}
	if req.VerifyOnly {
		return txnError(c.Verify(req.TenantID, req.TransactionalID, req.ProducerID, int16(req.ProducerEpoch), tps, req.Groups))
	}
	return txnError(c.Add(ctx, req.TenantID, req.TransactionalID, req.ProducerID, int16(req.ProducerEpoch), tps, req.Groups))
}

// within is err (a domain error) about field of a request: its kind, its
// message prefixed with the field.
func within(field string, err error) error {
	k, _ := derr.KindOf(err)
	return &derr.Error{Kind: k, Err: fmt.Errorf("%s: %s", field, err.Error())}
}

// EndRequest commits or aborts the producer's current transaction.
type EndRequest struct {
	TenantID, TransactionalID string
	ProducerID                int64
	ProducerEpoch             int32
	Commit                    bool
	// KeepEpoch ends the transaction without bumping the epoch
	// (txn.KeepEpoch: Kafka's EndTxn before v5).
	KeepEpoch bool
}

// EndTransaction ends the producer's transaction (txn.Coordinator's
// EndTransaction) and returns the producer id and epoch to go on with,
// once every marker is written (the same with KeepEpoch).
func (s *Service) EndTransaction(ctx context.Context, req EndRequest) (Producer, error) {
	if err := validTransactionalID(req.TransactionalID); err != nil {
		return Producer{}, err
	}
	c, _, err := s.coordinatorFor(ctx, req.TenantID, req.TransactionalID)
	if err != nil {
		return Producer{}, err
	}
	if err := validProducer(req.ProducerID, req.ProducerEpoch); err != nil {
		return Producer{}, err
	}
	mode := txn.BumpEpoch
	if req.KeepEpoch {
		mode = txn.KeepEpoch
	}
	pid, epoch, err := c.EndTransaction(ctx, req.TenantID, req.TransactionalID, req.ProducerID, int16(req.ProducerEpoch), req.Commit, mode)
	if err != nil {
		return Producer{}, txnError(err)
	}
	return Producer{ID: pid, Epoch: epoch}, nil
}

// Description is a transactional id's state, for a client.
type Description struct {
	TenantID, TransactionalID string
	ProducerID                int64
	ProducerEpoch             int16
	State                     txn.State
	Timeout                   time.Duration
	// Topics are the partitions in the transaction by topic name, sorted
	// (those of topics deleted since are left out); Groups the groups.
	Topics                []TopicPartitions
	Groups                []string
	StartTime, UpdateTime time.Time
	// CoordinatorID is the broker that answered.
	CoordinatorID int32
}

// Describe returns the transactional id's state: TransactionalIDNotFound
// for an id its coordinator does not know.
func (s *Service) Describe(ctx context.Context, tenantID, transactionalID string) (Description, error) {
	if err := validTransactionalID(transactionalID); err != nil {
		return Description{}, err
	}
	c, _, err := s.coordinatorFor(ctx, tenantID, transactionalID)
	if err != nil {
		return Description{}, err
	}
	t, ok := c.Describe(tenantID, transactionalID)
	if !ok {
		return Description{}, derr.New(derr.TransactionalIDNotFound, "transactional id %q not found", transactionalID)
	}
	return s.describe(s.deps.View(), txn.Key{Tenant: tenantID, TransactionalID: transactionalID}, t), nil
}

// ListLocal returns the tenant's transactional ids at the coordinators
// this broker hosts (the whole list is every coordinator's: the adapters
// ask each broker).
func (s *Service) ListLocal(ctx context.Context, tenantID string) ([]Description, error) {
	coords, err := s.local(ctx)
	if err != nil {
		return nil, err
	}
	meta := s.deps.View()
	var out []Description
	for _, c := range coords {
		for k, t := range c.Transactions() {
			if k.Tenant == tenantID {
				out = append(out, s.describe(meta, k, t))
			}
		}
	}
	return out, nil
}

// ListAll returns the transactional ids of every tenant (or of tenantID
// when set, or only transactionalID when set) at the coordinators this
// broker hosts: the operator's list (ReplicaService.ListAllTransactions),
// which the control plane asks every broker for and merges. The caller is
// the broker credential only.
func (s *Service) ListAll(ctx context.Context, tenantID, transactionalID string) ([]Description, error) {
	coords, err := s.local(ctx)
	if err != nil {
		return nil, err
	}
	meta := s.deps.View()
	var out []Description
	for _, c := range coords {
		if tenantID != "" && transactionalID != "" {
			// One id: a lookup, not a copy of every state.
			if t, ok := c.Describe(tenantID, transactionalID); ok {
				out = append(out, s.describe(meta, txn.Key{Tenant: tenantID, TransactionalID: transactionalID}, t))
			}
			continue
		}
		for k, t := range c.Transactions() {
			if (tenantID == "" || k.Tenant == tenantID) && (transactionalID == "" || k.TransactionalID == transactionalID) {
				out = append(out, s.describe(meta, k, t))
			}
		}
	}
	return out, nil
}

// describe is a transactional id's state for a client: topics by name
// (those deleted since are left out).
func (s *Service) describe(meta *cluster.View, k txn.Key, t txn.Transaction) Description {
	d := Description{
		TransactionalID: k.TransactionalID, TenantID: k.Tenant, ProducerID: t.ProducerID, ProducerEpoch: t.Epoch,
		State: t.State, Timeout: t.Timeout, Groups: t.Groups,
		StartTime: t.StartTime, UpdateTime: t.UpdateTime, CoordinatorID: s.cfg.BrokerID,
	}
	for _, tp := range t.Partitions { // sorted by topic id, then partition
		tm, ok := meta.ByID[tp.TopicID]
		if !ok {
			continue
		}
		if n := len(d.Topics); n > 0 && d.Topics[n-1].Topic == tm.Name {
			d.Topics[n-1].Partitions = append(d.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		d.Topics = append(d.Topics, TopicPartitions{Topic: tm.Name, Partitions: []int32{tp.Partition}})
	}
	slices.SortFunc(d.Topics, func(a, b TopicPartitions) int { return strings.Compare(a.Topic, b.Topic) })
	return d
}
