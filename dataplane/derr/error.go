package derr

import (
	"errors"
	"fmt"
	"time"
)

// Error is a domain error: its Kind, the error it says (its text is the
// message a client reads) and the details a client acts on. Every detail
// is optional; a protocol adapter carries those its protocol has room
// for.
type Error struct {
	Kind Kind
	// Err is the cause; Error() is its text, unchanged.
	Err error

	// RetryAfter: retry no sooner (a quota refusal's delay).
	RetryAfter time.Duration
	// Throttle: how long the client is held back (Kafka's
	// throttle_time_ms).
	Throttle time.Duration
	// Quota: the tenant's limit the request is over.
	Quota *QuotaViolation
	// Replicas: the ISR and min.insync.replicas of a NotEnoughReplicas
	// refusal.
	Replicas *ReplicaCount
	// Producer: why a partition refused an idempotent producer's batch.
	Producer *ProducerRefusal
	// Txn: why a transaction's call or batch was refused.
	Txn TxnReason
	// Group: why a group's coordinator refused a member's call.
	Group GroupReason
	// Range: where the partition's offsets are (OffsetOutOfRange).
	Range *OffsetRange
	// TooLarge: the batch size and the topic's bound (MessageTooLarge).
	TooLarge *SizeLimit
}

// New returns an error of kind whose text is fmt.Sprintf(format, args...);
// like fmt.Errorf, %w wraps.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as an error of kind, with err's text; nil for nil.
func Wrap(kind Kind, err error) *Error {
	if err == nil {
		return nil
	}
	return &Error{Kind: kind, Err: err}
}

func (e *Error) Error() string {
	if e.Err == nil {
		return e.Kind.String()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool {
	k, ok := target.(Kind)
	return ok && k == e.Kind
}

// ErrorKind returns e.Kind (the Kinded interface).
func (e *Error) ErrorKind() Kind { return e.Kind }

// Kinded is a domain error: *Error and *NotLeaderError.
type Kinded interface {
	error
	ErrorKind() Kind
}

// KindOf returns the kind of the outermost domain error in err's chain,
// and false when it holds none.
func KindOf(err error) (Kind, bool) {
	var k Kinded
	if errors.As(err, &k) {
		return k.ErrorKind(), true
	}
	return Internal, false
}

// Outermost returns the first error in err's tree, in the order
// errors.As visits it, that is a domain error or for which also reports
// true (an adapter's own error type, which must win over a domain error
// it wraps, as a domain error wins over one it wraps); nil when none is.
func Outermost(err error, also func(error) bool) error {
	for err != nil {
		if _, ok := err.(Kinded); ok || (also != nil && also(err)) {
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found := Outermost(e, also); found != nil {
					return found
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

// QuotaViolation names the tenant and its limit a request is over.
type QuotaViolation struct {
	Tenant string
	// Limit names the limit ("produce_bytes_per_sec", "topics").
	Limit string
}

// ReplicaCount is the ISR size and min.insync.replicas of a partition
// that refuses acks=all writes.
type ReplicaCount struct {
	ISR    int
	MinISR int32
}

// ProducerRefusal is why a partition refused an idempotent producer's
// batch.
type ProducerRefusal struct {
	Reason ProducerReason
	// ExpectedSequence: with ReasonOutOfOrderSequence, the sequence the
	// partition expects next, -1 when it has no state for the producer.
	ExpectedSequence int32
}

// ProducerReason mirrors sluice.v1.ProducerError.Reason.
type ProducerReason int32

const (
	ProducerReasonUnspecified ProducerReason = iota
	ProducerReasonOutOfOrderSequence
	ProducerReasonFenced
	ProducerReasonDuplicateSequence
	ProducerReasonInvalidSequence
)

// TxnReason mirrors sluice.v1.TransactionError.Reason (0: none).
type TxnReason int32

const (
	TxnReasonNone TxnReason = iota
	TxnReasonProducerFenced
	TxnReasonTransactionAbortable
	TxnReasonConcurrentTransactions
	TxnReasonUnknownTransactionalID
	TxnReasonInvalidTimeout
	TxnReasonInvalidProducerEpoch
	TxnReasonInvalidTxnState
)

// GroupReason mirrors sluice.v1.GroupError.Reason (0: none).
type GroupReason int32

const (
	GroupReasonNone GroupReason = iota
	GroupReasonUnknownMember
	GroupReasonFencedMemberEpoch
	_ // 3: REASON_UNRELEASED_INSTANCE_ID, no longer sent
	GroupReasonFencedInstanceID
	GroupReasonNotOwned
	GroupReasonGroupActive
)

// OffsetRange is an offset outside a partition's log and the log's
// range [LogStart, LEO].
type OffsetRange struct {
	Offset, LogStart, LEO int64
}

// SizeLimit is a batch's size against the topic's max.message.bytes.
type SizeLimit struct {
	Bytes, Max int32
}
