-- Count reservations (issue 29; controlplane/store/reservation.go): the
-- names of new groups and transactional ids a broker's coordinator reserved
-- (ReserveObjects) and has not yet confirmed in a quota report, so that a
-- tenant's count is its reported holdings plus these. One row per (tenant,
-- kind, name): the broker and token of its latest grant, and when it
-- expires unconfirmed. Text ids and bigint unix milliseconds, as
-- quota_reports.

-- +goose Up
CREATE TABLE object_reservations (
    tenant_id  text    NOT NULL,
    kind       text    NOT NULL,
    name       text    NOT NULL,
    broker_id  integer NOT NULL,
    token      bigint  NOT NULL,
    expires_ms bigint  NOT NULL,
    CONSTRAINT object_reservations_pkey PRIMARY KEY (tenant_id, kind, name),
    CONSTRAINT object_reservations_kind_check CHECK (kind IN ('group', 'transactional_id'))
);
CREATE INDEX object_reservations_broker_idx ON object_reservations (broker_id, expires_ms);

-- +goose Down
DROP TABLE object_reservations;
