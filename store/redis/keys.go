package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// Tenants' wrapped data keys (store.Keys, for store/sealed): a hash
// chr:t:{T}:keys per tenant (id → wrapped key, on the tenant's slot, beside
// its other index keys) and the set chr:keytenants of the tenants that
// have one. A tenant is listed before its key is created (a create whose
// listing failed would leave a key that keys rewrap never sees) and a
// delete lists the tenant again if a key was created meanwhile, so a
// tenant with a key is listed (a listed tenant may have none, briefly).

var _ store.Keys = (*Store)(nil)

func (s *Store) tenantKeys(t string) string { return s.pre + "t:{" + t + "}:keys" }
func (s *Store) keyTenants() string         { return s.pre + "keytenants" }

// createKeyScript: KEYS keys; ARGV id, wrapped. The stored key.
var createKeyScript = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then return ARGV[2] end
return redis.call('HGET', KEYS[1], ARGV[1])`)

// replaceKeyScript: KEYS keys; ARGV id, old, new.
var replaceKeyScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 'notfound' end
if v == ARGV[3] then return 'ok' end
if v ~= ARGV[2] then return 'conflict' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 'ok'`)

// deleteKeysScript: KEYS keys. How many it deleted.
var deleteKeysScript = redis.NewScript(`
local n = redis.call('HLEN', KEYS[1])
redis.call('DEL', KEYS[1])
return n`)

// CreateKey stores wrapped unless the tenant has the id; it returns what
// is stored.
func (s *Store) CreateKey(ctx context.Context, tenant, id string, wrapped []byte) ([]byte, error) {
	if err := store.CheckWrappedKey(tenant, id, wrapped); err != nil {
		return nil, err
	}
	if err := s.c.SAdd(ctx, s.keyTenants(), tenant).Err(); err != nil {
		return nil, mapErr(err)
	}
	got, err := createKeyScript.Run(ctx, s.c, []string{s.tenantKeys(tenant)}, id, wrapped).Text()
	if err != nil {
		return nil, mapErr(err)
	}
	return []byte(got), nil
}

// GetKey returns the tenant's key id.
func (s *Store) GetKey(ctx context.Context, tenant, id string) ([]byte, error) {
	if err := store.CheckKeyID(tenant, id); err != nil {
		return nil, err
	}
	v, err := s.c.HGet(ctx, s.tenantKeys(tenant), id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redis: key %q of tenant %q: %w", id, tenant, store.ErrNotFound)
	}
	return v, mapErr(err)
}

// ListKeys returns the tenant's keys, or every listed tenant's for "".
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]store.WrappedKey, error) {
	tenants := []string{tenant}
	if tenant == "" {
		var err error
		if tenants, err = s.c.SMembers(ctx, s.keyTenants()).Result(); err != nil {
			return nil, mapErr(err)
		}
		slices.Sort(tenants)
	} else if err := store.ValidTenant(tenant); err != nil {
		return nil, err
	}
	out := []store.WrappedKey{}
	for _, t := range tenants {
		m, err := s.c.HGetAll(ctx, s.tenantKeys(t)).Result()
		if err != nil {
			return nil, mapErr(err)
		}
		from := len(out)
		for id, w := range m {
			out = append(out, store.WrappedKey{Tenant: t, ID: id, Wrapped: []byte(w)})
		}
		slices.SortFunc(out[from:], func(a, b store.WrappedKey) int { return strings.Compare(a.ID, b.ID) })
	}
	return out, nil
}

// ReplaceKey swaps the stored form of a key from old to wrapped.
func (s *Store) ReplaceKey(ctx context.Context, tenant, id string, old, wrapped []byte) error {
	if err := store.CheckWrappedKey(tenant, id, wrapped); err != nil {
		return err
	}
	r, err := replaceKeyScript.Run(ctx, s.c, []string{s.tenantKeys(tenant)}, id, old, wrapped).Text()
	switch {
	case err != nil:
		return mapErr(err)
	case r == "notfound":
		return fmt.Errorf("redis: key %q of tenant %q: %w", id, tenant, store.ErrNotFound)
	case r == "conflict":
		return fmt.Errorf("redis: key %q of tenant %q changed: %w", id, tenant, store.ErrConflict)
	}
	return nil
}

// DeleteKeys removes every key of the tenant, then the tenant from the
// list (and lists it again if a key was created in between).
func (s *Store) DeleteKeys(ctx context.Context, tenant string) (int, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return 0, err
	}
	n, err := deleteKeysScript.Run(ctx, s.c, []string{s.tenantKeys(tenant)}).Int()
	if err != nil {
		return 0, mapErr(err)
	}
	if err := s.c.SRem(ctx, s.keyTenants(), tenant).Err(); err != nil {
		return n, mapErr(err)
	}
	left, err := s.c.HLen(ctx, s.tenantKeys(tenant)).Result()
	if err != nil {
		return n, mapErr(err)
	}
	if left > 0 {
		if err := s.c.SAdd(ctx, s.keyTenants(), tenant).Err(); err != nil {
			return n, mapErr(err)
		}
	}
	return n, nil
}
