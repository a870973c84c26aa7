package broker

import (
	"context"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// The quota admission names of the service layer (records.Quotas) on the
// broker's quotas, by delegation, until the admission package's Enforcer
// has them (it replaces this file).

func (q *quotas) AdmitProduce(ctx context.Context, cost int) error { return q.admitProduce(ctx, cost) }

func (q *quotas) RefundProduce(ctx context.Context, batches, cost int, duplicate bool, err error) {
	res := sluicev1.ProduceResponse{Duplicate: duplicate}
	q.refundProduce(ctx, batches, cost, &res, err)
}

func (q *quotas) RefundUnwritten(ctx context.Context, cost int) { q.refundUnwritten(ctx, cost) }

func (q *quotas) CheckFetch(ctx context.Context, maxBytes int) error {
	return q.checkFetch(ctx, maxBytes)
}

func (q *quotas) ChargeFetch(ctx context.Context, n int) { q.chargeFetch(ctx, n) }

func (q *quotas) CheckProducerID(ctx context.Context) error { return q.checkProducerID(ctx) }

func (q *quotas) ChargeProducerID(ctx context.Context) { q.chargeProducerID(ctx) }
