-- The controller lease and the global metadata version (see the Postgres
-- migration of the same number for the model).
--
-- controller_lease and metadata_version hold exactly one row each (id = 1).
-- SQLite triggers are row-level only: creating a topic bumps the version
-- once per partition row too, all in the one transaction. Heartbeats only
-- set brokers.lease_expires_at and bump nothing.

-- +goose Up
CREATE TABLE controller_lease (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    holder     TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;

INSERT INTO controller_lease (id, holder, epoch, expires_at) VALUES (1, '', 0, 0);

CREATE TABLE metadata_version (
    id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL
) STRICT;

INSERT INTO metadata_version (id, version) VALUES (1, 0);

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

-- +goose StatementBegin
CREATE TRIGGER partitions_delete_bump_metadata_version AFTER DELETE ON partitions
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER brokers_insert_bump_metadata_version AFTER INSERT ON brokers
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER brokers_update_bump_metadata_version AFTER UPDATE OF address, rack, epoch ON brokers
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER brokers_delete_bump_metadata_version AFTER DELETE ON brokers
BEGIN
    UPDATE metadata_version SET version = version + 1 WHERE id = 1;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER brokers_delete_bump_metadata_version;
DROP TRIGGER brokers_update_bump_metadata_version;
DROP TRIGGER brokers_insert_bump_metadata_version;
DROP TRIGGER partitions_delete_bump_metadata_version;
DROP TRIGGER partitions_update_bump_metadata_version;
DROP TRIGGER partitions_insert_bump_metadata_version;
DROP TRIGGER topics_delete_bump_metadata_version;
DROP TRIGGER topics_update_bump_metadata_version;
DROP TRIGGER topics_insert_bump_metadata_version;
DROP TABLE metadata_version;
DROP TABLE controller_lease;
