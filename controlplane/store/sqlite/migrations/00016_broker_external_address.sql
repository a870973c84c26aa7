-- A broker's external listener (issue 31): the address clients outside
-- the cluster reach it at, next to the internal one (address); empty for
-- a broker without one.

-- +goose Up
ALTER TABLE brokers ADD COLUMN external_address TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE brokers DROP COLUMN external_address;
