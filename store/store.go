// Package store owns chronicle's persistence contract: the interfaces the
// proxy uses to keep threads (raw provider messages), runs and their
// lifecycle, interrupts, per-run event logs, thread leases, audit indexes and
// session ids, plus the sentinel errors every backend returns.
//
// Backends live in subpackages (store/redis, store/embedded) and are checked
// by one conformance suite, store/storetest. No backend type appears here, so
// callers depend on this package only. The store never parses provider JSON:
// messages, error bodies, response bodies and audit blobs are opaque bytes.
//
// See README.md for the key layout and which steps are atomic.
package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"time"
	"unsafe"
)

// Sentinel errors. Backends wrap them with %w; compare with errors.Is.
var (
	// ErrNotFound: the thread or run does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrFenced: the caller's lease is no longer the thread's current lease
	// (it expired and was taken, was released, or the run was swept). The
	// write was refused and nothing changed.
	ErrFenced = errors.New("store: lease fenced")
	// ErrLeaseHeld: another run holds the thread's lease.
	ErrLeaseHeld = errors.New("store: thread lease held")
	// ErrIllegalTransition: the run status change is not allowed by the
	// lifecycle (running → completed | failed | aborted | interrupted;
	// interrupted accepts only resumed_by).
	ErrIllegalTransition = errors.New("store: illegal run transition")
	// ErrConflict: a run id reused on another thread or with another request
	// fingerprint, a transcript prefix that no longer matches, or an event
	// sequence gap.
	ErrConflict = errors.New("store: conflict")
	// ErrUnavailable: the backend could not be reached (connection refused,
	// timeout, closed database). The proxy answers 503 store_unavailable.
	ErrUnavailable = errors.New("store: unavailable")
	// ErrInvalid: an id or argument outside what the store accepts.
	ErrInvalid = errors.New("store: invalid argument")
)

// Status is a run's lifecycle state.
type Status string

// Run statuses. Interrupted is parked, not terminal: the turn ended in tool
// calls whose results will start a new run.
const (
	Running     Status = "running"
	Completed   Status = "completed"
	Failed      Status = "failed"
	Aborted     Status = "aborted"
	Interrupted Status = "interrupted"
)

// Ended reports whether a run in status s no longer streams events (every
// status except Running).
func (s Status) Ended() bool { return s != Running }

// Final reports whether s is a status Finish may set.
func (s Status) Final() bool {
	switch s {
	case Completed, Failed, Aborted, Interrupted:
		return true
	}
	return false
}

// Reason written by Sweep on runs whose replica died.
const ReasonProxyLost = "proxy_lost"

// Key names a thread: tenant plus thread id.
type Key struct {
	Tenant string
	Thread string
}

func (k Key) String() string { return k.Tenant + "/" + k.Thread }

// Validate checks both parts (see ValidID and ValidTenant).
func (k Key) Validate() error {
	if err := ValidTenant(k.Tenant); err != nil {
		return err
	}
	return ValidID(k.Thread)
}

// ValidID checks a thread or run id: 1–128 of [A-Za-z0-9._:-].
func ValidID(id string) error {
	if len(id) == 0 || len(id) > 128 {
		return fmt.Errorf("%w: id length %d", ErrInvalid, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return fmt.Errorf("%w: id %q has byte %q", ErrInvalid, id, c)
		}
	}
	return nil
}

// ValidTenant checks a tenant: 1–256 printable ASCII bytes without space,
// '{' or '}' (Redis hash tags). Tenants may be key hashes in hex or base64.
func ValidTenant(t string) error {
	if len(t) == 0 || len(t) > 256 {
		return fmt.Errorf("%w: tenant length %d", ErrInvalid, len(t))
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
			return fmt.Errorf("%w: tenant has byte %q", ErrInvalid, c)
		}
	}
	return nil
}

// Hash identifies one message for prefix comparison; the caller computes it
// (adapters.HashMessage has the same shape and converts directly).
type Hash [16]byte

// Thread is a stored conversation.
type Thread struct {
	Key
	Connection string
	Format     string // openai-chat, gemini, openai-responses
	Model      string
	System     []byte   // Gemini systemInstruction, raw JSON; nil when none
	Messages   [][]byte // raw provider JSON, byte-for-byte
	Hashes     []Hash   // Hashes[i] belongs to Messages[i]
	Version    int64    // increments on every transcript write
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Fork is where the thread was forked from (fork.go); zero when it
	// is no fork. LoadThread and ForkThread fill it; the thread a
	// StartRun loads may leave it zero (a turn has no use for it).
	Fork ForkPoint
}

// Transcript is a transcript write: keep the first Keep stored messages,
// replace everything after them with Messages. Build it with Diff so that
// appending one message to a long thread writes one message.
type Transcript struct {
	Keep     int      // stored messages kept as they are
	KeepHash Hash     // hash of stored message Keep-1, checked (ignored when Keep is 0)
	Messages [][]byte // written after the kept prefix
	Hashes   []Hash   // one per message in Messages
	// System replaces the thread's system blob; nil clears it.
	System     []byte
	Connection string // set when non-empty
	Format     string // set when non-empty
	Model      string // set when non-empty
	// Digest, when set, is the Digest of the whole transcript after the
	// write (Diff sets it). A store may keep it, so that a StartRun with
	// KnownDigest compares digests without reading the hashes; it must be
	// right, or empty.
	Digest string
	// BaseDigest, when set, is the Digest of the stored transcript the
	// write was computed against (Diff's stored), and BaseLen its message
	// count. A store that kept the stored transcript's digest may, when it
	// matches, take the count and the kept prefix from them instead of
	// reading the stored hashes; they must be right, or BaseDigest empty.
	BaseDigest string
	BaseLen    int
}

// Diff returns the write that turns a thread whose messages hash to stored
// into next: it keeps the longest common prefix and writes the rest. When
// stored is a prefix of next that is exactly the new suffix; otherwise the
// diverging tail is overwritten.
func Diff(stored []Hash, next [][]byte, nextHashes []Hash) Transcript {
	keep := CommonPrefix(stored, nextHashes)
	t := Transcript{Keep: keep, Messages: next[keep:], Hashes: nextHashes[keep:], BaseLen: len(stored)}
	if keep > 0 {
		t.KeepHash = stored[keep-1]
	}
	if keep == len(stored) && keep == len(nextHashes) {
		t.Digest = Digest(stored)
		t.BaseDigest = t.Digest
		return t
	}
	// Both digests hash the common prefix once.
	h := sha1.New()
	h.Write(hashBytes(stored[:keep]))
	var base hash.Hash
	if c, ok := h.(hash.Cloner); ok {
		base, _ = c.Clone()
	}
	if base == nil {
		// A hash that cannot be cloned (a FIPS build's SHA-1): the
		// prefix is hashed again.
		base = sha1.New()
		base.Write(hashBytes(stored[:keep]))
	}
	base.Write(hashBytes(stored[keep:]))
	h.Write(hashBytes(nextHashes[keep:]))
	var sum [sha1.Size]byte
	t.BaseDigest = hexString(base.Sum(sum[:0]))
	t.Digest = hexString(h.Sum(sum[:0]))
	return t
}

// hashBytes is hs as the bytes they are laid out in, for one Write.
func hashBytes(hs []Hash) []byte {
	if len(hs) == 0 {
		return nil
	}
	return unsafe.Slice(&hs[0][0], len(hs)*len(Hash{}))
}

// hexString is a SHA-1 sum in hex, converted from a buffer on the stack
// (hex.EncodeToString allocates the buffer too).
func hexString(sum []byte) string {
	var buf [2 * sha1.Size]byte
	return string(buf[:hex.Encode(buf[:], sum)])
}

// CommonPrefix is how many leading hashes a and b share.
func CommonPrefix(a, b []Hash) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Check validates the shape of a transcript write.
func (t *Transcript) Check() error {
	if t.Keep < 0 || len(t.Messages) != len(t.Hashes) {
		return fmt.Errorf("%w: transcript keep %d, %d messages, %d hashes", ErrInvalid, t.Keep, len(t.Messages), len(t.Hashes))
	}
	return nil
}

// Usage is a run's token usage.
type Usage struct {
	InputTokens     int64
	OutputTokens    int64
	CachedTokens    int64
	ReasoningTokens int64
}

// Add returns u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens, u.CachedTokens + v.CachedTokens, u.ReasoningTokens + v.ReasoningTokens}
}

// InterruptStatus is the state of one tool call waiting for its result.
type InterruptStatus string

// Interrupt statuses: pending → resolved | cancelled.
const (
	Pending   InterruptStatus = "pending"
	Resolved  InterruptStatus = "resolved"
	Cancelled InterruptStatus = "cancelled"
)

// Interrupt is a tool call a parked run waits on.
type Interrupt struct {
	CallID string
	Name   string
	Status InterruptStatus
	RunID  string // the run that raised it
}

// Run is one request's turn on a thread. Blob fields hold opaque JSON the
// proxy produced; nil means null.
type Run struct {
	ID         string
	Key        Key
	Status     Status
	Reason     string
	Model      string
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
	Usage      *Usage    // nil when the upstream reported none
	Error      []byte    // upstream error body
	// AnswerStatus is the HTTP status the client was answered with (the
	// upstream's, or chronicle's own for a failure before one); 0 when
	// not recorded.
	AnswerStatus int
	// InterruptedCalls, Repairs and Restored are opaque JSON arrays.
	InterruptedCalls []byte
	Repairs          []byte
	Restored         []byte
	SessionID        *string // the value sent upstream; nil when none
	Partial          []byte  // text-so-far snapshot
	Interrupts       []Interrupt
	LeaseOwner       string
	LeaseToken       int64
	LeaseExpires     time.Time
	DetachedSince    time.Time
	CancelRequested  bool
	ResumedBy        string
	Fingerprint      string
	Events           int64  // events appended so far
	Response         []byte // stored non-stream body; only GetRun fills it
	// UpstreamBody is the request body chronicle sent upstream, kept for
	// audit when the connection asks for it (audit.upstream_body); nil when
	// not kept. Only GetRun fills it.
	UpstreamBody []byte
	// End is how many messages the thread held when the run finished
	// (the transcript as the run left it: a fork at the run keeps
	// them); 0 while running, and for a run swept as lost or finished
	// before chronicle recorded it.
	End int
	// Redactions is what the connection's redaction masked before the
	// run's bodies were stored (an opaque JSON array); nil when none.
	Redactions []byte
}

// Lease is a thread's one-run-at-a-time lease, held by a run. Token is a
// fencing token that grows on every acquisition; every write made under a
// lease carries it and is refused (ErrFenced) once the lease moved on.
type Lease struct {
	Key     Key
	RunID   string
	Owner   string
	Token   int64
	TTL     time.Duration
	Expires time.Time
}

// StartRun asks for a thread lease and a new run, or the existing run with
// that id.
type StartRun struct {
	Key         Key
	RunID       string
	Owner       string        // replica id, for audit
	TTL         time.Duration // lease TTL
	Fingerprint string        // request fingerprint; a reuse with another is ErrConflict
	Model       string
	// LoadThread asks for the thread in the same step (one round trip,
	// read atomically with the lease): Started.Thread and ThreadFound.
	LoadThread bool
	// KnownDigest, with LoadThread, is the Digest of the transcript the
	// caller already holds. When the stored transcript has that digest the
	// messages and hashes are not sent back: Started.Thread carries the
	// meta only and Started.Unchanged is true. "" always loads them.
	KnownDigest string
	// NoSystem, with LoadThread, says the caller has no use for the
	// thread's system blob (its request brings or clears its own):
	// Started.Thread.System is nil, and the store need not read it.
	NoSystem bool
	// Subject, when set, is the app-supplied subject of the request
	// (X-Chronicle-Subject, ValidSubject): the thread keeps it and the
	// tenant's subject index names the thread (store.Erasure).
	Subject string
	// FreshRunID: the caller generated RunID just now from a random
	// source (the proxy's own id, never a client's X-Run-Id), so no run
	// can have it yet; a store may skip checking that the id is new (the
	// embedded store skips two reads of absent keys). A start that may
	// have been applied before (a retry after an unknown outcome, a
	// journalled start replayed, a rebuild) must not set it: the check is
	// what finds the run it made. Redis ignores it (its check is what
	// makes a resend of the start script safe).
	FreshRunID bool
}

// Digest names a transcript by its message hashes: equal digests mean
// equal hash sequences (SHA-1 over the concatenated hashes, which Redis
// scripts can compute too), so a caller holding the messages of one can
// skip reading them again.
func Digest(hashes []Hash) string {
	sum := sha1.Sum(hashBytes(hashes))
	return hexString(sum[:])
}

// Started is StartRun's result. When Created is false the run already existed
// (a retry): Run is its current state and Lease is zero.
//
// With StartRun.LoadThread, a successful call (Created or not) also carries
// the thread exactly as LoadThread returns it (meta, messages, hashes), read
// in the same atomic step as the lease; ThreadFound is false where
// LoadThread would answer ErrNotFound (a thread without a saved
// transcript), and Thread is then zero. A refused call (an error) carries
// no thread.
type Started struct {
	Run         Run
	Lease       Lease
	Created     bool
	Thread      Thread
	ThreadFound bool
	// Unchanged: the stored transcript has StartRun.KnownDigest, and
	// Thread.Messages and Thread.Hashes were left out.
	Unchanged bool
}

// RunPatch updates a running run while its lease is renewed. Nil/zero fields
// are left alone.
type RunPatch struct {
	Partial       []byte
	DetachedSince time.Time
}

// Renewal is Renew's result.
type Renewal struct {
	Lease           Lease // with the new expiry
	CancelRequested bool  // another replica asked the run to stop
}

// Finish ends a run: the transcript write (if any) and the status change are
// one atomic step, fenced by the lease, which it releases.
type Finish struct {
	Status     Status
	Reason     string
	Error      []byte
	Usage      *Usage
	Model      string      // set when non-empty
	Transcript *Transcript // nil: the transcript is left as it is
	Partial    []byte
	Response   []byte // non-stream body for idempotent replay
	// UpstreamBody is the request body sent upstream, stored with the run
	// for audit (audit.upstream_body); nil: not kept.
	UpstreamBody []byte
	// AnswerStatus is the HTTP status the client was answered with; 0:
	// not recorded (Run.AnswerStatus).
	AnswerStatus int
	// Set when non-nil.
	InterruptedCalls []byte
	Repairs          []byte
	Restored         []byte
	SessionID        *string
	// Redactions is recorded on the run when non-nil (Run.Redactions).
	Redactions []byte
	// Interrupts are new pending calls raised by this run (status Interrupted).
	Interrupts []Interrupt
	// Resolve and Cancel name earlier pending interrupts of this thread.
	Resolve []string
	Cancel  []string
	// Resumes names the parked run whose calls this run answered; its
	// resumed_by becomes this run.
	Resumes string
	// Events, numbered EventsFrom, EventsFrom+1, …, end the run's event
	// log in the finish's own step, as AppendEvents would append them: a
	// stream's last batch then costs no store write of its own before the
	// client gets its last event. Events that would leave a gap are
	// dropped (the log ends short, as after a failed AppendEvents) and the
	// run finishes all the same.
	EventsFrom int64
	Events     [][]byte
	// Rebuild, when set, lets the finish stand on its own if the store
	// lost what it builds on: the run's start or its pending turn,
	// acknowledged and then lost (a Redis crash inside its AOF's fsync
	// window, a failover before they replicated). Backends ignore it; the
	// spool (store/spool), replaying a finish the store refuses for that
	// reason, starts the run again and writes the whole transcript, if
	// the thread has not moved past it.
	Rebuild *Rebuild
}

// Rebuild is what a finish needs to be applied from nothing.
type Rebuild struct {
	Start      StartRun   // the run's start, to do again
	Transcript Transcript // the whole transcript the finish leaves (Keep 0)
}

// Event is one entry of a run's event log; Seq is 1-based.
type Event struct {
	Seq  int64
	Data []byte
}

// RunRef names a run.
type RunRef struct {
	Key   Key
	RunID string
}

// ThreadQuery filters the audit listing. Empty fields do not filter.
type ThreadQuery struct {
	Tenant     string // "" lists across tenants
	Connection string
	Model      string
	Status     Status // the thread's last run status
	Since      time.Time
	Until      time.Time
	Cursor     string
	Limit      int // default 50
}

// ThreadSummary is one audit listing entry.
type ThreadSummary struct {
	Key        Key
	Connection string
	Format     string
	Model      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	Runs       int64
	LastStatus Status
	Usage      Usage
	Fork       ForkPoint // zero when the thread is no fork
}

// ThreadPage is one page of the audit listing, newest-updated first.
type ThreadPage struct {
	Threads    []ThreadSummary
	NextCursor string // "" at the end
}

// Threads loads and writes transcripts.
type Threads interface {
	// LoadThread returns meta, messages and hashes in one round trip.
	LoadThread(ctx context.Context, k Key) (Thread, error)
	// SaveTranscript writes a transcript under a lease (the pending turn at
	// a run's start).
	SaveTranscript(ctx context.Context, l Lease, t Transcript) error
	// DeleteThread removes the thread and every key it owns.
	DeleteThread(ctx context.Context, k Key) error
}

// Runs drives the run lifecycle and the thread lease.
type Runs interface {
	// StartRun takes the thread lease and creates the run, or returns the
	// run if the id exists on this thread (idempotent). A run id used on
	// another thread of the tenant, or with another fingerprint, is
	// ErrConflict; a lease held by a live run is ErrLeaseHeld (Started.Lease
	// then describes the holder). An expired holder is marked failed
	// (proxy_lost) and its lease taken. Started is nil with any other
	// error. (A pointer: the value is 800 bytes, and each frame it passed
	// through by value held a copy on the stack of the request that waits
	// on the call.)
	StartRun(ctx context.Context, s StartRun) (*Started, error)
	// Renew extends the lease, applies the patch and reports whether a
	// cancel was requested.
	Renew(ctx context.Context, l Lease, p RunPatch) (Renewal, error)
	// Release gives the lease up without ending the run; idempotent.
	Release(ctx context.Context, l Lease) error
	// Finish ends the run (see Finish). Applying the same Finish again
	// succeeds without changing anything.
	// f is read, never kept or changed. (A pointer: the value is 360 bytes,
	// copied on the stack of each frame it passed through.)
	Finish(ctx context.Context, l Lease, f *Finish) error
	// GetRun returns one run with its stored response and upstream bodies.
	GetRun(ctx context.Context, k Key, runID string) (Run, error)
	// ListRuns returns a thread's runs oldest first, without response or
	// upstream bodies.
	ListRuns(ctx context.Context, k Key) ([]Run, error)
	// FindRun returns the thread a run id belongs to within a tenant.
	FindRun(ctx context.Context, tenant, runID string) (Key, error)
	// RequestCancel flags a running run; its owner sees it on Renew. It
	// returns the run; a run that already ended is returned unchanged.
	RequestCancel(ctx context.Context, k Key, runID string) (Run, error)
	// Sweep marks running runs whose lease expired failed (proxy_lost),
	// releasing their leases, and drops expired event logs. It returns
	// the runs it marked.
	Sweep(ctx context.Context) ([]RunRef, error)
}

// Events is the per-run event log.
type Events interface {
	// AppendEvents appends events numbered first, first+1, … under the run's
	// lease. Events already stored are skipped (a retry is harmless); a gap
	// is ErrConflict.
	// The store keeps no reference to events after it returns.
	AppendEvents(ctx context.Context, l Lease, first int64, events [][]byte) error
	// FollowEvents calls fn for every event after seq `after`, in order,
	// waiting for new ones until the run ends; it returns nil once the run
	// ended and fn saw every event, or fn's error, or ctx's.
	FollowEvents(ctx context.Context, k Key, runID string, after int64, fn func(Event) error) error
}

// Audit lists threads and tenants.
type Audit interface {
	ListThreads(ctx context.Context, q ThreadQuery) (ThreadPage, error)
	ListTenants(ctx context.Context) ([]string, error)
}

// Sessions keeps stable per-(connection, model) session ids.
type Sessions interface {
	// SessionID returns the stored id for (connection, model), storing
	// candidate first if there is none.
	SessionID(ctx context.Context, connection, model, candidate string) (string, error)
}

// Store is everything a backend provides.
type Store interface {
	Threads
	Runs
	Events
	Audit
	Sessions
	Forks
	// Ping reports whether the backend is reachable (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// AsyncSaver is a Store that can queue a transcript write without the
// caller waiting for it. SaveTranscriptAsync applies t as SaveTranscript
// would and returns at once; done gets the outcome SaveTranscript would
// have returned, exactly once, on a goroutine of the store's (or on the
// caller's, before SaveTranscriptAsync returns, when t or l is invalid).
// done must not block. ctx bounds the write as it bounds SaveTranscript;
// a write still queued when ctx ends is not sent.
//
// The proxy saves a streamed turn's pending transcript this way: with a
// goroutine per write waiting on the store, a burst of streams opening at
// once held a goroutine stack per stream for as long as the store lagged.
type AsyncSaver interface {
	SaveTranscriptAsync(ctx context.Context, l Lease, t Transcript, done func(error))
}

// SaveAsync writes t without the caller waiting: queued on st when it is an
// AsyncSaver, else on a goroutine of its own. done gets SaveTranscript's
// result, once.
func SaveAsync(ctx context.Context, st Store, l Lease, t Transcript, done func(error)) {
	if as, ok := st.(AsyncSaver); ok {
		as.SaveTranscriptAsync(ctx, l, t, done)
		return
	}
	go func() { done(st.SaveTranscript(ctx, l, t)) }()
}

// CheckFinish validates a Finish before a backend applies it.
func CheckFinish(f *Finish) error {
	if !f.Status.Final() {
		return fmt.Errorf("%w: finish with status %q", ErrIllegalTransition, f.Status)
	}
	if f.Transcript != nil {
		if err := f.Transcript.Check(); err != nil {
			return err
		}
	}
	if f.Resumes != "" {
		if err := ValidID(f.Resumes); err != nil {
			return err
		}
	}
	if len(f.Events) > 0 && f.EventsFrom < 1 {
		return fmt.Errorf("%w: finish events start at %d", ErrInvalid, f.EventsFrom)
	}
	return nil
}

// Durability is implemented by backends (and wrappers) that can say which
// guarantee holds for an acknowledged write: what a crash of the store's
// server, or of its machine, can still lose. The proxy reports it in
// /readyz and logs it at start.
type Durability interface {
	// Durability is one line for an operator, e.g. "redis: appendonly
	// yes, appendfsync always: an acknowledged turn is on disk".
	Durability(ctx context.Context) (string, error)
}

// Journal is implemented by wrappers that keep, in a local journal, the
// writes their backend cannot take and replay them when it is back
// (store/spool). The proxy exports the journal's state as metrics.
type Journal interface {
	Stats() JournalStats
}

// JournalStats describe a Journal's journal, for metrics.
type JournalStats struct {
	Entries int       // writes waiting to be replayed
	Bytes   int64     // their size in the journal
	Oldest  time.Time // when the oldest waiting write was spooled; zero when none
	// Totals since the journal was opened.
	Spooled   int64 // writes spooled
	Replayed  int64 // writes applied from the journal
	Conflicts int64 // writes the backend refused on replay (fenced, illegal): dropped
	Full      int64 // writes refused because the journal was full
	// Lost counts spooled finishes the store refused on replay: turns
	// whose clients were told they were whole, kept nowhere. Each is also
	// a conflict, and logged.
	Lost int64
}
