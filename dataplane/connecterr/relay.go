package connecterr

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Relay translates another broker's Connect answer to a call this broker
// made on a client's behalf (a transaction coordinator's answer to a
// partition leader's verification) into a domain error that is answered
// to the client exactly as the peer answered it: ToConnect returns the
// peer's Connect error itself (code, message, details). Its Kind, for the
// data plane and the other front doors, comes from its details (a
// NotLeader detail: the *NotLeaderError it names, which errors.As finds;
// a TransactionError: its reason's kind; a GroupError: its reason's kind)
// or else from its code (KindOfCode); its text is the peer's message. An
// error that is not a Connect error, or nil, is returned as it is.
func Relay(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	r := &relayed{ce: ce, kind: KindOfCode(ce.Code())}
	quota, retry := false, false
	for _, d := range ce.Details() {
		v, verr := d.Value()
		if verr != nil {
			continue
		}
		switch v := v.(type) {
		case *sluicev1.NotLeader:
			// An Unavailable NotLeader naming a leader is one that is
			// named but not leading yet (derr.NotLeaderError's Self).
			r.nl = &derr.NotLeaderError{TopicID: v.GetTopicId(), Partition: v.GetPartition(), Leader: v.GetLeaderId(), Epoch: v.GetLeaderEpoch(),
				Address: v.GetLeaderAddress(), Self: v.GetLeaderId() >= 0 && ce.Code() == connect.CodeUnavailable}
			r.kind = r.nl.ErrorKind()
		case *sluicev1.TransactionError:
			if k, ok := txnKinds[derr.TxnReason(v.GetReason())]; ok {
				r.kind = k
			}
		case *sluicev1.GroupError:
			if k, ok := groupKinds[derr.GroupReason(v.GetReason())]; ok {
				r.kind = k
			}
		case *sluicev1.StalePartitionEpoch:
			r.kind = derr.InvalidUpdateVersion
		case *errdetails.QuotaFailure:
			quota = true
		case *errdetails.RetryInfo:
			retry = true
		}
	}
	if quota && !retry && ce.Code() == connect.CodeResourceExhausted {
		// A count limit (a rate limit says when to retry).
		r.kind = derr.PolicyViolation
	}
	return r
}

// txnKinds and groupKinds are the kinds of the transaction and group
// reasons, as the services answer them (each kind's Connect code is the
// code the reason comes with).
var (
	txnKinds = map[derr.TxnReason]derr.Kind{
		derr.TxnReasonProducerFenced:         derr.ProducerFenced,
		derr.TxnReasonTransactionAbortable:   derr.TransactionAbortable,
		derr.TxnReasonConcurrentTransactions: derr.ConcurrentTransactions,
		derr.TxnReasonUnknownTransactionalID: derr.TransactionalIDNotFound,
		derr.TxnReasonInvalidTimeout:         derr.InvalidTransactionTimeout,
		derr.TxnReasonInvalidProducerEpoch:   derr.InvalidProducerEpoch,
		derr.TxnReasonInvalidTxnState:        derr.InvalidTxnState,
	}
	groupKinds = map[derr.GroupReason]derr.Kind{
		derr.GroupReasonUnknownMember:     derr.UnknownMemberID,
		derr.GroupReasonFencedMemberEpoch: derr.FencedMemberEpoch,
		derr.GroupReasonFencedInstanceID:  derr.FencedInstanceID,
	}
)

// relayed is a peer's Connect answer as a domain error (Relay).
type relayed struct {
	ce   *connect.Error
	kind derr.Kind
	nl   *derr.NotLeaderError // its NotLeader detail, if any
}

// Error is the peer's message (without its code).
func (e *relayed) Error() string { return e.ce.Message() }

// ErrorKind makes it a domain error (derr.Kinded).
func (e *relayed) ErrorKind() derr.Kind { return e.kind }

// Is reports whether target is e's kind.
func (e *relayed) Is(target error) bool {
	k, ok := target.(derr.Kind)
	return ok && k == e.kind
}

// Unwrap is the leader hint, when the answer has one, and the peer's
// Connect error.
func (e *relayed) Unwrap() []error {
	if e.nl != nil {
		return []error{e.nl, e.ce}
	}
	return []error{e.ce}
}
