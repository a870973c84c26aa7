// Package controller is the cluster controller: the one control-plane
// replica holding the controller lease watches broker liveness and moves
// partition leadership and ISR membership accordingly.
//
// # Model
//
// Every Interval (250 ms) the controller tries to acquire the lease
// (store.AcquireControllerLease, TTL 3 s, holder = a random id per
// process); once active it renews it when a third of it has passed, not
// every round (a store write each). While it holds the lease it reads all brokers, brings its view of the
// partitions up to date, decides the changes with the pure function Decide,
// and writes them with store.UpdatePartitionsFenced under its lease epoch,
// at most MaxBatch (500) changes per transaction, so a failed broker's
// thousands of partitions are re-elected in a few transactions rather than
// one each. A deposed controller's batches are refused whole
// (store.ErrFenced: it deactivates); the compare-and-set stays per
// partition: a partition whose epoch moved meanwhile (a leader's
// AlterPartition) or that was deleted is skipped alone and decided again
// next round, from its row as it is then. A broker is dead when its lease
// has expired (or it is unknown).
//
// The view holds every partition's state and its topic's name and
// unclean-election config. It is read whole once per activation (the
// metadata version first, then store.ListAllPartitions) and then follows
// the store: each round reads the metadata version and, only when it
// moved, what changed since the view's version (store.MetadataChangesSince:
// the partitions written, as they are now, and the topics deleted). So an
// idle round reads the lease, the brokers and the version, and a busy one
// what changed, never every partition. The controller's own successful
// writes go into the view as it writes them; a write that lost its
// compare-and-set comes back with the next changes. Behind the store's
// horizon of kept deletions (store.ErrChangesPruned), or when the store's
// version went backwards (a restored database), the view is read whole
// again; a deactivated controller drops it. Decide runs over the whole
// view, except in a round whose partitions, topic configs and Liveness
// (the brokers live now, and those live for PreferredLeaderDelay) are
// those of a round that decided nothing: Decide reads nothing else, so it
// would decide nothing again.
//
// Decide applies, per partition, the first rule that matches:
//
//  1. the leader is dead: elect the first replica (in replicas order) that
//     is in the ISR and live; the ISR loses its dead members. With no live
//     ISR member the partition goes offline: leader -1, ISR kept as it was
//     (the brokers that may hold every committed record).
//  2. the ISR holds dead followers: remove them.
//  3. the partition is offline and an ISR member is live again: elect it.
//  4. the preferred leader (replicas[0]) is live, in the ISR, not the leader,
//     and has been live for PreferredLeaderDelay (10 s): move leadership
//     back to it. The delay keeps a flapping broker from flapping leadership.
//
// Every change bumps the partition epoch by exactly one; every change of
// leader (including to and from -1) bumps the leader epoch.
//
// # Invariants
//
//   - Only ISR members become leader (unclean election is off; see the TODO
//     in Decide).
//   - The ISR is never empty and never gains members here: the controller
//     only removes dead brokers; partition leaders add caught-up followers
//     back through AlterPartition.
//   - Leader epochs and partition epochs only increase.
//   - At most one controller writes at a time (the lease epoch fences).
//
// After it becomes active, a controller makes no change for StartupGrace (the
// broker lease): if the whole control plane was down, brokers could not
// heartbeat and their leases look expired; the grace lets them heartbeat
// again before anyone is declared dead.
//
// # Goroutines
//
// Run is the controller's only goroutine and owns all its state; it returns
// when its context is cancelled. The server starts it and waits for it.
//
// # Time
//
// Every time the controller reads (lease expiries, liveness, the startup
// grace, the preferred-leader delay) and its rounds' ticker come from
// Deps.Clock (internal/clock): the real clock in production, a fake one in
// tests, which move it step by step so that a lease lapses only when a
// test lets it.
package controller
