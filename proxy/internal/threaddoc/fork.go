package threaddoc

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
)

// ForkPoint is the thread document's fork_point: where a fork was taken
// from its parent.
type ForkPoint struct {
	AtMessage int     `json:"at_message"`
	AtRun     *string `json:"at_run"`
}

// ForkRequest is a fork's body: {"at_message": N} or {"at_run": id},
// and optionally {"thread": new id}.
type ForkRequest struct {
	AtMessage int
	AtRun     string
	Thread    string
}

// ParseFork reads a fork's body; an error is the answer to give.
func ParseFork(body []byte) (ForkRequest, *apierr.Error) {
	var r ForkRequest
	if len(body) == 0 || !jsonscan.Valid(body) || !gjson.ParseBytes(body).IsObject() {
		return r, apierr.New(apierr.InvalidJSON, `The body must be a JSON object: {"at_message": N} or {"at_run": "run id"}, optionally with "thread".`)
	}
	am, ar, th := gjson.GetBytes(body, "at_message"), gjson.GetBytes(body, "at_run"), gjson.GetBytes(body, "thread")
	if am.Exists() == ar.Exists() {
		return r, apierr.New(apierr.InvalidForkPoint, "Give exactly one of at_message and at_run.")
	}
	if am.Exists() {
		if am.Type != gjson.Number || am.Num != float64(int(am.Num)) || am.Int() < 1 {
			return r, apierr.New(apierr.InvalidForkPoint, "at_message must be a whole number of messages, at least 1.")
		}
		r.AtMessage = int(am.Int())
	} else {
		if ar.Type != gjson.String || store.ValidID(ar.Str) != nil {
			return r, apierr.New(apierr.InvalidRunID, "at_run must be a run id: 1-128 characters of [A-Za-z0-9._:-].")
		}
		r.AtRun = ar.Str
	}
	if th.Exists() {
		if th.Type != gjson.String || store.ValidID(th.Str) != nil {
			return r, apierr.New(apierr.InvalidThreadID, "thread must be 1-128 characters of [A-Za-z0-9._:-].")
		}
		r.Thread = th.Str
	}
	return r, nil
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewThreadID is a fork's thread id when the request names none: "th-"
// and 20 random base32 characters, as the proxy names threads.
func NewThreadID() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return "th-" + strings.ToLower(idEncoding.EncodeToString(b[:])[:20])
}

// Fork forks the thread from as r asks (the fork point found on the
// run for at_run) and returns the new thread, or the answer to give;
// cause is the store's error behind a store_unavailable answer, for the
// log.
func Fork(ctx context.Context, st store.Store, from store.Key, r ForkRequest) (th store.Thread, answer *apierr.Error, cause error) {
	to := store.Key{Tenant: from.Tenant, Thread: r.Thread}
	if to.Thread == "" {
		to.Thread = NewThreadID()
	}
	f := store.Fork{From: from, To: to, At: r.AtMessage, Run: r.AtRun}
	if r.AtRun != "" {
		run, err := st.GetRun(ctx, from, r.AtRun)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// The parent itself may be missing: that is a 404, as for a read.
			if _, terr := st.ListRuns(ctx, from); errors.Is(terr, store.ErrNotFound) {
				return store.Thread{}, apierr.New(apierr.ThreadNotFound, "No such thread."), nil
			}
			return store.Thread{}, apierr.New(apierr.InvalidForkPoint, "The thread has no run "+r.AtRun+"."), nil
		case err != nil:
			return store.Thread{}, storeErr(), err
		case run.End == 0:
			return store.Thread{}, apierr.New(apierr.InvalidForkPoint,
				"The run "+r.AtRun+" has not recorded where it left the transcript (it is running, was lost with its replica, left it empty, or ended before chronicle recorded it): fork at_message instead."), nil
		}
		f.At = run.End
	}
	if to == from {
		return store.Thread{}, apierr.New(apierr.ThreadExists, "A fork needs a new thread id."), nil
	}
	if e, ok := store.As[store.Erasure](st); ok {
		// The fork carries the parent's subjects, so that erasing one of
		// them erases the fork too.
		subs, err := e.ThreadSubjects(ctx, from)
		if err != nil {
			return store.Thread{}, storeErr(), err
		}
		f.Subjects = subs
	}
	th, err := st.ForkThread(ctx, f)
	switch {
	case err == nil:
		return th, nil, nil
	case errors.Is(err, store.ErrNotFound):
		return store.Thread{}, apierr.New(apierr.ThreadNotFound, "No such thread."), nil
	case errors.Is(err, store.ErrConflict):
		return store.Thread{}, apierr.New(apierr.ThreadExists, "The thread "+to.Thread+" exists already."), nil
	case errors.Is(err, store.ErrInvalid):
		if r.AtRun != "" {
			// The run's end lies past the transcript: a later replace
			// turn made the thread shorter.
			return store.Thread{}, apierr.New(apierr.InvalidForkPoint, "The thread is shorter now than when run "+r.AtRun+" ended: fork at_message instead."), nil
		}
		return store.Thread{}, apierr.New(apierr.InvalidForkPoint, "at_message is past the thread's end."), nil
	}
	return store.Thread{}, storeErr(), err
}

func storeErr() *apierr.Error {
	return apierr.Retry(apierr.StoreUnavailable, 1, "The conversation store is unreachable.")
}
