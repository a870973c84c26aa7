package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/controlplane/store"
)

// UpdatePartitions implements store.Store.
func (s *Store) UpdatePartitions(ctx context.Context, updates []store.PartitionUpdate) ([]error, error) {
	var out []error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
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
// UpdatePartitionFenced is: the lease row is read FOR SHARE first.
func (s *Store) UpdatePartitionsFenced(ctx context.Context, updates []store.PartitionUpdate, controllerEpoch int64) ([]error, error) {
	for _, u := range updates {
		if err := store.CheckFencedUpdate(u.Partition, u.ExpectedEpoch); err != nil {
			return nil, err
		}
	}
	var out []error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var epoch int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM controller_lease WHERE id = 1 FOR SHARE`).Scan(&epoch); err != nil {
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

// updatePartitions is the batched compare-and-set inside tx. It first locks
// every named partition row in key order (one statement), which also reads
// their epochs; the writes then go out as one pipelined batch of UPDATEs.
// Locking the rows up front, in one order, before any write takes the
// metadata_version row (its trigger), keeps concurrent batches and
// single-row writers from deadlocking on each other. Its errors are
// untranslated.
func updatePartitions(ctx context.Context, tx pgx.Tx, updates []store.PartitionUpdate) ([]error, error) {
	type key struct {
		topic string
		part  int32
	}
	out := make([]error, len(updates))
	ids := make([]string, len(updates))
	var topics []string
	var nums []int32
	for i, u := range updates {
		id, ok := store.CanonicalID(u.Partition.TopicID)
		if !ok {
			out[i] = store.ErrNotFound
			continue
		}
		ids[i] = id
		topics, nums = append(topics, id), append(nums, u.Partition.Partition)
	}
	if len(topics) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx,
		`SELECT topic_id::text, partition, partition_epoch FROM partitions
		 WHERE (topic_id, partition) IN (SELECT t::uuid, n FROM unnest($1::text[], $2::integer[]) AS u(t, n))
		 ORDER BY topic_id, partition FOR UPDATE`, topics, nums)
	if err != nil {
		return nil, err
	}
	epochs := make(map[key]int32, len(topics))
	for rows.Next() {
		var (
			k key
			e int32
		)
		if err := rows.Scan(&k.topic, &k.part, &e); err != nil {
			rows.Close()
			return nil, err
		}
		epochs[k] = e
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	var (
		b      pgx.Batch
		queued []int
	)
	for i, u := range updates {
		if out[i] != nil {
			continue
		}
		p := u.Partition
		k := key{ids[i], p.Partition}
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
		b.Queue(`UPDATE partitions SET replicas = $1, leader = $2, leader_epoch = $3, isr = $4, partition_epoch = $5
			 WHERE topic_id = $6 AND partition = $7 AND partition_epoch = $8`,
			nonNilList(p.Replicas), p.Leader, p.LeaderEpoch, nonNilList(p.ISR), p.PartitionEpoch,
			ids[i], p.Partition, u.ExpectedEpoch)
		queued = append(queued, i)
	}
	if len(queued) == 0 {
		return out, nil
	}
	br := tx.SendBatch(ctx, &b)
	for _, i := range queued {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return nil, err
		}
		if tag.RowsAffected() != 1 {
			_ = br.Close()
			p := updates[i].Partition
			return nil, fmt.Errorf("partition %s/%d locked at epoch %d but not updated", p.TopicID, p.Partition, updates[i].ExpectedEpoch)
		}
	}
	return out, br.Close()
}
