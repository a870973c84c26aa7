package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const brokerColumns = `id, address, rack, epoch, lease_expires_at, registered_at`

func scanBroker(r rowScanner) (store.Broker, error) {
	var (
		b                   store.Broker
		lease, registeredAt int64
	)
	if err := r.Scan(&b.ID, &b.Address, &b.Rack, &b.Epoch, &lease, &registeredAt); err != nil {
		return store.Broker{}, err
	}
	b.LeaseExpiresAt = fromMS(lease)
	b.RegisteredAt = fromMS(registeredAt)
	return b, nil
}

// RegisterBroker implements store.Store. b.Epoch is ignored; RegisteredAt is
// the time of the latest registration (now when zero).
func (s *Store) RegisterBroker(ctx context.Context, b store.Broker) (store.Broker, error) {
	out, err := scanBroker(s.write.QueryRowContext(ctx,
		`INSERT INTO brokers (`+brokerColumns+`) VALUES (?, ?, ?, 1, ?, ?)
		 ON CONFLICT (id) DO UPDATE SET address = excluded.address, rack = excluded.rack,
		     epoch = brokers.epoch + 1, lease_expires_at = excluded.lease_expires_at,
		     registered_at = excluded.registered_at
		 RETURNING `+brokerColumns,
		b.ID, b.Address, b.Rack, toMS(b.LeaseExpiresAt), toMS(orNow(b.RegisteredAt))))
	return out, translate("register broker", err)
}

// HeartbeatBroker implements store.Store. The lease only grows: a heartbeat
// with an earlier leaseUntil than the stored one (a late, reordered
// heartbeat) keeps the stored expiry.
func (s *Store) HeartbeatBroker(ctx context.Context, id int32, epoch int64, leaseUntil time.Time) (store.Broker, error) {
	var out store.Broker
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = scanBroker(tx.QueryRowContext(ctx,
			`UPDATE brokers SET lease_expires_at = max(lease_expires_at, ?) WHERE id = ? AND epoch = ?
			 RETURNING `+brokerColumns, toMS(leaseUntil), id, epoch))
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM brokers WHERE id = ?`, id).Scan(&one); err != nil {
			return err
		}
		return store.ErrConflict
	})
	return out, translate("heartbeat broker", err)
}

// ListBrokers implements store.Store.
func (s *Store) ListBrokers(ctx context.Context) ([]store.Broker, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+brokerColumns+` FROM brokers ORDER BY id`)
	if err != nil {
		return nil, translate("list brokers", err)
	}
	return collect(rows, scanBroker, "list brokers")
}

// AllocateProducerIDs implements store.Store. The single write connection's
// transaction serialises concurrent allocations.
func (s *Store) AllocateProducerIDs(ctx context.Context, brokerID int32, brokerEpoch int64, count int32, at time.Time) (int64, error) {
	if count < 1 {
		return 0, fmt.Errorf("allocate producer ids: count %d is not positive", count)
	}
	var first int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var epoch int64
		if err := tx.QueryRowContext(ctx, `SELECT epoch FROM brokers WHERE id = ?`, brokerID).Scan(&epoch); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return store.ErrNotFound
			}
			return err
		}
		if epoch != brokerEpoch {
			return store.ErrConflict
		}
		if err := tx.QueryRowContext(ctx,
			`UPDATE producer_id_counter SET next_id = next_id + ? WHERE id = 1 RETURNING next_id - ?`,
			int64(count), int64(count)).Scan(&first); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO producer_id_blocks (first_id, count, broker_id, broker_epoch, allocated_at) VALUES (?, ?, ?, ?, ?)`,
			first, count, brokerID, brokerEpoch, toMS(at))
		return err
	})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
		return 0, err
	}
	return first, translate("allocate producer ids", err)
}
