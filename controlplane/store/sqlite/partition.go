package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
)

const partitionColumns = `topic_id, partition, replicas, leader, leader_epoch, isr, partition_epoch`

func scanPartition(r rowScanner) (store.Partition, error) {
	var (
		p             store.Partition
		replicas, isr string
	)
	if err := r.Scan(&p.TopicID, &p.Partition, &replicas, &p.Leader, &p.LeaderEpoch, &isr, &p.PartitionEpoch); err != nil {
		return store.Partition{}, err
	}
	var err error
	if p.Replicas, err = decodeList[int32](replicas); err != nil {
		return store.Partition{}, err
	}
	if p.ISR, err = decodeList[int32](isr); err != nil {
		return store.Partition{}, err
	}
	return p, nil
}

// ListPartitions implements store.Store. An unknown topic has none.
func (s *Store) ListPartitions(ctx context.Context, topicID string) ([]store.Partition, error) {
	id, ok := store.CanonicalID(topicID)
	if !ok {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+partitionColumns+` FROM partitions WHERE topic_id = ? ORDER BY partition`, id)
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
	err := s.inTx(ctx, func(tx *sql.Tx) error { return updatePartition(ctx, tx, id, p, expectedEpoch) })
	return translate("update partition", err)
}

// UpdatePartitionFenced implements store.Store. The write transaction (BEGIN
// IMMEDIATE) holds the database's write lock from the epoch check to the
// commit, so no lease takeover can come in between.
func (s *Store) UpdatePartitionFenced(ctx context.Context, p store.Partition, expectedEpoch int32, controllerEpoch int64) error {
	if err := store.CheckFencedUpdate(p, expectedEpoch); err != nil {
		return err
	}
	id, ok := store.CanonicalID(p.TopicID)
	if !ok {
		return store.ErrNotFound
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var epoch int64
		if err := tx.QueryRowContext(ctx, `SELECT epoch FROM controller_lease WHERE id = 1`).Scan(&epoch); err != nil {
			return err
		}
		if epoch != controllerEpoch {
			return store.ErrFenced
		}
		return updatePartition(ctx, tx, id, p, expectedEpoch)
	})
	return translate("update partition", err)
}

// updatePartition is the compare-and-set of UpdatePartition inside tx. Its
// errors are untranslated.
func updatePartition(ctx context.Context, tx *sql.Tx, topicID string, p store.Partition, expectedEpoch int32) error {
	res, err := tx.ExecContext(ctx,
		`UPDATE partitions SET replicas = ?, leader = ?, leader_epoch = ?, isr = ?, partition_epoch = ?
		 WHERE topic_id = ? AND partition = ? AND partition_epoch = ?`,
		encodeList(p.Replicas), p.Leader, p.LeaderEpoch, encodeList(p.ISR), p.PartitionEpoch,
		topicID, p.Partition, expectedEpoch)
	if err := mustAffect(res, err); !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var one int
	if err := tx.QueryRowContext(ctx,
		`SELECT 1 FROM partitions WHERE topic_id = ? AND partition = ?`, topicID, p.Partition).Scan(&one); err != nil {
		return err // sql.ErrNoRows → ErrNotFound
	}
	return store.ErrConflict
}

// ListAllPartitions implements store.Store (one statement: one snapshot).
func (s *Store) ListAllPartitions(ctx context.Context) ([]store.PartitionWithTopic, error) {
	rows, err := s.read.QueryContext(ctx,
		`SELECT p.topic_id, p.partition, p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
		        t.tenant_id, t.name, t.retention_ms, t.retention_bytes, t.local_retention_ms, t.local_retention_bytes,
		        t.max_message_bytes, t.min_insync_replicas, t.cleanup_policy, t.unclean_leader_election
		 FROM partitions p JOIN topics t ON t.id = p.topic_id
		 ORDER BY t.tenant_id, t.name, p.partition`)
	if err != nil {
		return nil, translate("list all partitions", err)
	}
	return collect(rows, scanPartitionWithTopic, "list all partitions")
}

// ListTopicsPartitions implements store.Store (one statement: one
// snapshot; index lookups of the partitions' primary key).
func (s *Store) ListTopicsPartitions(ctx context.Context, topicIDs []string) ([]store.PartitionWithTopic, error) {
	ids := store.CanonicalIDs(topicIDs)
	if len(ids) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("list topics' partitions: %w", err)
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT p.topic_id, p.partition, p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
		        t.tenant_id, t.name, t.retention_ms, t.retention_bytes, t.local_retention_ms, t.local_retention_bytes,
		        t.max_message_bytes, t.min_insync_replicas, t.cleanup_policy, t.unclean_leader_election
		 FROM partitions p JOIN topics t ON t.id = p.topic_id
		 WHERE p.topic_id IN (SELECT value FROM json_each(?1))
		 ORDER BY t.tenant_id, t.name, p.partition`, string(list))
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
	rows, err := s.read.QueryContext(ctx,
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

// mustAffect turns "no row affected" into sql.ErrNoRows.
func mustAffect(res sql.Result, err error) error { return sqlstore.MustAffect(res, err) }
