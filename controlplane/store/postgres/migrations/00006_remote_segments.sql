-- Remote segments: the metadata of log segments copied to the object store
-- (tiered storage; Kafka's KIP-405 remote log metadata).
--
-- copy_finished is set when a segment reaches copy_finished and never
-- cleared: the next copy of a partition must begin at end_offset + 1 of the
-- highest segment ever finished, whatever its state now (a copy abandoned
-- before it finished, copy_started → delete_started, does not count).
-- Writes lock the partition's row (FOR NO KEY UPDATE), which serialises them
-- against each other and against the partition's leader changes.
--
-- Rows go with their partition (ON DELETE CASCADE), that is with their
-- topic. No trigger: remote segments are not cluster metadata and leave the
-- metadata version as is.

-- +goose Up
CREATE TABLE remote_segments (
    segment_id       uuid        NOT NULL,
    tenant_id        uuid        NOT NULL,
    topic_id         uuid        NOT NULL,
    partition        integer     NOT NULL,
    base_offset      bigint      NOT NULL,
    end_offset       bigint      NOT NULL,
    leader_epoch     integer     NOT NULL,
    size_bytes       bigint      NOT NULL,
    max_timestamp_ms bigint      NOT NULL,
    object_key       text        NOT NULL,
    state            text        NOT NULL,
    copy_finished    boolean     NOT NULL,
    broker_id        integer     NOT NULL,
    epochs           jsonb       NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT remote_segments_pkey PRIMARY KEY (segment_id),
    CONSTRAINT remote_segments_partition_fkey FOREIGN KEY (topic_id, partition)
        REFERENCES partitions (topic_id, partition) ON DELETE CASCADE,
    CONSTRAINT remote_segments_offsets_check CHECK (base_offset >= 0 AND end_offset >= base_offset),
    CONSTRAINT remote_segments_size_check CHECK (size_bytes > 0),
    CONSTRAINT remote_segments_state_check
        CHECK (state IN ('copy_started', 'copy_finished', 'delete_started', 'deleted')),
    CONSTRAINT remote_segments_copy_finished_check CHECK (copy_finished OR state <> 'copy_finished'),
    CONSTRAINT remote_segments_epochs_check CHECK (jsonb_typeof(epochs) = 'array')
);

CREATE INDEX remote_segments_partition_base_offset_idx ON remote_segments (topic_id, partition, base_offset);

-- +goose Down
DROP TABLE remote_segments;
