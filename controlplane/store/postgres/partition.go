package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	return translate("update partition", updatePartition(ctx, s.pool, id, p, expectedEpoch))
}

// UpdatePartitionFenced implements store.Store. The lease row is read FOR
// SHARE in the write's transaction: a lease takeover (an UPDATE of that row)
// waits until the write commits, and a write after the takeover sees the new
// epoch, so no write of a deposed controller lands after its successor took
// over.
func (s *Store) UpdatePartitionFenced(ctx context.Context, p store.Partition, expectedEpoch int32, controllerEpoch int64) error {
	if err := store.CheckFencedUpdate(p, expectedEpoch); err != nil {
		return err
	}
	id, ok := store.CanonicalID(p.TopicID)
	if !ok {
		return store.ErrNotFound
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var epoch int64
		if err := tx.QueryRow(ctx, `SELECT epoch FROM controller_lease WHERE id = 1 FOR SHARE`).Scan(&epoch); err != nil {
			return err
		}
		if epoch != controllerEpoch {
			return store.ErrFenced
		}
		return updatePartition(ctx, tx, id, p, expectedEpoch)
	})
	return translate("update partition", err)
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// updatePartition is the compare-and-set of UpdatePartition on q. Its
// errors are untranslated.
func updatePartition(ctx context.Context, q querier, topicID string, p store.Partition, expectedEpoch int32) error {
	tag, err := q.Exec(ctx,
		`UPDATE partitions SET replicas = $1, leader = $2, leader_epoch = $3, isr = $4, partition_epoch = $5
		 WHERE topic_id = $6 AND partition = $7 AND partition_epoch = $8`,
		nonNilList(p.Replicas), p.Leader, p.LeaderEpoch, nonNilList(p.ISR), p.PartitionEpoch,
		topicID, p.Partition, expectedEpoch)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Lost: a stale epoch, or no such partition. (A partition only
	// disappears with its topic; deleted meanwhile reads as not found.)
	var exists bool
	if err := q.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM partitions WHERE topic_id = $1 AND partition = $2)`, topicID, p.Partition).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return store.ErrNotFound
	}
	return store.ErrConflict
}

// ListAllPartitions implements store.Store (one statement: one snapshot).
func (s *Store) ListAllPartitions(ctx context.Context) ([]store.PartitionWithTopic, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT p.topic_id, p.partition, p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
		        t.tenant_id, t.name, t.retention_ms, t.retention_bytes, t.local_retention_ms, t.local_retention_bytes,
		        t.max_message_bytes, t.min_insync_replicas, t.cleanup_policy, t.unclean_leader_election
		 FROM partitions p JOIN topics t ON t.id = p.topic_id
		 ORDER BY t.tenant_id, t.name COLLATE "C", p.partition`)
	if err != nil {
		return nil, translate("list all partitions", err)
	}
	return collect(rows, scanPartitionWithTopic, "list all partitions")
}

// ListTopicsPartitions implements store.Store (one statement: one
// snapshot; index scans of the partitions' primary key).
func (s *Store) ListTopicsPartitions(ctx context.Context, topicIDs []string) ([]store.PartitionWithTopic, error) {
	ids := store.CanonicalIDs(topicIDs)
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx,
		`SELECT p.topic_id, p.partition, p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
		        t.tenant_id, t.name, t.retention_ms, t.retention_bytes, t.local_retention_ms, t.local_retention_bytes,
		        t.max_message_bytes, t.min_insync_replicas, t.cleanup_policy, t.unclean_leader_election
		 FROM partitions p JOIN topics t ON t.id = p.topic_id
		 WHERE p.topic_id = ANY($1::uuid[])
		 ORDER BY t.tenant_id, t.name COLLATE "C", p.partition`, ids)
	if err != nil {
		return nil, translate("list topics' partitions", err)
	}
	return collect(rows, scanPartitionWithTopic, "list topics' partitions")
}

// PartitionLoad implements store.Store: one read of the broker_load
// counters, which triggers keep in step with every partition write
// (migrations/00010), so its cost follows the brokers, not the partitions.
// Brokers holding nothing are absent.
func (s *Store) PartitionLoad(ctx context.Context) (map[int32]store.BrokerLoad, error) {
	rows, err := s.pool.Query(ctx,
		`SELECT broker, replicas, leaders FROM broker_load WHERE replicas > 0 OR leaders > 0`)
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
