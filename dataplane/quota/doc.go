// Package quota is a broker's per-tenant rate limiting: one token bucket
// per tenant and dimension (produce bytes/s, fetch bytes/s, requests/s,
// producer ids/s: the rate dimensions of the limit table, package limit,
// so a new one needs nothing here), and meters of what each tenant offered and was
// admitted, for the broker's quota exchange with the control plane
// (BrokerService.ExchangeQuotas, controlplane/quota divides each tenant's
// cluster-wide limits into the brokers' allotments). It is pure: a Limiter
// reads the time only through its clock and does no I/O; the broker's
// quota enforcement (dataplane/admission) calls it on the request paths
// and applies the allotments every exchange.
//
// # Buckets with debt
//
// A bucket fills at its rate up to its burst (Config.Burst seconds of the
// rate: 1 s for bytes and requests, 10 minutes for producer ids, whose
// rates are a fraction of one per second: a free-plan tenant's 1,000 an
// hour is 166 at once, so that a script starting one CLI producer after
// another, or a fleet of producers restarting together, is not refused
// after a handful). A request is admitted when the
// bucket is not in debt (it holds zero tokens or more) and is then charged
// its whole cost, which may take the bucket below zero: one request larger
// than the burst is admitted, and the ones after it wait until the debt is
// paid. A request arriving while the bucket is in debt is refused, with a
// delay after which to come back (below). Over any time T a bucket admits
// at most burst + rate × T + the cost of one request: what it held at the
// start (at most the burst), what it filled, and the debt the last
// admission left (at most that request's cost, since a request is
// admitted only out of debt). Check admits without charging until Charge,
// so fetches admitted together, before any of them is charged, may each
// add their cost to that. Under load that keeps the bucket in debt it
// admits rate × T, give or take one request: the long-run admitted rate
// is the rate.
//
// Fetches are charged after they are answered, with the bytes answered
// (Check, then Charge): a fetch arriving in debt is refused before it
// reads anything.
//
// # Refusals queue
//
// Refusing every request with the time the debt takes to pay off would
// send every client refused during one debt back at the same instant,
// where one is admitted (the bucket is in debt again) and the rest are
// refused again, over and over: N clients over their tenant's rate cost
// the broker N refusals per admitted request, which are CPU taken from
// the other tenants. So refused requests queue, on paper: a bucket keeps
// the end of its queue, the time by which it will have paid its debt and
// the costs of the requests refused so far (Take's cost; for Check, the
// refusedCost its caller estimates). A request of cost c refused at now is
// told to come back at start = max(now + debt / rate, end), RetryAfter =
// start − now, and the end moves to start + c / rate. Refusals in a row
// are thus told increasing delays, each later than the one before by that
// one's cost over the rate: the k-th comes back when the bucket has paid
// for the k−1 before it, and is admitted. N clients that each come back
// when told cost about one refusal per admitted request (each client's
// next request after an admission, which the just-charged bucket
// refuses); the delays they are given add up to what they did before
// (they wait as long, and ask less often). RetryAfter is never 0: at least
// a nanosecond, and at least the debt's time.
//
// The queue changes only the delays, never which requests are admitted:
// a request is admitted whenever the bucket is not in debt, queue or no
// queue, so the bound above holds as it did. A bucket cannot tell a
// request coming back when it was told from a new one (requests carry
// nothing a refusal gave them), so a rule keeping new requests out while
// refusals are queued would either refuse the returning ones too or hold
// tokens back for clients that may never return, and admit less than the
// rate. Nor does it need one: while the queued clients come back when
// told, the bucket is in debt at every instant but those at which a
// queued request is due, so a new request arrives in debt and joins the
// queue's end. It finds the bucket out of debt only when a queued one is
// late or gone, and then takes that one's place: the late one is refused
// once more and queued at the end, and no one else's turn moves. A request
// admitted at more than it was queued at (a fetch answering more than
// estimated) likewise makes the one after it late by the difference.
//
// The queue reaches at most burst / rate past the debt's payoff: a
// refusal beyond is told to come back there and does not extend it, so no
// delay is longer than debt / rate + burst / rate, however many refused
// requests never come back (a client giving up, or one that sends again
// without waiting). The end is a time, not a count, so what such requests
// reserved passes with the clock, at most burst / rate after the debt.
// Why the burst: the bucket holds a burst of tokens, so the turns of
// queued requests that do not come back when due, or that a client waits
// out to send together (the Go SDK waits the longest delay its in-flight
// requests got), are kept as tokens for the requests behind them instead
// of being lost; a longer queue would have them wait while a full bucket
// discards its fill. The cost: when more is refused at once than a burst
// (N × c > burst), the refusals past the end all come back at the end,
// and are spread on their next refusal: 40 clients of 64 KiB requests at
// 1 MiB/s cost 2.4 refusals per admitted request rather than 1 (40
// without a queue). A client coming back later than told (the SDK adds
// up to a hundredth of the delay) may find the bucket full and lose what
// overflows: simulated with a tenth, 0.94 of the rate for one sink with 5
// in-flight 1 MiB requests at 1.7 MiB/s.
//
// # Refunds
//
// A produce is charged before it is appended (Take), and the log may
// then refuse its batch without writing it: out of sequence (the batch
// before it was refused for rate while this one was in flight), or a
// retry of a batch written before. Its client sends it again, and that
// attempt is charged. Refund gives such a charge back, up to the burst,
// and takes it off the window's meters, so that a batch is charged once,
// when it is written: without it, every rate refusal of an idempotent
// producer with k requests in flight per partition cost the tenant up to
// k − 1 batches' worth of its rate, which it never got (measured: a
// tenant held at 0.35 to 0.70 of its produce quota).
//
// # Rates
//
// SetRates replaces a tenant's rates at once (the broker applies new
// allotments every exchange, about every second): the bucket first fills
// at the old rate up to now, then keeps its tokens (at most the new
// burst) and its debt, which the new rate pays off. Its queue keeps the
// cost it holds past the debt (at most the new burst's worth), and its end
// moves to when the new rate will have paid the debt and that cost; the
// delays already given do not change (their clients have them). With the
// rate unchanged, as in most exchanges, the queue stays as it is. A queue
// reset every exchange would give new refusals the turns of the ones
// already queued, a herd again every second. A rate of 0 means no limit
// (and no queue): a tenant the Limiter has no rates for is admitted in
// every dimension and only metered, which is how a broker treats a tenant
// until its first allotment arrives.
//
// # Meters
//
// Every decision is metered per tenant and dimension: offered (admitted
// and refused, a refused fetch at the cost its caller estimates) and
// admitted. Window returns both as rates per second over the time since
// the previous Window, and starts a new window; a tenant with no traffic
// in the windows of the last Config.ForgetAfter (5 minutes) is forgotten,
// rates and all.
//
// # Concurrency
//
// Every method may be called concurrently. The tenant map takes a
// read-write lock, each tenant's state its own lock (taken after the map's,
// never while holding another tenant's); a bucket's queue is part of its
// tenant's state.
package quota
