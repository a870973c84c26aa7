package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/controlplane/store"
)

const partitionColumns = `topic_id, partition, replicas, leader, leader_epoch, isr, partition_epoch`

func scanPartition(r pgx.Row) (store.Partition, error) {
	var p store.Partition
	if err := r.Scan(&p.TopicID, &p.Partition, &p.Replicas, &p.Leader, &p.LeaderEpoch, &p.ISR, &p.PartitionEpoch); err != nil {
		return store.Partition{}, err
	}
	p.Replicas = nilIfEmpty(p.Replicas)
	p.ISR = nilIfEmpty(p.ISR)
	return p, nil
}

// ListPartitions implements store.Store. An unknown topic has none.
func (s *Store) ListPartitions(ctx context.Context, topicID string) ([]store.Partition, error) {
	id, ok := store.CanonicalID(topicID)
	if !ok {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx,
		`SELECT `+partitionColumns+` FROM partitions WHERE topic_id = $1 ORDER BY partition`, id)
	if err != nil {
		return nil, translate("list partitions", err)
	}
	return collect(rows, scanPartition, "list partitions")
}

// UpdatePartition implements store.Store.
func (s *Store) UpdatePartition(ctx context.Context, p store.Partition, expectedEpoch int32) error {
	id, ok := store.CanonicalID(p.TopicID)
	if !ok {
		return store.ErrNotFound
	}
	tag, err := s.pool.Exec(ctx,
		`UPDATE partitions SET replicas = $1, leader = $2, leader_epoch = $3, isr = $4, partition_epoch = $5
		 WHERE topic_id = $6 AND partition = $7 AND partition_epoch = $8`,
		nonNilList(p.Replicas), p.Leader, p.LeaderEpoch, nonNilList(p.ISR), p.PartitionEpoch,
		id, p.Partition, expectedEpoch)
	if err != nil {
		return translate("update partition", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Lost: a stale epoch, or no such partition. (A partition only
	// disappears with its topic; deleted meanwhile reads as not found.)
	var exists bool
	if err := s.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM partitions WHERE topic_id = $1 AND partition = $2)`, id, p.Partition).Scan(&exists); err != nil {
		return translate("update partition", err)
	}
	if !exists {
		return store.ErrNotFound
	}
	return store.ErrConflict
}

// PartitionLoad implements store.Store, from one snapshot. Brokers holding
// nothing are absent.
func (s *Store) PartitionLoad(ctx context.Context) (map[int32]store.BrokerLoad, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT broker, sum(replica)::int, sum(leader)::int FROM (
		     SELECT unnest(replicas) AS broker, 1 AS replica, 0 AS leader FROM partitions
		     UNION ALL
		     SELECT leader, 0, 1 FROM partitions WHERE leader >= 0
		 ) AS load GROUP BY broker`)
	if err != nil {
		return nil, translate("partition load", err)
	}
	defer rows.Close()
	load := make(map[int32]store.BrokerLoad)
	for rows.Next() {
		var (
			broker int32
			l      store.BrokerLoad
		)
		if err := rows.Scan(&broker, &l.Replicas, &l.Leaders); err != nil {
			return nil, translate("partition load", err)
		}
		load[broker] = l
	}
	return load, translate("partition load", rows.Err())
}
