package embedded

import (
	"errors"
	iofs "io/fs"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Fsync is when an acknowledged write reaches the disk, beyond the
// operating system.
type Fsync string

const (
	// FsyncAlways syncs the write-ahead log before a write is acknowledged;
	// writes that arrive during a sync share the next one (group commit).
	// A power loss loses nothing acknowledged.
	FsyncAlways Fsync = "always"
	// FsyncInterval acknowledges a write once the write-ahead log holds it
	// in the operating system (write(2) returned), and syncs the log every
	// Options.FsyncInterval, like Redis's appendfsync everysec. A crash of
	// chronicle loses nothing acknowledged; a power loss or kernel crash
	// loses at most the writes of the last interval, never a partial one.
	FsyncInterval Fsync = "interval"
)

// walFS is the file system pebble writes through. Under FsyncInterval it
// turns the write-ahead log's syncs into no-ops, so a commit waits for the
// log's write(2) but not for the disk, and syncLogs (a ticker) syncs what
// the logs hold. A log is synced for real when pebble closes it, so every
// log but the newest ends cleanly, which recovery requires of them. Other
// files (tables, manifest, directories) sync as pebble asks: those syncs
// are off the commit path.
type walFS struct {
	vfs.FS
	deferSync bool

	mu   sync.Mutex
	logs map[*walFile]struct{}
}

func isLog(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs *walFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

// ReuseForWrite does not reuse: it removes the old log and creates the
// new one (the contract allows it). A recycled log keeps the old log's
// bytes past what the new one has written, deleted values included, until
// they are overwritten; an erasure must not leave them there
// (docs/auditors.md).
func (fs *walFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.FS.Remove(oldname); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return nil, err
	}
	f, err := fs.FS.Create(newname, category)
	return fs.wrap(newname, f, err)
}

func (fs *walFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !fs.deferSync || !isLog(name) {
		return f, err
	}
	w := &walFile{File: f, fs: fs}
	fs.mu.Lock()
	fs.logs[w] = struct{}{}
	fs.mu.Unlock()
	return w, nil
}

// syncLogs syncs every open log (the ticker of FsyncInterval, and Close).
func (fs *walFS) syncLogs() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var first error
	for w := range fs.logs {
		if err := w.File.SyncData(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// walFile is a write-ahead log under FsyncInterval.
type walFile struct {
	vfs.File
	fs *walFS
}

func (w *walFile) Sync() error                { return nil }
func (w *walFile) SyncData() error            { return nil }
func (w *walFile) SyncTo(int64) (bool, error) { return false, nil }

func (w *walFile) Close() error {
	err := w.File.SyncData()
	w.fs.mu.Lock()
	delete(w.fs.logs, w)
	w.fs.mu.Unlock()
	if cerr := w.File.Close(); err == nil {
		err = cerr
	}
	return err
}
