package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const brokerColumns = `id, address, rack, epoch, lease_expires_at, registered_at, external_address, kafka_address`

func scanBroker(r Scanner) (store.Broker, error) {
	var b store.Broker
	if err := r.Scan(&b.ID, &b.Address, &b.Rack, &b.Epoch, ScanTime(&b.LeaseExpiresAt), ScanTime(&b.RegisteredAt), &b.ExternalAddress, &b.KafkaAddress); err != nil {
		return store.Broker{}, err
	}
	return b, nil
}

// RegisterBroker implements store.Store. b.Epoch is ignored; RegisteredAt is
// the time of the latest registration (now when zero).
func (s *Store) RegisterBroker(ctx context.Context, b store.Broker) (store.Broker, error) {
	out, err := scanBroker(s.db.Write().QueryRowContext(ctx,
		`INSERT INTO brokers (`+brokerColumns+`) VALUES ($1, $2, $3, 1, $4, $5, $6, $7)
		 ON CONFLICT (id) DO UPDATE SET address = excluded.address, rack = excluded.rack,
		     epoch = brokers.epoch + 1, lease_expires_at = excluded.lease_expires_at,
		     registered_at = excluded.registered_at, external_address = excluded.external_address, kafka_address = excluded.kafka_address
		 RETURNING `+brokerColumns,
		b.ID, b.Address, b.Rack, s.db.Time(b.LeaseExpiresAt), s.db.Time(orNow(b.RegisteredAt)), b.ExternalAddress, b.KafkaAddress))
	return out, s.db.Translate("register broker", err)
}

// HeartbeatBroker implements store.Store. The lease only grows: a heartbeat
// with an earlier leaseUntil than the stored one (a late, reordered
// heartbeat) keeps the stored expiry.
func (s *Store) HeartbeatBroker(ctx context.Context, id int32, epoch int64, leaseUntil time.Time) (store.Broker, error) {
	b, err := scanBroker(s.db.WriteIn(LaneUrgent).QueryRowContext(ctx,
		`UPDATE brokers SET lease_expires_at = `+s.db.Greatest()+`(lease_expires_at, $1) WHERE id = $2 AND epoch = $3
		 RETURNING `+brokerColumns, s.db.Time(leaseUntil), id, epoch))
	if !errors.Is(err, sql.ErrNoRows) {
		return b, s.db.Translate("heartbeat broker", err)
	}
	// Brokers are never deleted: one that was there is still there.
	var exists bool
	if err := s.db.Read().QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM brokers WHERE id = $1)`, id).Scan(&exists); err != nil {
		return store.Broker{}, s.db.Translate("heartbeat broker", err)
	}
	if !exists {
		return store.Broker{}, store.ErrNotFound
	}
	return store.Broker{}, store.ErrConflict
}

// ListBrokers implements store.Store.
func (s *Store) ListBrokers(ctx context.Context) ([]store.Broker, error) {
	rows, err := s.db.Read().QueryContext(ctx, `SELECT `+brokerColumns+` FROM brokers ORDER BY id`)
	return Collect(s.db, rows, err, scanBroker, "list brokers")
}

// AllocateProducerIDs implements store.Store. The broker row is read FOR
// SHARE (a re-registration waits), and the counter row's lock serialises
// concurrent allocations (on SQLite, the write transaction).
func (s *Store) AllocateProducerIDs(ctx context.Context, brokerID int32, brokerEpoch int64, count int32, at time.Time) (int64, error) {
	if count < 1 {
		return 0, fmt.Errorf("allocate producer ids: count %d is not positive", count)
	}
	var first int64
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		var epoch int64
		if err := tx.QueryRowContext(ctx, `SELECT epoch FROM brokers WHERE id = $1`+s.db.Lock(LockShare), brokerID).Scan(&epoch); err != nil {
			return err // sql.ErrNoRows: store.ErrNotFound
		}
		if epoch != brokerEpoch {
			return store.ErrConflict
		}
		if err := tx.QueryRowContext(ctx,
			`UPDATE producer_id_counter SET next_id = next_id + $1 WHERE id = 1 RETURNING next_id - $1`,
			int64(count)).Scan(&first); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO producer_id_blocks (first_id, count, broker_id, broker_epoch, allocated_at) VALUES ($1, $2, $3, $4, $5)`,
			first, count, brokerID, brokerEpoch, s.db.Time(at))
		return err
	})
	return first, s.db.Translate("allocate producer ids", err)
}
