// Package bench is the measuring core of `sluice bench`: an open-loop load
// generator, latency histograms, and the numbers of a run. It knows nothing
// of the SDK: producers are SendFuncs, the consumer feeds Runner.Consumed,
// and the command wires both to the Go SDK.
//
// # The model
//
// A run is a list of steps, each a rate held for a duration after a
// warm-up. At a fixed rate every record has a scheduled send time, fixed
// before the run starts (producers take turns, so together they keep even
// spacing); the generator hands each record to its producer once that time
// has come. Latency is measured from the scheduled time, not from when the
// record was actually handed over: when a producer falls behind (its buffer
// is full, the cluster stalls), the records waiting behind it carry that
// wait in their latency, as they would for an application producing at
// that rate. A closed-loop tool that waits for the system before sending
// the next record would leave those waits out ("coordinated omission").
// Records still waiting when their step ends are not sent and are counted
// as unsent. Saturated (rate 0), each record is handed over as soon as the
// producer takes it, and its latency starts then.
//
// Each record value starts with HeaderSize bytes: the run's random id and
// the scheduled time (nanoseconds since the run started, on the monotonic
// clock), then random bytes. Publish latency ends at the producer's
// delivery callback; end-to-end latency when the consumer, in the same
// process and so on the same clock, reads the record.
//
// Histogram is log-linear, like HdrHistogram: fixed memory, any range, and
// quantiles within RelativeError of the recorded values.
//
// # Goroutines
//
// Run starts one generator goroutine per producer per step and waits for
// them before the next step, and with Config.Progress one reporting
// goroutine that ends with Run. Delivery callbacks and the consumer may
// call in from any goroutine; one mutex guards the numbers.
package bench
