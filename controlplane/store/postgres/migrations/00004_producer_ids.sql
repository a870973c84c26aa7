-- Producer-id blocks for idempotent producers (Kafka's KIP-730).
--
-- producer_id_counter holds exactly one row (id = 1): the first producer id
-- not yet handed out. AllocateProducerIDs moves it forward under the row
-- lock, so blocks never overlap and an id is never reused.
-- producer_id_blocks records who got which block, for audit.

-- +goose Up
CREATE TABLE producer_id_counter (
    id      integer NOT NULL,
    next_id bigint  NOT NULL,
    CONSTRAINT producer_id_counter_pkey PRIMARY KEY (id),
    CONSTRAINT producer_id_counter_single_row CHECK (id = 1),
    CONSTRAINT producer_id_counter_next_id_check CHECK (next_id >= 0)
);

INSERT INTO producer_id_counter (id, next_id) VALUES (1, 0);

CREATE TABLE producer_id_blocks (
    first_id     bigint      NOT NULL,
    count        integer     NOT NULL,
    broker_id    integer     NOT NULL,
    broker_epoch bigint      NOT NULL,
    allocated_at timestamptz NOT NULL,
    CONSTRAINT producer_id_blocks_pkey PRIMARY KEY (first_id),
    CONSTRAINT producer_id_blocks_count_check CHECK (count > 0)
);

-- +goose Down
DROP TABLE producer_id_blocks;
DROP TABLE producer_id_counter;
