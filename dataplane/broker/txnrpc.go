package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// The TransactionService and InitProducerId's transactional half: each
// call is answered by the transactional id's coordinator (txn.go), and
// forwarded to it from any other broker.

// transactionService implements sluicev1connect.TransactionServiceHandler.
type transactionService struct {
	sluicev1connect.UnimplementedTransactionServiceHandler
	b *Broker
}

func (s *transactionService) FindTransactionCoordinator(ctx context.Context, req *connect.Request[sluicev1.FindTransactionCoordinatorRequest]) (*connect.Response[sluicev1.FindTransactionCoordinatorResponse], error) {
	tenantID, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	id := req.Msg.GetTransactionalId()
	if err := validTransactionalID(id); err != nil {
		return nil, err
	}
	meta := s.b.metadata()
	t, ok := meta.Topic(systemTenantID, txnStateTopic)
	if !ok || len(t.Partitions) == 0 {
		return nil, errNoTxnTopic
	}
	pm := t.Partitions[txn.PartitionOf(tenantID, id, len(t.Partitions))]
	if pm.Leader < 0 {
		return nil, toConnect(s.b.notLeader(pm))
	}
	addr := meta.Brokers[pm.Leader].Address
	if addr == "" {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("transaction coordinator: broker %d, leader of the transactional id's partition, is not reachable; retry", pm.Leader))
	}
	return connect.NewResponse(&sluicev1.FindTransactionCoordinatorResponse{BrokerId: pm.Leader, Address: addr}), nil
}

// groupsNeedConsume refuses an AddPartitionsToTransaction naming groups
// when the caller's token lacks the consume scope (the rule in auth.go asks
// only for produce, which adding partitions needs): putting a group's
// offsets in a transaction is committing them, as TxnCommitOffsets, which
// needs both (Kafka's AddOffsetsToTxn needs Read on the group too).
func groupsNeedConsume(ctx context.Context, groups int) error {
	if groups == 0 {
		return nil
	}
	if p, ok := tenants.PrincipalFrom(ctx); ok && p.Kind == tenants.PrincipalTenant && !p.Has(tenants.ScopeConsume) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("groups: adding a group's offsets to a transaction needs the %q scope", tenants.ScopeConsume))
	}
	return nil
}

// maxTxnPartitions bounds the partitions of one AddPartitionsToTransaction.
const maxTxnPartitions = 10000

func (s *transactionService) AddPartitionsToTransaction(ctx context.Context, req *connect.Request[sluicev1.AddPartitionsToTransactionRequest]) (*connect.Response[sluicev1.AddPartitionsToTransactionResponse], error) {
	m := req.Msg
	if err := groupsNeedConsume(ctx, len(m.GetGroups())); err != nil {
		return nil, err
	}
	c, tenantID, pm, fwd, err := s.b.txnCall(ctx, req.Header(), m.GetTransactionalId())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).txn.AddPartitionsToTransaction)
	}
	if err != nil {
		return nil, err
	}
	if err := validProducer(m.GetProducerId(), m.GetProducerEpoch()); err != nil {
		return nil, err
	}
	meta := s.b.metadata()
	var tps []txn.TopicPartition
	for i, tp := range m.GetTopics() {
		t, ok := meta.Topic(tenantID, tp.GetTopic())
		if !ok {
			e := unknownTopic(meta, tp.GetTopic())
			return nil, connect.NewError(e.Code(), fmt.Errorf("topics[%d]: %s", i, e.Message()))
		}
		if len(tp.GetPartitions()) == 0 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("topics[%d]: partitions must not be empty", i))
		}
		for _, p := range tp.GetPartitions() {
			if p < 0 || int(p) >= len(t.Partitions) {
				e := unknownPartition(t, p)
				return nil, connect.NewError(e.Code(), fmt.Errorf("topics[%d]: %s", i, e.Message()))
			}
			tps = append(tps, txn.TopicPartition{TopicID: t.ID, Partition: p})
		}
		if len(tps) > maxTxnPartitions {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("topics: at most %d partitions per request", maxTxnPartitions))
		}
	}
	for i, g := range m.GetGroups() {
		if err := validGroup(g); err != nil {
			var ce *connect.Error
			errors.As(err, &ce)
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("groups[%d]: %s", i, ce.Message()))
		}
	}
	if len(tps) == 0 && len(m.GetGroups()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("topics or groups: at least one must be set"))
	}
	if err := c.Add(ctx, tenantID, m.GetTransactionalId(), m.GetProducerId(), int16(m.GetProducerEpoch()), tps, m.GetGroups()); err != nil {
		return nil, txnError(err)
	}
	return connect.NewResponse(&sluicev1.AddPartitionsToTransactionResponse{}), nil
}

func (s *transactionService) EndTransaction(ctx context.Context, req *connect.Request[sluicev1.EndTransactionRequest]) (*connect.Response[sluicev1.EndTransactionResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.b.txnCall(ctx, req.Header(), m.GetTransactionalId())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).txn.EndTransaction)
	}
	if err != nil {
		return nil, err
	}
	if err := validProducer(m.GetProducerId(), m.GetProducerEpoch()); err != nil {
		return nil, err
	}
	pid, epoch, err := c.EndTransaction(ctx, tenantID, m.GetTransactionalId(), m.GetProducerId(), int16(m.GetProducerEpoch()), m.GetCommit())
	if err != nil {
		return nil, txnError(err)
	}
	return connect.NewResponse(&sluicev1.EndTransactionResponse{ProducerId: pid, ProducerEpoch: int32(epoch)}), nil
}

// ListTransactions asks every broker that coordinates transactional ids
// (any broker forwards to all of them; with the no-forward header it
// answers for itself only), as ListGroups does.
func (s *transactionService) ListTransactions(ctx context.Context, req *connect.Request[sluicev1.ListTransactionsRequest]) (*connect.Response[sluicev1.ListTransactionsResponse], error) {
	tenantID, err := tenantOf(ctx)
	if err != nil {
		return nil, err
	}
	local := func() ([]*sluicev1.TransactionDescription, error) {
		coords, err := s.b.localTxnCoordinators(ctx)
		if err != nil {
			return nil, toConnect(err)
		}
		meta := s.b.metadata()
		var out []*sluicev1.TransactionDescription
		for _, c := range coords {
			for k, t := range c.Transactions() {
				if k.Tenant == tenantID {
					out = append(out, describeTxn(meta, k, t, s.b.cfg.ID))
				}
			}
		}
		return out, nil
	}
	all, err := askCoordinators(ctx, s.b, req, txnStateTopic, errNoTxnTopic, "list transactions", local,
		func(id int32) func(context.Context, *connect.Request[sluicev1.ListTransactionsRequest]) (*connect.Response[sluicev1.ListTransactionsResponse], error) {
			return s.b.peer(id).txn.ListTransactions
		},
		(*sluicev1.ListTransactionsResponse).GetTransactions, (*sluicev1.TransactionDescription).GetTransactionalId)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ListTransactionsResponse{Transactions: all}), nil
}

func (s *transactionService) DescribeTransaction(ctx context.Context, req *connect.Request[sluicev1.DescribeTransactionRequest]) (*connect.Response[sluicev1.DescribeTransactionResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.b.txnCall(ctx, req.Header(), m.GetTransactionalId())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).txn.DescribeTransaction)
	}
	if err != nil {
		return nil, err
	}
	t, ok := c.Describe(tenantID, m.GetTransactionalId())
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("transactional id %q not found", m.GetTransactionalId()))
	}
	return connect.NewResponse(&sluicev1.DescribeTransactionResponse{Transaction: describeTxn(s.b.metadata(), txn.Key{Tenant: tenantID, TransactionalID: m.GetTransactionalId()}, t, s.b.cfg.ID)}), nil
}

// describeTxn is a transactional id's state for a client: topics by name
// (those deleted since are left out).
func describeTxn(meta *cluster.View, k txn.Key, t txn.Transaction, coordinatorID int32) *sluicev1.TransactionDescription {
	d := &sluicev1.TransactionDescription{
		TransactionalId: k.TransactionalID, TenantId: k.Tenant, ProducerId: t.ProducerID, ProducerEpoch: int32(t.Epoch),
		State: sluicev1.TxnState(t.State), TimeoutMs: t.Timeout.Milliseconds(), Groups: t.Groups,
		StartTimeMs: timeMs(t.StartTime), UpdateTimeMs: timeMs(t.UpdateTime), CoordinatorId: coordinatorID,
	}
	for _, tp := range t.Partitions { // sorted by topic id, then partition
		tm, ok := meta.ByID[tp.TopicID]
		if !ok {
			continue
		}
		if n := len(d.Topics); n > 0 && d.Topics[n-1].GetTopic() == tm.Name {
			d.Topics[n-1].Partitions = append(d.Topics[n-1].Partitions, tp.Partition)
			continue
		}
		d.Topics = append(d.Topics, &sluicev1.TransactionPartitions{Topic: tm.Name, Partitions: []int32{tp.Partition}})
	}
	slices.SortFunc(d.Topics, func(a, b *sluicev1.TransactionPartitions) int { return strings.Compare(a.GetTopic(), b.GetTopic()) })
	return d
}

func timeMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// initTransactionalProducer is InitProducerId with a transactional id:
// answered by the id's coordinator (forwarded there).
func (s *recordService) initTransactionalProducer(ctx context.Context, req *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.b.txnCall(ctx, req.Header(), m.GetTransactionalId())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).record.InitProducerId)
	}
	if err != nil {
		return nil, err
	}
	timeout, err := s.b.transactionTimeout(m.GetTransactionTimeoutMs())
	if err != nil {
		return nil, err
	}
	pid, epoch, err := c.InitProducer(ctx, tenantID, m.GetTransactionalId(), timeout)
	if err != nil {
		return nil, txnError(err)
	}
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: pid, ProducerEpoch: int32(epoch)}), nil
}
