// Package controller is the cluster controller: the one control-plane
// replica holding the controller lease watches broker liveness and moves
// partition leadership and ISR membership accordingly.
//
// # Model
//
// Every Interval (250 ms) the controller acquires or renews the lease
// (store.AcquireControllerLease, TTL 3 s, holder = a random id per process).
// While it holds the lease it reads all brokers and partitions, decides the
// changes with the pure function Decide, and writes them with
// store.UpdatePartitionsFenced under its lease epoch, at most MaxBatch (500)
// changes per transaction, so a failed broker's thousands of partitions are
// re-elected in a few transactions rather than one each. A deposed
// controller's batches are refused whole (store.ErrFenced: it deactivates);
// the compare-and-set stays per partition: a partition whose epoch moved
// meanwhile (a leader's AlterPartition) or that was deleted is skipped alone
// and decided again from a fresh read next round. A broker is dead when its
// lease has expired (or it is unknown).
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
package controller
