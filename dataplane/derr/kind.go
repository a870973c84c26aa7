package derr

import "strconv"

// Kind is what went wrong, as a client must tell it apart to act on it.
// Kinds are as fine as both of the data plane's protocols need: each maps
// to one Connect code (the Connect adapter's table, connecterr) and to one
// Kafka error code (the Kafka listener's table, docs/design/errors.md).
// Several kinds share a Connect code; none spans two.
//
// A Kind is an error itself, so errors.Is(err, derr.NotEnoughReplicas)
// asks whether err is a domain error of that kind.
type Kind uint8

// The comment of each kind names its Kafka error code.
const (
	// Internal: a bug or a failure the caller cannot act on; the adapter
	// logs it and answers without its text (UNKNOWN_SERVER_ERROR).
	Internal Kind = iota

	// Generic kinds: refusals without a Kafka code of their own, and what
	// a Connect peer (the control plane, another broker) answered, as
	// connecterr.FromConnect translates its code.

	// Canceled: the caller gave up (no Kafka answer: the connection is gone).
	Canceled
	// InvalidRequest: a malformed request or field (INVALID_REQUEST).
	InvalidRequest
	// NotFound: an object that does not exist, or belongs to another tenant
	// (RESOURCE_NOT_FOUND).
	NotFound
	// AlreadyExists: an object that exists already (DUPLICATE_RESOURCE).
	AlreadyExists
	// FailedPrecondition: refused in the current state (UNKNOWN_SERVER_ERROR:
	// Kafka has no generic refusal; the listener uses the API's own code).
	FailedPrecondition
	// Aborted: a concurrent change won (CONCURRENT_TRANSACTIONS for
	// coordinators; otherwise UNKNOWN_SERVER_ERROR).
	Aborted
	// Unavailable: retry shortly (the API's retriable code:
	// LEADER_NOT_AVAILABLE for a partition, COORDINATOR_NOT_AVAILABLE for a
	// coordinator, else REQUEST_TIMED_OUT).
	Unavailable
	// ResourceExhausted: a server-side bound, not a tenant's quota
	// (no Kafka code: Kafka's fetch-session cache falls back to sessionless
	// fetches; otherwise THROTTLING_QUOTA_EXCEEDED).
	ResourceExhausted
	// Unknown: a peer's answer without a code (UNKNOWN_SERVER_ERROR).
	Unknown

	// Requests and authorisation.

	// RequestTimedOut: not done within the request's timeout; for acks=all
	// the records may or may not be committed (REQUEST_TIMED_OUT).
	RequestTimedOut
	// UnsupportedVersion: a call the server does not serve
	// (UNSUPPORTED_VERSION).
	UnsupportedVersion
	// AuthenticationFailed: no valid credential (SASL_AUTHENTICATION_FAILED).
	AuthenticationFailed
	// TopicAuthorizationFailed: the credential may not use the topic
	// (TOPIC_AUTHORIZATION_FAILED).
	TopicAuthorizationFailed
	// GroupAuthorizationFailed (GROUP_AUTHORIZATION_FAILED).
	GroupAuthorizationFailed
	// TransactionalIDAuthorizationFailed
	// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
	TransactionalIDAuthorizationFailed
	// ClusterAuthorizationFailed: a broker-only or operator-only call
	// (CLUSTER_AUTHORIZATION_FAILED).
	ClusterAuthorizationFailed
	// ThrottlingQuotaExceeded: over the tenant's rate quota; RetryAfter
	// says when to retry (THROTTLING_QUOTA_EXCEEDED, or for produce and
	// fetch, as KIP-219, no error but Throttle as throttle_time_ms).
	ThrottlingQuotaExceeded
	// PolicyViolation: a tenant's count limit (topics, partitions, ...)
	// would be exceeded; retrying does not help until usage drops
	// (POLICY_VIOLATION).
	PolicyViolation

	// Partitions and replication.

	// NotLeaderOrFollower: this broker does not lead the partition; the
	// NotLeaderError names who does (NOT_LEADER_OR_FOLLOWER).
	NotLeaderOrFollower
	// LeaderNotAvailable: the partition is offline, or this broker is
	// named its leader but has not taken over yet; retry here
	// (LEADER_NOT_AVAILABLE).
	LeaderNotAvailable
	// NotLeaderAfterAppend: leadership moved after the records were
	// appended, before acks=all completed; they may or may not be committed
	// (NOT_LEADER_OR_FOLLOWER, as Kafka's delayed produce answers).
	NotLeaderAfterAppend
	// UnknownTopicOrPartition (UNKNOWN_TOPIC_OR_PARTITION).
	UnknownTopicOrPartition
	// NotEnoughReplicas: acks=all refused while the ISR is below
	// min.insync.replicas; nothing was written (NOT_ENOUGH_REPLICAS).
	NotEnoughReplicas
	// NotEnoughReplicasAfterAppend: the ISR shrank below min ISR after the
	// append; the records may or may not be committed
	// (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
	NotEnoughReplicasAfterAppend
	// OffsetOutOfRange: an offset outside the partition's log; Range says
	// where it is (OFFSET_OUT_OF_RANGE).
	OffsetOutOfRange
	// OffsetNotAvailable: a new leader's high watermark has not caught up
	// yet; retry shortly (OFFSET_NOT_AVAILABLE).
	OffsetNotAvailable
	// FencedLeaderEpoch: the request's leader epoch is older than this
	// broker's (FENCED_LEADER_EPOCH).
	FencedLeaderEpoch
	// UnknownLeaderEpoch: the request's leader epoch is newer than this
	// broker's; retry (UNKNOWN_LEADER_EPOCH).
	UnknownLeaderEpoch
	// StaleBrokerEpoch: a broker call under a broker epoch that is not the
	// current one (STALE_BROKER_EPOCH).
	StaleBrokerEpoch
	// NotReplica: a replica fetch from a broker that is not a replica of
	// the partition (NOT_LEADER_OR_FOLLOWER: "not a replica").
	NotReplica
	// InvalidUpdateVersion: the controller refused an ISR change for a
	// stale partition epoch; it may hide an earlier, applied proposal of
	// the same change (INVALID_UPDATE_VERSION).
	InvalidUpdateVersion
	// FetchSessionIDNotFound: a follower's fetch session is unknown here
	// (FETCH_SESSION_ID_NOT_FOUND).
	FetchSessionIDNotFound
	// InvalidFetchSessionEpoch: a fetch session at another epoch, or busy
	// (INVALID_FETCH_SESSION_EPOCH).
	InvalidFetchSessionEpoch
	// StorageUnavailable: the log or the object store cannot serve or
	// sync now; for a produce the records may or may not be committed
	// (KAFKA_STORAGE_ERROR).
	StorageUnavailable
	// CorruptData: stored data that fails its checks; it is not served
	// (KAFKA_STORAGE_ERROR).
	CorruptData

	// Records.

	// MessageTooLarge: a batch over the topic's max.message.bytes
	// (MESSAGE_TOO_LARGE).
	MessageTooLarge
	// RecordListTooLarge: a request over the bound of its records
	// (RECORD_LIST_TOO_LARGE).
	RecordListTooLarge
	// CorruptMessage: a batch that fails its CRC or framing
	// (CORRUPT_MESSAGE).
	CorruptMessage
	// InvalidRecord: a well-formed batch the broker refuses (a control
	// batch from a client, a bad codec) (INVALID_RECORD).
	InvalidRecord

	// Idempotent producers and transactions.

	// OutOfOrderSequenceNumber: the batch is not the next the partition
	// expects from the producer (OUT_OF_ORDER_SEQUENCE_NUMBER).
	OutOfOrderSequenceNumber
	// DuplicateSequenceNumber: written before, too long ago to answer with
	// its offset (DUPLICATE_SEQUENCE_NUMBER).
	DuplicateSequenceNumber
	// InvalidSequence: a batch with an earlier batch's first sequence and
	// another length (OUT_OF_ORDER_SEQUENCE_NUMBER).
	InvalidSequence
	// UnknownProducerID: no state for the producer id (UNKNOWN_PRODUCER_ID).
	// Partitions answer an unknown producer with OutOfOrderSequenceNumber
	// (expected sequence -1), as Kafka brokers since KIP-360 do.
	UnknownProducerID
	// InvalidProducerEpoch: an epoch older than the producer's at the
	// partition, or newer than its coordinator gave
	// (INVALID_PRODUCER_EPOCH).
	InvalidProducerEpoch
	// ProducerFenced: a newer incarnation of the transactional id took
	// over (PRODUCER_FENCED).
	ProducerFenced
	// InvalidTxnState: a batch or call that does not fit the producer's
	// transaction state (INVALID_TXN_STATE).
	InvalidTxnState
	// ConcurrentTransactions: the previous transaction of the id is still
	// ending, or its verification is in flight; retry
	// (CONCURRENT_TRANSACTIONS).
	ConcurrentTransactions
	// TransactionAbortable: the coordinator aborted the transaction; abort
	// and begin again (TRANSACTION_ABORTABLE).
	TransactionAbortable
	// TransactionCoordinatorFenced: a marker or offset write of a replaced
	// transaction coordinator (TRANSACTION_COORDINATOR_FENCED).
	TransactionCoordinatorFenced
	// InvalidTransactionTimeout (INVALID_TRANSACTION_TIMEOUT).
	InvalidTransactionTimeout
	// TransactionalIDNotFound: no InitProducerId for the transactional id
	// (TRANSACTIONAL_ID_NOT_FOUND).
	TransactionalIDNotFound

	// Coordinators and groups.

	// NotCoordinator: this broker is not the coordinator of the group or
	// transactional id; find it again (NOT_COORDINATOR).
	NotCoordinator
	// CoordinatorNotAvailable (COORDINATOR_NOT_AVAILABLE).
	CoordinatorNotAvailable
	// CoordinatorLoadInProgress: the coordinator is loading its state
	// (COORDINATOR_LOAD_IN_PROGRESS).
	CoordinatorLoadInProgress
	// UnstableOffsetCommit: the group's offsets are pending in an open
	// transaction; retry once it ends (UNSTABLE_OFFSET_COMMIT).
	UnstableOffsetCommit
	// UnknownMemberID (UNKNOWN_MEMBER_ID).
	UnknownMemberID
	// FencedMemberEpoch: give up every partition and rejoin
	// (FENCED_MEMBER_EPOCH).
	FencedMemberEpoch
	// StaleMemberEpoch: retry with the member epoch of the last heartbeat
	// (STALE_MEMBER_EPOCH).
	StaleMemberEpoch
	// FencedInstanceID: another process took over the static member's
	// instance id (FENCED_INSTANCE_ID).
	FencedInstanceID
	// NonEmptyGroup: the call needs the group without members (deleting
	// it, resetting its offsets) (NON_EMPTY_GROUP).
	NonEmptyGroup
	// GroupIDNotFound: the coordinator does not know the group
	// (GROUP_ID_NOT_FOUND).
	GroupIDNotFound
	// GroupSubscribedToTopic: the group's members consume the topic, so
	// its offsets there stay (GROUP_SUBSCRIBED_TO_TOPIC).
	GroupSubscribedToTopic

	numKinds
)

var kindNames = [numKinds]string{
	Internal:                           "Internal",
	Canceled:                           "Canceled",
	InvalidRequest:                     "InvalidRequest",
	NotFound:                           "NotFound",
	AlreadyExists:                      "AlreadyExists",
	FailedPrecondition:                 "FailedPrecondition",
	Aborted:                            "Aborted",
	Unavailable:                        "Unavailable",
	ResourceExhausted:                  "ResourceExhausted",
	Unknown:                            "Unknown",
	RequestTimedOut:                    "RequestTimedOut",
	UnsupportedVersion:                 "UnsupportedVersion",
	AuthenticationFailed:               "AuthenticationFailed",
	TopicAuthorizationFailed:           "TopicAuthorizationFailed",
	GroupAuthorizationFailed:           "GroupAuthorizationFailed",
	TransactionalIDAuthorizationFailed: "TransactionalIDAuthorizationFailed",
	ClusterAuthorizationFailed:         "ClusterAuthorizationFailed",
	ThrottlingQuotaExceeded:            "ThrottlingQuotaExceeded",
	PolicyViolation:                    "PolicyViolation",
	NotLeaderOrFollower:                "NotLeaderOrFollower",
	LeaderNotAvailable:                 "LeaderNotAvailable",
	NotLeaderAfterAppend:               "NotLeaderAfterAppend",
	UnknownTopicOrPartition:            "UnknownTopicOrPartition",
	NotEnoughReplicas:                  "NotEnoughReplicas",
	NotEnoughReplicasAfterAppend:       "NotEnoughReplicasAfterAppend",
	OffsetOutOfRange:                   "OffsetOutOfRange",
	OffsetNotAvailable:                 "OffsetNotAvailable",
	FencedLeaderEpoch:                  "FencedLeaderEpoch",
	UnknownLeaderEpoch:                 "UnknownLeaderEpoch",
	StaleBrokerEpoch:                   "StaleBrokerEpoch",
	NotReplica:                         "NotReplica",
	InvalidUpdateVersion:               "InvalidUpdateVersion",
	FetchSessionIDNotFound:             "FetchSessionIDNotFound",
	InvalidFetchSessionEpoch:           "InvalidFetchSessionEpoch",
	StorageUnavailable:                 "StorageUnavailable",
	CorruptData:                        "CorruptData",
	MessageTooLarge:                    "MessageTooLarge",
	RecordListTooLarge:                 "RecordListTooLarge",
	CorruptMessage:                     "CorruptMessage",
	InvalidRecord:                      "InvalidRecord",
	OutOfOrderSequenceNumber:           "OutOfOrderSequenceNumber",
	DuplicateSequenceNumber:            "DuplicateSequenceNumber",
	InvalidSequence:                    "InvalidSequence",
	UnknownProducerID:                  "UnknownProducerID",
	InvalidProducerEpoch:               "InvalidProducerEpoch",
	ProducerFenced:                     "ProducerFenced",
	InvalidTxnState:                    "InvalidTxnState",
	ConcurrentTransactions:             "ConcurrentTransactions",
	TransactionAbortable:               "TransactionAbortable",
	TransactionCoordinatorFenced:       "TransactionCoordinatorFenced",
	InvalidTransactionTimeout:          "InvalidTransactionTimeout",
	TransactionalIDNotFound:            "TransactionalIDNotFound",
	NotCoordinator:                     "NotCoordinator",
	CoordinatorNotAvailable:            "CoordinatorNotAvailable",
	CoordinatorLoadInProgress:          "CoordinatorLoadInProgress",
	UnstableOffsetCommit:               "UnstableOffsetCommit",
	UnknownMemberID:                    "UnknownMemberID",
	FencedMemberEpoch:                  "FencedMemberEpoch",
	StaleMemberEpoch:                   "StaleMemberEpoch",
	FencedInstanceID:                   "FencedInstanceID",
	NonEmptyGroup:                      "NonEmptyGroup",
	GroupIDNotFound:                    "GroupIDNotFound",
	GroupSubscribedToTopic:             "GroupSubscribedToTopic",
}

// Kinds lists every kind, for tables that must cover them all.
func Kinds() []Kind {
	out := make([]Kind, numKinds)
	for k := range numKinds {
		out[k] = k
	}
	return out
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "kind " + strconv.Itoa(int(k))
}

// Error makes a Kind the target of errors.Is.
func (k Kind) Error() string { return k.String() }
