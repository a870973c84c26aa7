-- Per-topic opt-in to unclean leader election (unclean.leader.election.enable).

-- +goose Up
ALTER TABLE topics ADD COLUMN unclean_leader_election INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE topics DROP COLUMN unclean_leader_election;
