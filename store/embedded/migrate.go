package embedded

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	bolt "go.etcd.io/bbolt"
)

// migrate copies the bbolt file of a chronicle before pebble
// (dir/chronicle.db) into the key space, once: into dir/kv.migrating,
// renamed to dir/kv when complete, so a crash during the copy starts it
// again. The bbolt file is then renamed dir/chronicle.db.migrated: a
// backup, which chronicle no longer reads.
func migrate(dir string) error {
	legacy := filepath.Join(dir, legacyFile)
	if _, err := os.Stat(legacy); errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	kv := filepath.Join(dir, kvDir)
	if _, err := os.Stat(kv); err == nil {
		// Copied before a crash that came ahead of the rename.
		return os.Rename(legacy, legacy+".migrated")
	}
	tmp := kv + ".migrating"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := copyBolt(legacy, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, kv); err != nil {
		return err
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	if err := os.Rename(legacy, legacy+".migrated"); err != nil {
		return err
	}
	return syncDir(dir)
}

func copyBolt(from, to string) error {
	src, err := bolt.Open(from, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer src.Close()
	db, cache, _, err := openKV(to, Options{Fsync: FsyncAlways, FS: vfs.Default}, nil)
	if err != nil {
		return err
	}
	defer cache.Unref()
	b := db.NewBatch()
	flush := func(force bool) error {
		if b.Empty() || (!force && b.Len() < 4<<20) {
			return nil
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			return err
		}
		b.Close()
		b = db.NewBatch()
		return nil
	}
	var walk func(prefix []byte, bk *bolt.Bucket, marked bool) error
	walk = func(prefix []byte, bk *bolt.Bucket, marked bool) error {
		return bk.ForEach(func(k, v []byte) error {
			if v == nil { // a child bucket
				child := childPrefix(prefix, k)
				if marked {
					if err := b.Set(child, nil, nil); err != nil {
						return err
					}
				}
				return walk(child, bk.Bucket(k), false)
			}
			key := append(append(append([]byte{}, prefix...), tagLeaf), k...)
			if err := b.Set(key, v, nil); err != nil {
				return err
			}
			return flush(false)
		})
	}
	err = src.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			return walk(childPrefix(nil, name), bk, string(name) == string(bThreads))
		})
	})
	if err == nil {
		err = flush(true)
	}
	b.Close()
	if err == nil {
		err = db.Flush()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}
