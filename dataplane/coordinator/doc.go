// Package coordinator is the consumer-group coordinator of one partition of
// the internal offsets topic: the groups' committed offsets and static
// members' incarnations, kept in memory and in that partition, and the
// groups' membership (dataplane/group) in memory.
//
// # Model
//
// A group belongs to offsets partition PartitionOf(tenant, group, N), and
// is coordinated by that partition's leader: its broker makes one
// Coordinator per offsets partition it leads, per leader epoch, and routes
// each group's requests to it. The Coordinator reaches the partition only
// through Partition, which the broker implements over its replica.
//
// Every change that must survive a failover — a committed offset, the
// member id of a static member's latest incarnation (instance id → member
// id), a group's deletion — is a record (GroupRecordKey, GroupRecordValue)
// appended to the partition with acks=all at the coordinator's leader
// epoch, and applied in memory only once the ISR has it; the request is
// answered after that. A coordinator that takes over (a new leader, or a
// new epoch) rebuilds the state by reading the partition from its log start
// to its end (Load): its whole log is what it commits (Partition.CheckLeader
// holds Load back until the new leader's HW reaches its epoch start).
// Records apply in log order, so the last commit of a partition wins, and
// the last incarnation written is a static member's current one: a process
// another one replaced stays fenced across a failover.
//
// The rest of the membership lives in memory only: after a failover members
// rejoin reporting the partitions they own and keep them (a group rebuilt
// with offsets or incarnations hands out free partitions only after
// 2×HeartbeatInterval, so they have time to).
//
// Invariants:
//   - what the coordinator answers (offsets, incarnations) comes from
//     records the ISR has: those it loaded and those of its own writes that
//     were acknowledged, applied in log order (a record older in the log
//     than what its key holds is ignored). A write that failed is not
//     applied, though its records may have reached the log: a coordinator
//     loading the partition later applies them if they survived, as the
//     client, told the write failed, must expect;
//   - a write at a leader epoch the broker no longer leads at fails and
//     changes nothing (the fencing is Partition.AppendAcksAll's);
//   - a static member's new incarnation is answered only once written.
//
// # Concurrency
//
// Every method may be called concurrently. mu guards the groups; it is held
// during Load and never across a write to the partition. staticJoins
// serialises static members' joins with the writes of the incarnations they
// create; it is taken before mu, never while holding it. The Coordinator
// starts no goroutines: its broker calls Expire periodically.
package coordinator
