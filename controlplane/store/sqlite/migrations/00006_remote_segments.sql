-- Remote segments: the metadata of log segments copied to the object store
-- (tiered storage; see the Postgres migration of the same number for the
-- model). copy_finished (0/1) is set when a segment reaches copy_finished and
-- never cleared; epochs is JSON text. Rows go with their partition, that is
-- with their topic; no trigger bumps the metadata version.

-- +goose Up
CREATE TABLE remote_segments (
    segment_id       TEXT    NOT NULL PRIMARY KEY,
    tenant_id        TEXT    NOT NULL,
    topic_id         TEXT    NOT NULL,
    partition        INTEGER NOT NULL,
    base_offset      INTEGER NOT NULL CHECK (base_offset >= 0),
    end_offset       INTEGER NOT NULL,
    leader_epoch     INTEGER NOT NULL,
    size_bytes       INTEGER NOT NULL CHECK (size_bytes > 0),
    max_timestamp_ms INTEGER NOT NULL,
    object_key       TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('copy_started', 'copy_finished', 'delete_started', 'deleted')),
    copy_finished    INTEGER NOT NULL CHECK (copy_finished IN (0, 1)),
    broker_id        INTEGER NOT NULL,
    epochs           TEXT    NOT NULL CHECK (json_valid(epochs) AND json_type(epochs) = 'array'),
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    FOREIGN KEY (topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE,
    CHECK (end_offset >= base_offset),
    CHECK (copy_finished = 1 OR state <> 'copy_finished')
) STRICT;

CREATE INDEX remote_segments_partition_base_offset_idx ON remote_segments (topic_id, partition, base_offset);

-- +goose Down
DROP TABLE remote_segments;
