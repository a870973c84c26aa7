-- The controller lease and the global metadata version.
--
-- controller_lease and metadata_version hold exactly one row each (id = 1),
-- created here, so the Go code only ever UPDATEs them.
--
-- The metadata version is bumped by triggers, so that no write path can
-- forget it and the bump commits with the change it announces:
--   - topics: every insert, update and delete (row-level; one row each);
--   - partitions: every update (row-level: UpdatePartition changes one row);
--     inserts and deletes happen only with their topic, once per statement;
--   - brokers: registration (insert, or an update of address, rack or
--     epoch); heartbeats only set lease_expires_at and bump nothing.

-- +goose Up
CREATE TABLE controller_lease (
    id         integer     NOT NULL,
    holder     text        NOT NULL,
    epoch      bigint      NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT controller_lease_pkey PRIMARY KEY (id),
    CONSTRAINT controller_lease_single_row CHECK (id = 1)
);

INSERT INTO controller_lease (id, holder, epoch, expires_at) VALUES (1, '', 0, '1970-01-01T00:00:00Z');

CREATE TABLE metadata_version (
    id      integer NOT NULL,
    version bigint  NOT NULL,
    CONSTRAINT metadata_version_pkey PRIMARY KEY (id),
    CONSTRAINT metadata_version_single_row CHECK (id = 1)
);

INSERT INTO metadata_version (id, version) VALUES (1, 0);

-- +goose StatementBegin
CREATE FUNCTION bump_metadata_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER topics_bump_metadata_version
    AFTER INSERT OR UPDATE OR DELETE ON topics
    FOR EACH ROW EXECUTE FUNCTION bump_metadata_version();

CREATE TRIGGER partitions_update_bump_metadata_version
    AFTER UPDATE ON partitions
    FOR EACH ROW EXECUTE FUNCTION bump_metadata_version();

CREATE TRIGGER partitions_insert_delete_bump_metadata_version
    AFTER INSERT OR DELETE ON partitions
    FOR EACH STATEMENT EXECUTE FUNCTION bump_metadata_version();

CREATE TRIGGER brokers_bump_metadata_version
    AFTER INSERT OR DELETE OR UPDATE OF address, rack, epoch ON brokers
    FOR EACH ROW EXECUTE FUNCTION bump_metadata_version();

-- +goose Down
DROP TRIGGER brokers_bump_metadata_version ON brokers;
DROP TRIGGER partitions_insert_delete_bump_metadata_version ON partitions;
DROP TRIGGER partitions_update_bump_metadata_version ON partitions;
DROP TRIGGER topics_bump_metadata_version ON topics;
DROP FUNCTION bump_metadata_version();
DROP TABLE metadata_version;
DROP TABLE controller_lease;
