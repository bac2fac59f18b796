package main

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"go.yaml.in/yaml/v3"
)

// No Docker engine or Kubernetes cluster runs here, so the deployment
// files (deploy/compose.yaml, deploy/helm/chronicle) are checked against
// the binary they deploy: the config they give it parses, the binary
// started with their config and environment (on a real Redis) serves, and
// their health checks pass against it.

// startWithEnv starts the chronicle binary on the config text with env
// added to the environment, and returns its address.
func startWithEnv(t *testing.T, cfg string, env ...string) string {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--config", writeConfig(t, cfg))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var log []string
	for sc.Scan() {
		log = append(log, sc.Text())
		if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return m[1]
		}
	}
	t.Fatalf("chronicle did not start:\n%s", strings.Join(log, "\n"))
	return ""
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestComposeFile: deploy/compose.yaml runs Redis with an append-only
// file and chronicle on it; the environment it gives chronicle names
// variables the image's config (config.example.yaml) reads, and with it
// that config is a Redis store with its spool on the data volume; the
// binary started so (on a real Redis) passes the compose health check,
// run as written, and fails it once stopped.
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Build       struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	redis, chron := c.Services["redis"], c.Services["chronicle"]
	if !slices.Contains(redis.Command, "--appendonly") || len(redis.Healthcheck.Test) == 0 {
		t.Errorf("redis service: command %v, health check %v", redis.Command, redis.Healthcheck.Test)
	}
	if chron.DependsOn["redis"].Condition != "service_healthy" {
		t.Errorf("chronicle does not wait for a healthy redis: %+v", chron.DependsOn)
	}
	if _, err := os.Stat(filepath.Join("../../deploy", chron.Build.Context, chron.Build.Dockerfile)); err != nil {
		t.Errorf("build context %q, Dockerfile %q: %v", chron.Build.Context, chron.Build.Dockerfile, err)
	}
	image, err := os.ReadFile("../../config.example.yaml") // the image's /etc/chronicle/config.yaml
	if err != nil {
		t.Fatal(err)
	}
	env := []string{}
	for k, v := range chron.Environment {
		if !strings.Contains(string(image), "${"+k) {
			t.Errorf("compose sets %s, which the image's config does not read", k)
		}
		env = append(env, k+"="+os.Expand(v, func(string) string { return "" }))
	}
	lookup := func(k string) (string, bool) {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
	cfg, err := config.Parse(image, lookup)
	if err != nil {
		t.Fatalf("the image's config with the compose environment: %v", err)
	}
	if cfg.Store.Driver != "redis" || cfg.Store.URL.Reveal() != "redis://redis:6379/0" || !strings.HasPrefix(cfg.Store.Spool.Path, "/data/") {
		t.Errorf("store %s at %s, spool at %s", cfg.Store.Driver, cfg.Store.URL.Reveal(), cfg.Store.Spool.Path)
	}
	hasData := false
	for _, v := range chron.Volumes {
		hasData = hasData || strings.HasSuffix(v, ":/data")
	}
	if !hasData {
		t.Errorf("chronicle's /data (the spool) is on no volume: %v", chron.Volumes)
	}

	// The same config and environment, on a real Redis and a free port.
	rd := redistest.Start(t)
	addr := startWithEnv(t, string(image), append(env, "CHRONICLE_REDIS_URL="+rd.URL(),
		"CHRONICLE_LISTEN=127.0.0.1:0", "CHRONICLE_SPOOL_PATH="+t.TempDir())...)
	hc := chron.Healthcheck.Test
	if len(hc) < 3 || hc[0] != "CMD" || hc[1] != "/usr/local/bin/chronicle" || hc[2] != "healthcheck" {
		t.Fatalf("chronicle's health check runs %v, not the image's own binary", hc)
	}
	args := slices.Clone(hc[3:])
	i := slices.Index(args, "--url")
	if i < 0 || !strings.HasSuffix(args[i+1], "/readyz") {
		t.Fatalf("chronicle's health check does not ask /readyz: %v", hc)
	}
	args[i+1] = strings.Replace(args[i+1], "127.0.0.1:8080", addr, 1)
	if out, err := exec.Command(binary, append([]string{"healthcheck"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("compose health check against the running chronicle: %v %s", err, out)
	}
	rd.Kill()
	if out, err := exec.Command(binary, append([]string{"healthcheck"}, args...)...).CombinedOutput(); err == nil {
		t.Fatalf("compose health check passed with Redis down: %s", out)
	}
}

// TestHelmChart: the chart's default config (values.yaml) parses with the
// environment its Deployment gives, every ${VAR} it needs is given, the
// ConfigMap is mounted where CHRONICLE_CONFIG points and the spool under
// its volume; the binary started with that config and environment (on a
// real Redis) answers the liveness and readiness probes' paths with 200.
func TestHelmChart(t *testing.T) {
	dir := "../../deploy/helm/chronicle"
	for _, f := range []string{"Chart.yaml", "values.yaml"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	var values struct {
		Config string `yaml:"config"`
		Redis  struct {
			URL string `yaml:"url"`
		} `yaml:"redis"`
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	deployment, err := os.ReadFile(filepath.Join(dir, "templates/deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dep := string(deployment)
	probe := func(kind string) string {
		m := regexp.MustCompile(kind + `:\s*\n\s*httpGet:\s*\n\s*path: (\S+)`).FindStringSubmatch(dep)
		if m == nil {
			t.Fatalf("the Deployment has no %s httpGet probe", kind)
		}
		return m[1]
	}
	live, ready := probe("livenessProbe"), probe("readinessProbe")
	if live != "/healthz" || ready != "/readyz" {
		t.Errorf("probes: liveness %s, readiness %s", live, ready)
	}
	given := map[string]bool{}
	for _, m := range regexp.MustCompile(`- name: ([A-Z_]+)`).FindAllStringSubmatch(dep, -1) {
		given[m[1]] = true
	}
	// Every ${VAR} without a default in the config (outside comments) is
	// in the Deployment's env.
	var uncommented []string
	for _, l := range strings.Split(values.Config, "\n") {
		if t := strings.TrimSpace(l); !strings.HasPrefix(t, "#") {
			uncommented = append(uncommented, l)
		}
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+)(:-[^}]*)?\}`).FindAllStringSubmatch(strings.Join(uncommented, "\n"), -1) {
		if m[2] == "" && !given[m[1]] {
			t.Errorf("the config needs ${%s}, which the Deployment does not set", m[1])
		}
	}
	for _, want := range []string{"CHRONICLE_CONFIG", "CHRONICLE_LISTEN", "CHRONICLE_REDIS_URL", "CHRONICLE_ADMIN_TOKEN"} {
		if !given[want] {
			t.Errorf("the Deployment does not set %s", want)
		}
	}
	if !strings.Contains(dep, "value: /etc/chronicle/config.yaml") || !strings.Contains(dep, "mountPath: /etc/chronicle\n") ||
		!strings.Contains(dep, "value: 0.0.0.0:8080") || !strings.Contains(dep, "containerPort: 8080") {
		t.Error("the Deployment's CHRONICLE_CONFIG, config mount, listen address or port disagree")
	}
	env := map[string]string{"CHRONICLE_LISTEN": "0.0.0.0:8080", "CHRONICLE_REDIS_URL": values.Redis.URL}
	cfg, err := config.Parse([]byte(values.Config), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("the chart's default config: %v", err)
	}
	const spoolMount = "/var/lib/chronicle"
	if cfg.Store.Driver != "redis" || !strings.HasPrefix(cfg.Store.Spool.Path, spoolMount+"/") || !strings.Contains(dep, "mountPath: "+spoolMount+"\n") {
		t.Errorf("store %s, spool at %s, not under the spool volume %s", cfg.Store.Driver, cfg.Store.Spool.Path, spoolMount)
	}

	rd := redistest.Start(t)
	spool := t.TempDir()
	addr := startWithEnv(t, strings.ReplaceAll(values.Config, spoolMount, spool),
		"CHRONICLE_LISTEN=127.0.0.1:0", "CHRONICLE_REDIS_URL="+rd.URL())
	for _, path := range []string{live, ready} {
		if code := getStatus(t, "http://"+addr+path); code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
	}

	// helm is no Debian package, and CI does not build it: where one is on
	// PATH, the chart must also lint clean and render, with the config in
	// the ConfigMap as values.yaml has it.
	t.Run("helm", func(t *testing.T) {
		helm, err := exec.LookPath("helm")
		if err != nil {
			t.Skip("helm not on PATH (go install helm.sh/helm/v3/cmd/helm@v3.21.4 to run this)")
		}
		if out, err := exec.Command(helm, "lint", "--strict", dir).CombinedOutput(); err != nil {
			t.Fatalf("helm lint --strict: %v\n%s", err, out)
		}
		out, err := exec.Command(helm, "template", "chronicle", dir).Output()
		if err != nil {
			t.Fatalf("helm template: %v", err)
		}
		for _, doc := range strings.Split(string(out), "\n---\n") {
			var cm struct {
				Kind string            `yaml:"kind"`
				Data map[string]string `yaml:"data"`
			}
			if yaml.Unmarshal([]byte(doc), &cm) == nil && cm.Kind == "ConfigMap" {
				if strings.TrimRight(cm.Data["config.yaml"], "\n") != strings.TrimRight(values.Config, "\n") {
					t.Errorf("the rendered ConfigMap's config differs from values.yaml's:\n%s", cm.Data["config.yaml"])
				}
				return
			}
		}
		t.Error("helm template rendered no ConfigMap")
	})
}

// TestPrometheusRules: deploy/prometheus/chronicle-rules.yaml passes
// `promtool check rules`, and every chronicle series its expressions read
// is one proxy/internal/metrics declares. Without promtool (Debian's
// prometheus package; scripts/setup installs it) the promtool half skips,
// except under CI=true where it fails.
func TestPrometheusRules(t *testing.T) {
	const rules = "../../deploy/prometheus/chronicle-rules.yaml"
	raw, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var declared strings.Builder
	files, _ := filepath.Glob("../../proxy/internal/metrics/*.go")
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			b, _ := os.ReadFile(f)
			declared.Write(b)
		}
	}
	name := regexp.MustCompile(`(^|[^:a-z_])((chronicle|gen_ai)_[a-z_]+)`)
	n := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			for _, m := range name.FindAllStringSubmatch(r.Expr, -1) {
				n++
				base := m[2]
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !strings.Contains(declared.String(), `"`+base+`"`) {
					t.Errorf("the rules read %s, which chronicle does not export", m[2])
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d series in the rules", n)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found on PATH; CI=true requires it (scripts/setup: apt-get install prometheus)")
		}
		t.Skip("promtool not found on PATH (apt-get install prometheus)")
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}
