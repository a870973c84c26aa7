package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/sluicemq/sluice/controlplane/store"
)

// UpdatePartitions implements store.Store.
func (s *Store) UpdatePartitions(ctx context.Context, updates []store.PartitionUpdate) ([]error, error) {
	var out []error
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.updatePartitions(ctx, tx, updates)
		return err
	})
	if err != nil {
		return nil, s.db.Translate("update partitions", err)
	}
	return out, nil
}

// UpdatePartitionsFenced implements store.Store, fenced as
// UpdatePartitionFenced is (checkLease first).
func (s *Store) UpdatePartitionsFenced(ctx context.Context, updates []store.PartitionUpdate, controllerEpoch int64) ([]error, error) {
	for _, u := range updates {
		if err := store.CheckFencedUpdate(u.Partition, u.ExpectedEpoch); err != nil {
			return nil, err
		}
	}
	var out []error
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		if err := s.checkLease(ctx, tx, controllerEpoch); err != nil {
			return err
		}
		var err error
		out, err = s.updatePartitions(ctx, tx, updates)
		return err
	})
	if err != nil {
		return nil, s.db.Translate("update partitions", err)
	}
	return out, nil
}

// partitionKey is a record of the partitions updatePartitions locks.
type partitionKey struct {
	TopicID   string `json:"topic_id"`
	Partition int32  `json:"partition"`
}

// partitionCAS is a record of one round of updatePartitions.
type partitionCAS struct {
	partitionRecord
	Expected int32 `json:"expected"`
}

// updatePartitions is the batched compare-and-set inside tx, a fixed
// number of statements whatever the batch's size. It first locks every
// named partition row in key order (one statement; Postgres FOR UPDATE),
// which also reads their epochs; the writes then go out as one UPDATE of
// all of them per round. Locking the rows up front, in one order, before
// any write takes the metadata_version row (its trigger), keeps concurrent
// batches and single-row writers from deadlocking on each other on
// Postgres. Its errors are untranslated.
func (s *Store) updatePartitions(ctx context.Context, tx *sql.Tx, updates []store.PartitionUpdate) ([]error, error) {
	out := make([]error, len(updates))
	ids := make([]string, len(updates))
	var keys []partitionKey
	for i, u := range updates {
		id, ok := store.CanonicalID(u.Partition.TopicID)
		if !ok {
			out[i] = store.ErrNotFound
			continue
		}
		ids[i] = id
		keys = append(keys, partitionKey{id, u.Partition.Partition})
	}
	if len(keys) == 0 {
		return out, nil
	}
	js, err := Records(keys)
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx,
		`SELECT topic_id, partition, partition_epoch FROM partitions
		 WHERE (topic_id, partition) IN (SELECT topic_id, partition FROM `+
			s.db.Records("$1", "k", Column{"topic_id", "uuid"}, Column{"partition", "integer"})+`)
		 ORDER BY topic_id, partition`+s.db.Lock(LockUpdate), js)
	if err != nil {
		return nil, err
	}
	epochs := make(map[partitionKey]int32, len(keys))
	for rows.Next() {
		var (
			k partitionKey
			e int32
		)
		if err := rows.Scan(&k.TopicID, &k.Partition, &e); err != nil {
			rows.Close()
			return nil, err
		}
		epochs[k] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// Each round is one UPDATE of many partitions (on Postgres one bump of
	// the metadata version, migrations/00012); a partition named again in
	// the batch goes into the next round, compared with what the earlier
	// update wrote.
	var rounds [][]partitionCAS
	round := map[partitionKey]int{}
	for i, u := range updates {
		if out[i] != nil {
			continue
		}
		p := u.Partition
		k := partitionKey{ids[i], p.Partition}
		e, ok := epochs[k]
		switch {
		case !ok:
			out[i] = store.ErrNotFound
			continue
		case e != u.ExpectedEpoch:
			out[i] = store.ErrConflict
			continue
		}
		epochs[k] = p.PartitionEpoch
		r := round[k]
		round[k] = r + 1
		if r == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[r] = append(rounds[r], partitionCAS{
			partitionRecord{ids[i], p.Partition, nonNilList(p.Replicas), p.Leader, p.LeaderEpoch, nonNilList(p.ISR), p.PartitionEpoch},
			u.ExpectedEpoch,
		})
	}
	cols := append(partitionRecordColumns[:len(partitionRecordColumns):len(partitionRecordColumns)], Column{"expected", "integer"})
	for _, recs := range rounds {
		js, err := Records(recs)
		if err != nil {
			return nil, err
		}
		res, err := tx.ExecContext(ctx,
			`UPDATE partitions AS p SET replicas = u.replicas, leader = u.leader, leader_epoch = u.leader_epoch,
			        isr = u.isr, partition_epoch = u.partition_epoch
			 FROM `+s.db.Records("$1", "u", cols...)+`
			 WHERE p.topic_id = u.topic_id AND p.partition = u.partition AND p.partition_epoch = u.expected`, js)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n != int64(len(recs)) {
			return nil, fmt.Errorf("update partitions: %d of %d locked partitions updated", n, len(recs))
		}
	}
	return out, nil
}
