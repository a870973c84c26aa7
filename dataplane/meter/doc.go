// Package meter is a broker's usage metering for billing: what each
// tenant's clients took from the broker, reported to the control plane
// exactly once with BrokerService.ReportUsage (proto/sluice/v1/broker.proto
// says what the control plane does with a report).
//
// # Dimensions
//
//   - Ingress is derived from the log, not counted as produce requests
//     arrive. For every partition of a tenant's topic the broker leads
//     (Config.Leaders; internal topics are not metered), a report carries
//     the range [start, end) of the batches below the high watermark that
//     metering has not reached yet and the sum of the sizes of its data
//     batches (Scan): transaction markers (control batches) are left out,
//     the batches of aborted transactions count (they were appended). Scan
//     reads through the partition's read path (FetchRecords), so the part
//     of a tiered partition in the object store is metered the same way.
//     The control plane keeps one cursor per partition, applies a range
//     only when it starts at the cursor, and answers the cursor of every
//     partition the report named; the broker scans from the answered
//     cursor next time. A leadership the reporter has no cursor of (a
//     new leader epoch, or the first report of the process) first sends
//     an empty range (start == end), which asks where metering stands.
//     Ranges end at batch boundaries and the log below the HW is the same
//     on every in-sync replica, so a new leader continues exactly at the
//     cursor: a failover neither loses nor double-counts a batch, and a
//     deposed leader's late range is not applied (it no longer starts at
//     the cursor). A report scans at most PartitionScanBytes of a
//     partition, ReportScanBytes in all, and carries at most MaxRanges
//     ranges, starting each time where the last one's bounds stopped: a
//     backlog (the control plane unreachable for a while) is metered over
//     several reports.
//   - Egress: the bytes of record batches answered to tenants' Fetch
//     requests (replication and the brokers' own reads excluded), counted
//     by the broker that read them (Counters.AddEgress).
//   - Requests: the tenants' authenticated requests, refused ones
//     included, counted by the broker the client sent them to, not again
//     by a broker it forwards them to (Counters.AddRequest).
//
// # Reports
//
// Run builds a report every Interval from the counters (taken, so they
// start again from zero) and the ingress ranges, numbered from 1 per
// broker epoch, one more per report; an empty one is not sent. A report
// that got no answer (an error, a timeout) is sent again with the same
// sequence and content, after 100 ms, doubling up to MaxBackoff (by
// default the Interval, at most 5 s), until it is answered; what is counted meanwhile waits for the
// next report, built one Interval after the answer. The control plane
// applies counters once per (broker id, broker epoch, sequence), so a
// retry whose first attempt was applied is not applied again. At a new
// broker epoch (the broker registered again) the sequence starts over at
// 1, and a report of the old epoch still unanswered is dropped: its
// counters go into the next report when no attempt of it can have been
// applied (every answer was a refusal that applies nothing: a stale
// broker epoch, an unregistered broker, an invalid report, a control plane
// without metering), and are lost otherwise, never counted twice
// (sluice_broker_usage_reports_abandoned_total counts such reports); its ranges are derived from the log
// again. On shutdown, once the broker's client port has drained, Final
// sends the unanswered report until it is answered and then one with
// what was counted since, within a deadline (the broker's: 5 s, or its
// --shutdown-timeout if shorter).
//
// # What a crash costs
//
//   - Ingress: nothing. The log is the record and the cursor is the
//     control plane's: whatever the broker had not reported, the next
//     leader meters. Metering lags the HW by about one Interval (more
//     while a backlog is scanned, or while the control plane does not
//     answer).
//   - Egress and requests are held in the broker's memory until a report
//     with them is answered. A crash loses what was counted since the
//     last answered report was built: at most about one Interval plus the
//     time the unanswered report spent retrying (and its predecessor's
//     retries). Never more than once: nothing is resent across broker
//     epochs unless it cannot have been applied.
//
// Two cases meter offsets without their bytes or differently, both
// logged at warn level. Offsets that leave the log before metering
// reaches them (retention, with the control plane unreachable for longer
// than the topic keeps data, or a partition older than metering) are
// reported as a range without bytes, so metering goes on
// (sluice_broker_usage_ingress_skipped_offsets_total counts them). After an
// unclean election (a topic that opted in), a new leader whose log ends
// below the cursor meters nothing until its HW passes the cursor; the
// batches it appended below the cursor are not billed (those offsets
// were billed for the batches the election lost), and the first batch
// across the cursor is billed in full.
//
// # Goroutines and locking
//
// The Reporter has no goroutine of its own: the broker runs Run on one
// of its loops and calls Final after it returned; neither holds a lock
// across a network call. Counters are lock-free atomics per tenant,
// safe for the request handlers; the gauges read atomics.
package meter
