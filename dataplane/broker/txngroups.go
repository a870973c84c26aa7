package broker

import (
	"context"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TxnCommitOffsets commits a group's offsets inside a transaction
// (KIP-447).
func (s *groupService) TxnCommitOffsets(ctx context.Context, req *connect.Request[sluicev1.TxnCommitOffsetsRequest]) (*connect.Response[sluicev1.TxnCommitOffsetsResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNoTransactions)
}
