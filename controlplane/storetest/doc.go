// Package storetest is the contract suite of the control-plane store: one set
// of tests that every store.Store driver (controlplane/store/postgres and
// controlplane/store/sqlite) must pass, run from each driver's tests:
//
//	func TestStoreSQLite(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { ... })
//	}
//
// Run covers every method and every documented error of store.Store;
// RunConcurrent proves the guarantees that only show under contention (count
// limits never exceeded, also by partition growth, one winner per topic
// growth and per partition epoch, an exact broker load under concurrent
// creations, growths, elections and deletions, broker epoch fencing,
// one controller-lease holder at a time, no write of a deposed controller,
// one finished remote copy per range while leaders race, one active alert
// per key and one move per alert state while replicas race, one delivery
// row per state change, each delivery claimed once, webhook limits, a
// usage report retried at once applied once, offsets reported by racing
// brokers metered once, a meter advanced by racing replicas counting each
// interval once, one finalization of an invoice and its deliveries).
// DeliveryClaimContest runs the claim race over several handles.
// ControllerLeaseContest runs the lease race over several handles on one
// database, as separate control-plane replicas would hold.
// BrokerLoadBackfill checks the migration that counts the broker load of a
// database that already holds partitions; BenchmarkPlacement measures the
// store's share of placing a topic at 300 and 3000 partitions held, and
// BenchmarkPartitionReads the partition reads of the control plane's
// rounds at 6,000 partitions.
//
// newStore returns an empty, migrated store and closes it at t's cleanup.
// Subtests that only touch their own tenants share one store and run in
// parallel; subtests that read global state (the tenant list, signing keys,
// brokers, partition load, the revocation and suspension feeds) get a store
// of their own.
//
// Subtest names carry a family prefix (Tenant…, APIKey…, SigningKey…,
// Topic…, Partition…, Broker…, Controller…, Metadata…, RemoteSegment…,
// LagSample…, Alert…, Webhook…, Delivery…, Usage…, Billing…, Time…, Concurrent…) so a run can
// select a family with -run.
//
// The remote-segment tests register brokers, but of ids no other test uses
// (one fixture each), so they share the store: the tests that list brokers
// have stores of their own.
//
// The suite pins down, for both drivers alike, a few behaviours the interface
// comments leave open:
//
//   - a malformed (non-UUID) tenant or topic id is simply not found;
//   - ListTenants orders by (CreatedAt, ID); an unknown afterID is
//     ErrNotFound; a limit <= 0 means no limit;
//   - TenantUsage of an unknown tenant is ErrNotFound;
//   - empty lists (scopes, ISR) read back as nil, empty overrides as "{}";
//   - times are truncated to the millisecond on write and read back in UTC;
//   - HeartbeatBroker never shortens a lease;
//   - a taken topic name is reported before a count limit;
//   - a lost compare-and-set and a fenced write leave the metadata version as is;
//   - remote-segment writes leave the metadata version as is;
//   - a remote-segment update is refused by the fence before anything else,
//     a repeat included; ListRemoteSegments of an unknown partition is empty;
//   - a malformed id in a tenant-scoped read is not found (or an empty
//     list); text that Postgres cannot store (NUL, invalid UTF-8) is refused
//     by both drivers, and a delivery's error text is cleaned, not refused.
package storetest
