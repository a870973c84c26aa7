package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluicemq/sluice/"

// A rule forbids the packages under From (a path prefix, relative to the
// module) to depend, directly or through others, on any package under one
// of Not. Test files are not counted: a test may import what it likes.
type rule struct {
	From   string
	Not    []string
	Why    string
	Except []string // packages under From the rule does not bind
}

var rules = []rule{
	{"controlplane", []string{"dataplane", "client"}, "the control plane reaches brokers only through the generated Connect clients", nil},
	{"dataplane", []string{"controlplane", "client"}, "brokers reach the control plane only through the generated Connect clients", nil},
	{"client", []string{"dataplane", "controlplane"}, "the SDK shares the wire format (record, gen), never a server's code", nil},
	{"record", []string{"dataplane", "controlplane", "client", "tiered", "tenants", "internal", "gen"}, "the batch format is a leaf", nil},
	{"tiered", []string{"dataplane", "controlplane", "client"}, "tiered storage reads a log through tiered.Source", nil},
	{"tenants", []string{"dataplane", "controlplane", "client", "tiered"}, "tenants is a leaf (plans, keys, tokens)", nil},
	{"alerts", []string{"dataplane", "controlplane", "client", "tiered", "internal"}, "the alert rules are pure logic", nil},
	{"billing", []string{"dataplane", "client", "tiered", "internal"}, "billing prices the store's usage rows: it reads the store, never a broker", nil},
	{"controlplane/store", []string{"billing"}, "billing reads the store, not the other way round", nil},
	{"gen", []string{"dataplane", "controlplane", "client", "tiered", "tenants", "record", "internal"}, "generated code is a leaf", nil},
	{"dataplane/coordinator", []string{"dataplane/broker"}, "the group coordinator reaches its offsets partition through coordinator.Partition, which the broker implements and wires", nil},
	{"dataplane/txn", []string{"dataplane/broker", "dataplane/coordinator", "dataplane/partition", "dataplane/replica"}, "the transaction coordinator reaches its partition through txn.Partition and the partitions it marks through txn.MarkerWriter, which the broker will implement and wire", nil},
	{"dataplane/runtime", []string{"dataplane/broker", "dataplane/coordinator", "dataplane/txn", "dataplane/group", "dataplane/partition", "dataplane/replica", "gen", "tenants", "tiered", "internal"}, "the coordinator runtime knows no coordinator and no broker: shards plug into it, the broker provides their partitions and effects", nil},
	{"dataplane/group", []string{"dataplane/broker", "dataplane/coordinator", "dataplane/partition", "dataplane/log", "dataplane/replica", "gen", "record", "internal", "tiered", "tenants"}, "the group membership state machine is pure logic", nil},
	{"dataplane/quota", []string{"dataplane/broker", "dataplane/coordinator", "dataplane/partition", "dataplane/log", "dataplane/replica", "gen", "record", "internal", "tiered", "tenants"}, "the brokers' token buckets are pure logic", nil},
	{"controlplane/quota", []string{"controlplane/api", "controlplane/store", "controlplane/controller", "controlplane/metering", "gen", "internal", "tiered", "billing"}, "the division of cluster-wide limits is pure logic", nil},
	{"dataplane/partition", []string{"dataplane/broker", "dataplane/coordinator", "dataplane/group"}, "a partition replica reaches its broker only through partition.Host, which the broker provides and wires", nil},
	{"", []string{"cmd"}, "nothing imports cmd/", nil},
	{"", []string{"internal/testenv", "internal/testcluster", "controlplane/storetest"}, "test harnesses are for tests only",
		[]string{"internal/testenv", "internal/testcluster", "controlplane/storetest"}}, // they may use each other
}

func TestLayering(t *testing.T) {
	deps := listDeps(t)
	if len(deps) < 20 {
		t.Fatalf("go list found %d packages: run from inside the module", len(deps))
	}
	for _, r := range rules {
		for pkg, ds := range deps {
			if !under(pkg, r.From) || anyUnder(pkg, r.Except) {
				continue
			}
			for _, d := range ds {
				for _, not := range r.Not {
					if under(d, not) && !under(pkg, not) {
						t.Errorf("%s depends on %s: %s", pkg, d, r.Why)
					}
				}
			}
		}
	}
}

// TestLayeringFindsAViolation checks the checker on a made-up graph, so
// that a rule that never matches (a renamed folder) does not pass quietly.
func TestLayeringFindsAViolation(t *testing.T) {
	for _, c := range []struct {
		pkg, dep, from, not string
		want                bool
	}{
		{"client", "dataplane/log", "client", "dataplane", true},
		{"client/x", "dataplane", "client", "dataplane", true},
		{"clientele", "dataplane", "client", "dataplane", false},
		{"dataplane/broker", "dataplane/log", "dataplane", "dataplane", false},
		{"e2e", "cmd/sluice/cli", "", "cmd", true},
	} {
		got := under(c.pkg, c.from) && under(c.dep, c.not) && !under(c.pkg, c.not)
		if got != c.want {
			t.Errorf("%s -> %s under rule %s ↛ %s: violation %v, want %v", c.pkg, c.dep, c.from, c.not, got, c.want)
		}
	}
	deps := listDeps(t)
	for _, want := range []string{"client", "controlplane/api", "dataplane/broker", "dataplane/coordinator", "dataplane/group", "dataplane/partition", "dataplane/runtime", "record", "tiered", "cmd/sluice/cli", "internal/testenv"} {
		if _, ok := deps[want]; !ok {
			t.Errorf("package %s not listed: the rules name folders that no longer exist", want)
		}
	}
}

// listDeps returns every package of the module (relative to it) with the
// module packages it depends on, without test files.
func listDeps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{"\t"}}{{join .Deps " "}}`, module+"...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		pkg, all, _ := strings.Cut(sc.Text(), "\t")
		var mine []string
		for _, d := range strings.Fields(all) {
			if rel, ok := strings.CutPrefix(d, module); ok {
				mine = append(mine, rel)
			}
		}
		deps[strings.TrimPrefix(pkg, module)] = mine
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return deps
}

// under reports whether pkg is folder or inside it ("" is the whole module).
func under(pkg, folder string) bool {
	return folder == "" || pkg == folder || strings.HasPrefix(pkg, folder+"/")
}

func anyUnder(pkg string, folders []string) bool {
	for _, f := range folders {
		if under(pkg, f) {
			return true
		}
	}
	return false
}
