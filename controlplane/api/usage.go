package api

import (
	"context"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// ExchangeQuotas implements BrokerService: a broker's per-tenant demand and
// holdings in, its allotments of each tenant's cluster-wide limits out
// (controlplane/quota divides them).
func (s *brokerService) ExchangeQuotas(ctx context.Context, req *connect.Request[sluicev1.ExchangeQuotasRequest]) (*connect.Response[sluicev1.ExchangeQuotasResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}

// ReportUsage implements BrokerService: a broker's metered usage, applied
// exactly once (store.UsageStore).
func (s *brokerService) ReportUsage(ctx context.Context, req *connect.Request[sluicev1.ReportUsageRequest]) (*connect.Response[sluicev1.ReportUsageResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}
