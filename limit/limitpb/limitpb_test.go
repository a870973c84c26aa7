package limitpb

import (
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/limit"
)

func TestLimitpbLimits(t *testing.T) {
	t.Parallel()
	free, err := limit.PlanValues(limit.PlanFree)
	require.NoError(t, err)
	p := Limits(free)
	require.Equal(t, int32(10), p.GetMaxTopics(), "the typed field, for older clients")
	require.Equal(t, int64(5<<20), p.GetValues()["produce_bytes_per_sec"])
	require.Len(t, p.GetValues(), int(limit.Limits))
	require.Equal(t, free, FromLimits(p))
	// A control plane from before the map: typed fields only.
	require.Equal(t, free, FromLimits(&sluicev1.Limits{MaxTopics: 10, MaxPartitions: 30, MaxRetentionMs: free[limit.MaxRetentionMs],
		MaxStorageBytes: free[limit.MaxStorageBytes], MaxMessageBytes: 1 << 20, ProduceBytesPerSec: 5 << 20, FetchBytesPerSec: 10 << 20,
		RequestsPerSec: 500, MaxTotalStorageBytes: free[limit.MaxTotalStorageBytes], ProducerIdsPerHour: 1000, MaxTransactionalIds: 100,
		MaxGroups: 100, MaxPartitionsPerTransaction: 100, MaxGroupsPerTransaction: 10}))
	require.Equal(t, limit.Values{}, FromLimits(nil))
	// The map wins over a typed field.
	require.Equal(t, int64(7), FromLimits(&sluicev1.Limits{MaxGroups: 3, Values: map[string]int64{"max_groups": 7}})[limit.MaxGroups])
}

func TestLimitpbOverrides(t *testing.T) {
	t.Parallel()
	o := limit.Overrides{limit.MaxGroups: 5, limit.ProduceBytesPerSec: 1 << 20}
	p := Overrides(o)
	require.Equal(t, int32(5), p.GetMaxGroups())
	require.Equal(t, map[string]int64{"max_groups": 5, "produce_bytes_per_sec": 1 << 20}, p.GetValues())
	back, err := FromOverrides(p)
	require.NoError(t, err)
	require.Equal(t, o, back)

	five, six := int32(5), int32(6)
	back, err = FromOverrides(&sluicev1.LimitOverrides{MaxGroups: &five, Values: map[string]int64{"max_topics": 2}})
	require.NoError(t, err)
	require.Equal(t, limit.Overrides{limit.MaxGroups: 5, limit.MaxTopics: 2}, back, "typed and map together")
	_, err = FromOverrides(&sluicev1.LimitOverrides{MaxGroups: &six, Values: map[string]int64{"max_groups": 5}})
	require.ErrorContains(t, err, "max_groups: 6 here and 5 in values")
	_, err = FromOverrides(&sluicev1.LimitOverrides{Values: map[string]int64{"maxGroups": 5}})
	require.ErrorContains(t, err, `values["maxGroups"]: not a limit`)

	req := &sluicev1.LimitOverrides{Values: map[string]int64{"a_newer_limit": 1}}
	SetOverride(req, limit.MaxGroups, 9)
	require.Equal(t, int32(9), req.GetMaxGroups())
	require.NotContains(t, req.GetValues(), "max_groups", "typed only, which an older control plane reads")
	require.Contains(t, req.GetValues(), "a_newer_limit", "left as it was")
	req.Values["max_groups"] = 9
	SetOverride(req, limit.MaxGroups, 10)
	require.Equal(t, int64(10), req.GetValues()["max_groups"], "both kept in agreement")
	ClearOverride(req, limit.MaxGroups)
	require.Nil(t, req.MaxGroups)
	require.NotContains(t, req.GetValues(), "max_groups")
}

func TestLimitpbRates(t *testing.T) {
	t.Parallel()
	var r [limit.Dimensions]float64
	r[limit.ProduceBytes], r[limit.ProducerIDs] = 100, 0.5
	p := Rates(r)
	require.Equal(t, 100.0, p.GetProduceBytesPerSec())
	require.Equal(t, 0.5, p.GetProducerIdsPerSec())
	require.Equal(t, 0.5, p.GetValues()["producer_ids"])
	require.Equal(t, r, FromRates(p))
	require.Equal(t, r, FromRates(&sluicev1.QuotaRates{ProduceBytesPerSec: 100, ProducerIdsPerSec: 0.5}), "a broker from before the map")
	names := RateNames(&sluicev1.QuotaRates{ProduceBytesPerSec: 1, Values: map[string]float64{"requests": 2}})
	require.Contains(t, names, Named{"produce_bytes_per_sec", 1})
	require.Contains(t, names, Named{`values["requests"]`, 2})
}

func TestLimitpbUsage(t *testing.T) {
	t.Parallel()
	u := FromUsage(&sluicev1.Usage{Topics: 3, StorageBytes: 10, ProducerIdsPerHour: 2.5, Values: map[string]float64{"max_groups": 4}})
	require.Equal(t, 3.0, u[limit.MaxTopics])
	require.Equal(t, 10.0, u[limit.MaxTotalStorageBytes])
	require.Equal(t, 2.5, u[limit.ProducerIDsPerHour])
	require.Equal(t, 4.0, u[limit.MaxGroups])
	require.NotContains(t, u, limit.MaxRetentionMs, "no usage")
}
