package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/coordinator"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TxnCommitOffsets commits a group's offsets inside a transaction
// (KIP-447): after the checks of CommitOffsets (the committer, so a zombie
// member is fenced by the group, and each offset against its partition's
// high watermark), the group joins the producer's current transaction at
// its transaction coordinator (verifyTransactionGroup), and then the
// group's coordinator writes the offsets as pending offsets of the
// producer (coordinator.TxnCommitOffsets), to become committed offsets at
// the transaction's commit marker.
func (s *groupService) TxnCommitOffsets(ctx context.Context, req *connect.Request[sluicev1.TxnCommitOffsetsRequest]) (*connect.Response[sluicev1.TxnCommitOffsetsResponse], error) {
	m := req.Msg
	c, tenantID, pm, fwd, err := s.groupCall(ctx, req.Header(), m.GetGroup())
	if fwd {
		return forward(ctx, s.b, pm, req, s.b.peer(pm.Leader).group.TxnCommitOffsets)
	}
	if err != nil {
		return nil, err
	}
	if m.GetTransactionalId() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("transactional_id: must not be empty"))
	}
	if m.GetProducerId() < 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("producer_id: must not be negative; got %d", m.GetProducerId()))
	}
	if e := m.GetProducerEpoch(); e < 0 || e > math.MaxInt16 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("producer_epoch: must be in [0, %d]; got %d", math.MaxInt16, e))
	}
	commits, err := s.checkCommit(ctx, req.Header(), c, tenantID, m.GetGroup(), m.GetMemberId(), m.GetInstanceId(), m.GetMemberEpoch(), m.GetOffsets())
	if err != nil {
		return nil, err
	}
	pid, epoch := m.GetProducerId(), int16(m.GetProducerEpoch())
	if err := s.b.verifyTransactionGroup(ctx, req.Header(), tenantID, m.GetTransactionalId(), m.GetGroup(), pid, epoch); err != nil {
		return nil, err
	}
	if err := c.TxnCommitOffsets(ctx, time.Now(), tenantID, m.GetGroup(), pid, epoch, commits); err != nil {
		return nil, offsetsError(err)
	}
	return connect.NewResponse(&sluicev1.TxnCommitOffsetsResponse{}), nil
}

// offsetsError maps the group coordinator's refusals of offset writes and
// fetches to Connect errors: a transaction's pending offsets (Unavailable:
// retry once it ends), a fenced producer (FailedPrecondition with a
// TransactionError), a fenced transaction coordinator (FailedPrecondition);
// anything else as groupError and toConnect do.
func offsetsError(err error) error {
	switch {
	case errors.Is(err, coordinator.ErrUnstableOffset):
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, coordinator.ErrProducerFenced):
		ce := connect.NewError(connect.CodeFailedPrecondition, err)
		if d, derr := connect.NewErrorDetail(&sluicev1.TransactionError{Reason: sluicev1.TransactionError_REASON_PRODUCER_FENCED}); derr == nil {
			ce.AddDetail(d)
		}
		return ce
	case errors.Is(err, coordinator.ErrCoordinatorFenced):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return toConnect(groupError(err))
}
