package broker

import (
	"context"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// ListAllTransactions answers the transactional ids of every tenant (or
// of the request's tenant, or only the request's id) at the transaction
// coordinators this broker hosts, for the control plane's
// OperatorService.ListTransactions, which asks every broker and merges.
// It never forwards; the broker credential only (rules).
func (s *replicaService) ListAllTransactions(ctx context.Context, req *connect.Request[sluicev1.ListAllTransactionsRequest]) (*connect.Response[sluicev1.ListAllTransactionsResponse], error) {
	tenantID, id := req.Msg.GetTenantId(), req.Msg.GetTransactionalId()
	coords, err := s.b.localTxnCoordinators(ctx)
	if err != nil {
		return nil, toConnect(err)
	}
	meta := s.b.metadata()
	res := &sluicev1.ListAllTransactionsResponse{}
	for _, c := range coords {
		if tenantID != "" && id != "" {
			// One id: a lookup, not a copy of every state.
			if t, ok := c.Describe(tenantID, id); ok {
				res.Transactions = append(res.Transactions, describeTxn(meta, txn.Key{Tenant: tenantID, TransactionalID: id}, t, s.b.cfg.ID))
			}
			continue
		}
		for k, t := range c.Transactions() {
			if (tenantID == "" || k.Tenant == tenantID) && (id == "" || k.TransactionalID == id) {
				res.Transactions = append(res.Transactions, describeTxn(meta, k, t, s.b.cfg.ID))
			}
		}
	}
	return connect.NewResponse(res), nil
}
