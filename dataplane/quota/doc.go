// Package quota is a broker's per-tenant rate limiting: one token bucket
// per tenant and dimension (produce bytes/s, fetch bytes/s, requests/s,
// producer ids/s), and meters of what each tenant offered and was
// admitted, for the broker's quota exchange with the control plane
// (BrokerService.ExchangeQuotas, controlplane/quota divides each tenant's
// cluster-wide limits into the brokers' allotments). It is pure: a Limiter
// reads the time only through its clock and does no I/O; the broker
// (dataplane/broker/quota.go) calls it on its request paths and applies
// the allotments every exchange.
//
// # Buckets with debt
//
// A bucket fills at its rate up to its burst (Config.Burst seconds of the
// rate: 1 s for bytes and requests, 60 s for producer ids, whose rates
// are a fraction of one per second). A request is admitted when the
// bucket is not in debt (it holds zero tokens or more) and is then charged
// its whole cost, which may take the bucket below zero: one request larger
// than the burst is admitted, and the ones after it wait until the debt is
// paid. A request arriving while the bucket is in debt is refused with
// the time the debt takes to pay off at the rate (debt / rate), after which
// the next request is admitted. Over any time T a bucket admits at most
// burst + rate × T + the cost of one request, and under load that keeps it
// in debt it admits rate × T, give or take one request: the long-run
// admitted rate is the rate.
//
// Fetches are charged after they are answered, with the bytes answered
// (Check, then Charge): a fetch arriving in debt is refused before it
// reads anything.
//
// # Rates
//
// SetRates replaces a tenant's rates at once (the broker applies new
// allotments every exchange, about every second): the bucket first fills
// at the old rate up to now, then keeps its tokens (at most the new
// burst) and its debt, which the new rate pays off. A rate of 0 means no
// limit: a tenant the Limiter has no rates for is admitted in every
// dimension and only metered, which is how a broker treats a tenant until
// its first allotment arrives.
//
// # Meters
//
// Every decision is metered per tenant and dimension: offered (admitted
// and refused, a refused fetch at the cost its caller estimates) and
// admitted. Window returns both as rates per second over the time since
// the previous Window, and starts a new window; a tenant with no traffic
// for Config.ForgetAfter windows is forgotten, rates and all.
//
// # Concurrency
//
// Every method may be called concurrently. The tenant map takes a
// read-write lock, each tenant's state its own lock (taken after the map's,
// never while holding another tenant's).
package quota
