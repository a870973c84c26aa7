package api

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/tenants"
)

// EnsureOffsetsTopic creates the internal offsets topic (store.OffsetsTopic,
// owned by store.SystemTenantID) once enough brokers are live for its
// replication factor. It reports whether the topic exists now. Several
// control-plane replicas may race: the store lets one create it.
//
// Its records never expire (retention.ms -1): committed offsets must
// outlive any data retention. The log grows with every commit until
// compaction exists.
func (a *API) EnsureOffsetsTopic(ctx context.Context) (bool, error) {
	if _, err := a.store.GetTopic(ctx, store.SystemTenantID, store.OffsetsTopic); err == nil {
		return true, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	n, rf := a.cfg.OffsetsTopicPartitions, a.cfg.OffsetsTopicReplicationFactor
	cfg := defaultTopicConfig(tenants.Limits{}, rf)
	cfg.RetentionMs = unlimited
	topic, _, err := a.placeAndCreate(ctx, store.SystemTenantID, store.OffsetsTopic, n, rf, cfg, store.CountLimits{})
	switch {
	case errors.Is(err, store.ErrAlreadyExists):
		return true, nil
	case err != nil:
		return false, err
	}
	a.logger.InfoContext(ctx, "created the internal offsets topic", "id", topic.ID, "partitions", n, "rf", rf)
	return true, nil
}
