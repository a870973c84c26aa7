// Package connecterr is the Connect adapter's half of the data plane's
// domain errors (dataplane/derr): ToConnect maps a domain error to the
// Connect error a client reads, in one place, with the table of every
// kind's code (Code) and its details as the API's error details
// (NotLeader, NotEnoughReplicas, ProducerError, TransactionError,
// GroupError, BatchTooLarge, google.rpc.RetryInfo and QuotaFailure);
// FromConnect maps a peer's Connect error (the control plane's, another
// broker's) back to a domain error for the packages below the adapter,
// which never import connectrpc.com/connect (internal/layering says so;
// this package and the adapter, dataplane/broker for now, may); Relay
// does so for a peer's answer that the client is answered with, which
// ToConnect then gives back unchanged.
//
// The codes and details are those the API answered before domain errors
// existed, so no client sees a change; docs/design/errors.md lists them
// beside each kind's Kafka error code, and the test keeps that table and
// Code in step.
package connecterr
