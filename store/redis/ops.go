package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

func result(v any) []any {
	r, _ := v.([]any)
	return r
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

func ms(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func hashBlob(hs []store.Hash) string {
	b := make([]byte, 0, 16*len(hs))
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return string(b)
}

// LoadThread reads meta, messages and hashes in one MULTI/EXEC round trip.
//
// Blobs (large messages) come in a second round trip; a concurrent rewrite
// may delete one in between, and then the whole read is taken again.
func (s *Store) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	if err := k.Validate(); err != nil {
		return store.Thread{}, err
	}
	for attempt := 1; ; attempt++ {
		th, err := s.loadThread(ctx, k)
		if errors.Is(err, errBlobGone) && attempt < 3 {
			continue
		}
		return th, err
	}
}

func (s *Store) loadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	p := s.prefix(k)
	pipe := s.c.TxPipeline()
	metaCmd := pipe.HGetAll(ctx, p+"meta")
	msgsCmd := pipe.LRange(ctx, p+"msgs", 0, -1)
	hashCmd := pipe.Get(ctx, p+"hashes")
	sysCmd := pipe.Get(ctx, p+"sys")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return store.Thread{}, mapErr(err)
	}
	th, found, err := threadFrom(k, metaCmd.Val(), msgsCmd.Val(), hashCmd.Val())
	if found && sysCmd.Err() == nil {
		th.System = []byte(sysCmd.Val()) // else none, or the meta field of the old layout
	}
	if found {
		th.Fork = forkPoint(metaCmd.Val()["par"], metaCmd.Val()["fat"], metaCmd.Val()["frun"])
	}
	if err == nil && !found {
		err = fmt.Errorf("thread %s: %w", k, store.ErrNotFound)
	}
	if err == nil {
		err = s.fetchBlobs(ctx, k, &th)
	}
	return th, err
}

// threadFields are the meta hash fields a thread is built from, in the
// order the start script reads them (HMGET).
var threadFields = []string{"created", "updated", "v", "conn", "fmt", "model", "sys"}

// threadFrom builds a thread from its meta hash, message list and hash
// blob; found is false for a thread without a saved transcript.
func threadFrom(k store.Key, m map[string]string, msgs []string, hb string) (store.Thread, bool, error) {
	vals := make([]any, len(threadFields))
	for i, f := range threadFields {
		if v, ok := m[f]; ok {
			vals[i] = v
		}
	}
	return threadFromFields(k, vals, msgs, hb)
}

// threadFromFields is threadFrom on the values of threadFields (nil for
// a field that is not set).
func threadFromFields(k store.Key, f []any, msgs []string, hb string) (store.Thread, bool, error) {
	if len(f) != len(threadFields) || str(f[0]) == "" {
		return store.Thread{}, false, nil
	}
	v, _ := strconv.ParseInt(str(f[2]), 10, 64)
	th := store.Thread{Key: k, Connection: str(f[3]), Format: str(f[4]), Model: str(f[5]),
		Version: v, CreatedAt: fromMS(str(f[0])), UpdatedAt: fromMS(str(f[1]))}
	if f[6] != nil {
		th.System = []byte(str(f[6]))
	}
	if len(hb) != 16*len(msgs) {
		return store.Thread{}, false, fmt.Errorf("thread %s: %d messages, %d hash bytes: %w", k, len(msgs), len(hb), store.ErrConflict)
	}
	th.Messages = make([][]byte, len(msgs))
	th.Hashes = make([]store.Hash, len(msgs))
	for i, msg := range msgs {
		th.Messages[i] = []byte(msg)
		copy(th.Hashes[i][:], hb[16*i:])
	}
	return th, true, nil
}

// scriptThread parses the thread a start script appended at r[at:].
// unchanged reports that the transcript matched the known digest and was
// left out.
func scriptThread(k store.Key, r []any, at int) (th store.Thread, found, unchanged bool, err error) {
	if len(r) < at+4 {
		return store.Thread{}, false, false, fmt.Errorf("thread %s: start script returned %d values: %w", k, len(r), store.ErrConflict)
	}
	raw := result(r[at+1])
	msgs := make([]string, len(raw))
	for i, m := range raw {
		msgs[i] = str(m)
	}
	th, found, err = threadFromFields(k, result(r[at]), msgs, str(r[at+2]))
	if unchanged = found && err == nil && str(r[at+3]) == "same"; unchanged {
		th.Messages, th.Hashes = nil, nil
	}
	return th, found, unchanged, err
}

// blobMin is the size from which a message is kept out of the scripts'
// arguments: staged as a key of its own, and stored as a blob key the
// message list refers to. Redis copies a script argument into Lua before
// the script starts, slowly (an EVAL that ignores one 10 MB argument takes
// about 19 ms on the bench machine, a plain SET of it a few), and no
// other client is served meanwhile.
const blobMin = 128 << 10

// stageTTL bounds how long a staged message outlives a transcript write
// whose script never ran.
const stageTTL = 10 * time.Minute

// stage appends msgs to args as script arguments. A message of at least
// blobMin bytes is queued in b as a plain SET of the stage key, ahead of
// the script, and passed as "\x00" and its stage name (the run id and its
// position: a retried write stages again under the same names). The
// script renames the stages it uses and deletes the others, whatever it
// decides; stageTTL covers a script that never ran. (A NOSCRIPT re-send
// finds the stages in place: the script did not run.)
func (s *Store) stage(b *batch, k store.Key, run string, msgs [][]byte, args []any) []any {
	for i, m := range msgs {
		if len(m) < blobMin {
			args = append(args, m)
			continue
		}
		name := run + ":" + strconv.Itoa(i)
		key := s.prefix(k) + "stage:" + name
		b.pipe.Set(b.ctx, key, m, stageTTL)
		b.size += len(m)
		args = append(args, b.str("\x00"+name))
	}
	return args
}

// errBlobGone: a listed blob key was not there when read (a concurrent
// rewrite deleted it).
var errBlobGone = errors.New("message blob gone")

// fetchBlobs replaces the blob references in th's messages ("\x00" and the
// blob id) by the messages, read with one MGET (one slot: the thread's).
func (s *Store) fetchBlobs(ctx context.Context, k store.Key, th *store.Thread) error {
	var at []int
	var keys []string
	for i, m := range th.Messages {
		if len(m) > 0 && m[0] == 0 {
			at = append(at, i)
			keys = append(keys, s.prefix(k)+"blob:"+string(m[1:]))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	vals, err := s.c.MGet(ctx, keys...).Result()
	if err != nil {
		return mapErr(err)
	}
	for j, v := range vals {
		m, ok := v.(string)
		if !ok {
			return fmt.Errorf("thread %s message %d: %w", k, at[j], errBlobGone)
		}
		th.Messages[at[j]] = []byte(m)
	}
	return nil
}

// systemSend is how a transcript write passes its system blob: the sum,
// computed once per write however often it is sent, and whether the blob
// itself goes too (after a needsys).
type systemSend struct {
	sum  string
	blob bool
}

func sendSystem(t *store.Transcript) systemSend {
	if t == nil || t.System == nil {
		return systemSend{}
	}
	sum := sha256.Sum256(t.System)
	return systemSend{sum: string(sum[:])}
}

// transcriptArgs appends a transcript write's arguments up to its
// messages to args. A
// system blob of blobMin bytes or more goes by its sum alone ('3'), unless
// sys.blob: then it is staged in b ('2'); a smaller one goes whole ('1').
// See sysready in the scripts.
func (s *Store) transcriptArgs(b *batch, args []any, k store.Key, run string, t *store.Transcript, sys systemSend) []any {
	hassys, blob := "0", ""
	switch {
	case t.System == nil:
	case len(t.System) < blobMin:
		hassys, blob = "1", string(t.System)
	case !sys.blob:
		hassys = "3"
	default:
		name := run + ":sys"
		b.pipe.Set(b.ctx, s.prefix(k)+"stage:"+name, t.System, stageTTL)
		b.size += len(t.System)
		hassys, blob = "2", name
	}
	return append(args, b.int(int64(t.Keep)), b.str(string(t.KeepHash[:])), b.str(hashBlob(t.Hashes)), hassys, b.str(sys.sum), b.str(blob),
		b.str(t.Connection), b.str(t.Format), b.str(t.Model), b.str(t.Digest))
}

// loadFlag is the start script's load argument: '0' no thread, '1' the
// thread, '2' the thread without its system blob.
func loadFlag(sr store.StartRun) string {
	switch {
	case !sr.LoadThread:
		return "0"
	case sr.NoSystem:
		return "2"
	}
	return "1"
}

// errNeedSystem: a write that sent a large system blob by its sum found
// another one stored; it is sent again with the blob.
var errNeedSystem = errors.New("stored system blob differs")

// SaveTranscript writes a transcript under the lease.
func (s *Store) SaveTranscript(ctx context.Context, l store.Lease, t store.Transcript) error {
	if err := l.Key.Validate(); err != nil {
		return err
	}
	if err := t.Check(); err != nil {
		return err
	}
	sys := sendSystem(&t)
	err := s.saveTranscript(ctx, l, &t, sys)
	if errors.Is(err, errNeedSystem) {
		sys.blob = true
		err = s.saveTranscript(ctx, l, &t, sys)
	}
	return err
}

// SaveTranscriptAsync is SaveTranscript queued on the sender
// (store.AsyncSaver): no goroutine waits for it.
func (s *Store) SaveTranscriptAsync(ctx context.Context, l store.Lease, t store.Transcript, done func(error)) {
	if err := l.Key.Validate(); err != nil {
		done(err)
		return
	}
	if err := t.Check(); err != nil {
		done(err)
		return
	}
	sys := sendSystem(&t)
	b, cmd := s.saveBatch(ctx, l, &t, sys)
	b.execAsync(s, func(err error) {
		if err = saveResult(l, cmd, err); errors.Is(err, errNeedSystem) {
			sys.blob = true
			b, cmd := s.saveBatch(ctx, l, &t, sys)
			b.execAsync(s, func(err error) { done(saveResult(l, cmd, err)) })
			return
		}
		done(err)
	})
}

func (s *Store) saveTranscript(ctx context.Context, l store.Lease, t *store.Transcript, sys systemSend) error {
	b, cmd := s.saveBatch(ctx, l, t, sys)
	return saveResult(l, cmd, b.exec(s))
}

// saveBatch queues a transcript write in a batch of its own.
func (s *Store) saveBatch(ctx context.Context, l store.Lease, t *store.Transcript, sys systemSend) (*batch, *redis.Cmd) {
	now := s.now()
	b := s.batch(ctx)
	args := evalArgs(16 + len(t.Messages))
	args = append(args, b.str(s.meta(l.Key)), b.str(l.RunID), b.int(l.Token), b.int(now))
	args = s.transcriptArgs(b, args, l.Key, l.RunID, t, sys)
	args = append(args, b.str(t.BaseDigest), b.int(int64(t.BaseLen)))
	args = s.stage(b, l.Key, l.RunID, t.Messages, args)
	cmd := b.evalsha(saveScript, 1, args)
	s.queueIndex(ctx, b.pipe, l.Key, now, true)
	return b, cmd
}

// saveResult reads a transcript write's outcome from its script's reply.
func saveResult(l store.Lease, cmd *redis.Cmd, err error) error {
	if err != nil {
		return mapErr(err)
	}
	r := result(cmd.Val())
	switch str(r[0]) {
	case "fenced":
		return fmt.Errorf("thread %s run %s: %w", l.Key, l.RunID, store.ErrFenced)
	case "conflict":
		return fmt.Errorf("thread %s: transcript prefix differs: %w", l.Key, store.ErrConflict)
	case "needsys":
		return errNeedSystem
	}
	return nil
}

// StartRun claims the run id in the tenant index, registers the run for the
// sweeper, and takes the lease and creates the run (also reading the
// thread when asked): one round trip. On a single node one script does it
// all, and undoes the claim and the sweeper entry itself when it refuses.
// On a cluster the claim and the sweeper entry live on other slots, so they
// go as commands of their own in the same round trip and cannot gate the
// script: a refused start undoes them afterwards (one more round trip, on
// the refusal only), and a run id that turns out to belong to another
// thread undoes the run the script created.
func (s *Store) StartRun(ctx context.Context, sr store.StartRun) (*store.Started, error) {
	k := sr.Key
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if err := store.ValidID(sr.RunID); err != nil {
		return nil, err
	}
	if sr.TTL <= 0 {
		return nil, fmt.Errorf("%w: lease ttl %v", store.ErrInvalid, sr.TTL)
	}
	if sr.Subject != "" {
		if err := store.ValidSubject(sr.Subject); err != nil {
			return nil, err
		}
	}
	now := s.now()
	exp := now + sr.TTL.Milliseconds()
	claimCmd, startCmd, err := s.sendStart(ctx, &sr, now, exp, newAttempt())
	if err != nil {
		return nil, mapErr(err)
	}
	return s.started(ctx, &sr, claimCmd, startCmd, now, exp)
}

// sendStart sends StartRun's commands and waits for their replies. It is a
// function of its own, and reading the replies (started) another, so that
// the frames below the round trip stay small: the caller's goroutine waits
// here with its stack at its deepest, and a stack that once grew past 8 KiB
// stays at 16 for as long as the stream it serves.
func (s *Store) sendStart(ctx context.Context, sr *store.StartRun, now, exp int64, attempt string) (claimCmd, startCmd *redis.Cmd, err error) {
	k := sr.Key
	b := s.batch(ctx)
	if s.cluster {
		claimCmd = b.script(runIDScript, []string{s.tenantRuns(k.Tenant)}, sr.RunID, k.Thread)
		// NX: a retried start leaves the score of a run that exists alone.
		b.pipe.ZAddNX(ctx, s.active(), redis.Z{Score: float64(exp), Member: activeMember(k, sr.RunID)})
		startCmd = b.script(startScript, []string{s.meta(k)}, sr.RunID, sr.Owner, exp, now, sr.Fingerprint, startRecord(sr.Model, now, sr.Owner, exp),
			s.opts.EventRetention.Milliseconds(), loadFlag(*sr), sr.KnownDigest, "", "", attempt)
	} else {
		// One node: the script claims the run id and registers the run for
		// the sweeper itself, and undoes both when it refuses.
		args := append(evalArgs(15), b.str(s.meta(k)), b.str(s.tenantRuns(k.Tenant)), s.kActive,
			b.str(sr.RunID), b.str(sr.Owner), b.int(exp), b.int(now), b.str(sr.Fingerprint), startRecord(sr.Model, now, sr.Owner, exp),
			s.retention, loadFlag(*sr), b.str(sr.KnownDigest), b.str(k.Thread), b.str(k.Tenant+"/"+k.Thread), b.str(attempt))
		startCmd = b.evalsha(startScript, 3, args)
	}
	if sr.Subject != "" {
		s.addSubject(ctx, b.pipe, k, sr.Subject)
	}
	return claimCmd, startCmd, b.exec(s)
}

// newAttempt names one StartRun call (startScript's attempt).
func newAttempt() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	var h [16]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// started reads StartRun's replies into its result.
//
//go:noinline
func (s *Store) started(ctx context.Context, sr *store.StartRun, claimCmd, startCmd *redis.Cmd, now, exp int64) (*store.Started, error) {
	k := sr.Key
	r := result(startCmd.Val())
	if str(r[0]) == "taken" {
		return nil, fmt.Errorf("run %s belongs to another thread: %w", sr.RunID, store.ErrConflict)
	}
	claim := 1 // on one node the script has undone what it had to
	if claimCmd != nil {
		claim, _ = claimCmd.Int()
	}
	// undo drops what a start that created no run left on other slots.
	undo := func() {
		if !s.cluster {
			return
		}
		pipe := s.c.Pipeline()
		pipe.ZRem(ctx, s.active(), activeMember(k, sr.RunID))
		if claim == 2 {
			unclaimScript.Eval(ctx, pipe, []string{s.tenantRuns(k.Tenant)}, sr.RunID, k.Thread)
		}
		pipe.Exec(ctx)
	}
	if claim == 0 {
		if str(r[0]) == "ok" {
			unstartScript.Run(ctx, s.c, []string{s.meta(k)}, sr.RunID, str(r[1]), str(r[3]))
			undo()
		} else if str(r[0]) == "held" {
			undo()
		}
		return nil, fmt.Errorf("run %s belongs to another thread: %w", sr.RunID, store.ErrConflict)
	}
	res := new(store.Started)
	var at int
	switch str(r[0]) {
	case "conflict":
		return nil, fmt.Errorf("run %s reused with another request: %w", sr.RunID, store.ErrConflict)
	case "held":
		undo()
		tok, _ := strconv.ParseInt(str(r[2]), 10, 64)
		return &store.Started{Lease: store.Lease{Key: k, RunID: str(r[1]), Token: tok, Expires: fromMS(str(r[3])), Owner: str(r[4])}},
			fmt.Errorf("thread %s busy with run %s: %w", k, str(r[1]), store.ErrLeaseHeld)
	case "exists":
		res.Run = parseRun(k, sr.RunID, pairs(result(r[1])))
		if l := parseIntr(pairs(result(r[2])))[sr.RunID]; l != nil {
			res.Run.Interrupts = l
		}
		at = 3
	default:
		tok, _ := strconv.ParseInt(str(r[1]), 10, 64)
		if lostRun := str(r[2]); lostRun != "" && s.cluster {
			s.c.ZRem(ctx, s.active(), activeMember(k, lostRun))
		}
		l := store.Lease{Key: k, RunID: sr.RunID, Owner: sr.Owner, Token: tok, TTL: sr.TTL, Expires: time.UnixMilli(exp).UTC()}
		res.Run = store.Run{ID: sr.RunID, Key: k, Status: store.Running, Model: sr.Model, StartedAt: time.UnixMilli(now).UTC(),
			Interrupts: []store.Interrupt{}, LeaseOwner: sr.Owner, LeaseToken: tok, LeaseExpires: l.Expires, Fingerprint: sr.Fingerprint}
		res.Lease, res.Created = l, true
		at = 4
	}
	if sr.LoadThread {
		var err error
		if res.Thread, res.ThreadFound, res.Unchanged, err = scriptThread(k, r, at); err != nil {
			return nil, err
		}
		if err := s.fetchBlobs(ctx, k, &res.Thread); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Renew extends the lease and applies the patch.
func (s *Store) Renew(ctx context.Context, l store.Lease, p store.RunPatch) (store.Renewal, error) {
	if l.TTL <= 0 {
		return store.Renewal{}, fmt.Errorf("%w: lease ttl %v", store.ErrInvalid, l.TTL)
	}
	exp := s.now() + l.TTL.Milliseconds()
	v, err := renewScript.Run(ctx, s.c, []string{s.meta(l.Key)}, l.RunID, l.Token, exp, flag(p.Partial != nil), string(p.Partial), ms(p.DetachedSince)).Result()
	if err != nil {
		return store.Renewal{}, mapErr(err)
	}
	r := result(v)
	if str(r[0]) == "fenced" {
		return store.Renewal{}, fmt.Errorf("thread %s run %s: %w", l.Key, l.RunID, store.ErrFenced)
	}
	l.Expires = time.UnixMilli(exp).UTC()
	return store.Renewal{Lease: l, CancelRequested: str(r[1]) == "1"}, nil
}

// Release gives the lease up without ending the run.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	released, err := releaseScript.Run(ctx, s.c, []string{s.meta(l.Key)}, l.RunID, l.Token).Int()
	if err != nil || released == 0 {
		return mapErr(err)
	}
	// Due at once for the sweeper, which fails the run if it still runs.
	return mapErr(s.c.ZAddXX(ctx, s.active(), redis.Z{Score: 0, Member: activeMember(l.Key, l.RunID)}).Err())
}

// blob is an optional bytes argument: its flag and its value, passed as
// []byte so a response or request body is written out without a copy.
func blob(b []byte) (string, any) {
	if b == nil {
		return "0", ""
	}
	return "1", b
}

// Finish writes the transcript and ends the run in one script, which on a
// single node also does the audit index writes and the sweeper entry's
// removal (on a cluster they go as commands of their own in the same round
// trip), then waits for the AOF fsync where supported (WAITAOF, one more
// round trip; none on servers without it after the first).
func (s *Store) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	if err := store.CheckFinish(f); err != nil {
		return err
	}
	if err := l.Key.Validate(); err != nil {
		return err
	}
	sys := sendSystem(f.Transcript)
	err := s.finish(ctx, l, f, sys)
	if errors.Is(err, errNeedSystem) {
		sys.blob = true
		err = s.finish(ctx, l, f, sys)
	}
	return err
}

func (s *Store) finish(ctx context.Context, l store.Lease, f *store.Finish, sys systemSend) error {
	b := s.batch(ctx)
	cmd, meta := s.queueFinish(ctx, b, l, f, sys)
	if err := b.exec(s); err != nil {
		return mapErr(err)
	}
	if err := s.finishReply(ctx, l, f, cmd); err != nil {
		return err
	}
	if err := b.replicated(); err != nil {
		return err
	}
	return s.waitFsync(ctx, meta)
}

// replicaWait bounds a finish's wait for a replica.
const replicaWait = time.Second

// replicated reports a finish that no replica confirmed (b.wait, queued by
// queueFinish while the master has replicas) as unavailable, so the
// caller keeps it (the spool) and it is applied again later, which changes
// nothing where it landed. A finish re-sent after NOSCRIPT ran after its
// WAIT, which then confirmed nothing. (The wait lives in the batch, and
// this is a function of its own: the finish's frame is on the stack of a
// stream's connection.)
//
//go:noinline
func (b *batch) replicated() error {
	if b.wait == nil {
		return nil
	}
	n, err := b.wait.Int64()
	if err == nil && n >= 1 && !b.resent {
		return nil
	}
	return fmt.Errorf("%w: redis: no replica confirmed the finish (WAIT: %d, %v)", store.ErrUnavailable, n, err)
}

// queueFinish queues the finish's commands on b and returns the script's
// command and the thread's meta key. Building the arguments takes a large
// frame, gone before the round trip: see sendStart.
//
//go:noinline
func (s *Store) queueFinish(ctx context.Context, b *batch, l store.Lease, f *store.Finish, sys systemSend) (*redis.Cmd, string) {
	n := 45 + len(f.Interrupts)*2 + len(f.Resolve) + len(f.Cancel)
	if f.Transcript != nil {
		n += len(f.Transcript.Messages)
	}
	args := evalArgs(n)
	now := s.now()
	meta := s.meta(l.Key)
	nkeys := 1
	args = append(args, b.str(meta))
	if !s.cluster {
		nkeys = 5
		args = append(args, b.str(s.tenantThreads(l.Key.Tenant)), s.kThreads, s.kTenants, s.kActive)
		args = append(args, b.str(l.Key.Thread), b.str(l.Key.Tenant), b.str(l.Key.Tenant+"/"+l.Key.Thread))
	}
	args = append(args, b.str(l.RunID), b.int(l.Token), b.int(now), b.str(string(f.Status)), finishRecord(f, now))
	if u := f.Usage; u != nil {
		args = append(args, b.int(u.InputTokens), b.int(u.OutputTokens), b.int(u.CachedTokens), b.int(u.ReasoningTokens))
	} else {
		args = append(args, "0", "0", "0", "0")
	}
	args = append(args, b.str(f.Model))
	args = s.bodyArgs(b, l, "resp", f.Response, args)
	args = append(args, s.retention)
	if t := f.Transcript; t != nil {
		args = append(args, "1")
		args = s.transcriptArgs(b, args, l.Key, l.RunID, t, sys)
		if f.Model != "" {
			// The finish's own model is the one the thread keeps (its
			// HSET sets it last): the transcript's need not go.
			args[len(args)-2] = ""
		}
		args = append(args, b.str(t.BaseDigest), b.int(int64(t.BaseLen)))
	} else {
		args = append(args, "0", 0, "", "", "0", "", "", "", "", "", "", "", 0)
	}
	// The log's last batch goes in the finish's own step: appended ahead
	// of the log's end, it costs the server no script of its own.
	if len(f.Events) > 0 {
		args = append(args, finishEvents(f.EventsFrom, s.opts.MaxEvents, f.Events))
	} else {
		args = append(args, "")
	}
	// The rare arguments go only when one of them is set (the script's
	// flag '1'): each argument costs every finish its conversion into Lua.
	if f.Partial == nil && f.UpstreamBody == nil && f.Resumes == "" && len(f.Interrupts) == 0 && len(f.Resolve) == 0 && len(f.Cancel) == 0 {
		args = append(args, "")
	} else {
		args = append(args, "1")
		bf, bv := blob(f.Partial)
		args = append(args, bf, bv)
		args = s.bodyArgs(b, l, "up", f.UpstreamBody, args)
		args = append(args, f.Resumes, len(f.Interrupts))
		for _, in := range f.Interrupts {
			args = append(args, in.CallID, in.Name)
		}
		args = append(args, len(f.Resolve))
		for _, id := range f.Resolve {
			args = append(args, id)
		}
		args = append(args, len(f.Cancel))
		for _, id := range f.Cancel {
			args = append(args, id)
		}
	}
	if f.Transcript != nil {
		args = s.stage(b, l.Key, l.RunID, f.Transcript.Messages, args)
	}
	cmd := b.evalsha(finishScript, nkeys, args)
	if s.cluster {
		// The index writes use now, the time the script writes as updated
		// (see queueIndex for a refused finish). On a single node the
		// script does them, and the sweeper entry's removal, itself.
		s.queueIndex(ctx, b.pipe, l.Key, now, f.Transcript != nil)
		b.pipe.ZRem(ctx, s.active(), activeMember(l.Key, l.RunID))
	}
	if s.replicas.Load() > 0 {
		// On the finish's own connection, after it: WAIT counts the
		// replicas that have every write the connection made.
		b.wait = b.pipe.Do(ctx, "WAIT", 1, replicaWait.Milliseconds())
	}
	return cmd, meta
}

// bodyArgs appends a response or upstream body's flag and value to args.
// A body of blobMin bytes or more is staged like a large message (flag
// '2', the value names the stage); the script moves it to a key of the
// run's own.
func (s *Store) bodyArgs(b *batch, l store.Lease, field string, v []byte, args []any) []any {
	if len(v) >= blobMin {
		name := l.RunID + ":" + field
		b.pipe.Set(b.ctx, s.prefix(l.Key)+"stage:"+name, v, stageTTL)
		b.size += len(v)
		return append(args, "2", b.str(name))
	}
	bf, bv := blob(v)
	return append(args, bf, bv)
}

// finishReply reads the finish script's answer.
func (s *Store) finishReply(ctx context.Context, l store.Lease, f *store.Finish, cmd *redis.Cmd) error {
	r := result(cmd.Val())
	if res := str(r[0]); res != "ok" {
		if res != "notfound" && s.cluster {
			// The run may still be running (a refused transcript or
			// resume, a released lease, a needsys about to be sent
			// again): give it back to the sweeper, due now; the sweeper
			// checks the thread's lease itself.
			s.c.ZAddNX(ctx, s.active(), redis.Z{Score: 0, Member: activeMember(l.Key, l.RunID)})
		}
		switch res {
		case "needsys":
			return errNeedSystem // the script wrote nothing: sent again with the blob
		case "fenced":
			return fmt.Errorf("thread %s run %s: %w", l.Key, l.RunID, store.ErrFenced)
		case "notfound":
			return fmt.Errorf("run %s: %w", l.RunID, store.ErrNotFound)
		case "resumenotfound":
			return fmt.Errorf("resumed run %s: %w", f.Resumes, store.ErrNotFound)
		case "illegal":
			return fmt.Errorf("run is %s, not %s: %w", str(r[1]), f.Status, store.ErrIllegalTransition)
		case "conflict":
			return fmt.Errorf("thread %s: transcript prefix differs: %w", l.Key, store.ErrConflict)
		}
		return fmt.Errorf("finish returned %q: %w", res, store.ErrConflict)
	}
	return nil
}

// waitFsync waits for the finished run to reach the AOF on disk (WAITAOF,
// Redis 7.2+ with appendonly on). Older servers, or servers without AOF,
// answer with an error once; from then on it is skipped.
func (s *Store) waitFsync(ctx context.Context, key string) error {
	if s.waitAOF.Load() == 2 {
		return nil
	}
	var c interface {
		Do(ctx context.Context, args ...any) *redis.Cmd
	} = s.c
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return mapErr(err)
		}
		c = node
	}
	err := c.Do(ctx, "WAITAOF", 1, 0, 1000).Err()
	if err == nil {
		s.waitAOF.Store(1)
		return nil
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		s.waitAOF.Store(2) // unknown command, or appendonly disabled
		return nil
	}
	return mapErr(err)
}

// parseRun reads a run's hash: its own fields, then the start and finish
// records (record.go) where the run has them. A field a later write
// changes (the lease's expiry on renewal, the sweep's reason and time)
// overrides the start record, and the finish record overrides both.
func parseRun(k store.Key, id string, h map[string]string) store.Run {
	i64 := func(f string) int64 { n, _ := strconv.ParseInt(h[f], 10, 64); return n }
	bytesOf := func(f string) []byte {
		if v, ok := h[f]; ok {
			return []byte(v)
		}
		return nil
	}
	r := store.Run{ID: id, Key: k, Status: store.Status(h["st"]), Partial: bytesOf("partial"),
		Interrupts: []store.Interrupt{}, LeaseToken: i64("ltok"),
		DetachedSince: fromMS(h["det"]), CancelRequested: h["cancel"] == "1", ResumedBy: h["rby"], Fingerprint: h["fp"],
		Events: i64("ev"), Response: bytesOf("resp"), UpstreamBody: bytesOf("up")}
	if rec, ok := h["s"]; ok {
		applyStartRecord(&r, rec)
	}
	for f, v := range h {
		switch f {
		case "model":
			r.Model = v
		case "started":
			r.StartedAt = fromMS(v)
		case "lown":
			r.LeaseOwner = v
		case "lexp":
			r.LeaseExpires = fromMS(v)
		case "reason":
			r.Reason = v
		case "fin":
			r.FinishedAt = fromMS(v)
		case "err":
			r.Error = []byte(v)
		case "ic":
			r.InterruptedCalls = []byte(v)
		case "rep":
			r.Repairs = []byte(v)
		case "rst":
			r.Restored = []byte(v)
		case "hs":
			r.AnswerStatus, _ = strconv.Atoi(v)
		case "sid":
			sid := v
			r.SessionID = &sid
		}
	}
	if _, ok := h["ui"]; ok {
		r.Usage = &store.Usage{InputTokens: i64("ui"), OutputTokens: i64("uo"), CachedTokens: i64("uc"), ReasoningTokens: i64("ur")}
	}
	if rec, ok := h["f"]; ok {
		applyFinishRecord(&r, rec)
	}
	return r
}

// parseIntr splits the intr hash into interrupts per run.
func parseIntr(h map[string]string) map[string][]store.Interrupt {
	out := map[string][]store.Interrupt{}
	for id, v := range h {
		parts := strings.SplitN(v, "\x1f", 3)
		if len(parts) != 3 {
			continue
		}
		out[parts[1]] = append(out[parts[1]], store.Interrupt{CallID: id, Name: parts[2], Status: store.InterruptStatus(parts[0]), RunID: parts[1]})
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b store.Interrupt) int { return strings.Compare(a.CallID, b.CallID) })
	}
	return out
}

// GetRun returns one run with its response and upstream bodies.
func (s *Store) GetRun(ctx context.Context, k store.Key, id string) (store.Run, error) {
	if err := k.Validate(); err != nil {
		return store.Run{}, err
	}
	p := s.prefix(k)
	pipe := s.c.TxPipeline()
	runCmd := pipe.HGetAll(ctx, p+"run:"+id)
	intrCmd := pipe.HGetAll(ctx, p+"intr")
	if _, err := pipe.Exec(ctx); err != nil {
		return store.Run{}, mapErr(err)
	}
	h := runCmd.Val()
	if h["st"] == "" {
		return store.Run{}, fmt.Errorf("run %s/%s: %w", k, id, store.ErrNotFound)
	}
	r := parseRun(k, id, h)
	if l := parseIntr(intrCmd.Val())[id]; l != nil {
		r.Interrupts = l
	}
	// A large body lives in a key of its own (see Finish).
	for _, body := range []struct {
		field string
		dst   *[]byte
	}{{"resp", &r.Response}, {"up", &r.UpstreamBody}} {
		if h[body.field] != "\x00" {
			continue
		}
		v, err := s.c.Get(ctx, p+"run:"+id+":"+body.field).Bytes()
		if errors.Is(err, redis.Nil) {
			// The run exists; its body key does not (lost with the server's
			// data): not a missing run.
			return store.Run{}, fmt.Errorf("run %s/%s: the key of its %s body is missing", k, id, body.field)
		}
		if err != nil {
			return store.Run{}, fmt.Errorf("run %s/%s %s: %w", k, id, body.field, mapErr(err))
		}
		*body.dst = v
	}
	return r, nil
}

func pairs(v []any) map[string]string {
	m := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		m[str(v[i])] = str(v[i+1])
	}
	return m
}

// ListRuns returns the thread's runs oldest first, in one script.
func (s *Store) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	v, err := listRunsScript.Run(ctx, s.c, []string{s.meta(k)}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("thread %s: %w", k, store.ErrNotFound)
	}
	if err != nil {
		return nil, mapErr(err)
	}
	r := result(v)
	in := parseIntr(pairs(result(r[0])))
	out := make([]store.Run, 0, len(r)-1)
	for _, item := range r[1:] {
		f := result(item)
		id := str(f[0])
		run := parseRun(k, id, pairs(f[1:]))
		if l := in[id]; l != nil {
			run.Interrupts = l
		}
		out = append(out, run)
	}
	return out, nil
}

// FindRun returns the thread a run id belongs to.
func (s *Store) FindRun(ctx context.Context, tenant, id string) (store.Key, error) {
	th, err := s.c.HGet(ctx, s.tenantRuns(tenant), id).Result()
	if errors.Is(err, redis.Nil) {
		return store.Key{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Key{}, mapErr(err)
	}
	k := store.Key{Tenant: tenant, Thread: th}
	// A claim whose run was never created (a crash between the two steps)
	// names no run.
	if n, err := s.c.Exists(ctx, s.prefix(k)+"run:"+id).Result(); err != nil {
		return store.Key{}, mapErr(err)
	} else if n == 0 {
		return store.Key{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return k, nil
}

// RequestCancel flags a running run.
func (s *Store) RequestCancel(ctx context.Context, k store.Key, id string) (store.Run, error) {
	if err := k.Validate(); err != nil {
		return store.Run{}, err
	}
	n, err := cancelScript.Run(ctx, s.c, []string{s.meta(k)}, id).Int()
	if err != nil {
		return store.Run{}, mapErr(err)
	}
	if n == 0 {
		return store.Run{}, fmt.Errorf("run %s/%s: %w", k, id, store.ErrNotFound)
	}
	return s.GetRun(ctx, k, id)
}

const sweepBatch = 256

// Sweep fails runs whose lease lapsed. The active index is a hint: each
// entry is checked against the thread's own lease, and re-scored when the
// run renewed since.
func (s *Store) Sweep(ctx context.Context) ([]store.RunRef, error) {
	var lost []store.RunRef
	for {
		now := s.now()
		members, err := s.c.ZRangeByScore(ctx, s.active(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: sweepBatch}).Result()
		if err != nil {
			return lost, mapErr(err)
		}
		for _, m := range members {
			k, run, ok := parseActive(m)
			if !ok {
				s.c.ZRem(ctx, s.active(), m)
				continue
			}
			v, err := lostScript.Run(ctx, s.c, []string{s.meta(k)}, run, now, s.opts.EventRetention.Milliseconds()).Result()
			if err != nil {
				return lost, mapErr(err)
			}
			r := result(v)
			switch str(r[0]) {
			case "alive":
				exp, _ := strconv.ParseFloat(str(r[1]), 64)
				err = s.c.ZAddXX(ctx, s.active(), redis.Z{Score: exp, Member: m}).Err()
			case "lost":
				lost = append(lost, store.RunRef{Key: k, RunID: run})
				fallthrough
			default:
				err = s.c.ZRem(ctx, s.active(), m).Err()
			}
			if err != nil {
				return lost, mapErr(err)
			}
		}
		if len(members) < sweepBatch {
			return lost, nil
		}
	}
}

// DeleteThread removes the thread's keys in one script, then its index
// entries.
func (s *Store) DeleteThread(ctx context.Context, k store.Key) error {
	if err := k.Validate(); err != nil {
		return err
	}
	runs, subs, err := deleteReply(deleteScript.Run(ctx, s.c, []string{s.meta(k)}))
	if err != nil {
		return mapErr(err)
	}
	if err := s.unindexSubjects(ctx, k, subs); err != nil {
		return err
	}
	if !s.cluster {
		// One step, so that a thread created meanwhile in the tenant (whose
		// finish adds the tenant to the set once, when it creates the
		// thread) cannot lose the tenant between the count and the removal.
		args := make([]any, 0, 2+len(runs))
		args = append(args, k.Thread, k.Tenant)
		for _, r := range runs {
			args = append(args, r)
		}
		return mapErr(unindexScript.Run(ctx, s.c, []string{s.tenantRuns(k.Tenant), s.active(), s.tenantThreads(k.Tenant), s.allThreads(), s.tenants()}, args...).Err())
	}
	pipe := s.c.Pipeline()
	for _, r := range runs {
		unclaimScript.Eval(ctx, pipe, []string{s.tenantRuns(k.Tenant)}, r, k.Thread)
		pipe.ZRem(ctx, s.active(), activeMember(k, r))
	}
	pipe.ZRem(ctx, s.tenantThreads(k.Tenant), k.Thread)
	pipe.ZRem(ctx, s.allThreads(), k.Tenant+"/"+k.Thread)
	left := pipe.ZCard(ctx, s.tenantThreads(k.Tenant))
	if _, err := pipe.Exec(ctx); err != nil {
		return mapErr(err)
	}
	if left.Val() == 0 {
		return mapErr(s.c.SRem(ctx, s.tenants(), k.Tenant).Err())
	}
	return nil
}

// SessionID returns the stored id for (connection, model), storing
// candidate when there is none (SET NX GET, one round trip).
func (s *Store) SessionID(ctx context.Context, connection, model, candidate string) (string, error) {
	key := s.pre + "sess:" + connection + "\x00" + model
	old, err := s.c.SetArgs(ctx, key, candidate, redis.SetArgs{Mode: "NX", Get: true}).Result()
	if errors.Is(err, redis.Nil) {
		return candidate, nil
	}
	if err != nil {
		return "", mapErr(err)
	}
	return old, nil
}

// ListTenants lists tenants with at least one indexed thread.
func (s *Store) ListTenants(ctx context.Context) ([]string, error) {
	t, err := s.c.SMembers(ctx, s.tenants()).Result()
	if err != nil {
		return nil, mapErr(err)
	}
	slices.Sort(t)
	return t, nil
}

// DebugKeys lists every key on every master (SCAN), for tests that prove a
// delete leaves nothing behind.
func (s *Store) DebugKeys(ctx context.Context) ([]string, error) {
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, s.pre+"*", 1000).Iterator()
		for it.Next(ctx) {
			out = append(out, it.Val())
		}
		return it.Err()
	}
	var err error
	switch c := s.c.(type) {
	case *redis.ClusterClient:
		var mu = make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return scan(ctx, n)
		})
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return nil, errors.New("redisstore: DebugKeys needs a single-node or cluster client")
	}
	slices.Sort(out)
	return out, mapErr(err)
}
