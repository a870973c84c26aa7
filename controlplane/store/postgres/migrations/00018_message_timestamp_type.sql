-- Per-topic timestamp type (message.timestamp.type): 'CreateTime', the
-- producer's, or 'LogAppendTime', the leader's at append.

-- +goose Up
ALTER TABLE topics ADD COLUMN message_timestamp_type TEXT NOT NULL DEFAULT 'CreateTime';

-- +goose Down
ALTER TABLE topics DROP COLUMN message_timestamp_type;
