package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/sluicemq/sluice/controlplane/store"
)

const partitionColumns = `topic_id, partition, replicas, leader, leader_epoch, isr, partition_epoch`

func scanPartition(r Scanner) (store.Partition, error) {
	var p store.Partition
	if err := r.Scan(&p.TopicID, &p.Partition, ScanInt32s(&p.Replicas), &p.Leader, &p.LeaderEpoch,
		ScanInt32s(&p.ISR), &p.PartitionEpoch); err != nil {
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
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+partitionColumns+` FROM partitions WHERE topic_id = $1 ORDER BY partition`, id)
	return Collect(s.db, rows, err, scanPartition, "list partitions")
}

// UpdatePartition implements store.Store: one UPDATE … WHERE
// partition_epoch = expected. Concurrent writers serialise on the row
// (Postgres: they queue on its lock and re-check the predicate against the
// committed row; SQLite: the write lock), so exactly one wins each epoch.
func (s *Store) UpdatePartition(ctx context.Context, p store.Partition, expectedEpoch int32) error {
	id, ok := store.CanonicalID(p.TopicID)
	if !ok {
		return store.ErrNotFound
	}
	return s.db.Translate("update partition", s.updatePartition(ctx, s.db.Write(), s.db.Read(), id, p, expectedEpoch))
}

// UpdatePartitionFenced implements store.Store: the lease check (checkLease)
// and the compare-and-set in one transaction, so no write of a deposed
// controller lands after its successor took over.
func (s *Store) UpdatePartitionFenced(ctx context.Context, p store.Partition, expectedEpoch int32, controllerEpoch int64) error {
	if err := store.CheckFencedUpdate(p, expectedEpoch); err != nil {
		return err
	}
	id, ok := store.CanonicalID(p.TopicID)
	if !ok {
		return store.ErrNotFound
	}
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		if err := s.checkLease(ctx, tx, controllerEpoch); err != nil {
			return err
		}
		return s.updatePartition(ctx, tx, tx, id, p, expectedEpoch)
	})
	return s.db.Translate("update partition", err)
}

// updatePartition is the compare-and-set of UpdatePartition, written on w;
// a lost one is told apart (stale epoch or no such partition) reading r.
// Its errors are untranslated.
func (s *Store) updatePartition(ctx context.Context, w, r Querier, topicID string, p store.Partition, expectedEpoch int32) error {
	res, err := w.ExecContext(ctx,
		`UPDATE partitions SET replicas = $1, leader = $2, leader_epoch = $3, isr = $4, partition_epoch = $5
		 WHERE topic_id = $6 AND partition = $7 AND partition_epoch = $8`,
		s.db.Int32s(p.Replicas), p.Leader, p.LeaderEpoch, s.db.Int32s(p.ISR), p.PartitionEpoch,
		topicID, p.Partition, expectedEpoch)
	if err := MustAffect(res, err); !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	// Lost: a stale epoch, or no such partition. (A partition only
	// disappears with its topic; deleted meanwhile reads as not found.)
	var exists bool
	if err := r.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM partitions WHERE topic_id = $1 AND partition = $2)`, topicID, p.Partition).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return store.ErrNotFound
	}
	return store.ErrConflict
}

// partitionWithTopicColumns are the columns of scanPartitionWithTopic,
// from partitions p JOIN topics t.
const partitionWithTopicColumns = `p.topic_id, p.partition, p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
	t.tenant_id, t.name, t.retention_ms, t.retention_bytes, t.local_retention_ms, t.local_retention_bytes,
	t.max_message_bytes, t.min_insync_replicas, t.cleanup_policy, t.unclean_leader_election, t.message_timestamp_type`

// scanPartitionWithTopic scans partitionWithTopicColumns.
func scanPartitionWithTopic(r Scanner) (store.PartitionWithTopic, error) {
	var (
		pt store.PartitionWithTopic
		p  = &pt.Partition
		c  = &pt.Config
	)
	if err := r.Scan(&p.TopicID, &p.Partition, ScanInt32s(&p.Replicas), &p.Leader, &p.LeaderEpoch, ScanInt32s(&p.ISR), &p.PartitionEpoch,
		&pt.TenantID, &pt.TopicName, &c.RetentionMs, &c.RetentionBytes, &c.LocalRetentionMs, &c.LocalRetentionBytes,
		&c.MaxMessageBytes, &c.MinInsyncReplicas, &c.CleanupPolicy, &c.UncleanLeaderElection, &c.MessageTimestampType); err != nil {
		return store.PartitionWithTopic{}, err
	}
	return pt, nil
}

// ListAllPartitions implements store.Store (one statement: one snapshot).
func (s *Store) ListAllPartitions(ctx context.Context) ([]store.PartitionWithTopic, error) {
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+partitionWithTopicColumns+`
		 FROM partitions p JOIN topics t ON t.id = p.topic_id
		 ORDER BY t.tenant_id, t.name`+s.db.Bytewise()+`, p.partition`)
	return Collect(s.db, rows, err, scanPartitionWithTopic, "list all partitions")
}

// ListTopicsPartitions implements store.Store (one statement: one
// snapshot; index lookups of the partitions' primary key).
func (s *Store) ListTopicsPartitions(ctx context.Context, topicIDs []string) ([]store.PartitionWithTopic, error) {
	ids := store.CanonicalIDs(topicIDs)
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+partitionWithTopicColumns+`
		 FROM partitions p JOIN topics t ON t.id = p.topic_id
		 WHERE `+s.db.In("p.topic_id", "$1")+`
		 ORDER BY t.tenant_id, t.name`+s.db.Bytewise()+`, p.partition`, s.db.Strings(ids))
	return Collect(s.db, rows, err, scanPartitionWithTopic, "list topics' partitions")
}

// PartitionLoad implements store.Store: one read of the broker_load
// counters, which triggers keep in step with every partition write
// (migrations/00010), so its cost follows the brokers, not the partitions.
// Brokers holding nothing are absent.
func (s *Store) PartitionLoad(ctx context.Context) (map[int32]store.BrokerLoad, error) {
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT broker, replicas, leaders FROM broker_load WHERE replicas > 0 OR leaders > 0`)
	if err != nil {
		return nil, s.db.Translate("partition load", err)
	}
	defer rows.Close()
	load := make(map[int32]store.BrokerLoad)
	for rows.Next() {
		var (
			broker int32
			l      store.BrokerLoad
		)
		if err := rows.Scan(&broker, &l.Replicas, &l.Leaders); err != nil {
			return nil, s.db.Translate("partition load", err)
		}
		load[broker] = l
	}
	return load, s.db.Translate("partition load", rows.Err())
}
