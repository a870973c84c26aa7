// Package quota divides each tenant's cluster-wide rate limits among the
// brokers and decides its count limits from the sum of what the brokers
// hold. It is pure: the control plane's ExchangeQuotas handler
// (controlplane/api/usage.go) feeds it the brokers' quota reports and the
// tenant's limits, and answers what it returns.
//
// # Division
//
// A broker exchanges quotas about once an Interval (1 s): it reports, per
// tenant, the rates the tenant's clients offered it (refused requests
// included) and admitted, and what the tenant holds there. For one tenant
// with limit L on a rate (produce bytes/s, fetch bytes/s, requests/s,
// producer ids/s = producer_ids_per_hour / 3600: each rate dimension of
// the limit table, package limit), over the N brokers with a
// fresh report for the tenant (received within Fresh, 3 intervals; a broker
// that stopped reporting drops out), broker b's allotment is
//
//	a_b = L × (α/N + (1−α) × o_b / Σ o)
//
// where o_b is the rate b reported as offered (a moving average over its
// windows with a 5 s time constant, dataplane/quota's Meter: a client
// waiting out a refusal's delay keeps its broker's share meanwhile) and
// α (Floor, 0.1) is the part spread evenly, so that a broker the tenant barely uses can still
// admit its first requests before its share grows. With nothing offered
// anywhere, a_b = L/N. The allotments computed from one set of reports sum
// to L exactly. Each dimension is divided on its own.
//
// A report marked arriving (the tenant's traffic starts at that broker and
// a call there waits for the allotment; nothing has measured what it
// offers there) has each offered rate taken as the larger of its own and
// the mean of the other brokers' fresh reports (Arrive), and the control
// plane stores the estimate as the report, so that every broker dividing
// the tenant's limits before that broker's next report divides them
// alike. Zero would be the floor, and a client that spreads its records
// over every broker, as Kafka's partitioners do from one buffer, would
// move at the floor's pace until the averages caught up. The cost: the
// other brokers hold their larger allotments until their next exchanges,
// so for up to one interval T after an arrival the allotments in force
// can sum to up to L × (1 + 1/N) (the arriving broker's mean share on top
// of the others' whole); a tenant can cause one such step per broker at
// most every 15 s (an arrival needs that long without produce there).
//
// # Error bound
//
// Each broker holds the allotment of its own last exchange, computed from
// the other brokers' reports as stored then. Those were received up to one
// interval T before, and each measures the interval before it: every
// allotment in force at time t reflects the offered traffic of some moment
// in [t−3T, t]. While no share of the tenant's offered traffic moves
// between brokers, the allotments in force sum to L. When the reported
// shares move by a fraction m (m is the total-variation distance of the
// share vectors, 1 for all of it moving from one set of brokers to
// another), the allotments in force sum to within ±(1−α)·m·L of L for 3
// intervals. The reported shares are averages: when the traffic itself
// moves, they follow it over several time constants, 1 − e^(−T/5s) of
// the gap (18 %) each interval, so one move of the traffic is many small
// moves of the shares whose m add up to the traffic's, each worth
// ±(1−α)·m·L for 3T. A broker joining or leaving the N moves the floor
// parts by up to α·L/N for 3T. So the tenant's admitted total exceeds L
// by at most (1−α)·m·L at any moment (less, spread over the averages'
// convergence), and by (1−α)·m·L·3T summed over time per move of the
// traffic, plus what the brokers' token buckets let burst (their burst size,
// dataplane/quota). Averaged over a window W, the excess is at most
// (1−α)·m·L·3T/W per move in W: with T = 1 s, W = 10 s and demand swapping
// entirely once in the window, 27 % of L; with a tenant's traffic spread
// steadily over the brokers (shares that move by a few percent), a few
// percent.
//
// The floor costs the other way: offered at only k of the N brokers with a
// fresh report (the others report holdings only), the tenant can be
// admitted L × (1 − α(N−k)/N), no less than (1−α)·L.
// And while the averages follow a move of the traffic, the brokers it
// moved to hold less than their new share: the tenant is admitted less
// than L there, by up to (1−α)·m·L at first, shrinking by e^(−t/5s).
//
// # Count limits
//
// Decide compares sums with the tenant's count limits: storage_exceeded
// when the hot bytes (the fresh reports' hot_storage_bytes, leaders' local
// logs) plus the cold bytes (COPY_FINISHED remote segments) reach
// max_total_storage_bytes; groups_exceeded and transactional_ids_exceeded
// when the fresh reports' groups or transactional ids reach max_groups or
// max_transactional_ids. Only fresh reports count, so a dead broker's
// holdings are not counted next to its successor's. A storage decision is
// as old as the reports (up to 3T), so a tenant can pass its storage limit
// by what it writes in that time before its brokers refuse more. The group
// and transactional-id flags are informational (error messages, metrics):
// those limits are decided by reservation.
//
// # Reservations: groups and transactional ids
//
// A flag decided from the sums lets a burst through: every creation until
// the next exchange shows the sum is admitted (916–1,000 new groups of
// 1,000 asked for at once, against a limit of 100, in TestQuotaCountLimitsBurst). So a coordinator reserves
// each new name before it creates it (BrokerService.ReserveObjects; the
// broker gathers the reservations made while a call is in flight into the
// next call). The store decides a tenant's reservations one transaction at
// a time, holding the tenant row's lock (as topic creation does, so any
// number of control-plane replicas decide one after another): a name is
// granted when it is pending already, or when
//
//	reported + pending < limit
//
// where reported is the sum of the tenant's fresh reports (Fresh) and
// pending the names granted, not yet confirmed and not older than
// ReservationTTL; a granted name is then pending. A broker confirms a
// reservation in the first exchange whose counts it took after the
// reservation was applied (the coordinator created the object or failed
// to); the report is written and the confirmed names dropped from pending
// in one transaction, and a decision reads reports and pending names in
// one snapshot, so an object is never missing from both. The invariant:
// every object created through a grant is pending, or counted in its
// coordinator's latest fresh report, or both for a moment (counted after
// creation but before its reservation was applied: a brief over-count,
// which refuses early, never late). With it, the count a decision sees is
// at least the number of objects, and grants stop exactly at the limit
// however many brokers, replicas and concurrent creations there are
// (TestQuotaCountLimitsBurst: 100 of 1,000 concurrent creations over 3 brokers,
// for groups and for transactional ids).
//
// The invariant needs the object's coordinator to keep reporting it.
// Where that fails, the remaining error, per tenant:
//
//   - A coordinator moving to another broker (preferred-leader election,
//     reassignment) with its broker alive: the old leader's next report
//     leaves the partition out, and the new leader counts it once it has
//     loaded the partition and exchanged, about an interval T later. In
//     between the tenant's objects on the moving partitions are uncounted:
//     a tenant creating new ones in that second can pass its limit by at
//     most the number of its objects on those partitions. The other way,
//     both may report them for up to T (refusals below the limit).
//   - A broker crash: its last report counts for Fresh (3 s) after it,
//     then its objects are uncounted until the new leaders, elected once
//     its lease expires, load and report them: the excess is bounded by
//     the tenant's objects on that broker, for (lease − Fresh + load + T)
//     seconds. Its unconfirmed reservations count until ReservationTTL
//     (2 min), next to what its successors report of them: refusals below
//     the limit for up to that long, when the tenant is near it.
//   - The control plane unreachable from a broker: that broker admits
//     creations unreserved (failing open, as produce and fetch keep
//     working through an outage), and its reports go stale, so its objects
//     drop out of the sums after Fresh. The excess is bounded by what the
//     tenant creates at that broker during the outage plus what it holds
//     there; once it reports again the sums are right, and creations are
//     refused until the tenant is under its limit.
//   - A creation that outlasts ReservationTTL after its grant (a write to
//     the internal topic stuck for two minutes, where writes time out
//     after 30 s) is uncounted from the reservation's expiry until its
//     broker reports it.
//   - A change of limits reaches a replica within its limit cache's 5 s.
//
// Groups that live only in memory (joined, never committed, no static
// member) are lost by a coordinator failover, and their next heartbeat
// reserves them again: counted once. Deletions and expired transactional
// ids only lower the counts, at the next report.
package quota
