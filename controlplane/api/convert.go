package api

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit/limitpb"
	"github.com/sluicemq/sluice/tenants"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func decodeOverrides(b []byte) (tenants.Overrides, error) {
	var o tenants.Overrides
	if len(b) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, fmt.Errorf("decode limit overrides: %w", err)
	}
	return o, nil
}

func toTenantPB(t store.Tenant) (*sluicev1.Tenant, error) {
	l, o, err := limitsOf(t)
	if err != nil {
		return nil, err
	}
	return &sluicev1.Tenant{
		Id:         t.ID,
		Name:       t.Name,
		Email:      t.Email,
		Plan:       t.Plan,
		Status:     t.Status,
		CreateTime: ts(t.CreatedAt),
		Limits:     toLimitsPB(l),
		Overrides:  toOverridesPB(o),
	}, nil
}

func toLimitsPB(l tenants.Limits) *sluicev1.Limits { return limitpb.Limits(l) }

func toOverridesPB(o tenants.Overrides) *sluicev1.LimitOverrides { return limitpb.Overrides(o) }

// fromOverridesPB reads the overrides of a request: an unknown limit name,
// or a limit set twice with different values, is INVALID_ARGUMENT.
func fromOverridesPB(p *sluicev1.LimitOverrides) (tenants.Overrides, error) {
	o, err := limitpb.FromOverrides(p)
	if err != nil {
		return nil, invalid("overrides", "%v", err)
	}
	return o, nil
}

func toAPIKeyPB(k store.APIKey) *sluicev1.APIKey {
	return &sluicev1.APIKey{
		Id:         k.ID,
		Name:       k.Name,
		Scopes:     k.Scopes,
		CreateTime: ts(k.CreatedAt),
		RevokeTime: ts(k.RevokedAt),
	}
}

func toTopicPB(t store.Topic) *sluicev1.Topic {
	c := t.Config
	return &sluicev1.Topic{
		Id:                t.ID,
		Name:              t.Name,
		PartitionCount:    t.Partitions,
		ReplicationFactor: t.ReplicationFactor,
		Config:            toTopicConfigPB(c),
		CreateTime:        ts(t.CreatedAt),
		UpdateTime:        ts(t.UpdatedAt),
	}
}

// toTopicConfigPB returns the config with every field set.
func toTopicConfigPB(c store.TopicConfig) *sluicev1.TopicConfig {
	return &sluicev1.TopicConfig{
		RetentionMs:                 &c.RetentionMs,
		RetentionBytes:              &c.RetentionBytes,
		LocalRetentionMs:            &c.LocalRetentionMs,
		LocalRetentionBytes:         &c.LocalRetentionBytes,
		MaxMessageBytes:             &c.MaxMessageBytes,
		MinInsyncReplicas:           &c.MinInsyncReplicas,
		CleanupPolicy:               &c.CleanupPolicy,
		UncleanLeaderElectionEnable: &c.UncleanLeaderElection,
		MessageTimestampType:        &c.MessageTimestampType,
	}
}

func toPartitionsPB(ps []store.Partition) []*sluicev1.PartitionInfo {
	out := make([]*sluicev1.PartitionInfo, len(ps))
	for i, p := range ps {
		out[i] = &sluicev1.PartitionInfo{
			Partition:   p.Partition,
			Leader:      p.Leader,
			LeaderEpoch: p.LeaderEpoch,
			Replicas:    p.Replicas,
			Isr:         p.ISR,
		}
	}
	return out
}

func toBrokerPB(b store.Broker, now time.Time) *sluicev1.Broker {
	return &sluicev1.Broker{
		Id:              b.ID,
		Address:         b.Address,
		ExternalAddress: b.ExternalAddress,
		KafkaAddress:    b.KafkaAddress,
		Rack:            b.Rack,
		Epoch:           b.Epoch,
		LeaseExpireTime: ts(b.LeaseExpiresAt),
		Live:            b.Live(now),
	}
}
