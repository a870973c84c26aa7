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
    broker_id         integer NOT NULL,
    tenant_id         text    NOT NULL,
    at_ms             bigint  NOT NULL,
    offered           text    NOT NULL,
    admitted          text    NOT NULL,
    hot_storage_bytes bigint  NOT NULL,
    groups            integer NOT NULL,
    transactional_ids integer NOT NULL,
    CONSTRAINT quota_reports_pkey PRIMARY KEY (broker_id, tenant_id)
);
CREATE INDEX quota_reports_tenant_idx ON quota_reports (tenant_id, broker_id);

-- +goose Down
DROP TABLE quota_reports;
CREATE TABLE quota_reports (
    broker_id                   integer          NOT NULL,
    tenant_id                   text             NOT NULL,
    at_ms                       bigint           NOT NULL,
    offered_produce_bytes       double precision NOT NULL,
    offered_fetch_bytes         double precision NOT NULL,
    offered_requests            double precision NOT NULL,
    offered_producer_ids        double precision NOT NULL,
    admitted_produce_bytes      double precision NOT NULL,
    admitted_fetch_bytes        double precision NOT NULL,
    admitted_requests           double precision NOT NULL,
    admitted_producer_ids       double precision NOT NULL,
    hot_storage_bytes           bigint           NOT NULL,
    groups                      integer          NOT NULL,
    transactional_ids           integer          NOT NULL,
    CONSTRAINT quota_reports_pkey PRIMARY KEY (broker_id, tenant_id)
);
CREATE INDEX quota_reports_tenant_idx ON quota_reports (tenant_id, broker_id);
