-- Metadata changes since a version (store.MetadataChangesSince), so that
-- the assignment stream sends what changed rather than every partition.
--
-- Each partition and topic row records the metadata version of its last
-- write (changed_version, indexed); a deleted topic leaves a tombstone in
-- deleted_topics with the version of its deletion. A reader at version V
-- reads the partitions with changed_version > V, every partition of the
-- topics with changed_version > V (a config change, a growth), and the
-- tombstones with version > V.
--
-- Why a stamp is never missed: a BEFORE ROW trigger stamps each row
-- written with version + 1, read with the metadata_version row locked
-- (FOR UPDATE; held to commit, so writers of metadata are serialised in
-- version order), and the bump that follows in the same statement
-- (migrations/00002; for partition updates the statement-level one of
-- 00012, which a statement that stamped a row always fires) makes the
-- committed version at least that. A statement writing many rows stamps
-- them all with the same version. So every
-- stamp is greater than any version committed before the writer, and no
-- greater than the version its transaction commits: a reader that read
-- version V and then reads the rows stamped after V sees every change
-- committed after V.
--
-- Lock order: the stamp takes the metadata_version row after the row it
-- stamps is locked (PostgreSQL locks the old row of an UPDATE before its
-- BEFORE ROW triggers run), as the AFTER bump of migrations/00002 did, so
-- writers that lock their partition rows first (UpdatePartitions, in key
-- order) and single-row writers still cannot deadlock on each other.
--
-- Tombstones are bounded: writing one deletes those older than an hour and
-- raises metadata_version.changes_floor to the newest version it deleted.
-- A reader whose version is below the floor is refused
-- (store.ErrChangesPruned) and reads a full listing instead. The floor
-- starts at the version current when this migration runs: deletions before
-- it left no tombstone.

-- +goose Up
ALTER TABLE metadata_version ADD COLUMN changes_floor bigint NOT NULL DEFAULT 0;
UPDATE metadata_version SET changes_floor = version WHERE id = 1;

ALTER TABLE topics ADD COLUMN changed_version bigint NOT NULL DEFAULT 0;
ALTER TABLE partitions ADD COLUMN changed_version bigint NOT NULL DEFAULT 0;
CREATE INDEX topics_changed_version_idx ON topics (changed_version);
CREATE INDEX partitions_changed_version_idx ON partitions (changed_version);

CREATE TABLE deleted_topics (
    topic_id   uuid        NOT NULL,
    version    bigint      NOT NULL,
    deleted_at timestamptz NOT NULL,
    CONSTRAINT deleted_topics_pkey PRIMARY KEY (topic_id)
);
CREATE INDEX deleted_topics_version_idx ON deleted_topics (version);

-- +goose StatementBegin
CREATE FUNCTION stamp_changed_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT version + 1 INTO NEW.changed_version FROM metadata_version WHERE id = 1 FOR UPDATE;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- record_deleted_topic bumps the version itself, so the tombstone's version
-- is one this transaction commits whatever order the AFTER triggers run in.
-- +goose StatementBegin
CREATE FUNCTION record_deleted_topic() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
    pruned bigint;
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1 RETURNING version INTO v;
    INSERT INTO deleted_topics (topic_id, version, deleted_at) VALUES (OLD.id, v, now())
    ON CONFLICT (topic_id) DO UPDATE SET version = excluded.version, deleted_at = excluded.deleted_at;
    WITH gone AS (
        DELETE FROM deleted_topics WHERE deleted_at < now() - interval '1 hour' RETURNING version
    ) SELECT max(version) INTO pruned FROM gone;
    IF pruned IS NOT NULL THEN
        UPDATE metadata_version SET changes_floor = greatest(changes_floor, pruned) WHERE id = 1;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER topics_stamp_changed_version
    BEFORE INSERT OR UPDATE ON topics
    FOR EACH ROW EXECUTE FUNCTION stamp_changed_version();

CREATE TRIGGER partitions_stamp_changed_version
    BEFORE INSERT OR UPDATE ON partitions
    FOR EACH ROW EXECUTE FUNCTION stamp_changed_version();

CREATE TRIGGER topics_record_deleted
    AFTER DELETE ON topics
    FOR EACH ROW EXECUTE FUNCTION record_deleted_topic();

-- +goose Down
DROP TRIGGER topics_record_deleted ON topics;
DROP TRIGGER partitions_stamp_changed_version ON partitions;
DROP TRIGGER topics_stamp_changed_version ON topics;
DROP FUNCTION record_deleted_topic();
DROP FUNCTION stamp_changed_version();
DROP TABLE deleted_topics;
DROP INDEX partitions_changed_version_idx;
DROP INDEX topics_changed_version_idx;
ALTER TABLE partitions DROP COLUMN changed_version;
ALTER TABLE topics DROP COLUMN changed_version;
ALTER TABLE metadata_version DROP COLUMN changes_floor;
