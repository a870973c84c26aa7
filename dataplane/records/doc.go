// Package records is the data plane's record path as a protocol-neutral
// service: produce (one partition, or many at once with ProduceMany, and
// transactional produce), fetch (with the long poll and read_committed),
// list offsets, metadata and producer-id allocation. A Service takes plain
// Go requests and returns plain results and domain errors (dataplane/derr,
// *partition.NotLeaderError); the protocol adapters decode into them and
// encode out of them (the Connect adapter is dataplane/connectapi's
// Records; a Kafka listener calls the same methods).
//
// The service resolves every request against the cluster view it loads at
// its start (Deps.View), under the caller's tenant (tenants.PrincipalFrom):
// another tenant's topic is simply not found. A request is checked whole
// (its fields, its batches: CRC, format, size, control and transactional
// attributes) before it goes anywhere, so that it is written whole or not
// at all, and refused the same way by every broker; only then does the
// service look at who leads the partition. A partition another broker
// leads is answered with a *NotLedHereError (wrapping the
// *partition.NotLeaderError with the leader hint) before any quota is
// charged: an adapter that routes (Connect's forwarding) sends the request
// on to the leader, which admits it; one that does not answers the
// NotLeader. Quota admission (Deps.Quotas) happens on the leader only, once
// per request: a produce is charged before it is appended and refunded when
// the log wrote none of it; a fetch is checked before it reads and charged
// what it answered.
//
// ProduceMany writes each entry as Produce would, each partition's
// entries in request order on a goroutine of their own, so that appends,
// fsyncs and acks=all waits of different partitions overlap; it never
// forwards, and each entry carries its own domain error.
//
// Producer ids come from blocks the broker reserves from the control plane
// (Deps.AllocateProducerIDs): unique across the cluster, never reused, one
// control-plane round trip per block.
//
// Goroutines: ProduceMany runs one per partition of a request, ended
// before it returns; Fetch's long poll watches the tenant's suspension on
// one (Deps.UntilSuspended) until the fetch returns. No lock is held
// across a call to a replica or the control plane.
package records
