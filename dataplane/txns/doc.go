// Package txns is the data plane's transaction service (issue 16,
// docs/design/transactions.md), protocol-neutral: InitProducer with a
// transactional id, AddPartitions (partitions and groups), EndTransaction,
// Describe and the lists, FindCoordinator, the verification a partition
// leader or a group coordinator asks before a transactional write
// (VerifyPartition, VerifyGroup: KIP-890), and the marker writes a
// coordinator's end asks (WriteMarkers at this broker's partitions). It
// takes plain Go requests and returns plain results and domain errors
// (dataplane/derr: a coordinator's refusal carries its transaction reason,
// derr.Error.Txn); the Connect adapter (dataplane/connectapi,
// transactions.go) and, later, the Kafka listener decode their protocol's
// requests into these and map the errors in one place.
//
// # Model
//
// A transactional id belongs to one partition of the internal
// transaction-state topic (txn.PartitionOf); the leader of that partition
// hosts its coordinator, a txn.Coordinator (the shard dataplane/txn
// defines, hosted by dataplane/runtime through Deps.Host), one per leader
// epoch. A call about a transactional id is answered by its coordinator
// when this broker hosts it; otherwise the service answers the
// coordinator lookup's *partition.NotLeaderError (the broker leading the
// id's partition, which a Connect caller's request is forwarded to, or a
// Kafka client is sent to as NOT_COORDINATOR), and nothing else is done.
// Only that lookup answers a NotLeaderError as its outermost domain error:
// a refusal from inside an operation (its coordinator deposed meanwhile)
// is wrapped by the coordinator's refusal (derr.NotCoordinator).
//
// The verifications (VerifyPartition, VerifyGroup) ask the id's
// coordinator here, or on its broker through Deps.Peers with the
// client's credential, following one NotLeader answer; their errors
// answer a write to another partition or group, so they never carry the
// transaction-state partition's NotLeader (issue 29): the coordinator's
// whereabouts become CoordinatorNotAvailable.
//
// The marker writer (one per coordinator, its txn.MarkerWriter) writes
// each marker of an ending transaction at the leader of its partition in
// this broker's view: this broker's replicas directly (Deps.Replica, or a
// group's coordinator through Deps.GroupMarker), the others' through
// Deps.Peers.WriteMarkers (their WriteMarkers), retrying those not
// written until all are, its coordinator is deposed, or its attempt's
// time (markerWriteTimeout) ends; the runtime retries the attempt.
//
// # Concurrency
//
// Every method may be called concurrently. The service keeps no state of
// its own beyond its metrics: the coordinators are the runtime's, the
// view is loaded per call (Deps.View). No lock is held across a peer call
// or a marker write (the coordinators hold none either: dataplane/txn).
package txns
