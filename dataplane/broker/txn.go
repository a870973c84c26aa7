package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
	"unicode"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Transactions (issue 16, docs/design/transactions.md) are coordinated by
// the leaders of the internal transaction-state topic's partitions
// (dataplane/txn holds the coordinator's shard, hosted by the runtime as
// coordinator.go says). This file is the broker's side: the routing of a
// transactional id to its coordinator, and the verification a partition
// leader asks of it (verifyTransaction). txnrpc.go has the
// TransactionService and InitProducerId's transactional half,
// txnmarkers.go the marker writer and WriteTxnMarkers.

// newTxnMetrics registers the transaction coordinators' metrics, shared by
// every coordinator of this broker.
func newTxnMetrics(reg prometheus.Registerer, b *Broker) *txn.Metrics {
	m := &txn.Metrics{
		Commits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_commits_total",
			Help: "Transactions committed by the transaction coordinators on this broker (CompleteCommit written).",
		}),
		Aborts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_aborts_total",
			Help: "Transactions aborted by the transaction coordinators on this broker (CompleteAbort written): by their producer, by a new incarnation's InitProducerId, or by their timeout.",
		}),
		TimedOut: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "txn_timed_out_total",
			Help: "Transactions the coordinators on this broker aborted because they outlived their timeout.",
		}),
	}
	end := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "txn_end_duration_seconds",
		Help:    "Time to end a transaction at its coordinator, from its PrepareCommit/PrepareAbort write to its CompleteCommit/CompleteAbort write, the markers to every partition and group included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	write := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "txn_state_write_duration_seconds",
		Help:    "Time to write one transaction-state record to the replicated __transaction_state partition, acks=all.",
		Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
	})
	m.EndLatency, m.WriteLatency = end, write
	reg.MustRegister(m.Commits, m.Aborts, m.TimedOut, end, write, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "broker", Name: "txn_open",
		Help: "Transactions open (Ongoing) or ending (PrepareCommit, PrepareAbort) at the transaction coordinators on this broker.",
	}, func() float64 {
		n := 0
		for _, c := range b.currentTxnCoordinators() {
			n += c.Open()
		}
		return float64(n)
	}))
	return m
}

// errNoTxnTopic: the control plane creates the transaction-state topic once
// enough brokers are live.
var errNoTxnTopic = connect.NewError(connect.CodeUnavailable, errors.New("transactions are not available yet: the internal transaction-state topic does not exist (the control plane creates it once --transaction-state-topic-replication-factor brokers are live)"))

// txnCoordinatorFor returns the loaded coordinator of the transactional
// id's partition, or the error to answer: errNoTxnTopic, or NotLeader
// naming the coordinator (which a client, or forwarding, follows).
func (b *Broker) txnCoordinatorFor(ctx context.Context, tenantID, transactionalID string) (*txnCoordinator, cluster.Partition, error) {
	t, ok := b.metadata().Topic(systemTenantID, txnStateTopic)
	if !ok || len(t.Partitions) == 0 {
		return nil, cluster.Partition{}, errNoTxnTopic
	}
	pm := t.Partitions[txn.PartitionOf(tenantID, transactionalID, len(t.Partitions))]
	c, err := b.txnCoordinatorAt(ctx, t, pm)
	return c, pm, err
}

// txnCoordinatorAt returns the loaded coordinator of one transaction-state
// partition, or NotLeader when this broker does not lead it. A coordinator
// is made for each leader epoch and loads the partition's log (Load) when
// first asked for.
func (b *Broker) txnCoordinatorAt(ctx context.Context, t *cluster.Topic, pm cluster.Partition) (*txnCoordinator, error) {
	return hostAt(ctx, b, t, pm, func(p offsetsPartition, epoch int32) *txnCoordinator {
		return txn.New(p, txn.Config{
			Partition: pm.Partition, LeaderEpoch: epoch,
			AllocateProducerID: b.newProducerID,
			Admit:              b.quota.AdmitTransactionalID,
			Bounds:             b.txnBounds,
			Markers:            &markerWriter{b: b, current: func() bool { return p.p.LeadsAt(epoch) }},
			DefaultTimeout:     min(time.Minute, b.cfg.MaxTransactionTimeout),
			MaxTimeout:         b.cfg.MaxTransactionTimeout,
			IdleTimeout:        b.cfg.TransactionalIDExpiration,
			Logger:             b.logger, Metrics: b.txnMetrics,
		})
	})
}

// localTxnCoordinators are the loaded coordinators of every
// transaction-state partition this broker leads.
func (b *Broker) localTxnCoordinators(ctx context.Context) ([]*txnCoordinator, error) {
	return localHosted(ctx, b, txnStateTopic, errNoTxnTopic, b.txnCoordinatorAt)
}

// currentTxnCoordinators returns the transaction coordinators hosted whose
// leadership this broker still holds.
func (b *Broker) currentTxnCoordinators() []*txnCoordinator {
	return hostedOf[*txnCoordinator](b)
}

// maxTransactionalID bounds transactional ids (Kafka has none; 255 is
// plenty), as maxGroupName does group ids.
const maxTransactionalID = 255

func validTransactionalID(id string) error {
	if id == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("transactional_id: must not be empty"))
	}
	if len(id) > maxTransactionalID {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("transactional_id: at most %d bytes; got %d", maxTransactionalID, len(id)))
	}
	for i, r := range id {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("transactional_id: character %q at byte %d is not printable", r, i))
		}
	}
	return nil
}

// validProducer checks a transactional request's producer id and epoch.
func validProducer(producerID int64, epoch int32) error {
	if producerID < 0 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("producer_id: must not be negative; got %d", producerID))
	}
	if epoch < 0 || epoch >= math.MaxInt16 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("producer_epoch: must be between 0 and %d; got %d", math.MaxInt16-1, epoch))
	}
	return nil
}

// txnCall resolves the transactional id's coordinator: here (c), or an
// error to answer; forward says the caller should forward to pm's leader
// instead (another broker, and the client did not ask to route itself).
func (b *Broker) txnCall(ctx context.Context, h http.Header, transactionalID string) (c *txnCoordinator, tenantID string, pm cluster.Partition, forward bool, err error) {
	if tenantID, err = tenantOf(ctx); err != nil {
		return nil, "", pm, false, err
	}
	if err = validTransactionalID(transactionalID); err != nil {
		return nil, tenantID, pm, false, err
	}
	c, pm, err = b.txnCoordinatorFor(ctx, tenantID, transactionalID)
	if forwardable(h, err) {
		return nil, tenantID, pm, true, nil
	}
	return c, tenantID, pm, false, toConnect(err)
}

// txnError maps the coordinator's refusals to Connect errors with a
// TransactionError detail (as transaction.proto documents them), except a
// transaction grown past its bounds, a count refusal (txnTooLarge); other
// errors pass through toConnect.
func txnError(err error) error {
	code := connect.CodeFailedPrecondition
	var reason sluicev1.TransactionError_Reason
	var tooLarge *txn.TooLargeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tooLarge):
		return txnTooLarge(tooLarge)
	case errors.Is(err, txn.ErrNotCoordinator):
		// Retriable: find the coordinator again.
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, txn.ErrProducerFenced):
		reason = sluicev1.TransactionError_REASON_PRODUCER_FENCED
	case errors.Is(err, txn.ErrInvalidProducerEpoch):
		reason = sluicev1.TransactionError_REASON_INVALID_PRODUCER_EPOCH
	case errors.Is(err, txn.ErrTransactionAbortable):
		reason = sluicev1.TransactionError_REASON_TRANSACTION_ABORTABLE
	case errors.Is(err, txn.ErrUnknownTransactionalID):
		code, reason = connect.CodeNotFound, sluicev1.TransactionError_REASON_UNKNOWN_TRANSACTIONAL_ID
	case errors.Is(err, txn.ErrInvalidTimeout):
		code, reason = connect.CodeInvalidArgument, sluicev1.TransactionError_REASON_INVALID_TIMEOUT
	case errors.Is(err, txn.ErrConcurrentTransactions):
		code, reason = connect.CodeUnavailable, sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS
	default:
		return toConnect(err)
	}
	return withTxnReason(connect.NewError(code, err), reason)
}

func withTxnReason(ce *connect.Error, reason sluicev1.TransactionError_Reason) *connect.Error {
	if d, derr := connect.NewErrorDetail(&sluicev1.TransactionError{Reason: reason}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// transactionTimeout checks InitProducerId's transaction timeout (0: the
// coordinator's default, 60 s or --max-transaction-timeout if shorter)
// against --max-transaction-timeout.
func (b *Broker) transactionTimeout(ms int64) (time.Duration, error) {
	if ms < 0 || ms > b.cfg.MaxTransactionTimeout.Milliseconds() {
		return 0, withTxnReason(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("transaction_timeout_ms: must be between 1 and %d (--max-transaction-timeout %s), or 0 for the default (60 s, at most the maximum); got %d", b.cfg.MaxTransactionTimeout.Milliseconds(), b.cfg.MaxTransactionTimeout, ms)),
			sluicev1.TransactionError_REASON_INVALID_TIMEOUT)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// verifyTransaction asks the transaction coordinator of the tenant's
// transactionalID to put (topicID, partition) in the producer's current
// transaction (AddPartitions, KIP-890's verification) before a partition
// leader appends the producer's first transactional batch of this epoch.
// topicID is the topic's id, in tenantID. h carries the producing client's
// credential: a coordinator on another broker is called with it
// (TransactionService.AddPartitionsToTransaction, not forwarded further;
// one NotLeader answer is followed). It returns nil once the coordinator
// has the partition in the transaction, or the error to answer the
// produce with (a Connect error, with a TransactionError detail for the
// coordinator's refusals).
func (b *Broker) verifyTransaction(ctx context.Context, h http.Header, tenantID, transactionalID, topicID string, partition int32, producerID int64, epoch int16) error {
	t, ok := b.metadata().ByID[topicID]
	if !ok || t.TenantID != tenantID {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("topic %s not found", topicID))
	}
	return b.addToTransaction(ctx, h, tenantID, transactionalID, producerID, epoch, []txn.TopicPartition{{TopicID: topicID, Partition: partition}}, nil,
		&sluicev1.AddPartitionsToTransactionRequest{Topics: []*sluicev1.TransactionPartitions{{Topic: t.Name, Partitions: []int32{partition}}}})
}

// verifyTransactionGroup is verifyTransaction for a group whose offsets
// the producer commits in its transaction (the coordinator's AddOffsets),
// before the group coordinator accepts a TxnCommitOffsets.
func (b *Broker) verifyTransactionGroup(ctx context.Context, h http.Header, tenantID, transactionalID, group string, producerID int64, epoch int16) error {
	return b.addToTransaction(ctx, h, tenantID, transactionalID, producerID, epoch, nil, []string{group},
		&sluicev1.AddPartitionsToTransactionRequest{Groups: []string{group}})
}

// addToTransaction adds partitions and groups to the producer's
// transaction at its coordinator: here, or with req (its topics and groups
// set) at the coordinator's broker. Its errors answer a produce to a data
// partition or an offset commit to a group, so they never carry the
// transaction-state partition's NotLeader (coordinatorUnavailable).
func (b *Broker) addToTransaction(ctx context.Context, h http.Header, tenantID, transactionalID string, producerID int64, epoch int16, tps []txn.TopicPartition, groups []string, req *sluicev1.AddPartitionsToTransactionRequest) error {
	if err := validTransactionalID(transactionalID); err != nil {
		return err
	}
	c, _, err := b.txnCoordinatorFor(ctx, tenantID, transactionalID)
	if err == nil {
		return txnError(c.Add(ctx, tenantID, transactionalID, producerID, epoch, tps, groups))
	}
	var nl *partition.NotLeaderError
	if !errors.As(err, &nl) || nl.Leader < 0 || nl.Self {
		return coordinatorUnavailable(toConnect(err))
	}
	req.TransactionalId, req.ProducerId, req.ProducerEpoch = transactionalID, producerID, int32(epoch)
	leader := nl.Leader
	for hop := 0; ; hop++ {
		out := connect.NewRequest(req)
		out.Header().Set("Authorization", h.Get("Authorization"))
		out.Header().Set(NoForwardHeader, "1")
		_, err := b.peer(leader).txn.AddPartitionsToTransaction(ctx, out)
		if err == nil {
			return nil
		}
		next, ok := notLeaderOf(err)
		if !ok || hop > 0 || next.GetLeaderId() < 0 || next.GetLeaderId() == leader || next.GetLeaderId() == b.cfg.ID {
			var ce *connect.Error
			if errors.As(err, &ce) {
				return coordinatorUnavailable(ce)
			}
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("transaction coordinator %d: %w", leader, err))
		}
		leader = next.GetLeaderId() // the coordinator moved: follow it once
	}
}

// coordinatorUnavailable turns an answer about the transaction
// coordinator's whereabouts (its transaction-state partition offline,
// moving, or not taken over yet: a NotLeader, as a detail or wrapped) into
// Unavailable without the NotLeader, for the produce or offset commit
// whose verification it failed: that NotLeader names the leader of the
// transaction-state partition, and a client that took it for the leader
// of the partition it wrote to would route there, trusting its leader
// epoch over the real leader's (issue 29). Nothing was written; retrying
// reaches the coordinator once it has moved. Other errors (the
// coordinator's refusals, with their TransactionError) pass unchanged.
func coordinatorUnavailable(err error) error {
	var ce *connect.Error
	var nl *partition.NotLeaderError
	_, detail := notLeaderOf(err)
	if !errors.As(err, &ce) || (!detail && !errors.As(err, &nl)) {
		return err
	}
	out := connect.NewError(connect.CodeUnavailable, fmt.Errorf("the transaction coordinator is not available (%s); retry", ce.Message()))
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if _, isNL := v.(*sluicev1.NotLeader); isNL {
				continue
			}
		}
		out.AddDetail(d)
	}
	return out
}

// notLeaderOf returns the NotLeader detail of a Connect error from another
// broker.
func notLeaderOf(err error) (*sluicev1.NotLeader, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if nl, ok := v.(*sluicev1.NotLeader); ok {
				return nl, true
			}
		}
	}
	return nil, false
}
