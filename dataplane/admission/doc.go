// Package admission is a broker's quota enforcement (issue 17,
// docs/quotas-and-billing.md): the Enforcer decides every call of a
// tenant against the tenant's limits, whatever front door the call came
// through, and exchanges the tenants' traffic and allotments with the
// control plane. It knows no protocol: its refusals are domain errors
// (dataplane/derr), which each front door maps in one place.
//
// # Rates
//
// A tenant's rate limits (produce and fetch bytes/s, requests/s, producer
// ids/hour) hold for the whole cluster: every Config.Interval
// (--quota-exchange-interval) the Enforcer reports what each tenant
// offered and was admitted here, and what it holds here, to the control
// plane (Config.Exchange: BrokerService.ExchangeQuotas), which answers
// this broker's allotment of each tenant's limits (controlplane/quota
// divides them by the brokers' shares of the tenant's traffic) and
// whether the tenant is at its storage, group or transactional-id limit.
// The Enforcer enforces the allotments with dataplane/quota's token
// buckets (bursts of a quarter of a second: rateBursts), deciding first
// from a call's headers, before its body is read (AdmitCall):
//
//   - requests/s on every call a tenant's token authenticates, in the
//     gate; calls with the broker credential (replication, markers, a
//     broker acting for a tenant) and calls another broker forwarded are
//     not counted;
//   - produce bytes/s on Produce and ProduceMany, transactional or not:
//     refused in the gate while the bucket is in debt; charged the
//     request's record bytes at the broker that appends (a forwarding
//     broker charges nothing), before appending (AdmitProduce), and given
//     back when the log wrote none of them (RefundProduce,
//     RefundUnwritten);
//   - fetch bytes/s on Fetch at the leader: refused in the gate (and again
//     before reading: CheckFetch) while the bucket is in debt; an
//     admitted one is charged the bytes it answers (ChargeFetch);
//   - new producer ids per hour on every producer id the broker gives
//     (CheckProducerID, ChargeProducerID: an idempotent producer's
//     InitProducerId, a transactional id's first one or its epoch
//     overflow).
//
// Admit is the same decisions in one form, by dimension: admit a cost,
// then settle with what the call used; the named methods above are the
// same decisions spelt per call site.
//
// # Counts
//
// The count limits on groups and transactional ids are decided where those
// are created, by the coordinators' admission hooks (AdmitGroup,
// AdmitTransactionalID), which reserve each new name at the control plane
// (Config.Reserve: BrokerService.ReserveObjects; see reserve.go). The
// storage limit is decided on produce, from the flag the last exchange
// carried.
//
// # Refusals
//
// A rate refusal is a derr.ThrottlingQuotaExceeded error with RetryAfter
// (and Throttle: the time the bucket's debt takes to pay off) and Quota
// (the tenant and the limit's name); a count refusal (storage, groups,
// transactional ids, a transaction's bounds: CountRefusal) is a
// derr.PolicyViolation with Quota and no RetryAfter. Over Connect both
// are resource_exhausted, with google.rpc.RetryInfo and
// google.rpc.QuotaFailure (subject "tenant:<id>", description the
// limit's name) as dataplane/connecterr maps them.
//
// # Exchanges
//
// A tenant with no allotment here (new to this broker, or forgotten
// after 5 minutes without traffic) makes the Enforcer exchange at once
// (NoticeTenant), not at the next interval, reporting it as arriving (its
// offered rates not measured yet: the control plane estimates them from
// the other brokers'), and its calls wait for the answer, up to 3 s
// (awaitAllotment). A tenant with an allotment whose produce starts here
// (nothing produced here for 15 s) with a request larger than its bucket
// holds is reported arriving the same way, that produce waiting for the
// answer (awaitArrival); after that, or while exchanges
// fail, they are admitted and metered. While the control plane cannot be
// reached the last allotments stay in force. The system tenant (internal
// topics) is never limited.
//
// Goroutines: Run, the exchange loop (one per Enforcer, owned by the
// broker's Run), and at most one ReserveObjects sender at a time
// (reservations.send), started by the first reservation that finds none
// and ending when the queue is empty. The loop waits on Config.Clock, so
// a test drives it without real intervals. Lock order: Enforcer.mu
// before reservations.mu (an answered exchange confirms reservations
// under mu); neither is held across a call to the control plane.
package admission
