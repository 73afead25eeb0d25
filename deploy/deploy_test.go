package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"gopkg.in/yaml.v3"

	"github.com/countersign/countersign/tools"
)

// The tests run in deploy/; the repository root is one level up.
const repoRoot = ".."

// envVars are the variables the bot reads (docs/architecture.md,
// Contracts; and the usage text of cmd/bot). The examples may set nothing else.
var envVars = []string{
	"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_URL", "SLACK_STREAMING", "SLACK_STREAM_INTERVAL",
	"REDIS_URL", "REDIS_CLUSTER", "REDIS_WAIT_REPLICAS",
	"LLM_PROVIDER", "LLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL",
	"LLM_TEMPERATURE", "LLM_REASONING_EFFORT", "LLM_THINKING_BUDGET", "LLM_IMAGES",
	"BOT_ADDR", "BOT_POLICY", "AUDIT_RETENTION", "MCP_TOKEN_KEY", "BOT_PUBLIC_URL", "LOG_LEVEL", "LOG_FORMAT",
}

// composeVars are the variables compose.yaml itself reads from .env.
var composeVars = []string{"REDIS_PASSWORD", "VERSION"}

// ---- helpers -------------------------------------------------------------------

// doc is one YAML document, decoded into maps, slices and scalars.
type doc = map[string]any

// loadDocs decodes every document of a YAML file; empty documents are
// skipped. Duplicate keys are errors (yaml.v3 rejects them).
func loadDocs(t *testing.T, file string) []doc {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var out []doc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var d doc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}

func loadDoc(t *testing.T, file string) doc {
	t.Helper()
	docs := loadDocs(t, file)
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", file, len(docs))
	}
	return docs[0]
}

// dig follows a dotted path of map keys and list indices ("a.b.0.c").
func dig(v any, p string) any {
	for _, k := range strings.Split(p, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func str(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	default:
		return fmt.Sprint(x)
	}
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func strs(v any) []string {
	var out []string
	for _, x := range list(v) {
		out = append(out, str(x))
	}
	return out
}

func labels(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := map[string]string{}
	for k, x := range m {
		out[k] = str(x)
	}
	return out
}

// selects reports whether a selector (matchLabels) picks pods with these
// labels; an empty selector selects nothing here, as a mistake.
func selects(selector, podLabels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if podLabels[k] != v {
			return false
		}
	}
	return true
}

// equalCheck is one row of a flat table: a field of a file and what it
// must be.
type equalCheck struct {
	file, field string
	got, want   any
}

func runChecks(t *testing.T, checks []equalCheck) {
	t.Helper()
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %s = %#v, want %#v", c.file, c.field, c.got, c.want)
		}
	}
}

// yamlFiles lists the YAML files under deploy/.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// ---- every file --------------------------------------------------------------

func TestYAMLFilesParse(t *testing.T) {
	files := yamlFiles(t)
	if len(files) < 10 {
		t.Fatalf("found %d YAML files under deploy/: %v", len(files), files)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("\t")) {
			t.Errorf("%s: contains a tab", f)
		}
		if len(loadDocs(t, f)) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
	}
}

// ---- Kubernetes --------------------------------------------------------------

// k8sObject is one Kubernetes object and the file it is in.
type k8sObject struct {
	file string
	doc
}

func (o k8sObject) kind() string { return str(o.doc["kind"]) }
func (o k8sObject) name() string { return str(dig(o.doc, "metadata.name")) }
func (o k8sObject) String() string {
	return fmt.Sprintf("%s (%s %s)", o.file, o.kind(), o.name())
}

// k8sObjects returns the objects of every file in k8s/ but the
// kustomization, in file order.
func k8sObjects(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []k8sObject
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for _, d := range loadDocs(t, f) {
			out = append(out, k8sObject{file: f, doc: d})
		}
	}
	return out
}

func find(objs []k8sObject, kind, name string) (k8sObject, bool) {
	for _, o := range objs {
		if o.kind() == kind && o.name() == name {
			return o, true
		}
	}
	return k8sObject{}, false
}

func mustFind(t *testing.T, objs []k8sObject, kind, name string) k8sObject {
	t.Helper()
	o, ok := find(objs, kind, name)
	if !ok {
		t.Fatalf("k8s/: no %s named %q", kind, name)
	}
	return o
}

func TestK8sObjectsWellFormed(t *testing.T) {
	objs := k8sObjects(t)
	seen := map[string]string{}
	for _, o := range objs {
		for _, field := range []string{"apiVersion", "kind", "metadata.name"} {
			if str(dig(o.doc, field)) == "" {
				t.Errorf("%s: %s is missing", o.file, field)
			}
		}
		if o.kind() != "Namespace" {
			if ns := str(dig(o.doc, "metadata.namespace")); ns != "countersign" {
				t.Errorf("%s: metadata.namespace = %q, want countersign", o, ns)
			}
		}
		id := o.kind() + "/" + o.name()
		if prev, ok := seen[id]; ok {
			t.Errorf("%s: %s is defined again (first in %s)", o.file, id, prev)
		}
		seen[id] = o.file
	}
	if _, ok := find(objs, "Namespace", "countersign"); !ok {
		t.Errorf("k8s/: no Namespace named countersign, the namespace of every object")
	}
}

func TestKustomizationListsFiles(t *testing.T) {
	const file = "k8s/kustomization.yaml"
	k := loadDoc(t, file)
	runChecks(t, []equalCheck{
		{file, "apiVersion", str(k["apiVersion"]), "kustomize.config.k8s.io/v1beta1"},
		{file, "kind", str(k["kind"]), "Kustomization"},
		{file, "namespace", str(k["namespace"]), "countersign"},
	})
	listed := strs(k["resources"])
	var want []string
	files, _ := filepath.Glob("k8s/*.yaml")
	for _, f := range files {
		b := filepath.Base(f)
		// Examples (the Secrets) are left out on purpose.
		if b != "kustomization.yaml" && !strings.HasSuffix(b, ".example.yaml") {
			want = append(want, b)
		}
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(listed))
	if !slices.Equal(got, want) {
		t.Errorf("%s: resources = %v, want the files in k8s/ but examples: %v", file, got, want)
	}
	for _, r := range listed {
		if strings.HasSuffix(r, ".example.yaml") {
			t.Errorf("%s: resources lists %s, which holds placeholder secrets", file, r)
		}
	}

	// The images entry renames the Deployment's image.
	objs := k8sObjects(t)
	dep := mustFind(t, objs, "Deployment", "countersign")
	image := str(dig(dep.doc, "spec.template.spec.containers.0.image"))
	var names []string
	for _, img := range list(k["images"]) {
		names = append(names, str(dig(img, "name")))
		if str(dig(img, "newName")) == "" {
			t.Errorf("%s: images entry %q has no newName", file, str(dig(img, "name")))
		}
	}
	if !slices.Contains(names, image) {
		t.Errorf("%s: images = %v, want an entry for the Deployment's image %q", file, names, image)
	}
}

func TestDeployment(t *testing.T) {
	objs := k8sObjects(t)
	dep := mustFind(t, objs, "Deployment", "countersign")
	f := dep.file
	spec := dig(dep.doc, "spec.template.spec")
	c := dig(spec, "containers.0")
	runChecks(t, []equalCheck{
		{f, "apiVersion", str(dep.doc["apiVersion"]), "apps/v1"},
		{f, "spec.replicas", dig(dep.doc, "spec.replicas"), 3},
		{f, "spec.strategy.type", str(dig(dep.doc, "spec.strategy.type")), "RollingUpdate"},
		{f, "spec.strategy.rollingUpdate.maxUnavailable", dig(dep.doc, "spec.strategy.rollingUpdate.maxUnavailable"), 0},
		{f, "spec.template.spec.terminationGracePeriodSeconds", dig(spec, "terminationGracePeriodSeconds"), 45},
		{f, "spec.template.spec.automountServiceAccountToken", dig(spec, "automountServiceAccountToken"), false},
		{f, "spec.template.spec.securityContext.runAsNonRoot", dig(spec, "securityContext.runAsNonRoot"), true},
		{f, "containers[0].args", strs(dig(c, "args")), []string{"serve"}},
		{f, "containers[0].ports[0].name", str(dig(c, "ports.0.name")), "http"},
		{f, "containers[0].ports[0].containerPort", dig(c, "ports.0.containerPort"), 3000},
		{f, "containers[0].readinessProbe.httpGet.path", str(dig(c, "readinessProbe.httpGet.path")), "/readyz"},
		{f, "containers[0].readinessProbe.httpGet.port", str(dig(c, "readinessProbe.httpGet.port")), "http"},
		{f, "containers[0].livenessProbe.httpGet.path", str(dig(c, "livenessProbe.httpGet.path")), "/healthz"},
		{f, "containers[0].livenessProbe.httpGet.port", str(dig(c, "livenessProbe.httpGet.port")), "http"},
		{f, "containers[0].startupProbe.httpGet.path", str(dig(c, "startupProbe.httpGet.path")), "/healthz"},
		{f, "containers[0].startupProbe.httpGet.port", str(dig(c, "startupProbe.httpGet.port")), "http"},
		{f, "containers[0].securityContext.runAsNonRoot", dig(c, "securityContext.runAsNonRoot"), true},
		{f, "containers[0].securityContext.readOnlyRootFilesystem", dig(c, "securityContext.readOnlyRootFilesystem"), true},
		{f, "containers[0].securityContext.allowPrivilegeEscalation", dig(c, "securityContext.allowPrivilegeEscalation"), false},
		{f, "containers[0].securityContext.capabilities.drop", strs(dig(c, "securityContext.capabilities.drop")), []string{"ALL"}},
	})
	if n := len(list(dig(spec, "containers"))); n != 1 {
		t.Errorf("%s: %d containers, want 1", f, n)
	}
	if str(dig(c, "image")) == "" {
		t.Errorf("%s: containers[0].image is empty", f)
	}
	for _, r := range []string{"requests.cpu", "requests.memory", "limits.cpu", "limits.memory"} {
		if str(dig(c, "resources."+r)) == "" {
			t.Errorf("%s: containers[0].resources.%s is not set", f, r)
		}
	}
	sel := labels(dig(dep.doc, "spec.selector.matchLabels"))
	if !selects(sel, labels(dig(dep.doc, "spec.template.metadata.labels"))) {
		t.Errorf("%s: spec.selector.matchLabels %v does not match the template's labels %v",
			f, sel, labels(dig(dep.doc, "spec.template.metadata.labels")))
	}

	// The drain: the bot takes up to 30 s after SIGTERM, after the preStop
	// pause; SIGKILL must come later.
	sleep, _ := dig(c, "lifecycle.preStop.sleep.seconds").(int)
	if grace, _ := dig(spec, "terminationGracePeriodSeconds").(int); grace < 30+sleep+5 {
		t.Errorf("%s: terminationGracePeriodSeconds %d leaves less than 5 s beyond the preStop sleep (%d s) and the 30 s drain", f, grace, sleep)
	}
}

// TestDeploymentReferences checks the Secrets, ConfigMaps and volumes the
// Deployment names against the objects that define them.
func TestDeploymentReferences(t *testing.T) {
	objs := k8sObjects(t)
	dep := mustFind(t, objs, "Deployment", "countersign")
	f := dep.file
	spec := dig(dep.doc, "spec.template.spec")
	c := dig(spec, "containers.0")

	// Secrets: every secretKeyRef names a key of a Secret in
	// secret.example.yaml; only SLACK_BOT_TOKEN is required.
	secretKeys := map[string][]string{}
	for _, o := range objs {
		if o.kind() != "Secret" {
			continue
		}
		if filepath.Base(o.file) != "secret.example.yaml" {
			t.Errorf("%s: a Secret outside secret.example.yaml; real secrets are not committed", o)
		}
		data, ok := dig(o.doc, "stringData").(map[string]any)
		if !ok {
			t.Errorf("%s: no stringData", o)
		}
		for k := range data {
			secretKeys[o.name()] = append(secretKeys[o.name()], k)
		}
	}
	var envNames []string
	for i, e := range list(dig(c, "env")) {
		name := str(dig(e, "name"))
		envNames = append(envNames, name)
		field := fmt.Sprintf("containers[0].env[%d] (%s)", i, name)
		ref := dig(e, "valueFrom.secretKeyRef")
		if ref == nil {
			continue
		}
		secret, key := str(dig(ref, "name")), str(dig(ref, "key"))
		keys, ok := secretKeys[secret]
		switch {
		case !ok:
			t.Errorf("%s: %s: Secret %q is not in k8s/secret.example.yaml", f, field, secret)
		case !slices.Contains(keys, key):
			t.Errorf("%s: %s: key %q is not in Secret %q of k8s/secret.example.yaml (it has %v)", f, field, key, secret, keys)
		}
		if key != name {
			t.Errorf("%s: %s reads key %q; keep key and variable names equal", f, field, key)
		}
		optional, _ := dig(ref, "optional").(bool)
		if want := name != "SLACK_BOT_TOKEN"; optional != want {
			t.Errorf("%s: %s: optional = %v, want %v", f, field, optional, want)
		}
	}
	for _, keys := range secretKeys {
		for _, k := range keys {
			if !slices.Contains(envVars, k) {
				t.Errorf("k8s/secret.example.yaml: key %s is not a variable the bot reads", k)
			}
			if !slices.Contains(envNames, k) {
				t.Errorf("k8s/secret.example.yaml: key %s is not passed to the bot by %s", k, f)
			}
		}
	}
	for _, name := range envNames {
		if !slices.Contains(envVars, name) {
			t.Errorf("%s: containers[0].env sets %s, which the bot does not read", f, name)
		}
	}

	// The environment ConfigMap.
	var config k8sObject
	for i, e := range list(dig(c, "envFrom")) {
		name := str(dig(e, "configMapRef.name"))
		o, ok := find(objs, "ConfigMap", name)
		if !ok {
			t.Errorf("%s: containers[0].envFrom[%d]: ConfigMap %q is not defined in k8s/", f, i, name)
			continue
		}
		config = o
	}
	if config.doc == nil {
		t.Fatalf("%s: containers[0].envFrom names no ConfigMap", f)
	}
	data, _ := dig(config.doc, "data").(map[string]any)
	for k := range data {
		if !slices.Contains(envVars, k) {
			t.Errorf("%s: data.%s is not a variable the bot reads", config, k)
		}
	}
	runChecks(t, []equalCheck{
		{config.file, "data.REDIS_URL", str(data["REDIS_URL"]), "redis://redis:6379/0"},
		{config.file, "data.LOG_FORMAT", str(data["LOG_FORMAT"]), "json"},
		{config.file, "data.BOT_ADDR", str(data["BOT_ADDR"]), ":3000"},
	})
	if _, ok := data["LLM_PROVIDER"]; !ok {
		t.Errorf("%s: data.LLM_PROVIDER is missing", config)
	}

	// BOT_POLICY names a file that a mounted ConfigMap provides.
	policyPath := str(data["BOT_POLICY"])
	mounted := false
	for _, m := range list(dig(c, "volumeMounts")) {
		dir := str(dig(m, "mountPath"))
		rel, ok := strings.CutPrefix(policyPath, strings.TrimSuffix(dir, "/")+"/")
		if !ok {
			continue
		}
		if ro, _ := dig(m, "readOnly").(bool); !ro {
			t.Errorf("%s: the volume mount at %s is not readOnly", f, dir)
		}
		for _, v := range list(dig(spec, "volumes")) {
			if str(dig(v, "name")) != str(dig(m, "name")) {
				continue
			}
			cmName := str(dig(v, "configMap.name"))
			cm, ok := find(objs, "ConfigMap", cmName)
			if !ok {
				t.Errorf("%s: volume %q: ConfigMap %q is not defined in k8s/", f, str(dig(v, "name")), cmName)
				continue
			}
			if _, ok := dig(cm.doc, "data").(map[string]any)[rel]; !ok {
				t.Errorf("%s: data has no key %q, which BOT_POLICY=%s reads", cm, rel, policyPath)
			}
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("%s: BOT_POLICY=%s is not inside a volume mounted from a ConfigMap in %s", config.file, policyPath, f)
	}
}

// workloads maps the pod labels and container ports of every Deployment
// and StatefulSet.
type workload struct {
	obj    k8sObject
	labels map[string]string
	ports  map[string]int // by name; numbers are keys too, as strings
}

func workloads(objs []k8sObject) []workload {
	var out []workload
	for _, o := range objs {
		if o.kind() != "Deployment" && o.kind() != "StatefulSet" {
			continue
		}
		w := workload{obj: o, labels: labels(dig(o.doc, "spec.template.metadata.labels")), ports: map[string]int{}}
		for _, c := range list(dig(o.doc, "spec.template.spec.containers")) {
			for _, p := range list(dig(c, "ports")) {
				n, _ := dig(p, "containerPort").(int)
				w.ports[strconv.Itoa(n)] = n
				if name := str(dig(p, "name")); name != "" {
					w.ports[name] = n
				}
			}
		}
		out = append(out, w)
	}
	return out
}

func TestServicesSelectWorkloads(t *testing.T) {
	objs := k8sObjects(t)
	ws := workloads(objs)
	n := 0
	for _, svc := range objs {
		if svc.kind() != "Service" {
			continue
		}
		n++
		sel := labels(dig(svc.doc, "spec.selector"))
		var matched []workload
		for _, w := range ws {
			if selects(sel, w.labels) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			t.Errorf("%s: spec.selector %v matches %d Deployments/StatefulSets, want 1", svc, sel, len(matched))
			continue
		}
		w := matched[0]
		for i, p := range list(dig(svc.doc, "spec.ports")) {
			target := str(dig(p, "targetPort"))
			if target == "" {
				target = str(dig(p, "port"))
			}
			if _, ok := w.ports[target]; !ok {
				t.Errorf("%s: spec.ports[%d].targetPort %q is not a container port of %s", svc, i, target, w.obj)
			}
		}
	}
	if n < 2 {
		t.Errorf("k8s/: %d Services, want the bot's and Redis's", n)
	}

	// The bot's Service is port 80 → http.
	bot := mustFind(t, objs, "Service", "countersign")
	runChecks(t, []equalCheck{
		{bot.file, "spec.type", str(dig(bot.doc, "spec.type")), "ClusterIP"},
		{bot.file, "spec.ports[0].port", dig(bot.doc, "spec.ports.0.port"), 80},
		{bot.file, "spec.ports[0].targetPort", str(dig(bot.doc, "spec.ports.0.targetPort")), "http"},
	})
}

func TestRedisStatefulSet(t *testing.T) {
	objs := k8sObjects(t)
	sts := mustFind(t, objs, "StatefulSet", "redis")
	f := sts.file
	c := dig(sts.doc, "spec.template.spec.containers.0")
	args := strings.Join(append(strs(dig(c, "command")), strs(dig(c, "args"))...), " ")
	runChecks(t, []equalCheck{
		{f, "spec.replicas", dig(sts.doc, "spec.replicas"), 1},
		{f, "containers[0].image has the redis:7 prefix", strings.HasPrefix(str(dig(c, "image")), "redis:7"), true},
		{f, "containers[0].args has --appendonly yes", strings.Contains(args, "--appendonly yes"), true},
		{f, "containers[0].args has --appendfsync everysec", strings.Contains(args, "--appendfsync everysec"), true},
		{f, "containers[0].args has --maxmemory-policy noeviction", strings.Contains(args, "--maxmemory-policy noeviction"), true},
		{f, "spec.template.spec.securityContext.runAsNonRoot", dig(sts.doc, "spec.template.spec.securityContext.runAsNonRoot"), true},
		{f, "volumeClaimTemplates[0].spec.resources.requests.storage", str(dig(sts.doc, "spec.volumeClaimTemplates.0.spec.resources.requests.storage")), "1Gi"},
		{f, "containers[0].volumeMounts[0].mountPath", str(dig(c, "volumeMounts.0.mountPath")), "/data"},
		{f, "containers[0].volumeMounts[0].name", str(dig(c, "volumeMounts.0.name")), str(dig(sts.doc, "spec.volumeClaimTemplates.0.metadata.name"))},
	})
	if !selects(labels(dig(sts.doc, "spec.selector.matchLabels")), labels(dig(sts.doc, "spec.template.metadata.labels"))) {
		t.Errorf("%s: spec.selector.matchLabels does not match the template's labels", f)
	}
	// The governing Service is headless.
	gov := str(dig(sts.doc, "spec.serviceName"))
	if svc, ok := find(objs, "Service", gov); !ok {
		t.Errorf("%s: spec.serviceName %q is not a Service in k8s/", f, gov)
	} else if str(dig(svc.doc, "spec.clusterIP")) != "None" {
		t.Errorf("%s: Service %q, the StatefulSet's serviceName, is not headless (clusterIP: None)", svc.file, gov)
	}
	// REDIS_URL's host is a Service in front of it.
	if _, ok := find(objs, "Service", "redis"); !ok {
		t.Errorf("k8s/: no Service named redis, which REDIS_URL=redis://redis:6379/0 names")
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	objs := k8sObjects(t)
	pdb := mustFind(t, objs, "PodDisruptionBudget", "countersign")
	dep := mustFind(t, objs, "Deployment", "countersign")
	runChecks(t, []equalCheck{
		{pdb.file, "apiVersion", str(pdb.doc["apiVersion"]), "policy/v1"},
		{pdb.file, "spec.minAvailable", dig(pdb.doc, "spec.minAvailable"), 2},
	})
	if min, _ := dig(pdb.doc, "spec.minAvailable").(int); min >= dig(dep.doc, "spec.replicas").(int) {
		t.Errorf("%s: spec.minAvailable %d leaves no replica to evict: node drains would block", pdb.file, min)
	}
	if !selects(labels(dig(pdb.doc, "spec.selector.matchLabels")), labels(dig(dep.doc, "spec.template.metadata.labels"))) {
		t.Errorf("%s: spec.selector.matchLabels does not select the Deployment's pods", pdb.file)
	}
}

func TestNetworkPolicies(t *testing.T) {
	objs := k8sObjects(t)
	ws := workloads(objs)
	matches := func(sel map[string]string) int {
		n := 0
		for _, w := range ws {
			if selects(sel, w.labels) {
				n++
			}
		}
		return n
	}
	for _, np := range objs {
		if np.kind() != "NetworkPolicy" {
			continue
		}
		if sel := labels(dig(np.doc, "spec.podSelector.matchLabels")); matches(sel) != 1 {
			t.Errorf("%s: spec.podSelector %v selects %d workloads, want 1", np, sel, matches(sel))
		}
		for i, rule := range list(dig(np.doc, "spec.ingress")) {
			for j, from := range list(dig(rule, "from")) {
				if sel := labels(dig(from, "podSelector.matchLabels")); matches(sel) != 1 {
					t.Errorf("%s: spec.ingress[%d].from[%d].podSelector %v selects %d workloads, want 1", np, i, j, sel, matches(sel))
				}
			}
		}
	}
}

func TestIngress(t *testing.T) {
	objs := k8sObjects(t)
	ing := mustFind(t, objs, "Ingress", "countersign")
	svc := mustFind(t, objs, "Service", "countersign")
	var svcPorts []string
	for _, p := range list(dig(svc.doc, "spec.ports")) {
		svcPorts = append(svcPorts, str(dig(p, "name")), str(dig(p, "port")))
	}
	paths := list(dig(ing.doc, "spec.rules.0.http.paths"))
	if len(paths) == 0 {
		t.Fatalf("%s: spec.rules[0].http.paths is empty", ing.file)
	}
	var prefixes []string
	for i, p := range paths {
		field := fmt.Sprintf("spec.rules[0].http.paths[%d]", i)
		if name := str(dig(p, "backend.service.name")); name != "countersign" {
			t.Errorf("%s: %s.backend.service.name = %q, want countersign", ing.file, field, name)
		}
		port := str(dig(p, "backend.service.port.name"))
		if port == "" {
			port = str(dig(p, "backend.service.port.number"))
		}
		if !slices.Contains(svcPorts, port) {
			t.Errorf("%s: %s.backend.service.port %q is not a port of Service countersign %v", ing.file, field, port, svcPorts)
		}
		if str(dig(p, "pathType")) == "Prefix" {
			prefixes = append(prefixes, str(dig(p, "path")))
		}
	}
	// Kubernetes Prefix paths match whole path elements.
	for _, want := range []string{"/slack/commands", "/slack/interactions", "/slack/events"} {
		ok := slices.ContainsFunc(prefixes, func(pre string) bool {
			pre = strings.TrimSuffix(pre, "/")
			return want == pre || strings.HasPrefix(want, pre+"/")
		})
		if !ok {
			t.Errorf("%s: no Prefix path routes %s (prefixes %v)", ing.file, want, prefixes)
		}
	}
	if len(list(dig(ing.doc, "spec.tls"))) == 0 {
		t.Errorf("%s: spec.tls is empty: Slack calls only HTTPS URLs", ing.file)
	}
}

// ---- the policy ----------------------------------------------------------------

func TestPolicyExample(t *testing.T) {
	const file = "policy.example.yaml"
	p, err := tools.LoadPolicy(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	// Every tool the policy lists exists.
	if _, err := tools.NewRegistry(p, tools.Builtins(p, nil)...); err != nil {
		t.Errorf("%s: %v", file, err)
	}
	rule, ok := p.RuleFor(tools.HTTPRequestName)
	if !ok {
		t.Fatalf("%s: tools.%s is missing", file, tools.HTTPRequestName)
	}
	runChecks(t, []equalCheck{
		{file, "tools.http_request.approval", rule.NeedsApproval(), true},
		{file, "tools.http_request.approvers is set", len(rule.Approvers) > 0, true},
		{file, "tools.http_request.self_approval", rule.SelfApproval, false},
		{file, "tools.http_request.expires_after", rule.ExpiresAfter, 24 * time.Hour},
		{file, "tools.http_request.allow_hosts is set", len(rule.AllowHosts) > 0, true},
	})

	// The Kubernetes ConfigMap carries the same policy.
	cm := mustFind(t, k8sObjects(t), "ConfigMap", "countersign-policy")
	data, _ := dig(cm.doc, "data").(map[string]any)
	inK8s, err := tools.ParsePolicy([]byte(str(data["policy.yaml"])))
	if err != nil {
		t.Fatalf("%s: data.policy.yaml: %v", cm.file, err)
	}
	if !reflect.DeepEqual(inK8s, p) {
		t.Errorf("%s: data.policy.yaml = %+v, want the policy of %s: %+v", cm.file, inK8s.Tools, file, p.Tools)
	}
}

// ---- Slack ---------------------------------------------------------------------

// scopeFor maps the Slack Web API methods the bot may call to the bot
// scope each needs; "" means none. A method the code calls that is not
// here fails TestSlackScopesCoverCode until its scope is added.
var scopeFor = map[string]string{
	"AuthTestContext":            "",
	"OpenViewContext":            "", // a trigger_id authorizes it
	"UpdateViewContext":          "",
	"PushViewContext":            "",
	"PostMessageContext":         "chat:write",
	"UpdateMessageContext":       "chat:write",
	"PostEphemeralContext":       "chat:write",
	"DeleteMessageContext":       "chat:write",
	"GetUserGroupMembersContext": "usergroups:read",
	"GetUserGroupsContext":       "usergroups:read",
	"GetUserInfoContext":         "users:read",
	"GetUsersInfoContext":        "users:read",
	"GetPermalinkContext":        "",
	"OpenConversationContext":    "im:write", // a direct message to an approver (notify_dm)
	"AddReactionContext":         "reactions:write",
	// Streamed answers; assistant.threads.setStatus takes chat:write
	// (or the older assistant:write).
	"StartStreamContext":               "chat:write",
	"AppendStreamContext":              "chat:write",
	"StopStreamContext":                "chat:write",
	"SetAssistantThreadsStatusContext": "chat:write",

	// The Home tab; conversations.members, which takes channels:read for
	// public channels, and groups:read, im:read and mpim:read for the
	// other kinds of conversation.
	"PublishViewContext":            "",
	"GetUsersInConversationContext": "channels:read",

	// A retried /agent looks for the root message it may have posted
	// before a crash: conversations.history, channels:history for public
	// channels (groups:history and the others for the other kinds).
	"GetConversationHistoryContext": "channels:history",
	// A card posted before a crash and not recorded is looked for in its
	// thread: conversations.replies, the same history scopes.
	"GetConversationRepliesContext": "channels:history",
}

// eventScope is the scope each bot event needs.
var eventScope = map[string]string{
	"app_home_opened":  "",
	"app_mention":      "app_mentions:read",
	"message.channels": "channels:history",
	"message.groups":   "groups:history",
	"message.im":       "im:history",
	"message.mpim":     "mpim:history",
	// A user group's or a channel's members changed (slackdir: the marks
	// that make every replica ask Slack again).
	"subteam_members_changed": "usergroups:read",
	"subteam_updated":         "usergroups:read",
	"member_joined_channel":   "channels:read",
	"member_left_channel":     "channels:read",
}

// The bot's scopes: exactly these, each justified in the manifest.
var botScopes = []string{
	"app_mentions:read", "channels:history", "channels:read", "chat:write", "commands",
	"files:read", "groups:history", "groups:read", "im:history", "im:read", "im:write", "mpim:history", "mpim:read", "usergroups:read",
}

// slackCalls returns the *slack.Client methods (the ...Context forms)
// that the non-test code of the packages in dirs calls, by name.
func slackCalls(t *testing.T, dirs ...string) map[string][]string {
	t.Helper()
	client := map[string]bool{}
	ty := reflect.TypeOf(&slack.Client{})
	for i := range ty.NumMethod() {
		if name := ty.Method(i).Name; strings.HasSuffix(name, "Context") {
			client[name] = true
		}
	}
	calls := map[string][]string{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && client[sel.Sel.Name] {
					pos := fset.Position(call.Pos())
					calls[sel.Sel.Name] = append(calls[sel.Sel.Name], fmt.Sprintf("%s:%d", filepath.ToSlash(pos.Filename), pos.Line))
				}
				return true
			})
		}
	}
	return calls
}

func TestSlackScopesCoverCode(t *testing.T) {
	calls := slackCalls(t, "handlers", "cmd/bot", "runner")
	if len(calls["PostMessageContext"]) == 0 {
		t.Fatalf("found no chat.postMessage call in handlers/: the scan is broken (calls: %v)", calls)
	}
	t.Logf("Slack Web API methods the code calls: %v", slices.Sorted(maps.Keys(calls)))
	need := map[string][]string{"commands": {"the /agent slash command"},
		// Not a Web API method: package slackfiles downloads the images
		// attached to requests from the file host with the bot token.
		"files:read": {"the images people attach (slackfiles)"}}
	for method, where := range calls {
		scope, ok := scopeFor[method]
		if !ok {
			t.Errorf("the code calls slack %s (%s): add the scope it needs to scopeFor and the Slack manifests", method, strings.Join(where, ", "))
			continue
		}
		if scope != "" {
			need[scope] = append(need[scope], method)
		}
	}
	for event, scope := range eventScope {
		if scope != "" {
			need[scope] = append(need[scope], event+" events")
		}
	}
	for _, file := range []string{"slack-app-manifest.yaml", "slack-app-manifest.socket-mode.yaml"} {
		have := strs(dig(loadDoc(t, file), "oauth_config.scopes.bot"))
		for scope, why := range need {
			if !slices.Contains(have, scope) {
				t.Errorf("%s: oauth_config.scopes.bot lacks %s, needed for %s", file, scope, strings.Join(why, ", "))
			}
		}
	}
}

func TestSlackManifests(t *testing.T) {
	tests := []struct {
		file       string
		socketMode bool
	}{
		{"slack-app-manifest.yaml", false},
		{"slack-app-manifest.socket-mode.yaml", true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f := tt.file
			m := loadDoc(t, f)
			checkKeys(t, f, "", m, manifestKeys)
			cmd := slashCommand(m, "/agent")
			runChecks(t, []equalCheck{
				{f, "_metadata.major_version", dig(m, "_metadata.major_version"), 1},
				{f, "features.bot_user.display_name", str(dig(m, "features.bot_user.display_name")), "Countersign"},
				{f, "features.bot_user.always_online", dig(m, "features.bot_user.always_online"), true},
				{f, "features.slash_commands has /agent", cmd != nil, true},
				{f, "features.slash_commands[/agent].should_escape", dig(cmd, "should_escape"), false},
				{f, "oauth_config.scopes.bot", slices.Sorted(slices.Values(strs(dig(m, "oauth_config.scopes.bot")))), botScopes},
				{f, "settings.event_subscriptions.bot_events", slices.Sorted(slices.Values(strs(dig(m, "settings.event_subscriptions.bot_events")))),
					[]string{"app_home_opened", "app_mention", "member_joined_channel", "member_left_channel", "message.channels", "message.groups",
						"message.im", "message.mpim", "subteam_members_changed", "subteam_updated"}},
				{f, "features.app_home.home_tab_enabled", dig(m, "features.app_home.home_tab_enabled"), true},
				{f, "settings.interactivity.is_enabled", dig(m, "settings.interactivity.is_enabled"), true},
				{f, "settings.socket_mode_enabled", dig(m, "settings.socket_mode_enabled"), tt.socketMode},
				{f, "settings.token_rotation_enabled", dig(m, "settings.token_rotation_enabled"), false},
			})
			// Slack's limits (its manifest schema).
			lengths := []struct {
				field    string
				min, max int
			}{
				{"display_information.name", 1, 35},
				{"display_information.description", 1, 140},
				{"features.bot_user.display_name", 1, 80},
			}
			for _, l := range lengths {
				if n := len([]rune(str(dig(m, l.field)))); n < l.min || n > l.max {
					t.Errorf("%s: %s is %d characters, want %d to %d", f, l.field, n, l.min, l.max)
				}
			}
			if c := str(dig(m, "display_information.background_color")); c != "" && !regexp.MustCompile(`^#[0-9a-fA-F]{3}([0-9a-fA-F]{3})?$`).MatchString(c) {
				t.Errorf("%s: display_information.background_color %q is not #rgb or #rrggbb", f, c)
			}
			for i, c := range list(dig(m, "features.slash_commands")) {
				if n := len(str(dig(c, "description"))); n < 1 || n > 2000 {
					t.Errorf("%s: features.slash_commands[%d].description is %d characters, want 1 to 2000", f, i, n)
				}
				if h, ok := dig(c, "usage_hint").(string); ok && (len(h) < 1 || len(h) > 1000) {
					t.Errorf("%s: features.slash_commands[%d].usage_hint is %d characters, want 1 to 1000", f, i, len(h))
				}
			}

			urls := []struct{ field, path string }{
				{"features.slash_commands[/agent].url", "/slack/commands"},
				{"settings.event_subscriptions.request_url", "/slack/events"},
				{"settings.interactivity.request_url", "/slack/interactions"},
			}
			for _, u := range urls {
				var raw string
				if u.field == urls[0].field {
					raw = str(dig(cmd, "url"))
				} else {
					raw = str(dig(m, u.field))
				}
				if tt.socketMode {
					if raw != "" {
						t.Errorf("%s: %s = %q; Socket Mode apps have no request URLs", f, u.field, raw)
					}
					continue
				}
				p, err := url.Parse(raw)
				if err != nil || p.Scheme != "https" || p.Host == "" || p.Path != u.path {
					t.Errorf("%s: %s = %q, want https://<host>%s", f, u.field, raw, u.path)
				}
			}
		})
	}
}

// slashCommand returns the manifest's entry for a slash command.
func slashCommand(m doc, name string) any {
	for _, c := range list(dig(m, "features.slash_commands")) {
		if str(dig(c, "command")) == name {
			return c
		}
	}
	return nil
}

// manifestKeys are the keys Slack's manifest schema (version 1) allows
// where these manifests use them; Slack rejects others. nil: any value.
var manifestKeys = map[string]any{
	"_metadata":           map[string]any{"major_version": nil, "minor_version": nil},
	"display_information": map[string]any{"name": nil, "description": nil, "background_color": nil, "long_description": nil},
	"features": map[string]any{
		"app_home":       map[string]any{"home_tab_enabled": nil, "messages_tab_enabled": nil, "messages_tab_read_only_enabled": nil},
		"bot_user":       map[string]any{"display_name": nil, "always_online": nil},
		"slash_commands": []any{map[string]any{"command": nil, "url": nil, "description": nil, "usage_hint": nil, "should_escape": nil}},
	},
	"oauth_config": map[string]any{
		"scopes":        map[string]any{"bot": nil, "user": nil},
		"redirect_urls": nil,
	},
	"settings": map[string]any{
		"event_subscriptions": map[string]any{"request_url": nil, "bot_events": nil, "user_events": nil},
		"interactivity":       map[string]any{"is_enabled": nil, "request_url": nil, "message_menu_options_url": nil},
		"org_deploy_enabled":  nil, "socket_mode_enabled": nil, "token_rotation_enabled": nil,
	},
}

// checkKeys reports keys of v that allowed does not list.
func checkKeys(t *testing.T, file, at string, v, allowed any) {
	t.Helper()
	switch a := allowed.(type) {
	case map[string]any:
		m, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: %s is not a mapping", file, strings.TrimPrefix(at, "."))
			return
		}
		for k, x := range m {
			sub, ok := a[k]
			if !ok {
				t.Errorf("%s: %s.%s is not a key Slack's manifest allows here", file, strings.TrimPrefix(at, "."), k)
				continue
			}
			checkKeys(t, file, at+"."+k, x, sub)
		}
	case []any:
		for i, x := range list(v) {
			checkKeys(t, file, fmt.Sprintf("%s[%d]", at, i), x, a[0])
		}
	}
}

// ---- Compose -------------------------------------------------------------------

func TestCompose(t *testing.T) {
	const f = "compose.yaml"
	c := loadDoc(t, f)
	redis := dig(c, "services.redis")
	bot := dig(c, "services.bot")
	if redis == nil || bot == nil {
		t.Fatalf("%s: want services redis and bot", f)
	}
	redisCmd := strings.Join(strs(dig(redis, "command")), " ")
	runChecks(t, []equalCheck{
		{f, "services.redis.image has the redis:7 prefix", strings.HasPrefix(str(dig(redis, "image")), "redis:7"), true},
		{f, "services.redis.command has --appendonly yes", strings.Contains(redisCmd, "--appendonly yes"), true},
		{f, "services.redis.command has --appendfsync everysec", strings.Contains(redisCmd, "--appendfsync everysec"), true},
		{f, "services.redis.command has --maxmemory-policy noeviction", strings.Contains(redisCmd, "--maxmemory-policy noeviction"), true},
		{f, "services.redis.healthcheck runs redis-cli ping", strings.Contains(strings.Join(strs(dig(redis, "healthcheck.test")), " "), "redis-cli ping"), true},
		{f, "services.redis.restart", str(dig(redis, "restart")), "unless-stopped"},
		{f, "services.bot.environment.REDIS_URL", str(dig(bot, "environment.REDIS_URL")), "redis://:${REDIS_PASSWORD:-}@redis:6379/0"},
		{f, "services.redis.command has --requirepass ${REDIS_PASSWORD:-}", strings.Contains(redisCmd, "--requirepass ${REDIS_PASSWORD:-}"), true},
		{f, "services.redis.image is a pinned release", regexp.MustCompile(`^redis:7\.\d+\.\d+`).MatchString(str(dig(redis, "image"))), true},
		{f, "services.bot.depends_on.redis.condition", str(dig(bot, "depends_on.redis.condition")), "service_healthy"},
		{f, "services.bot.restart", str(dig(bot, "restart")), "unless-stopped"},
		{f, "services.bot.env_file", str(dig(bot, "env_file")), ".env"},
	})

	// Redis keeps its data in a named volume.
	var redisVolume string
	for _, v := range strs(dig(redis, "volumes")) {
		if src, dst, _ := strings.Cut(v, ":"); dst == "/data" || strings.HasPrefix(dst, "/data:") {
			redisVolume = src
		}
	}
	if _, ok := dig(c, "volumes").(map[string]any)[redisVolume]; redisVolume == "" || !ok {
		t.Errorf("%s: services.redis.volumes mounts no named volume (a top-level volumes: entry) at /data", f)
	}

	// The build: context is the repository root, the Dockerfile exists.
	ctx := filepath.Join(filepath.Dir(f), str(dig(bot, "build.context")))
	if _, err := os.Stat(filepath.Join(ctx, "go.mod")); err != nil {
		t.Errorf("%s: services.bot.build.context %q is not the repository root: %v", f, str(dig(bot, "build.context")), err)
	}
	dockerfile := filepath.Join(ctx, str(dig(bot, "build.dockerfile")))
	if _, err := os.Stat(dockerfile); err != nil {
		t.Errorf("%s: services.bot.build.dockerfile: %v", f, err)
	}

	// The env file is the example's copy.
	if _, err := os.Stat(str(dig(bot, "env_file")) + ".example"); err != nil {
		t.Errorf("%s: services.bot.env_file: no example to copy it from: %v", f, err)
	}
	if ignore, _ := os.ReadFile(".gitignore"); !slices.Contains(strings.Fields(string(ignore)), ".env") {
		t.Errorf("deploy/.gitignore does not ignore .env, which holds real tokens")
	}

	// Port 3000 is published.
	published := false
	for _, p := range strs(dig(bot, "ports")) {
		if strings.HasSuffix(p, ":3000") {
			published = true
		}
	}
	if !published {
		t.Errorf("%s: services.bot.ports %v does not publish container port 3000", f, strs(dig(bot, "ports")))
	}

	// The policy file is mounted read-only where BOT_POLICY points.
	policy := str(dig(bot, "environment.BOT_POLICY"))
	mounted := false
	for _, v := range strs(dig(bot, "volumes")) {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || parts[1] != policy {
			continue
		}
		mounted = true
		if len(parts) < 3 || parts[2] != "ro" {
			t.Errorf("%s: services.bot.volumes %q is not read-only (:ro)", f, v)
		}
		if _, err := tools.LoadPolicy(filepath.Join(filepath.Dir(f), parts[0])); err != nil {
			t.Errorf("%s: services.bot.volumes %q: %v", f, v, err)
		}
	}
	if policy == "" || !mounted {
		t.Errorf("%s: services.bot.environment.BOT_POLICY %q is not a file mounted into the bot", f, policy)
	}

	// Docker's default stop timeout (10 s) would cut the 30 s drain short.
	grace, err := time.ParseDuration(str(dig(bot, "stop_grace_period")))
	if err != nil || grace < 35*time.Second {
		t.Errorf("%s: services.bot.stop_grace_period = %q, want at least 35s (the bot drains for up to 30 s)", f, str(dig(bot, "stop_grace_period")))
	}
	for k := range labels(dig(bot, "environment")) {
		if !slices.Contains(envVars, k) {
			t.Errorf("%s: services.bot.environment.%s is not a variable the bot reads", f, k)
		}
	}
}

// ---- Dockerfile ----------------------------------------------------------------

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line       int
	cmd, args  string
	stageIndex int
}

func parseDockerfile(t *testing.T, file string) []instruction {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var out []instruction
	var cur strings.Builder
	start, stage := 0, -1
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(line, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = n
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instruction{line: start, cmd: cmd, args: strings.TrimSpace(args), stageIndex: stage})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	const f = "Dockerfile"
	ins := parseDockerfile(t, f)
	args := map[string]string{}
	var froms []instruction
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			for _, a := range strings.Fields(in.args) {
				if k, v, ok := strings.Cut(a, "="); ok {
					args[k] = v
				}
			}
		case "FROM":
			froms = append(froms, in)
		}
	}
	if len(froms) < 2 {
		t.Fatalf("%s: %d FROM lines, want a multi-stage build (at least 2)", f, len(froms))
	}
	last := len(froms) - 1
	final := func(cmd string) []instruction {
		var out []instruction
		for _, in := range ins {
			if in.cmd == cmd && in.stageIndex == last {
				out = append(out, in)
			}
		}
		return out
	}

	// The builder's Go matches go.mod.
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod: no go directive")
	}
	builder := os.Expand(froms[0].args, func(k string) string { return args[k] })
	if !regexp.MustCompile(`(^|\s)golang:` + regexp.QuoteMeta(string(goVersion[1])) + `(\b|-)`).MatchString(builder) {
		t.Errorf("%s:%d: the build stage is FROM %q, want golang:%s (go.mod's version)", f, froms[0].line, builder, goVersion[1])
	}

	// The build.
	var build string
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w `, "-X main.version=${VERSION}", "./cmd/bot"} {
		if !strings.Contains(build, want) {
			t.Errorf("%s: the go build RUN %q lacks %s", f, build, want)
		}
	}

	// The final stage: distroless (see the Dockerfile's comment on probes),
	// with the binary from the build stage where ENTRYPOINT runs it.
	if base := froms[last].args; !strings.Contains(base, "gcr.io/distroless/static") {
		t.Errorf("%s:%d: the final stage is FROM %q, want gcr.io/distroless/static (small, no shell)", f, froms[last].line, base)
	}
	buildStage := ""
	if _, name, ok := strings.Cut(froms[0].args, " AS "); ok {
		buildStage = strings.TrimSpace(name)
	}
	copied := false
	for _, in := range final("COPY") {
		if strings.HasPrefix(in.args, "--from="+buildStage+" ") && strings.HasSuffix(in.args, " /bot") {
			copied = true
		}
	}
	if buildStage == "" || !copied {
		t.Errorf("%s: the final stage does not COPY --from=<build stage> the binary to /bot", f)
	}
	user := final("USER")
	if len(user) == 0 {
		t.Errorf("%s: the final stage has no USER: it would run as root", f)
	} else if u, _, _ := strings.Cut(user[len(user)-1].args, ":"); u == "root" || u == "0" {
		t.Errorf("%s:%d: USER %s is root", f, user[len(user)-1].line, user[len(user)-1].args)
	}
	var exposed, env []string
	for _, in := range final("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	for _, in := range final("ENV") {
		env = append(env, strings.Fields(in.args)...)
	}
	var entry, cmd string
	if e := final("ENTRYPOINT"); len(e) > 0 {
		entry = e[len(e)-1].args
	}
	if c := final("CMD"); len(c) > 0 {
		cmd = c[len(c)-1].args
	}
	runChecks(t, []equalCheck{
		{f, "EXPOSE", exposed, []string{"3000"}},
		{f, "ENV BOT_ADDR=:3000", slices.Contains(env, "BOT_ADDR=:3000"), true},
		{f, "ENV LOG_FORMAT=json", slices.Contains(env, "LOG_FORMAT=json"), true},
		{f, "ENTRYPOINT", entry, `["/bot"]`},
		{f, "CMD", cmd, `["serve"]`},
	})
	for _, in := range final("HEALTHCHECK") {
		if strings.Contains(froms[last].args, "distroless") {
			t.Errorf("%s:%d: HEALTHCHECK in a distroless image, which has no shell or HTTP client to run it", f, in.line)
		}
	}
}

// TestDockerignore checks that the ignore file next to the Dockerfile
// keeps what the build needs in the context.
func TestDockerignore(t *testing.T) {
	const f = "Dockerfile.dockerignore"
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			if strings.HasPrefix(l, "!") {
				t.Fatalf("%s: exceptions (!) are not understood by this test; extend it", f)
			}
			patterns = append(patterns, l)
		}
	}
	excluded := func(p string) string {
		elems := strings.Split(p, "/")
		for _, pat := range patterns {
			anyDepth := strings.HasPrefix(pat, "**/")
			pat = strings.TrimPrefix(pat, "**/")
			n := len(strings.Split(pat, "/"))
			for i := 0; i+n <= len(elems); i++ {
				if ok, _ := path.Match(pat, strings.Join(elems[i:i+n], "/")); ok {
					return pat
				}
				if !anyDepth {
					break
				}
			}
		}
		return ""
	}
	// The build reads go.mod, go.sum and the non-test sources, including
	// embedded files.
	needed := []string{"go.mod", "go.sum"}
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || rel == "deploy" {
				return filepath.SkipDir
			}
			return nil
		}
		if (strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go")) || strings.HasSuffix(rel, ".tmpl") {
			needed = append(needed, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(needed, "cmd/bot/main.go") {
		t.Fatalf("the walk of the repository found no cmd/bot/main.go: %v", needed)
	}
	for _, p := range needed {
		if pat := excluded(p); pat != "" {
			t.Errorf("%s: pattern %q leaves %s, which the build needs, out of the context", f, pat, p)
		}
	}
	for _, p := range []string{".git/HEAD", "deploy/compose.yaml", "handlers/server_test.go", "handlers/testdata/x.json"} {
		if excluded(p) == "" {
			t.Errorf("%s: %s is sent with the build context", f, p)
		}
	}
}

// ---- the environment -----------------------------------------------------------

// envExample returns the variables .env.example names, set or commented
// out, with their values.
func envExample(t *testing.T) (set, commented map[string]string) {
	t.Helper()
	data, err := os.ReadFile(".env.example")
	if err != nil {
		t.Fatal(err)
	}
	set, commented = map[string]string{}, map[string]string{}
	line := regexp.MustCompile(`^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$`)
	for i, l := range strings.Split(string(data), "\n") {
		m := line.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		target := set
		if m[1] != "" {
			target = commented
		}
		if _, dup := target[m[2]]; dup {
			t.Errorf(".env.example:%d: %s is listed twice", i+1, m[2])
		}
		target[m[2]] = m[3]
	}
	return set, commented
}

func TestEnvExample(t *testing.T) {
	set, commented := envExample(t)
	for k := range set {
		if !slices.Contains(envVars, k) {
			t.Errorf(".env.example: %s is not a variable the bot reads", k)
		}
	}
	for k := range commented {
		if !slices.Contains(envVars, k) && !slices.Contains(composeVars, k) {
			t.Errorf(".env.example: %s (commented out) is not a variable the bot or compose.yaml reads", k)
		}
	}
	for _, k := range envVars {
		_, a := set[k]
		_, b := commented[k]
		if !a && !b {
			t.Errorf(".env.example: %s is not listed", k)
		}
	}
	// Secrets are placeholders.
	for k, v := range set {
		if (strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") || strings.HasSuffix(k, "_KEY")) && !strings.Contains(v, "replace-me") {
			t.Errorf(".env.example: %s=%q does not look like a placeholder (want one containing replace-me)", k, v)
		}
	}

	// The bot's own usage text lists the same variables.
	main, err := os.ReadFile(filepath.Join(repoRoot, "cmd/bot/main.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, usage, ok := strings.Cut(string(main), "Environment:")
	usage, _, ok2 := strings.Cut(usage, "(see README")
	if !ok || !ok2 {
		t.Fatalf("cmd/bot/main.go: found no \"Environment: … (see README)\" list in the usage text; update this test")
	}
	for _, k := range regexp.MustCompile(`[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+`).FindAllString(usage, -1) {
		if !slices.Contains(envVars, k) {
			t.Errorf("cmd/bot/main.go lists %s in its usage text: add it to envVars here and to .env.example", k)
		}
	}
}

// ---- Prometheus ------------------------------------------------------------------

// The scrape example scrapes /metrics, and its Kubernetes job keeps the
// pods and the port that deploy/k8s/deployment.yaml names.
func TestPrometheusScrapeExample(t *testing.T) {
	const f = "prometheus.yaml"
	doc := loadDoc(t, f)
	jobs := list(dig(doc, "scrape_configs"))
	if len(jobs) != 2 {
		t.Fatalf("%s: %d scrape jobs, want the static and the Kubernetes one", f, len(jobs))
	}
	for _, j := range jobs {
		if p := str(dig(j, "metrics_path")); p != "/metrics" {
			t.Errorf("%s: job %s scrapes %q, want /metrics", f, str(dig(j, "job_name")), p)
		}
	}
	relabel := fmt.Sprint(dig(jobs[1], "relabel_configs"))
	dep, err := os.ReadFile(filepath.Join("k8s", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"app.kubernetes.io/name: countersign", "name: http"} {
		if !strings.Contains(string(dep), want) {
			t.Errorf("k8s/deployment.yaml lacks %q, which %s relies on", want, f)
		}
	}
	if !strings.Contains(relabel, "regex:countersign") || !strings.Contains(relabel, "regex:http") {
		t.Errorf("%s: the Kubernetes job keeps %s; want the countersign pods' http port", f, relabel)
	}
}

// The Compose policy works for one person trying it alone, and its header
// says how to name approvers and how to apply a change.
func TestPolicyCompose(t *testing.T) {
	const file = "policy.compose.yaml"
	p, err := tools.LoadPolicy(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if _, err := tools.NewRegistry(p, tools.Builtins(p, nil)...); err != nil {
		t.Errorf("%s: %v", file, err)
	}
	rule, ok := p.RuleFor(tools.HTTPRequestName)
	if !ok {
		t.Fatalf("%s: tools.%s is missing", file, tools.HTTPRequestName)
	}
	runChecks(t, []equalCheck{
		{file, "tools.http_request.approval", rule.NeedsApproval(), true},
		{file, "tools.http_request.approvers is anyone", len(rule.Approvers) == 0, true},
		{file, "tools.http_request.self_approval", rule.SelfApproval, true},
	})
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"approvers: [", "self_approval: false", "restart bot", "up -d"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s: the header does not say %q", file, want)
		}
	}
	compose, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "./"+file+":/etc/countersign/policy.yaml") {
		t.Errorf("compose.yaml does not mount %s as the bot's policy", file)
	}
}
