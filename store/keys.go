package store

import (
	"context"
	"fmt"
)

// WrappedKey is one data key of a tenant as a Keys store holds it: sealed
// under a key-encryption key the store never sees (store/sealed), so the
// store holds no key that opens what it stores.
type WrappedKey struct {
	Tenant  string
	ID      string // the key's id within the tenant (ValidID)
	Wrapped []byte // opaque to the store
}

// Keys keeps tenants' wrapped data keys, for encryption at rest
// (store/sealed). It is optional: a backend that has it can hold
// encrypted content; the conformance suite checks it where it exists
// (storetest, "Keys"). Tenants are checked with ValidTenant, ids with
// ValidID.
type Keys interface {
	// CreateKey stores wrapped as the tenant's key id unless the tenant
	// has that id already, and returns what is stored: wrapped, or the
	// existing key. Replicas that create the same id at once thus all
	// get the one that won.
	CreateKey(ctx context.Context, tenant, id string, wrapped []byte) ([]byte, error)
	// GetKey returns the tenant's key id; ErrNotFound when there is none.
	GetKey(ctx context.Context, tenant, id string) ([]byte, error)
	// ListKeys returns the tenant's keys ordered by id, or with tenant ""
	// every tenant's, ordered by tenant and id.
	ListKeys(ctx context.Context, tenant string) ([]WrappedKey, error)
	// ReplaceKey swaps the tenant's key id from old to wrapped (a re-wrap
	// under another key-encryption key): ErrNotFound when there is no such
	// key, ErrConflict when what is stored is not old (another re-wrap came
	// first). Storing wrapped again when it is stored already succeeds.
	ReplaceKey(ctx context.Context, tenant, id string, old, wrapped []byte) error
	// DeleteKeys removes every key of the tenant and returns how many it
	// removed. What was encrypted under them can no longer be read
	// (crypto-shredding).
	DeleteKeys(ctx context.Context, tenant string) (int, error)
}

// HashKeyer is a store whose message hashes must be keyed per tenant
// (store/sealed, encryption at rest): its caller passes every Hash it
// computes from content through the tenant's transform before the store
// sees it, so a stored hash is no function of the content alone. The
// transform is deterministic and fixed for the tenant, so equal messages
// still hash equal and prefix matching works.
type HashKeyer interface {
	HashKey(ctx context.Context, tenant string) (func(Hash) Hash, error)
}

// CheckKeyID checks a data key's tenant (ValidTenant) and id (ValidID).
func CheckKeyID(tenant, id string) error {
	if err := ValidTenant(tenant); err != nil {
		return err
	}
	return ValidID(id)
}

// CheckWrappedKey checks a data key to be stored: its tenant and id, and
// that the wrapped form is not empty.
func CheckWrappedKey(tenant, id string, wrapped []byte) error {
	if err := CheckKeyID(tenant, id); err != nil {
		return err
	}
	if len(wrapped) == 0 {
		return fmt.Errorf("%w: empty wrapped key", ErrInvalid)
	}
	return nil
}
