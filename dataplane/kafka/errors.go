package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/tenants"
)

// codes is the Kafka error code of every domain error kind: the Kafka
// column of docs/design/errors.md (errors_test checks the two agree).
// Unavailable and Aborted depend on where they are answered (place).
var codes = map[derr.Kind]int16{
	derr.Internal:                           kerr.UnknownServerError.Code,
	derr.Canceled:                           kerr.RequestTimedOut.Code,
	derr.InvalidRequest:                     kerr.InvalidRequest.Code,
	derr.NotFound:                           kerr.ResourceNotFound.Code,
	derr.AlreadyExists:                      kerr.DuplicateResource.Code,
	derr.FailedPrecondition:                 kerr.UnknownServerError.Code,
	derr.Aborted:                            kerr.UnknownServerError.Code,
	derr.Unavailable:                        kerr.RequestTimedOut.Code,
	derr.ResourceExhausted:                  kerr.ThrottlingQuotaExceeded.Code,
	derr.Unknown:                            kerr.UnknownServerError.Code,
	derr.RequestTimedOut:                    kerr.RequestTimedOut.Code,
	derr.UnsupportedVersion:                 kerr.UnsupportedVersion.Code,
	derr.AuthenticationFailed:               kerr.SaslAuthenticationFailed.Code,
	derr.TopicAuthorizationFailed:           kerr.TopicAuthorizationFailed.Code,
	derr.GroupAuthorizationFailed:           kerr.GroupAuthorizationFailed.Code,
	derr.TransactionalIDAuthorizationFailed: kerr.TransactionalIDAuthorizationFailed.Code,
	derr.ClusterAuthorizationFailed:         kerr.ClusterAuthorizationFailed.Code,
	derr.ThrottlingQuotaExceeded:            kerr.ThrottlingQuotaExceeded.Code,
	derr.PolicyViolation:                    kerr.PolicyViolation.Code,
	derr.NotLeaderOrFollower:                kerr.NotLeaderForPartition.Code,
	derr.LeaderNotAvailable:                 kerr.LeaderNotAvailable.Code,
	derr.NotLeaderAfterAppend:               kerr.NotLeaderForPartition.Code,
	derr.UnknownTopicOrPartition:            kerr.UnknownTopicOrPartition.Code,
	derr.NotEnoughReplicas:                  kerr.NotEnoughReplicas.Code,
	derr.NotEnoughReplicasAfterAppend:       kerr.NotEnoughReplicasAfterAppend.Code,
	derr.OffsetOutOfRange:                   kerr.OffsetOutOfRange.Code,
	derr.OffsetNotAvailable:                 kerr.OffsetNotAvailable.Code,
	derr.FencedLeaderEpoch:                  kerr.FencedLeaderEpoch.Code,
	derr.UnknownLeaderEpoch:                 kerr.UnknownLeaderEpoch.Code,
	derr.StaleBrokerEpoch:                   kerr.StaleBrokerEpoch.Code,
	derr.NotReplica:                         kerr.NotLeaderForPartition.Code,
	derr.InvalidUpdateVersion:               kerr.InvalidUpdateVersion.Code,
	derr.FetchSessionIDNotFound:             kerr.FetchSessionIDNotFound.Code,
	derr.InvalidFetchSessionEpoch:           kerr.InvalidFetchSessionEpoch.Code,
	derr.StorageUnavailable:                 kerr.KafkaStorageError.Code,
	derr.CorruptData:                        kerr.KafkaStorageError.Code,
	derr.MessageTooLarge:                    kerr.MessageTooLarge.Code,
	derr.RecordListTooLarge:                 kerr.RecordListTooLarge.Code,
	derr.CorruptMessage:                     kerr.CorruptMessage.Code,
	derr.InvalidRecord:                      kerr.InvalidRecord.Code,
	derr.OutOfOrderSequenceNumber:           kerr.OutOfOrderSequenceNumber.Code,
	derr.DuplicateSequenceNumber:            kerr.DuplicateSequenceNumber.Code,
	derr.InvalidSequence:                    kerr.OutOfOrderSequenceNumber.Code,
	derr.UnknownProducerID:                  kerr.UnknownProducerID.Code,
	derr.InvalidProducerEpoch:               kerr.InvalidProducerEpoch.Code,
	derr.ProducerFenced:                     kerr.ProducerFenced.Code,
	derr.InvalidTxnState:                    kerr.InvalidTxnState.Code,
	derr.ConcurrentTransactions:             kerr.ConcurrentTransactions.Code,
	derr.TransactionAbortable:               kerr.TransactionAbortable.Code,
	derr.TransactionCoordinatorFenced:       kerr.TransactionCoordinatorFenced.Code,
	derr.InvalidTransactionTimeout:          kerr.InvalidTransactionTimeout.Code,
	derr.TransactionalIDNotFound:            kerr.TransactionalIDNotFound.Code,
	derr.NotCoordinator:                     kerr.NotCoordinator.Code,
	derr.CoordinatorNotAvailable:            kerr.CoordinatorNotAvailable.Code,
	derr.CoordinatorLoadInProgress:          kerr.CoordinatorLoadInProgress.Code,
	derr.UnstableOffsetCommit:               kerr.UnstableOffsetCommit.Code,
	derr.UnknownMemberID:                    kerr.UnknownMemberID.Code,
	derr.FencedMemberEpoch:                  kerr.FencedMemberEpoch.Code,
	derr.StaleMemberEpoch:                   kerr.StaleMemberEpoch.Code,
	derr.FencedInstanceID:                   kerr.FencedInstanceID.Code,
	derr.NonEmptyGroup:                      kerr.NonEmptyGroup.Code,
	derr.GroupSubscribedToTopic:             kerr.GroupSubscribedToTopic.Code,
	derr.GroupIDNotFound:                    kerr.GroupIDNotFound.Code,
}

// place is where an error is answered, for the kinds whose Kafka code
// depends on it.
type place int

const (
	atPartition   place = iota // a partition's answer (produce, fetch, list offsets)
	atCoordinator              // a group or transaction coordinator's
	atRequest                  // anything else (admin, producer ids)
)

// errorCode is the Kafka error code to answer err with at p (0 for nil).
// tenants' authentication and authorization errors, which run below the
// domain errors, map to their Kafka codes too.
func errorCode(err error, p place) int16 {
	if err == nil {
		return 0
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return kerr.RequestTimedOut.Code
	}
	if k, ok := derr.KindOf(derr.Outermost(err, nil)); ok {
		switch {
		case k == derr.Unavailable && p == atPartition:
			return kerr.LeaderNotAvailable.Code
		case k == derr.Unavailable && p == atCoordinator:
			return kerr.CoordinatorNotAvailable.Code
		case k == derr.Aborted && p == atCoordinator:
			return kerr.ConcurrentTransactions.Code
		}
		if c, ok := codes[k]; ok {
			return c
		}
		return kerr.UnknownServerError.Code
	}
	switch {
	case errors.Is(err, tenants.ErrPermissionDenied):
		if p == atPartition {
			return kerr.TopicAuthorizationFailed.Code
		}
		return kerr.ClusterAuthorizationFailed.Code
	case errors.Is(err, tenants.ErrInvalidToken):
		return kerr.SaslAuthenticationFailed.Code
	}
	return kerr.UnknownServerError.Code
}

// errorMessage is the text to answer err with where the response has an
// error message: a domain error's own text, but never an internal
// error's (it is logged instead).
func errorMessage(err error) *string {
	if err == nil {
		return nil
	}
	if k, ok := derr.KindOf(derr.Outermost(err, nil)); !ok || k == derr.Internal {
		if !errors.Is(err, tenants.ErrPermissionDenied) && !errors.Is(err, tenants.ErrInvalidToken) {
			s := "internal error"
			return &s
		}
	}
	s := err.Error()
	return &s
}
