package connecterr

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// codes is the Connect code of every kind: what the API answered for each
// refusal before domain errors existed, so clients see no change.
var codes = [...]connect.Code{
	derr.Internal:                           connect.CodeInternal,
	derr.Canceled:                           connect.CodeCanceled,
	derr.InvalidRequest:                     connect.CodeInvalidArgument,
	derr.NotFound:                           connect.CodeNotFound,
	derr.AlreadyExists:                      connect.CodeAlreadyExists,
	derr.FailedPrecondition:                 connect.CodeFailedPrecondition,
	derr.Aborted:                            connect.CodeAborted,
	derr.Unavailable:                        connect.CodeUnavailable,
	derr.ResourceExhausted:                  connect.CodeResourceExhausted,
	derr.Unknown:                            connect.CodeUnknown,
	derr.RequestTimedOut:                    connect.CodeDeadlineExceeded,
	derr.UnsupportedVersion:                 connect.CodeUnimplemented,
	derr.AuthenticationFailed:               connect.CodeUnauthenticated,
	derr.TopicAuthorizationFailed:           connect.CodePermissionDenied,
	derr.GroupAuthorizationFailed:           connect.CodePermissionDenied,
	derr.TransactionalIDAuthorizationFailed: connect.CodePermissionDenied,
	derr.ClusterAuthorizationFailed:         connect.CodePermissionDenied,
	derr.ThrottlingQuotaExceeded:            connect.CodeResourceExhausted,
	derr.PolicyViolation:                    connect.CodeResourceExhausted,
	derr.NotLeaderOrFollower:                connect.CodeFailedPrecondition,
	derr.LeaderNotAvailable:                 connect.CodeUnavailable,
	derr.NotLeaderAfterAppend:               connect.CodeUnavailable,
	derr.UnknownTopicOrPartition:            connect.CodeNotFound,
	derr.NotEnoughReplicas:                  connect.CodeFailedPrecondition,
	derr.NotEnoughReplicasAfterAppend:       connect.CodeUnavailable,
	derr.OffsetOutOfRange:                   connect.CodeOutOfRange,
	derr.OffsetNotAvailable:                 connect.CodeUnavailable,
	derr.FencedLeaderEpoch:                  connect.CodeFailedPrecondition,
	derr.UnknownLeaderEpoch:                 connect.CodeUnavailable,
	derr.StaleBrokerEpoch:                   connect.CodeFailedPrecondition,
	derr.NotReplica:                         connect.CodePermissionDenied,
	derr.InvalidUpdateVersion:               connect.CodeFailedPrecondition,
	derr.FetchSessionIDNotFound:             connect.CodeNotFound,
	derr.InvalidFetchSessionEpoch:           connect.CodeFailedPrecondition,
	derr.StorageUnavailable:                 connect.CodeUnavailable,
	derr.CorruptData:                        connect.CodeDataLoss,
	derr.MessageTooLarge:                    connect.CodeInvalidArgument,
	derr.RecordListTooLarge:                 connect.CodeInvalidArgument,
	derr.CorruptMessage:                     connect.CodeInvalidArgument,
	derr.InvalidRecord:                      connect.CodeInvalidArgument,
	derr.OutOfOrderSequenceNumber:           connect.CodeFailedPrecondition,
	derr.DuplicateSequenceNumber:            connect.CodeAlreadyExists,
	derr.InvalidSequence:                    connect.CodeInvalidArgument,
	derr.UnknownProducerID:                  connect.CodeFailedPrecondition,
	derr.InvalidProducerEpoch:               connect.CodeFailedPrecondition,
	derr.ProducerFenced:                     connect.CodeFailedPrecondition,
	derr.InvalidTxnState:                    connect.CodeFailedPrecondition,
	derr.ConcurrentTransactions:             connect.CodeUnavailable,
	derr.TransactionAbortable:               connect.CodeFailedPrecondition,
	derr.TransactionCoordinatorFenced:       connect.CodeFailedPrecondition,
	derr.InvalidTransactionTimeout:          connect.CodeInvalidArgument,
	derr.TransactionalIDNotFound:            connect.CodeNotFound,
	derr.NotCoordinator:                     connect.CodeUnavailable,
	derr.CoordinatorNotAvailable:            connect.CodeUnavailable,
	derr.CoordinatorLoadInProgress:          connect.CodeUnavailable,
	derr.UnstableOffsetCommit:               connect.CodeUnavailable,
	derr.UnknownMemberID:                    connect.CodeNotFound,
	derr.FencedMemberEpoch:                  connect.CodeFailedPrecondition,
	derr.StaleMemberEpoch:                   connect.CodeFailedPrecondition,
	derr.FencedInstanceID:                   connect.CodeFailedPrecondition,
	derr.NonEmptyGroup:                      connect.CodeFailedPrecondition,
	derr.GroupSubscribedToTopic:             connect.CodeFailedPrecondition,
	derr.GroupIDNotFound:                    connect.CodeNotFound,
}

// Code is kind's Connect code (CodeInternal for a kind the table lacks,
// which its test rules out).
func Code(kind derr.Kind) connect.Code {
	if int(kind) < len(codes) && codes[kind] != 0 {
		return codes[kind]
	}
	return connect.CodeInternal
}

// kindOfCode is the generic kind of each Connect code: what FromConnect
// makes of a peer's answer.
var kindOfCode = map[connect.Code]derr.Kind{
	connect.CodeCanceled:           derr.Canceled,
	connect.CodeUnknown:            derr.Unknown,
	connect.CodeInvalidArgument:    derr.InvalidRequest,
	connect.CodeDeadlineExceeded:   derr.RequestTimedOut,
	connect.CodeNotFound:           derr.NotFound,
	connect.CodeAlreadyExists:      derr.AlreadyExists,
	connect.CodePermissionDenied:   derr.ClusterAuthorizationFailed,
	connect.CodeResourceExhausted:  derr.ResourceExhausted,
	connect.CodeFailedPrecondition: derr.FailedPrecondition,
	connect.CodeAborted:            derr.Aborted,
	connect.CodeOutOfRange:         derr.OffsetOutOfRange,
	connect.CodeUnimplemented:      derr.UnsupportedVersion,
	connect.CodeInternal:           derr.Internal,
	connect.CodeUnavailable:        derr.Unavailable,
	connect.CodeDataLoss:           derr.CorruptData,
	connect.CodeUnauthenticated:    derr.AuthenticationFailed,
}

// KindOfCode is the generic kind of a Connect code (Unknown for a code
// Connect does not define); Code(KindOfCode(c)) is c.
func KindOfCode(c connect.Code) derr.Kind {
	if k, ok := kindOfCode[c]; ok {
		return k
	}
	return derr.Unknown
}

func isConnect(err error) bool {
	_, ok := err.(*connect.Error)
	return ok
}

// ToConnect is the one mapping of the data plane's errors to the Connect
// API's: the outermost domain error or Connect error of err's chain
// decides. A Connect error passes unchanged (already decided, with its own
// code: never reinterpreted by what it wraps), and so does a peer's answer
// Relay made a domain error of; a domain error gets its
// kind's code, its text as the message and its details (NotLeader,
// RetryInfo, QuotaFailure, NotEnoughReplicas, ProducerError,
// TransactionError, GroupError, BatchTooLarge); an Internal one, and
// anything else, is returned as it is, for the handlers' interceptor to
// log and answer as internal.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	switch e := derr.Outermost(err, isConnect).(type) {
	case *connect.Error:
		return e
	case *relayed:
		return e.ce // a peer's answer, relayed as it was (Relay)
	case *derr.NotLeaderError:
		ce := connect.NewError(Code(e.ErrorKind()), e)
		addDetail(ce, &sluicev1.NotLeader{LeaderId: e.Leader, LeaderAddress: e.Address, LeaderEpoch: e.Epoch,
			TopicId: e.TopicID, Partition: e.Partition})
		return ce
	case *derr.Error:
		if e.Kind == derr.Internal {
			return err
		}
		ce := connect.NewError(Code(e.Kind), e)
		addDetails(ce, e)
		return ce
	}
	return err
}

func addDetails(ce *connect.Error, e *derr.Error) {
	if e.RetryAfter > 0 {
		addDetail(ce, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if q := e.Quota; q != nil {
		addDetail(ce, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "tenant:" + q.Tenant, Description: q.Limit}}})
	}
	if r := e.Replicas; r != nil {
		addDetail(ce, &sluicev1.NotEnoughReplicas{IsrSize: int32(r.ISR), MinInsyncReplicas: r.MinISR})
	}
	if p := e.Producer; p != nil {
		addDetail(ce, &sluicev1.ProducerError{Reason: sluicev1.ProducerError_Reason(p.Reason), ExpectedSequence: p.ExpectedSequence})
	}
	if e.Txn != derr.TxnReasonNone {
		addDetail(ce, &sluicev1.TransactionError{Reason: sluicev1.TransactionError_Reason(e.Txn)})
	}
	if e.Group != derr.GroupReasonNone {
		addDetail(ce, &sluicev1.GroupError{Reason: sluicev1.GroupError_Reason(e.Group)})
	}
	if t := e.TooLarge; t != nil {
		addDetail(ce, &sluicev1.BatchTooLarge{BatchBytes: t.Bytes, MaxMessageBytes: t.Max})
	}
}

func addDetail(ce *connect.Error, m proto.Message) {
	if d, err := connect.NewErrorDetail(m); err == nil {
		ce.AddDetail(d)
	}
}

// FromConnect translates a peer's Connect error (the control plane's,
// another broker's) into a domain error, for the data plane below the
// adapter: the generic kind of its code (KindOfCode), or
// InvalidUpdateVersion for a refusal with a StalePartitionEpoch detail.
// The Connect error stays the cause (its text, for logs). An error that
// is not a Connect error, or nil, is returned as it is.
func FromConnect(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	kind := KindOfCode(ce.Code())
	for _, d := range ce.Details() {
		if v, verr := d.Value(); verr == nil {
			if _, ok := v.(*sluicev1.StalePartitionEpoch); ok {
				kind = derr.InvalidUpdateVersion
			}
		}
	}
	return &derr.Error{Kind: kind, Err: err}
}
