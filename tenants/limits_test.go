package tenants

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
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
		MaxTopics:          10,
		MaxPartitions:      30,
		MaxRetentionMs:     7 * 24 * 3600 * 1000,
		MaxStorageBytes:    10 << 30,
		MaxMessageBytes:    1 << 20,
		ProduceBytesPerSec: 5 << 20,
		FetchBytesPerSec:   10 << 20,
		RequestsPerSec:     500,

		MaxTotalStorageBytes: 50 << 30,
		ProducerIDsPerHour:   1000,
		MaxTransactionalIDs:  100,
		MaxGroups:            100,

		MaxPartitionsPerTransaction: 100,
		MaxGroupsPerTransaction:     10,
	}, free)
	pro, err := PlanLimits(PlanPro)
	require.NoError(t, err)
	require.Equal(t, Limits{
		MaxTopics:          1000,
		MaxPartitions:      3000,
		MaxRetentionMs:     90 * 24 * 3600 * 1000,
		MaxStorageBytes:    10 << 40,
		MaxMessageBytes:    8 << 20,
		ProduceBytesPerSec: 100 << 20,
		FetchBytesPerSec:   200 << 20,
		RequestsPerSec:     20000,

		MaxTotalStorageBytes: 100 << 40,
		ProducerIDsPerHour:   100000,
		MaxTransactionalIDs:  10000,
		MaxGroups:            10000,

		MaxPartitionsPerTransaction: 3000,
		MaxGroupsPerTransaction:     100,
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

	o := Overrides{MaxTopics: ptr[int32](50), ProduceBytesPerSec: ptr[int64](42 << 20), MaxGroupsPerTransaction: ptr[int32](3)}
	got := free.With(o)
	want := free
	want.MaxTopics = 50
	want.ProduceBytesPerSec = 42 << 20
	want.MaxGroupsPerTransaction = 3
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
	_, err = ResolveLimits(PlanFree, Overrides{RequestsPerSec: ptr[int32](0)})
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
		{name: "zero topics freezes creation", o: Overrides{MaxTopics: ptr[int32](0), MaxPartitions: ptr[int32](0)}},
		{name: "all positive", o: Overrides{
			MaxTopics: ptr[int32](1), MaxPartitions: ptr[int32](1), MaxRetentionMs: ptr[int64](1),
			MaxStorageBytes: ptr[int64](1), MaxMessageBytes: ptr[int32](1), ProduceBytesPerSec: ptr[int64](1),
			FetchBytesPerSec: ptr[int64](1), RequestsPerSec: ptr[int32](1),
		}},
		{name: "negative topics", o: Overrides{MaxTopics: ptr[int32](-1)}, wantErr: "max_topics"},
		{name: "negative partitions", o: Overrides{MaxPartitions: ptr[int32](-5)}, wantErr: "max_partitions"},
		{name: "zero retention", o: Overrides{MaxRetentionMs: ptr[int64](0)}, wantErr: "max_retention_ms"},
		{name: "negative storage", o: Overrides{MaxStorageBytes: ptr[int64](-1)}, wantErr: "max_storage_bytes"},
		{name: "zero message size", o: Overrides{MaxMessageBytes: ptr[int32](0)}, wantErr: "max_message_bytes"},
		{name: "huge message size", o: Overrides{MaxMessageBytes: ptr[int32](MaxMessageBytesCeiling + 1)}, wantErr: "max_message_bytes: must be <="},
		{name: "zero produce rate", o: Overrides{ProduceBytesPerSec: ptr[int64](0)}, wantErr: "produce_bytes_per_sec"},
		{name: "negative fetch rate", o: Overrides{FetchBytesPerSec: ptr[int64](-1)}, wantErr: "fetch_bytes_per_sec"},
		{name: "zero request rate", o: Overrides{RequestsPerSec: ptr[int32](0)}, wantErr: "requests_per_sec"},
		{name: "zero partitions per transaction", o: Overrides{MaxPartitionsPerTransaction: ptr[int32](0)}, wantErr: "max_partitions_per_transaction"},
		{name: "negative groups per transaction", o: Overrides{MaxGroupsPerTransaction: ptr[int32](-1)}, wantErr: "max_groups_per_transaction"},
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
	err := Overrides{MaxTopics: ptr[int32](-1), RequestsPerSec: ptr[int32](-1)}.Validate()
	require.ErrorContains(t, err, "max_topics")
	require.ErrorContains(t, err, "requests_per_sec")
}

func TestLimitsCheckCounts(t *testing.T) {
	t.Parallel()
	free, err := PlanLimits(PlanFree)
	require.NoError(t, err)
	require.NoError(t, free.CheckTopics(9, 1))
	err = free.CheckTopics(10, 1)
	require.ErrorIs(t, err, ErrLimitExceeded)
	var le *LimitError
	require.True(t, errors.As(err, &le))
	require.Equal(t, LimitError{Limit: "max_topics", Current: 11, Max: 10}, *le)
	require.NoError(t, free.CheckPartitions(24, 6))
	require.ErrorIs(t, free.CheckPartitions(24, 7), ErrLimitExceeded)
}
