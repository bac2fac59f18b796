package main

import (
	"context"
	"fmt"
	"log/slog"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/limiter/redislimit"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/sealed"
	"github.com/chronicle-proxy/chronicle/store/spool"
)

// The concrete backends the binary wires into the proxy: the proxy itself
// sees only store.Store and the limiter interfaces.

// openStore opens the backend the config names: the embedded file store
// under store.path, or Redis at store.url. background, when set, is
// embedded.Options.Background.
func openStore(ctx context.Context, cfg *config.Config, background func() func()) (store.Store, error) {
	switch cfg.Store.Driver {
	case "redis":
		st, err := redisstore.Open(ctx, redisstore.Options{URL: cfg.Store.URL.Reveal(), EventRetention: cfg.Store.EventRetention.D()})
		if err != nil {
			// The URL may carry a password: name the key, not the value.
			return nil, fmt.Errorf("store.url: cannot open the Redis store: %w", redactURLError(err, cfg.Store.URL.Reveal()))
		}
		return st, nil
	default:
		st, err := embedded.Open(cfg.Store.Path, embedded.Options{EventRetention: cfg.Store.EventRetention.D(),
			Fsync: embedded.Fsync(cfg.Store.Fsync), FsyncInterval: cfg.Store.FsyncInterval.D(), Background: background})
		if err != nil {
			return nil, fmt.Errorf("store.path: cannot open the embedded store in %q: %w", cfg.Store.Path, err)
		}
		return st, nil
	}
}

// openSpool puts the local journal of store.spool in front of st when the
// config turns it on (see store/spool); otherwise it returns st. Only the
// serving process opens it: the journal belongs to one replica.
func openSpool(st store.Store, cfg *config.Config, log *slog.Logger) (store.Store, error) {
	sp := cfg.Store.Spool
	if !sp.On() {
		return st, nil
	}
	s, err := spool.Open(st, spool.Options{Dir: sp.Path, MaxBytes: sp.MaxBytes, Fsync: sp.Fsync == "always", Logger: log})
	if err != nil {
		return nil, fmt.Errorf("store.spool.path: %w", err)
	}
	return s, nil
}

// openKeyring makes the keyring of store.encryption over backend's data
// keys, and checks at once that the configured keys open the store's (a
// wrong or missing key-encryption key fails here, not on a turn).
func openKeyring(ctx context.Context, backend store.Store, cfg *config.Config) (*sealed.Keyring, error) {
	keys, ok := backend.(store.Keys)
	if !ok {
		return nil, fmt.Errorf("store.encryption: the %s store cannot keep data keys", cfg.Store.Driver)
	}
	cur, prev, err := cfg.Store.Encryption.KEKs()
	if err != nil {
		return nil, err
	}
	var old []sealed.KEK
	for _, p := range prev {
		old = append(old, sealed.KEK{ID: p.ID, Key: p.Key})
	}
	ring, err := sealed.NewKeyring(keys, sealed.KEK{ID: cur.ID, Key: cur.Key}, old...)
	if err != nil {
		return nil, fmt.Errorf("store.encryption: %w", err)
	}
	if err := ring.Check(ctx); err != nil {
		return nil, fmt.Errorf("store.encryption.key: %w", err)
	}
	return ring, nil
}

// sealStore wraps st (the backend, or the spool over it) so that what it
// stores is encrypted, when store.encryption is on; backend is the store
// that keeps the data keys. Above the spool, so its journal holds sealed
// values too.
func sealStore(ctx context.Context, st, backend store.Store, cfg *config.Config) (store.Store, error) {
	e := cfg.Store.Encryption
	if !e.Enabled {
		return st, nil
	}
	ring, err := openKeyring(ctx, backend, cfg)
	if err != nil {
		return nil, err
	}
	return sealed.Wrap(st, ring, sealed.Options{RefusePlaintext: e.Plaintext == "refuse"}), nil
}

// redactURLError keeps a Redis URL (and its password) out of an error.
func redactURLError(err error, url string) error {
	if url == "" {
		return err
	}
	msg := err.Error()
	if i := indexOf(msg, url); i >= 0 {
		return fmt.Errorf("%s[store.url]%s", msg[:i], msg[i+len(url):])
	}
	return err
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// openLimits returns the gates and rate limiter limits.mode asks for: nil
// (in-process ones) for local, or Redis-backed ones shared by every replica
// using the same Redis store. The returned close function releases them.
func openLimits(ctx context.Context, cfg *config.Config, log *slog.Logger) (limiter.Gates, limiter.RateLimiter, func() error, error) {
	if cfg.Limits.Mode != "shared" {
		return nil, nil, func() error { return nil }, nil
	}
	opts, err := redisstore.ParseURL(cfg.Store.URL.Reveal())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("store.url: %w", redactURLError(err, cfg.Store.URL.Reveal()))
	}
	rdb := goredis.NewUniversalClient(opts)
	lim, err := redislimit.New(ctx, rdb, redislimit.Options{Lease: cfg.Leases.TTL.D(), Logger: log})
	if err != nil {
		rdb.Close()
		return nil, nil, nil, fmt.Errorf("limits.mode: shared limits cannot reach Redis: %w", redactURLError(err, cfg.Store.URL.Reveal()))
	}
	return lim, lim, func() error { lim.Close(); return rdb.Close() }, nil
}
