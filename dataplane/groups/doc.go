// Package groups is the data plane's consumer-group service: membership
// (KIP-848 heartbeats, leaving; and Kafka's classic protocol, classic.go),
// committed offsets (also inside a
// transaction, KIP-447), the groups' administration (list, describe,
// delete, reset offsets) and their lag (DescribeGroup's, and the lag
// metrics' sluice_group_lag_* gauges with LagReport for the control
// plane's alerts). It is protocol-neutral: its methods take plain Go
// requests and answer plain results and domain errors (dataplane/derr);
// a front door adapts it (the Connect adapter, dataplane/connectapi's
// Groups; the Kafka listener, dataplane/kafka) and maps the errors in one
// place.
//
// # Model
//
// A group belongs to one partition of the internal offsets topic
// (coordinator.PartitionOf) and is coordinated by that partition's
// leader: the broker hosts a group coordinator (dataplane/coordinator, a
// shard of the coordinator runtime) on each offsets partition it leads,
// per leader epoch (Deps.Host), and the service routes each call to its
// group's coordinator. A call for a group another broker coordinates is
// refused with a *NotCoordinatorError carrying the partition's leader
// hint; the Connect adapter forwards such a call once to that broker
// (unless its caller routes itself), a Kafka client is told
// NOT_COORDINATOR and asks FindCoordinator again.
//
// A commit's offsets are checked against their partitions' high
// watermarks at the partitions' leaders (Deps.Leaders: the record
// service's ListOffsets, here or at the leader's broker, on the caller's
// behalf, Credentials); so are a reset's, and a group's lag is read the
// same way (fillLags). ListGroups asks every broker that leads an offsets
// partition (Deps.Peers). Creating a group is admitted by the tenant's
// quota (Deps.Admission, max_groups), at its coordinator, whichever door
// the call came through. A transactional commit first adds the group to
// the producer's transaction at its transaction coordinator
// (Deps.VerifyTransactionGroup).
//
// # Errors
//
// The coordinator's and the group state machine's refusals become domain
// errors with their group reason (derr.GroupReason, the Connect API's
// GroupError): an unknown member UnknownMemberID, a fenced member epoch
// FencedMemberEpoch, a fenced static member FencedInstanceID, a commit of
// a partition the member does not own FailedPrecondition (reason
// NotOwned), a group with members where the call needs none NonEmptyGroup
// (reason GroupActive); a group the coordinator does not know
// GroupIDNotFound; offsets pending in an open transaction
// UnstableOffsetCommit; a fenced producer ProducerFenced (Txn reason); a
// fenced transaction coordinator TransactionCoordinatorFenced.
//
// # Concurrency
//
// Every method may be called concurrently; the service holds no lock of
// its own across a call (the coordinators serialise their groups'
// writes). ComputeLag is called by the broker's lag loop, one round at a
// time; the lag collector publishes each round's result atomically.
package groups
