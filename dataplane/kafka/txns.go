package kafka

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/groups"
	"github.com/sluicemq/sluice/dataplane/txns"
	"github.com/sluicemq/sluice/tenants"
)

// Txns is the transaction service (dataplane/txns.Service) as the
// listener calls it. A call about a transactional id another broker
// coordinates fails with that broker's NotLeader, answered
// NOT_COORDINATOR: a Kafka client asks FindCoordinator again, nothing is
// forwarded.
//
// Kafka clients speak transactions in one of two ways, told apart by
// the versions they send:
//
//   - Before KIP-890 part 2 (Produce up to v11, EndTxn up to v4,
//     TxnOffsetCommit up to v4; every client but the newest): they add
//     every partition (AddPartitionsToTxn) and group (AddOffsetsToTxn)
//     themselves before writing to it, keep their producer epoch across
//     transactions, and continue their sequences. So their end keeps the
//     epoch (txns.EndRequest.KeepEpoch), and a partition leader or group
//     coordinator only verifies that the partition or group is in the
//     transaction (VerifyOnly: KIP-890 part 1), never adds it: a write
//     delayed past its transaction's end is refused unless the producer's
//     next transaction has added that partition already.
//   - With part 2 (Produce v12, EndTxn v5, TxnOffsetCommit v5: clients
//     that see the transaction.version feature at 2 in ApiVersions, as
//     every broker answers): the write adds its partition or group to the
//     transaction, and every end bumps the epoch (answered in EndTxn), so
//     a write delayed past its transaction's end is fenced by its epoch.
//     This is how Sluice's own clients work.
type Txns interface {
	FindCoordinator(ctx context.Context, tenantID, transactionalID string) (txns.Coordinator, error)
	InitProducer(ctx context.Context, req txns.InitRequest) (txns.Producer, error)
	AddPartitions(ctx context.Context, req txns.AddRequest) error
	EndTransaction(ctx context.Context, req txns.EndRequest) (txns.Producer, error)
	Describe(ctx context.Context, tenantID, transactionalID string) (txns.Description, error)
	ListLocal(ctx context.Context, tenantID string) ([]txns.Description, error)
}

// txnCode is the Kafka error code of a transaction call's err: the
// coordinator's whereabouts (its lookup's NotLeader) are NOT_COORDINATOR,
// or COORDINATOR_NOT_AVAILABLE while its partition has no leader. The
// codes a request's version predates are answered as the code its clients
// know, INVALID_PRODUCER_EPOCH, as Kafka answers them:
// TRANSACTION_ABORTABLE (a timeout's abort; KIP-890 added it in Produce
// v11, EndTxn v4, TxnOffsetCommit v4, AddOffsetsToTxn v4,
// AddPartitionsToTxn v5, InitProducerId v5), which clients treat as
// abortable (the client aborts, then asks InitProducerId for a new epoch:
// KIP-360), and PRODUCER_FENCED (KIP-588 added it in InitProducerId v4,
// AddPartitionsToTxn v2, AddOffsetsToTxn v2, EndTxn v2), fatal to them
// either way.
func txnCode(err error, known txnCodes) int16 {
	if nl := notLeader(err); nl != nil {
		if k, _ := derr.KindOf(derr.Outermost(err, nil)); k == derr.NotLeaderOrFollower || k == derr.LeaderNotAvailable {
			if nl.Leader < 0 {
				return kerr.CoordinatorNotAvailable.Code
			}
			return kerr.NotCoordinator.Code
		}
	}
	code := errorCode(err, atCoordinator)
	if code == kerr.TransactionAbortable.Code && !known.abortable || code == kerr.ProducerFenced.Code && !known.fenced {
		return kerr.InvalidProducerEpoch.Code
	}
	return code
}

// txnCodes says which of the codes that came late a request's version knows
// (txnCode).
type txnCodes struct{ abortable, fenced bool }

// needProduce refuses a transactional call without the produce scope, as
// Kafka refuses one without Write on the transactional id.
func (c *conn) needProduce(id string) error {
	if !c.sess.p.Has(tenants.ScopeProduce) {
		return derr.New(derr.TransactionalIDAuthorizationFailed, "transactional id %q: transactions need the %q scope", id, tenants.ScopeProduce)
	}
	return nil
}

// findTxnCoordinator is FindCoordinator's answer for a transactional id.
func (c *conn) findTxnCoordinator(ctx context.Context, co *kmsg.FindCoordinatorResponseCoordinator) error {
	if err := c.needProduce(co.Key); err != nil {
		return err
	}
	tc, err := c.s.d.Txns.FindCoordinator(ctx, c.sess.tenantID, co.Key)
	if err != nil {
		if nl := notLeader(err); nl != nil {
			return derr.New(derr.CoordinatorNotAvailable, "transaction coordinator: the transactional id's partition has no leader; retry")
		}
		return err
	}
	host, port, ok := kafkaNode(c.s.d.View().Brokers[tc.BrokerID])
	if !ok {
		return derr.New(derr.CoordinatorNotAvailable, "transaction coordinator: broker %d has no Kafka listener in this cluster's view; retry", tc.BrokerID)
	}
	co.NodeID, co.Host, co.Port = tc.BrokerID, host, port
	return nil
}

// initTransactionalProducer is InitProducerId with a transactional id: the
// id's new producer incarnation, fencing older ones. A producer id and
// epoch given (v3+, KIP-360: a producer recovering from an abortable error
// asks for a new epoch) must be the id's current producer, or the one a
// timeout's abort bumped (txns.InitRequest.Expect): a fenced zombie
// recovering is refused PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before
// v4) rather than fencing its newer incarnation in turn.
func (c *conn) initTransactionalProducer(ctx context.Context, req *kmsg.InitProducerIDRequest, res *kmsg.InitProducerIDResponse) {
	id := *req.TransactionalID
	if err := c.needProduce(id); err != nil {
		res.ErrorCode = errorCode(err, atCoordinator)
		return
	}
	ireq := txns.InitRequest{TenantID: c.sess.tenantID, TransactionalID: id, TimeoutMs: int64(req.TransactionTimeoutMillis)}
	if req.Version >= 3 && req.ProducerID >= 0 {
		ireq.Expect = &txns.Producer{ID: req.ProducerID, Epoch: req.ProducerEpoch}
	}
	p, err := c.s.d.Txns.InitProducer(ctx, ireq)
	if err != nil {
		res.ErrorCode = txnCode(err, txnCodes{abortable: req.Version >= 5, fenced: req.Version >= 4})
		if wait, ok := retryAfter(err); ok {
			res.ThrottleMillis = int32(min(wait, time.Minute).Milliseconds())
		}
		return
	}
	res.ProducerID, res.ProducerEpoch = p.ID, p.Epoch
}

func (c *conn) addPartitionsToTxn(ctx context.Context, req *kmsg.AddPartitionsToTxnRequest) *kmsg.AddPartitionsToTxnResponse {
	res := req.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	add := txns.AddRequest{TenantID: c.sess.tenantID, TransactionalID: req.TransactionalID, ProducerID: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch)}
	// Partitions refused on their own (an unknown topic or partition)
	// get their code, the others OPERATION_NOT_ATTEMPTED, as Kafka
	// answers; else the add's code is every partition's.
	v := c.s.d.View()
	failed := false
	for _, rt := range req.Topics {
		tr := kmsg.NewAddPartitionsToTxnResponseTopic()
		tr.Topic = rt.Topic
		t, ok := v.Topic(c.sess.tenantID, rt.Topic)
		tp := txns.TopicPartitions{Topic: rt.Topic}
		for _, p := range rt.Partitions {
			pr := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
			pr.Partition = p
			if !ok || p < 0 || int(p) >= len(t.Partitions) {
				pr.ErrorCode, failed = kerr.UnknownTopicOrPartition.Code, true
			}
			tp.Partitions = append(tp.Partitions, p)
			tr.Partitions = append(tr.Partitions, pr)
		}
		if len(tp.Partitions) > 0 {
			add.Topics = append(add.Topics, tp)
		}
		res.Topics = append(res.Topics, tr)
	}
	code := int16(0)
	switch {
	case failed:
		code = kerr.OperationNotAttempted.Code
	case len(add.Topics) == 0:
		return res // nothing to add
	default:
		err := c.needProduce(req.TransactionalID)
		if err == nil {
			err = c.s.d.Txns.AddPartitions(ctx, add)
		}
		code = txnCode(err, txnCodes{fenced: req.Version >= 2}) // TRANSACTION_ABORTABLE from v5, not served
	}
	for i := range res.Topics {
		for j := range res.Topics[i].Partitions {
			if pr := &res.Topics[i].Partitions[j]; pr.ErrorCode == 0 {
				pr.ErrorCode = code
			}
		}
	}
	return res
}

func (c *conn) addOffsetsToTxn(ctx context.Context, req *kmsg.AddOffsetsToTxnRequest) *kmsg.AddOffsetsToTxnResponse {
	res := req.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	err := c.needProduce(req.TransactionalID)
	if err == nil {
		// The group needs the consume scope too (the service checks).
		err = c.s.d.Txns.AddPartitions(ctx, txns.AddRequest{TenantID: c.sess.tenantID, TransactionalID: req.TransactionalID,
			ProducerID: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), Groups: []string{req.Group}})
	}
	res.ErrorCode = txnCode(err, txnCodes{abortable: req.Version >= 4, fenced: req.Version >= 2})
	return res
}

// txnOffsetCommit commits a group's offsets in the producer's transaction
// at the group's coordinator (groups.Service.TxnCommitOffsets), which
// verifies that the client added the group (AddOffsetsToTxn) first, or,
// from v5, adds it (see Txns).
func (c *conn) txnOffsetCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	res := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	type slot struct{ t, p int }
	var commit []slot
	creq := groups.TxnCommitRequest{
		CommitRequest: groups.CommitRequest{
			TenantID: c.sess.tenantID, Group: req.Group, MemberID: req.MemberID, MemberEpoch: req.Generation,
			Credentials: c.credentials(),
		},
		TransactionalID: req.TransactionalID, ProducerID: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch),
		VerifyOnly: req.Version < 5,
	}
	if req.InstanceID != nil {
		creq.InstanceID = *req.InstanceID
	}
	if req.MemberID == "" && req.Generation < 0 {
		// v0-v2, or a producer outside the group (KIP-447's fencing
		// not asked): not checked by the group, as in Kafka.
		creq.MemberEpoch, creq.Unfenced = 0, true
	}
	v := c.s.d.View()
	denied := !c.sess.p.Has(tenants.ScopeConsume) || !c.sess.p.Has(tenants.ScopeProduce)
	for ti, rt := range req.Topics {
		tr := kmsg.NewTxnOffsetCommitResponseTopic()
		tr.Topic = rt.Topic
		t, topicOK := v.Topic(c.sess.tenantID, rt.Topic)
		for pi, rp := range rt.Partitions {
			pr := kmsg.NewTxnOffsetCommitResponseTopicPartition()
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
	// Version 8: ILLEGAL_GENERATION, not KIP-848's STALE_MEMBER_EPOCH.
	code := c.commitAnswer(c.s.d.Groups.TxnCommitOffsets(ctx, creq), 8, req.Group)
	if code == kerr.TransactionAbortable.Code && req.Version < 4 {
		code = kerr.InvalidProducerEpoch.Code // see txnCode
	}
	for _, s := range commit {
		res.Topics[s.t].Partitions[s.p].ErrorCode = code
	}
	return res
}

// endTxn commits or aborts the producer's transaction: keeping its epoch
// up to v4, bumping it from v5, which answers the producer id and epoch to
// go on with (see Txns).
func (c *conn) endTxn(ctx context.Context, req *kmsg.EndTxnRequest) *kmsg.EndTxnResponse {
	res := req.ResponseKind().(*kmsg.EndTxnResponse)
	res.ProducerID, res.ProducerEpoch = -1, -1
	err := c.needProduce(req.TransactionalID)
	if err == nil {
		var p txns.Producer
		p, err = c.s.d.Txns.EndTransaction(ctx, txns.EndRequest{TenantID: c.sess.tenantID, TransactionalID: req.TransactionalID,
			ProducerID: req.ProducerID, ProducerEpoch: int32(req.ProducerEpoch), Commit: req.Commit, KeepEpoch: req.Version < 5})
		if err == nil && req.Version >= 5 {
			res.ProducerID, res.ProducerEpoch = p.ID, p.Epoch
		}
	}
	res.ErrorCode = txnCode(err, txnCodes{abortable: req.Version >= 4, fenced: req.Version >= 2})
	return res
}

// describeTransactions describes the transactional ids this broker
// coordinates (NOT_COORDINATOR for the others: an admin client asks each
// id's coordinator).
func (c *conn) describeTransactions(ctx context.Context, req *kmsg.DescribeTransactionsRequest) *kmsg.DescribeTransactionsResponse {
	res := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range req.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID, st.ProducerID, st.ProducerEpoch, st.StartTimestamp = id, -1, -1, -1
		d, err := c.s.d.Txns.Describe(ctx, c.sess.tenantID, id)
		if err != nil {
			st.ErrorCode = txnCode(err, txnCodes{})
			res.TransactionStates = append(res.TransactionStates, st)
			continue
		}
		st.State, st.TimeoutMillis = d.State.String(), int32(d.Timeout.Milliseconds())
		st.ProducerID, st.ProducerEpoch = d.ProducerID, d.ProducerEpoch
		if !d.StartTime.IsZero() {
			st.StartTimestamp = d.StartTime.UnixMilli()
		}
		for _, tp := range d.Topics {
			t := kmsg.NewDescribeTransactionsResponseTransactionStateTopic()
			t.Topic, t.Partitions = tp.Topic, tp.Partitions
			st.Topics = append(st.Topics, t)
		}
		res.TransactionStates = append(res.TransactionStates, st)
	}
	return res
}

// txnStates are the states ListTransactions may filter on (Kafka's
// names; Dead and PrepareEpochFence never occur here).
var txnStates = []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

// listTransactions lists the tenant's transactional ids this broker
// coordinates, as Kafka's brokers each list theirs (an admin client asks
// every broker).
func (c *conn) listTransactions(ctx context.Context, req *kmsg.ListTransactionsRequest) *kmsg.ListTransactionsResponse {
	res := req.ResponseKind().(*kmsg.ListTransactionsResponse)
	for _, s := range req.StateFilters {
		if !slices.Contains(txnStates, s) {
			res.UnknownStateFilters = append(res.UnknownStateFilters, s)
		}
	}
	ds, err := c.s.d.Txns.ListLocal(ctx, c.sess.tenantID)
	if err != nil {
		if k, _ := derr.KindOf(err); k == derr.CoordinatorNotAvailable {
			return res // no transaction-state topic yet: nothing to list
		}
		res.ErrorCode = txnCode(err, txnCodes{})
		return res
	}
	now := time.Now()
	for _, d := range ds {
		switch {
		case len(req.StateFilters) > 0 && !slices.Contains(req.StateFilters, d.State.String()):
		case len(req.ProducerIDFilters) > 0 && !slices.Contains(req.ProducerIDFilters, d.ProducerID):
		case req.DurationFilterMillis >= 0 && req.Version >= 1 && (d.StartTime.IsZero() || now.Sub(d.StartTime).Milliseconds() < req.DurationFilterMillis):
		default:
			st := kmsg.NewListTransactionsResponseTransactionState()
			st.TransactionalID, st.ProducerID, st.TransactionState = d.TransactionalID, d.ProducerID, d.State.String()
			res.TransactionStates = append(res.TransactionStates, st)
		}
	}
	slices.SortFunc(res.TransactionStates, func(a, b kmsg.ListTransactionsResponseTransactionState) int {
		return strings.Compare(a.TransactionalID, b.TransactionalID)
	})
	return res
}

// describeProducers answers the producers each partition's leader knows
// (an admin client asks each partition's leader; elsewhere
// NOT_LEADER_OR_FOLLOWER), for tools that look for hanging transactions.
func (c *conn) describeProducers(ctx context.Context, req *kmsg.DescribeProducersRequest) *kmsg.DescribeProducersResponse {
	res := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	for _, rt := range req.Topics {
		tr := kmsg.NewDescribeProducersResponseTopic()
		tr.Topic = rt.Topic
		for _, p := range rt.Partitions {
			pr := kmsg.NewDescribeProducersResponseTopicPartition()
			pr.Partition = p
			if !c.sess.p.Has(tenants.ScopeConsume) {
				pr.ErrorCode = kerr.TopicAuthorizationFailed.Code
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			ps, err := c.s.d.Records.DescribeProducers(ctx, rt.Topic, p)
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = errorCode(err, atPartition), errorMessage(err)
			}
			for _, info := range ps {
				ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
				ap.ProducerID, ap.ProducerEpoch, ap.LastSequence = info.ProducerID, int32(info.Epoch), info.LastSequence
				ap.LastTimestamp, ap.CoordinatorEpoch, ap.CurrentTxnStartOffset = info.LastTimestamp, info.CoordinatorEpoch, info.TxnFirstOffset
				pr.ActiveProducers = append(pr.ActiveProducers, ap)
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		res.Topics = append(res.Topics, tr)
	}
	return res
}
