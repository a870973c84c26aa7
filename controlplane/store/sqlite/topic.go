package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

const topicColumns = `id, tenant_id, name, partitions, replication_factor,
	retention_ms, retention_bytes, local_retention_ms, local_retention_bytes,
	max_message_bytes, min_insync_replicas, cleanup_policy, created_at, updated_at, unclean_leader_election`

func scanTopic(r rowScanner) (store.Topic, error) {
	var (
		t                store.Topic
		created, updated int64
	)
	if err := r.Scan(&t.ID, &t.TenantID, &t.Name, &t.Partitions, &t.ReplicationFactor,
		&t.Config.RetentionMs, &t.Config.RetentionBytes, &t.Config.LocalRetentionMs, &t.Config.LocalRetentionBytes,
		&t.Config.MaxMessageBytes, &t.Config.MinInsyncReplicas, &t.Config.CleanupPolicy, &created, &updated, &t.Config.UncleanLeaderElection); err != nil {
		return store.Topic{}, err
	}
	t.CreatedAt = fromMS(created)
	t.UpdatedAt = fromMS(updated)
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
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		// BEGIN IMMEDIATE holds the write lock: nothing changes between
		// the count and the insert.
		var (
			one            int
			topics, nparts int64
			taken          bool
		)
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE id = ?`, tenantID).Scan(&one); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx,
			`SELECT count(*), coalesce(sum(partitions), 0), coalesce(max(name = ?), 0)
			 FROM topics WHERE tenant_id = ?`, t.Name, tenantID).Scan(&topics, &nparts, &taken); err != nil {
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
			`INSERT INTO topics (`+topicColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, tenantID, t.Name, t.Partitions, t.ReplicationFactor,
			c.RetentionMs, c.RetentionBytes, c.LocalRetentionMs, c.LocalRetentionBytes,
			c.MaxMessageBytes, c.MinInsyncReplicas, c.CleanupPolicy, toMS(created), toMS(updated), c.UncleanLeaderElection); err != nil {
			return err
		}
		if err := insertPartitions(ctx, tx, id, parts); err != nil {
			return err
		}
		return nil
	})
	return translate("create topic", err)
}

// GetTopic implements store.Store.
func (s *Store) GetTopic(ctx context.Context, tenantID, name string) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	t, err := scanTopic(s.read.QueryRowContext(ctx,
		`SELECT `+topicColumns+` FROM topics WHERE tenant_id = ? AND name = ?`, tid, name))
	return t, translate("get topic", err)
}

// GetTopicByID implements store.Store.
func (s *Store) GetTopicByID(ctx context.Context, id string) (store.Topic, error) {
	id, ok := store.CanonicalID(id)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	t, err := scanTopic(s.read.QueryRowContext(ctx, `SELECT `+topicColumns+` FROM topics WHERE id = ?`, id))
	return t, translate("get topic by id", err)
}

// ListTopics implements store.Store.
func (s *Store) ListTopics(ctx context.Context, tenantID string) ([]store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return nil, nil
	}
	rows, err := s.read.QueryContext(ctx,
		`SELECT `+topicColumns+` FROM topics WHERE tenant_id = ? ORDER BY name`, tid)
	if err != nil {
		return nil, translate("list topics", err)
	}
	return collect(rows, scanTopic, "list topics")
}

// UpdateTopicConfig implements store.Store: the write transaction (BEGIN
// IMMEDIATE) holds the write lock while update runs, so concurrent updates
// serialise.
func (s *Store) UpdateTopicConfig(ctx context.Context, tenantID, name string, at time.Time, update func(store.Topic) (store.TopicConfig, error)) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	var out store.Topic
	var updateErr error
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		cur, err := scanTopic(tx.QueryRowContext(ctx,
			`SELECT `+topicColumns+` FROM topics WHERE tenant_id = ? AND name = ?`, tid, name))
		if err != nil {
			return err
		}
		cfg, err := update(cur)
		if err != nil {
			updateErr = err
			return err
		}
		out, err = scanTopic(tx.QueryRowContext(ctx,
			`UPDATE topics SET retention_ms = ?, retention_bytes = ?, local_retention_ms = ?, local_retention_bytes = ?,
			        max_message_bytes = ?, min_insync_replicas = ?, cleanup_policy = ?, updated_at = ?,
			        unclean_leader_election = ?
			 WHERE id = ? RETURNING `+topicColumns,
			cfg.RetentionMs, cfg.RetentionBytes, cfg.LocalRetentionMs, cfg.LocalRetentionBytes,
			cfg.MaxMessageBytes, cfg.MinInsyncReplicas, cfg.CleanupPolicy, toMS(at), cfg.UncleanLeaderElection, cur.ID))
		return err
	})
	if updateErr != nil {
		return store.Topic{}, updateErr
	}
	return out, translate("update topic config", err)
}

// DeleteTopic implements store.Store; the partitions go with the topic.
func (s *Store) DeleteTopic(ctx context.Context, tenantID, name string) (store.Topic, error) {
	tid, ok := store.CanonicalID(tenantID)
	if !ok {
		return store.Topic{}, store.ErrNotFound
	}
	t, err := scanTopic(s.write.QueryRowContext(ctx,
		`DELETE FROM topics WHERE tenant_id = ? AND name = ? RETURNING `+topicColumns, tid, name))
	return t, translate("delete topic", err)
}

// AddPartitions implements store.Store. The write transaction (BEGIN
// IMMEDIATE) holds the write lock from the count to the insert, so
// concurrent growths and creations serialise.
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
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var cur int32
		if err := tx.QueryRowContext(ctx, `SELECT partitions FROM topics WHERE id = ? AND tenant_id = ?`, id, tid).Scan(&cur); err != nil {
			return err
		}
		if cur != from {
			return fmt.Errorf("topic %s has %d partitions, not %d: %w", id, cur, from, store.ErrConflict)
		}
		var nparts int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(partitions), 0) FROM topics WHERE tenant_id = ?`, tid).Scan(&nparts); err != nil {
			return err
		}
		if err := store.CheckPartitionLimit(limits, nparts, int64(len(parts))); err != nil {
			return err
		}
		if err := insertPartitions(ctx, tx, id, parts); err != nil {
			return err
		}
		var err error
		out, err = scanTopic(tx.QueryRowContext(ctx,
			`UPDATE topics SET partitions = ?, updated_at = ? WHERE id = ? RETURNING `+topicColumns,
			from+int32(len(parts)), toMS(at), id))
		return err
	})
	return out, translate("add partitions", err)
}

// insertPartitions writes the partitions of the topic id in tx.
func insertPartitions(ctx context.Context, tx *sql.Tx, id string, parts []store.Partition) error {
	stmt, err := tx.PrepareContext(ctx,
		`INSERT INTO partitions (`+partitionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, p := range parts {
		if _, err := stmt.ExecContext(ctx, id, p.Partition, encodeList(p.Replicas), p.Leader, p.LeaderEpoch,
			encodeList(p.ISR), p.PartitionEpoch); err != nil {
			return err
		}
	}
	return nil
}
