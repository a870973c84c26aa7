// Package testcluster runs a real Sluice cluster for end-to-end tests: one
// `sluice controlplane` process on a real Postgres and N `sluice broker`
// processes on loopback, each with its own data dir and log file, and
// injects faults into it: SIGKILL, SIGSTOP/SIGCONT, restarts with the same
// or an empty data dir, link cuts through TCP fault proxies, and lost
// answers of one RPC method (RPCProxy, between brokers and the control
// plane).
//
// It also holds the Jepsen-style workload and checker that prove the
// broker's promises (REFERENCE §2): producers send unique payloads with
// acks=all and record every outcome (acknowledged at an offset, definitely
// refused, or indefinite); consumers record every record they poll; after
// the faults heal, Check reads the final logs and reports lost,
// duplicated, misplaced, unexpected and diverging records, and
// ReplicasIdentical compares every replica's segment files byte for byte.
//
// For quotas and metering it sets a tenant's limit overrides as the
// operator does (SetTenantOverrides), sums a partition's data batch sizes
// below its high watermark (LogBytes: the ingress billing must count),
// reads a tenant's billed usage (Usage) and counts the requests a Client
// sent to brokers (Sent).
//
// Only tests import this package. Every wait polls with a deadline (Wait);
// nothing sleeps as synchronisation. A cluster's directory (logs, data dirs,
// the workload history) is removed when the test passes and kept, with its
// path and the tail of every log printed, when it fails.
//
// # Goroutines
//
// Each process has one goroutine waiting for it to exit; each proxy has an
// accept loop and two copy goroutines per connection (an RPCProxy, an
// http.Server's). All of them end at the
// test's cleanup. Workload producers and consumers are owned by the
// Workload and end in Stop.
package testcluster
