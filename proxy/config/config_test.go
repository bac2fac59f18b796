package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func noEnv(string) (string, bool) { return "", false }

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestExampleLoads keeps config.example.yaml from rotting: it must load with
// no environment at all, and name every key the Config type has.
func TestExampleLoads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(raw, noEnv)
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	if cfg.Store.Driver != "embedded" || cfg.Listen != "127.0.0.1:8080" {
		t.Fatalf("defaults: driver=%q listen=%q", cfg.Store.Driver, cfg.Listen)
	}
	if c := cfg.Connection("mock"); c == nil || c.URL().String() != "http://127.0.0.1:9999" {
		t.Fatalf("mock connection: %+v", c)
	}
	for _, key := range yamlKeys(Config{}) {
		if !strings.Contains(string(raw), key+":") {
			t.Errorf("config.example.yaml does not mention key %q", key)
		}
	}
}

func TestExpand(t *testing.T) {
	env := envOf(map[string]string{"A": "alpha", "EMPTY": ""})
	tests := []struct {
		in, want, err string
	}{
		{in: "x: ${A}", want: "x: alpha"},
		{in: "x: ${B:-dflt}", want: "x: dflt"},
		{in: "x: ${EMPTY:-dflt}", want: "x: dflt"},
		{in: "x: ${A:-dflt}", want: "x: alpha"},
		{in: "x: ${B:-}", want: "x: "},
		{in: "x: $${A}", want: "x: ${A}"},
		{in: "# ${MISSING}\nx: 1", want: "# ${MISSING}\nx: 1"},
		{in: "x: ${MISSING}", err: "MISSING is not set"},
	}
	for _, tt := range tests {
		got, err := Expand([]byte(tt.in), env)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Expand(%q) err = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("Expand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestValidateNamesKeys(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", "listne: x", []string{"listne: unknown key (line 1)"}},
		{"bad listen", "listen: nope", []string{"listen: want host:port"}},
		{"bad driver", "store: {driver: sqlite}", []string{"store.driver: want embedded or redis"}},
		{"redis without url", "store: {driver: redis, url: ''}", []string{"store.url: required"}},
		{"bad duration", "limits: {read_timeout: soon}", []string{`limits.read_timeout: want a duration such as 30s, got "soon"`}},
		{"not a number", "limits: {max_body_bytes: lots}", []string{`limits.max_body_bytes: want a whole number, got "lots"`}},
		{"not a list", "connections: {name: a}", []string{"connections: want a list, got a mapping"}},
		{"negative body", "limits: {max_body_bytes: -1}", []string{"limits.max_body_bytes: must not be negative"}},
		{"small upstream head", "limits: {max_upstream_header_bytes: 512}", []string{"limits.max_upstream_header_bytes: must be at least 1024, got 512"}},
		{"event window too long", "store: {event_batch_window: 2s}", []string{"store.event_batch_window: must be between 1ms and 1s"}},
		{"fsync unknown", "store: {fsync: sometimes}", []string{`store.fsync: want always or interval, got "sometimes"`}},
		{"fsync interval too long", "store: {fsync_interval: 2m}", []string{"store.fsync_interval: must be between 1ms and 1m"}},
		{"reserved name", "connections: [{name: api, provider: openai, base_url: 'http://x'}]", []string{`.name: "api" is reserved`}},
		{"reserved name openapi.json", "connections: [{name: openapi.json, provider: openai, base_url: 'http://x'}]", []string{`.name: "openapi.json" is reserved`}},
		{"duplicate name", "connections: [{name: a, provider: openai, base_url: 'http://x'}, {name: a, provider: openai, base_url: 'http://y'}]", []string{"same name as connections[0]"}},
		{"bad provider", "connections: [{name: a, provider: claude, base_url: 'http://x'}]", []string{"connections[0] (a).provider: want openai"}},
		{"bad base_url", "connections: [{name: a, provider: openai, base_url: 'ftp://x'}]", []string{"connections[0] (a).base_url: want an http"}},
		{"keys without clients", "connections: [{name: a, provider: openai, base_url: 'http://x', keys: [k]}]", []string{"connections[0] (a).keys: upstream keys need a clients list"}},
		{"clients without keys", "clients: [{key: c, tenant: t}]\nconnections: [{name: a, provider: openai, base_url: 'http://x'}]", []string{"connections[0] (a).keys: required when clients"}},
		{"bad tenant", "clients: [{key: c, tenant: 'a b'}]", []string{"clients[0].tenant"}},
		{"duplicate client key", "clients: [{key: c, tenant: a}, {key: c, tenant: b}]", []string{"clients[1].key: same key as clients[0]"}},
		{"bad on_disconnect", "connections: [{name: a, provider: openai, base_url: 'http://x', on_disconnect: later}]", []string{"on_disconnect: want abort or detach"}},
		{"traces exporter unknown", "telemetry: {traces: {exporter: jaeger}}", []string{`telemetry.traces.exporter: want none, otlp-grpc or otlp-http, got "jaeger"`}},
		{"traces sample ratio above 1", "telemetry: {traces: {exporter: otlp-grpc, sample_ratio: 1.5}}", []string{"telemetry.traces.sample_ratio: must be between 0 and 1, got 1.5"}},
		{"traces sample ratio negative", "telemetry: {traces: {sample_ratio: -0.1}}", []string{"telemetry.traces.sample_ratio: must be between 0 and 1"}},
		{"traces grpc endpoint a URL", "telemetry: {traces: {exporter: otlp-grpc, endpoint: 'http://c:4317'}}", []string{"telemetry.traces.endpoint: otlp-grpc wants host:port"}},
		{"traces http endpoint bad scheme", "telemetry: {traces: {exporter: otlp-http, endpoint: 'ftp://c:4318'}}", []string{"telemetry.traces.endpoint: want host:port or an http(s) URL"}},
		{"traces header name", "telemetry: {traces: {headers: {'a b': x}}}", []string{`telemetry.traces.headers: want header names, got "a b"`}},
		{"traces thread_id not a bool", "telemetry: {traces: {thread_id: maybe}}", []string{`telemetry.traces.thread_id: want true or false, got "maybe"`}},
		{"traces content not a bool", "telemetry: {traces: {content: sometimes}}", []string{`telemetry.traces.content: want true or false, got "sometimes"`}},
		{"traces content cap too small", "telemetry: {traces: {content: true, content_max_bytes: 10}}", []string{"telemetry.traces.content_max_bytes: must be between 64 and 1048576, got 10"}},
		{"traces content cap too large", "telemetry: {traces: {content_max_bytes: 2000000}}", []string{"telemetry.traces.content_max_bytes: must be between 64 and 1048576"}},
		{"retention not a period", "retention: {default: someday}", []string{`retention.default: want a positive duration such as 720h, or forever, got "someday"`}},
		{"retention too short", "retention: {tenants: {app-one: 30s}}", []string{"retention.tenants.app-one: must be at least 1m"}},
		{"retention bad tenant", "retention: {tenants: {'a b': 1h}}", []string{`retention.tenants: "a b" is not a tenant name`}},
		{"retention interval", "retention: {interval: 10s}", []string{"retention.interval: must be between 1m and 24h"}},
		{"connection retention", "connections: [{name: a, provider: openai, base_url: 'http://x', retention: 5s}]", []string{"connections[0] (a).retention: must be at least 1m"}},
		{"redact bad regex", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {patterns: [{name: ssn, regex: '[0-9'}]}}]", []string{"connections[0] (a).redact.patterns[0].regex: not a regular expression"}},
		{"redact empty match", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {patterns: [{name: any, regex: 'x*'}]}}]", []string{"redact.patterns[0].regex: matches the empty string"}},
		{"redact pattern name", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {patterns: [{name: '', regex: 'x'}, {name: e, regex: 'y'}, {name: e, regex: 'z'}]}}]", []string{"redact.patterns[0].name: want", "redact.patterns[2].name: same name as patterns[1]"}},
		{"redact bad path", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {paths: ['', '@reverse']}}]", []string{"redact.paths[0]: want a gjson path", "redact.paths[1]: want a gjson path"}},
		{"redact mask newline", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {paths: [x], mask: \"a\\nb\"}}]", []string{"redact.mask: must not hold control characters"}},
		{"redact mask alone", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {mask: '***'}}]", []string{"redact.mask: set without paths or patterns"}},
		{"redact unknown key", "connections: [{name: a, provider: openai, base_url: 'http://x', redact: {pattern: []}}]", []string{"redact.pattern: unknown key"}},
		{"all problems at once", "listen: nope\nstore: {driver: x}", []string{"listen:", "store.driver:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), noEnv)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestTracesConfig: traces are off by default with a sample ratio of 1,
// and the export headers decode as secrets that never print.
func TestTracesConfig(t *testing.T) {
	cfg, err := Parse(nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Telemetry.Traces; tr.On() || tr.Exporter != "none" || *tr.SampleRatio != 1 || tr.ThreadID || tr.Content || *tr.ContentMaxBytes != 8192 {
		t.Fatalf("traces defaults: %+v", tr)
	}
	cfg, err = Parse([]byte("telemetry: {traces: {exporter: otlp-http, endpoint: 'https://c:4318', insecure: true, sample_ratio: 0.25, thread_id: true, content: true, content_max_bytes: 1024, headers: {authorization: 'Bearer tok-123'}}}"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	tr := cfg.Telemetry.Traces
	if !tr.On() || tr.Endpoint != "https://c:4318" || !tr.Insecure || *tr.SampleRatio != 0.25 || !tr.ThreadID || !tr.Content || *tr.ContentMaxBytes != 1024 || tr.Headers["authorization"].Reveal() != "Bearer tok-123" {
		t.Fatalf("traces: %+v", tr)
	}
	if s := fmt.Sprintf("%v %+v", tr, tr); strings.Contains(s, "tok-123") {
		t.Fatalf("an export header printed: %s", s)
	}
}

func TestDefaults(t *testing.T) {
	cfg, err := Parse([]byte("connections: [{name: a, provider: gemini, base_url: 'https://h/base/'}]"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Connections[0]
	if c.Timeouts.Total.D() != 10*time.Minute || c.OnDisconnect != "abort" || c.OnStoreError != "fail" || !c.PersistEnabled() {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if c.URL().Path != "/base" {
		t.Fatalf("base path %q, want trailing slash trimmed", c.URL().Path)
	}
	if cfg.Store.EventBatchWindow.D() != 50*time.Millisecond {
		t.Fatalf("store.event_batch_window default %v, want 50ms", cfg.Store.EventBatchWindow.D())
	}
	if cfg.Limits.MaxBodyBytes != 8<<20 || cfg.Leases.TTL.D() != 30*time.Second {
		t.Fatalf("limits defaults: %+v", cfg.Limits)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("sk-live-123")
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s), fmt.Sprintf("%v", Client{Key: s})} {
		if strings.Contains(out, "sk-live") {
			t.Fatalf("secret leaked: %s", out)
		}
	}
	if b, _ := s.MarshalJSON(); strings.Contains(string(b), "sk-live") {
		t.Fatal("secret leaked in JSON")
	}
	if s.Fingerprint() == "" || s.Fingerprint() == Secret("other").Fingerprint() {
		t.Fatal("fingerprint not distinct")
	}
}

// TestEveryProblemAtOnce is issue 33's item 11: unknown keys used to stop
// the load at the first (`field timeout not found in type
// config.Connection`); every one is reported, with its key path, beside
// the validation errors.
func TestEveryProblemAtOnce(t *testing.T) {
	yml := `listen: nope
lisen: 127.0.0.1:1
store: {driver: embedded, pth: ./x}
limits: {read_timeout: soon}
clients: [{key: c, tenant: t, tenantt: u}]
connections:
  - name: a
    provider: claude
    base_url: http://x
    keys: [k]
    timeout: 5s
    timeouts: {firstbyte: 1s, idle: 2s}
    queue: {max_waitng: 3}
  - name: b
    provider: openai
    base_url: http://y
    keys: [k]
    rate: {rmp: 5}
`
	_, err := Parse([]byte(yml), noEnv)
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"lisen: unknown key (line 2)",
		"store.pth: unknown key (line 3)",
		`limits.read_timeout: want a duration such as 30s, got "soon" (line 4)`,
		"clients[0].tenantt: unknown key (line 5)",
		"connections[0] (a).timeout: unknown key (line 11)",
		"connections[0] (a).timeouts.firstbyte: unknown key (line 12)",
		"connections[0] (a).queue.max_waitng: unknown key (line 13)",
		"connections[1] (b).rate.rmp: unknown key (line 18)",
		`listen: want host:port, got "nope"`,
		`connections[0] (a).provider: want openai, deepseek, gemini, anthropic or openai-compatible, got "claude"`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("got %d problems, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if i >= len(lines) || lines[i] != w {
			t.Errorf("problem %d: want %q\nall:\n%v", i, w, err)
		}
	}
}

// TestKnownKeysStillDecode: the check that finds unknown keys passes every
// key of the example, pointers and lists included.
func TestKnownKeysStillDecode(t *testing.T) {
	cfg, err := Parse([]byte("store: {thread_cache_bytes: 0}\nconnections: [{name: a, provider: openai, base_url: 'http://x', persist: false, read_only_tools: [s], session_headers: [session-id], timeouts: {idle: 5s}}]"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Connections[0]
	if *cfg.Store.ThreadCacheBytes != 0 || c.PersistEnabled() || c.ReadOnlyTools[0] != "s" || c.SessionHeaders[0] != "session-id" || c.Timeouts.Idle.D() != 5*time.Second {
		t.Fatalf("decoded %+v", c)
	}
	if _, err := Parse(nil, noEnv); err != nil {
		t.Fatalf("empty file: %v", err)
	}
	if _, err := Parse([]byte("- a\n"), noEnv); err == nil || !strings.Contains(err.Error(), "must be a mapping") {
		t.Fatalf("a list as the file: %v", err)
	}
}

// TestRetentionFor: a thread is kept for the shorter of its tenant's
// period (or the default) and its connection's; forever is the longest.
func TestRetentionFor(t *testing.T) {
	cfg, err := Parse([]byte(`
retention: {default: 720h, tenants: {keep: forever, short: 24h}}
connections:
  - {name: a, provider: openai, base_url: "http://x"}
  - {name: b, provider: openai, base_url: "http://x", retention: 48h}
  - {name: c, provider: openai, base_url: "http://x", retention: forever}
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	h := func(n int) Period { return Period(time.Duration(n) * time.Hour) }
	for _, c := range []struct {
		tenant, conn string
		want         Period
	}{
		{"other", "a", h(720)}, {"other", "b", h(48)}, {"other", "c", h(720)}, {"other", "gone", h(720)},
		{"keep", "a", Forever}, {"keep", "b", h(48)}, {"keep", "c", Forever},
		{"short", "a", h(24)}, {"short", "b", h(24)},
	} {
		if got := cfg.RetentionFor(c.tenant, c.conn); got != c.want {
			t.Errorf("RetentionFor(%s, %s) = %v, want %v", c.tenant, c.conn, got, c.want)
		}
	}
	if got := cfg.ShortestRetention("keep"); got != h(48) {
		t.Errorf("ShortestRetention(keep) = %v", got)
	}
	if !cfg.RetentionOn() || cfg.Retention.Interval.D() != time.Hour {
		t.Errorf("on %v, interval %v", cfg.RetentionOn(), cfg.Retention.Interval.D())
	}
	def, _ := Parse([]byte("connections: [{name: a, provider: openai, base_url: 'http://x'}]"), noEnv)
	if def.RetentionOn() || def.RetentionFor("t", "a") != Forever {
		t.Error("retention is on by default")
	}
}
