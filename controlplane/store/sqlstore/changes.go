package sqlstore

import (
	"context"
	"database/sql"

	"github.com/sluicemq/sluice/controlplane/store"
)

// MetadataChangesSince implements store.Store: one snapshot (InSnapshot),
// reading the rows whose changed_version, kept by triggers
// (migrations/00011), is above since — index scans, so the cost follows
// the changes. The two engines' planners need different help to keep it so
// on tables without statistics (a fresh cluster): changesQuery.
func (s *Store) MetadataChangesSince(ctx context.Context, since int64) (store.MetadataChanges, error) {
	var out store.MetadataChanges
	err := s.db.InSnapshot(ctx, func(tx *sql.Tx) error {
		var floor int64
		if err := tx.QueryRowContext(ctx, `SELECT version, changes_floor FROM metadata_version WHERE id = 1`).Scan(&out.Version, &floor); err != nil {
			return err
		}
		if since < floor {
			return store.ErrChangesPruned
		}
		var err error
		rows, err := tx.QueryContext(ctx, s.pick(changesQuery), since)
		if out.Partitions, err = Collect(s.db, rows, err, scanPartitionWithTopic, "metadata changes"); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, `SELECT topic_id FROM deleted_topics WHERE version > $1 ORDER BY topic_id`, since)
		out.DeletedTopics, err = Collect(s.db, rows, err, scanString, "metadata changes")
		return err
	})
	if err != nil {
		return store.MetadataChanges{}, s.db.Translate("metadata changes", err)
	}
	return out, nil
}

// changesQuery is the partitions changed after $1, with their topics.
//
// Postgres: each changed row is read in a LATERAL subquery (LIMIT 1 keeps
// the planner from flattening it into a join): before the tables had
// statistics (until autovacuum analyses them), the planner hash-joined
// every partition and topic, about 2 ms at 6,000 partitions for one change;
// the nested loop of primary-key lookups needs no statistics.
//
// SQLite: the plan is pinned (INDEXED BY, and CROSS JOIN, which fixes the
// join order): without statistics the planner scanned every topic in ORDER
// BY order and probed the changes for each, 5-10 ms at 6,000 partitions
// for one change.
var changesQuery = engineSQL{
	postgres: `WITH changed AS (
	     SELECT topic_id, partition FROM partitions WHERE changed_version > $1
	     UNION
	     SELECT p.topic_id, p.partition FROM topics t JOIN partitions p ON p.topic_id = t.id WHERE t.changed_version > $1
	 )
	 SELECT x.* FROM changed c CROSS JOIN LATERAL (
	     SELECT ` + partitionWithTopicColumns + `
	     FROM partitions p JOIN topics t ON t.id = p.topic_id
	     WHERE p.topic_id = c.topic_id AND p.partition = c.partition
	     LIMIT 1
	 ) x
	 ORDER BY x.tenant_id, x.name COLLATE "C", x.partition`,
	sqlite: `WITH changed AS (
	     SELECT topic_id, partition FROM partitions INDEXED BY partitions_changed_version_idx WHERE changed_version > $1
	     UNION
	     SELECT p.topic_id, p.partition FROM topics t INDEXED BY topics_changed_version_idx
	     CROSS JOIN partitions p ON p.topic_id = t.id WHERE t.changed_version > $1
	 )
	 SELECT ` + partitionWithTopicColumns + `
	 FROM changed c CROSS JOIN partitions p ON p.topic_id = c.topic_id AND p.partition = c.partition
	 CROSS JOIN topics t ON t.id = p.topic_id
	 ORDER BY t.tenant_id, t.name, p.partition`,
}
