package tenants

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/limit"
)

func TestScopesValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		scopes  []string
		wantErr string // substring; "" means valid
	}{
		{name: "all", scopes: AllScopes()},
		{name: "one", scopes: []string{ScopeConsume}},
		{name: "nil", scopes: nil, wantErr: "at least one scope"},
		{name: "empty list", scopes: []string{}, wantErr: "at least one scope"},
		{name: "empty entry", scopes: []string{ScopeAdmin, ""}, wantErr: "empty scope"},
		{name: "unknown", scopes: []string{ScopeProduce, "superuser"}, wantErr: `unknown scope "superuser"`},
		{name: "case matters", scopes: []string{"Admin"}, wantErr: `unknown scope "Admin"`},
		{name: "duplicate", scopes: []string{ScopeProduce, ScopeConsume, ScopeProduce}, wantErr: `duplicate scope "produce"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ValidateScopes(tt.scopes)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidScopes)
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestScopesPrincipal(t *testing.T) {
	t.Parallel()
	p := Principal{Kind: PrincipalTenant, TenantID: "t1", Scopes: []string{ScopeProduce}}
	require.True(t, p.Has(ScopeProduce))
	require.False(t, p.Has(ScopeAdmin))
	require.NoError(t, p.Require(ScopeProduce))
	err := p.Require(ScopeAdmin)
	require.ErrorIs(t, err, ErrPermissionDenied)
	require.ErrorContains(t, err, `"admin"`)

	anon := Principal{Scopes: []string{ScopeAdmin}} // zero Kind is anonymous
	require.False(t, anon.Has(ScopeAdmin))

	ctx := WithPrincipal(t.Context(), p)
	got, ok := PrincipalFrom(ctx)
	require.True(t, ok)
	require.Equal(t, p, got)
	_, ok = PrincipalFrom(t.Context())
	require.False(t, ok)
}

func TestLimitsPlans(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{PlanFree, PlanPro}, Plans())
	free, err := PlanLimits(PlanFree)
	require.NoError(t, err)
	require.Equal(t, Limits{
		limit.MaxTopics:          10,
		limit.MaxPartitions:      30,
		limit.MaxRetentionMs:     7 * 24 * 3600 * 1000,
		limit.MaxStorageBytes:    10 << 30,
		limit.MaxMessageBytes:    1 << 20,
		limit.ProduceBytesPerSec: 5 << 20,
		limit.FetchBytesPerSec:   10 << 20,
		limit.RequestsPerSec:     500,

		limit.MaxTotalStorageBytes: 50 << 30,
		limit.ProducerIDsPerHour:   1000,
		limit.MaxTransactionalIDs:  100,
		limit.MaxGroups:            100,

		limit.MaxPartitionsPerTransaction: 100,
		limit.MaxGroupsPerTransaction:     10,
	}, free)
	pro, err := PlanLimits(PlanPro)
	require.NoError(t, err)
	require.Equal(t, Limits{
		limit.MaxTopics:          1000,
		limit.MaxPartitions:      3000,
		limit.MaxRetentionMs:     90 * 24 * 3600 * 1000,
		limit.MaxStorageBytes:    10 << 40,
		limit.MaxMessageBytes:    8 << 20,
		limit.ProduceBytesPerSec: 100 << 20,
		limit.FetchBytesPerSec:   200 << 20,
		limit.RequestsPerSec:     20000,

		limit.MaxTotalStorageBytes: 100 << 40,
		limit.ProducerIDsPerHour:   100000,
		limit.MaxTransactionalIDs:  10000,
		limit.MaxGroups:            10000,

		limit.MaxPartitionsPerTransaction: 3000,
		limit.MaxGroupsPerTransaction:     100,
	}, pro)
	for _, plan := range Plans() {
		_, err := PlanLimits(plan)
		require.NoError(t, err, plan)
	}
	_, err = PlanLimits("enterprise")
	require.ErrorIs(t, err, ErrUnknownPlan)
	require.ErrorContains(t, err, `"enterprise"`)
}

func TestLimitsOverrides(t *testing.T) {
	t.Parallel()
	free, err := PlanLimits(PlanFree)
	require.NoError(t, err)

	require.Equal(t, free, free.With(Overrides{}), "no overrides keep the plan")

	o := Overrides{limit.MaxTopics: 50, limit.ProduceBytesPerSec: 42 << 20, limit.MaxGroupsPerTransaction: 3}
	got := free.With(o)
	want := free
	want[limit.MaxTopics] = 50
	want[limit.ProduceBytesPerSec] = 42 << 20
	want[limit.MaxGroupsPerTransaction] = 3
	require.Equal(t, want, got)

	b, err := json.Marshal(o)
	require.NoError(t, err)
	require.JSONEq(t, `{"max_topics":50,"produce_bytes_per_sec":44040192,"max_groups_per_transaction":3}`, string(b))
	var back Overrides
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, o, back)

	resolved, err := ResolveLimits(PlanFree, o)
	require.NoError(t, err)
	require.Equal(t, want, resolved)
	_, err = ResolveLimits(PlanFree, Overrides{limit.RequestsPerSec: 0})
	require.ErrorContains(t, err, "requests_per_sec")
	_, err = ResolveLimits("gold", o)
	require.ErrorIs(t, err, ErrUnknownPlan)
}

func TestLimitsOverridesValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		o       Overrides
		wantErr string
	}{
		{name: "empty", o: Overrides{}},
		{name: "zero topics freezes creation", o: Overrides{limit.MaxTopics: 0, limit.MaxPartitions: 0}},
		{name: "all positive", o: Overrides{
			limit.MaxTopics: 1, limit.MaxPartitions: 1, limit.MaxRetentionMs: 1,
			limit.MaxStorageBytes: 1, limit.MaxMessageBytes: 1, limit.ProduceBytesPerSec: 1,
			limit.FetchBytesPerSec: 1, limit.RequestsPerSec: 1,
		}},
		{name: "negative topics", o: Overrides{limit.MaxTopics: -1}, wantErr: "max_topics"},
		{name: "negative partitions", o: Overrides{limit.MaxPartitions: -5}, wantErr: "max_partitions"},
		{name: "zero retention", o: Overrides{limit.MaxRetentionMs: 0}, wantErr: "max_retention_ms"},
		{name: "negative storage", o: Overrides{limit.MaxStorageBytes: -1}, wantErr: "max_storage_bytes"},
		{name: "zero message size", o: Overrides{limit.MaxMessageBytes: 0}, wantErr: "max_message_bytes"},
		{name: "huge message size", o: Overrides{limit.MaxMessageBytes: MaxMessageBytesCeiling + 1}, wantErr: "max_message_bytes: must be <="},
		{name: "zero produce rate", o: Overrides{limit.ProduceBytesPerSec: 0}, wantErr: "produce_bytes_per_sec"},
		{name: "negative fetch rate", o: Overrides{limit.FetchBytesPerSec: -1}, wantErr: "fetch_bytes_per_sec"},
		{name: "zero request rate", o: Overrides{limit.RequestsPerSec: 0}, wantErr: "requests_per_sec"},
		{name: "zero partitions per transaction", o: Overrides{limit.MaxPartitionsPerTransaction: 0}, wantErr: "max_partitions_per_transaction"},
		{name: "negative groups per transaction", o: Overrides{limit.MaxGroupsPerTransaction: -1}, wantErr: "max_groups_per_transaction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.o.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
	// Every bad field is named, not only the first.
	err := Overrides{limit.MaxTopics: -1, limit.RequestsPerSec: -1}.Validate()
	require.ErrorContains(t, err, "max_topics")
	require.ErrorContains(t, err, "requests_per_sec")
}

func TestLimitsCheckCounts(t *testing.T) {
	t.Parallel()
	free, err := PlanLimits(PlanFree)
	require.NoError(t, err)
	require.NoError(t, CheckCount(free, limit.MaxTopics, 9, 1))
	err = CheckCount(free, limit.MaxTopics, 10, 1)
	require.ErrorIs(t, err, ErrLimitExceeded)
	var le *LimitError
	require.True(t, errors.As(err, &le))
	require.Equal(t, LimitError{Limit: "max_topics", Current: 11, Max: 10}, *le)
	require.NoError(t, CheckCount(free, limit.MaxPartitions, 24, 6))
	require.ErrorIs(t, CheckCount(free, limit.MaxPartitions, 24, 7), ErrLimitExceeded)
}
