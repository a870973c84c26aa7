package api

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// billingService serves BillingService: a tenant's usage and invoices.
type billingService struct{ *API }

// errNotBuilt marks a contract stub whose body its owner replaces.
var errNotBuilt = errors.New("not built yet")

// GetUsage implements BillingService.
func (s *billingService) GetUsage(ctx context.Context, req *connect.Request[sluicev1.GetUsageRequest]) (*connect.Response[sluicev1.GetUsageResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}

// ListInvoices implements BillingService.
func (s *billingService) ListInvoices(ctx context.Context, req *connect.Request[sluicev1.ListInvoicesRequest]) (*connect.Response[sluicev1.ListInvoicesResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}

// GetInvoice implements BillingService.
func (s *billingService) GetInvoice(ctx context.Context, req *connect.Request[sluicev1.GetInvoiceRequest]) (*connect.Response[sluicev1.GetInvoiceResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}

// GetPlanPrices implements OperatorService.
func (s *operatorService) GetPlanPrices(ctx context.Context, req *connect.Request[sluicev1.GetPlanPricesRequest]) (*connect.Response[sluicev1.GetPlanPricesResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}

// SetPlanPrices implements OperatorService.
func (s *operatorService) SetPlanPrices(ctx context.Context, req *connect.Request[sluicev1.SetPlanPricesRequest]) (*connect.Response[sluicev1.SetPlanPricesResponse], error) {
	return nil, connect.NewError(connect.CodeUnimplemented, errNotBuilt)
}
