-- Initial control-plane schema for Postgres.
--
-- Constraint names are part of the contract with the Go code: a
-- unique_violation is reported as *store.AlreadyExistsError naming the field
-- after the constraint (see errors.go).

-- +goose Up
CREATE TABLE tenants (
    id         uuid        NOT NULL,
    name       text        NOT NULL,
    email      text        NOT NULL,
    plan       text        NOT NULL,
    status     text        NOT NULL,
    overrides  jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    CONSTRAINT tenants_pkey PRIMARY KEY (id),
    CONSTRAINT tenants_name_key UNIQUE (name),
    CONSTRAINT tenants_email_key UNIQUE (email),
    CONSTRAINT tenants_status_check CHECK (status IN ('active', 'suspended'))
);

CREATE INDEX tenants_created_at_idx ON tenants (created_at, id);

CREATE TABLE api_keys (
    id         text        NOT NULL,
    tenant_id  uuid        NOT NULL,
    name       text        NOT NULL,
    hash       bytea       NOT NULL,
    scopes     text[]      NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    CONSTRAINT api_keys_pkey PRIMARY KEY (id),
    CONSTRAINT api_keys_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id) ON DELETE CASCADE
);

CREATE INDEX api_keys_tenant_id_idx ON api_keys (tenant_id, created_at);
CREATE INDEX api_keys_revoked_at_idx ON api_keys (revoked_at) WHERE revoked_at IS NOT NULL;

CREATE TABLE signing_keys (
    kid        text        NOT NULL,
    private    bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    retired_at timestamptz,
    CONSTRAINT signing_keys_pkey PRIMARY KEY (kid)
);

CREATE TABLE topics (
    id                    uuid        NOT NULL,
    tenant_id             uuid        NOT NULL,
    name                  text        NOT NULL,
    partitions            integer     NOT NULL,
    replication_factor    integer     NOT NULL,
    retention_ms          bigint      NOT NULL,
    retention_bytes       bigint      NOT NULL,
    local_retention_ms    bigint      NOT NULL,
    local_retention_bytes bigint      NOT NULL,
    max_message_bytes     integer     NOT NULL,
    min_insync_replicas   integer     NOT NULL,
    cleanup_policy        text        NOT NULL,
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    CONSTRAINT topics_pkey PRIMARY KEY (id),
    CONSTRAINT topics_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES tenants (id),
    CONSTRAINT topics_tenant_id_name_key UNIQUE (tenant_id, name),
    CONSTRAINT topics_partitions_check CHECK (partitions > 0),
    CONSTRAINT topics_replication_factor_check CHECK (replication_factor > 0)
);

CREATE TABLE partitions (
    topic_id        uuid      NOT NULL,
    partition       integer   NOT NULL,
    replicas        integer[] NOT NULL,
    leader          integer   NOT NULL,
    leader_epoch    integer   NOT NULL,
    isr             integer[] NOT NULL,
    partition_epoch integer   NOT NULL,
    CONSTRAINT partitions_pkey PRIMARY KEY (topic_id, partition),
    CONSTRAINT partitions_topic_id_fkey FOREIGN KEY (topic_id) REFERENCES topics (id) ON DELETE CASCADE,
    CONSTRAINT partitions_partition_check CHECK (partition >= 0)
);

CREATE TABLE brokers (
    id               integer     NOT NULL,
    address          text        NOT NULL,
    rack             text        NOT NULL,
    epoch            bigint      NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    registered_at    timestamptz NOT NULL,
    CONSTRAINT brokers_pkey PRIMARY KEY (id)
);

-- +goose Down
DROP TABLE brokers;
DROP TABLE partitions;
DROP TABLE topics;
DROP TABLE signing_keys;
DROP TABLE api_keys;
DROP TABLE tenants;
