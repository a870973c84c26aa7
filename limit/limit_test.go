package limit

import (
	"encoding/json"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every row is complete and named once in snake_case; every dimension has
// exactly one Rate limit (init panics otherwise), named after it.
func TestLimitTable(t *testing.T) {
	t.Parallel()
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	for _, l := range All() {
		d := l.Def()
		require.Regexp(t, snake, d.Name, l)
		require.Equal(t, l.String(), d.Name)
		got, ok := ByName(d.Name)
		require.True(t, ok, d.Name)
		require.Equal(t, l, got)
		require.NotEmpty(t, d.Label, d.Name)
		require.LessOrEqual(t, len(d.Label), 19, "%s: tenant get's labels stay within 19 characters", d.Name)
		require.NotEmpty(t, d.Help, d.Name)
		require.NotEmpty(t, d.Charge, d.Name)
		if d.Unit == Number {
			require.NotEmpty(t, d.Noun, d.Name)
		}
		require.Contains(t, []int64{0, 1}, d.Min, d.Name)
		require.Equal(t, d.Kind == Count, d.Min == 0, "%s: only counts may be 0", d.Name)
		for _, plan := range Plans() {
			v, ok := d.Default(plan)
			require.True(t, ok)
			require.GreaterOrEqual(t, v, d.Min, "%s on %s", d.Name, plan)
			require.LessOrEqual(t, v, d.max(), "%s on %s", d.Name, plan)
		}
		if d.Kind == Rate {
			require.Equal(t, l, d.Dimension.Limit())
			require.True(t, strings.HasPrefix(d.Name, d.Dimension.String()+"_per_"), "%s is %s per something", d.Name, d.Dimension)
		}
	}
	for d := range Dimensions {
		require.Regexp(t, snake, d.String())
		got, ok := DimensionByName(d.String())
		require.True(t, ok)
		require.Equal(t, d, got)
		require.Equal(t, Rate, d.Limit().Def().Kind)
		require.Positive(t, d.Burst())
	}
	require.Equal(t, 10*time.Minute, ProducerIDs.Burst())
	require.Equal(t, DefaultBurst, ProduceBytes.Burst())
	_, ok := ByName("maxTopics")
	require.False(t, ok)
	require.Equal(t, "limit(99)", Limit(99).String())
	require.Equal(t, "unknown", Dimension(-1).String())
}

func TestLimitPlanValues(t *testing.T) {
	t.Parallel()
	free, err := PlanValues(PlanFree)
	require.NoError(t, err)
	require.Equal(t, int64(10), free[MaxTopics])
	require.Equal(t, int64(1000), free[ProducerIDsPerHour])
	_, err = PlanValues("gold")
	require.ErrorIs(t, err, ErrUnknownPlan)
	require.ErrorContains(t, err, `"gold" (known: free, pro)`)

	r := free.Rates()
	require.Equal(t, float64(5<<20), r[ProduceBytes])
	require.Equal(t, 500.0, r[Requests])
	require.InDelta(t, 1000.0/3600, r[ProducerIDs], 1e-12)
	def := ProducerIDsPerHour.Def()
	require.InDelta(t, 1000.0, def.FromPerSecond(def.PerSecond(1000)), 1e-9)
	require.Equal(t, "hour", def.PerName())
	require.Equal(t, "s", RequestsPerSec.Def().PerName())
}

func TestLimitValuesJSON(t *testing.T) {
	t.Parallel()
	free, err := PlanValues(PlanFree)
	require.NoError(t, err)
	b, err := json.Marshal(free)
	require.NoError(t, err)
	require.Contains(t, string(b), `"max_topics":10,`)
	require.Contains(t, string(b), `"producer_ids_per_hour":1000,`)
	var back Values
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, free, back)
	require.NoError(t, json.Unmarshal([]byte(`{"max_groups":3,"a_limit_from_the_future":1}`), &back))
	require.Equal(t, Values{MaxGroups: 3}, back)
}

func TestLimitOverrides(t *testing.T) {
	t.Parallel()
	free, err := PlanValues(PlanFree)
	require.NoError(t, err)
	require.Equal(t, free, free.With(nil))
	o := Overrides{MaxTopics: 50, ProduceBytesPerSec: 42 << 20}
	want := free
	want[MaxTopics], want[ProduceBytesPerSec] = 50, 42<<20
	require.Equal(t, want, free.With(o))

	b, err := json.Marshal(o)
	require.NoError(t, err)
	require.Equal(t, `{"max_topics":50,"produce_bytes_per_sec":44040192}`, string(b), "table order, only what is set")
	var back Overrides
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, o, back)
	require.NoError(t, json.Unmarshal([]byte(`{"max_groups":3,"a_limit_from_the_future":1}`), &back))
	require.Equal(t, Overrides{MaxGroups: 3}, back, "unknown names are ignored")
	b, err = json.Marshal(Overrides{})
	require.NoError(t, err)
	require.Equal(t, `{}`, string(b))
}

func TestLimitOverridesValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Overrides{}.Validate())
	require.NoError(t, Overrides{MaxTopics: 0, MaxGroups: 0, RequestsPerSec: 1}.Validate())
	require.NoError(t, Overrides{MaxMessageBytes: MaxMessageBytesCeiling, MaxRetentionMs: math.MaxInt64}.Validate())
	for _, tt := range []struct {
		o    Overrides
		want string
	}{
		{Overrides{MaxTopics: -1}, "max_topics: must be >= 0, got -1"},
		{Overrides{RequestsPerSec: 0}, "requests_per_sec: must be > 0, got 0"},
		{Overrides{MaxMessageBytes: MaxMessageBytesCeiling + 1}, "max_message_bytes: must be <= 67108864"},
		{Overrides{MaxGroups: math.MaxInt32 + 1}, "max_groups: must be <= 2147483647"},
		{Overrides{Limit(99): 1}, "limit(99): not a limit"},
	} {
		err := tt.o.Validate()
		require.ErrorContains(t, err, "invalid overrides")
		require.ErrorContains(t, err, tt.want)
	}
	err := Overrides{MaxTopics: -1, RequestsPerSec: -1}.Validate()
	require.ErrorContains(t, err, "max_topics")
	require.ErrorContains(t, err, "requests_per_sec", "every bad limit is named")
}

// The docs' table of limits names every limit and every dimension, so a
// new one cannot land undocumented.
func TestLimitDocs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/quotas-and-billing.md")
	require.NoError(t, err)
	doc := string(b)
	for _, l := range All() {
		require.True(t, strings.Contains(doc, "`"+l.String()+"`"), "docs/quotas-and-billing.md does not name the limit %s", l)
	}
	for d := range Dimensions {
		require.True(t, strings.Contains(doc, "`"+d.String()+"`"), "docs/quotas-and-billing.md does not name the dimension %s", d)
	}
}
