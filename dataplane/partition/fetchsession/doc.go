// Package fetchsession is the leader side of replica fetching: the fetch
// sessions of the follower brokers (the ReplicaService's FetchReplicas,
// after Kafka's KIP-227 incremental fetch sessions, whose FetchSession and
// FetchSessionCache it plays). Sessions holds one session per follower
// broker, carrying every partition that broker follows from this one; a
// request lists only the partitions whose position changed, counts as a
// fetch of every partition in the session, and long-polls once for all of
// them. Its follower side is dataplane/partition/fetcher.
//
// A session knows its partitions only as Replicas: the broker's replicas
// (dataplane/partition's, wired by partition.NewSessions) serve each
// partition's fetch and signal their changes to the sessions that watch
// them. The leader state machines stay the single source of truth: a
// session holds positions, never the HW or the ISR. Its refusals are
// domain errors (dataplane/derr): FetchSessionIDNotFound for an unknown
// or evicted session, InvalidFetchSessionEpoch for a wrong session epoch
// or a session already serving a request, InvalidRequest, and
// ResourceExhausted when every session is busy; a partition's failure is
// answered in that partition's answer, in the protocol's terms
// (Config.ErrorAnswer).
//
// # Locking
//
// A request holds its session's lock while it is served; it calls its
// replicas (Replica.Fetch, Watch, Unwatch), which take their own lock, and
// a replica calls Watcher.Changed under its lock, which takes only the
// session's dirty-set lock and never blocks. Lock order: a session's
// lock, then a replica's, then the session's dirty-set lock. Sessions.mu
// (the set of sessions, their epochs and busy marks) is never held across
// a replica's call.
package fetchsession

import sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"

// A Replica is a partition replica of this broker, as a session serves
// it: dataplane/partition's Replica (partition.NewSessions adapts it).
type Replica interface {
	// TopicID and Partition name the replica's partition.
	TopicID() string
	Partition() int32
	// Fetch serves one fetch of the follower at pos (FollowerId and
	// FollowerBrokerEpoch set from the request), reading at most maxBytes
	// of records (at least one batch when maxBytes > 0, none otherwise).
	// Every call counts as a fetch of the follower at pos for the ISR.
	// res carries the records, a diverging epoch, or only the HW, log
	// start and copied end; more reports that records are there but
	// maxBytes was ≤ 0, so none were read. The errors are domain errors
	// (NotLeader, a fenced or unknown leader epoch, ...).
	Fetch(pos *sluicev1.FetchReplicaRequest, maxBytes int) (res *sluicev1.FetchReplicaResponse, more bool, err error)
	// Watch makes w a watcher of the replica until Unwatch: every change
	// of the replica (an append, the HW, the role) calls w.Changed with
	// it, under the replica's lock.
	Watch(w Watcher)
	Unwatch(w Watcher)
}

// A Watcher is told when a replica it watches changes: Changed is called
// under the replica's lock, so it must neither block nor call the
// replica. A session is the watcher of each of its replicas.
type Watcher interface {
	Changed(Replica)
}
