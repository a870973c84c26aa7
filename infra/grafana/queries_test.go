package grafana_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// rulesDir holds the Prometheus alerting rules (alerts.yml) and their promtool unit tests
// (*_test.yml), whose metric names are checked like the dashboards'.
const rulesDir = "../prometheus"

// builtinVars are Grafana's own variables that dashboards use in PromQL, with the value they are
// parsed with (Grafana substitutes a duration).
var builtinVars = map[string]string{"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}

// targetLabels are the labels Prometheus adds to every scraped series (the scrape target's).
var targetLabels = []string{"instance", "job"}

// query is one PromQL expression of a dashboard or a rules file.
type query struct {
	where string // file and place, for messages
	expr  string // as written, Grafana variables included
	vars  []string
	// label, for a Grafana label_values(selector, label) variable query, is the label asked for.
	label string
}

// dashboard is the part of Grafana's dashboard JSON model that the tests read.
type dashboard struct {
	file          string
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         *int        `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *gridPos    `json:"gridPos"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"` // a row's (collapsed rows nest their panels)
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type gridPos struct {
	H, W, X, Y *int
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
}

// varQuery is a query variable's PromQL: a string or Grafana's {"query": ...} object.
func (v variable) varQuery() (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	err := json.Unmarshal(v.Query, &o)
	return o.Query, err
}

// allPanels is every panel of d, those nested in rows included.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

func loadDashboards(t *testing.T) []dashboard {
	t.Helper()
	files, err := filepath.Glob("*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no dashboards (*.json) in infra/grafana")
	var out []dashboard
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var d dashboard
		require.NoError(t, json.Unmarshal(b, &d), "%s is not a dashboard's JSON", f)
		d.file = f
		out = append(out, d)
	}
	return out
}

var labelValuesRe = regexp.MustCompile(`^\s*label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// dashboardQueries is every PromQL expression of the dashboards: the panels' targets and the
// query variables (label_values(selector, label) gives the selector).
func dashboardQueries(t *testing.T, ds []dashboard) []query {
	t.Helper()
	var out []query
	for _, d := range ds {
		var vars []string
		for _, v := range d.Templating.List {
			vars = append(vars, v.Name)
		}
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			q, err := v.varQuery()
			require.NoError(t, err, "%s: variable %s", d.file, v.Name)
			qq := query{where: fmt.Sprintf("%s: variable %s", d.file, v.Name), expr: q, vars: vars}
			if m := labelValuesRe.FindStringSubmatch(q); m != nil {
				qq.expr, qq.label = m[1], m[2]
			}
			out = append(out, qq)
		}
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				out = append(out, query{where: fmt.Sprintf("%s: panel %q (%s)", d.file, p.Title, tg.RefID), expr: tg.Expr, vars: vars})
			}
		}
	}
	return out
}

// rulesFile is the part of a Prometheus rules file, or of a promtool unit-test file, that holds
// PromQL or series.
type rulesFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert  string `json:"alert"`
			Record string `json:"record"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
	Tests []struct {
		Name        string `json:"name"`
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		PromQLExprTest []struct {
			Expr string `json:"expr"`
		} `json:"promql_expr_test"`
	} `json:"tests"`
}

// ruleQueries is every expression of the rules in infra/prometheus/*.yml, and every series and
// expression of the promtool tests there (series notation parses as a selector).
func ruleQueries(t *testing.T) []query {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no rules in %s", rulesDir)
	var out []query
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var rf rulesFile
		require.NoError(t, yaml.Unmarshal(b, &rf), f)
		name := filepath.Join("infra/prometheus", filepath.Base(f))
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				out = append(out, query{where: fmt.Sprintf("%s: rule %s%s", name, r.Alert, r.Record), expr: r.Expr})
			}
		}
		for _, tc := range rf.Tests {
			for _, s := range tc.InputSeries {
				out = append(out, query{where: fmt.Sprintf("%s: test %q series", name, tc.Name), expr: s.Series})
			}
			for _, e := range tc.PromQLExprTest {
				out = append(out, query{where: fmt.Sprintf("%s: test %q expr", name, tc.Name), expr: e.Expr})
			}
		}
	}
	return out
}

var varRe = regexp.MustCompile(`\$(?:\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[a-z]+)?\}|([a-zA-Z_][a-zA-Z0-9_]*))`)

// parse substitutes Grafana's interval variables and parses q. Variables of the dashboard are
// left in place: they may only stand in strings (label matchers), which PromQL accepts as they
// are, and anywhere else make the parse fail. A variable that is neither built in nor the
// dashboard's is an error.
func parse(q query) (parser.Expr, error) {
	if strings.TrimSpace(q.expr) == "" {
		return nil, fmt.Errorf("empty expression")
	}
	var unknown []string
	expr := varRe.ReplaceAllStringFunc(q.expr, func(m string) string {
		sm := varRe.FindStringSubmatch(m)
		name := sm[1] + sm[2]
		if d, ok := builtinVars[name]; ok {
			return d
		}
		if !slices.Contains(q.vars, name) {
			unknown = append(unknown, name)
		}
		return m
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("variables %v are not the dashboard's nor Grafana's", unknown)
	}
	return parser.NewParser(parser.Options{}).ParseExpr(expr)
}

// selector is one metric a query reads, with the labels it names for it.
type selector struct {
	metric string
	labels []string // in its matchers, __name__ excluded
}

// use is what a parsed query needs of the metrics: the selectors, and the label names that
// aggregations (by), vector matching (on, ignoring, group_left/right) and the variable's
// label_values read from the series of given metrics (any of them must have it).
type use struct {
	selectors []selector
	labels    []labelUse
}

type labelUse struct {
	label   string
	metrics []string // the metrics whose series the label comes from
	what    string
}

// uses walks e.
func uses(e parser.Expr) use {
	var u use
	outLabels(e, &u)
	return u
}

// labelSet is the labels an expression's result may carry, and the metrics they come from.
type labelSet struct {
	metrics []string
	// keep, when not nil, narrows the result to these labels (by, on); drop removes labels
	// (without, ignoring, histogram_quantile's le).
	keep, drop []string
}

func (s labelSet) narrow(keep []string) labelSet {
	return labelSet{metrics: s.metrics, keep: keep}
}

// outLabels records e's selectors and label uses in u and returns the labels of its result.
func outLabels(e parser.Expr, u *use) labelSet {
	switch n := e.(type) {
	case *parser.VectorSelector:
		name := n.Name
		var ls []string
		for _, m := range n.LabelMatchers {
			if m.Name == "__name__" {
				if name == "" {
					name = m.Value
				}
				continue
			}
			ls = append(ls, m.Name)
		}
		u.selectors = append(u.selectors, selector{metric: name, labels: ls})
		return labelSet{metrics: []string{name}}
	case *parser.MatrixSelector:
		return outLabels(n.VectorSelector, u)
	case *parser.SubqueryExpr:
		return outLabels(n.Expr, u)
	case *parser.ParenExpr:
		return outLabels(n.Expr, u)
	case *parser.StepInvariantExpr:
		return outLabels(n.Expr, u)
	case *parser.UnaryExpr:
		return outLabels(n.Expr, u)
	case *parser.NumberLiteral, *parser.StringLiteral:
		return labelSet{}
	case *parser.Call:
		var in labelSet
		for _, a := range n.Args {
			if s := outLabels(a, u); len(s.metrics) > 0 {
				in.metrics = append(in.metrics, s.metrics...)
				in.keep, in.drop = s.keep, s.drop
			}
		}
		if n.Func.Name == "histogram_quantile" {
			u.labels = append(u.labels, labelUse{"le", in.metrics, "histogram_quantile's buckets"})
			in.drop = append(slices.Clone(in.drop), "le")
		}
		return in
	case *parser.AggregateExpr:
		in := outLabels(n.Expr, u)
		if n.Param != nil {
			outLabels(n.Param, u)
		}
		if n.Without {
			return labelSet{metrics: in.metrics, keep: in.keep, drop: append(slices.Clone(in.drop), n.Grouping...)}
		}
		for _, l := range n.Grouping {
			u.labels = append(u.labels, labelUse{l, visible(in, l), n.Op.String() + " by"})
		}
		switch n.Op {
		case parser.TOPK, parser.BOTTOMK, parser.LIMITK, parser.LIMIT_RATIO:
			return in // they keep their input's labels
		}
		return in.narrow(slices.Clone(n.Grouping))
	case *parser.BinaryExpr:
		l, r := outLabels(n.LHS, u), outLabels(n.RHS, u)
		vm := n.VectorMatching
		if vm == nil || len(l.metrics) == 0 || len(r.metrics) == 0 {
			if len(l.metrics) > 0 {
				return l
			}
			return r
		}
		if vm.On {
			for _, lb := range vm.MatchingLabels {
				u.labels = append(u.labels, labelUse{lb, visible(l, lb), "on (left side)"}, labelUse{lb, visible(r, lb), "on (right side)"})
			}
		}
		switch vm.Card {
		case parser.CardManyToOne:
			for _, lb := range vm.Include {
				u.labels = append(u.labels, labelUse{lb, visible(r, lb), "group_left"})
			}
			return l
		case parser.CardOneToMany:
			for _, lb := range vm.Include {
				u.labels = append(u.labels, labelUse{lb, visible(l, lb), "group_right"})
			}
			return r
		}
		if vm.On && !n.Op.IsSetOperator() {
			return l.narrow(slices.Clone(vm.MatchingLabels))
		}
		return l
	}
	panic(fmt.Sprintf("PromQL node %T not handled", e))
}

// visible returns the metrics label l can come from in s, or none when s has dropped it (the
// check then fails, naming no metric).
func visible(s labelSet, l string) []string {
	if slices.Contains(s.drop, l) || (s.keep != nil && !slices.Contains(s.keep, l)) {
		return nil
	}
	return s.metrics
}

// sluiceNameRe finds metric names written anywhere in a file (annotations' query templates,
// descriptions and comments included).
var sluiceNameRe = regexp.MustCompile(`\bsluice_[a-z0-9_]*[a-z0-9]\b`)

// namesInText is every sluice_* name written in the dashboards and the rules files.
func namesInText(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.json")
	require.NoError(t, err)
	rules, err := filepath.Glob(filepath.Join(rulesDir, "*.yml"))
	require.NoError(t, err)
	out := map[string][]string{}
	for _, f := range append(files, rules...) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, n := range sluiceNameRe.FindAllString(string(b), -1) {
			if !slices.Contains(out[n], f) {
				out[n] = append(out[n], f)
			}
		}
	}
	return out
}
