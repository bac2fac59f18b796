package embedded

import (
	"bytes"
	"context"
	"fmt"

	"github.com/chronicle-proxy/chronicle/store"
)

// Tenants' wrapped data keys (store.Keys, for store/sealed): one leaf of
// the bucket "keys" per key, named tenant NUL id (a tenant has no control
// bytes), so a tenant's keys are one range and every tenant's are the
// bucket in order.
var bKeys = []byte("keys")

var _ store.Keys = (*Store)(nil)

func keyName(tenant, id string) []byte { return []byte(tenant + "\x00" + id) }

// CreateKey stores wrapped unless the tenant has the id; it returns what
// is stored.
func (s *Store) CreateKey(ctx context.Context, tenant, id string, wrapped []byte) ([]byte, error) {
	if err := store.CheckWrappedKey(tenant, id, wrapped); err != nil {
		return nil, err
	}
	var got []byte
	err := s.update(func(tx *Tx) error {
		b := tx.Bucket(bKeys)
		if v := b.Get(keyName(tenant, id)); v != nil {
			got = clone(v)
			return nil
		}
		got = clone(wrapped)
		return b.Put(keyName(tenant, id), got)
	})
	if err != nil {
		return nil, err
	}
	return got, nil
}

// GetKey returns the tenant's key id.
func (s *Store) GetKey(ctx context.Context, tenant, id string) ([]byte, error) {
	if err := store.CheckKeyID(tenant, id); err != nil {
		return nil, err
	}
	var got []byte
	err := s.view(func(tx *Tx) error {
		got = clone(tx.Bucket(bKeys).Get(keyName(tenant, id)))
		return nil
	})
	if err == nil && got == nil {
		err = fmt.Errorf("embedded: key %q of tenant %q: %w", id, tenant, store.ErrNotFound)
	}
	return got, err
}

// ListKeys returns the tenant's keys, or every tenant's for "".
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]store.WrappedKey, error) {
	var prefix []byte
	if tenant != "" {
		if err := store.ValidTenant(tenant); err != nil {
			return nil, err
		}
		prefix = []byte(tenant + "\x00")
	}
	out := []store.WrappedKey{}
	err := s.view(func(tx *Tx) error {
		c := tx.Bucket(bKeys).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				continue
			}
			out = append(out, store.WrappedKey{Tenant: string(k[:i]), ID: string(k[i+1:]), Wrapped: clone(v)})
		}
		return nil
	})
	return out, err
}

// ReplaceKey swaps the stored form of a key from old to wrapped.
func (s *Store) ReplaceKey(ctx context.Context, tenant, id string, old, wrapped []byte) error {
	if err := store.CheckWrappedKey(tenant, id, wrapped); err != nil {
		return err
	}
	return s.update(func(tx *Tx) error {
		b := tx.Bucket(bKeys)
		v := b.Get(keyName(tenant, id))
		switch {
		case v == nil:
			return fmt.Errorf("embedded: key %q of tenant %q: %w", id, tenant, store.ErrNotFound)
		case bytes.Equal(v, wrapped):
			return nil
		case !bytes.Equal(v, old):
			return fmt.Errorf("embedded: key %q of tenant %q changed: %w", id, tenant, store.ErrConflict)
		}
		return b.Put(keyName(tenant, id), clone(wrapped))
	})
}

// DeleteKeys removes every key of the tenant.
func (s *Store) DeleteKeys(ctx context.Context, tenant string) (int, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return 0, err
	}
	prefix := []byte(tenant + "\x00")
	n := 0
	err := s.update(func(tx *Tx) error {
		n = 0
		b := tx.Bucket(bKeys)
		var names [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			names = append(names, clone(k))
		}
		for _, k := range names {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		n = len(names)
		return nil
	})
	return n, err
}
