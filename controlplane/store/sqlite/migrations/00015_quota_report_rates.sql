-- Quota report rates as data (issue 30): a report's offered and admitted
-- rates become one JSON object each, keyed by the limit table's dimension
-- names ({"produce_bytes": 1.5e6, "requests": 12, ...}), instead of a
-- column per dimension, so that a new rate dimension needs no migration.
-- quota_reports is soft state (each broker replaces its rows every quota
-- exchange, and only reports of the last 3 s count): the table is made
-- anew, and the brokers' next exchanges fill it.

-- +goose Up
DROP TABLE quota_reports;
CREATE TABLE quota_reports (
    broker_id         INTEGER NOT NULL,
    tenant_id         TEXT    NOT NULL,
    at_ms             INTEGER NOT NULL,
    offered           TEXT    NOT NULL,
    admitted          TEXT    NOT NULL,
    hot_storage_bytes INTEGER NOT NULL,
    groups            INTEGER NOT NULL,
    transactional_ids INTEGER NOT NULL,
    PRIMARY KEY (broker_id, tenant_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX quota_reports_tenant_idx ON quota_reports (tenant_id, broker_id);

-- +goose Down
DROP TABLE quota_reports;
CREATE TABLE quota_reports (
    broker_id              INTEGER NOT NULL,
    tenant_id              TEXT    NOT NULL,
    at_ms                  INTEGER NOT NULL,
    offered_produce_bytes  REAL    NOT NULL,
    offered_fetch_bytes    REAL    NOT NULL,
    offered_requests       REAL    NOT NULL,
    offered_producer_ids   REAL    NOT NULL,
    admitted_produce_bytes REAL    NOT NULL,
    admitted_fetch_bytes   REAL    NOT NULL,
    admitted_requests      REAL    NOT NULL,
    admitted_producer_ids  REAL    NOT NULL,
    hot_storage_bytes      INTEGER NOT NULL,
    groups                 INTEGER NOT NULL,
    transactional_ids      INTEGER NOT NULL,
    PRIMARY KEY (broker_id, tenant_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX quota_reports_tenant_idx ON quota_reports (tenant_id, broker_id);
