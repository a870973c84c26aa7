// Package fetcher is the follower side of replication: a broker's
// fetchers (Kafka's ReplicaFetcherManager and ReplicaFetcherThread), one
// per leader broker, each with one goroutine and one fetch session
// (dataplane/partition/fetchsession on the leader's side) carrying every
// replica here that follows a partition of that leader.
//
// A replica registers with Follow when it starts following (under its
// lock, from partition.Replica.Update) and leaves with Unfollow when that
// role ends; a fetcher's goroutine starts with its first registration and
// the context given to it, and ends when nothing is registered or that
// context ends. A round of the fetcher (Round) makes each replica's
// fetched batches durable (up to 8 fsyncs at once, outside every lock),
// asks each replica's follower state machine (dataplane/replica's
// Follower) for its position under the replica's lock (Replica.Next),
// sends one request without any lock, and applies each answer under the
// replica's lock (Replica.Apply, which truncates, resets or appends as
// the state machine decides): only the round writes a following
// replica's log. With a leader that predates sessions (FetchReplicas
// answered derr.UnsupportedVersion) the fetcher sends one FetchReplica
// per partition instead, up to 8 at once from short-lived goroutines, for
// a minute at a time. A partition whose answer failed leaves the session
// and comes back alone after a backoff (50 ms, doubling up to 1 s); a
// failed request starts a new session. A replica whose log failed stops
// the broker (Config.FailStop).
//
// The fetcher knows its replicas only as Replicas and its leaders only
// through LeaderClient, whose errors are domain errors (dataplane/derr):
// it knows no protocol and not the partition package.
package fetcher

import (
	"context"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// A Replica is a partition replica of this broker that follows a leader,
// as its fetcher sees it: dataplane/partition's Replica (partition adapts
// it). Registrations compare Replicas with ==.
type Replica interface {
	// TopicID and Partition name the replica's partition.
	TopicID() string
	Partition() int32
	// Log is the replica's log: the fetcher makes what it fetched durable
	// before it reports it, and reads whether the log failed.
	Log() *log.Log
	// Next sets fol's broker epoch and returns fol's next fetch request,
	// under the replica's lock, unless fol no longer is the replica's
	// follower state machine (its role ended: ok false).
	Next(fol *replica.Follower, brokerEpoch int64) (q replica.FetchRequest, ok bool)
	// Apply applies the leader's answer res to fetch q of fol, as fol
	// decides (a truncation, a reset to the leader's log start, the
	// records appended, the HW), under the replica's lock; an answer for a
	// role that ended is ignored.
	Apply(fol *replica.Follower, q replica.FetchRequest, res *sluicev1.FetchReplicaResponse) error
}

// LeaderClient is a leader broker's replica service, as the fetcher of its
// partitions calls it. Errors are domain errors (the broker translates its
// protocol's): derr.UnsupportedVersion from a leader that predates
// FetchReplicas.
type LeaderClient interface {
	FetchReplicas(context.Context, *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error)
	FetchReplica(context.Context, *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error)
}
