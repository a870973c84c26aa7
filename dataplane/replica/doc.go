// Package replica is the replication logic of one partition as pure state
// machines: a Leader that tracks its followers, the high watermark (HW), the
// in-sync replica set (ISR) and acks=all waits, and a Follower that
// fetches from the leader and truncates a divergent tail by leader epoch.
//
// # Model
//
// A partition has replicas, one of which leads under a leader epoch chosen
// by the controller; the controller also owns the ISR, versioned by a
// partition epoch. The leader appends, followers pull by fetching from their
// log end offset (LEO), and a follower's fetch offset is its LEO as far as
// the leader knows. Each replica also knows how much of its log is durable
// under the broker's flush policy (LogState.Durable: fsynced with "always"
// or "interval", the whole log with "os"); a follower reports its durable
// end with every fetch and the leader's own comes from Flushed. The HW is
// the smallest durable end in the ISR, the leader's included; consumers read
// only below it and acks=all completes once the HW covers the records. So a
// follower may fetch records the leader has not synced yet, and syncs run in
// parallel on every replica, while nothing is committed before every ISR
// member (under a syncing policy) has it on disk.
//
// The leader changes the ISR only through the controller. Tick proposes one
// change at a time. A follower is in sync when a fetch of it in this leader
// epoch caught up to the leader's LEO within replica.lag.time.max (Kafka's
// lastCaughtUpTime: a fetch reaching the leader's LEO of the previous fetch
// counts as caught up as of that fetch; ISR members count as caught up when
// the leadership begins). Its last known LEO equalling the leader's does not
// make it in sync: that position is only as fresh as its last fetch, and an
// idle follower that stopped fetching (a dead broker) must leave. A live
// idle follower keeps fetching at the LEO and stays. A shrink removes ISR
// followers that are out of sync or that reported a LEO below the HW (they
// lost data, e.g. a restart with an empty disk). An expansion adds replicas
// that are in sync, whose durable end reached the HW, whose LEO reached the
// start offset of this leader epoch, and that fetched since they last left
// the ISR or were last refused entry by the controller: a follower is
// proposed on news, so a dead one is not proposed at all and a refused one
// at most once per fetch. Using the same criterion both ways keeps a slow
// follower from flapping. Expansions carry the added brokers' epochs
// (KIP-903). The controller applies a proposal with compare-and-set on the
// partition epoch and tells the leader (ISRChanged); stale partition epochs
// are ignored. While a change is in flight the HW is computed over the
// "maximal ISR": the confirmed ISR plus any replicas being added (a pending
// shrink removes nobody), so the HW never counts on a smaller set than the
// controller may already hold. A proposal refused for a stale partition
// epoch stays pending until the newer state arrives, because the controller
// may have applied it earlier.
//
// A follower's every fetch carries the epoch of its last batch, and the
// leader checks it against its own epochs: when that epoch ends earlier in
// the leader's log than the fetch offset (or the leader never had it), the
// leader answers with the end of the largest epoch at or below it instead of
// records. The follower truncates to the smaller of that and its own end of
// that epoch, or, when the leader answered with an epoch it lacks, to its
// own end of its largest epoch below that one, and fetches again (KIP-101,
// KIP-279, with the divergence carried by the fetch as in KIP-320 and
// Kafka ≥ 2.7). So after every leader epoch change, even with the same
// leader (KAFKA-7164), the first fetch reconciles the log and no divergent
// tail survives. A follower never truncates below its HW (committed
// records) unless the topic allows unclean leader election. Its HW is the
// largest HW a leader sent it, capped at its own LEO: it never moves back,
// although a new leader may start below what its predecessor exposed.
//
// The state machines do no I/O, start no goroutines and read no clock: every
// time is an argument and the caller (the broker) performs the requests,
// appends and truncations they ask for. They are not safe for concurrent
// use; their owner serialises calls.
//
// # Invariants
//
//   - HW ≤ durable end (and so LEO) of every ISR member: the HW is the
//     minimum of the durable ends over the maximal ISR, and a follower whose
//     durable end is unknown in this leader epoch holds it back. A new
//     leader starts with its local HW and unknown follower positions.
//     The one exception is a member that lost its log (a restart with an
//     empty disk): its fetch below the HW makes the leader propose its
//     removal at the next Tick, without waiting for the lag time.
//   - The HW never decreases on a leader. A new leader starts from its own
//     HW, which may be below what the previous leader exposed; the broker
//     should answer "latest offset" queries as retriable while HW() <
//     EpochStartOffset(), as Kafka does.
//   - The HW does not advance while the confirmed ISR is smaller than
//     min.insync.replicas (Kafka KIP-966 "strict min ISR").
//   - acks=all completes only when every ISR member holds the records and the
//     ISR has at least min.insync.replicas members. Otherwise the produce is
//     refused (CanAcceptAcksAll, WaitAcksAll) or the pending wait fails with
//     ErrNotEnoughReplicas when the ISR shrinks below min ISR, and with
//     ErrNotLeader when leadership is lost (Resign, Close). Never silently
//     downgraded to acks=1.
//   - Only ISR members can be proposed as leader: the controller elects from
//     the ISR, and a replica enters the ISR only after a fetch in this
//     leader epoch showed its durable end at the HW and its LEO at the
//     leader epoch's start offset while the HW counted it, so every ISR
//     member holds every committed record.
//   - Leader epochs strictly increase: Resign and BecomeFollower refuse an
//     epoch that is not newer. A request with a stale leader epoch is fenced
//     (ErrFencedLeaderEpoch); a newer one tells a stale leader it is behind
//     (ErrUnknownLeaderEpoch). A fetch from an older broker incarnation is
//     refused (ErrStaleBrokerEpoch).
//   - A follower never truncates below the HW the ISR agreed on: committed
//     records carry the same epochs on every ISR member, so the epoch end
//     offsets it truncates to are at or above them.
//
// # Use
//
// A partition replica on a broker (dataplane/partition) owns the state
// machine of its role and serialises calls to it (under the replica's
// lock). It feeds the Leader with
// Append after each local append, Flushed when the local log's durable end
// moves (after a sync, which it runs outside its lock), FollowerFetch for
// every replication request (idle ones too: a follower whose fetches stop
// reaching the leader leaves the ISR after replica.lag.time.max; a
// follower broker's fetch session counts each of its requests as a fetch
// of every partition it carries, at the position the session holds),
// ISRChanged and ProposalRejected from the
// controller, and Tick from its ISR checker loop; it sends the proposals
// Tick returns, and completes produce requests from TakeAcks. A Follower's
// owner loops: Next, send the fetch, then HandleFetch with the log's state,
// truncating the log as it says or appending the records, and making them
// durable before the next fetch reports them. LogState and EpochEntry
// mirror the partition log's LEO, durable end and leader-epoch cache
// (dataplane/log), which this package does not import.
//
// # Tests
//
// testdata/*.txt are scripted scenarios in the etcd raft style, run by
// scenario_test.go over a simulated partition (cluster_test.go: logs, a
// controller that can delay, reorder and refuse, a virtual clock, crashes
// and network isolation) with the invariants above checked after every
// command. model_test.go drives the same simulation with random commands
// from fixed seeds. The broker runs these state machines and keeps no copy
// of their state; dataplane/partition's TestPartitionReplicationModel runs
// the same random faults and invariant checks on the partition replicas
// brokers run (partition.Replica), with real logs, through their own
// replication paths. Regenerate the expected output after an intended change
// with
//
//	go test ./dataplane/replica -run TestReplicaScenario -rewrite
//
// and review the diff.
package replica
