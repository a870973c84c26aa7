package txn

import (
	"errors"
	"fmt"
)

// Class is how a producer must react to an error: retry the request,
// abort the transaction and start again, or stop.
type Class int

const (
	// ClassOther: not one of the coordinator's refusals (a write to the
	// partition failed, the context ended, ...).
	ClassOther Class = iota
	// ClassRetriable: retry the same request, perhaps at another broker.
	ClassRetriable
	// ClassAbortable: the transaction is lost; abort it and begin anew
	// with the same producer.
	ClassAbortable
	// ClassFatal: this producer can do nothing more (another incarnation
	// took over, or the request is malformed).
	ClassFatal
)

// refusal is one of the coordinator's errors, with its class.
type refusal struct {
	msg   string
	class Class
}

func (e *refusal) Error() string { return e.msg }

// The coordinator's refusals; ClassOf tells their class. Each is returned
// wrapped, with the transactional id and the epochs involved.
var (
	// ErrProducerFenced (fatal): the request carries an older producer id
	// or epoch than the transactional id's current ones: a newer
	// incarnation took over, or the transaction already ended (an end
	// bumps the epoch, unless KeepEpoch).
	ErrProducerFenced error = &refusal{"producer fenced", ClassFatal}
	// ErrInvalidProducerEpoch (fatal): an epoch newer than the
	// coordinator ever gave.
	ErrInvalidProducerEpoch error = &refusal{"invalid producer epoch", ClassFatal}
	// ErrUnknownTransactionalID (fatal): no InitProducer for this id here.
	ErrUnknownTransactionalID error = &refusal{"unknown transactional id", ClassFatal}
	// ErrInvalidTimeout (fatal): a transaction timeout outside (0, MaxTimeout].
	ErrInvalidTimeout error = &refusal{"invalid transaction timeout", ClassFatal}
	// ErrTransactionAbortable (abortable): the coordinator aborted the
	// producer's transaction because it outlived its timeout; the
	// producer aborts (EndTransaction abort answers with its new epoch)
	// and begins again.
	ErrTransactionAbortable error = &refusal{"transaction aborted by its timeout", ClassAbortable}
	// ErrConcurrentTransactions (retriable): the transactional id's
	// previous transaction is still ending (its markers are not all
	// written); retry later.
	ErrConcurrentTransactions error = &refusal{"the previous transaction is still ending", ClassRetriable}
	// ErrNotCoordinator (retriable): this coordinator is not loaded, or
	// its broker no longer leads its partition at its epoch; find the
	// coordinator again.
	ErrNotCoordinator error = &refusal{"not the transaction coordinator", ClassRetriable}
	// ErrTooLarge (abortable): the partitions or groups added would take
	// the transaction past its tenant's bounds (Config.Bounds); nothing
	// was added, and the transaction keeps what it had. Returned as a
	// *TooLargeError.
	ErrTooLarge error = &refusal{"transaction too large", ClassAbortable}
	// ErrNotInTransaction (abortable): Verify found a partition or group
	// that the producer's current transaction does not hold (or no
	// transaction open): the client did not add it before writing, or the
	// write is a delayed one of a transaction that ended (KIP-890 part 1).
	// Nothing is written; the producer aborts.
	ErrNotInTransaction error = &refusal{"not in the producer's transaction", ClassAbortable}
)

// TooLargeError is ErrTooLarge with what passed which bound.
type TooLargeError struct {
	Tenant, TransactionalID string
	// What is "partitions" or "groups"; Count how many the transaction
	// would have held, Max its bound.
	What       string
	Count, Max int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%v: transactional id %q would hold %d %s, more than the %d one transaction may", ErrTooLarge, e.TransactionalID, e.Count, e.What, e.Max)
}

// Unwrap makes errors.Is(err, ErrTooLarge) and ClassOf work.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// ClassOf is the class of err: that of the first of the coordinator's
// refusals it wraps, ClassOther when it wraps none.
func ClassOf(err error) Class {
	var r *refusal
	if errors.As(err, &r) {
		return r.class
	}
	return ClassOther
}
