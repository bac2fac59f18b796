// Package config owns chronicle's configuration: the YAML file format, the
// expansion of ${VAR} and ${VAR:-default} from the environment, defaults, and
// validation that reports every problem at once, each naming its key.
//
// A Config is loaded once at start and then only read; it is safe for
// concurrent use by readers. Secrets (client keys, upstream keys, the admin
// token) are held as Secret values, which never print their contents.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/chronicle-proxy/chronicle/adapters/formats"
)

// Secret is a credential from the config. It prints as [redacted] in logs,
// errors and JSON, so no code path can leak one by formatting it.
type Secret string

// String implements fmt.Stringer without revealing the secret.
func (s Secret) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer without revealing the secret.
func (s Secret) GoString() string { return "[redacted]" }

// LogValue implements slog.LogValuer without revealing the secret.
func (s Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalJSON implements json.Marshaler without revealing the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// Reveal returns the secret itself, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }

// Fingerprint identifies a secret in logs without revealing it: the first
// eight hex digits of its SHA-256.
func (s Secret) Fingerprint() string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// Duration is a time.Duration written in YAML as a Go duration string ("30s").
type Duration time.Duration

// UnmarshalYAML parses a duration string such as "30s" or "10m".
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("want a duration such as 30s")
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, got %q", s)
	}
	*d = Duration(v)
	return nil
}

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Provider names an upstream's wire dialect; adapters/formats holds the
// list of them (formats.Providers) and what each speaks.
type Provider string

// providerList is the providers a connection may give, for an error.
func providerList() string {
	ps := formats.Providers
	return strings.Join(ps[:len(ps)-1], ", ") + " or " + ps[len(ps)-1]
}

// Config is the whole configuration file.
type Config struct {
	Listen string `yaml:"listen"`
	// Procs is GOMAXPROCS, the threads running Go code at once; 0 picks it
	// (see cmd/chronicle's procs.go and config.example.yaml).
	Procs       int          `yaml:"procs"`
	Store       Store        `yaml:"store"`
	Admin       Admin        `yaml:"admin"`
	Limits      Limits       `yaml:"limits"`
	Leases      Leases       `yaml:"leases"`
	Log         Log          `yaml:"log"`
	Telemetry   Telemetry    `yaml:"telemetry"`
	Clients     []Client     `yaml:"clients"`
	Connections []Connection `yaml:"connections"`
	// Retention is how long threads are kept (retention.go).
	Retention Retention `yaml:"retention"`
}

// Store selects and configures the storage backend.
type Store struct {
	Driver string `yaml:"driver"` // embedded | redis
	Path   string `yaml:"path"`   // embedded: directory holding the key space (kv/) and blobs/
	// Fsync is when the embedded store's acknowledged writes reach the
	// disk: "interval" (default) acknowledges once the write-ahead log
	// holds them in the operating system and syncs it every
	// FsyncInterval; "always" syncs before acknowledging (group commit).
	Fsync          string   `yaml:"fsync"`
	FsyncInterval  Duration `yaml:"fsync_interval"`  // interval: how often the log is synced (default 1s)
	URL            Secret   `yaml:"url"`             // redis: URL (may carry a password, hence Secret)
	EventRetention Duration `yaml:"event_retention"` // how long a finished run's event log is kept
	// EventBatchWindow is how long a stream's events gather before one
	// store write takes them all: the most a follower on another replica
	// lags, and what a crash can lose of the replayable log (the finished
	// run keeps the whole answer either way).
	EventBatchWindow Duration `yaml:"event_batch_window"`
	// ThreadCacheBytes bounds the transcripts a replica keeps in memory so
	// that a turn on a thread it last wrote reads and parses only what is
	// new. nil: 64 MiB; 0 turns the cache off.
	ThreadCacheBytes *int64 `yaml:"thread_cache_bytes"`
	// OpTimeout bounds each store operation of a request; one that runs
	// past it counts as the store being unreachable (on_store_error, the
	// spool). Default 5s.
	OpTimeout Duration `yaml:"op_timeout"`
	// Spool is the local journal that keeps a turn's finish while the
	// store cannot take it.
	Spool Spool `yaml:"spool"`
	// Encryption seals stored content at rest (store/sealed).
	Encryption Encryption `yaml:"encryption"`
}

// Encryption configures encryption at rest: content is sealed with
// AES-256-GCM under per-tenant data keys, which the key-encryption key
// (KEK) here wraps. Off by default.
type Encryption struct {
	Enabled bool `yaml:"enabled"`
	// Key is the current KEK: 32 bytes in base64 (or 64 hex digits);
	// KeyFile a file holding it instead. One of the two.
	Key     Secret `yaml:"key"`
	KeyFile string `yaml:"key_file"`
	// KeyID names the current KEK (default "1"); every data key records
	// the id it is wrapped under.
	KeyID string `yaml:"key_id"`
	// PreviousKeys are older KEKs, still used to unwrap data keys wrapped
	// under them (until chronicle keys rewrap has moved them all).
	PreviousKeys []PreviousKey `yaml:"previous_keys"`
	// Plaintext is what a stored value that is not sealed (written before
	// encryption was turned on) does when read: read (default, as it is)
	// or refuse (an error).
	Plaintext string `yaml:"plaintext"`
}

// PreviousKey is an older key-encryption key.
type PreviousKey struct {
	ID      string `yaml:"id"`
	Key     Secret `yaml:"key"`
	KeyFile string `yaml:"key_file"`
}

// NamedKey is a decoded key-encryption key.
type NamedKey struct {
	ID  string
	Key []byte
}

var kekIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// KEKs decodes the current key-encryption key and the previous ones
// (reading key files), each error naming its config key and never the
// key's value.
func (e Encryption) KEKs() (current NamedKey, previous []NamedKey, err error) {
	decode := func(key, idKey, id string, val Secret, file string) (NamedKey, error) {
		if !kekIDPattern.MatchString(id) {
			return NamedKey{}, fmt.Errorf("%s: %q: want 1-64 of [A-Za-z0-9._-]", idKey, id)
		}
		raw := strings.TrimSpace(val.Reveal())
		switch {
		case raw != "" && file != "":
			return NamedKey{}, fmt.Errorf("%skey and %skey_file: give one of them, not both", key, key)
		case file != "":
			b, err := os.ReadFile(file)
			if err != nil {
				return NamedKey{}, fmt.Errorf("%skey_file: %v", key, err)
			}
			raw, key = strings.TrimSpace(string(b)), key+"key_file"
		case raw == "":
			return NamedKey{}, fmt.Errorf("%skey: required (or %skey_file): 32 bytes in base64, e.g. from `openssl rand -base64 32`", key, key)
		default:
			key += "key"
		}
		k, err := decodeKEK(raw)
		if err != nil {
			return NamedKey{}, fmt.Errorf("%s: %v", key, err)
		}
		return NamedKey{ID: id, Key: k}, nil
	}
	if current, err = decode("store.encryption.", "store.encryption.key_id", e.KeyID, e.Key, e.KeyFile); err != nil {
		return NamedKey{}, nil, err
	}
	seen := map[string]bool{current.ID: true}
	for i, p := range e.PreviousKeys {
		key := fmt.Sprintf("store.encryption.previous_keys[%d].", i)
		k, err := decode(key, key+"id", p.ID, p.Key, p.KeyFile)
		if err != nil {
			return NamedKey{}, nil, err
		}
		if seen[k.ID] {
			return NamedKey{}, nil, fmt.Errorf("store.encryption.previous_keys[%d].id: key id %q is given twice", i, k.ID)
		}
		seen[k.ID] = true
		previous = append(previous, k)
	}
	return current, previous, nil
}

// decodeKEK reads a 32-byte key written in base64 (standard or URL, padded
// or not) or hex.
func decodeKEK(s string) ([]byte, error) {
	if len(s) == 64 {
		if b, err := hex.DecodeString(s); err == nil {
			return b, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != 32 {
				return nil, fmt.Errorf("want 32 bytes (AES-256), the value decodes to %d", len(b))
			}
			return b, nil
		}
	}
	return nil, errors.New("want 32 bytes in base64 (or 64 hex digits); the value is neither")
}

// Spool configures the local write-ahead journal (store/spool).
type Spool struct {
	// Enabled: nil means on for the redis driver, off for embedded
	// (whose spool would share the store's disk).
	Enabled *bool  `yaml:"enabled"`
	Path    string `yaml:"path"` // directory of the journal; default ./spool
	// MaxBytes caps the journal; past it a turn is kept nowhere and its
	// client is told. Default 1 GiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// Fsync: always (each record on disk before the client sees the
	// answer's end; survives power loss) or never (handed to the OS;
	// survives a crash of chronicle, not of the machine).
	Fsync string `yaml:"fsync"`
}

// On reports whether the spool is in use.
func (s Spool) On() bool { return s.Enabled != nil && *s.Enabled }

// Admin configures the operator-facing endpoints.
type Admin struct {
	Token Secret `yaml:"token"` // bearer token for /admin and /ui; empty disables them
	Pprof bool   `yaml:"pprof"` // serve /debug/pprof behind the admin token
}

// Limits bounds what one request or connection may cost.
type Limits struct {
	MaxBodyBytes   int `yaml:"max_body_bytes"`
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxUpstreamHeaderBytes bounds an upstream response's status line and
	// headers; it is the size of the read buffer each upstream connection
	// holds while its answer streams.
	MaxUpstreamHeaderBytes int      `yaml:"max_upstream_header_bytes"`
	MaxSSELineBytes        int      `yaml:"max_sse_line_bytes"`
	MaxConnections         int      `yaml:"max_connections"`
	ReadTimeout            Duration `yaml:"read_timeout"`
	WriteTimeout           Duration `yaml:"write_timeout"`
	IdleTimeout            Duration `yaml:"idle_timeout"`
	Heartbeat              Duration `yaml:"heartbeat"`
	ShutdownTimeout        Duration `yaml:"shutdown_timeout"`
	// Mode is where gates and rate limits live: local (this process) or
	// shared (the Redis store, across every replica that shares it).
	Mode string `yaml:"mode"`
	// PerTenant limits every tenant, across all connections.
	PerTenant TenantLimits `yaml:"per_tenant"`
}

// TenantLimits bound one tenant.
type TenantLimits struct {
	RPM        int64 `yaml:"rpm"`
	TPM        int64 `yaml:"tpm"`
	MaxStreams int   `yaml:"max_streams"`
}

// Leases configures thread and run leases.
type Leases struct {
	TTL Duration `yaml:"ttl"`
}

// Log configures the process log.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
}

// Telemetry configures what chronicle reports about itself beside
// /metrics.
type Telemetry struct {
	Traces Traces `yaml:"traces"`
}

// Traces configures OpenTelemetry traces: a span per proxied request,
// exported over OTLP.
type Traces struct {
	// Exporter is none (the default: no spans are made at all),
	// otlp-grpc or otlp-http.
	Exporter string `yaml:"exporter"`
	// Endpoint is the OTLP collector: host:port for otlp-grpc, a URL or
	// host:port for otlp-http. Empty: the exporter's own default (or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT).
	Endpoint string `yaml:"endpoint"`
	// Insecure sends without TLS.
	Insecure bool `yaml:"insecure"`
	// Headers go with every export (a collector's or vendor's token):
	// secrets, never logged.
	Headers map[string]Secret `yaml:"headers"`
	// SampleRatio is the share of traces chronicle starts that it keeps
	// (0 to 1; nil: 1); a request whose caller sent a traceparent follows
	// the caller's sampling decision.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ThreadID adds the thread id (chronicle.thread.id) to each span: off
	// by default, since a thread id a client chose may say who it is.
	ThreadID bool `yaml:"thread_id"`
	// Content puts the messages the client sent and the answer's text on
	// each generation's span (gen_ai.input.messages,
	// gen_ai.output.messages): off by default, since they are what users
	// wrote. Never headers or keys.
	Content bool `yaml:"content"`
	// ContentMaxBytes caps the text of each of those attributes (nil:
	// 8192).
	ContentMaxBytes *int `yaml:"content_max_bytes"`
}

// On reports whether traces are exported.
func (t Traces) On() bool { return t.Exporter != "" && t.Exporter != "none" }

// Client maps one client key to a tenant.
type Client struct {
	Key    Secret `yaml:"key"`
	Tenant string `yaml:"tenant"`
}

// Connection is one upstream account or endpoint, addressed by the first
// path segment.
type Connection struct {
	Name          string   `yaml:"name"`
	Provider      Provider `yaml:"provider"`
	BaseURL       string   `yaml:"base_url"`
	Keys          []Secret `yaml:"keys"`
	Timeouts      Timeouts `yaml:"timeouts"`
	MaxConcurrent int      `yaml:"max_concurrent"`
	Queue         Queue    `yaml:"queue"`
	Rate          Rate     `yaml:"rate"`
	Retry         Retry    `yaml:"retry"`
	ReadOnlyTools []string `yaml:"read_only_tools"`
	// SessionHeaders are request headers set to the thread's session id,
	// for upstreams that route or cache by a header (ChatGPT backend:
	// session-id; OpenCode: x-opencode-session). The body field
	// (prompt_cache_key) follows the provider.
	SessionHeaders []string `yaml:"session_headers"`
	// ExpandPreviousResponse makes chronicle replace a Responses request's
	// previous_response_id with the stored items of its thread, for
	// upstreams that keep no state (store: false, or compatible servers).
	ExpandPreviousResponse bool `yaml:"expand_previous_response"`
	// MaxUpstreamConns caps open connections to the upstream; 0 = 65536.
	MaxUpstreamConns int `yaml:"max_upstream_conns"`
	// SnapshotStreaming stores a streaming run's text so far on the run
	// (its "partial"), at most every SnapshotInterval.
	SnapshotStreaming bool     `yaml:"snapshot_streaming"`
	SnapshotInterval  Duration `yaml:"snapshot_interval"`
	// Audit widens what a run records.
	Audit Audit `yaml:"audit"`
	// Redact masks parts of every stored copy of a turn (never what goes
	// upstream).
	Redact       Redact `yaml:"redact"`
	OnDisconnect string `yaml:"on_disconnect"`  // abort | detach
	OnStoreError string `yaml:"on_store_error"` // fail | pass
	Persist      *bool  `yaml:"persist"`        // default true
	// Retention shortens how long this connection's threads are kept
	// (retention.go); nil: the tenant's period alone.
	Retention *Period `yaml:"retention"`

	baseURL *url.URL
}

// Audit configures what a connection's run records keep.
type Audit struct {
	// UpstreamBody keeps the full request body sent upstream (after
	// restoration, repair and injection) on each run.
	UpstreamBody bool `yaml:"upstream_body"`
}

// Redact names what is masked before a connection's turns are stored:
// messages, the stored answer and upstream body, the event log.
type Redact struct {
	// Paths are gjson paths relative to each message; their values are
	// replaced whole by the mask.
	Paths []string `yaml:"paths"`
	// Patterns are regular expressions (Go RE2 syntax); their matches in
	// any string value are replaced by the mask.
	Patterns []RedactPattern `yaml:"patterns"`
	// Mask replaces what a rule matches (default "[REDACTED]").
	Mask string `yaml:"mask"`
}

// RedactPattern is a named regular expression; the name is what a run's
// redactions list records.
type RedactPattern struct {
	Name  string `yaml:"name"`
	Regex string `yaml:"regex"`
}

// Queue bounds the wait for a slot of a connection's FIFO gate.
type Queue struct {
	MaxWaiting int      `yaml:"max_waiting"`
	Timeout    Duration `yaml:"timeout"`
}

// Rate limits a connection per minute.
type Rate struct {
	RPM int64 `yaml:"rpm"`
	TPM int64 `yaml:"tpm"`
	// DefaultMaxTokens is the output reserved for TPM when a request sets
	// no max_tokens.
	DefaultMaxTokens int64 `yaml:"default_max_tokens"`
}

// Retry retries upstream 429 and 5xx answers, only before any byte went to
// the client.
type Retry struct {
	MaxAttempts int      `yaml:"max_attempts"` // 1 = no retry
	BaseBackoff Duration `yaml:"base_backoff"`
	MaxBackoff  Duration `yaml:"max_backoff"`
}

// Timeouts are a stream's own clocks; the server's write timeout does not
// apply to streams.
type Timeouts struct {
	FirstByte Duration `yaml:"first_byte"` // until the upstream's response headers
	Idle      Duration `yaml:"idle"`       // longest silence between two events
	Total     Duration `yaml:"total"`      // whole upstream exchange
}

// PersistEnabled reports whether the connection stores threads and runs.
func (c *Connection) PersistEnabled() bool { return c.Persist == nil || *c.Persist }

// URL is the parsed base_url.
func (c *Connection) URL() *url.URL { return c.baseURL }

// ReservedNames are first path segments that belong to chronicle itself and
// cannot name a connection.
var ReservedNames = []string{"api", "admin", "healthz", "readyz", "metrics", "ui", "debug", "openapi.json"}

var connectionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Load reads, expands, decodes, defaults and validates the file at path.
func Load(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(raw, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse expands ${VAR} references with lookup, decodes the YAML strictly
// (unknown keys are errors), applies defaults and validates. The error
// names every problem at once, each with its key path: unknown keys and
// values of the wrong kind first, in the file's order, then what
// validation found.
func Parse(raw []byte, lookup func(string) (string, bool)) (*Config, error) {
	expanded, err := Expand(raw, lookup)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(expanded)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) { // an empty file means all defaults
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	// Every unknown key and misshapen value, with its key path; the tree
	// left is one the decode below takes whole.
	errs := checkTree(&doc)
	var cfg Config
	if doc.Kind != 0 {
		if err := doc.Decode(&cfg); err != nil {
			errs = append(errs, fmt.Errorf("invalid YAML: %w", err))
		}
	}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &cfg, nil
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// Expand replaces ${VAR} with the variable's value and ${VAR:-default} with
// the value or, when the variable is unset or empty, the default. A ${VAR}
// that is unset is an error naming the variable; `$$` stays a literal `$`.
// Comment lines are left alone, so a commented-out example needs no variable.
func Expand(raw []byte, lookup func(string) (string, bool)) ([]byte, error) {
	var missing []string
	lines := bytes.SplitAfter(raw, []byte("\n"))
	var out bytes.Buffer
	out.Grow(len(raw))
	for _, line := range lines {
		if t := bytes.TrimLeft(line, " \t"); len(t) > 0 && t[0] == '#' {
			out.Write(line)
			continue
		}
		line = bytes.ReplaceAll(line, []byte("$$"), []byte("\x00"))
		line = varRef.ReplaceAllFunc(line, func(m []byte) []byte {
			sub := varRef.FindSubmatch(m)
			name := string(sub[1])
			val, ok := lookup(name)
			if (!ok || val == "") && len(sub[2]) > 0 {
				return sub[3]
			}
			if !ok {
				missing = append(missing, name)
				return nil
			}
			return []byte(val)
		})
		out.Write(bytes.ReplaceAll(line, []byte("\x00"), []byte("$")))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("environment variable %s is not set (use ${%s:-default} for an optional one)", strings.Join(missing, ", "), missing[0])
	}
	return out.Bytes(), nil
}

func (c *Config) applyDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Retention.Interval == 0 {
		c.Retention.Interval = Duration(time.Hour)
	}
	if c.Store.Driver == "" {
		c.Store.Driver = "embedded"
	}
	if c.Store.Path == "" {
		c.Store.Path = "./data"
	}
	if c.Store.EventRetention == 0 {
		c.Store.EventRetention = Duration(24 * time.Hour)
	}
	if c.Store.Fsync == "" {
		c.Store.Fsync = "interval"
	}
	if c.Store.FsyncInterval == 0 {
		c.Store.FsyncInterval = Duration(time.Second)
	}
	if c.Store.EventBatchWindow == 0 {
		c.Store.EventBatchWindow = Duration(50 * time.Millisecond)
	}
	if c.Store.OpTimeout == 0 {
		c.Store.OpTimeout = Duration(5 * time.Second)
	}
	if c.Store.Spool.Enabled == nil {
		on := c.Store.Driver == "redis"
		c.Store.Spool.Enabled = &on
	}
	if c.Store.Spool.Path == "" {
		c.Store.Spool.Path = "./spool"
	}
	if c.Store.Spool.MaxBytes == 0 {
		c.Store.Spool.MaxBytes = 1 << 30
	}
	if c.Store.Encryption.KeyID == "" {
		c.Store.Encryption.KeyID = "1"
	}
	if c.Store.Encryption.Plaintext == "" {
		c.Store.Encryption.Plaintext = "read"
	}
	if c.Store.Spool.Fsync == "" {
		c.Store.Spool.Fsync = "always"
	}
	if c.Store.ThreadCacheBytes == nil {
		n := int64(64 << 20)
		c.Store.ThreadCacheBytes = &n
	}
	l := &c.Limits
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = 8 << 20
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxUpstreamHeaderBytes == 0 {
		l.MaxUpstreamHeaderBytes = 8 << 10
	}
	if l.MaxSSELineBytes == 0 {
		l.MaxSSELineBytes = 4 << 20
	}
	if l.ReadTimeout == 0 {
		l.ReadTimeout = Duration(30 * time.Second)
	}
	if l.WriteTimeout == 0 {
		l.WriteTimeout = Duration(30 * time.Second)
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = Duration(120 * time.Second)
	}
	if l.Heartbeat == 0 {
		l.Heartbeat = Duration(15 * time.Second)
	}
	if l.ShutdownTimeout == 0 {
		l.ShutdownTimeout = Duration(30 * time.Second)
	}
	if c.Leases.TTL == 0 {
		c.Leases.TTL = Duration(30 * time.Second)
	}
	if c.Limits.Mode == "" {
		c.Limits.Mode = "local"
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
	}
	if c.Telemetry.Traces.Exporter == "" {
		c.Telemetry.Traces.Exporter = "none"
	}
	if c.Telemetry.Traces.SampleRatio == nil {
		one := 1.0
		c.Telemetry.Traces.SampleRatio = &one
	}
	if c.Telemetry.Traces.ContentMaxBytes == nil {
		n := 8192
		c.Telemetry.Traces.ContentMaxBytes = &n
	}
	for i := range c.Connections {
		cn := &c.Connections[i]
		if cn.Timeouts.FirstByte == 0 {
			cn.Timeouts.FirstByte = Duration(60 * time.Second)
		}
		if cn.Timeouts.Idle == 0 {
			cn.Timeouts.Idle = Duration(60 * time.Second)
		}
		if cn.Timeouts.Total == 0 {
			cn.Timeouts.Total = Duration(10 * time.Minute)
		}
		if cn.SnapshotInterval == 0 {
			cn.SnapshotInterval = Duration(2 * time.Second)
		}
		if cn.Queue.MaxWaiting == 0 {
			cn.Queue.MaxWaiting = 256
		}
		if cn.Queue.Timeout == 0 {
			cn.Queue.Timeout = Duration(30 * time.Second)
		}
		if cn.Rate.DefaultMaxTokens == 0 {
			cn.Rate.DefaultMaxTokens = 4096
		}
		if cn.Retry.MaxAttempts == 0 {
			cn.Retry.MaxAttempts = 1
		}
		if cn.Retry.BaseBackoff == 0 {
			cn.Retry.BaseBackoff = Duration(500 * time.Millisecond)
		}
		if cn.Retry.MaxBackoff == 0 {
			cn.Retry.MaxBackoff = Duration(10 * time.Second)
		}
		if cn.OnDisconnect == "" {
			cn.OnDisconnect = "abort"
		}
		if cn.OnStoreError == "" {
			cn.OnStoreError = "fail"
		}
	}
}

// Validate checks the whole config and returns every problem found, joined,
// each naming its key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "want host:port, got %q", c.Listen)
	}
	if c.Procs < 0 {
		bad("procs", "must not be negative (0 picks it), got %d", c.Procs)
	}
	switch c.Store.Driver {
	case "embedded":
		if strings.TrimSpace(c.Store.Path) == "" {
			bad("store.path", "required for the embedded driver")
		}
	case "redis":
		u := c.Store.URL.Reveal()
		if u == "" {
			bad("store.url", "required for the redis driver")
		} else if !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") &&
			!strings.HasPrefix(u, "redis+cluster://") && !strings.HasPrefix(u, "redis+sentinel://") {
			bad("store.url", "want a redis://, rediss://, redis+cluster:// or redis+sentinel:// URL")
		}
	default:
		bad("store.driver", "want embedded or redis, got %q", c.Store.Driver)
	}
	if c.Store.EventRetention < 0 {
		bad("store.event_retention", "must not be negative")
	}
	if f := c.Store.Fsync; f != "always" && f != "interval" {
		bad("store.fsync", "want always or interval, got %q", f)
	}
	if d := c.Store.FsyncInterval.D(); d < time.Millisecond || d > time.Minute {
		bad("store.fsync_interval", "must be between 1ms and 1m, got %v", d)
	}
	if w := c.Store.EventBatchWindow.D(); w < time.Millisecond || w > time.Second {
		bad("store.event_batch_window", "must be between 1ms and 1s, got %v", w)
	}
	if c.Store.OpTimeout < 0 {
		bad("store.op_timeout", "must be positive, got %v", c.Store.OpTimeout.D())
	}
	if c.Store.Spool.On() && strings.TrimSpace(c.Store.Spool.Path) == "" {
		bad("store.spool.path", "required when the spool is enabled")
	}
	if c.Store.Spool.MaxBytes < 0 {
		bad("store.spool.max_bytes", "must not be negative (0 means 1 GiB), got %d", c.Store.Spool.MaxBytes)
	}
	if f := c.Store.Spool.Fsync; f != "always" && f != "never" {
		bad("store.spool.fsync", "want always or never, got %q", f)
	}
	if e := c.Store.Encryption; e.Enabled {
		if _, _, err := e.KEKs(); err != nil {
			errs = append(errs, err)
		}
	}
	if p := c.Store.Encryption.Plaintext; p != "read" && p != "refuse" {
		bad("store.encryption.plaintext", "want read or refuse, got %q", p)
	}
	if n := c.Store.ThreadCacheBytes; n != nil && *n < 0 {
		bad("store.thread_cache_bytes", "must not be negative (0 turns the cache off)")
	}
	l := c.Limits
	positive := func(key string, v int) {
		if v < 0 {
			bad(key, "must not be negative, got %d", v)
		}
	}
	positive("limits.max_body_bytes", l.MaxBodyBytes)
	positive("limits.max_header_bytes", l.MaxHeaderBytes)
	positive("limits.max_sse_line_bytes", l.MaxSSELineBytes)
	positive("limits.max_connections", l.MaxConnections)
	if l.MaxHeaderBytes > 0 && l.MaxHeaderBytes < 1024 {
		bad("limits.max_header_bytes", "must be at least 1024, got %d", l.MaxHeaderBytes)
	}
	if l.MaxUpstreamHeaderBytes < 1024 {
		bad("limits.max_upstream_header_bytes", "must be at least 1024, got %d", l.MaxUpstreamHeaderBytes)
	}
	for key, d := range map[string]Duration{
		"limits.read_timeout": l.ReadTimeout, "limits.write_timeout": l.WriteTimeout,
		"limits.idle_timeout": l.IdleTimeout, "limits.heartbeat": l.Heartbeat,
		"limits.shutdown_timeout": l.ShutdownTimeout, "leases.ttl": c.Leases.TTL,
	} {
		if d <= 0 {
			bad(key, "must be positive")
		}
	}
	if c.Leases.TTL > 0 && c.Leases.TTL.D() < time.Second {
		bad("leases.ttl", "must be at least 1s, got %s", c.Leases.TTL.D())
	}
	switch c.Limits.Mode {
	case "local":
	case "shared":
		if c.Store.Driver != "redis" {
			bad("limits.mode", "shared needs store.driver: redis (the replicas share limits through it)")
		}
	default:
		bad("limits.mode", "want local or shared, got %q", c.Limits.Mode)
	}
	if c.Limits.PerTenant.RPM < 0 || c.Limits.PerTenant.TPM < 0 || c.Limits.PerTenant.MaxStreams < 0 {
		bad("limits.per_tenant", "rpm, tpm and max_streams must not be negative")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "want debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "want text or json, got %q", c.Log.Format)
	}
	tr := c.Telemetry.Traces
	switch tr.Exporter {
	case "none", "otlp-grpc", "otlp-http":
	default:
		bad("telemetry.traces.exporter", "want none, otlp-grpc or otlp-http, got %q", tr.Exporter)
	}
	if r := tr.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		bad("telemetry.traces.sample_ratio", "must be between 0 and 1, got %v", *r)
	}
	if tr.Exporter == "otlp-grpc" && strings.Contains(tr.Endpoint, "://") {
		bad("telemetry.traces.endpoint", "otlp-grpc wants host:port, got a URL %q", tr.Endpoint)
	}
	if tr.Exporter == "otlp-http" && strings.Contains(tr.Endpoint, "://") {
		if u, err := url.Parse(tr.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("telemetry.traces.endpoint", "want host:port or an http(s) URL, got %q", tr.Endpoint)
		}
	}
	if n := tr.ContentMaxBytes; n != nil && (*n < 64 || *n > 1<<20) {
		bad("telemetry.traces.content_max_bytes", "must be between 64 and 1048576, got %d", *n)
	}
	for name := range tr.Headers {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, " \t\r\n:") {
			bad("telemetry.traces.headers", "want header names, got %q", name)
		}
	}

	seenKeys := map[Secret]int{}
	for i, cl := range c.Clients {
		key := fmt.Sprintf("clients[%d]", i)
		if cl.Key == "" {
			bad(key+".key", "required (an empty key would let anyone in)")
		} else if j, dup := seenKeys[cl.Key]; dup {
			bad(key+".key", "same key as clients[%d]", j)
		} else {
			seenKeys[cl.Key] = i
		}
		if !validTenant(cl.Tenant) {
			bad(key+".tenant", "want 1-64 of [A-Za-z0-9._-], got %q", cl.Tenant)
		}
	}

	seenNames := map[string]int{}
	for i := range c.Connections {
		cn := &c.Connections[i]
		key := fmt.Sprintf("connections[%d]", i)
		if cn.Name != "" {
			key = fmt.Sprintf("connections[%d] (%s)", i, cn.Name)
		}
		switch {
		case cn.Name == "":
			bad(key+".name", "required")
		case !connectionName.MatchString(cn.Name):
			bad(key+".name", "want 1-64 of [A-Za-z0-9._-] starting with a letter or digit, got %q", cn.Name)
		case isReserved(cn.Name):
			bad(key+".name", "%q is reserved for chronicle's own routes (%s)", cn.Name, strings.Join(ReservedNames, ", "))
		default:
			if j, dup := seenNames[cn.Name]; dup {
				bad(key+".name", "same name as connections[%d]", j)
			}
			seenNames[cn.Name] = i
		}
		switch {
		case formats.Known(string(cn.Provider)):
		case cn.Provider == "":
			bad(key+".provider", "required: %s", providerList())
		default:
			bad(key+".provider", "want %s, got %q", providerList(), cn.Provider)
		}
		u, err := url.Parse(cn.BaseURL)
		switch {
		case cn.BaseURL == "":
			bad(key+".base_url", "required, e.g. https://api.openai.com")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			bad(key+".base_url", "want an http:// or https:// URL, got %q", cn.BaseURL)
		case u.RawQuery != "" || u.Fragment != "":
			bad(key+".base_url", "must not carry a query or fragment")
		default:
			u.Path = strings.TrimRight(u.Path, "/")
			u.RawPath = ""
			cn.baseURL = u
		}
		for j, k := range cn.Keys {
			if k == "" {
				bad(fmt.Sprintf("%s.keys[%d]", key, j), "empty key")
			}
		}
		if len(c.Clients) == 0 && len(cn.Keys) > 0 {
			bad(key+".keys", "upstream keys need a clients list: without clients every connection is pass-through, and anyone reaching the proxy would spend these keys")
		}
		if len(c.Clients) > 0 && len(cn.Keys) == 0 {
			bad(key+".keys", "required when clients are configured (the client's key is removed and a pool key sent upstream)")
		}
		for name, d := range map[string]Duration{"first_byte": cn.Timeouts.FirstByte, "idle": cn.Timeouts.Idle, "total": cn.Timeouts.Total} {
			if d <= 0 {
				bad(key+".timeouts."+name, "must be positive")
			}
		}
		if cn.SnapshotInterval < 100*Duration(time.Millisecond) {
			bad(key+".snapshot_interval", "must be at least 100ms")
		}
		if cn.MaxUpstreamConns < 0 {
			bad(key+".max_upstream_conns", "must not be negative (0 = 65536)")
		}
		for j, h := range cn.SessionHeaders {
			if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " :\r\n") {
				bad(fmt.Sprintf("%s.session_headers[%d]", key, j), "not a header name: %q", h)
			}
		}
		if cn.MaxConcurrent < 0 {
			bad(key+".max_concurrent", "must not be negative (0 = no cap)")
		}
		if cn.Queue.MaxWaiting < 0 {
			bad(key+".queue.max_waiting", "must not be negative")
		}
		if cn.Queue.Timeout < 0 {
			bad(key+".queue.timeout", "must not be negative")
		}
		if cn.Rate.RPM < 0 || cn.Rate.TPM < 0 {
			bad(key+".rate", "rpm and tpm must not be negative (0 = no limit)")
		}
		if cn.Rate.DefaultMaxTokens < 0 {
			bad(key+".rate.default_max_tokens", "must not be negative")
		}
		if cn.Retry.MaxAttempts < 1 || cn.Retry.MaxAttempts > 10 {
			bad(key+".retry.max_attempts", "want 1-10 (1 = no retry), got %d", cn.Retry.MaxAttempts)
		}
		if cn.Retry.BaseBackoff <= 0 || cn.Retry.MaxBackoff < cn.Retry.BaseBackoff {
			bad(key+".retry", "base_backoff must be positive and max_backoff at least base_backoff")
		}
		switch cn.OnDisconnect {
		case "abort", "detach":
		default:
			bad(key+".on_disconnect", "want abort or detach, got %q", cn.OnDisconnect)
		}
		switch cn.OnStoreError {
		case "fail", "pass":
		default:
			bad(key+".on_store_error", "want fail or pass, got %q", cn.OnStoreError)
		}
		for j, t := range cn.ReadOnlyTools {
			if strings.TrimSpace(t) == "" {
				bad(fmt.Sprintf("%s.read_only_tools[%d]", key, j), "empty tool name")
			}
		}
		validateRedact(key+".redact", &cn.Redact, bad)
	}
	c.validateRetention(bad)
	return errors.Join(errs...)
}

// validateRedact checks a connection's redaction rules: paths gjson can
// read, patterns that compile, with distinct names, and a mask.
func validateRedact(key string, r *Redact, bad func(key, format string, args ...any)) {
	for j, p := range r.Paths {
		if strings.TrimSpace(p) == "" || strings.HasPrefix(p, "@") || strings.Contains(p, "|") {
			bad(fmt.Sprintf("%s.paths[%d]", key, j), "want a gjson path relative to a message (no modifiers or pipes), got %q", p)
		}
	}
	names := map[string]int{}
	for j, p := range r.Patterns {
		k := fmt.Sprintf("%s.patterns[%d]", key, j)
		if !connectionName.MatchString(p.Name) {
			bad(k+".name", "want 1-64 of [A-Za-z0-9._-] starting with a letter or digit, got %q", p.Name)
		} else if i, dup := names[p.Name]; dup {
			bad(k+".name", "same name as patterns[%d]", i)
		} else {
			names[p.Name] = j
		}
		if p.Regex == "" {
			bad(k+".regex", "required")
		} else if re, err := regexp.Compile(p.Regex); err != nil {
			bad(k+".regex", "not a regular expression: %v", err)
		} else if re.MatchString("") {
			bad(k+".regex", "matches the empty string: it would mask between every character")
		}
	}
	if r.Mask != "" && (len(r.Paths) == 0 && len(r.Patterns) == 0) {
		bad(key+".mask", "set without paths or patterns")
	}
	if strings.ContainsFunc(r.Mask, func(c rune) bool { return c < ' ' || c == 0x7f }) {
		bad(key+".mask", "must not hold control characters (it may land in an event's text)")
	}
}

func isReserved(name string) bool {
	for _, r := range ReservedNames {
		if strings.EqualFold(r, name) {
			return true
		}
	}
	return false
}

var tenantPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func validTenant(s string) bool { return tenantPattern.MatchString(s) }

// Connection returns the connection with the given name, or nil.
func (c *Config) Connection(name string) *Connection {
	for i := range c.Connections {
		if c.Connections[i].Name == name {
			return &c.Connections[i]
		}
	}
	return nil
}
