package api

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
	"github.com/sluicemq/sluice/tenants"
)

func ptr[T any](v T) *T { return &v }

func TestTopicConfigDefaults(t *testing.T) {
	t.Parallel()
	free, err := tenants.PlanLimits(tenants.PlanFree)
	require.NoError(t, err)
	c := defaultTopicConfig(free, 3)
	require.Equal(t, store.TopicConfig{
		RetentionMs: 7 * 24 * 3600 * 1000, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2,
		MaxMessageBytes: 1 << 20, MinInsyncReplicas: 2, CleanupPolicy: "delete", MessageTimestampType: "CreateTime",
	}, c)
	require.NoError(t, validateTopicConfig(c, free, 3, "free"))
	require.Equal(t, int32(1), defaultTopicConfig(free, 1).MinInsyncReplicas, "min ISR never above RF")

	tight := free
	tight[limit.MaxRetentionMs] = 3600_000
	tight[limit.MaxMessageBytes] = 1000
	c = defaultTopicConfig(tight, 3)
	require.Equal(t, int64(3600_000), c.RetentionMs, "defaults shrink to the plan")
	require.Equal(t, int32(1000), c.MaxMessageBytes)
}

func TestTopicConfigApply(t *testing.T) {
	t.Parallel()
	pro, err := tenants.PlanLimits(tenants.PlanPro)
	require.NoError(t, err)
	base := defaultTopicConfig(pro, 3)
	for _, tt := range []struct {
		name  string
		req   *sluicev1.TopicConfig
		field string // "" = valid
	}{
		{"nil keeps defaults", nil, ""},
		{"retention 1d", &sluicev1.TopicConfig{RetentionMs: ptr(int64(86400_000))}, ""},
		{"retention zero", &sluicev1.TopicConfig{RetentionMs: ptr(int64(0))}, "config.retention_ms"},
		{"retention -2", &sluicev1.TopicConfig{RetentionMs: ptr(int64(-2))}, "config.retention_ms"},
		{"retention over plan", &sluicev1.TopicConfig{RetentionMs: ptr(pro[limit.MaxRetentionMs] + 1)}, "config.retention_ms"},
		{"retention.bytes", &sluicev1.TopicConfig{RetentionBytes: ptr(int64(1 << 30))}, ""},
		{"retention.bytes zero", &sluicev1.TopicConfig{RetentionBytes: ptr(int64(0))}, "config.retention_bytes"},
		{"local above total", &sluicev1.TopicConfig{RetentionMs: ptr(int64(1000)), LocalRetentionMs: ptr(int64(2000))}, "config.local_retention_ms"},
		{"local below total", &sluicev1.TopicConfig{RetentionMs: ptr(int64(2000)), LocalRetentionMs: ptr(int64(1000))}, ""},
		{"local bytes above total", &sluicev1.TopicConfig{RetentionBytes: ptr(int64(10)), LocalRetentionBytes: ptr(int64(20))}, "config.local_retention_bytes"},
		{"local bytes -3", &sluicev1.TopicConfig{LocalRetentionBytes: ptr(int64(-3))}, "config.local_retention_bytes"},
		{"max message 0", &sluicev1.TopicConfig{MaxMessageBytes: ptr(int32(0))}, "config.max_message_bytes"},
		{"max message over plan", &sluicev1.TopicConfig{MaxMessageBytes: ptr(int32(pro[limit.MaxMessageBytes]) + 1)}, "config.max_message_bytes"},
		{"min isr 0", &sluicev1.TopicConfig{MinInsyncReplicas: ptr(int32(0))}, "config.min_insync_replicas"},
		{"min isr = rf", &sluicev1.TopicConfig{MinInsyncReplicas: ptr(int32(3))}, ""},
		{"min isr > rf", &sluicev1.TopicConfig{MinInsyncReplicas: ptr(int32(4))}, "config.min_insync_replicas"},
		{"compact", &sluicev1.TopicConfig{CleanupPolicy: ptr("compact")}, "config.cleanup_policy"},
		{"log append time", &sluicev1.TopicConfig{MessageTimestampType: ptr("LogAppendTime")}, ""},
		{"create time", &sluicev1.TopicConfig{MessageTimestampType: ptr("CreateTime")}, ""},
		{"timestamp type lower case", &sluicev1.TopicConfig{MessageTimestampType: ptr("logappendtime")}, "config.message_timestamp_type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := applyTopicConfig(base, tt.req, pro, 3, "pro")
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *fieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.field, fe.Field)
		})
	}
}

func TestFmtMs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "7d", fmtMs(7*24*3600*1000))
	require.Equal(t, "36h", fmtMs(36*3600*1000))
	require.Equal(t, "1.5s", fmtMs(1500))
}
