// Package embedded is chronicle's single-node store: a pebble key space
// (an LSM tree: a write is one append to its write-ahead log and an insert
// in memory) in a directory, no server, no cgo. One goroutine commits:
// each step is checked and written in one indexed batch, committed whole,
// so a kill -9 at any moment leaves either the whole step or none of it;
// steps that queue while a commit is under way share the next batch
// (group commit). Options.Fsync says when a commit reaches the disk
// (fsync.go). Followers of an event log are woken in-process when it grows
// or the run ends.
//
// Layout (bucket → key → value; buckets are key prefixes, kv.go), all keys
// bytes:
//
//	t/<tenant>\x00<thread>/           one bucket per thread
//	    meta                           JSON threadMeta (lease, counters, summary, fork point, digest)
//	    sys                            the system blob, raw (absent: none)
//	    msgs/<u32 index>               16-byte hash + raw message
//	    runs/<run>                     JSON runRec
//	    resp/<run>                     stored non-stream response body
//	    up/<run>                       upstream request body (audit.upstream_body)
//	    intr/<call id>                 JSON interrupt
//	    ev/<run>/<u64 seq>             event bytes
//	idx/<tenant>\x00<^updated ms><thread>   per-tenant audit order
//	gidx/<^updated ms><tenant>\x00<thread>  cross-tenant audit order
//	upd/<tenant>\x00<thread>                updated ms of the index entries
//	runids/<tenant>\x00<run>                thread id
//	active/<tenant>\x00<thread>\x00<run>    running runs, for Sweep
//	evexp/<u64 expiry ms><tenant>\x00<thread>\x00<run>   event logs to drop
//	sess/<connection>\x00<model>            session id
//	blob/<name>                             thread id of the file blobs/<name>
//
// and the erasure's (erasure.go): t/<thread>/subj/<subject>,
// subjidx/<tenant>\x00<subject>\x00<thread>, tomb/<^at ms><id>.
//
// A message, response or upstream body of 128 KiB or more is a file in
// blobs/ and its row a reference to it (blobs.go).
package embedded

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/chronicle-proxy/chronicle/store"
)

// Options configure Open.
type Options struct {
	// EventRetention is how long a finished run's event log is kept
	// (default 24h).
	EventRetention time.Duration
	// MaxEvents trims a run's event log to its newest MaxEvents events
	// (0: no trimming).
	MaxEvents int64
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Fsync is when an acknowledged write reaches the disk (default
	// FsyncInterval).
	Fsync Fsync
	// FsyncInterval is how often FsyncInterval syncs the log (default 1s).
	FsyncInterval time.Duration
	// NoSync never syncs the log (tests and benchmarks of CPU cost only).
	NoSync bool
	// CacheBytes is the block cache, on the Go heap (default 64 MiB).
	CacheBytes int64
	// FS is the file system of the key space (tests: a crashable memory
	// file system; default the operating system's).
	FS vfs.FS
	// Background, when set, is called as pebble starts a flush or a
	// compaction, and what it returns as that ends. Those run for tens of
	// milliseconds of CPU beside the requests; on one P they hold back
	// every connection (a chat turn's p99 at 1,000 turns/s went to +50 to
	// +130 ms), so cmd/chronicle gives them the extra Ps of
	// proxy.Server.HoldProcs.
	Background func() (done func())
}

// Store is the embedded backend. It is safe for concurrent use.
type Store struct {
	db    *pebble.DB
	cache *pebble.Cache
	hot   *hotCache // the committer's (hot.go)
	// closing is held for reading by every read and write of db and for
	// writing by Close: pebble panics on a closed DB, and a reader or
	// writer must find closed set instead.
	closing sync.RWMutex
	closed  bool
	fs      *walFS
	opts    Options
	blobDir string
	kvDir   string // the key space's directory (CompactDeleted)

	ops     chan op
	scratch scratch // the committer's (commit.go)
	stop    chan struct{}
	stopped chan struct{}
	syncer  chan struct{} // closed when the interval syncer has stopped
	once    sync.Once

	mu      sync.Mutex
	waiters map[string]chan struct{}
	leases  map[string]namedLease // Lease (erasure.go)

	// broken is the failed log sync that stops every write (syncLog).
	broken atomic.Pointer[error]

	// commits and grouped count shared transactions and the writes they
	// carried (the group commit benchmark reports their ratio); written
	// counts the bytes they committed (the cost test reads it), keys the
	// keys they set or deleted (each a memtable insert; the turn
	// benchmark reports them).
	commits, grouped, written, keys atomic.Int64
	background                      backgroundJobs // Options.Background's holds, by pebble job

	// twiceSet counts the single deletes (Bucket.deleteOnce) pebble found
	// over a key set twice: none, unless a key deleteOnce is used on can
	// be set again before it is deleted (the tests read it).
	twiceSet atomic.Int64
}

var _ store.Store = (*Store)(nil)

var (
	bThreads = []byte("t")
	bIdx     = []byte("idx")
	bGidx    = []byte("gidx")
	bUpd     = []byte("upd")
	bRunIDs  = []byte("runids")
	bActive  = []byte("active")
	bEvExp   = []byte("evexp")
	bSess    = []byte("sess")

	kMeta = []byte("meta")
	kSys  = []byte("sys")
	bMsgs = []byte("msgs")
	bRuns = []byte("runs")
	bResp = []byte("resp")
	bUp   = []byte("up")
	bIntr = []byte("intr")
	bEv   = []byte("ev")
)

// Files in the store's directory.
const (
	kvDir      = "kv"           // the pebble key space
	legacyFile = "chronicle.db" // the bbolt file of chronicle before pebble
)

// Open opens (creating if needed) the store in dir: the key space in
// dir/kv and the large values' files in dir/blobs. A bbolt file
// dir/chronicle.db of an older chronicle is copied into dir/kv first and
// kept as dir/chronicle.db.migrated.
func Open(dir string, opts Options) (*Store, error) {
	if opts.EventRetention <= 0 {
		opts.EventRetention = 24 * time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch opts.Fsync {
	case "":
		opts.Fsync = FsyncInterval
	case FsyncAlways, FsyncInterval:
	default:
		return nil, fmt.Errorf("embedded: fsync %q: want always or interval", opts.Fsync)
	}
	if opts.FsyncInterval <= 0 {
		opts.FsyncInterval = time.Second
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if err := os.MkdirAll(filepath.Join(dir, blobDir), 0o700); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if err := migrate(dir); err != nil {
		return nil, fmt.Errorf("embedded: migrating %s: %w", filepath.Join(dir, legacyFile), err)
	}
	s := &Store{opts: opts, blobDir: filepath.Join(dir, blobDir), hot: newHotCache(), ops: make(chan op), stop: make(chan struct{}), stopped: make(chan struct{}), syncer: make(chan struct{}), waiters: map[string]chan struct{}{}}
	s.background = backgroundJobs{hold: opts.Background, done: map[int]func(){}}
	db, cache, fs, err := openKV(filepath.Join(dir, kvDir), opts, s.events())
	if err != nil {
		return nil, fmt.Errorf("embedded: open: %w", err)
	}
	s.db, s.cache, s.fs = db, cache, fs
	s.kvDir = filepath.Join(dir, kvDir)
	if err := s.sweepBlobs(); err != nil {
		s.closeKV()
		return nil, fmt.Errorf("embedded: large values: %w", err)
	}
	// The committer encodes these types; the first encode of a type
	// builds its encoder, a few KiB of stack deeper than any later one.
	// Built here, on the caller's stack, the committer never does.
	warmEncoders()
	go s.committer()
	if fs.deferSync && !opts.NoSync {
		go s.syncLogs()
	} else {
		close(s.syncer)
	}
	return s, nil
}

// apiMisuse hears what pebble's flushes and compactions found wrong in
// the store's use of its API: a single delete that met a key set twice.
// It logs the bucket, not the key (a key names a tenant and a thread).
func (s *Store) apiMisuse(info pebble.PossibleAPIMisuseInfo) {
	if info.Kind != pebble.NondeterministicSingleDelete {
		return
	}
	s.twiceSet.Add(1)
	log.Printf("embedded: pebble: a single delete in bucket %q met a key set twice", rootOf(info.UserKey))
}

// rootOf is the name of the root bucket key is in.
func rootOf(key []byte) string {
	for name, p := range rootPrefixes {
		if bytes.HasPrefix(key, p) {
			return name
		}
	}
	return "?"
}

// events is what the store hears of pebble: its flushes and compactions
// (Options.Background) and its reports of misuse.
func (s *Store) events() *pebble.EventListener {
	return &pebble.EventListener{
		PossibleAPIMisuse: s.apiMisuse,
		FlushBegin:        func(info pebble.FlushInfo) { s.background.begin(info.JobID) },
		FlushEnd:          func(info pebble.FlushInfo) { s.background.end(info.JobID) },
		CompactionBegin:   func(info pebble.CompactionInfo) { s.background.begin(info.JobID) },
		CompactionEnd:     func(info pebble.CompactionInfo) { s.background.end(info.JobID) },
	}
}

// backgroundJobs pairs each pebble job's end with what Options.Background
// returned at its start (pebble numbers flushes and compactions from one
// counter).
type backgroundJobs struct {
	hold func() func()
	mu   sync.Mutex
	done map[int]func()
}

func (b *backgroundJobs) begin(job int) {
	if b.hold == nil {
		return
	}
	done := b.hold()
	b.mu.Lock()
	b.done[job] = done
	b.mu.Unlock()
}

func (b *backgroundJobs) end(job int) {
	if b.hold == nil {
		return
	}
	b.mu.Lock()
	done := b.done[job]
	delete(b.done, job)
	b.mu.Unlock()
	if done != nil {
		done()
	}
}

// endAll ends the holds of jobs pebble did not report ended (Close).
func (b *backgroundJobs) endAll() {
	b.mu.Lock()
	left := b.done
	b.done = map[int]func(){}
	b.mu.Unlock()
	for _, done := range left {
		done()
	}
}

// openKV opens the pebble key space in dir; events, when set, hears what
// pebble reports.
func openKV(dir string, opts Options, events *pebble.EventListener) (*pebble.DB, *pebble.Cache, *walFS, error) {
	fs := &walFS{FS: opts.FS, deferSync: opts.NoSync || opts.Fsync == FsyncInterval, logs: map[*walFile]struct{}{}}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = 64 << 20
	}
	cache := pebble.NewCache(opts.CacheBytes)
	po := &pebble.Options{
		FS:    fs,
		Cache: cache,
		// Measured with chronicle-bench (CPU s per 1,000 requests): chat
		// 0.143 at 16 MiB and 4 MiB alike; replace (20 messages) 0.201 at
		// 4 MiB with pebble's 64 MiB base level, 0.176 at 16 MiB with a
		// 256 MiB one (fewer flushes and compactions rewriting the same
		// bytes). Snappy stays: switching it off changed nothing.
		MemTableSize: 16 << 20,
		// The last format whose log chunks do not record synced offsets:
		// with those, recovery takes a torn tail that FsyncInterval can
		// leave after a power loss, followed by blocks the disk did
		// write, for corruption and refuses to open. Without them the
		// tail ends the log, as it should.
		FormatMajorVersion: pebble.FormatColumnarBlocks,
		Logger:             pebbleLogger{},
		EventListener:      events,
	}
	// A Get of an absent key (a new thread's marker, a new run id) would
	// otherwise search every table whose range holds it: nearly all.
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	po.LBaseMaxBytes = 256 << 20 // see MemTableSize
	db, err := pebble.Open(dir, po)
	if err != nil && (errors.Is(err, syscall.EAGAIN) || strings.Contains(err.Error(), "lock held")) {
		err = fmt.Errorf("%s is in use by another process (another chronicle on the same store.path?): %w", dir, err)
	}
	if err != nil {
		cache.Unref()
		return nil, nil, nil, err
	}
	return db, cache, fs, nil
}

// pebbleLogger drops pebble's informational lines and keeps its errors.
type pebbleLogger struct{}

func (pebbleLogger) Infof(string, ...any) {}
func (pebbleLogger) Errorf(format string, args ...any) {
	log.Printf("embedded: pebble: "+format, args...)
}
func (pebbleLogger) Fatalf(format string, args ...any) {
	log.Fatalf("embedded: pebble: "+format, args...)
}

// syncLogs is FsyncInterval's ticker.
func (s *Store) syncLogs() {
	defer close(s.syncer)
	t := time.NewTicker(s.opts.FsyncInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			s.syncLog()
		case <-s.stop:
			return
		}
	}
}

// syncLog syncs the write-ahead log (FsyncInterval). A failed sync breaks
// the store: what the log held may not be on disk, and after a failed
// fdatasync the kernel may have dropped the pages and cleared the error,
// so a later sync cannot be trusted to say so. Every write and Ping then
// answers ErrUnavailable (clients are told, never a clean end of a turn
// that may not last) until chronicle restarts and replays what the disk
// has.
func (s *Store) syncLog() error {
	err := s.fs.syncLogs()
	if err != nil && s.broken.CompareAndSwap(nil, &err) {
		log.Printf("embedded: fsync of the write-ahead log failed, refusing writes until restart: %v", err)
	}
	return err
}

func (s *Store) closeKV() error {
	err := s.db.Close()
	s.cache.Unref()
	s.background.endAll()
	return err
}

// Close stops the commit loop, syncs and closes the key space.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		close(s.stop)
		<-s.stopped
		<-s.syncer
		s.closing.Lock()
		s.closed = true
		s.closing.Unlock()
		err = s.closeKV()
	})
	return err
}

// Ping reports whether the key space is open and readable.
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.stop:
		return unavailable(errClosed)
	default:
	}
	if p := s.broken.Load(); p != nil {
		return unavailable(fmt.Errorf("the write-ahead log could not be synced: %w", *p))
	}
	return s.view(func(tx *Tx) error { return nil })
}

func unavailable(err error) error {
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict) ||
		errors.Is(err, store.ErrLeaseHeld) || errors.Is(err, store.ErrIllegalTransition) || errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: embedded: %w", store.ErrUnavailable, err)
}

// view runs fn on a snapshot of the key space.
func (s *Store) view(fn func(tx *Tx) error) error {
	s.closing.RLock()
	defer s.closing.RUnlock()
	if s.closed {
		return unavailable(errClosed)
	}
	snap := s.db.NewSnapshot()
	tx := &Tx{r: snap}
	err := fn(tx)
	// A failed read looks absent to fn: its error, not what fn made of
	// the absence (a not-found), is the answer.
	if eerr := tx.end(); eerr != nil {
		err = eerr
	}
	snap.Close()
	if err != nil {
		return unavailable(err)
	}
	return nil
}

func (s *Store) now() int64 { return s.opts.Now().UnixMilli() }

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func threadID(k store.Key) []byte { return []byte(k.Tenant + "\x00" + k.Thread) }

func runKey(k store.Key, run string) string { return k.Tenant + "\x00" + k.Thread + "\x00" + run }

func u32(i int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(i))
	return b[:]
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// threadMeta is the JSON kept under t/<thread>/meta.
type threadMeta struct {
	Created    int64  `json:"c,omitempty"`
	Updated    int64  `json:"u,omitempty"`
	Connection string `json:"conn,omitempty"`
	Format     string `json:"fmt,omitempty"`
	Model      string `json:"model,omitempty"`
	// System is where threads written before the sys key kept the system
	// blob; the next transcript write moves it there (systemOf).
	System     []byte       `json:"sys,omitempty"`
	Version    int64        `json:"v,omitempty"`
	LeaseRun   string       `json:"lrun,omitempty"`
	LeaseOwner string       `json:"lown,omitempty"`
	LeaseToken int64        `json:"ltok,omitempty"`
	LeaseExp   int64        `json:"lexp,omitempty"`
	LeaseSeq   int64        `json:"lseq,omitempty"`
	Runs       int64        `json:"nruns,omitempty"`
	LastStatus store.Status `json:"last,omitempty"`
	Usage      store.Usage  `json:"usage"`
	Msgs       int          `json:"n,omitempty"`
	// A fork's parent, fork point and run (store.ForkPoint).
	ForkParent string `json:"par,omitempty"`
	ForkAt     int    `json:"fat,omitempty"`
	ForkRun    string `json:"frun,omitempty"`
	// Digest is "<v>:<digest>": the transcript's store.Digest as of
	// Version v (the Redis store's meta field dg). It holds only while
	// Version is v: a transcript write that does not bring the digest
	// (store.Transcript.Digest) clears it, and an older chronicle, which
	// rewrites the meta without it, drops it.
	Digest string `json:"dg,omitempty"`
}

// digest is the transcript's digest the meta records, when it holds for
// the meta's version.
func (m *threadMeta) digest() (string, bool) {
	i := strings.IndexByte(m.Digest, ':')
	if i < 0 {
		return "", false
	}
	v, err := strconv.ParseInt(m.Digest[:i], 10, 64)
	if err != nil || v != m.Version {
		return "", false
	}
	return m.Digest[i+1:], true
}

// setDigest records d as the digest of the transcript at m's version ("":
// none).
func (m *threadMeta) setDigest(d string) {
	if d == "" {
		m.Digest = ""
		return
	}
	m.Digest = strconv.FormatInt(m.Version, 10) + ":" + d
}

func (m *threadMeta) fork() store.ForkPoint {
	return store.ForkPoint{Parent: m.ForkParent, At: m.ForkAt, Run: m.ForkRun}
}

// warmEncoders has encoding/json build the encoders of the records the
// committer writes.
func warmEncoders() {
	_, _ = json.Marshal(&threadMeta{})
	_, _ = json.Marshal(&runRec{})
	_, _ = json.Marshal(&intrRec{})
}

// runRec is the JSON kept under t/<thread>/runs/<run>.
type runRec struct {
	N                int64        `json:"n"`
	Status           store.Status `json:"s"`
	Reason           string       `json:"reason,omitempty"`
	Model            string       `json:"model,omitempty"`
	Started          int64        `json:"st"`
	Finished         int64        `json:"fin,omitempty"`
	Usage            *store.Usage `json:"usage,omitempty"`
	Error            []byte       `json:"err,omitempty"`
	AnswerStatus     int          `json:"hs,omitempty"`
	InterruptedCalls []byte       `json:"ic,omitempty"`
	Repairs          []byte       `json:"rep,omitempty"`
	Restored         []byte       `json:"rst,omitempty"`
	SessionID        *string      `json:"sid,omitempty"`
	Partial          []byte       `json:"partial,omitempty"`
	LeaseOwner       string       `json:"lown,omitempty"`
	LeaseToken       int64        `json:"ltok"`
	LeaseExp         int64        `json:"lexp,omitempty"`
	Detached         int64        `json:"det,omitempty"`
	Cancel           bool         `json:"cancel,omitempty"`
	ResumedBy        string       `json:"rby,omitempty"`
	Fingerprint      string       `json:"fp,omitempty"`
	Events           int64        `json:"ev,omitempty"`
	EvExp            int64        `json:"evexp,omitempty"`
	End              int          `json:"end,omitempty"`
	Redactions       []byte       `json:"red,omitempty"`
}

func (r *runRec) toRun(k store.Key, id string) store.Run {
	return store.Run{
		ID: id, Key: k, Status: r.Status, Reason: r.Reason, Model: r.Model,
		StartedAt: fromMS(r.Started), FinishedAt: fromMS(r.Finished), Usage: r.Usage,
		Error: r.Error, AnswerStatus: r.AnswerStatus, InterruptedCalls: r.InterruptedCalls, Repairs: r.Repairs, Restored: r.Restored,
		SessionID: r.SessionID, Partial: r.Partial, Interrupts: []store.Interrupt{},
		LeaseOwner: r.LeaseOwner, LeaseToken: r.LeaseToken, LeaseExpires: fromMS(r.LeaseExp),
		DetachedSince: fromMS(r.Detached), CancelRequested: r.Cancel, ResumedBy: r.ResumedBy,
		Fingerprint: r.Fingerprint, Events: r.Events, End: r.End, Redactions: r.Redactions,
	}
}

type intrRec struct {
	Name   string                `json:"name"`
	Status store.InterruptStatus `json:"s"`
	Run    string                `json:"run"`
}

func getJSON(b *Bucket, key []byte, v any) (bool, error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

func putJSON(b *Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}

// threadBucket returns the thread's bucket, or nil.
func threadBucket(tx *Tx, k store.Key) *Bucket {
	return tx.Bucket(bThreads).Bucket(tx.threadID(k))
}

// createThreadBucket writes the thread's marker if it has none (its
// child buckets, like every bucket but a thread's, need none: kv.go).
func createThreadBucket(tx *Tx, k store.Key) (*Bucket, error) {
	return tx.Bucket(bThreads).CreateBucketIfNotExists(tx.threadID(k))
}

// LoadThread reads meta and messages in one read transaction.
func (s *Store) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	if err := k.Validate(); err != nil {
		return store.Thread{}, err
	}
	var th store.Thread
	found := false
	err := readAgain(func() error {
		err := s.view(func(tx *Tx) error {
			var err error
			th, found, err = readThread(tx, k, nil, true)
			return err
		})
		if err != nil {
			return err
		}
		return s.loadAll(th.Messages)
	})
	if err != nil {
		return store.Thread{}, err
	}
	if !found {
		return store.Thread{}, fmt.Errorf("thread %s: %w", k, store.ErrNotFound)
	}
	return th, nil
}

// readThreadMeta reads the thread's meta inside tx, without its messages
// (and without its system blob unless system).
func readThreadMeta(tx *Tx, k store.Key, known *threadMeta, system bool) (th store.Thread, found bool, err error) {
	th, _, found, err = threadMetaOf(tx, k, known, system)
	return th, found, err
}

// threadMetaOf reads the thread's meta inside tx, or takes it from known
// (the caller's copy, decoded in the same transaction) when not nil. The
// system blob is copied out only when system.
func threadMetaOf(tx *Tx, k store.Key, known *threadMeta, system bool) (store.Thread, int, bool, error) {
	tb := threadBucket(tx, k)
	if tb == nil {
		return store.Thread{}, 0, false, nil
	}
	var m threadMeta
	var err error
	if known != nil {
		m = *known
	} else {
		m, err = loadMeta(tb)
	}
	if err != nil || m.Created == 0 {
		return store.Thread{}, 0, false, err
	}
	th := store.Thread{Key: k, Connection: m.Connection, Format: m.Format, Model: m.Model,
		Version: m.Version, CreatedAt: fromMS(m.Created), UpdatedAt: fromMS(m.Updated), Fork: m.fork()}
	if system {
		th.System = clone(systemOf(tb, &m))
	}
	return th, m.Msgs, true, nil
}

// systemOf is the thread's system blob, in place (valid for tx's life). It
// has a key of its own rather than a field of the meta, which every start,
// renewal and finish decodes and rewrites: a Gemini systemInstruction of
// 100 KB would otherwise be base64-encoded and written several times a
// turn.
func systemOf(tb *Bucket, m *threadMeta) []byte {
	if m.System != nil {
		return m.System
	}
	return tb.Get(kSys)
}

// transcriptDigest is store.Digest of the thread's stored hashes: the one
// m records for its version (O(1)), or else the hashes read in place
// without copying a message, which m then records when record is set
// (its caller writes m in the same step, so the digest holds as long as
// the version does).
func transcriptDigest(tb *Bucket, m *threadMeta, record bool) string {
	if d, ok := m.digest(); ok {
		return d
	}
	h := sha1.New()
	if mb := tb.Bucket(bMsgs); mb != nil {
		mb.ForEach(func(_, v []byte) error {
			h.Write(v[:len(store.Hash{})])
			return nil
		})
	}
	var sum [sha1.Size]byte
	d := hex.EncodeToString(h.Sum(sum[:0]))
	if record {
		m.setDigest(d)
	}
	return d
}

// readThread reads the thread's meta and messages inside tx (read or
// write); found is false for a thread without a saved transcript. A large
// message comes back as its reference, for loadAll once tx is over.
func readThread(tx *Tx, k store.Key, known *threadMeta, system bool) (th store.Thread, found bool, err error) {
	th, n, found, err := threadMetaOf(tx, k, known, system)
	if err != nil || !found {
		return store.Thread{}, false, err
	}
	tb := threadBucket(tx, k)
	th.Messages, th.Hashes = make([][]byte, 0, n), make([]store.Hash, 0, n)
	err = tb.Bucket(bMsgs).ForEach(func(_, v []byte) error {
		var h store.Hash
		copy(h[:], v)
		th.Hashes = append(th.Hashes, h)
		th.Messages = append(th.Messages, clone(v[len(h):]))
		return nil
	})
	if err != nil {
		return store.Thread{}, false, err
	}
	return th, true, nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// fence checks that l is the thread's current lease.
func fence(m *threadMeta, l store.Lease) error {
	if m.LeaseRun != l.RunID || m.LeaseToken != l.Token || l.Token == 0 {
		return fmt.Errorf("thread %s run %s token %d: %w", l.Key, l.RunID, l.Token, store.ErrFenced)
	}
	return nil
}

// checkTranscript verifies t against the stored messages without writing.
func checkTranscript(tb *Bucket, m *threadMeta, t *store.Transcript) error {
	if t.Keep > m.Msgs {
		return fmt.Errorf("transcript keeps %d of %d messages: %w", t.Keep, m.Msgs, store.ErrConflict)
	}
	if t.Keep > 0 {
		v := tb.Bucket(bMsgs).Get(u32(t.Keep - 1))
		if v == nil || [16]byte(v[:16]) != t.KeepHash {
			return fmt.Errorf("transcript prefix hash differs at %d: %w", t.Keep-1, store.ErrConflict)
		}
	}
	return nil
}

// applied reports whether t is already what the thread holds (a retried
// write, or one that repeats the stored transcript), so that applying it
// again changes nothing, not even the version. With the digest of both
// (the write's store.Transcript.Digest and the one the meta records) it
// compares them, without reading a message.
func applied(tb *Bucket, m *threadMeta, t *store.Transcript) bool {
	if m.Msgs != t.Keep+len(t.Messages) || !bytes.Equal(systemOf(tb, m), t.System) || m.Created == 0 {
		return false
	}
	if len(t.Hashes) == 0 {
		return true
	}
	if d, ok := m.digest(); ok && t.Digest != "" {
		return d == t.Digest
	}
	mb := tb.Bucket(bMsgs)
	for i, h := range t.Hashes {
		v := mb.Get(u32(t.Keep + i))
		if v == nil || [16]byte(v[:16]) != h {
			return false
		}
	}
	return true
}

// writeTranscript applies a checked transcript and bumps the version. t's
// large messages are references to files w staged (w.transcript). The
// meta records t.Digest for the new version (none when t has none). A
// write already applied writes no message and keeps the version, as the
// Redis store's does; it sets the connection, format and model it names.
func writeTranscript(tx *Tx, tb *Bucket, m *threadMeta, t *store.Transcript, w *blobWrite, thread []byte, now int64) error {
	if applied(tb, m, t) {
		setNames(m, t)
		if _, ok := m.digest(); !ok && t.Digest != "" {
			m.setDigest(t.Digest)
		}
		return nil
	}
	mb := tb.Bucket(bMsgs)
	n := t.Keep + len(t.Messages)
	// same[i-t.Keep]: message i is stored as the write has it, a row
	// holding the message itself (not a file's name), so it is not
	// written again.
	var same []bool
	for i := t.Keep; i < m.Msgs; i++ {
		key := u32(i)
		old := mb.Get(key)
		if i < n && len(old) >= 16 && !isRef(old[16:]) {
			j := i - t.Keep
			if [16]byte(old[:16]) == t.Hashes[j] && string(old[16:]) == string(t.Messages[j]) {
				if same == nil {
					same = make([]bool, len(t.Messages))
				}
				same[j] = true
				continue
			}
		}
		if len(old) > 16 {
			if err := w.drop(tx, old[16:]); err != nil {
				return err
			}
		}
		// A key the write sets again needs no delete first.
		if i >= n {
			if err := mb.Delete(key); err != nil {
				return err
			}
		}
	}
	for i, msg := range t.Messages {
		if same != nil && same[i] {
			continue
		}
		// pebble copies it (and the hot cache, when the step read it).
		v := tx.alloc(16 + len(msg))[:16+len(msg)]
		copy(v, t.Hashes[i][:])
		copy(v[16:], msg)
		if err := mb.Put(u32(t.Keep+i), v); err != nil {
			return err
		}
		if err := w.use(tx, msg, thread); err != nil {
			return err
		}
	}
	m.Msgs = t.Keep + len(t.Messages)
	if !bytes.Equal(systemOf(tb, m), t.System) || m.System != nil {
		var err error
		if t.System == nil {
			err = tb.Delete(kSys)
		} else {
			err = tb.Put(kSys, t.System)
		}
		if err != nil {
			return err
		}
	}
	m.System = nil
	setNames(m, t)
	if m.Created == 0 {
		m.Created = now
	}
	m.Updated = now
	m.Version++
	m.setDigest(t.Digest)
	return nil
}

// setNames sets the connection, format and model a transcript write names.
func setNames(m *threadMeta, t *store.Transcript) {
	if t.Connection != "" {
		m.Connection = t.Connection
	}
	if t.Format != "" {
		m.Format = t.Format
	}
	if t.Model != "" {
		m.Model = t.Model
	}
}

// touchIndex moves the thread's audit entries to m.Updated. An entry's
// key names the time, so each is set once and removed once (dropIndex's
// deleteOnce): upd, the time they are at, is what keeps an entry from
// being set again while it exists.
func touchIndex(tx *Tx, k store.Key, m *threadMeta) error {
	if m.Created == 0 {
		return nil
	}
	id := tx.threadID(k)
	upd := tx.Bucket(bUpd)
	if old := upd.Get(id); old != nil {
		if int64(binary.BigEndian.Uint64(old)) == m.Updated {
			// The entries are already there: deleting and setting
			// them again would write five keys that change nothing
			// (and setting them without deleting them would set a
			// key twice, which deleteOnce must never meet).
			return nil
		}
		if err := dropIndex(tx, k, int64(binary.BigEndian.Uint64(old))); err != nil {
			return err
		}
	}
	idx, gidx := indexKeys(tx, k, m.Updated)
	if err := tx.Bucket(bIdx).Put(idx, nil); err != nil {
		return err
	}
	if err := tx.Bucket(bGidx).Put(gidx, nil); err != nil {
		return err
	}
	return upd.putOwned(id, u64(uint64(m.Updated)))
}

func dropIndex(tx *Tx, k store.Key, updated int64) error {
	idx, gidx := indexKeys(tx, k, updated)
	if err := tx.Bucket(bIdx).deleteOnce(idx); err != nil {
		return err
	}
	return tx.Bucket(bGidx).deleteOnce(gidx)
}

// indexKeys are the thread's keys in idx (<tenant>\x00<^updated><thread>)
// and gidx (<^updated><tenant>\x00<thread>), in the arena.
func indexKeys(tx *Tx, k store.Key, updated int64) (idx, gidx []byte) {
	inv := ^uint64(updated)
	idx = tx.alloc(len(k.Tenant) + 1 + 8 + len(k.Thread))
	idx = binary.BigEndian.AppendUint64(append(append(idx, k.Tenant...), 0), inv)
	idx = append(idx, k.Thread...)
	gidx = tx.alloc(8 + len(k.Tenant) + 1 + len(k.Thread))
	gidx = append(append(binary.BigEndian.AppendUint64(gidx, inv), k.Tenant...), 0)
	return idx, append(gidx, k.Thread...)
}

// SaveTranscript writes a transcript under the lease.
func (s *Store) SaveTranscript(ctx context.Context, l store.Lease, t store.Transcript) error {
	if err := l.Key.Validate(); err != nil {
		return err
	}
	if err := t.Check(); err != nil {
		return err
	}
	w := s.blobWrite()
	stored, err := w.transcript(&t)
	if err == nil {
		err = w.sync()
	}
	if err != nil {
		w.end(err)
		return err
	}
	var refused error
	err = s.update(func(tx *Tx) error {
		refused = nil
		w.begin()
		tb := threadBucket(tx, l.Key)
		if tb == nil {
			refused = fmt.Errorf("thread %s: %w", l.Key, store.ErrFenced)
			return nil
		}
		m, err := loadMeta(tb)
		if err != nil {
			return err
		}
		if refused = fence(&m, l); refused != nil {
			return nil
		}
		if refused = checkTranscript(tb, &m, stored); refused != nil {
			return nil
		}
		if err := writeTranscript(tx, tb, &m, stored, w, threadID(l.Key), s.now()); err != nil {
			return err
		}
		if err := putMeta(tb, &m); err != nil {
			return err
		}
		return touchIndex(tx, l.Key, &m)
	})
	w.end(err)
	if err != nil {
		return err
	}
	return refused
}

// DeleteThread removes the thread bucket and every index entry naming it.
func (s *Store) DeleteThread(ctx context.Context, k store.Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	var runs []string
	w := s.blobWrite()
	err := s.update(func(tx *Tx) error {
		runs = runs[:0]
		w.begin()
		tb := threadBucket(tx, k)
		if tb == nil {
			return nil
		}
		for _, b := range []struct {
			name []byte
			skip int
		}{{bMsgs, len(store.Hash{})}, {bResp, 0}, {bUp, 0}} {
			if err := w.dropAll(tx, tb.Bucket(b.name), b.skip); err != nil {
				return err
			}
		}
		rb := tb.Bucket(bRuns)
		err := rb.ForEach(func(id, v []byte) error {
			var r runRec
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			runs = append(runs, string(id))
			if err := tx.Bucket(bRunIDs).Delete([]byte(k.Tenant + "\x00" + string(id))); err != nil {
				return err
			}
			if err := tx.Bucket(bActive).Delete([]byte(runKey(k, string(id)))); err != nil {
				return err
			}
			if r.EvExp != 0 {
				return tx.Bucket(bEvExp).Delete(append(u64(uint64(r.EvExp)), runKey(k, string(id))...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := dropSubjects(tx, tb, k); err != nil {
			return err
		}
		id := threadID(k)
		if old := tx.Bucket(bUpd).Get(id); old != nil {
			if err := dropIndex(tx, k, int64(binary.BigEndian.Uint64(old))); err != nil {
				return err
			}
			if err := tx.Bucket(bUpd).Delete(id); err != nil {
				return err
			}
		}
		return tx.Bucket(bThreads).DeleteBucket(id)
	})
	w.end(err)
	for _, r := range runs {
		s.notify(runKey(k, r))
	}
	return err
}

// SessionID returns the stored session id for (connection, model), storing
// candidate when there is none.
func (s *Store) SessionID(ctx context.Context, connection, model, candidate string) (string, error) {
	key := []byte(connection + "\x00" + model)
	var got string
	err := s.view(func(tx *Tx) error {
		got = string(tx.Bucket(bSess).Get(key))
		return nil
	})
	if err != nil || got != "" {
		return got, err
	}
	err = s.update(func(tx *Tx) error {
		b := tx.Bucket(bSess)
		if v := b.Get(key); v != nil {
			got = string(v)
			return nil
		}
		got = candidate
		return b.Put(key, []byte(candidate))
	})
	return got, err
}

// DebugKeys lists every key the store holds, one string per leaf key, as
// "bucket/…/key". Tests use it to prove that a delete leaves nothing behind.
func (s *Store) DebugKeys(ctx context.Context) ([]string, error) {
	var out []string
	err := s.view(func(tx *Tx) error {
		it, err := tx.r.NewIter(nil)
		if err != nil {
			return err
		}
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			if path, leaf := decodeKey(it.Key()); leaf {
				out = append(out, path)
			}
		}
		return it.Error()
	})
	return out, err
}

// decodeKey spells a key of the key space as "bucket/…/key"; leaf is false
// for a bucket's marker.
func decodeKey(k []byte) (path string, leaf bool) {
	var b strings.Builder
	for len(k) > 0 {
		switch k[0] {
		case tagLeaf:
			b.Write(k[1:])
			return b.String(), true
		case tagBucket:
			n, w := binary.Uvarint(k[1:])
			if w <= 0 || uint64(len(k)-1-w) < n {
				return b.String() + fmt.Sprintf("<bad key %x>", k), true
			}
			b.Write(k[1+w : 1+w+int(n)])
			b.WriteByte('/')
			k = k[1+w+int(n):]
		default:
			return b.String() + fmt.Sprintf("<bad key %x>", k), true
		}
	}
	return b.String(), false
}

// Durability says what the embedded store guarantees for an acknowledged
// write (store.Durability).
func (s *Store) Durability(context.Context) (string, error) {
	switch {
	case s.opts.NoSync:
		return "embedded: fsync off: an acknowledged turn survives a crash of chronicle, not of the machine", nil
	case s.opts.Fsync == FsyncAlways:
		return "embedded: fsync before every acknowledgement (group commit): an acknowledged turn is on disk; a write the disk refuses reaches the client as an error", nil
	}
	return fmt.Sprintf("embedded: fsync every %v: an acknowledged turn is in the operating system and survives a crash of chronicle; a power loss loses at most the last %v of turns, each whole or not at all", s.opts.FsyncInterval, s.opts.FsyncInterval), nil
}

// rootBuckets are the root buckets (their prefixes are built once,
// kv.go).
var rootBuckets = [][]byte{bThreads, bIdx, bGidx, bUpd, bRunIDs, bActive, bEvExp, bSess,
	bSubjIx, bTomb, bBlob, bKeys}
