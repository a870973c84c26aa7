// Package kafka is the Kafka wire-protocol listener of a broker: a front
// door beside the Connect one (dataplane/connectapi) over the same
// protocol-neutral services (dataplane/records for the record path,
// dataplane/groups for consumer groups of both of Kafka's protocols and
// their offsets, dataplane/txns for transactions (both of the ways Kafka
// clients end them: Txns), Admin for topic administration through the
// control plane). Requests and
// answers are franz-go's kmsg codecs; this package frames them, checks
// versions (ApiVersions advertises exactly what is served: versions), runs
// SASL (PLAIN with an API key, OAUTHBEARER with a Sluice token; KIP-368
// session lifetimes), scopes every request to the session's tenant, and
// maps the services' domain errors to Kafka's error codes (errors.go).
// docs/kafka.md is the user's view.
//
// # Connections
//
// Each connection has a reader goroutine, which reads at most one frame
// ahead (before authentication none: a SASL v0 token is not a request),
// and serve, which handles the frames in order and writes their answers
// in order, each answer in one write. A request is handled once the one
// before it is done, except after a Produce whose batches are all
// appended (records.ProduceManyRequest.Appended): the next Produce is then
// handled while it waits for its acknowledgements, up to maxPipelined at
// once, so a producer's in-flight requests overlap their replication and
// fsync waits while their appends stay in request order (what Kafka's
// per-connection ordering and idempotent producers rely on); a Produce
// refused before it appends releases the next one too, and a refused
// acks=0 Produce, which has no answer, closes the connection. Any other
// request waits until every Produce before it is answered. A request over
// the tenant's quota is held, and the connection reads nothing meanwhile
// (as Kafka mutes a throttled channel); a Fetch that finds the quota in
// debt is answered with what it read and throttle_time_ms, then the
// connection is muted that long (KIP-219). A JoinGroup or SyncGroup that
// waits for the group's other members holds its connection as Kafka's
// does (clients send them on a connection of their own).
package kafka
