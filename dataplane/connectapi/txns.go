package connectapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/dataplane/txns"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// Transactions is the TransactionService's Connect adapter over a
// txns.Service, with InitProducerId's transactional half (which the
// RecordService's adapter hands it) and the brokers' ReplicaService calls
// of transactions (WriteTxnMarkers, ListAllTransactions). A call about a
// transactional id that another broker coordinates is forwarded there
// once (unless the caller routes itself: NoForwardHeader), as the
// service's coordinator lookup answers it.
type Transactions struct {
	sluicev1connect.UnimplementedTransactionServiceHandler
	svc  *txns.Service
	deps TransactionsDeps
}

// TransactionsDeps are the adapter's reach to other brokers, which the
// broker wires.
type TransactionsDeps struct {
	// Logger logs the internal errors of WriteTxnMarkers' results (nil
	// discards).
	Logger *slog.Logger
	// Peer is broker id's TransactionService, and RecordPeer its
	// RecordService (InitProducerId), for forwarding.
	Peer       func(id int32) sluicev1connect.TransactionServiceClient
	RecordPeer func(id int32) sluicev1connect.RecordServiceClient
	// Forwarded counts an answer forwarded from another broker (nil:
	// not counted).
	Forwarded func()
	// BrokerID is this broker's id, and View the cluster view, in which
	// ListTransactions finds the brokers that coordinate transactional
	// ids (those leading a transaction-state partition).
	BrokerID int32
	View     func() *cluster.View
}

// NewTransactions returns the adapter of svc.
func NewTransactions(svc *txns.Service, deps TransactionsDeps) *Transactions {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Transactions{svc: svc, deps: deps}
}

// tenant is the caller's tenant.
func (a *Transactions) tenant(ctx context.Context) (string, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return "", errors.New("no tenant principal in context")
	}
	return p.TenantID, nil
}

// elsewhere returns the broker to forward a call to: the coordinator the
// service's lookup named (the outermost domain error of its answer is
// that NotLeader; one from inside an operation is wrapped by the
// coordinator's refusal and answered), unless the caller routes itself.
func (a *Transactions) elsewhere(h http.Header, err error) (int32, bool) {
	nl, ok := derr.Outermost(err, nil).(*partition.NotLeaderError)
	if !ok || !Forwardable(h, nl) {
		return 0, false
	}
	return nl.Leader, true
}

func (a *Transactions) FindTransactionCoordinator(ctx context.Context, req *connect.Request[sluicev1.FindTransactionCoordinatorRequest]) (*connect.Response[sluicev1.FindTransactionCoordinatorResponse], error) {
	tenantID, err := a.tenant(ctx)
	if err != nil {
		return nil, err
	}
	c, err := a.svc.FindCoordinator(ctx, tenantID, req.Msg.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.FindTransactionCoordinatorResponse{BrokerId: c.BrokerID, Address: endpoint.For(ctx, c.Address, c.ExternalAddress)}), nil
}

func (a *Transactions) AddPartitionsToTransaction(ctx context.Context, req *connect.Request[sluicev1.AddPartitionsToTransactionRequest]) (*connect.Response[sluicev1.AddPartitionsToTransactionResponse], error) {
	tenantID, err := a.tenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	add := txns.AddRequest{TenantID: tenantID, TransactionalID: m.GetTransactionalId(), ProducerID: m.GetProducerId(), ProducerEpoch: m.GetProducerEpoch(), Groups: m.GetGroups(), VerifyOnly: m.GetVerifyOnly()}
	for _, tp := range m.GetTopics() {
		add.Topics = append(add.Topics, txns.TopicPartitions{Topic: tp.GetTopic(), Partitions: tp.GetPartitions()})
	}
	err = a.svc.AddPartitions(ctx, add)
	if leader, ok := a.elsewhere(req.Header(), err); ok {
		return Forward(ctx, leader, req, a.deps.Peer(leader).AddPartitionsToTransaction, a.deps.Forwarded)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.AddPartitionsToTransactionResponse{}), nil
}

func (a *Transactions) EndTransaction(ctx context.Context, req *connect.Request[sluicev1.EndTransactionRequest]) (*connect.Response[sluicev1.EndTransactionResponse], error) {
	tenantID, err := a.tenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	p, err := a.svc.EndTransaction(ctx, txns.EndRequest{TenantID: tenantID, TransactionalID: m.GetTransactionalId(), ProducerID: m.GetProducerId(), ProducerEpoch: m.GetProducerEpoch(), Commit: m.GetCommit()})
	if leader, ok := a.elsewhere(req.Header(), err); ok {
		return Forward(ctx, leader, req, a.deps.Peer(leader).EndTransaction, a.deps.Forwarded)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.EndTransactionResponse{ProducerId: p.ID, ProducerEpoch: int32(p.Epoch)}), nil
}

// ListTransactions asks every broker that coordinates transactional ids
// (any broker asks all of them, askCoordinators; with NoForwardHeader it
// answers for itself only), as ListGroups does.
func (a *Transactions) ListTransactions(ctx context.Context, req *connect.Request[sluicev1.ListTransactionsRequest]) (*connect.Response[sluicev1.ListTransactionsResponse], error) {
	tenantID, err := a.tenant(ctx)
	if err != nil {
		return nil, err
	}
	local := func() ([]*sluicev1.TransactionDescription, error) {
		ds, err := a.svc.ListLocal(ctx, tenantID)
		if err != nil {
			return nil, connecterr.ToConnect(err)
		}
		return txnDescriptions(ds), nil
	}
	var all []*sluicev1.TransactionDescription
	if req.Header().Get(NoForwardHeader) == "1" {
		all, err = local()
	} else {
		all, err = cluster.AskLeaders(a.deps.View(), a.deps.BrokerID, system.TransactionStateTopic, txns.ErrNoTopic, "list transactions", local,
			func(id int32) ([]*sluicev1.TransactionDescription, error) {
				res, err := Forward(ctx, id, req, a.deps.Peer(id).ListTransactions, a.deps.Forwarded)
				if err != nil {
					return nil, err
				}
				return res.Msg.GetTransactions(), nil
			},
			(*sluicev1.TransactionDescription).GetTransactionalId)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ListTransactionsResponse{Transactions: all}), nil
}

func (a *Transactions) DescribeTransaction(ctx context.Context, req *connect.Request[sluicev1.DescribeTransactionRequest]) (*connect.Response[sluicev1.DescribeTransactionResponse], error) {
	tenantID, err := a.tenant(ctx)
	if err != nil {
		return nil, err
	}
	d, err := a.svc.Describe(ctx, tenantID, req.Msg.GetTransactionalId())
	if leader, ok := a.elsewhere(req.Header(), err); ok {
		return Forward(ctx, leader, req, a.deps.Peer(leader).DescribeTransaction, a.deps.Forwarded)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.DescribeTransactionResponse{Transaction: txnDescription(d)}), nil
}

// InitProducerId is RecordService.InitProducerId with a transactional id:
// answered by the id's coordinator (forwarded to its RecordService).
func (a *Transactions) InitProducerId(ctx context.Context, req *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	tenantID, err := a.tenant(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	p, err := a.svc.InitProducer(ctx, txns.InitRequest{TenantID: tenantID, TransactionalID: m.GetTransactionalId(), TimeoutMs: m.GetTransactionTimeoutMs()})
	if leader, ok := a.elsewhere(req.Header(), err); ok {
		return Forward(ctx, leader, req, a.deps.RecordPeer(leader).InitProducerId, a.deps.Forwarded)
	}
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: p.ID, ProducerEpoch: int32(p.Epoch)}), nil
}

// ListAllTransactions is ReplicaService.ListAllTransactions: the
// transactional ids of every tenant (or of the request's tenant, or only
// the request's id) at the transaction coordinators this broker hosts, for
// the control plane's OperatorService.ListTransactions, which asks every
// broker and merges. It never forwards; the broker credential only (the
// broker's access rules).
func (a *Transactions) ListAllTransactions(ctx context.Context, req *connect.Request[sluicev1.ListAllTransactionsRequest]) (*connect.Response[sluicev1.ListAllTransactionsResponse], error) {
	ds, err := a.svc.ListAll(ctx, req.Msg.GetTenantId(), req.Msg.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ListAllTransactionsResponse{Transactions: txnDescriptions(ds)}), nil
}

// WriteTxnMarkers is ReplicaService.WriteTxnMarkers: it appends the
// transaction markers a coordinator asks for, each at this broker's
// replica of its partition (or its group's coordinator), in parallel, each
// answered with its own result (mapped as a handler's error is).
func (a *Transactions) WriteTxnMarkers(ctx context.Context, req *connect.Request[sluicev1.WriteTxnMarkersRequest]) (*connect.Response[sluicev1.WriteTxnMarkersResponse], error) {
	ms := req.Msg.GetMarkers()
	if len(ms) > txns.MaxMarkersPerRequest {
		return nil, derr.New(derr.InvalidRequest, "markers: at most %d per request; got %d", txns.MaxMarkersPerRequest, len(ms))
	}
	errs := make([]error, len(ms))
	var valid []txn.Marker
	var at []int // valid[j] is ms[at[j]]
	for i, m := range ms {
		if errs[i] = validMarker(m); errs[i] != nil {
			continue
		}
		valid = append(valid, txn.Marker{
			Tenant: m.GetTenantId(), Partition: txn.TopicPartition{TopicID: m.GetTopicId(), Partition: m.GetPartition()}, Group: m.GetGroup(),
			Commit: m.GetCommit(), ProducerID: m.GetProducerId(), ProducerEpoch: int16(m.GetProducerEpoch()), CoordinatorEpoch: m.GetCoordinatorEpoch(),
			KeptEpoch: m.GetKeptEpoch(),
		})
		at = append(at, i)
	}
	for j, err := range a.svc.WriteMarkers(ctx, valid) {
		errs[at[j]] = err
	}
	results := make([]*sluicev1.TxnMarkerResult, len(ms))
	for i, err := range errs {
		results[i] = &sluicev1.TxnMarkerResult{}
		if err != nil {
			results[i].Error = a.markerError(ctx, err)
		}
	}
	return connect.NewResponse(&sluicev1.WriteTxnMarkersResponse{Results: results}), nil
}

// markerError is a marker's error as ErrorInterceptor maps a handler's,
// carried in a message: code, message and details.
func (a *Transactions) markerError(ctx context.Context, err error) *sluicev1.ProduceError {
	err = ErrorInterceptor{Logger: a.deps.Logger}.MapErr(ctx, sluicev1connect.ReplicaServiceWriteTxnMarkersProcedure, err)
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &sluicev1.ProduceError{Code: int32(connect.CodeInternal), Message: "internal error"}
	}
	pe := &sluicev1.ProduceError{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		pe.Details = append(pe.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return pe
}

func validMarker(m *sluicev1.TxnMarker) error {
	switch {
	case m.GetTenantId() == "":
		return derr.New(derr.InvalidRequest, "tenant_id: must not be empty")
	case (m.GetTopicId() == "") == (m.GetGroup() == ""):
		return derr.New(derr.InvalidRequest, "topic_id or group: exactly one must be set")
	case m.GetPartition() < 0:
		return derr.New(derr.InvalidRequest, "partition: must not be negative; got %d", m.GetPartition())
	case m.GetProducerId() < 0:
		return derr.New(derr.InvalidRequest, "producer_id: must not be negative; got %d", m.GetProducerId())
	case m.GetProducerEpoch() < 0 || m.GetProducerEpoch() > math.MaxInt16:
		return derr.New(derr.InvalidRequest, "producer_epoch: must be between 0 and %d; got %d", math.MaxInt16, m.GetProducerEpoch())
	case m.GetCoordinatorEpoch() < 0:
		return derr.New(derr.InvalidRequest, "coordinator_epoch: must not be negative; got %d", m.GetCoordinatorEpoch())
	}
	return nil
}

// txnDescription is a transactional id's state on the wire.
func txnDescription(d txns.Description) *sluicev1.TransactionDescription {
	out := &sluicev1.TransactionDescription{
		TransactionalId: d.TransactionalID, TenantId: d.TenantID, ProducerId: d.ProducerID, ProducerEpoch: int32(d.ProducerEpoch),
		State: sluicev1.TxnState(d.State), TimeoutMs: d.Timeout.Milliseconds(), Groups: d.Groups,
		StartTimeMs: txnTimeMs(d.StartTime), UpdateTimeMs: txnTimeMs(d.UpdateTime), CoordinatorId: d.CoordinatorID,
	}
	for _, tp := range d.Topics {
		out.Topics = append(out.Topics, &sluicev1.TransactionPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
	}
	return out
}

func txnDescriptions(ds []txns.Description) []*sluicev1.TransactionDescription {
	var out []*sluicev1.TransactionDescription
	for _, d := range ds {
		out = append(out, txnDescription(d))
	}
	return out
}

func txnTimeMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// TxnPeers are the transaction service's calls to other brokers
// (txns.Peers), over their Connect services.
type TxnPeers struct {
	// Txn is broker id's TransactionService, called on a client's behalf
	// (with the client's credential).
	Txn func(id int32) sluicev1connect.TransactionServiceClient
	// Replica is broker id's ReplicaService, called with this broker's
	// credential.
	Replica func(id int32) sluicev1connect.ReplicaServiceClient
}

// AddToTransaction calls AddPartitionsToTransaction at broker with the
// client's credential, marked not to be forwarded further; the answer is
// relayed (connecterr.Relay): a refusal reaches the client as the
// coordinator gave it.
func (p TxnPeers) AddToTransaction(ctx context.Context, broker int32, authorization string, req txns.AddRequest) error {
	m := &sluicev1.AddPartitionsToTransactionRequest{TransactionalId: req.TransactionalID, ProducerId: req.ProducerID, ProducerEpoch: req.ProducerEpoch, Groups: req.Groups, VerifyOnly: req.VerifyOnly}
	for _, tp := range req.Topics {
		m.Topics = append(m.Topics, &sluicev1.TransactionPartitions{Topic: tp.Topic, Partitions: tp.Partitions})
	}
	out := connect.NewRequest(m)
	out.Header().Set("Authorization", authorization)
	out.Header().Set(NoForwardHeader, "1")
	_, err := p.Txn(broker).AddPartitionsToTransaction(ctx, out)
	return connecterr.Relay(err)
}

// WriteMarkers calls WriteTxnMarkers at broker; each refused marker's
// error says its code and message.
func (p TxnPeers) WriteMarkers(ctx context.Context, broker int32, markers []txn.Marker) ([]error, error) {
	req := &sluicev1.WriteTxnMarkersRequest{}
	for _, m := range markers {
		req.Markers = append(req.Markers, &sluicev1.TxnMarker{
			TenantId: m.Tenant, TopicId: m.Partition.TopicID, Partition: m.Partition.Partition, Group: m.Group,
			Commit: m.Commit, ProducerId: m.ProducerID, ProducerEpoch: int32(m.ProducerEpoch), CoordinatorEpoch: m.CoordinatorEpoch,
			KeptEpoch: m.KeptEpoch,
		})
	}
	res, err := p.Replica(broker).WriteTxnMarkers(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, connecterr.FromConnect(err)
	}
	errs := make([]error, len(res.Msg.GetResults()))
	for i, r := range res.Msg.GetResults() {
		if pe := r.GetError(); pe != nil {
			errs[i] = fmt.Errorf("%s: %s", connect.Code(pe.GetCode()), pe.GetMessage())
		}
	}
	return errs, nil
}
