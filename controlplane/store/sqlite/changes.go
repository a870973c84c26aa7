package sqlite

import (
	"context"

	"github.com/sluicemq/sluice/controlplane/store"
)

// MetadataChangesSince implements store.Store: one read transaction (one
// WAL snapshot), reading the rows whose changed_version, kept by triggers
// (migrations/00011), is above since — index scans, so the cost follows
// the changes. The plan is pinned (INDEXED BY, and CROSS JOIN, which fixes
// the join order): without statistics SQLite's planner scanned every topic
// in ORDER BY order and probed the changes for each, 5-10 ms at 6,000
// partitions for one change.
func (s *Store) MetadataChangesSince(ctx context.Context, since int64) (store.MetadataChanges, error) {
	out, err := s.metadataChangesSince(ctx, since)
	if err != nil {
		return store.MetadataChanges{}, translate("metadata changes", err)
	}
	return out, nil
}

func (s *Store) metadataChangesSince(ctx context.Context, since int64) (store.MetadataChanges, error) {
	var out store.MetadataChanges
	tx, err := s.read.BeginTx(ctx, nil)
	if err != nil {
		return out, err
	}
	defer func() { _ = tx.Rollback() }()
	var floor int64
	if err := tx.QueryRowContext(ctx, `SELECT version, changes_floor FROM metadata_version WHERE id = 1`).Scan(&out.Version, &floor); err != nil {
		return out, err
	}
	if since < floor {
		return out, store.ErrChangesPruned
	}
	rows, err := tx.QueryContext(ctx,
		`WITH changed AS (
		     SELECT topic_id, partition FROM partitions INDEXED BY partitions_changed_version_idx WHERE changed_version > ?1
		     UNION
		     SELECT p.topic_id, p.partition FROM topics t INDEXED BY topics_changed_version_idx
		     CROSS JOIN partitions p ON p.topic_id = t.id WHERE t.changed_version > ?1
		 )
		 SELECT p.topic_id, p.partition, p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
		        t.tenant_id, t.name, t.retention_ms, t.retention_bytes, t.local_retention_ms, t.local_retention_bytes,
		        t.max_message_bytes, t.min_insync_replicas, t.cleanup_policy, t.unclean_leader_election
		 FROM changed c CROSS JOIN partitions p ON p.topic_id = c.topic_id AND p.partition = c.partition
		 CROSS JOIN topics t ON t.id = p.topic_id
		 ORDER BY t.tenant_id, t.name, p.partition`, since)
	if err != nil {
		return out, err
	}
	if out.Partitions, err = collect(rows, scanPartitionWithTopic, "metadata changes"); err != nil {
		return out, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT topic_id FROM deleted_topics WHERE version > ? ORDER BY topic_id`, since)
	if err != nil {
		return out, err
	}
	out.DeletedTopics, err = collect(rows, func(r rowScanner) (string, error) {
		var id string
		return id, r.Scan(&id)
	}, "metadata changes")
	return out, err
}

// scanPartitionWithTopic scans the columns of ListAllPartitions (and of
// MetadataChangesSince, which reads the same ones).
func scanPartitionWithTopic(r rowScanner) (store.PartitionWithTopic, error) {
	var (
		pt            store.PartitionWithTopic
		p             = &pt.Partition
		c             = &pt.Config
		replicas, isr string
	)
	if err := r.Scan(&p.TopicID, &p.Partition, &replicas, &p.Leader, &p.LeaderEpoch, &isr, &p.PartitionEpoch,
		&pt.TenantID, &pt.TopicName, &c.RetentionMs, &c.RetentionBytes, &c.LocalRetentionMs, &c.LocalRetentionBytes,
		&c.MaxMessageBytes, &c.MinInsyncReplicas, &c.CleanupPolicy, &c.UncleanLeaderElection); err != nil {
		return store.PartitionWithTopic{}, err
	}
	var err error
	if p.Replicas, err = decodeList[int32](replicas); err != nil {
		return store.PartitionWithTopic{}, err
	}
	if p.ISR, err = decodeList[int32](isr); err != nil {
		return store.PartitionWithTopic{}, err
	}
	return pt, nil
}
