package txns

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unicode"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

// ErrNoTopic answers every call before the transaction-state topic
// exists: the control plane creates it once enough brokers are live.
var ErrNoTopic error = derr.New(derr.CoordinatorNotAvailable, "transactions are not available yet: the internal transaction-state topic does not exist (the control plane creates it once --transaction-state-topic-replication-factor brokers are live)")

// maxName bounds transactional ids (Kafka has none; 255 is plenty), and
// group ids as the group service does.
const maxName = 255

// validName checks a transactional id or a group id: field names it.
func validName(field, id string) error {
	if id == "" {
		return derr.New(derr.InvalidRequest, "%s: must not be empty", field)
	}
	if len(id) > maxName {
		return derr.New(derr.InvalidRequest, "%s: at most %d bytes; got %d", field, maxName, len(id))
	}
	for i, r := range id {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return derr.New(derr.InvalidRequest, "%s: character %q at byte %d is not printable", field, r, i)
		}
	}
	return nil
}

func validTransactionalID(id string) error { return validName("transactional_id", id) }

// validProducer checks a transactional request's producer id and epoch.
func validProducer(producerID int64, epoch int32) error {
	if producerID < 0 {
		return derr.New(derr.InvalidRequest, "producer_id: must not be negative; got %d", producerID)
	}
	if epoch < 0 || epoch >= math.MaxInt16 {
		return derr.New(derr.InvalidRequest, "producer_epoch: must be between 0 and %d; got %d", math.MaxInt16-1, epoch)
	}
	return nil
}

// groupsNeedConsume refuses an add naming groups when the caller's token
// lacks the consume scope (the broker's access rule for
// AddPartitionsToTransaction asks only for produce, which adding
// partitions needs): putting a group's offsets in a transaction is
// committing them, as TxnCommitOffsets, which needs both (Kafka's
// AddOffsetsToTxn needs Read on the group too).
func groupsNeedConsume(ctx context.Context, groups int) error {
	if groups == 0 {
		return nil
	}
	if p, ok := tenants.PrincipalFrom(ctx); ok && p.Kind == tenants.PrincipalTenant && !p.Has(tenants.ScopeConsume) {
		return derr.New(derr.GroupAuthorizationFailed, "groups: adding a group's offsets to a transaction needs the %q scope", tenants.ScopeConsume)
	}
	return nil
}

// refusals are the coordinator's refusals with their kinds and reasons.
var refusals = []struct {
	err    error
	kind   derr.Kind
	reason derr.TxnReason
}{
	{txn.ErrProducerFenced, derr.ProducerFenced, derr.TxnReasonProducerFenced},
	{txn.ErrInvalidProducerEpoch, derr.InvalidProducerEpoch, derr.TxnReasonInvalidProducerEpoch},
	{txn.ErrTransactionAbortable, derr.TransactionAbortable, derr.TxnReasonTransactionAbortable},
	{txn.ErrUnknownTransactionalID, derr.TransactionalIDNotFound, derr.TxnReasonUnknownTransactionalID},
	{txn.ErrInvalidTimeout, derr.InvalidTransactionTimeout, derr.TxnReasonInvalidTimeout},
	{txn.ErrConcurrentTransactions, derr.ConcurrentTransactions, derr.TxnReasonConcurrentTransactions},
	{txn.ErrNotInTransaction, derr.InvalidTxnState, derr.TxnReasonInvalidTxnState},
}

// txnError maps the coordinator's refusals to domain errors with their
// transaction reason (transaction.proto's TransactionError), except a
// transaction grown past its bounds, a count refusal (tooLarge), and
// ErrNotCoordinator (NotCoordinator, no reason: find the coordinator
// again); other errors pass unchanged.
func txnError(err error) error {
	var tl *txn.TooLargeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &tl):
		return tooLarge(tl)
	case errors.Is(err, txn.ErrNotCoordinator):
		return derr.Wrap(derr.NotCoordinator, err)
	}
	for _, r := range refusals {
		if errors.Is(err, r.err) {
			return &derr.Error{Kind: r.kind, Err: err, Txn: r.reason}
		}
	}
	return err
}

// tooLarge is the refusal of an add past a transaction's bounds: a
// PolicyViolation naming the limit, with no retry delay, as the other
// count limits are (a plan limit, which retrying does not lift; the
// request itself is well formed).
func tooLarge(e *txn.TooLargeError) error {
	name := limit.MaxPartitionsPerTransaction.String()
	if e.What == "groups" {
		name = limit.MaxGroupsPerTransaction.String()
	}
	return &derr.Error{Kind: derr.PolicyViolation, Quota: &derr.QuotaViolation{Tenant: e.Tenant, Limit: name},
		Err: fmt.Errorf("tenant %s: the transaction of transactional id %q would hold %d %s, over its %s limit of %d: nothing was added (end the transaction, and write the rest in another)",
			e.Tenant, e.TransactionalID, e.Count, e.What, name, e.Max)}
}

// coordinatorUnavailable turns an answer about the transaction
// coordinator's whereabouts (its transaction-state partition offline,
// moving, or not taken over yet: a NotLeader, outermost or wrapped) into
// CoordinatorNotAvailable without the NotLeader, for the produce or
// offset commit whose verification it failed: that NotLeader names the
// leader of the transaction-state partition, and a client that took it for
// the leader of the partition it wrote to would route there, trusting its
// leader epoch over the real leader's (issue 29). Nothing was written;
// retrying reaches the coordinator once it has moved. The message is the
// answer's (as its protocol's adapter would say it), and the details but
// the leader hint stay. Other errors (the coordinator's refusals, with
// their reasons) pass unchanged.
func coordinatorUnavailable(err error) error {
	var nl *partition.NotLeaderError
	if !errors.As(err, &nl) {
		return err
	}
	out := &derr.Error{Kind: derr.CoordinatorNotAvailable}
	if e, ok := derr.Outermost(err, hasMessage).(*derr.Error); ok {
		*out = *e
		out.Kind = derr.CoordinatorNotAvailable
	}
	out.Err = fmt.Errorf("the transaction coordinator is not available (%s); retry", message(err))
	return out
}

// messaged is an error with a message apart from its text: a peer's
// protocol error (a Connect error's text is its code and message).
type messaged interface {
	error
	Message() string
}

func hasMessage(err error) bool {
	_, ok := err.(messaged)
	return ok
}

// message is err's message as an adapter answers it: that of its
// outermost domain error (or protocol error), as the adapters map the
// outermost one.
func message(err error) string {
	switch e := derr.Outermost(err, hasMessage).(type) {
	case nil:
		return err.Error()
	case messaged:
		return e.Message()
	default:
		return e.Error()
	}
}
