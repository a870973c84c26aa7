-- Metadata changes since a version (see the Postgres migration of the same
-- number for the model): partition and topic rows record the metadata
-- version of their last write (changed_version, indexed), a deleted topic
-- leaves a tombstone in deleted_topics, and changes_floor is the version
-- below which tombstones were pruned.
--
-- SQLite triggers cannot assign NEW, so the bump triggers of topic and
-- partition inserts and updates (migrations/00002) are replaced by ones
-- that bump the version and then stamp the row with it. The stamp is an
-- UPDATE of changed_version alone, which the update triggers skip (WHEN:
-- only a write that leaves changed_version as is bumps), so it neither
-- bumps again nor recurses. The topic delete trigger bumps, then writes the
-- tombstone at that version and prunes tombstones older than an hour. There
-- is one writer, so the version written is the one the transaction commits
-- or below it, and above every version committed before.

-- +goose Up
ALTER TABLE metadata_version ADD COLUMN changes_floor INTEGER NOT NULL DEFAULT 0;
UPDATE metadata_version SET changes_floor = version WHERE id = 1;

ALTER TABLE topics ADD COLUMN changed_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE partitions ADD COLUMN changed_version INTEGER NOT NULL DEFAULT 0;
CREATE INDEX topics_changed_version_idx ON topics (changed_version);
CREATE INDEX partitions_changed_version_idx ON partitions (changed_version);

CREATE TABLE deleted_topics (
    topic_id   TEXT    NOT NULL PRIMARY KEY,
    version    INTEGER NOT NULL,
    deleted_at INTEGER NOT NULL -- unix seconds
) STRICT;
CREATE INDEX deleted_topics_version_idx ON deleted_topics (version);

DROP TRIGGER topics_insert_bump_metadata_version;
DROP TRIGGER topics_update_bump_metadata_version;
DROP TRIGGER topics_delete_bump_metadata_version;
DROP TRIGGER partitions_insert_bump_metadata_version;
DROP TRIGGER partitions_update_bump_metadata_version;

-- +goose StatementBegin
CREATE TRIGGER topics_insert_bump_metadata_version AFTER INSERT ON topics
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    UPDATE topics SET changed_version = (SELECT version FROM metadata_version WHERE id = 1) WHERE id = NEW.id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER topics_update_bump_metadata_version AFTER UPDATE ON topics
WHEN NEW.changed_version IS OLD.changed_version
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    UPDATE topics SET changed_version = (SELECT version FROM metadata_version WHERE id = 1) WHERE id = NEW.id;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER topics_delete_bump_metadata_version AFTER DELETE ON topics
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    INSERT INTO deleted_topics (topic_id, version, deleted_at)
    SELECT OLD.id, version, CAST(strftime('%s', 'now') AS INTEGER) FROM metadata_version WHERE id = 1
    ON CONFLICT (topic_id) DO UPDATE SET version = excluded.version, deleted_at = excluded.deleted_at;
    UPDATE metadata_version SET changes_floor = max(changes_floor, coalesce(
        (SELECT max(version) FROM deleted_topics WHERE deleted_at < CAST(strftime('%s', 'now') AS INTEGER) - 3600), 0))
    WHERE id = 1;
    DELETE FROM deleted_topics WHERE deleted_at < CAST(strftime('%s', 'now') AS INTEGER) - 3600;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER partitions_insert_bump_metadata_version AFTER INSERT ON partitions
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    UPDATE partitions SET changed_version = (SELECT version FROM metadata_version WHERE id = 1)
    WHERE topic_id = NEW.topic_id AND partition = NEW.partition;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER partitions_update_bump_metadata_version AFTER UPDATE ON partitions
WHEN NEW.changed_version IS OLD.changed_version
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    UPDATE partitions SET changed_version = (SELECT version FROM metadata_version WHERE id = 1)
    WHERE topic_id = NEW.topic_id AND partition = NEW.partition;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER partitions_update_bump_metadata_version;
DROP TRIGGER partitions_insert_bump_metadata_version;
DROP TRIGGER topics_delete_bump_metadata_version;
DROP TRIGGER topics_update_bump_metadata_version;
DROP TRIGGER topics_insert_bump_metadata_version;

-- +goose StatementBegin
CREATE TRIGGER topics_insert_bump_metadata_version AFTER INSERT ON topics
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER topics_update_bump_metadata_version AFTER UPDATE ON topics
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER topics_delete_bump_metadata_version AFTER DELETE ON topics
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER partitions_insert_bump_metadata_version AFTER INSERT ON partitions
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER partitions_update_bump_metadata_version AFTER UPDATE ON partitions
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

DROP TABLE deleted_topics;
DROP INDEX partitions_changed_version_idx;
DROP INDEX topics_changed_version_idx;
ALTER TABLE partitions DROP COLUMN changed_version;
ALTER TABLE topics DROP COLUMN changed_version;
ALTER TABLE metadata_version DROP COLUMN changes_floor;
