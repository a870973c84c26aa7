package helm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sluicemq/sluice/cmd/sluice/cli"
	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/broker"
	"github.com/sluicemq/sluice/internal/flagenv"
	"github.com/sluicemq/sluice/tiered/objstore/s3"
)

const namespace = "streaming"

// A chartCase is one set of values the chart is rendered with, and what the rendering must show.
type chartCase struct {
	name        string
	release     string
	valuesFiles []string // under testdata/
	set         []string // --set
	brokers     int
	firstID     int
	// existing are the Secrets the values name and the chart does not create: name → keys.
	existing map[string][]string
	// rack is the broker's --rack on a node in zone "zone-b" ("" for none).
	rack           string
	bucket         string
	monitor        bool
	cpReplicas     int32
	image          string // "": the chart's appVersion
	trustedProxies []string

	// tls is tls.enabled; certManager says the chart renders the Certificates (otherwise the
	// TLS Secrets are among existing); tlsMetrics is tls.metrics.
	tls, certManager, tlsMetrics bool
	issuer                       issuerRef // tls.certManager.issuerRef
	// cpNames and brokerNames are tls.controlplaneDnsNames and tls.brokerDnsNames ("{id}": the
	// broker's id), which the certificates must name.
	cpNames, brokerNames []string
	// cpExternal is the type of the control plane's external Service ("": none).
	cpExternal corev1.ServiceType
	// brokerExternal is brokers.external.advertisedAddress ("": no external listeners),
	// brokerExternalType its Services' type and nodePorts their node ports by index.
	brokerExternal     string
	brokerExternalType corev1.ServiceType
	nodePorts          []int32
}

var cases = []chartCase{
	{
		name: "defaults", release: "sluice", brokers: 3, cpReplicas: 2,
		existing: map[string][]string{"sluice-postgres": {"url"}},
		rack:     "zone-b",
	},
	{
		name: "production", release: "prod", valuesFiles: []string{"production.yaml"}, brokers: 5, firstID: 1, cpReplicas: 3,
		existing: map[string][]string{
			"pg-credentials": {"DATABASE_URL"},
			"sluice-tokens":  {"operator", "broker"},
			"sluice-bucket":  {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
		},
		rack: "zone-b", bucket: "sluice-cold", monitor: true, trustedProxies: []string{"10.0.0.0/8"},
		image: "registry.example/mirror/sluice:0.1.0-rc.2",
	},
	{
		name: "inline-secrets", release: "lab", valuesFiles: []string{"inline-secrets.yaml"}, brokers: 3, cpReplicas: 1,
		existing: map[string][]string{},
		rack:     "lab-rack-1", bucket: "lab-tier",
	},
	{
		name: "tls-external", release: "edge", valuesFiles: []string{"tls-external.yaml"}, brokers: 4, firstID: 1, cpReplicas: 2,
		existing: map[string][]string{"sluice-postgres": {"url"}},
		rack:     "zone-b", monitor: true,
		tls: true, certManager: true, tlsMetrics: true,
		issuer:  issuerRef{Name: "sluice-ca", Kind: "ClusterIssuer", Group: "cert-manager.io"},
		cpNames: []string{"sluice.streaming.example.com"}, brokerNames: []string{"broker-{id}.dc1.example.com"},
		cpExternal:     corev1.ServiceTypeLoadBalancer,
		brokerExternal: "broker-{id}.streaming.example.com:443", brokerExternalType: corev1.ServiceTypeClusterIP,
	},
	{
		name: "tls-nodeport", release: "np", valuesFiles: []string{"tls-nodeport.yaml"}, brokers: 3, cpReplicas: 2,
		existing: map[string][]string{
			"sluice-postgres":            {"url"},
			"np-sluice-controlplane-tls": tlsKeys,
			"np-sluice-broker-0-tls":     tlsKeys,
			"np-sluice-broker-1-tls":     tlsKeys,
			"np-sluice-broker-2-tls":     tlsKeys,
		},
		rack:           "zone-b",
		tls:            true,
		cpExternal:     corev1.ServiceTypeNodePort,
		brokerExternal: "203.0.113.10:3100{id}", brokerExternalType: corev1.ServiceTypeNodePort,
		nodePorts: []int32{31000, 31001, 31002},
	},
	{
		name: "external-plaintext", release: "plain", brokers: 3, cpReplicas: 2,
		set: []string{
			"brokers.external.enabled=true", "brokers.external.advertisedAddress=kafka-{id}.example.com:9093",
			`brokers.external.service.annotations.external-dns\.alpha\.kubernetes\.io/hostname=kafka-{id}.example.com`,
		},
		existing:           map[string][]string{"sluice-postgres": {"url"}},
		rack:               "zone-b",
		brokerExternal:     "kafka-{id}.example.com:9093",
		brokerExternalType: corev1.ServiceTypeLoadBalancer,
	},
}

func TestChartLint(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir}
			for _, f := range c.valuesFiles {
				args = append(args, "--values", filepath.Join("testdata", f))
			}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			if out, err := runHelm(t, args...); err != nil {
				t.Fatal(err)
			} else {
				t.Log(strings.TrimSpace(out))
			}
		})
	}
}

// TestChartRefusesValuesThatCannotWork renders values that would make a cluster that cannot
// run, and expects helm template to fail naming the value.
func TestChartRefusesValuesThatCannotWork(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"brokers.replicas=2", "brokers.replicas (2) must be at least controlplane.replicationFactor (3)"},
		{"brokers.rack.mode=node", "brokers.rack.mode must be zoneLabel, static or none"},
		{"brokers.rack.mode=static", "brokers.rack.mode static needs brokers.rack.value"},
		{"brokers.updateStrategy=Recreate", "brokers.updateStrategy must be RollingUpdate or OnDelete"},
		{"tokens.operatorToken=short", "tokens.operatorToken must be at least 16 characters"},
		{"postgres.existingSecret=", "set postgres.url or postgres.existingSecret"},
		{"tls.enabled=true", "tls.certManager.enabled needs tls.certManager.issuerRef.name"},
		{"tls.metrics=true", "tls.metrics needs tls.enabled"},
		{"brokers.external.enabled=true", "brokers.external.enabled needs brokers.external.advertisedAddress"},
		{"brokers.external.enabled=true,brokers.external.advertisedAddress=kafka.example.com:443",
			`brokers.external.advertisedAddress "kafka.example.com:443" must contain {id}`},
		{"brokers.external.enabled=true,brokers.external.advertisedAddress=broker-{id}.example.com",
			`brokers.external.advertisedAddress "broker-{id}.example.com" must be host:port`},
		{"brokers.external.enabled=true,brokers.external.advertisedAddress=203.0.113.10:3100{id},brokers.external.service.type=NodePort," +
			"brokers.external.service.nodePorts={31000,31001,31002,31003}", "brokers.external.service.nodePorts has 4 entries for 3 brokers"},
		{"brokers.external.enabled=true,brokers.external.advertisedAddress=broker-{id}.example.com:443,brokers.external.service.type=ClusterIP," +
			"brokers.external.service.nodePorts={31000}", "brokers.external.service.nodePorts needs service type NodePort or LoadBalancer"},
		{"brokers.external.enabled=true,brokers.external.advertisedAddress=broker-{id}.example.com:443,brokers.external.service.type=Ingress",
			"brokers.external.service.type must be LoadBalancer, NodePort or ClusterIP"},
		{"brokers.external.enabled=true,brokers.external.advertisedAddress=broker-{id}.example.com:443,brokers.external.port=9092",
			"brokers.external.port (9092) must differ from brokers.port and brokers.metricsPort"},
		{"controlplane.external.enabled=true,controlplane.external.service.type=ClusterIP,controlplane.external.service.nodePort=30443",
			"controlplane.external.service.nodePort needs service type NodePort or LoadBalancer"},
	} {
		_, err := runHelm(t, "template", "sluice", chartDir, "--namespace", namespace, "--set", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("helm template --set %s: %v, want an error saying %q", c.set, err, c.want)
		}
	}
}

// rendered is what helm template printed, decoded.
type rendered struct {
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	secrets      map[string]*corev1.Secret
	pdbs         []*policyv1.PodDisruptionBudget
	accounts     map[string]*corev1.ServiceAccount
	monitors     []*serviceMonitor
	certificates map[string]*certificate
}

// serviceMonitor is the part of prometheus-operator's monitoring.coreos.com/v1 ServiceMonitor the
// chart uses (field names as in its CRD); strict decoding refuses any other field.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			Scheme        string `json:"scheme,omitempty"`
			TLSConfig     *struct {
				InsecureSkipVerify bool `json:"insecureSkipVerify"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// render runs helm template for c and decodes every document strictly (unknown or duplicate
// fields fail) into its API type; a kind the test does not know fails too.
func render(t *testing.T, c chartCase) *rendered {
	t.Helper()
	args := []string{"template", c.release, chartDir, "--namespace", namespace}
	for _, f := range c.valuesFiles {
		args = append(args, "--values", filepath.Join("testdata", f))
	}
	for _, s := range c.set {
		args = append(args, "--set", s)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{
		deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{},
		services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}, accounts: map[string]*corev1.ServiceAccount{},
		certificates: map[string]*certificate{},
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := reader.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("split helm template's output: %v", err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("decode %s: %v", doc, err)
		}
		if tm.Kind == "" {
			continue // a document of comments only
		}
		var obj interface{ GetName() string }
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			r.deployments[name(t, doc, d)] = d
			obj = d
		case "apps/v1 StatefulSet":
			s := &appsv1.StatefulSet{}
			r.statefulSets[name(t, doc, s)] = s
			obj = s
		case "v1 Service":
			s := &corev1.Service{}
			r.services[name(t, doc, s)] = s
			obj = s
		case "v1 Secret":
			s := &corev1.Secret{}
			r.secrets[name(t, doc, s)] = s
			obj = s
		case "v1 ServiceAccount":
			s := &corev1.ServiceAccount{}
			r.accounts[name(t, doc, s)] = s
			obj = s
		case "policy/v1 PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			name(t, doc, p)
			r.pdbs = append(r.pdbs, p)
			obj = p
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m := &serviceMonitor{}
			name(t, doc, m)
			r.monitors = append(r.monitors, m)
			obj = m
		case "cert-manager.io/v1 Certificate":
			crt := &certificate{}
			r.certificates[name(t, doc, crt)] = crt
			obj = crt
		default:
			t.Fatalf("helm template rendered a %s %s the test does not check:\n%s", tm.APIVersion, tm.Kind, doc)
		}
		if obj.GetName() == "" || len(obj.GetName()) > 63 {
			t.Errorf("%s named %q: a name must have 1 to 63 characters", tm.Kind, obj.GetName())
		}
	}
	return r
}

// name decodes doc strictly into obj and returns its name.
func name(t *testing.T, doc []byte, obj interface{ GetName() string }) string {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("decode strictly: %v\n%s", err, doc)
	}
	return obj.GetName()
}

// TestChartRenders renders each case and checks the objects: brokers with stable identities,
// PDBs and anti-affinity, probes on served paths, flags and variables sluice accepts, and
// secrets that exist.
func TestChartRenders(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c)
			full := c.release
			if c.release != "sluice" {
				full = c.release + "-sluice"
			}
			cp := r.deployments[full+"-controlplane"]
			sts := r.statefulSets[full+"-broker"]
			if cp == nil || sts == nil || len(r.deployments) != 1 || len(r.statefulSets) != 1 {
				t.Fatalf("want Deployment %s-controlplane and StatefulSet %s-broker; got %v and %v", full, full, keys(r.deployments), keys(r.statefulSets))
			}
			if got := *cp.Spec.Replicas; got != c.cpReplicas {
				t.Errorf("control plane replicas %d, want %d", got, c.cpReplicas)
			}
			checkSelects(t, "Deployment "+cp.Name, cp.Spec.Selector, cp.Spec.Template.Labels)
			checkSelects(t, "StatefulSet "+sts.Name, sts.Spec.Selector, sts.Spec.Template.Labels)

			checkImage(t, c, cp.Spec.Template.Spec.Containers[0], sts.Spec.Template.Spec.Containers[0])
			headless := checkStableBrokers(t, c, r, sts)
			cpSvc := checkControlPlaneServices(t, r, cp, full)
			for _, w := range []struct {
				kind string
				meta metav1.ObjectMeta
				pod  corev1.PodTemplateSpec
			}{{"Deployment", cp.ObjectMeta, cp.Spec.Template}, {"StatefulSet", sts.ObjectMeta, sts.Spec.Template}} {
				checkPDB(t, r, w.kind+" "+w.meta.Name, w.pod.Labels)
				checkZoneAntiAffinity(t, w.kind+" "+w.meta.Name, w.pod)
				checkPodSecurity(t, w.kind+" "+w.meta.Name, w.pod.Spec)
			}

			// The pods as the kubelet would start them: broker firstId+1 in zone-b, and a
			// control-plane replica, with the downward API and the secrets resolved.
			secrets := secretValues(t, c, r)
			ordinal := c.firstID + 1
			brokerPod := simulatedBroker(sts, ordinal)
			bArgs, bEnv := brokerPod.resolve(t, sts.Spec.Template.Spec.Containers[0], secrets)
			cpPod := simulatedPod{name: cp.Name + "-5d8f7c9b4-x2x7q", labels: cp.Spec.Template.Labels}
			cArgs, cEnv := cpPod.resolve(t, cp.Spec.Template.Spec.Containers[0], secrets)

			checkAcceptedBySluice(t, "broker", bArgs, bEnv)
			checkAcceptedBySluice(t, "controlplane", cArgs, cEnv)

			bc := parseBroker(t, bArgs, bEnv, c)
			if bc.ID != int32(ordinal) {
				t.Errorf("broker pod %s runs with --id %d, want its ordinal %d", brokerPod.name, bc.ID, ordinal)
			}
			wantAddr := fmt.Sprintf("%s.%s.%s.svc.cluster.local:%d", brokerPod.name, headless.Name, namespace, port(t, headless, "api"))
			if bc.AdvertisedAddr != wantAddr {
				t.Errorf("broker pod %s advertises %q, want its stable name in the headless Service %q", brokerPod.name, bc.AdvertisedAddr, wantAddr)
			}
			if bc.Rack != c.rack {
				t.Errorf("broker pod %s in zone-b runs with --rack %q, want %q", brokerPod.name, bc.Rack, c.rack)
			}
			checkListensOnContainerPorts(t, "broker", sts.Spec.Template.Spec.Containers[0], bc.ListenAddr, bc.MetricsAddr)
			scheme := "http"
			if c.tls {
				scheme = "https"
			}
			wantCP := fmt.Sprintf("%s://%s.%s.svc.cluster.local:%d", scheme, cpSvc.Name, namespace, port(t, cpSvc, "http"))
			if bc.ControlPlane != wantCP {
				t.Errorf("broker --control-plane %q, want the control-plane Service %q", bc.ControlPlane, wantCP)
			}
			checkDataDirOnVolume(t, sts, bc.DataDir)

			cc := parseControlPlane(t, cArgs, cEnv)
			checkListensOnContainerPorts(t, "controlplane", cp.Spec.Template.Spec.Containers[0], cc.ListenAddr, cc.MetricsAddr)
			if cc.BrokerToken != bc.BrokerToken {
				t.Error("the control plane and the brokers read different broker tokens")
			}
			if cc.OperatorToken == "" {
				t.Error("the control plane runs without an operator token")
			}
			if !slices.Equal(cc.ClientLimits.TrustedProxies, c.trustedProxies) {
				t.Errorf("control plane --trusted-proxies %v, want %v", cc.ClientLimits.TrustedProxies, c.trustedProxies)
			}
			if rf := int(cc.DefaultReplicationFactor); rf > c.brokers {
				t.Errorf("replication factor %d with %d brokers", rf, c.brokers)
			}

			checkProbesServed(t, "broker", sts.Spec.Template.Spec.Containers[0], c.tlsMetrics)
			checkProbesServed(t, "controlplane", cp.Spec.Template.Spec.Containers[0], c.tlsMetrics)
			checkServiceMonitor(t, c, r)

			checkCertificateCount(t, c, r)
			checkTLSSecretsDocumented(t, c)
			checkControlPlaneTLSAndExternal(t, c, r, cp, sts, cc, bc)
			checkEachBroker(t, c, r, sts, cp, secrets)
		})
	}
}

// defaultImage is the image the chart runs by default: no registry (none publishes Sluice), the
// name a local build gets (README.md, The image), tagged with the chart's appVersion.
const defaultImage = "sluice"

// appVersion is Chart.yaml's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: appVersion %q, %v", chart.AppVersion, err)
	}
	return chart.AppVersion
}

// checkImage checks both roles run the one image, tagged with the chart's appVersion by default.
func checkImage(t *testing.T, c chartCase, cs ...corev1.Container) {
	t.Helper()
	want := c.image
	if want == "" {
		want = defaultImage + ":" + appVersion(t)
	}
	for _, ct := range cs {
		if ct.Image != want {
			t.Errorf("container %s runs image %s, want %s", ct.Name, ct.Image, want)
		}
	}
}

var (
	dockerBuildRe = regexp.MustCompile(`(?m)^docker build (?:--build-arg VERSION=\S+ )?-t (\S+) \.$`)
	setImageRe    = regexp.MustCompile("--set image\\.repository=([^`\\s]+)\\s+(?:\\\\\\s+)?--set\\s+image\\.tag=([^`\\s]+)")
)

// TestChartImageBuildDocumented: no image is published, so the chart's README and docs/deploy.md
// build it with the repository's Dockerfile, and every image they build is one the chart runs:
// the default (a local build's name) or one they pass with --set image.repository=…
// --set image.tag=…. The default has no registry in its name, and the README shows a build
// for a registry too.
func TestChartImageBuildDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct{ Repository, Tag string } `json:"image"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != defaultImage || values.Image.Tag != "" {
		t.Fatalf("values.yaml's image is %s:%s, want %s with the appVersion as tag: a name that pretends to be published is not a default", values.Image.Repository, values.Image.Tag, defaultImage)
	}
	def := defaultImage + ":" + appVersion(t)
	for _, doc := range []string{filepath.Join(chartDir, "README.md"), filepath.Join("..", "..", "docs", "deploy.md")} {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		set := map[string]bool{}
		for _, m := range setImageRe.FindAllStringSubmatch(text, -1) {
			set[m[1]+":"+m[2]] = true
		}
		builds := dockerBuildRe.FindAllStringSubmatch(text, -1)
		registry := false
		for _, m := range builds {
			img := m[1]
			registry = registry || strings.Contains(img, "/")
			if strings.Contains(img, "/") && !set[img] {
				t.Errorf("%s builds %s but never passes it to the chart with --set image.repository=… --set image.tag=…", doc, img)
			}
		}
		if len(builds) == 0 || !registry {
			t.Errorf("%s: want a docker build of the image for a registry (-t REGISTRY/sluice:TAG); found %v", doc, builds)
		}
		if doc == filepath.Join(chartDir, "README.md") && !slices.ContainsFunc(builds, func(m []string) bool { return m[1] == def }) {
			t.Errorf("%s: want the build of the default image %s (for kind or minikube)", doc, def)
		}
	}
}

// TestChartNotes: helm install prints the image it runs, and, while the default is in place,
// how to build, push and set one.
func TestChartNotes(t *testing.T) {
	def := defaultImage + ":" + appVersion(t)
	for _, c := range []struct {
		chartCase
		want, not []string
	}{
		{cases[0], []string{"Image: " + def, "No Sluice image is published", "docker build --build-arg VERSION=v" + appVersion(t) + " -t REGISTRY/sluice:" + appVersion(t) + " .",
			"--set image.repository=REGISTRY/sluice --set image.tag=" + appVersion(t), "TLS is off"}, []string{"outside the cluster"}},
		{cases[1], []string{"Image: " + cases[1].image}, []string{"docker build"}},
		{caseNamed(t, "tls-external"), []string{
			"Control plane (API, signup, JWKS): https://edge-sluice-controlplane.streaming.svc.cluster.local:8080",
			"Control plane outside the cluster: Service edge-sluice-controlplane-external (LoadBalancer), port 8443, TLS",
			"Brokers outside the cluster: broker N at https://broker-N.streaming.example.com:443",
			"Route each of these names to its Service by SNI, with TLS passthrough",
			"issued by cert-manager (ClusterIssuer sluice-ca)",
			"get secret edge-sluice-controlplane-tls -o jsonpath='{.data.ca\\.crt}'",
		}, []string{"TLS is off"}},
		{caseNamed(t, "tls-nodeport"), []string{
			"Brokers outside the cluster: broker N at https://203.0.113.10:3100N",
			"Secrets np-sluice-controlplane-tls and np-sluice-broker-N-tls, which you create",
		}, []string{"TLS is off", "cert-manager"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"install", c.release, chartDir, "--namespace", namespace, "--dry-run=client", "--hide-secret"}
			for _, f := range c.valuesFiles {
				args = append(args, "--values", filepath.Join("testdata", f))
			}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			_, notes, ok := strings.Cut(out, "\nNOTES:\n")
			if !ok {
				t.Fatalf("helm install printed no NOTES:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES lack %q:\n%s", w, notes)
				}
			}
			for _, w := range c.not {
				if strings.Contains(notes, w) {
					t.Errorf("NOTES say %q:\n%s", w, notes)
				}
			}
		})
	}
}

// checkStableBrokers checks the StatefulSet's identities: a headless Service publishing
// not-ready pods, ids from the ordinal label, one volume per pod. It returns the Service.
func checkStableBrokers(t *testing.T, c chartCase, r *rendered, sts *appsv1.StatefulSet) *corev1.Service {
	t.Helper()
	if got := int(*sts.Spec.Replicas); got != c.brokers {
		t.Errorf("StatefulSet %s has %d replicas, want %d", sts.Name, got, c.brokers)
	}
	start := 0
	if sts.Spec.Ordinals != nil {
		start = int(sts.Spec.Ordinals.Start)
	}
	if start != c.firstID {
		t.Errorf("StatefulSet %s's ordinals start at %d, want %d (brokers.firstId)", sts.Name, start, c.firstID)
	}
	svc := r.services[sts.Spec.ServiceName]
	if svc == nil {
		t.Fatalf("StatefulSet %s's serviceName %q is no rendered Service", sts.Name, sts.Spec.ServiceName)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service publishing not-ready pods",
			svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(sts.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("headless Service %s's selector %v does not select the broker pods %v", svc.Name, svc.Spec.Selector, sts.Spec.Template.Labels)
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.Type != intstr.String || containerPort(sts.Spec.Template.Spec.Containers[0], p.TargetPort.StrVal) == 0 {
			t.Errorf("headless Service %s port %s targets %v, which is no named broker container port", svc.Name, p.Name, p.TargetPort.String())
		}
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("StatefulSet %s: want one volumeClaimTemplate named data; got %d", sts.Name, len(sts.Spec.VolumeClaimTemplates))
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement ||
		sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("StatefulSet %s: podManagementPolicy %q, updateStrategy %q; want Parallel and RollingUpdate",
			sts.Name, sts.Spec.PodManagementPolicy, sts.Spec.UpdateStrategy.Type)
	}
	return svc
}

// checkControlPlaneServices checks the API Service (no metrics port: tenants reach it) and the
// headless metrics Service, and returns the API one.
func checkControlPlaneServices(t *testing.T, r *rendered, cp *appsv1.Deployment, full string) *corev1.Service {
	t.Helper()
	api := r.services[full+"-controlplane"]
	metrics := r.services[full+"-controlplane-metrics"]
	if api == nil || metrics == nil {
		t.Fatalf("want Services %s-controlplane and %s-controlplane-metrics; got %v", full, full, keys(r.services))
	}
	c := cp.Spec.Template.Spec.Containers[0]
	for _, svc := range []*corev1.Service{api, metrics} {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(cp.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s does not select the control-plane pods", svc.Name)
		}
	}
	for _, p := range api.Spec.Ports {
		if p.TargetPort.StrVal == "metrics" || p.Port == containerPort(c, "metrics") {
			t.Errorf("Service %s exposes the operator listener (port %s): metrics name tenants, and tenants reach this Service", api.Name, p.Name)
		}
	}
	if metrics.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s: clusterIP %q, want None", metrics.Name, metrics.Spec.ClusterIP)
	}
	return api
}

func checkPDB(t *testing.T, r *rendered, what string, podLabels map[string]string) {
	t.Helper()
	for _, p := range r.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		if p.Spec.MaxUnavailable == nil || p.Spec.MaxUnavailable.String() != "1" || p.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s for %s: maxUnavailable %v, want 1", p.Name, what, p.Spec.MaxUnavailable)
		}
		return
	}
	t.Errorf("no PodDisruptionBudget selects the pods of %s", what)
}

func checkZoneAntiAffinity(t *testing.T, what string, pod corev1.PodTemplateSpec) {
	t.Helper()
	a := pod.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil {
		t.Errorf("%s has no pod anti-affinity", what)
		return
	}
	for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		sel, err := metav1.LabelSelectorAsSelector(w.PodAffinityTerm.LabelSelector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) && w.PodAffinityTerm.TopologyKey == "topology.kubernetes.io/zone" {
			return
		}
	}
	t.Errorf("%s: no preferred pod anti-affinity across topology.kubernetes.io/zone selecting its own pods", what)
}

// checkPodSecurity checks the pods run as the image's non-root user.
func checkPodSecurity(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	sc := spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.FSGroup == nil || *sc.FSGroup != 65532 {
		t.Errorf("%s: pod security context %+v, want non-root uid 65532 with fsGroup 65532 (the image's user, owning the data volume)", what, sc)
	}
	if len(spec.Containers) != 1 {
		t.Errorf("%s has %d containers, want 1", what, len(spec.Containers))
	}
}

func checkSelects(t *testing.T, what string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %v does not select its pod template's labels %v", what, sel, podLabels)
	}
}

// secretValues returns every secret value the pods may read: the rendered Secrets' data, and
// stand-ins for the Secrets the values name as existing (which the README must document).
func secretValues(t *testing.T, c chartCase, r *rendered) map[string]map[string]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for name, s := range r.secrets {
		out[name] = map[string]string{}
		for k, v := range s.Data {
			out[name][k] = string(v)
		}
		for k, v := range s.StringData {
			out[name][k] = v
		}
	}
	for name, ks := range c.existing {
		if len(c.valuesFiles)+len(c.set) == 0 && !strings.Contains(string(readme), "`"+name+"`") {
			t.Errorf("the default values read Secret %s, which README.md does not name", name)
		}
		if _, ok := out[name]; ok {
			t.Errorf("Secret %s is rendered, but the values name it as existing", name)
		}
		out[name] = map[string]string{}
		for _, k := range ks {
			out[name][k] = standIn(k)
		}
	}
	// Every key the chart reads from an existing Secret by default is documented.
	for _, k := range []string{"url", "operator-token", "broker-token", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if !strings.Contains(string(readme), "`"+k+"`") {
			t.Errorf("README.md does not document the Secret key `%s`", k)
		}
	}
	return out
}

// standIn is a plausible value for a secret key the chart reads but does not create.
func standIn(key string) string {
	if strings.Contains(strings.ToLower(key), "url") {
		return "postgres://sluice:secret@postgres.example:5432/sluice"
	}
	return "standin-" + strings.Repeat(strings.ToLower(key[:1]), 24)
}

// simulatedPod is a pod of a workload as the API server and kubelet would make it.
type simulatedPod struct {
	name   string
	labels map[string]string
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// resolve returns c's args and environment as the kubelet would start the container: the
// downward API and secretKeyRefs resolved, $(VAR) expanded in values and args from the
// variables defined before. A reference the kubelet would leave unexpanded, a Secret or key
// that does not exist, or a source the test does not know fails the test.
func (p simulatedPod) resolve(t *testing.T, c corev1.Container, secrets map[string]map[string]string) (args []string, env map[string]string) {
	t.Helper()
	env = map[string]string{}
	expand := func(s, where string) string {
		out := varRef.ReplaceAllStringFunc(s, func(ref string) string {
			v, ok := env[varRef.FindStringSubmatch(ref)[1]]
			if !ok {
				t.Errorf("%s: %s names no variable defined before it: Kubernetes leaves it as is", where, ref)
			}
			return v
		})
		return out
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, "env "+e.Name)
		case e.ValueFrom.FieldRef != nil:
			path := e.ValueFrom.FieldRef.FieldPath
			switch {
			case path == "metadata.name":
				env[e.Name] = p.name
			case path == "metadata.namespace":
				env[e.Name] = namespace
			case strings.HasPrefix(path, "metadata.labels['") && strings.HasSuffix(path, "']"):
				env[e.Name] = p.labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")]
			default:
				t.Fatalf("env %s: fieldRef %s is not simulated", e.Name, path)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := secrets[ref.Name][ref.Key]
			if !ok {
				t.Errorf("env %s reads key %q of Secret %q, which is neither rendered nor an existing Secret the values name", e.Name, ref.Key, ref.Name)
			}
			env[e.Name] = v
		default:
			t.Fatalf("env %s: valueFrom %+v is not simulated", e.Name, e.ValueFrom)
		}
	}
	if len(c.Command) != 0 {
		t.Errorf("container %s sets command %v: the image's entrypoint is sluice, the role goes in args", c.Name, c.Command)
	}
	for _, a := range c.Args {
		args = append(args, expand(a, "args"))
	}
	return args, env
}

// checkAcceptedBySluice runs sluice's own command line in-process with the container's args and
// --help: cobra parses every flag before it prints help, so an unknown flag or a bad value
// fails with exit code 2. Every SLUICE_* variable must be one the role's help lists ([$NAME]:
// a flag with a variable); every other variable is read by the AWS SDK or used by the chart's
// own $(VAR) references.
func checkAcceptedBySluice(t *testing.T, role string, args []string, env map[string]string) {
	t.Helper()
	if len(args) == 0 || args[0] != role {
		t.Fatalf("container args %v: want the role %q first (the image's entrypoint is sluice)", args, role)
	}
	help := sluiceHelp(t, args)
	for name := range env {
		switch {
		case strings.HasPrefix(name, "SLUICE_"):
			if !strings.Contains(help, "[$"+name+"]") {
				t.Errorf("%s: variable %s is no flag's variable in `sluice %s --help`", role, name, role)
			}
		case name == "AWS_ACCESS_KEY_ID" || name == "AWS_SECRET_ACCESS_KEY":
		case name == "POD_NAME" || name == "POD_NAMESPACE":
		default:
			t.Errorf("%s: variable %s is read by nothing the chart runs", role, name)
		}
	}
}

// sluiceHelp returns `sluice <args> --help`'s output, failing the test on a non-zero exit.
func sluiceHelp(t *testing.T, args []string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	code := cli.Execute(context.Background(), append(slices.Clone(args), "--help"), strings.NewReader(""), &stdout, &stderr)
	if code != cli.ExitOK {
		t.Errorf("sluice %s refuses the chart's args (exit %d): %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String()
}

// TestSluiceHelpRefusesAnUnknownFlag checks the check: with --help, an unknown flag still fails.
func TestSluiceHelpRefusesAnUnknownFlag(t *testing.T) {
	var stdout, stderr strings.Builder
	code := cli.Execute(context.Background(), []string{"broker", "--listen-addr=0.0.0.0:9092", "--rack-from-node", "--help"},
		strings.NewReader(""), &stdout, &stderr)
	if code != cli.ExitUsage || !strings.Contains(stderr.String(), "rack-from-node") {
		t.Fatalf("sluice broker --rack-from-node --help: exit %d, %q; want exit %d naming the flag", code, stderr.String(), cli.ExitUsage)
	}
	code = cli.Execute(context.Background(), []string{"broker", "--id=x", "--help"}, strings.NewReader(""), &stdout, &stderr)
	if code != cli.ExitUsage {
		t.Fatalf("sluice broker --id=x --help: exit %d, want %d", code, cli.ExitUsage)
	}
}

var envMu sync.Mutex

// withEnv sets env (and unsets every other SLUICE_* variable) while fn runs: flagenv.Apply
// reads the process environment.
func withEnv(t *testing.T, env map[string]string, fn func()) {
	t.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SLUICE_") {
			if _, ok := env[k]; !ok {
				t.Setenv(k, "")
			}
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	fn()
}

// parseFlags parses args (without the role) and env into fs the way sluice does (command
// line first, then $SLUICE_*); flags of the command line that fs lacks are left to
// checkAcceptedBySluice.
func parseFlags(t *testing.T, fs *pflag.FlagSet, args []string, env map[string]string) {
	t.Helper()
	fs.ParseErrorsAllowlist.UnknownFlags = true
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	withEnv(t, env, func() {
		if err := flagenv.Apply(fs, "SLUICE"); err != nil {
			t.Fatalf("environment: %v", err)
		}
	})
}

// parseBroker returns the broker configuration the container would run with, validated as
// sluice broker validates it.
func parseBroker(t *testing.T, args []string, env map[string]string, c chartCase) broker.Config {
	t.Helper()
	cfg, s3cfg := broker.DefaultConfig(), s3.DefaultConfig()
	fs := pflag.NewFlagSet("broker", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	s3cfg.RegisterFlags(fs)
	parseFlags(t, fs, args, env)
	if err := cfg.Validate(); err != nil {
		t.Errorf("sluice broker would refuse its configuration: %v", err)
	}
	if s3cfg.Bucket != c.bucket {
		t.Errorf("broker --tier-s3-bucket %q, want %q", s3cfg.Bucket, c.bucket)
	}
	if s3cfg.Bucket != "" {
		if err := s3cfg.Validate(); err != nil {
			t.Errorf("sluice broker would refuse its S3 configuration: %v", err)
		}
	}
	return cfg
}

// parseControlPlane returns the control plane's configuration, validated.
func parseControlPlane(t *testing.T, args []string, env map[string]string) controlplane.Config {
	t.Helper()
	cfg := controlplane.DefaultConfig()
	fs := pflag.NewFlagSet("controlplane", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	parseFlags(t, fs, args, env)
	if err := cfg.Validate(); err != nil {
		t.Errorf("sluice controlplane would refuse its configuration: %v", err)
	}
	return cfg
}

// checkListensOnContainerPorts checks the API and operator listeners bind every interface on the
// container's ports "api"/"http" and "metrics".
func checkListensOnContainerPorts(t *testing.T, role string, c corev1.Container, listen, metrics string) {
	t.Helper()
	apiPort := "api"
	if role == "controlplane" {
		apiPort = "http"
	}
	for _, l := range []struct{ flag, addr, port string }{{"--listen-addr", listen, apiPort}, {"--metrics-addr", metrics, "metrics"}} {
		host, p, err := net.SplitHostPort(l.addr)
		if err != nil || host != "0.0.0.0" || p != strconv.Itoa(int(containerPort(c, l.port))) {
			t.Errorf("%s %s %q, want 0.0.0.0 and container port %s (%d)", role, l.flag, l.addr, l.port, containerPort(c, l.port))
		}
	}
}

func checkDataDirOnVolume(t *testing.T, sts *appsv1.StatefulSet, dataDir string) {
	t.Helper()
	for _, m := range sts.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.Name == sts.Spec.VolumeClaimTemplates[0].Name && strings.HasPrefix(dataDir, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return
		}
	}
	t.Errorf("broker --data-dir %s is not on the StatefulSet's volume %q", dataDir, sts.Spec.VolumeClaimTemplates[0].Name)
}

// operatorHandlers are the real operator-listener handlers of a broker and of a control plane
// on SQLite, built once: the probes must hit paths they serve.
var operatorHandlers = sync.OnceValues(func() (map[string]http.Handler, error) {
	dir, err := os.MkdirTemp("", "sluice-helm-test-")
	if err != nil {
		return nil, err
	}
	bc := broker.DefaultConfig()
	bc.DataDir = filepath.Join(dir, "broker")
	bc.BrokerToken = strings.Repeat("b", 32)
	bc.AdvertisedAddr = "127.0.0.1:9092"
	b, err := broker.New(bc, broker.Deps{})
	if err != nil {
		return nil, fmt.Errorf("broker.New: %w", err)
	}
	cc := controlplane.DefaultConfig()
	cc.DatabaseURL = "sqlite:" + filepath.Join(dir, "cp.db")
	cc.BrokerToken = strings.Repeat("b", 32)
	cp, err := controlplane.New(context.Background(), cc, controlplane.Deps{})
	if err != nil {
		return nil, fmt.Errorf("controlplane.New: %w", err)
	}
	return map[string]http.Handler{"broker": b.OperatorHandler(), "controlplane": cp.OperatorHandler()}, nil
})

// checkProbesServed checks that c's probes are HTTP GETs on the metrics port, and that the
// role's operator listener serves their paths (any answer but 404; /healthz answers 200).
func checkProbesServed(t *testing.T, role string, c corev1.Container, https bool) {
	t.Helper()
	hs, err := operatorHandlers()
	if err != nil {
		t.Fatal(err)
	}
	probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe}
	want := map[string]string{"readiness": "/readyz", "liveness": "/healthz", "startup": "/healthz"}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", role, kind)
			continue
		}
		if p.HTTPGet.Path != want[kind] {
			t.Errorf("%s %s probe on %s, want %s", role, kind, p.HTTPGet.Path, want[kind])
		}
		if p.HTTPGet.Port.String() != "metrics" && p.HTTPGet.Port.IntValue() != int(containerPort(c, "metrics")) {
			t.Errorf("%s %s probe on port %s, want the operator listener's (metrics)", role, kind, p.HTTPGet.Port.String())
		}
		if wantScheme := map[bool]corev1.URIScheme{false: "", true: corev1.URISchemeHTTPS}[https]; p.HTTPGet.Scheme != wantScheme {
			t.Errorf("%s %s probe with scheme %q, want %q (tls.metrics %v)", role, kind, p.HTTPGet.Scheme, wantScheme, https)
		}
		rec := httptest.NewRecorder()
		hs[role].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.HTTPGet.Path, nil))
		if rec.Code == http.StatusNotFound || (p.HTTPGet.Path == "/healthz" && rec.Code != http.StatusOK) {
			t.Errorf("%s %s probe: GET %s on the operator listener answers %d", role, kind, p.HTTPGet.Path, rec.Code)
		}
	}
}

// TestOperatorHandlersAnswer404ForOtherPaths checks the check: a probe path the listener does
// not serve is caught.
func TestOperatorHandlersAnswer404ForOtherPaths(t *testing.T) {
	hs, err := operatorHandlers()
	if err != nil {
		t.Fatal(err)
	}
	for role, h := range hs {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("%s operator listener answers GET /health with %d, want 404", role, rec.Code)
		}
	}
}

func checkServiceMonitor(t *testing.T, c chartCase, r *rendered) {
	t.Helper()
	if !c.monitor {
		if len(r.monitors) != 0 {
			t.Errorf("a ServiceMonitor is rendered with serviceMonitor.enabled false")
		}
		return
	}
	if len(r.monitors) != 1 {
		t.Fatalf("%d ServiceMonitors rendered, want 1", len(r.monitors))
	}
	m := r.monitors[0]
	sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
	if err != nil || sel.Empty() {
		t.Fatalf("ServiceMonitor selector %v: %v", m.Spec.Selector, err)
	}
	if !slices.Equal(m.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaces %v, want [%s]", m.Spec.NamespaceSelector.MatchNames, namespace)
	}
	var selected []string
	for name, svc := range r.services {
		if !sel.Matches(labels.Set(svc.Labels)) {
			continue
		}
		selected = append(selected, name)
		for _, e := range m.Spec.Endpoints {
			if port(t, svc, e.Port) == 0 || e.Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %s%s on Service %s: want its metrics port and /metrics", e.Port, e.Path, name)
			}
			// With tls.metrics the operator listeners serve TLS with certificates that do not
			// name the pods' IPs, which Prometheus scrapes.
			if c.tlsMetrics && (e.Scheme != "https" || e.TLSConfig == nil || !e.TLSConfig.InsecureSkipVerify) {
				t.Errorf("ServiceMonitor endpoint %s: scheme %q, tlsConfig %+v; want https without verification (tls.metrics)", e.Port, e.Scheme, e.TLSConfig)
			}
			if !c.tlsMetrics && (e.Scheme != "" || e.TLSConfig != nil) {
				t.Errorf("ServiceMonitor endpoint %s: scheme %q, tlsConfig %+v; want plain http", e.Port, e.Scheme, e.TLSConfig)
			}
		}
	}
	slices.Sort(selected)
	full := c.release + "-sluice"
	want := []string{full + "-broker-headless", full + "-controlplane-metrics"}
	if !slices.Equal(selected, want) {
		t.Errorf("ServiceMonitor selects Services %v, want %v", selected, want)
	}
}

// TestChartReadmeDocumentsEveryValue checks that README.md names every value of values.yaml
// (as `a.b.c`), and no value that values.yaml lacks.
func TestChartReadmeDocumentsEveryValue(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	leaves := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok || len(m) == 0 {
			leaves[prefix] = true
			return
		}
		for k, sub := range m {
			walk(strings.TrimPrefix(prefix+"."+k, "."), sub)
		}
	}
	walk("", values)
	for k := range leaves {
		if !strings.Contains(string(readme), "| `"+k+"` |") {
			t.Errorf("README.md's values table has no row for `%s`", k)
		}
	}
	_, table, ok := strings.Cut(string(readme), "\n## Values\n")
	if !ok {
		t.Fatal("README.md has no ## Values section")
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		if !leaves[m[1]] {
			t.Errorf("README.md documents `%s`, which values.yaml does not have", m[1])
		}
	}
	if len(leaves) < 40 {
		t.Fatalf("found %d values in values.yaml; the walk is broken", len(leaves))
	}
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func port(t *testing.T, svc *corev1.Service, name string) int32 {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return p.Port
		}
	}
	t.Errorf("Service %s has no port %q", svc.Name, name)
	return 0
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
