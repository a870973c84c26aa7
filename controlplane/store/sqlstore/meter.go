package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// AdvanceMeter implements store.UsageStore: compute runs outside the
// transaction, and the transaction adds its amounts only if it moves the
// meter from the end it read (compare-and-set), so of replicas advancing
// at once one counts each interval.
func (s *Store) AdvanceMeter(ctx context.Context, meter string, now time.Time, compute func(from, to time.Time) ([]store.UsageAmount, error)) (store.MeterResult, error) {
	if meter == "" || len(meter) > 128 || !store.PlainText(meter) {
		return store.MeterResult{}, fmt.Errorf("invalid meter name %q", meter)
	}
	now = now.UTC().Truncate(time.Millisecond)
	var lastMs int64
	switch err := s.usageRow(ctx, `SELECT last_ms FROM usage_meters WHERE name = $1`, meter).Scan(&lastMs); {
	case errors.Is(err, sql.ErrNoRows):
		err := s.usageInTx(ctx, "start meter", func(tx usageTx) error {
			_, err := tx.exec(ctx, `INSERT INTO usage_meters (name, last_ms) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, meter, now.UnixMilli())
			return err
		})
		if err != nil {
			return store.MeterResult{}, fmt.Errorf("start meter %s: %w", meter, err)
		}
		return store.MeterResult{From: now, To: now}, nil
	case err != nil:
		return store.MeterResult{}, fmt.Errorf("read meter %s: %w", meter, err)
	}
	last := usageTime(lastMs)
	if !now.After(last) {
		return store.MeterResult{From: last, To: last}, nil
	}
	type piece struct {
		hour    int64
		amounts []store.UsageAmount
	}
	var pieces []piece
	split := store.MeterPieces(last, now)
	for _, p := range split {
		amounts, err := compute(p.From, p.To)
		if err != nil {
			return store.MeterResult{}, fmt.Errorf("meter %s: %w", meter, err)
		}
		if amounts, err = store.CheckUsageAmounts(amounts); err != nil {
			return store.MeterResult{}, fmt.Errorf("meter %s: %w", meter, err)
		}
		pieces = append(pieces, piece{store.HourOf(p.From).UnixMilli(), amounts})
	}
	moved := false
	err := s.usageInTx(ctx, "advance meter", func(tx usageTx) error {
		n, err := tx.exec(ctx, `UPDATE usage_meters SET last_ms = $1 WHERE name = $2 AND last_ms = $3`, now.UnixMilli(), meter, lastMs)
		if err != nil {
			return fmt.Errorf("advance meter %s: %w", meter, err)
		}
		if moved = n == 1; !moved {
			return nil
		}
		adds := newUsageAdds()
		for _, p := range pieces {
			for _, a := range p.amounts {
				adds.add(a.TenantID, p.hour, a.Dimension, a.Amount)
			}
		}
		return adds.apply(ctx, tx)
	})
	if err != nil {
		return store.MeterResult{}, err
	}
	// A gap of more than MaxMeterPieces hours moved the meter, counting nothing.
	return store.MeterResult{Advanced: moved && split != nil, From: last, To: now}, nil
}
