// Package redisstore is chronicle's production store on Redis: a single
// node, a Redis Cluster or a Sentinel-managed master, through go-redis's
// UniversalClient.
//
// Every key of one thread shares the hash tag {<tenant>/<thread>}, so each
// step on a thread (start, save, event append, finish, sweep, delete) is one
// Lua script on one slot: atomic, and safe to run twice because go-redis may
// retry a write after a timeout (scripts check lease tokens, expected
// prefix hashes and event sequence numbers). Cross-thread indexes live on
// other slots and are updated by idempotent commands pipelined with the
// script, in the same round trip; see README.md.
package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// Options configure Open. URL, when set, is parsed first; the other
// connection fields then override what it gave.
//
// URL forms:
//
//	redis://[user:pass@]host:port[/db]           single node
//	rediss://…                                   the same over TLS
//	redis://h1:p1,h2:p2                          cluster (more than one host)
//	redis://host:port?cluster=true               cluster through one seed
//	redis+cluster://h1:p1[,h2:p2]                cluster (rediss+cluster: TLS)
//	redis+sentinel://[user:pass@]s1:p1[,s2:p2]/master[/db][?sentinel_password=…]
//	                                             Sentinel (rediss+sentinel: TLS)
//
// user:pass authenticate to the data nodes; sentinel_password (and
// sentinel_username) to the sentinels.
type Options struct {
	URL        string
	Addrs      []string
	Cluster    bool
	MasterName string
	Username   string
	Password   string
	DB         int
	TLS        *tls.Config

	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	PoolSize     int

	// Client, when set, is used instead of dialing (tests, shared clients).
	// Close does not close it.
	Client redis.UniversalClient

	// EventRetention is how long a run's event log outlives its last
	// write (default 24h).
	EventRetention time.Duration
	// MaxEvents trims each event log by sequence, keeping at least its
	// newest MaxEvents events (a batch across the limit stays whole; 0:
	// none).
	MaxEvents int64
	// Now is the clock for leases and timestamps (default time.Now).
	// Replicas' clocks are compared through lease expiries, so keep them
	// NTP-synced; skew shortens or lengthens leases by the skew.
	Now func() time.Time
	// KeyPrefix prefixes every key (default "chr:").
	KeyPrefix string
}

// Store is the Redis backend. It is safe for concurrent use.
type Store struct {
	c         redis.UniversalClient
	ownClient bool
	opts      Options
	pre       string
	// The keys that do not depend on a thread, and the event retention,
	// boxed once as script arguments (see argArena).
	kThreads, kTenants, kActive, retention any
	cluster                                bool
	waitAOF                                atomic.Int32 // 0 unknown, 1 supported, 2 unsupported
	// replicas is how many replicas the master had when last asked
	// (watchReplicas); while there are any, a finish waits for one of
	// them to have it (WAIT), so a failover cannot lose it.
	replicas     atomic.Int32
	stopReplicas chan struct{}
	replicasDone chan struct{}
	send         sender
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.AsyncSaver = (*Store)(nil)
)

// ParseURL turns a URL (forms in Options) into UniversalOptions.
func ParseURL(raw string) (*redis.UniversalOptions, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL, password included: keep only the cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("redisstore: url does not parse: %w", err)
	}
	o := &redis.UniversalOptions{}
	scheme := u.Scheme
	tlsOn := false
	switch scheme {
	case "redis", "redis+cluster", "redis+sentinel":
	case "rediss", "rediss+cluster", "rediss+sentinel":
		tlsOn = true
	default:
		return nil, fmt.Errorf("redisstore: url scheme %q: want redis, rediss, redis+cluster or redis+sentinel", scheme)
	}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			continue
		}
		if !strings.Contains(h, ":") {
			h += ":6379"
		}
		o.Addrs = append(o.Addrs, h)
	}
	if len(o.Addrs) == 0 {
		return nil, errors.New("redisstore: url has no host")
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	q := u.Query()
	path := strings.Trim(u.Path, "/")
	switch {
	case strings.HasSuffix(scheme, "+sentinel"):
		parts := strings.Split(path, "/")
		if parts[0] == "" {
			return nil, errors.New("redisstore: sentinel url needs /<master name>")
		}
		o.MasterName = parts[0]
		if len(parts) > 1 {
			if o.DB, err = strconv.Atoi(parts[1]); err != nil {
				return nil, fmt.Errorf("redisstore: url db %q", parts[1])
			}
		}
		o.SentinelUsername = q.Get("sentinel_username")
		o.SentinelPassword = q.Get("sentinel_password")
	default:
		if path != "" {
			if o.DB, err = strconv.Atoi(path); err != nil {
				return nil, fmt.Errorf("redisstore: url db %q", path)
			}
		}
		if strings.HasSuffix(scheme, "+cluster") || q.Get("cluster") == "true" || len(o.Addrs) > 1 {
			o.IsClusterMode = true
			if o.DB != 0 {
				return nil, errors.New("redisstore: a cluster has only database 0")
			}
		}
	}
	for name, dst := range map[string]*time.Duration{"dial_timeout": &o.DialTimeout, "read_timeout": &o.ReadTimeout, "write_timeout": &o.WriteTimeout} {
		if v := q.Get(name); v != "" {
			if *dst, err = time.ParseDuration(v); err != nil {
				return nil, fmt.Errorf("redisstore: url %s: %w", name, err)
			}
		}
	}
	if tlsOn {
		host := o.Addrs[0]
		if i := strings.LastIndex(host, ":"); i >= 0 {
			host = host[:i]
		}
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// Open connects, checks the server with PING and loads the scripts into
// its cache (SCRIPT LOAD), so the first write of each kind sends no body.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.EventRetention <= 0 {
		opts.EventRetention = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "chr:"
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return nil, fmt.Errorf("%w: key prefix has a brace", store.ErrInvalid)
	}
	s := &Store{opts: opts, pre: opts.KeyPrefix}
	s.kThreads, s.kTenants, s.kActive = s.allThreads(), s.tenants(), s.active()
	s.retention = opts.EventRetention.Milliseconds()
	s.startSenders()
	if opts.Client != nil {
		s.c = opts.Client
	} else {
		uo := &redis.UniversalOptions{}
		if opts.URL != "" {
			var err error
			if uo, err = ParseURL(opts.URL); err != nil {
				return nil, err
			}
		}
		if len(opts.Addrs) > 0 {
			uo.Addrs = opts.Addrs
		}
		if opts.Cluster {
			uo.IsClusterMode = true
		}
		if opts.MasterName != "" {
			uo.MasterName = opts.MasterName
		}
		if opts.Username != "" {
			uo.Username = opts.Username
		}
		if opts.Password != "" {
			uo.Password = opts.Password
		}
		if opts.DB != 0 {
			uo.DB = opts.DB
		}
		if opts.TLS != nil {
			uo.TLSConfig = opts.TLS
		}
		if opts.DialTimeout > 0 {
			uo.DialTimeout = opts.DialTimeout
		}
		if opts.ReadTimeout > 0 {
			uo.ReadTimeout = opts.ReadTimeout
		}
		if opts.WriteTimeout > 0 {
			uo.WriteTimeout = opts.WriteTimeout
		}
		if opts.PoolSize > 0 {
			uo.PoolSize = opts.PoolSize
		}
		if len(uo.Addrs) == 0 {
			return nil, fmt.Errorf("%w: redis: no URL or addresses", store.ErrInvalid)
		}
		s.c = redis.NewUniversalClient(uo)
		s.ownClient = true
	}
	_, s.cluster = s.c.(*redis.ClusterClient)
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.preload(ctx)
	if !s.cluster {
		s.stopReplicas, s.replicasDone = make(chan struct{}), make(chan struct{})
		s.countReplicas(ctx)
		go s.watchReplicas()
	}
	return s, nil
}

// Close ends the sender goroutines and closes the client if Open created it.
func (s *Store) Close() error {
	if s.stopReplicas != nil {
		select {
		case <-s.stopReplicas:
		default:
			close(s.stopReplicas)
			<-s.replicasDone
		}
	}
	s.stopSenders()
	if s.ownClient {
		return s.c.Close()
	}
	return nil
}

// Ping checks the server.
func (s *Store) Ping(ctx context.Context) error {
	return mapErr(s.c.Ping(ctx).Err())
}

// mapErr turns connection failures into store.ErrUnavailable.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("redis: %w", store.ErrNotFound)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY", "NOREPLICAS", "BUSY "} {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: redis: %w", store.ErrUnavailable, err)
			}
		}
		return fmt.Errorf("redis: %w", err)
	}
	return fmt.Errorf("%w: redis: %w", store.ErrUnavailable, err)
}

func (s *Store) now() int64 { return s.opts.Now().UnixMilli() }

// Key names. A thread's keys share the tag {<tenant>/<thread>}.
func (s *Store) prefix(k store.Key) string { return s.pre + "{" + k.Tenant + "/" + k.Thread + "}:" }
func (s *Store) meta(k store.Key) string {
	return s.pre + "{" + k.Tenant + "/" + k.Thread + "}:meta" // one allocation
}
func (s *Store) tenantThreads(t string) string {
	return s.pre + "t:{" + t + "}:threads"
}
func (s *Store) tenantRuns(t string) string { return s.pre + "t:{" + t + "}:runids" }
func (s *Store) allThreads() string         { return s.pre + "threads" }
func (s *Store) tenants() string            { return s.pre + "tenants" }
func (s *Store) active() string             { return s.pre + "active" }

func activeMember(k store.Key, run string) string { return k.Tenant + "/" + k.Thread + "/" + run }

func parseActive(m string) (store.Key, string, bool) {
	i := strings.LastIndexByte(m, '/')
	if i < 0 {
		return store.Key{}, "", false
	}
	j := strings.LastIndexByte(m[:i], '/')
	if j < 0 {
		return store.Key{}, "", false
	}
	return store.Key{Tenant: m[:j], Thread: m[j+1 : i]}, m[i+1:], true
}

func parseThreadMember(m string) store.Key {
	i := strings.LastIndexByte(m, '/')
	return store.Key{Tenant: m[:i], Thread: m[i+1:]}
}

func fromMS(v string) time.Time {
	n, _ := strconv.ParseInt(v, 10, 64)
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// countReplicas reads how many replicas the master has.
func (s *Store) countReplicas(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := s.c.Info(ctx, "replication").Result()
	if err != nil {
		return // unknown: keep the last count
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	s.replicas.Store(int32(n))
}

// watchReplicas counts the master's replicas every second until Close: a
// failover brings a master with other replicas (or none).
func (s *Store) watchReplicas() {
	defer close(s.replicasDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stopReplicas:
			return
		case <-t.C:
			s.countReplicas(context.Background())
		}
	}
}
