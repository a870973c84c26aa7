package api

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func TestValidateGetUsage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 6, 40, 0, 0, time.UTC)
	at := func(s string) *timestamppb.Timestamp {
		v, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return timestamppb.New(v)
	}
	hour, day := sluicev1.UsageGranularity_USAGE_GRANULARITY_HOUR, sluicev1.UsageGranularity_USAGE_GRANULARITY_DAY

	// Defaults: the current month so far, by hour, every dimension.
	q, err := validateGetUsage(&sluicev1.GetUsageRequest{}, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), q.start)
	require.Equal(t, now, q.end)
	require.False(t, q.daily)
	require.Len(t, q.dimensions, 6)

	// The start is truncated to the granularity; dimensions sorted, once.
	q, err = validateGetUsage(&sluicev1.GetUsageRequest{StartTime: at("2026-11-03T10:30:00Z"), EndTime: at("2026-11-20T00:00:00Z"), Granularity: day,
		Dimensions: []sluicev1.UsageDimension{6, 1, 6}}, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC), q.start)
	require.True(t, q.daily)
	require.Equal(t, []sluicev1.UsageDimension{1, 6}, q.dimensions)
	q, err = validateGetUsage(&sluicev1.GetUsageRequest{StartTime: at("2026-11-03T10:30:00Z"), EndTime: at("2026-11-03T10:45:00Z"), Granularity: hour}, now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC), q.start)

	for _, tc := range []struct {
		name  string
		m     *sluicev1.GetUsageRequest
		field string
	}{
		{"end before start", &sluicev1.GetUsageRequest{StartTime: at("2026-11-03T10:00:00Z"), EndTime: at("2026-11-03T09:00:00Z")}, "end_time"},
		{"end at start", &sluicev1.GetUsageRequest{StartTime: at("2026-11-03T10:00:00Z"), EndTime: at("2026-11-03T10:00:00Z")}, "end_time"},
		{"32 days by hour", &sluicev1.GetUsageRequest{StartTime: at("2026-10-01T00:00:00Z"), EndTime: at("2026-11-02T00:00:00Z")}, "end_time"},
		{"401 days by day", &sluicev1.GetUsageRequest{StartTime: at("2025-10-01T00:00:00Z"), EndTime: at("2026-11-06T00:00:00Z"), Granularity: day}, "end_time"},
		{"unknown granularity", &sluicev1.GetUsageRequest{Granularity: 7}, "granularity"},
		{"unspecified dimension", &sluicev1.GetUsageRequest{Dimensions: []sluicev1.UsageDimension{0}}, "dimensions[0]"},
		{"unknown dimension", &sluicev1.GetUsageRequest{Dimensions: []sluicev1.UsageDimension{1, 99}}, "dimensions[1]"},
		{"invalid start", &sluicev1.GetUsageRequest{StartTime: &timestamppb.Timestamp{Seconds: math.MaxInt64}}, "start_time"},
	} {
		_, err := validateGetUsage(tc.m, now)
		require.Error(t, err, tc.name)
		var fe *fieldError
		require.ErrorAs(t, err, &fe, tc.name)
		require.Equal(t, tc.field, fe.Field, tc.name)
	}
	// 31 days by hour and 400 by day are fine.
	_, err = validateGetUsage(&sluicev1.GetUsageRequest{StartTime: at("2026-10-01T00:00:00Z"), EndTime: at("2026-11-01T00:00:00Z")}, now)
	require.NoError(t, err)
	_, err = validateGetUsage(&sluicev1.GetUsageRequest{StartTime: at("2025-10-01T00:00:00Z"), EndTime: at("2026-11-05T00:00:00Z"), Granularity: day}, now)
	require.NoError(t, err)
}

func TestUsageResponseBuckets(t *testing.T) {
	t.Parallel()
	h := func(day, hour int) time.Time { return time.Date(2026, 11, day, hour, 0, 0, 0, time.UTC) }
	rows := []store.UsageRow{
		{Hour: h(1, 0), Dimension: store.UsageIngressBytes, Amount: 10},
		{Hour: h(1, 0), Dimension: store.UsageRequests, Amount: 3},
		{Hour: h(1, 5), Dimension: store.UsageIngressBytes, Amount: 20},
		{Hour: h(1, 5), Dimension: store.UsageEgressBytes, Amount: 0}, // no usage: left out
		{Hour: h(2, 23), Dimension: store.UsageIngressBytes, Amount: math.MaxInt64},
		{Hour: h(2, 23), Dimension: store.UsageRequests, Amount: 1},
		{Hour: h(3, 0), Dimension: store.UsageIngressBytes, Amount: 5},
	}
	all := []sluicev1.UsageDimension{1, 2, 3, 4, 5, 6}
	hourly := usageResponse(usageQuery{start: h(1, 0), end: h(3, 0), dimensions: all}, rows)
	type b struct {
		start time.Time
		dim   sluicev1.UsageDimension
		n     int64
	}
	got := func(res *sluicev1.GetUsageResponse) []b {
		var out []b
		for _, x := range res.GetBuckets() {
			out = append(out, b{x.GetStartTime().AsTime(), x.GetDimension(), x.GetAmount()})
		}
		return out
	}
	require.Equal(t, []b{{h(1, 0), 1, 10}, {h(1, 0), 3, 3}, {h(1, 5), 1, 20}, {h(2, 23), 1, math.MaxInt64}, {h(2, 23), 3, 1}}, got(hourly))
	require.Len(t, hourly.GetTotals(), 6)
	require.Equal(t, int64(math.MaxInt64), hourly.GetTotals()[0].GetAmount(), "saturates")
	require.Equal(t, int64(0), hourly.GetTotals()[1].GetAmount(), "zero totals are listed")
	require.Equal(t, int64(4), hourly.GetTotals()[2].GetAmount())

	daily := usageResponse(usageQuery{start: h(1, 0), end: h(4, 0), daily: true, dimensions: []sluicev1.UsageDimension{1}}, rows)
	require.Equal(t, []b{{h(1, 0), 1, 30}, {h(2, 0), 1, math.MaxInt64}, {h(3, 0), 1, 5}}, got(daily))
	require.Len(t, daily.GetTotals(), 1)
	require.Equal(t, sluicev1.UsageDimension(1), daily.GetTotals()[0].GetDimension())
}
