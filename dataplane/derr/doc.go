// Package derr is the data plane's domain errors: what its services and
// the partition replicas below them refuse, in terms of the system
// (NotEnoughReplicas, FencedLeaderEpoch, ProducerFenced, ...), not of a
// protocol. A client-facing protocol is a thin adapter over the same
// services, and maps these errors to its own codes in one place: the
// Connect adapter with dataplane/connecterr (ToConnect, the table of Kind
// to Connect code), the Kafka listener (dataplane/kafka) with the table of
// Kind to Kafka error code in docs/design/errors.md. No package below
// the adapters knows a protocol's codes; layering_test says so.
//
// # Errors
//
// An error is a *Error (its Kind, the cause whose text is the message,
// optional details) or a *NotLeaderError (the leader hint of a partition
// this broker does not lead, whose Kind follows from the hint:
// LeaderNotAvailable when it is offline or this broker is about to lead
// it, else NotLeaderOrFollower). Both implement Kinded. A Kind is an
// error too, so
//
//	errors.Is(err, derr.NotEnoughReplicas)
//	var nl *derr.NotLeaderError; errors.As(err, &nl)
//	k, ok := derr.KindOf(err)
//
// all work through wrapping (fmt.Errorf("...: %w", err)). An adapter
// maps the outermost domain error of a chain (Outermost), so an error a
// layer above built around another's decides the answer, as a Connect
// error built around a Connect error always did.
//
// Details carry what a client acts on: the leader hint, the retry delay
// (RetryAfter) and throttle time (Throttle) of a quota refusal, the quota
// violated (tenant and limit), the ISR and min ISR of NotEnoughReplicas,
// a producer refusal's reason and expected sequence, a transaction's or
// group's reason, the offset range of OffsetOutOfRange, a batch's size
// against max.message.bytes. The reasons mirror the Connect API's
// ProducerError, TransactionError and GroupError enums, so the Connect
// answer a client reads is exactly what it was before these errors
// existed.
//
// # Errors from peers
//
// What the data plane asks of the control plane and of other brokers
// (the ISR change, a follower's fetch, a usage report) goes through
// Connect clients the broker wires; the broker translates their errors
// with connecterr.FromConnect before a replica or a loop sees them: a
// code becomes the generic kind of the same name (FailedPrecondition,
// InvalidRequest, Unavailable, UnsupportedVersion, ...), and typed
// details become their kinds (a StalePartitionEpoch detail is
// InvalidUpdateVersion). A peer's answer to a call made on a client's
// behalf, which the client is answered with, is relayed (connecterr.Relay):
// its kind comes from its details (a NotLeader detail is a
// *NotLeaderError, a transaction or group reason its kind), and the
// Connect adapter answers it as the peer did.
package derr
