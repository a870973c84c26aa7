// Package runtime (dataplane/runtime: beside the coordinators it hosts, not
// under dataplane/coordinator, which is the group coordinator) hosts
// coordinators: state machines (shards) each of
// which owns one partition of an internal topic — a group coordinator on a
// partition of __consumer_offsets, a transaction coordinator on one of
// __transaction_state — in the shape of Kafka's CoordinatorRuntime
// (org.apache.kafka.coordinator.common.runtime: CoordinatorRuntime,
// CoordinatorShard, CoordinatorResult, the loader, the timer). A shard does
// no I/O: it answers an operation with records to write, effects to run and
// a response, and applies records handed back to it. The runtime does the
// rest, the same way for every kind of coordinator: the next one costs a
// shard, not a copy of this.
//
// # Model
//
// A Hosted shard serves one partition at one leader epoch. Load rebuilds
// its state by replaying the partition's log from its start to its end
// (Shard.Replay, in log order), once the partition's leader is ready
// (Partition.CheckLeader). A Runtime keeps the hosted shards of a broker by
// partition: Host makes one when the broker leads a partition at a new
// epoch (dropping the old one), and Drop closes those whose leadership
// moved.
//
// Write runs an operation (Op) under a key (a group, a transactional id):
// against the shard's state it returns a Result — records, effects, timers
// and the response. The records are appended as one batch with acks=all at
// the shard's leader epoch (Partition.AppendAcksAll), replayed to the state
// only once that append succeeded, and the response is released after
// that. A failed append applies nothing and answers its error (the records
// may still have reached the log: a later load applies them if they
// survived, as a client told the write failed must expect). Operations
// with the same key are serialised, from their run to their records'
// replay, in the order they take the key; operations with different keys
// run concurrently, so their records may replay out of log order (each
// record comes with its offset, and a shard whose records of different
// keys interact orders them by it). WriteShared holds its key shared
// and sub-keys of it exclusively: shared operations whose sub-keys are
// disjoint run concurrently, as different keys' do (a group's offset
// commits of different partitions), and exclude the key's exclusive
// operations both ways. The empty key is serialised with nothing but the
// state: its operations write no records and wait for no append (the
// group coordinator's heartbeats and member expiry). Read runs a
// function against the state.
//
// An Effect is a side effect an operation asks for once its records are
// written: the transaction markers of an ending transaction. The runtime
// runs it with the host's Config.Exec, outside every lock, and retries a
// failed attempt with a backoff until it succeeds or the shard is dropped;
// its success runs the effect's follow-up (Effect.Then) as a write under
// the effect's key (the transaction's Complete record). A Result with
// Await releases its response only after its effects succeeded (or
// answers the first failed attempt's error, Effect.Fail, while the runtime
// goes on retrying). An operation that finds its key busy with an effect
// returns ErrEffectPending (wrapped): the runtime attempts the effect at
// once, waits for it outside the key, and runs the operation again after
// its follow-up (or answers the attempt's error).
//
// A Timer runs an operation under its key at a time: a transaction's
// timeout, an idle transactional id's expiry, the groups' member expiry. A
// key has at most one timer: a new one replaces it. Timers and effect
// retries fire in RunDue, which Run calls when the earliest is due (at
// least every Config.Tick); a timer whose key is busy fires at the next
// call.
//
// Invariants:
//   - a shard's state is what its partition's log holds up to the records
//     its own writes had acknowledged (acks=all), at its leader epoch;
//   - a write at an epoch the broker no longer leads at fails and changes
//     nothing (Partition.AppendAcksAll fences it; with Config.Fence the
//     runtime refuses it before appending, and runs no effect);
//   - no lock is held across an effect or while waiting for one: only an
//     operation's keys are held across its own records' append;
//   - the records of operations that exclude each other (one key or
//     sub-key held by both, not shared) replay in log order, and the later
//     one runs against the earlier one's records.
//
// # Why it is linearizable
//
// An operation takes effect at its run, under mu: what it reads and the
// in-memory changes it makes are ordered by mu with every other run and
// Read; its records are replayed before it answers. Operations that
// exclude each other are ordered by their keys, which is also their log
// order (the first one's records are replayed before the second runs).
// The only overlap is an operation B that runs (or a Read) while another,
// A, whose locks it does not need, waits for its append: B sees A's run
// but not A's records, which replay after B's run. The shards choose keys
// so that every such pair is one of:
//   - B first (A has not answered): A's run read nothing B changes, and B
//     read nothing A's run changed; A's records then apply after B's
//     changes, as in that order (a group's heartbeat beside its commit or
//     its deletion);
//   - A first: B reads nothing A's records change, and B's changes and
//     A's records commute, changing different state (a group's commits
//     of different partitions, a heartbeat beside a static member's
//     join, operations of different groups).
//
// Records of operations in flight at once may replay in either order:
// they change different state. A write that fails answers an error and
// its records are not replayed: it had no effect here, or, having reached
// the log, an effect a later load applies, as a client told the write
// failed must expect. No operation answers before its records are durable
// (acks=all), so what one answered survives a failover, and a new
// leader's load replays the log in order: the order each key's records
// already had.
//
// # Concurrency
//
// Every method may be called concurrently. mu guards the shard's state and
// the runtime's tables: it is held while an operation runs (Op, Then,
// Timer.Op, Read) and while records replay, never across an append or an
// effect. A key lock is taken before mu, never while holding it; an
// operation takes its key, then its sub-keys in sorted order, and locks
// grant in arrival order (a waiting exclusive operation is not starved by
// shared ones), so waits form no cycle (keys.go). Effects
// run in goroutines of the runtime's (one per attempt), and Run in the
// host's; Close stops both and waits for them. Lock order: Runtime.mu,
// then a Hosted's locks; a Hosted never takes Runtime.mu.
package runtime
