package broker

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// Transactions (issue 16, docs/design/transactions.md) are being wired:
// this file is the broker's side of the transaction coordinator
// (dataplane/txn), its RPCs and its marker writer. Until they land, every
// transactional call is refused.

var errNoTransactions = errors.New("transactions are not available on this broker yet")

// transactionService implements sluicev1connect.TransactionServiceHandler.
type transactionService struct {
	sluicev1connect.UnimplementedTransactionServiceHandler
	b *Broker
}

// verifyTransaction asks the transaction coordinator of the tenant's
// transactionalID to put (topicID, partition) in the producer's current
// transaction (AddPartitions, KIP-890's verification) before a partition
// leader appends the producer's first transactional batch of this epoch.
// h carries the producing client's credential. It returns nil once the
// coordinator has the partition in the transaction, or the error to answer
// the produce with (a Connect error with a TransactionError detail).
//
//lint:ignore U1000 the produce path calls it once partitions verify transactional batches (being wired)
func (b *Broker) verifyTransaction(ctx context.Context, h http.Header, tenantID, transactionalID, topic string, partition int32, producerID int64, epoch int16) error {
	return connect.NewError(connect.CodeUnimplemented, errNoTransactions)
}

// verifyTransactionGroup is verifyTransaction for a group whose offsets
// the producer commits in its transaction (the coordinator's AddOffsets),
// before the group coordinator accepts a TxnCommitOffsets.
//
//lint:ignore U1000 TxnCommitOffsets calls it once groups take transactional offsets (being wired)
func (b *Broker) verifyTransactionGroup(ctx context.Context, h http.Header, tenantID, transactionalID, group string, producerID int64, epoch int16) error {
	return connect.NewError(connect.CodeUnimplemented, errNoTransactions)
}

// WriteTxnMarkers appends transaction markers as a coordinator asks.
func (s *replicaService) WriteTxnMarkers(ctx context.Context, req *connect.Request[sluicev1.WriteTxnMarkersRequest]) (*connect.Response[sluicev1.WriteTxnMarkersResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoTransactions)
}
