package layering

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/sluicemq/sluice/"

// A rule forbids the packages under From (a path prefix, relative to the
// module) to depend, directly or through others, on any package under one
// of Not. Packages inside one Not folder may depend on each other, but not
// on a package that contains them (a leaf under dataplane/partition whose
// rule names dataplane/partition may not import partition itself: see
// forbidden). Test files are not counted: a test may import what it likes.
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
	{"limit", []string{"dataplane", "controlplane", "client", "tiered", "tenants", "record", "internal", "gen", "billing", "alerts"}, "the limit table is a leaf that both planes and the pure quota packages import", []string{"limit/limitpb"}},
	{"limit/limitpb", []string{"dataplane", "controlplane", "client", "tiered", "tenants", "record", "internal", "billing", "alerts"}, "the limit table's proto form needs only the table and gen", nil},
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
	{"dataplane/partition/fetchsession", []string{"dataplane/partition", "dataplane/partition/fetcher", "dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "dataplane/records", "dataplane/groups", "dataplane/txns", "dataplane/admission", "dataplane/coordinator", "dataplane/group", "dataplane/txn", "dataplane/runtime", "dataplane/log", "dataplane/replica", "dataplane/producerstate", "gen/sluice/v1/sluicev1connect", "internal", "tiered"}, "a leader's fetch sessions hold the followers' positions and serve them through fetchsession.Replica, which partition implements: they know no replica, log or protocol, and not their follower side", nil},
	{"dataplane/partition/hwcheckpoint", []string{"dataplane/partition", "dataplane/partition/fetcher", "dataplane/partition/fetchsession", "dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "dataplane/records", "dataplane/groups", "dataplane/txns", "dataplane/admission", "dataplane/coordinator", "dataplane/group", "dataplane/txn", "dataplane/runtime", "dataplane/replica", "dataplane/producerstate", "dataplane/derr", "gen", "internal", "tiered"}, "the HW checkpoint is a file format: it knows no replica, no broker and no protocol", nil},
	{"dataplane/partition/fetcher", []string{"dataplane/partition", "dataplane/partition/fetchsession", "dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "dataplane/records", "dataplane/groups", "dataplane/txns", "dataplane/admission", "dataplane/coordinator", "dataplane/group", "dataplane/txn", "dataplane/runtime", "dataplane/producerstate", "gen/sluice/v1/sluicev1connect", "internal", "tiered"}, "a follower broker's fetchers drive replicas through fetcher.Replica and leaders through fetcher.LeaderClient, which partition and the broker provide: they know no protocol and not the leader's side", nil},
	{"dataplane/cluster", []string{"dataplane/broker", "dataplane/connecterr", "dataplane/coordinator", "dataplane/group", "dataplane/txn", "dataplane/runtime", "dataplane/quota", "dataplane/meter"}, "the cluster view is data the services read: it knows the partitions' assignment types, not the services or the broker", nil},
	{"dataplane/admission", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "dataplane/coordinator", "dataplane/txn", "dataplane/runtime", "dataplane/group", "dataplane/partition", "dataplane/replica", "gen/sluice/v1/sluicev1connect", "internal", "tiered"}, "quota admission decides from the tenants' limits and the allotments its exchanges bring: the broker wires its control-plane calls and holdings; it knows no protocol (its refusals are domain errors) and no service", nil},
	{"dataplane/connectapi", []string{"dataplane/broker"}, "the Connect front door adapts the services; the broker wires it, not the other way round", nil},
	{"dataplane/kafka", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "gen/sluice/v1/sluicev1connect"}, "the Kafka front door adapts the same services as the Connect one (records, and through its Admin the control plane's topics): it calls no Connect service itself; the broker wires it", nil},
	{"dataplane/access", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/partition", "dataplane/log"}, "who may call a broker is decided from a call's credentials and the deny-list, whatever the protocol", nil},
	{"dataplane/records", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/connecterr"}, "the record service is protocol-neutral: plain requests in, plain results and domain errors out; its adapters (connectapi) call it and the broker wires it, never the other way round", nil},
	{"dataplane/txns", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "gen/sluice/v1/sluicev1connect"}, "the transaction service is protocol-neutral: plain requests and domain errors; the adapters (dataplane/connectapi) map it to a protocol, and the broker wires its peers", nil},
	{"dataplane/groups", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "gen/sluice/v1/sluicev1connect", "internal"}, "the group service is protocol-neutral: the broker wires its dependencies (hosting, peers, admission), the front doors adapt it", nil},
	{"dataplane/replicas", []string{"dataplane/broker", "dataplane/connectapi", "dataplane/connecterr", "dataplane/records", "dataplane/groups", "dataplane/txns", "dataplane/coordinator", "dataplane/txn", "dataplane/runtime", "dataplane/admission", "dataplane/access", "gen/sluice/v1/sluicev1connect", "internal"}, "the replica manager is the set of replicas a broker hosts, applied from each cluster view (Kafka's ReplicaManager): it knows the view and the partitions, not the services, their protocols or the broker that wires it", nil},
	{"dataplane/derr", []string{"dataplane/broker", "dataplane/connecterr", "dataplane/coordinator", "dataplane/group", "dataplane/log", "dataplane/meter", "dataplane/partition", "dataplane/producerstate", "dataplane/quota", "dataplane/replica", "dataplane/txn", "gen", "record", "internal", "tiered", "tenants"}, "the domain errors are a leaf every data-plane layer and adapter imports", nil},
	{"dataplane/connecterr", []string{"dataplane/broker", "dataplane/coordinator", "dataplane/group", "dataplane/partition", "dataplane/txn"}, "the Connect adapter's error mapping knows the domain errors and the API, not the services", nil},
	{"internal/localcluster", []string{"dataplane"}, "the in-process cluster builds its brokers through a BrokerFunc, so that the broker's own tests can use it; only internal/localcluster/brokernode builds real ones", []string{"internal/localcluster/brokernode"}},
	{"", []string{"internal/localcluster"}, "the in-process cluster wires both planes together: only sluice dev and tests start it", []string{"internal/localcluster", "cmd"}},
	{"internal/clock", []string{"dataplane", "controlplane", "client", "tiered", "tenants", "record", "gen", "billing", "alerts", "limit", "internal/localcluster", "internal/testenv"}, "the clock is a leaf: every loop that takes one imports it", nil},
	{"", []string{"cmd"}, "nothing imports cmd/", nil},
	{"", []string{"internal/testenv", "internal/testcluster", "controlplane/storetest"}, "test harnesses are for tests only",
		[]string{"internal/testenv", "internal/testcluster", "controlplane/storetest"}}, // they may use each other
}

// An importRule forbids the packages under From (relative to the module)
// to import, themselves, any package under one of Not: import paths
// outside the module, such as a protocol's library. Only direct imports
// count (a package may use one that imports it: the data plane's
// partitions use tiered storage, whose control-plane client is Connect's),
// and test files do not.
type importRule struct {
	From   string
	Not    []string
	Why    string
	Except []string // packages under From the rule does not bind
}

var importRules = []importRule{
	{"dataplane", []string{"connectrpc.com/connect"},
		"below the Connect adapter the data plane returns and reads domain errors (dataplane/derr); the adapter maps them to Connect's codes in one place (dataplane/connecterr) and wires its clients",
		[]string{"dataplane/broker", "dataplane/connecterr", "dataplane/connectapi"}},
	{"dataplane", []string{"github.com/twmb/franz-go"},
		"Kafka's protocol lives in its front door (dataplane/kafka) alone; the services below it know no Kafka type",
		[]string{"dataplane/kafka"}},
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
					if forbidden(pkg, d, not) {
						t.Errorf("%s depends on %s: %s", pkg, d, r.Why)
					}
				}
			}
		}
	}
	imports := listImports(t)
	for _, r := range importRules {
		for pkg, is := range imports {
			for _, v := range importViolations(r, pkg, is) {
				t.Errorf("%s imports %s: %s", pkg, v, r.Why)
			}
		}
	}
}

// forbidden reports whether a rule that forbids the folder not forbids
// pkg's dependency d: d is under not, and pkg is outside it, or inside it
// with d a package that contains pkg (its parent, or further up).
func forbidden(pkg, d, not string) bool {
	return under(d, not) && (!under(pkg, not) || (d != pkg && under(pkg, d)))
}

// importViolations returns the imports of pkg (is) that rule r forbids.
func importViolations(r importRule, pkg string, is []string) []string {
	if !under(pkg, r.From) || anyUnder(pkg, r.Except) {
		return nil
	}
	var out []string
	for _, i := range is {
		if anyUnder(i, r.Not) {
			out = append(out, i)
		}
	}
	return out
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
		{"cmd/sluice/cli", "cmd/sluice/cli/x", "", "cmd", false},
		{"dataplane/partition/fetcher", "dataplane/partition", "dataplane/partition/fetcher", "dataplane/partition", true},
		{"dataplane/partition/fetcher", "dataplane/partition/fetchsession", "dataplane/partition/fetcher", "dataplane/partition", false},
		{"dataplane/partition/fetcher", "dataplane/partition/fetchsession", "dataplane/partition/fetcher", "dataplane/partition/fetchsession", true},
	} {
		got := under(c.pkg, c.from) && forbidden(c.pkg, c.dep, c.not)
		if got != c.want {
			t.Errorf("%s -> %s under rule %s ↛ %s: violation %v, want %v", c.pkg, c.dep, c.from, c.not, got, c.want)
		}
	}
	// The import rule: a made-up package under dataplane importing Connect
	// is a violation; the adapter, a package outside dataplane, and one
	// whose dependency (not itself) imports it are not.
	connectRule := importRules[0]
	for _, c := range []struct {
		pkg  string
		is   []string
		want int
	}{
		{"dataplane/partition", []string{"context", "connectrpc.com/connect"}, 1},
		{"dataplane/meter/x", []string{"connectrpc.com/connect"}, 1},
		{"dataplane/broker", []string{"connectrpc.com/connect"}, 0},
		{"dataplane/connecterr", []string{"connectrpc.com/connect"}, 0},
		{"controlplane/api", []string{"connectrpc.com/connect"}, 0},
		{"dataplane/partition", []string{"github.com/sluicemq/sluice/tiered", "connectrpc.com/grpchealth"}, 0},
	} {
		if got := importViolations(connectRule, c.pkg, c.is); len(got) != c.want {
			t.Errorf("%s importing %v under rule %s ↛ %v: violations %v, want %d", c.pkg, c.is, connectRule.From, connectRule.Not, got, c.want)
		}
	}
	imports := listImports(t)
	if !slices.Contains(imports["dataplane/broker"], "connectrpc.com/connect") {
		t.Errorf("dataplane/broker's imports do not list connectrpc.com/connect: listImports misses external imports")
	}
	for _, e := range connectRule.Except {
		if _, ok := imports[e]; !ok {
			t.Errorf("package %s not listed: the import rule exempts a folder that no longer exists", e)
		}
	}

	deps := listDeps(t)
	for _, want := range []string{"client", "controlplane/api", "dataplane/broker", "dataplane/coordinator", "dataplane/group", "dataplane/partition", "dataplane/runtime", "dataplane/groups", "record", "tiered", "cmd/sluice/cli", "internal/testenv", "limit", "limit/limitpb", "internal/localcluster", "internal/localcluster/brokernode", "dataplane/txns", "dataplane/partition/fetcher", "dataplane/partition/fetchsession", "dataplane/partition/hwcheckpoint", "dataplane/replicas"} {
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

// listImports returns every package of the module (relative to it) with
// the packages it imports itself (inside the module or not), without test
// files.
func listImports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{"\t"}}{{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		pkg, all, _ := strings.Cut(sc.Text(), "\t")
		imports[strings.TrimPrefix(pkg, module)] = strings.Fields(all)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return imports
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
