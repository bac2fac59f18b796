// Package sealed encrypts what chronicle stores at rest: a store.Store
// wrapper that seals every content-bearing field on its way into the
// backend (AES-256-GCM under per-tenant data keys, which a
// key-encryption key from the config wraps) and opens it on the way out.
// The backends see opaque bytes, as before.
//
// Sealed: transcript messages and the system blob, a run's response,
// upstream request and error bodies, its text-so-far (partial), its
// ledger (repairs, restored fields, interrupted calls), the events of its
// log, and the same inside a finish's rebuild (store.Rebuild). Keyed, not
// sealed (they must compare equal): message hashes (the caller keys them,
// HashKey) and request fingerprints. In clear: ids, tenants, connection,
// format and model names, statuses and reasons, times, usage, counts,
// session ids, and the pending tool calls' ids and function names
// (store.Interrupt, which the backends index). Lengths are not hidden.
//
// Wrap it ABOVE the spool (store/spool), so the journal holds sealed
// values too. See README.md ("Encryption at rest").
package sealed

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/chronicle-proxy/chronicle/store"
)

// Options configure a Store.
type Options struct {
	// RefusePlaintext makes a value that is not sealed an error when read,
	// instead of reading it as it is (a value stored before encryption was
	// turned on). With it, nothing in the store can stand in for sealed
	// content.
	RefusePlaintext bool
}

// Store seals what it writes to its backend and opens what it reads.
// Methods it does not name pass through (store.Store is embedded); a
// method added to store.Store that carries content must be added here.
type Store struct {
	store.Store
	ring *Keyring
	opts Options
}

// journaled is a Store over a store.Journal (the spool).
type journaled struct {
	*Store
	j store.Journal
}

func (s journaled) Stats() store.JournalStats { return s.j.Stats() }

// Wrap seals what st stores under ring's keys. The result passes through
// the optional interfaces the proxy looks for: store.AsyncSaver,
// store.Durability, store.Journal (when st is one), store.HashKeyer, and
// the spool's StartOffline.
func Wrap(st store.Store, ring *Keyring, opts Options) store.Store {
	s := &Store{Store: st, ring: ring, opts: opts}
	if j, ok := st.(store.Journal); ok {
		return journaled{s, j}
	}
	return s
}

// Unwrap returns the store it seals for (store.Unwrapper), so that
// store.As finds the backend's optional interfaces that carry no content
// (store.Erasure, store.Compactor) through the wrapper.
func (s *Store) Unwrap() store.Store { return s.Store }

// ShredTenant deletes the tenant's data keys from the store and from this
// replica's cache (store.Shredder): what is left of its values anywhere —
// an unrewritten AOF, an uncompacted table file, a backup — can no longer
// be opened. Other replicas drop their cached copies within KeyCacheTTL.
func (s *Store) ShredTenant(ctx context.Context, tenant string) error {
	_, err := s.ring.keys.DeleteKeys(ctx, tenant)
	s.ring.Forget(tenant)
	if err != nil {
		return fmt.Errorf("sealed: deleting the data keys of tenant %q: %w", tenant, err)
	}
	return nil
}

var (
	_ store.Unwrapper  = (*Store)(nil)
	_ store.Shredder   = (*Store)(nil)
	_ store.AsyncSaver = (*Store)(nil)
	_ store.Durability = (*Store)(nil)
	_ store.HashKeyer  = (*Store)(nil)
	_ store.Journal    = journaled{}
)

// HashKey returns the tenant's keyed transform of message hashes: AES-256
// of the 16-byte hash under a key of the tenant's (a keyed permutation,
// so equal hashes stay equal and prefix matching works, while a stored
// hash is no function of the content alone).
func (s *Store) HashKey(ctx context.Context, tenant string) (func(store.Hash) store.Hash, error) {
	mk, err := s.ring.macKey(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return mk.hash, nil
}

// fingerprint keys a request fingerprint (which a store compares for
// equality only): HMAC-SHA256 under the tenant's mac key.
func (s *Store) fingerprint(ctx context.Context, tenant, fp string) (string, error) {
	if fp == "" {
		return "", nil
	}
	mk, err := s.ring.macKey(ctx, tenant)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, mk.fp)
	m.Write([]byte(fp))
	var sum [sha256.Size]byte
	return "k" + hex.EncodeToString(m.Sum(sum[:0])[:16]), nil
}

// sealer seals one write's values under the tenant's current data key.
type sealer struct {
	tenant string
	dk     *dataKey
}

func (s *Store) sealer(ctx context.Context, tenant string) (sealer, error) {
	dk, err := s.ring.writeKey(ctx, tenant)
	if err != nil {
		return sealer{}, sealFailed(err)
	}
	return sealer{tenant, dk}, nil
}

// sealFailed: without its key a write cannot be sealed. A store that cannot
// be reached stays ErrUnavailable (the proxy's on_store_error, the spool);
// a key that is there but does not open (a KEK no longer configured, an
// altered wrapped key) is not an outage, and is not reported as one.
func sealFailed(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("sealed: no data key to write with: %w", err)
}

func (z sealer) one(kind Kind, p []byte) []byte {
	if p == nil {
		return nil
	}
	return z.dk.seal(kind, z.tenant, p)
}

func (z sealer) all(kind Kind, ps [][]byte) [][]byte {
	if ps == nil {
		return nil
	}
	out := make([][]byte, len(ps))
	for i, p := range ps {
		out[i] = z.one(kind, p)
	}
	return out
}

func (z sealer) transcript(t store.Transcript) store.Transcript {
	t.Messages = z.all(KindMessage, t.Messages)
	if t.System != nil {
		t.System = z.dk.sealFixed(KindSystem, z.tenant, t.System)
	}
	return t
}

// opener opens the values of one tenant, under whichever of its data
// keys each names.
type opener struct {
	s      *Store
	ctx    context.Context
	tenant string
	last   *dataKey
}

func (s *Store) opener(ctx context.Context, tenant string) *opener {
	return &opener{s: s, ctx: ctx, tenant: tenant}
}

func (o *opener) one(kind Kind, v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if !IsSealed(v) {
		if o.s.opts.RefusePlaintext {
			return nil, fmt.Errorf("%w: a %s of tenant %q is not sealed (store.encryption.plaintext: refuse)", ErrTampered, kind, o.tenant)
		}
		return v, nil
	}
	hdr, id, nonce, ct, err := parse(v)
	if err != nil {
		return nil, err
	}
	dk := o.last
	if dk == nil || dk.id != id {
		if !strings.HasPrefix(id, dataPrefix) {
			return nil, fmt.Errorf("%w: names key %q", ErrTampered, id)
		}
		if dk, err = o.s.ring.get(o.ctx, o.tenant, id, false); err != nil {
			return nil, err
		}
		o.last = dk
	}
	return dk.open(kind, o.tenant, hdr, nonce, ct)
}

func (o *opener) all(kind Kind, vs [][]byte) error {
	for i, v := range vs {
		p, err := o.one(kind, v)
		if err != nil {
			return err
		}
		vs[i] = p
	}
	return nil
}

func (o *opener) thread(th *store.Thread) error {
	var err error
	if th.System, err = o.one(KindSystem, th.System); err != nil {
		return err
	}
	return o.all(KindMessage, th.Messages)
}

func (o *opener) run(r *store.Run) error {
	for _, f := range []struct {
		kind Kind
		v    *[]byte
	}{
		{KindError, &r.Error}, {KindPartial, &r.Partial}, {KindResponse, &r.Response}, {KindUpstream, &r.UpstreamBody},
		{KindLedger, &r.InterruptedCalls}, {KindLedger, &r.Repairs}, {KindLedger, &r.Restored},
	} {
		p, err := o.one(f.kind, *f.v)
		if err != nil {
			return err
		}
		*f.v = p
	}
	return nil
}

// opened wraps an error reading a sealed value.
func opened(err error) error { return fmt.Errorf("sealed: reading: %w", err) }

func (s *Store) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	th, err := s.Store.LoadThread(ctx, k)
	if err != nil {
		return th, err
	}
	if err := s.opener(ctx, k.Tenant).thread(&th); err != nil {
		return store.Thread{}, opened(err)
	}
	return th, nil
}

// ForkThread copies a thread's prefix into a new thread of the same tenant
// (store.Forks). The backend copies the sealed values as they are — their
// additional data binds the tenant and the field, not the thread — and
// the new thread comes back opened, as LoadThread's does.
func (s *Store) ForkThread(ctx context.Context, f store.Fork) (store.Thread, error) {
	th, err := s.Store.ForkThread(ctx, f)
	if err != nil {
		return th, err
	}
	if err := s.opener(ctx, f.To.Tenant).thread(&th); err != nil {
		return store.Thread{}, opened(err)
	}
	return th, nil
}

func (s *Store) SaveTranscript(ctx context.Context, l store.Lease, t store.Transcript) error {
	z, err := s.sealer(ctx, l.Key.Tenant)
	if err != nil {
		return err
	}
	return s.Store.SaveTranscript(ctx, l, z.transcript(t))
}

// SaveTranscriptAsync seals t and queues it on the backend (store.SaveAsync).
func (s *Store) SaveTranscriptAsync(ctx context.Context, l store.Lease, t store.Transcript, done func(error)) {
	z, err := s.sealer(ctx, l.Key.Tenant)
	if err != nil {
		done(err)
		return
	}
	store.SaveAsync(ctx, s.Store, l, z.transcript(t), done)
}

func (s *Store) keyStart(ctx context.Context, r *store.StartRun) error {
	fp, err := s.fingerprint(ctx, r.Key.Tenant, r.Fingerprint)
	if err != nil {
		return sealFailed(err)
	}
	r.Fingerprint = fp
	return nil
}

func (s *Store) started(ctx context.Context, k store.Key, st *store.Started, err error) (*store.Started, error) {
	if st == nil {
		return st, err
	}
	o := s.opener(ctx, k.Tenant)
	if oerr := o.run(&st.Run); oerr != nil {
		return nil, opened(oerr)
	}
	if st.ThreadFound {
		if oerr := o.thread(&st.Thread); oerr != nil {
			return nil, opened(oerr)
		}
	}
	return st, err
}

func (s *Store) StartRun(ctx context.Context, r store.StartRun) (*store.Started, error) {
	if err := s.keyStart(ctx, &r); err != nil {
		return nil, err
	}
	// The data key for this turn's writes, now: a stream's finish then
	// finds it cached, even if the store is away by then (the spool).
	if _, err := s.ring.writeKey(ctx, r.Key.Tenant); err != nil {
		return nil, sealFailed(err)
	}
	st, err := s.Store.StartRun(ctx, r)
	return s.started(ctx, r.Key, st, err)
}

type offlineStarter interface {
	StartOffline(ctx context.Context, r store.StartRun) (*store.Started, error)
}

// StartOffline is the spool's (store/spool): a run started while the
// backend is away. It needs the tenant's keys in this process's cache.
func (s *Store) StartOffline(ctx context.Context, r store.StartRun) (*store.Started, error) {
	off, ok := s.Store.(offlineStarter)
	if !ok {
		return nil, fmt.Errorf("sealed: the backend cannot start a run offline: %w", store.ErrUnavailable)
	}
	if err := s.keyStart(ctx, &r); err != nil {
		return nil, err
	}
	if _, err := s.ring.writeKey(ctx, r.Key.Tenant); err != nil {
		return nil, sealFailed(err)
	}
	st, err := off.StartOffline(ctx, r)
	return s.started(ctx, r.Key, st, err)
}

func (s *Store) Renew(ctx context.Context, l store.Lease, p store.RunPatch) (store.Renewal, error) {
	if p.Partial != nil {
		z, err := s.sealer(ctx, l.Key.Tenant)
		if err != nil {
			return store.Renewal{}, err
		}
		p.Partial = z.one(KindPartial, p.Partial)
	}
	return s.Store.Renew(ctx, l, p)
}

// Finish seals f's content and finishes the run. It runs on a stream's
// connection goroutine with the store's round trip below it: the sealing,
// and the copies it makes, are in sealFinish, whose frame is gone before
// the backend is called (docs/design.md, "Runtime mechanics").
func (s *Store) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	g, err := s.sealFinish(ctx, l.Key.Tenant, f)
	if err != nil {
		return err
	}
	return s.Store.Finish(ctx, l, g)
}

// sealFinish returns a copy of f with its content sealed.
//
//go:noinline
func (s *Store) sealFinish(ctx context.Context, tenant string, f *store.Finish) (*store.Finish, error) {
	z, err := s.sealer(ctx, tenant)
	if err != nil {
		return nil, err
	}
	g := new(store.Finish)
	*g = *f
	g.Error = z.one(KindError, f.Error)
	g.Partial = z.one(KindPartial, f.Partial)
	g.Response = z.one(KindResponse, f.Response)
	g.UpstreamBody = z.one(KindUpstream, f.UpstreamBody)
	g.InterruptedCalls = z.one(KindLedger, f.InterruptedCalls)
	g.Repairs = z.one(KindLedger, f.Repairs)
	g.Restored = z.one(KindLedger, f.Restored)
	g.Events = z.all(KindEvent, f.Events)
	if f.Transcript != nil {
		t := new(store.Transcript)
		*t = z.transcript(*f.Transcript)
		g.Transcript = t
	}
	if f.Rebuild != nil {
		rb := new(store.Rebuild)
		*rb = *f.Rebuild
		if err := s.keyStart(ctx, &rb.Start); err != nil {
			return nil, err
		}
		rb.Transcript = z.transcript(rb.Transcript)
		g.Rebuild = rb
	}
	return g, nil
}

func (s *Store) GetRun(ctx context.Context, k store.Key, runID string) (store.Run, error) {
	r, err := s.Store.GetRun(ctx, k, runID)
	if err != nil {
		return r, err
	}
	if err := s.opener(ctx, k.Tenant).run(&r); err != nil {
		return store.Run{}, opened(err)
	}
	return r, nil
}

func (s *Store) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	rs, err := s.Store.ListRuns(ctx, k)
	if err != nil {
		return rs, err
	}
	o := s.opener(ctx, k.Tenant)
	for i := range rs {
		if err := o.run(&rs[i]); err != nil {
			return nil, opened(err)
		}
	}
	return rs, nil
}

func (s *Store) RequestCancel(ctx context.Context, k store.Key, runID string) (store.Run, error) {
	r, err := s.Store.RequestCancel(ctx, k, runID)
	if err != nil {
		return r, err
	}
	if err := s.opener(ctx, k.Tenant).run(&r); err != nil {
		return store.Run{}, opened(err)
	}
	return r, nil
}

func (s *Store) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) error {
	z, err := s.sealer(ctx, l.Key.Tenant)
	if err != nil {
		return err
	}
	return s.Store.AppendEvents(ctx, l, first, z.all(KindEvent, events))
}

func (s *Store) FollowEvents(ctx context.Context, k store.Key, runID string, after int64, fn func(store.Event) error) error {
	o := s.opener(ctx, k.Tenant)
	return s.Store.FollowEvents(ctx, k, runID, after, func(e store.Event) error {
		p, err := o.one(KindEvent, e.Data)
		if err != nil {
			return opened(err)
		}
		e.Data = p
		return fn(e)
	})
}

// Durability is the backend's, and says the content is sealed.
func (s *Store) Durability(ctx context.Context) (string, error) {
	d, ok := s.Store.(store.Durability)
	if !ok {
		return "", errors.New("sealed: the backend does not report its durability")
	}
	line, err := d.Durability(ctx)
	if err != nil {
		return line, err
	}
	return line + "; content encrypted at rest (AES-256-GCM, key " + s.ring.Current() + ")", nil
}
