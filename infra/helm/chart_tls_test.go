package helm

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/broker"
	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// tlsKeys are the keys of a server's TLS Secret, as cert-manager writes them.
var tlsKeys = []string{"tls.crt", "tls.key", "ca.crt"}

// issuerRef is a cert-manager issuer reference.
type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Group string `json:"group"`
}

// certificate is the part of cert-manager's cert-manager.io/v1 Certificate the chart uses (field
// names as in its CRD); strict decoding refuses any other field.
type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName     string `json:"secretName"`
		SecretTemplate struct {
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"secretTemplate"`
		Duration    string `json:"duration"`
		RenewBefore string `json:"renewBefore"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			Encoding       string `json:"encoding"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		Usages      []string  `json:"usages"`
		DNSNames    []string  `json:"dnsNames"`
		IPAddresses []string  `json:"ipAddresses,omitempty"`
		URIs        []string  `json:"uris"`
		IssuerRef   issuerRef `json:"issuerRef"`
	} `json:"spec"`
}

// caseNamed returns the chart case named name.
func caseNamed(t *testing.T, name string) chartCase {
	t.Helper()
	for _, c := range cases {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no chart case %q", name)
	return chartCase{}
}

// simulatedBroker is pod <statefulset>-<id> as the StatefulSet controller makes it, in zone-b:
// the template's labels and the pod-index and pod-name labels the controller adds.
func simulatedBroker(sts *appsv1.StatefulSet, id int) simulatedPod {
	name := fmt.Sprintf("%s-%d", sts.Name, id)
	return simulatedPod{
		name: name,
		labels: merge(sts.Spec.Template.Labels, map[string]string{
			"apps.kubernetes.io/pod-index":       strconv.Itoa(id),
			"statefulset.kubernetes.io/pod-name": name,
			"topology.kubernetes.io/zone":        "zone-b",
		}),
	}
}

// checkCertificateCount: one Certificate for the control plane and one per broker with
// cert-manager, none otherwise.
func checkCertificateCount(t *testing.T, c chartCase, r *rendered) {
	t.Helper()
	want := 0
	if c.tls && c.certManager {
		want = 1 + c.brokers
	}
	if len(r.certificates) != want {
		t.Errorf("%d Certificates rendered (%v), want %d", len(r.certificates), keys(r.certificates), want)
	}
}

// checkControlPlaneTLSAndExternal checks the control plane's TLS files (its Secret, mounted
// read-only), its Certificate (the names brokers and tenants call it by, and its identity), and
// its external listener and Service.
func checkControlPlaneTLSAndExternal(t *testing.T, c chartCase, r *rendered, cp *appsv1.Deployment, sts *appsv1.StatefulSet, cc controlplane.Config, bc broker.Config) {
	t.Helper()
	ct := cp.Spec.Template.Spec.Containers[0]
	secret := cp.Name + "-tls"
	checkTLSFiles(t, c, r, "controlplane", cp.Spec.Template.Spec, ct, cc.TLS, secret, c.cpExternal != "", "")
	if c.tls && c.certManager {
		hosts := []string{cp.Name, cp.Name + "." + namespace, cp.Name + "." + namespace + ".svc", cp.Name + "." + namespace + ".svc.cluster.local"}
		hosts = append(hosts, c.cpNames...)
		// The host brokers call the control plane at.
		if u := strings.TrimPrefix(bc.ControlPlane, "https://"); u != bc.ControlPlane {
			h, _, _ := net.SplitHostPort(u)
			hosts = append(hosts, h)
		} else {
			t.Errorf("broker --control-plane %q: want https:// with TLS", bc.ControlPlane)
		}
		checkCertificate(t, c, r, cp.Name, secret, "sluice://controlplane", hosts)
	}

	svc := r.services[cp.Name+"-external"]
	if c.cpExternal == "" {
		if svc != nil || cc.ExternalListenAddr != "" {
			t.Errorf("controlplane.external off, but Service %s-external rendered (%v) or --external-listen-addr %q", cp.Name, svc != nil, cc.ExternalListenAddr)
		}
		return
	}
	checkListensOn(t, "controlplane --external-listen-addr", ct, cc.ExternalListenAddr, "external")
	if svc == nil {
		t.Fatalf("no Service %s-external; got %v", cp.Name, keys(r.services))
	}
	if svc.Spec.Type != c.cpExternal {
		t.Errorf("Service %s: type %q, want %q", svc.Name, svc.Spec.Type, c.cpExternal)
	}
	cpPod := labels.Set(cp.Spec.Template.Labels)
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if len(svc.Spec.Selector) == 0 || !sel.Matches(cpPod) || sel.Matches(labels.Set(simulatedBroker(sts, c.firstID).labels)) {
		t.Errorf("Service %s's selector %v: want the control-plane pods and no broker", svc.Name, svc.Spec.Selector)
	}
	checkExternalPort(t, svc, ct)
}

// checkEachBroker starts every broker pod as the kubelet would and checks its TLS files (its own
// Secret in the projected volume, under <id>/), its Certificate, and its external listener,
// advertised address and Service.
func checkEachBroker(t *testing.T, c chartCase, r *rendered, sts *appsv1.StatefulSet, cp *appsv1.Deployment, secrets map[string]map[string]string) {
	t.Helper()
	ct := sts.Spec.Template.Spec.Containers[0]
	headless := r.services[sts.Spec.ServiceName]
	var pods []simulatedPod
	for i := 0; i < c.brokers; i++ {
		pods = append(pods, simulatedBroker(sts, c.firstID+i))
	}
	externals := 0
	for name := range r.services {
		if strings.HasPrefix(name, sts.Name+"-") && strings.HasSuffix(name, "-external") {
			externals++
		}
	}
	if want := map[bool]int{false: 0, true: c.brokers}[c.brokerExternal != ""]; externals != want {
		t.Errorf("%d broker Services %s-<id>-external rendered, want %d", externals, sts.Name, want)
	}
	for i, pod := range pods {
		id := c.firstID + i
		args, env := pod.resolve(t, ct, secrets)
		checkAcceptedBySluice(t, "broker", args, env)
		bc := parseBroker(t, args, env, c)
		if bc.ID != int32(id) {
			t.Errorf("broker pod %s runs with --id %d, want %d", pod.name, bc.ID, id)
		}
		host := fmt.Sprintf("%s.%s.%s.svc.cluster.local", pod.name, headless.Name, namespace)
		wantAdvertised := net.JoinHostPort(host, strconv.Itoa(int(port(t, headless, "api"))))
		if c.tls {
			wantAdvertised = "https://" + wantAdvertised
		}
		if got := bc.Advertised(); got != wantAdvertised {
			t.Errorf("broker %d advertises %q, want %q", id, got, wantAdvertised)
		}

		secret := fmt.Sprintf("%s-%d-tls", sts.Name, id)
		checkTLSFiles(t, c, r, fmt.Sprintf("broker %d", id), sts.Spec.Template.Spec, ct, bc.TLS, secret, c.brokerExternal != "", fmt.Sprintf("/%d/", id))

		external := strings.ReplaceAll(c.brokerExternal, "{id}", strconv.Itoa(id))
		if c.tls && c.certManager {
			hosts := []string{host}
			if external != "" {
				h, _, err := net.SplitHostPort(external)
				if err != nil {
					t.Fatalf("the case's external address %q: %v", external, err)
				}
				hosts = append(hosts, h)
			}
			for _, n := range c.brokerNames {
				hosts = append(hosts, strings.ReplaceAll(n, "{id}", strconv.Itoa(id)))
			}
			checkCertificate(t, c, r, fmt.Sprintf("%s-%d", sts.Name, id), secret, fmt.Sprintf("sluice://broker/%d", id), hosts)
		}

		svc := r.services[fmt.Sprintf("%s-%d-external", sts.Name, id)]
		if c.brokerExternal == "" {
			if bc.ExternalListenAddr != "" || bc.ExternalAdvertisedAddr != "" {
				t.Errorf("broker %d: external listener %q advertised as %q with brokers.external off", id, bc.ExternalListenAddr, bc.ExternalAdvertisedAddr)
			}
			continue
		}
		checkListensOn(t, fmt.Sprintf("broker %d --external-listen-addr", id), ct, bc.ExternalListenAddr, "external")
		if bc.ExternalAdvertisedAddr != external {
			t.Errorf("broker %d: --external-advertised-addr %q, want %q (brokers.external.advertisedAddress with its id)", id, bc.ExternalAdvertisedAddr, external)
		}
		if c.tls && bc.ExternalAdvertised() != "https://"+external {
			t.Errorf("broker %d advertises %q outside the cluster, want https://%s", id, bc.ExternalAdvertised(), external)
		}
		if svc == nil {
			t.Errorf("broker %d: no Service %s-%d-external; got %v", id, sts.Name, id, keys(r.services))
			continue
		}
		if svc.Spec.Type != c.brokerExternalType {
			t.Errorf("Service %s: type %q, want %q", svc.Name, svc.Spec.Type, c.brokerExternalType)
		}
		// It selects broker id's pod, and no other broker's nor the control plane's.
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var selected []string
		for _, p := range append(slices.Clone(pods), simulatedPod{name: cp.Name + "-x", labels: cp.Spec.Template.Labels}) {
			if sel.Matches(labels.Set(p.labels)) {
				selected = append(selected, p.name)
			}
		}
		if len(svc.Spec.Selector) == 0 || !slices.Equal(selected, []string{pod.name}) {
			t.Errorf("Service %s selects pods %v, want exactly %s", svc.Name, selected, pod.name)
		}
		for k, v := range svc.Annotations {
			if strings.Contains(v, "{id}") {
				t.Errorf("Service %s: annotation %s=%q still holds {id}", svc.Name, k, v)
			}
		}
		sp := checkExternalPort(t, svc, ct)
		if i < len(c.nodePorts) {
			if sp.NodePort != c.nodePorts[i] {
				t.Errorf("Service %s: nodePort %d, want %d", svc.Name, sp.NodePort, c.nodePorts[i])
			}
			// A node port is reached at the advertised address's port.
			if _, p, _ := net.SplitHostPort(external); svc.Spec.Type == corev1.ServiceTypeNodePort && p != strconv.Itoa(int(sp.NodePort)) {
				t.Errorf("broker %d is advertised at %s, but its Service's node port is %d", id, external, sp.NodePort)
			}
		} else if sp.NodePort != 0 {
			t.Errorf("Service %s: nodePort %d, want none", svc.Name, sp.NodePort)
		}
	}
}

// checkExternalPort checks svc has one port, targeting the container's port "external", and
// returns it.
func checkExternalPort(t *testing.T, svc *corev1.Service, ct corev1.Container) corev1.ServicePort {
	t.Helper()
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service %s has %d ports, want 1 (the external listener)", svc.Name, len(svc.Spec.Ports))
	}
	p := svc.Spec.Ports[0]
	if p.TargetPort != intstr.FromString("external") || containerPort(ct, "external") == 0 {
		t.Errorf("Service %s targets %s, want the container port named external (%d)", svc.Name, p.TargetPort.String(), containerPort(ct, "external"))
	}
	return p
}

// checkListensOn checks addr binds every interface on ct's port named portName.
func checkListensOn(t *testing.T, what string, ct corev1.Container, addr, portName string) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil || host != "0.0.0.0" || containerPort(ct, portName) == 0 || p != strconv.Itoa(int(containerPort(ct, portName))) {
		t.Errorf("%s %q, want 0.0.0.0 and container port %s (%d)", what, addr, portName, containerPort(ct, portName))
	}
}

// checkTLSFiles checks a server's TLS flags: with tls.enabled the API listener and the cluster's
// calls use tls.crt, tls.key and ca.crt of Secret secret (and so do the external listener when
// there is one and the operator listener with tls.metrics); those files come from a read-only
// volume holding that Secret's keys, at a path containing under ("" for any). Without TLS, no
// TLS flag.
func checkTLSFiles(t *testing.T, c chartCase, r *rendered, what string, spec corev1.PodSpec, ct corev1.Container, files tlsfiles.ServerFiles, secret string, external bool, under string) {
	t.Helper()
	pair := tlsfiles.Files{Cert: "tls.crt", Key: "tls.key"}
	want := tlsfiles.ServerFiles{}
	if c.tls {
		want.API = pair
		want.Cluster = tlsfiles.Files{CA: "ca.crt", Cert: "tls.crt", Key: "tls.key"}
		if external {
			want.External = pair
		}
		if c.tlsMetrics {
			want.Ops = pair
		}
	}
	available := secretKeys(c, r)
	for _, l := range []struct {
		name      string
		got, want tlsfiles.Files
	}{{"API", files.API, want.API}, {"cluster", files.Cluster, want.Cluster}, {"external", files.External, want.External}, {"operator", files.Ops, want.Ops}} {
		for _, f := range []struct{ flag, path, key string }{{"CA", l.got.CA, l.want.CA}, {"cert", l.got.Cert, l.want.Cert}, {"key", l.got.Key, l.want.Key}} {
			if f.key == "" {
				if f.path != "" {
					t.Errorf("%s: %s listener's TLS %s %s, want none", what, l.name, f.flag, f.path)
				}
				continue
			}
			if f.path == "" {
				t.Errorf("%s: %s listener has no TLS %s, want %s of Secret %s", what, l.name, f.flag, f.key, secret)
				continue
			}
			if !strings.Contains(f.path, under) {
				t.Errorf("%s: %s TLS %s %s is not under %s", what, l.name, f.flag, f.path, under)
			}
			s, k := mountedSecretKey(t, spec, ct, f.path)
			if s != secret || k != f.key {
				t.Errorf("%s: %s TLS %s %s is key %q of Secret %q, want %q of %q", what, l.name, f.flag, f.path, k, s, f.key, secret)
			}
			if !slices.Contains(available[s], k) {
				t.Errorf("%s: %s reads key %q of Secret %q, which neither a Certificate writes nor the values name as existing", what, f.path, k, s)
			}
		}
	}
}

// checkTLSSecretsDocumented: without cert-manager the operator creates the TLS Secrets, so the
// README names them and their keys.
func checkTLSSecretsDocumented(t *testing.T, c chartCase) {
	t.Helper()
	if !c.tls || c.certManager {
		return
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"`<release>-controlplane-tls`", "`<release>-broker-<id>-tls`", "`tls.crt`", "`tls.key`", "`ca.crt`"} {
		if !strings.Contains(string(readme), s) {
			t.Errorf("README.md does not name %s, which tls.certManager.enabled=false makes you create", s)
		}
	}
}

// secretKeys returns the keys of every Secret the pods may mount: rendered ones, those the
// Certificates write (cert-manager's layout), and the existing ones the values name.
func secretKeys(c chartCase, r *rendered) map[string][]string {
	out := map[string][]string{}
	for name, s := range r.secrets {
		for k := range s.Data {
			out[name] = append(out[name], k)
		}
		for k := range s.StringData {
			out[name] = append(out[name], k)
		}
	}
	for _, crt := range r.certificates {
		out[crt.Spec.SecretName] = append(out[crt.Spec.SecretName], tlsKeys...)
	}
	for name, ks := range c.existing {
		out[name] = append(out[name], ks...)
	}
	return out
}

// mountedSecretKey returns the Secret and key that the file at path of container ct comes
// from, through a secret or projected volume mounted read-only; a path on no such volume fails
// the test.
func mountedSecretKey(t *testing.T, spec corev1.PodSpec, ct corev1.Container, path string) (secret, key string) {
	t.Helper()
	for _, m := range ct.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("volume %s, holding %s, is mounted read-write", m.Name, path)
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			var sources []corev1.SecretProjection
			switch {
			case v.Secret != nil:
				sources = append(sources, corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: v.Secret.SecretName}, Items: v.Secret.Items})
			case v.Projected != nil:
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						sources = append(sources, *s.Secret)
					}
				}
			}
			for _, s := range sources {
				if len(s.Items) == 0 && !strings.Contains(rel, "/") {
					return s.Name, rel // every key, at its own name
				}
				for _, it := range s.Items {
					if it.Path == rel {
						return s.Name, it.Key
					}
				}
			}
		}
	}
	t.Errorf("container %s: %s is on no Secret volume", ct.Name, path)
	return "", ""
}

// checkCertificate checks Certificate name: it writes Secret secret, names every host (a DNS
// name or an IP address) and exactly the identity uri, allows server and client authentication
// with an ECDSA P-256 key, renews before it expires, and comes from the case's issuer.
func checkCertificate(t *testing.T, c chartCase, r *rendered, name, secret, uri string, hosts []string) {
	t.Helper()
	crt := r.certificates[name]
	if crt == nil {
		t.Errorf("no Certificate %s; got %v", name, keys(r.certificates))
		return
	}
	s := crt.Spec
	if s.SecretName != secret {
		t.Errorf("Certificate %s writes Secret %q, want %q", name, s.SecretName, secret)
	}
	if !slices.Equal(s.URIs, []string{uri}) {
		t.Errorf("Certificate %s: URI SANs %v, want exactly [%s] (the server's identity)", name, s.URIs, uri)
	}
	for _, h := range hosts {
		if net.ParseIP(h) != nil {
			if !slices.Contains(s.IPAddresses, h) {
				t.Errorf("Certificate %s: ipAddresses %v lack %s", name, s.IPAddresses, h)
			}
		} else if !slices.Contains(s.DNSNames, h) {
			t.Errorf("Certificate %s: dnsNames %v lack %s", name, s.DNSNames, h)
		}
	}
	for _, u := range []string{"server auth", "client auth"} {
		if !slices.Contains(s.Usages, u) {
			t.Errorf("Certificate %s: usages %v lack %q", name, s.Usages, u)
		}
	}
	if s.PrivateKey.Algorithm != "ECDSA" || s.PrivateKey.Size != 256 {
		t.Errorf("Certificate %s: private key %s %d, want ECDSA 256", name, s.PrivateKey.Algorithm, s.PrivateKey.Size)
	}
	d, err1 := time.ParseDuration(s.Duration)
	rb, err2 := time.ParseDuration(s.RenewBefore)
	if err1 != nil || err2 != nil || rb <= 0 || rb >= d {
		t.Errorf("Certificate %s: duration %q, renewBefore %q; want renewal before expiry", name, s.Duration, s.RenewBefore)
	}
	if s.IssuerRef != c.issuer {
		t.Errorf("Certificate %s: issuerRef %+v, want %+v", name, s.IssuerRef, c.issuer)
	}
	if s.SecretTemplate.Labels["app.kubernetes.io/instance"] != c.release {
		t.Errorf("Certificate %s: its Secret's labels %v lack the release's", name, s.SecretTemplate.Labels)
	}
}
