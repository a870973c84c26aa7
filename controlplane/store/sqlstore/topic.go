package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const topicColumns = `id, tenant_id, name, partitions, replication_factor,
	retention_ms, retention_bytes, local_retention_ms, local_retention_bytes,
	max_message_bytes, min_insync_replicas, cleanup_policy, created_at, updated_at, unclean_leader_election,
	message_timestamp_type`

func scanTopic(r Scanner) (store.Topic, error) {
	var t store.Topic
	if err := r.Scan(&t.ID, &t.TenantID, &t.Name, &t.Partitions, &t.ReplicationFactor,
		&t.Config.RetentionMs, &t.Config.RetentionBytes, &t.Config.LocalRetentionMs, &t.Config.LocalRetentionBytes,
		&t.Config.MaxMessageBytes, &t.Config.MinInsyncReplicas, &t.Config.CleanupPolicy,
		ScanTime(&t.CreatedAt), ScanTime(&t.UpdatedAt), &t.Config.UncleanLeaderElection, &t.Config.MessageTimestampType); err != nil {
		return store.Topic{}, err
	}
	return t, nil
}

// CreateTopic implements store.Store. The partitions are stored under t.ID
// (their TopicID field is ignored). Zero CreatedAt / UpdatedAt are stored as
// now. An unknown tenant → store.ErrNotFound. A taken name is reported before
// a limit.
func (s *Store) CreateTopic(ctx context.Context, t store.Topic, parts []store.Partition, limits store.CountLimits) error {
	id, err := store.CheckNewID("topic", t.ID)
	if err != nil {
		return err
	}
	tenantID, ok := store.CanonicalID(t.TenantID)
	if !ok {
		return store.ErrNotFound
	}
	if err := store.CheckTopic(t, parts); err != nil {
		return err
	}
	created := orNow(t.CreatedAt)
	updated := t.UpdatedAt
	if updated.IsZero() {
		updated = created
	}
	err = s.db.InTx(ctx, func(tx *sql.Tx) error {
		// The tenant row lock serialises topic creations of the tenant:
		// the counts below cannot change before this transaction ends.
		if err := s.lockTenant(ctx, tx, tenantID); err != nil {
			return err
		}
		var (
			topics, nparts int64
			taken          bool
		)
		if err := tx.QueryRowContext(ctx,
			`SELECT count(*), coalesce(sum(partitions), 0),
			        EXISTS (SELECT 1 FROM topics WHERE tenant_id = $1 AND name = $2)
			 FROM topics WHERE tenant_id = $1`, tenantID, t.Name).Scan(&topics, &nparts, &taken); err != nil {
			return err
		}
		if taken {
			return &store.AlreadyExistsError{What: "topic name"}
		}
		if err := store.CheckLimits(limits, topics, nparts, int64(t.Partitions)); err != nil {
			return err
		}
		c := t.Config
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO topics (`+topicColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
			id, tenantID, t.Name, t.Partitions, t.ReplicationFactor,
			c.RetentionMs, c.RetentionBytes, c.LocalRetentionMs, c.LocalRetentionBytes,
			c.MaxMessageBytes, c.MinInsyncReplicas, c.CleanupPolicy, s.db.Time(created), s.db.Time(updated), c.UncleanLeaderElection,
			c.MessageTimestampType); err != nil {
			return err
		}
		return s.insertPartitions(ctx, tx, id, parts)
	})
	return s.db.Translate("create topic", err)
}

// lockTenant locks the tenant row in tx (FOR NO KEY UPDATE: API-key
// inserts, whose foreign-key check takes FOR KEY SHARE, are not blocked):
// the serialisation of the tenant's count-limited creations. An unknown
// tenant is sql.ErrNoRows.
func (s *Store) lockTenant(ctx context.Context, tx *sql.Tx, tenantID string) error {
	var one int
	return tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE id = $1`+s.db.Lock(LockNoKeyUpdate), tenantID).Scan(&one)
}

// partitionRecord is a row of insertPartitions.
type partitionRecord struct {
	TopicID        string  `json:"topic_id"`
	Partition      int32   `json:"partition"`
	Replicas       []int32 `json:"replicas"`
	Leader         int32   `json:"leader"`
	LeaderEpoch    int32   `json:"leader_epoch"`
	ISR            []int32 `json:"isr"`
	PartitionEpoch int32   `json:"partition_epoch"`
}

var partitionRecordColumns = []Column{
	{"topic_id", "uuid"}, {"partition", "integer"}, {"replicas", "integer[]"}, {"leader", "integer"},
	{"leader_epoch", "integer"}, {"isr", "integer[]"}, {"partition_epoch", "integer"},
}

// insertPartitions writes the partitions of the topic id in tx, in one
// statement.
func (s *Store) insertPartitions(ctx context.Context, tx *sql.Tx, id string, parts []store.Partition) error {
	recs := make([]partitionRecord, len(parts))
	for i, p := range parts {
		recs[i] = partitionRecord{id, p.Partition, nonNilList(p.Replicas), p.Leader, p.LeaderEpoch, nonNilList(p.ISR), p.PartitionEpoch}
	}
	js, err := Records(recs)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx,
		`INSERT INTO partitions (`+partitionColumns+`) SELECT `+partitionColumns+` FROM `+
			s.db.Records("$1", "r", partitionRecordColumns...), js)
	return err
}

// nonNilList encodes nil as the empty list (JSON null is not a list).
func nonNilList[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

// GetTopic implements store.Store.
func (s *Store) GetTopic(ctx context.Context, tenantID, name string) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	t, err := scanTopic(s.db.Read().QueryRowContext(ctx,
		`SELECT `+topicColumns+` FROM topics WHERE tenant_id = $1 AND name = $2`, tid, name))
	return t, s.db.Translate("get topic", err)
}

// GetTopicByID implements store.Store.
func (s *Store) GetTopicByID(ctx context.Context, id string) (store.Topic, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	t, err := scanTopic(s.db.Read().QueryRowContext(ctx, `SELECT `+topicColumns+` FROM topics WHERE id = $1`, id))
	return t, s.db.Translate("get topic by id", err)
}

// ListTopics implements store.Store. Names compare bytewise.
func (s *Store) ListTopics(ctx context.Context, tenantID string) ([]store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.db.Read().QueryContext(ctx,
		`SELECT `+topicColumns+` FROM topics WHERE tenant_id = $1 ORDER BY name`+s.db.Bytewise(), tid)
	return Collect(s.db, rows, err, scanTopic, "list topics")
}

// UpdateTopicConfig implements store.Store: the topic row is locked (FOR
// NO KEY UPDATE) while update runs, so concurrent updates serialise.
func (s *Store) UpdateTopicConfig(ctx context.Context, tenantID, name string, at time.Time, update func(store.Topic) (store.TopicConfig, error)) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	var out store.Topic
	var updateErr error
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		cur, err := scanTopic(tx.QueryRowContext(ctx,
			`SELECT `+topicColumns+` FROM topics WHERE tenant_id = $1 AND name = $2`+s.db.Lock(LockNoKeyUpdate), tid, name))
		if err != nil {
			return err
		}
		cfg, err := update(cur)
		if err != nil {
			updateErr = err
			return err
		}
		out, err = scanTopic(tx.QueryRowContext(ctx,
			`UPDATE topics SET retention_ms = $1, retention_bytes = $2, local_retention_ms = $3, local_retention_bytes = $4,
			        max_message_bytes = $5, min_insync_replicas = $6, cleanup_policy = $7, updated_at = $8,
			        unclean_leader_election = $10, message_timestamp_type = $11
			 WHERE id = $9 RETURNING `+topicColumns,
			cfg.RetentionMs, cfg.RetentionBytes, cfg.LocalRetentionMs, cfg.LocalRetentionBytes,
			cfg.MaxMessageBytes, cfg.MinInsyncReplicas, cfg.CleanupPolicy, s.db.Time(at), cur.ID, cfg.UncleanLeaderElection,
			cfg.MessageTimestampType))
		return err
	})
	if updateErr != nil {
		return store.Topic{}, updateErr
	}
	return out, s.db.Translate("update topic config", err)
}

// DeleteTopic implements store.Store; the partitions go with the topic
// (ON DELETE CASCADE).
func (s *Store) DeleteTopic(ctx context.Context, tenantID, name string) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	t, err := scanTopic(s.db.Write().QueryRowContext(ctx,
		`DELETE FROM topics WHERE tenant_id = $1 AND name = $2 RETURNING `+topicColumns, tid, name))
	return t, s.db.Translate("delete topic", err)
}

// AddPartitions implements store.Store. The tenant row lock serialises it
// with the tenant's other creations and growths (the partition count below
// cannot change before this transaction ends), then the topic row lock with
// config updates of the topic; locks are taken in that order, tenant first,
// as CreateTopic takes the tenant's.
func (s *Store) AddPartitions(ctx context.Context, tenantID, topicID string, from int32, parts []store.Partition, limits store.CountLimits, at time.Time) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	id, ok := store.CanonicalID(topicID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	if err := store.CheckNewPartitions(from, parts); err != nil {
		return store.Topic{}, err
	}
	var out store.Topic
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		if err := s.lockTenant(ctx, tx, tid); err != nil {
			return err
		}
		var cur int32
		if err := tx.QueryRowContext(ctx,
			`SELECT partitions FROM topics WHERE id = $1 AND tenant_id = $2`+s.db.Lock(LockNoKeyUpdate), id, tid).Scan(&cur); err != nil {
			return err
		}
		if cur != from {
			return fmt.Errorf("topic %s has %d partitions, not %d: %w", id, cur, from, store.ErrConflict)
		}
		var nparts int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(partitions), 0) FROM topics WHERE tenant_id = $1`, tid).Scan(&nparts); err != nil {
			return err
		}
		if err := store.CheckPartitionLimit(limits, nparts, int64(len(parts))); err != nil {
			return err
		}
		if err := s.insertPartitions(ctx, tx, id, parts); err != nil {
			return err
		}
		var err error
		out, err = scanTopic(tx.QueryRowContext(ctx,
			`UPDATE topics SET partitions = $1, updated_at = $2 WHERE id = $3 RETURNING `+topicColumns,
			from+int32(len(parts)), s.db.Time(at), id))
		return err
	})
	return out, s.db.Translate("add partitions", err)
}
