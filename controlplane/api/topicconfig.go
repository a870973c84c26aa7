package api

import (
	"fmt"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

// Topic config defaults, as Kafka's where they exist.
const (
	defaultRetentionMs     = int64(7 * 24 * time.Hour / time.Millisecond)
	defaultMaxMessageBytes = int32(1 << 20)
	defaultMinISR          = int32(2)
	maxPartitionsPerTopic  = 10000
	unlimited              = int64(-1)
	sameAsTotal            = int64(-2)
)

// defaultTopicConfig is the config of a new topic before the request's
// fields apply: retention 7 days (or the plan's maximum if lower), no size
// limit, local retention as total, 1 MiB messages (or the plan's maximum),
// min ISR 2 (or RF if lower).
func defaultTopicConfig(limits tenants.Limits, rf int32) store.TopicConfig {
	c := store.TopicConfig{
		RetentionMs:          defaultRetentionMs,
		RetentionBytes:       unlimited,
		LocalRetentionMs:     sameAsTotal,
		LocalRetentionBytes:  sameAsTotal,
		MaxMessageBytes:      defaultMaxMessageBytes,
		MinInsyncReplicas:    min(defaultMinISR, rf),
		CleanupPolicy:        "delete",
		MessageTimestampType: store.CreateTime,
	}
	if limits[limit.MaxRetentionMs] > 0 && c.RetentionMs > limits[limit.MaxRetentionMs] {
		c.RetentionMs = limits[limit.MaxRetentionMs]
	}
	if m := limits[limit.MaxMessageBytes]; m > 0 && int64(c.MaxMessageBytes) > m {
		c.MaxMessageBytes = int32(m) // at most limit.MaxMessageBytesCeiling
	}
	return c
}

// applyTopicConfig overlays the set fields of req on c and validates the
// result against the replication factor and the tenant's limits.
func applyTopicConfig(c store.TopicConfig, req *sluicev1.TopicConfig, limits tenants.Limits, rf int32, plan string) (store.TopicConfig, error) {
	if req != nil {
		if req.RetentionMs != nil {
			c.RetentionMs = req.GetRetentionMs()
		}
		if req.RetentionBytes != nil {
			c.RetentionBytes = req.GetRetentionBytes()
		}
		if req.LocalRetentionMs != nil {
			c.LocalRetentionMs = req.GetLocalRetentionMs()
		}
		if req.LocalRetentionBytes != nil {
			c.LocalRetentionBytes = req.GetLocalRetentionBytes()
		}
		if req.MaxMessageBytes != nil {
			c.MaxMessageBytes = req.GetMaxMessageBytes()
		}
		if req.MinInsyncReplicas != nil {
			c.MinInsyncReplicas = req.GetMinInsyncReplicas()
		}
		if req.CleanupPolicy != nil {
			c.CleanupPolicy = req.GetCleanupPolicy()
		}
		if req.UncleanLeaderElectionEnable != nil {
			c.UncleanLeaderElection = req.GetUncleanLeaderElectionEnable()
		}
		if req.MessageTimestampType != nil {
			c.MessageTimestampType = req.GetMessageTimestampType()
		}
	}
	return c, validateTopicConfig(c, limits, rf, plan)
}

func validateTopicConfig(c store.TopicConfig, limits tenants.Limits, rf int32, plan string) error {
	switch {
	case c.RetentionMs == 0 || c.RetentionMs < -1:
		return invalid("config.retention_ms", "must be positive, or -1 for no time limit; got %d", c.RetentionMs)
	case limits[limit.MaxRetentionMs] > 0 && c.RetentionMs == -1:
		return invalid("config.retention_ms", "-1 (unlimited) exceeds the %s plan's maximum retention of %s", plan, fmtMs(limits[limit.MaxRetentionMs]))
	case limits[limit.MaxRetentionMs] > 0 && c.RetentionMs > limits[limit.MaxRetentionMs]:
		return invalid("config.retention_ms", "%d (%s) exceeds the %s plan's maximum retention of %s", c.RetentionMs, fmtMs(c.RetentionMs), plan, fmtMs(limits[limit.MaxRetentionMs]))
	case c.RetentionBytes == 0 || c.RetentionBytes < -1:
		return invalid("config.retention_bytes", "must be positive, or -1 for no size limit; got %d", c.RetentionBytes)
	case limits[limit.MaxStorageBytes] > 0 && c.RetentionBytes > limits[limit.MaxStorageBytes]:
		return invalid("config.retention_bytes", "%d exceeds the %s plan's storage of %d bytes", c.RetentionBytes, plan, limits[limit.MaxStorageBytes])
	case c.LocalRetentionMs == 0 || c.LocalRetentionMs < -2:
		return invalid("config.local_retention_ms", "must be positive, or -2 for the same as retention_ms; got %d", c.LocalRetentionMs)
	case c.LocalRetentionMs > 0 && c.RetentionMs > 0 && c.LocalRetentionMs > c.RetentionMs:
		return invalid("config.local_retention_ms", "%d must not exceed retention_ms %d", c.LocalRetentionMs, c.RetentionMs)
	case c.LocalRetentionBytes == 0 || c.LocalRetentionBytes < -2:
		return invalid("config.local_retention_bytes", "must be positive, or -2 for the same as retention_bytes; got %d", c.LocalRetentionBytes)
	case c.LocalRetentionBytes > 0 && c.RetentionBytes > 0 && c.LocalRetentionBytes > c.RetentionBytes:
		return invalid("config.local_retention_bytes", "%d must not exceed retention_bytes %d", c.LocalRetentionBytes, c.RetentionBytes)
	case c.MaxMessageBytes < 1:
		return invalid("config.max_message_bytes", "must be at least 1; got %d", c.MaxMessageBytes)
	case limits[limit.MaxMessageBytes] > 0 && int64(c.MaxMessageBytes) > limits[limit.MaxMessageBytes]:
		return invalid("config.max_message_bytes", "%d exceeds the %s plan's maximum of %d", c.MaxMessageBytes, plan, limits[limit.MaxMessageBytes])
	case c.MinInsyncReplicas < 1 || c.MinInsyncReplicas > rf:
		return invalid("config.min_insync_replicas", "must be between 1 and the replication factor %d; got %d", rf, c.MinInsyncReplicas)
	case c.CleanupPolicy != "delete":
		return invalid("config.cleanup_policy", "%q is not supported; use \"delete\"", c.CleanupPolicy)
	case c.MessageTimestampType != store.CreateTime && c.MessageTimestampType != store.LogAppendTime:
		return invalid("config.message_timestamp_type", "%q: choose %q or %q", c.MessageTimestampType, store.CreateTime, store.LogAppendTime)
	}
	return nil
}

// fmtMs renders milliseconds as a short duration ("7d", "36h", "90s").
func fmtMs(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	default:
		return d.String()
	}
}
