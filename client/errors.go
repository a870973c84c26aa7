package client

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Errors a producer reports for a record. Server errors arrive as
// *connect.Error (inspect them with connect.CodeOf); these wrap or stand
// beside them.
var (
	// ErrDeliveryTimeout: the record could not be acknowledged within the
	// delivery timeout. The *DeliveryError says whether it may have been
	// written anyway (Indefinite).
	ErrDeliveryTimeout = errors.New("delivery timeout")
	// ErrBufferFull: the producer's buffer is full and it was told not to
	// block (WithBlockOnFullBuffer(false)).
	ErrBufferFull = errors.New("producer buffer is full")
	// ErrProducerClosed: the record was produced after Close, or was still
	// buffered when Close gave up.
	ErrProducerClosed = errors.New("producer is closed")
	// ErrRecordTooLarge: the record alone, in a batch of its own, exceeds
	// the topic's max.message.bytes (or the producer's max batch size, from
	// a server that does not send the topic's limit). It comes wrapped in
	// an InvalidArgument *connect.Error, the code a broker refuses such a
	// batch with, and the message names the limit.
	ErrRecordTooLarge = errors.New("record too large")
	// ErrProducerFenced: a newer instance of this producer id took over.
	ErrProducerFenced = errors.New("producer fenced by a newer epoch")
	// ErrInstanceFenced: another process joined the consumer group with
	// this GroupConsumer's instance id (WithInstanceID) and took over its
	// partitions. The GroupConsumer has stopped for good; it does not
	// rejoin (Kafka's FENCED_INSTANCE_ID).
	ErrInstanceFenced = errors.New("static group member fenced")
)

// DeliveryError is the error a producer reports for a record it gave up on.
type DeliveryError struct {
	// Err is the cause: ErrDeliveryTimeout, a server error, ErrProducerClosed …
	Err error
	// Last is the last server or network error before a timeout, if any.
	Last error
	// Indefinite is true when the record was sent and no answer said
	// whether it was written: it may be in the log. False means it was
	// certainly not written.
	Indefinite bool
}

func (e *DeliveryError) Error() string {
	msg := e.Err.Error()
	if e.Last != nil && !errors.Is(e.Err, e.Last) {
		msg += fmt.Sprintf(" (last error: %v)", e.Last)
	}
	if e.Indefinite {
		msg += "; the record may or may not have been written"
	} else {
		msg += "; the record was not written"
	}
	return msg
}

func (e *DeliveryError) Unwrap() []error {
	if e.Last != nil {
		return []error{e.Err, e.Last}
	}
	return []error{e.Err}
}

// retriable reports whether a failed request may succeed if sent again
// (after a metadata refresh for routing errors).
func retriable(err error) bool {
	if err == nil {
		return false
	}
	if pe := producerErrorOf(err); pe != nil {
		return pe.GetReason() == sluicev1.ProducerError_REASON_OUT_OF_ORDER_SEQUENCE
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted,
		connect.CodeUnknown, connect.CodeInternal:
		return true
	case connect.CodeResourceExhausted:
		// A rate refusal is sent again after its delay (retryWait); any
		// other is a limit waiting does not fix (a *QuotaError).
		return throttled(err)
	case connect.CodeFailedPrecondition:
		// NotLeader, NotEnoughReplicas, a fenced leader epoch: routing or
		// replication state that changes on its own.
		return true
	}
	return false
}

// indefinite reports whether a failed produce may have written the batch:
// the request may have reached the leader and no answer said it was refused.
func indefinite(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodePermissionDenied,
		connect.CodeUnauthenticated, connect.CodeResourceExhausted, connect.CodeAlreadyExists:
		return false
	case connect.CodeFailedPrecondition:
		// Refused before writing: not the leader, not enough replicas, a
		// stale epoch, a sequence gap, a fenced producer.
		return false
	}
	if notLeaderOf(err) != nil || errors.Is(err, syscall.ECONNREFUSED) {
		return false // refused, or never reached the broker
	}
	// Unavailable covers both "refused: offline / catching up" and "acks=all
	// wait ended with the leadership": the latter may be written.
	return true
}

// normalize reclassifies a call's error: connect-go reports some broken
// connections (a reset by a dying peer) as Canceled, which would read as
// our own cancellation. While ctx is live it is a network failure:
// Unavailable, retriable, outcome unknown.
func normalize(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && connect.CodeOf(err) == connect.CodeCanceled {
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return err
}

// batchTooLarge reports whether err refuses a batch as over the topic's
// max.message.bytes (a BatchTooLarge detail).
func batchTooLarge(err error) bool {
	_, ok := ErrorDetail[*sluicev1.BatchTooLarge](err)
	return ok
}

// ErrorDetail returns the first detail of type T (a generated message such
// as *sluicev1.NotLeader or *sluicev1.ProducerError) carried by a Connect
// error in err's chain.
func ErrorDetail[T proto.Message](err error) (T, bool) {
	var zero T
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return zero, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if t, ok := v.(T); ok {
				return t, true
			}
		}
	}
	return zero, false
}
