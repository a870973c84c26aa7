package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/controlplane/store"
)

const brokerColumns = `id, address, rack, epoch, lease_expires_at, registered_at`

func scanBroker(r pgx.Row) (store.Broker, error) {
	var b store.Broker
	if err := r.Scan(&b.ID, &b.Address, &b.Rack, &b.Epoch, &b.LeaseExpiresAt, &b.RegisteredAt); err != nil {
		return store.Broker{}, err
	}
	b.LeaseExpiresAt = b.LeaseExpiresAt.UTC()
	b.RegisteredAt = b.RegisteredAt.UTC()
	return b, nil
}

// RegisterBroker implements store.Store. b.Epoch is ignored; RegisteredAt is
// the time of the latest registration (now when zero).
func (s *Store) RegisterBroker(ctx context.Context, b store.Broker) (store.Broker, error) {
	out, err := scanBroker(s.pool.QueryRow(ctx,
		`INSERT INTO brokers (`+brokerColumns+`) VALUES ($1, $2, $3, 1, $4, $5)
		 ON CONFLICT (id) DO UPDATE SET address = excluded.address, rack = excluded.rack,
		     epoch = brokers.epoch + 1, lease_expires_at = excluded.lease_expires_at,
		     registered_at = excluded.registered_at
		 RETURNING `+brokerColumns,
		b.ID, b.Address, b.Rack, ts(b.LeaseExpiresAt), ts(orNow(b.RegisteredAt))))
	return out, translate("register broker", err)
}

// HeartbeatBroker implements store.Store. The lease only grows: a heartbeat
// with an earlier leaseUntil than the stored one (a late, reordered
// heartbeat) keeps the stored expiry.
func (s *Store) HeartbeatBroker(ctx context.Context, id int32, epoch int64, leaseUntil time.Time) (store.Broker, error) {
	b, err := scanBroker(s.pool.QueryRow(ctx,
		`UPDATE brokers SET lease_expires_at = greatest(lease_expires_at, $1) WHERE id = $2 AND epoch = $3
		 RETURNING `+brokerColumns, ts(leaseUntil), id, epoch))
	if !errors.Is(err, pgx.ErrNoRows) {
		return b, translate("heartbeat broker", err)
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM brokers WHERE id = $1)`, id).Scan(&exists); err != nil {
		return store.Broker{}, translate("heartbeat broker", err)
	}
	if !exists {
		return store.Broker{}, store.ErrNotFound
	}
	return store.Broker{}, store.ErrConflict
}

// ListBrokers implements store.Store.
func (s *Store) ListBrokers(ctx context.Context) ([]store.Broker, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+brokerColumns+` FROM brokers ORDER BY id`)
	if err != nil {
		return nil, translate("list brokers", err)
	}
	return collect(rows, scanBroker, "list brokers")
}

// AllocateProducerIDs implements store.Store. The counter row's lock
// serialises concurrent allocations.
func (s *Store) AllocateProducerIDs(ctx context.Context, brokerID int32, brokerEpoch int64, count int32, at time.Time) (int64, error) {
	if count < 1 {
		return 0, fmt.Errorf("allocate producer ids: count %d is not positive", count)
	}
	var first int64
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var epoch int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM brokers WHERE id = $1 FOR SHARE`, brokerID).Scan(&epoch); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		if epoch != brokerEpoch {
			return store.ErrConflict
		}
		if err := tx.QueryRow(ctx,
			`UPDATE producer_id_counter SET next_id = next_id + $1 WHERE id = 1 RETURNING next_id - $1`,
			int64(count)).Scan(&first); err != nil {
			return err
		}
		_, err := tx.Exec(ctx,
			`INSERT INTO producer_id_blocks (first_id, count, broker_id, broker_epoch, allocated_at) VALUES ($1, $2, $3, $4, $5)`,
			first, count, brokerID, brokerEpoch, ts(at))
		return err
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return 0, err
	}
	return first, translate("allocate producer ids", err)
}
