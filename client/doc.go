// Package client is the Go SDK for Sluice.
//
// A Client connects to the control plane with an API key, trades it for
// short-lived tokens (refreshed before they expire), learns the brokers and
// partition leaders, and routes every request to the partition's leader
// itself (it never relies on a broker forwarding). On NotLeader about the
// partition it asked for, at a leader epoch not older than its own, it
// updates its routing from the error, once; on any other NotLeader (about
// another partition, at an older epoch, or a second one while routing by
// a hint) and on Unavailable it refreshes the metadata, whatever leader
// epoch it had, and retries with exponential backoff and jitter (from
// 25-50 ms, doubling up to 0.5-1 s, as Kafka's retry.backoff.ms and
// retry.backoff.max.ms; reset by an acknowledgement). A produce request
// still unanswered after a second makes the producer refresh the
// partition's metadata, and again every second while it waits: once the
// metadata names a newer leader epoch (the leader was stopped or cut off
// and another was elected), the producer stops waiting for the old leader,
// whose connection may stay open and silent until HTTP/2's health check
// drops it 15 s later, and sends the batch to the new one with the same
// sequence numbers, so it is still written once.
//
// # TLS
//
// An https:// endpoint is called over TLS (HTTP/2), and so is every broker
// that serves TLS: it advertises an https:// address in the metadata,
// whatever the endpoint's scheme. Servers are verified against the
// system's roots; for a private CA, pass WithTLS with its pool in RootCAs.
//
// # Producing
//
// A Producer batches records per partition, optionally compresses batches
// (gzip, snappy, lz4 or zstd), keeps up to 5 requests in flight per partition
// (WithMaxInFlight), and reports each record's fate exactly once to its
// callback. Batching is natural, without a fixed linger: a partition's
// record is sent as soon as one of its request slots is free, and the
// records produced while every slot is busy gather into one batch, up to
// WithMaxBatchBytes (256 KiB, or the topic's max.message.bytes when
// smaller; a larger record goes alone, up to that limit), sent when the
// next slot frees. So a lone record leaves at once, and under load requests
// grow rather than multiply. WithLinger adds a wait for fuller batches.
// The batches of every partition one broker leads travel together: one
// ProduceMany request carries a batch of each partition that has one ready,
// gathered the same natural way (a request leaves while fewer than
// WithMaxInFlight requests to that broker are in flight; while they all
// are, the next batches of any of its partitions wait for the next
// request). Each partition keeps its own slots, sequence numbers, retries
// and re-routing; a broker that does not serve ProduceMany (an older
// version) gets one Produce request per batch.
// Records with a key go to the partition the key hashes to (FNV-1a);
// records without one stick to one partition until the batch they go into
// there is sent or full, then move to another (Kafka's sticky
// partitioner, KIP-480).
//
// The producer is idempotent by default, with AcksAll: it gets a producer
// id from the cluster and numbers its batches per partition; the leader
// writes each batch once, answers a retry of a written batch with the
// original offset, and refuses a gap. So a lost acknowledgement causes no
// duplicate and a retry no reordering. When a record cannot be acknowledged
// within the delivery timeout (WithDeliveryTimeout, default 2 minutes), its
// callback gets a *DeliveryError wrapping ErrDeliveryTimeout whose
// Indefinite field says whether it may have been written anyway. Every
// failure a callback sees is a *DeliveryError, also a refusal before the
// record was buffered. A record reported written is written; see
// docs/delivery-semantics.md for what each setting promises.
//
// Produce blocks only while the producer's buffer is full or while a
// topic's metadata is fetched for the first time, both bounded by its
// context. Metadata refreshes of a known topic run in the background, one
// at a time per topic, and never block Produce.
//
// # Transactions
//
// A TransactionalProducer (NewTransactionalProducer, with a transactional
// id that names it across restarts) writes records to any partitions,
// and a consumer group's offsets (SendOffsets), in transactions that
// commit or abort whole: Begin, Produce, SendOffsets, Commit or Abort.
// It batches and retries as a Producer does, always idempotent with
// AcksAll; its batches carry the transactional attribute and its requests
// the transactional id. It finds the id's transaction coordinator with
// FindTransactionCoordinator and calls it directly (Sluice-No-Forward),
// as a GroupConsumer does its group's. Commit waits for every record of
// the transaction first; every end moves the producer to the epoch the
// coordinator answers, with sequences from 0 again. Errors match
// ErrTransactionAbortable (Abort and run the transaction again),
// ErrTransactionFatal (with ErrProducerFenced when another instance took
// over: the producer is closed) or ErrTransactionState (a call out of
// order). A GroupConsumer whose offsets such a producer commits uses
// CommitTransactional, Member and RewindToCommitted;
// ConsumeTransformProduce runs the whole read-transform-write-commit loop
// with them, aborting and rewinding when a transaction cannot commit. See
// docs/sdk-transactions.md.
//
// # Consuming
//
// A Consumer reads partitions you assign from offsets you choose (Earliest,
// Latest, At, AtTime), and with AssignUntil up to an end (Latest(): what
// the partition holds now), after which Poll returns io.EOF. It keeps the
// next fetch in flight while you process the previous one (WithPrefetch).
// Offsets are not committed: consumer groups, which commit, are a separate
// feature. WithIsolation(ReadCommitted) reads only records of committed
// transactions (and those written outside transactions), up to the last
// stable offset, which is then what Latest() means; the default,
// ReadUncommitted, reads every record.
//
// # Quotas and throttling
//
// A tenant over a rate quota (produce or fetch bytes per second, requests
// per second, new producer ids per hour) is refused with ResourceExhausted
// carrying a google.rpc.RetryInfo delay. The client sends the same request
// again once that delay has passed, plus up to a hundredth of it as jitter and
// never sooner: the producer resends the refused batch as it was (same
// producer epoch and sequence, so idempotence keeps it written once) and
// fails its records only at their delivery timeout, as for any retry, with
// the refusal as the DeliveryError's Last; consumers' fetches, ListOffsets
// (Assign, Watermarks, ResolveOffset), metadata refreshes, InitProducerId,
// a group's heartbeats, commits and offset fetches, and a transactional
// producer's calls to its coordinator wait the same way, within their
// contexts, and throttled attempts do not count against their attempt
// limits. Throttling slows a client down; it never fails a call by itself.
//
// A ResourceExhausted without a retry delay is a limit that waiting does
// not fix (the tenant's total storage, its transactional ids or groups):
// it is not retried, and comes as a *QuotaError, which matches
// ErrQuotaExceeded with errors.Is and names the limit (the
// google.rpc.QuotaFailure description) in Description; connect.CodeOf
// still answers ResourceExhausted. A producer's records fail with it at
// once, certainly not written.
//
// Client.Stats counts the rate refusals per kind of request (KindProduce,
// KindFetch, KindListOffsets, KindMetadata, KindInitProducerID, KindGroup,
// KindTransaction): how many requests were refused and the sum of the
// delays they asked for, cumulative over every producer and consumer of
// the client. A ProduceMany refused for several of its partitions counts
// once, with the longest delay. Export them to your metrics by reading
// Stats periodically.
//
// # Errors
//
// Server refusals arrive as *connect.Error; connect.CodeOf tells them apart:
// InvalidArgument (bad input), NotFound (unknown topic), Unauthenticated,
// PermissionDenied (the key lacks a scope), FailedPrecondition, Unavailable,
// OutOfRange (an offset outside the log), ResourceExhausted (a quota: see
// above).
package client
