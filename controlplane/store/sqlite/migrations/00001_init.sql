-- Initial control-plane schema for SQLite (sluice dev).
--
-- Conventions: ids are canonical lowercase UUID text; times are unix
-- milliseconds (INTEGER, UTC); int arrays and string lists are JSON text.

-- +goose Up
CREATE TABLE tenants (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    email      TEXT    NOT NULL UNIQUE,
    plan       TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('active', 'suspended')),
    overrides  TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(overrides)),
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX tenants_created_at_idx ON tenants (created_at, id);

CREATE TABLE api_keys (
    id         TEXT    NOT NULL PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    hash       BLOB    NOT NULL,
    scopes     TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(scopes)),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;

CREATE INDEX api_keys_tenant_id_idx ON api_keys (tenant_id, created_at);
CREATE INDEX api_keys_revoked_at_idx ON api_keys (revoked_at) WHERE revoked_at IS NOT NULL;

CREATE TABLE signing_keys (
    kid        TEXT    NOT NULL PRIMARY KEY,
    private    BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER
) STRICT;

CREATE TABLE topics (
    id                    TEXT    NOT NULL PRIMARY KEY,
    tenant_id             TEXT    NOT NULL REFERENCES tenants (id),
    name                  TEXT    NOT NULL,
    partitions            INTEGER NOT NULL CHECK (partitions > 0),
    replication_factor    INTEGER NOT NULL CHECK (replication_factor > 0),
    retention_ms          INTEGER NOT NULL,
    retention_bytes       INTEGER NOT NULL,
    local_retention_ms    INTEGER NOT NULL,
    local_retention_bytes INTEGER NOT NULL,
    max_message_bytes     INTEGER NOT NULL,
    min_insync_replicas   INTEGER NOT NULL,
    cleanup_policy        TEXT    NOT NULL,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    UNIQUE (tenant_id, name)
) STRICT;

CREATE TABLE partitions (
    topic_id        TEXT    NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition       INTEGER NOT NULL CHECK (partition >= 0),
    replicas        TEXT    NOT NULL CHECK (json_valid(replicas)),
    leader          INTEGER NOT NULL,
    leader_epoch    INTEGER NOT NULL,
    isr             TEXT    NOT NULL CHECK (json_valid(isr)),
    partition_epoch INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition)
) STRICT, WITHOUT ROWID;

CREATE TABLE brokers (
    id               INTEGER NOT NULL PRIMARY KEY,
    address          TEXT    NOT NULL,
    rack             TEXT    NOT NULL,
    epoch            INTEGER NOT NULL,
    lease_expires_at INTEGER NOT NULL,
    registered_at    INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE brokers;
DROP TABLE partitions;
DROP TABLE topics;
DROP TABLE signing_keys;
DROP TABLE api_keys;
DROP TABLE tenants;
