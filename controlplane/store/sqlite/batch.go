package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/sluicemq/sluice/controlplane/store"
)

// UpdatePartitions implements store.Store: one write transaction, each
// update the compare-and-set of UpdatePartition.
func (s *Store) UpdatePartitions(ctx context.Context, updates []store.PartitionUpdate) ([]error, error) {
	var out []error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = updatePartitions(ctx, tx, updates)
		return err
	})
	if err != nil {
		return nil, translate("update partitions", err)
	}
	return out, nil
}

// UpdatePartitionsFenced implements store.Store, fenced as
// UpdatePartitionFenced is (the write lock is held from the epoch check to
// the commit).
func (s *Store) UpdatePartitionsFenced(ctx context.Context, updates []store.PartitionUpdate, controllerEpoch int64) ([]error, error) {
	for _, u := range updates {
		if err := store.CheckFencedUpdate(u.Partition, u.ExpectedEpoch); err != nil {
			return nil, err
		}
	}
	var out []error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var epoch int64
		if err := tx.QueryRowContext(ctx, `SELECT epoch FROM controller_lease WHERE id = 1`).Scan(&epoch); err != nil {
			return err
		}
		if epoch != controllerEpoch {
			return store.ErrFenced
		}
		var err error
		out, err = updatePartitions(ctx, tx, updates)
		return err
	})
	if err != nil {
		return nil, translate("update partitions", err)
	}
	return out, nil
}

// updatePartitions runs updatePartition for each update inside tx,
// collecting the per-partition outcomes. Its errors are untranslated.
func updatePartitions(ctx context.Context, tx *sql.Tx, updates []store.PartitionUpdate) ([]error, error) {
	out := make([]error, len(updates))
	for i, u := range updates {
		id, ok := store.CanonicalID(u.Partition.TopicID)
		if !ok {
			out[i] = store.ErrNotFound
			continue
		}
		switch err := updatePartition(ctx, tx, id, u.Partition, u.ExpectedEpoch); {
		case err == nil:
		case errors.Is(err, store.ErrConflict):
			out[i] = store.ErrConflict
		case errors.Is(err, sql.ErrNoRows):
			out[i] = store.ErrNotFound
		default:
			return nil, err
		}
	}
	return out, nil
}
