// Package grafana_test proves the Grafana dashboards in this directory (provisioned by
// docker-compose.yml, infra/compose/grafana):
//
//   - TestDashboardsWellFormed: every *.json is a dashboard (Grafana's JSON model) with a title
//     and a uid unique across the files, panel ids unique within it (rows' nested panels
//     included), and every panel has a grid position, the Prometheus data source of the
//     dashboard's datasource variable, and targets with an expression.
//   - TestQueriesParse: every expression of the dashboards (panels and variables) and of
//     infra/prometheus/*.yml (rules, and the promtool tests' series and expressions) parses with
//     Prometheus's own PromQL parser, and uses no variable the dashboard does not define.
//   - TestDashboardMetricsExported (metrics_test.go): a real cluster (control plane, three
//     brokers, Postgres, an S3 server) after traffic that makes every series the queries read;
//     each metric name, and each label a query names, is one its processes export.
package grafana_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDashboardsWellFormed(t *testing.T) {
	t.Parallel()
	ds := loadDashboards(t)
	require.Len(t, ds, 4, "cluster-overview, tenant, tiering and control-plane")
	uids := map[string]string{}
	for _, d := range ds {
		require.NotEmpty(t, d.Title, "%s: title", d.file)
		require.NotEmpty(t, d.UID, "%s: uid", d.file)
		require.LessOrEqual(t, len(d.UID), 40, "%s: Grafana refuses uids over 40 characters", d.file)
		if other, ok := uids[d.UID]; ok {
			t.Errorf("%s and %s have the same uid %q", other, d.file, d.UID)
		}
		uids[d.UID] = d.file
		require.GreaterOrEqual(t, d.SchemaVersion, 39, "%s: schemaVersion", d.file)

		var hasDS bool
		for _, v := range d.Templating.List {
			if v.Name == "datasource" {
				hasDS = true
				require.Equal(t, "datasource", v.Type, "%s: the datasource variable", d.file)
				q, err := v.varQuery()
				require.NoError(t, err)
				require.Equal(t, "prometheus", q, "%s: the datasource variable lists Prometheus data sources", d.file)
			}
			if v.Type == "query" {
				require.Equal(t, &datasource{Type: "prometheus", UID: "${datasource}"}, v.Datasource, "%s: variable %s's data source", d.file, v.Name)
			}
		}
		require.True(t, hasDS, "%s: a datasource variable", d.file)

		ids := map[int]string{}
		panels := d.allPanels()
		require.NotEmpty(t, panels, "%s: panels", d.file)
		var queries int
		for _, p := range panels {
			require.NotNil(t, p.ID, "%s: panel %q has an id", d.file, p.Title)
			if other, ok := ids[*p.ID]; ok {
				t.Errorf("%s: panels %q and %q have the same id %d", d.file, other, p.Title, *p.ID)
			}
			ids[*p.ID] = p.Title
			require.NotEmpty(t, p.Title, "%s: panel %d has a title", d.file, *p.ID)
			g := p.GridPos
			require.True(t, g != nil && g.H != nil && g.W != nil && g.X != nil && g.Y != nil, "%s: panel %q has a gridPos (h, w, x, y)", d.file, p.Title)
			require.True(t, *g.W > 0 && *g.X >= 0 && *g.X+*g.W <= 24 && *g.H > 0, "%s: panel %q fits the 24-column grid: %+v", d.file, p.Title, *g)
			if p.Type == "row" {
				require.Empty(t, p.Targets, "%s: row %q", d.file, p.Title)
				continue
			}
			require.Empty(t, p.Panels, "%s: only rows nest panels (%q)", d.file, p.Title)
			want := &datasource{Type: "prometheus", UID: "${datasource}"}
			require.Equal(t, want, p.Datasource, "%s: panel %q's data source is the datasource variable", d.file, p.Title)
			require.NotEmpty(t, p.Targets, "%s: panel %q has targets", d.file, p.Title)
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				require.NotEmpty(t, tg.Expr, "%s: panel %q target %s has an expression", d.file, p.Title, tg.RefID)
				require.NotEmpty(t, tg.RefID, "%s: panel %q: a target without refId", d.file, p.Title)
				require.False(t, refs[tg.RefID], "%s: panel %q: refId %s twice", d.file, p.Title, tg.RefID)
				refs[tg.RefID] = true
				if tg.Datasource != nil {
					require.Equal(t, want, tg.Datasource, "%s: panel %q target %s's data source", d.file, p.Title, tg.RefID)
				}
				queries++
			}
		}
		t.Logf("%s (%s, uid %s): %d panels, %d queries", d.file, d.Title, d.UID, len(panels), queries)
	}
}

func TestQueriesParse(t *testing.T) {
	t.Parallel()
	qs := append(dashboardQueries(t, loadDashboards(t)), ruleQueries(t)...)
	names := map[string]bool{}
	for _, q := range qs {
		e, err := parse(q)
		if err != nil {
			t.Errorf("%s: %q: %v", q.where, q.expr, err)
			continue
		}
		u := uses(e)
		if len(u.selectors) == 0 {
			t.Errorf("%s: %q reads no metric", q.where, q.expr)
		}
		for _, s := range u.selectors {
			if s.metric == "" {
				t.Errorf("%s: %q: a selector without a metric name", q.where, q.expr)
			}
			names[s.metric] = true
		}
	}
	require.NotEmpty(t, names)
	t.Logf("%d expressions, %d metric names", len(qs), len(names))
}

// TestQueriesParseRefusesMistakes: the parse and the name extraction the tests rely on refuse a
// broken expression and an unknown variable, and find the metrics of an expression whatever
// functions, keywords, labels, durations and variables surround them.
func TestQueriesParseRefusesMistakes(t *testing.T) {
	t.Parallel()
	vars := []string{"datasource", "broker"}
	for _, bad := range []string{
		`sum(rate(sluice_broker_produced_bytes_total[$__rate_interval])`,  // unbalanced
		`rate(sluice_broker_produced_bytes_total{instance=~"$nope"}[5m])`, // unknown variable
		`rate(sluice_broker_produced_bytes_total[$broker])`,               // a variable outside a string
		`sum by (instance) sluice_broker_leader_partitions`,
		``,
	} {
		_, err := parse(query{expr: bad, vars: vars})
		require.Error(t, err, "%q", bad)
	}
	e, err := parse(query{vars: vars, expr: `histogram_quantile(0.99, sum by (le, acks) (rate(sluice_broker_produce_duration_seconds_bucket{instance=~"$broker", job!="x"}[$__rate_interval])))
		/ on (instance) group_left (tenant) max without (role) (sluice_broker_partition_log_end_offset offset 5m) unless ignoring (le) up > bool 3`})
	require.NoError(t, err)
	u := uses(e)
	var got []string
	for _, s := range u.selectors {
		got = append(got, s.metric)
	}
	require.Equal(t, []string{"sluice_broker_produce_duration_seconds_bucket", "sluice_broker_partition_log_end_offset", "up"}, got)
	require.Equal(t, []string{"instance", "job"}, u.selectors[0].labels)
	var labels []string
	for _, l := range u.labels {
		labels = append(labels, l.label)
	}
	require.Equal(t, []string{"le", "acks", "le", "instance", "instance", "tenant"}, labels)
	// histogram_quantile drops le, so on (le) after it names a label no series has.
	e, err = parse(query{expr: `histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m]))) * on (le) x_count`})
	require.NoError(t, err)
	for _, l := range uses(e).labels {
		if l.what == "on (left side)" {
			require.Empty(t, l.metrics, "le is gone after histogram_quantile")
		}
	}
}
