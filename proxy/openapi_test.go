package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chronicle-proxy/chronicle/proxy/admin"
	"github.com/chronicle-proxy/chronicle/proxy/api"
	"github.com/chronicle-proxy/chronicle/store"
)

// openAPIMethods are the operation keys of an OpenAPI path item.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// loadOpenAPI decodes the embedded document, numbers kept as json.Number.
func loadOpenAPI(t *testing.T) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(openAPIDoc))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi.json: openapi = %v, want 3.1.0", doc["openapi"])
	}
	return doc
}

// TestOpenAPIRoutes: the document lists exactly the /api and /admin routes
// the server dispatches (api.Routes, admin.Routes: the tables Serve and
// ServeAdmin route by), no more, no fewer.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := map[string]bool{}
	for path, item := range doc["paths"].(map[string]any) {
		if !strings.HasPrefix(path, "/api/") && !strings.HasPrefix(path, "/admin/") {
			continue
		}
		for _, m := range openAPIMethods {
			if _, ok := item.(map[string]any)[m]; ok {
				documented[strings.ToUpper(m)+" "+path] = true
			}
		}
	}
	served := map[string]bool{}
	for _, r := range append(api.Routes(), admin.Routes()...) {
		served[r.Method+" "+r.Path] = true
	}
	for _, op := range sortedKeys(served) {
		if !documented[op] {
			t.Errorf("served but not in openapi.json: %s", op)
		}
	}
	for _, op := range sortedKeys(documented) {
		if !served[op] {
			t.Errorf("in openapi.json but not served: %s", op)
		}
	}
	if len(served) == 0 {
		t.Fatal("no routes served")
	}
}

// TestOpenAPIServed: GET /openapi.json answers the embedded document to
// anyone (the proxy has client keys and an admin token, and neither is
// asked for), HEAD its head, any other method a 405.
func TestOpenAPIServed(t *testing.T) {
	p := startProxy(t, nil, `
admin: {token: adm}
clients: [{key: ck, tenant: t1}]
connections:
  - {name: a, provider: openai, base_url: "http://127.0.0.1:1", keys: [up]}
`)
	resp, body := do(t, "GET", p.URL+"/openapi.json", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !bytes.Equal(body, openAPIDoc) {
		t.Fatalf("GET: %d %q, %d bytes (want the %d of openapi.json)", resp.StatusCode, resp.Header.Get("Content-Type"), len(body), len(openAPIDoc))
	}
	if resp, body := do(t, "HEAD", p.URL+"/openapi.json", ""); resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("HEAD: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = do(t, "POST", p.URL+"/openapi.json", "")
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(body), `"code":"method_not_allowed"`) {
		t.Fatalf("POST: %d Allow %q %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIDocument exercises every documented route of a real running
// proxy, in its successes and its refusals: each status it answers must
// be documented for the operation, with the content type it came with,
// and a JSON (or JSONL) body must fit the documented schema, where a field
// the schema does not describe is a failure. Every operation must be seen
// succeeding at least once.
func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	m := startMock(t)
	st := &downStore{Store: openEmbedded(t, t.TempDir())}
	cfg := `
admin: {token: adm}
clients: [{key: ck, tenant: t1}]
connections:
  - {name: a, provider: openai, base_url: "${MOCK}", keys: [up]}
`
	p := startProxyWith(t, m, cfg, st)
	noStore := startProxy(t, m, cfg)

	// A finished thread (th1) and one with a run in flight (th2, held on
	// the mock's gate until it is cancelled).
	resp, body := do(t, "POST", p.URL+"/a/v1/chat/completions", chatBody, "Authorization", "Bearer ck", "X-Thread-Id", "th1")
	if resp.StatusCode != 200 {
		t.Fatalf("turn: %d %s", resp.StatusCode, body)
	}
	r1 := resp.Header.Get("X-Run-Id")
	defer m.Release("held")
	held := send(t, "POST", p.URL+"/a/v1/chat/completions", streamBody, "Authorization", "Bearer ck", "X-Thread-Id", "th2", "X-Mock-Gate", "held")
	defer held.Body.Close()
	if held.StatusCode != 200 {
		t.Fatalf("held stream: %d", held.StatusCode)
	}
	r2 := held.Header.Get("X-Run-Id")

	tenant := []string{"Authorization", "Bearer ck"}
	adm := []string{"Authorization", "Bearer adm"}
	type call struct {
		method, path string
		hdr          []string
		want         int
	}
	succeeded := map[string]bool{}
	sc := &schemaChecker{doc: doc}
	exercise := func(base string, calls []call) {
		t.Helper()
		for _, c := range calls {
			name := c.method + " " + c.path
			tmpl, op := findOperation(doc, c.method, c.path)
			if op == nil {
				t.Errorf("%s: no documented operation", name)
				continue
			}
			resp, body := do(t, c.method, base+c.path, "", c.hdr...)
			if resp.StatusCode != c.want {
				t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, c.want, body)
				continue
			}
			if resp.StatusCode < 300 {
				succeeded[c.method+" "+tmpl] = true
			}
			for _, e := range sc.checkResponse(op, resp, body) {
				t.Errorf("%s (%d): %s", name, resp.StatusCode, e)
			}
		}
	}
	// Forks take a body.
	exerciseBody := func(base string, calls []forkCall) {
		t.Helper()
		for _, c := range calls {
			name := "POST " + c.path + " " + c.body
			tmpl, op := findOperation(doc, "POST", c.path)
			if op == nil {
				t.Errorf("%s: no documented operation", name)
				continue
			}
			resp, body := do(t, "POST", base+c.path, c.body, c.hdr...)
			if resp.StatusCode != c.want {
				t.Errorf("%s: status %d, want %d: %s", name, resp.StatusCode, c.want, body)
				continue
			}
			if resp.StatusCode < 300 {
				succeeded["POST "+tmpl] = true
			}
			for _, e := range sc.checkResponse(op, resp, body) {
				t.Errorf("%s (%d): %s", name, resp.StatusCode, e)
			}
		}
	}
	exerciseBody(p.URL, []forkCall{
		{"/api/threads/th1/fork", `{"at_message":1}`, tenant, 201},
		{"/api/threads/th1/fork", `{"at_run":"` + r1 + `","thread":"fk1"}`, tenant, 201},
		{"/api/threads/th1/fork", `{"at_message":1,"thread":"fk1"}`, tenant, 409},
		{"/api/threads/th1/fork", `{"at_message":99}`, tenant, 400},
		{"/api/threads/th1/fork", `{"at_run":"nope"}`, tenant, 400},
		{"/api/threads/th1/fork", `{"at_message":1,"at_run":"` + r1 + `"}`, tenant, 400},
		{"/api/threads/th1/fork", `{}`, tenant, 400},
		{"/api/threads/th1/fork", `not json`, tenant, 400},
		{"/api/threads/nope/fork", `{"at_message":1}`, tenant, 404},
		{"/api/threads/th1/fork", `{"at_message":1}`, nil, 401},
		{"/admin/threads/t1/th1/fork", `{"at_message":1,"thread":"fk2"}`, adm, 201},
		{"/admin/threads/t1/fk2/fork", `{"at_message":2}`, adm, 400},
		{"/admin/threads/t1/nope/fork", `{"at_message":1}`, adm, 404},
		{"/admin/threads/t1/th1/fork", `{"at_message":1,"thread":"fk2"}`, adm, 409},
		{"/admin/threads/t1/bad!id/fork", `{"at_message":1}`, adm, 400},
		{"/admin/threads/t1/th1/fork", `{"at_message":1}`, nil, 401},
	})
	exercise(p.URL, []call{
		{"GET", "/api/threads/fk1", tenant, 200},
		{"GET", "/admin/threads?tenant=t1", adm, 200},
	})

	exercise(p.URL, []call{
		{"GET", "/api/threads/th1", tenant, 200},
		{"GET", "/api/threads/th1", nil, 401},
		{"GET", "/api/threads/th1", []string{"Authorization", "Bearer nope"}, 401},
		{"GET", "/api/threads/nope", tenant, 404},
		{"GET", "/api/threads/bad!id", tenant, 400},
		{"GET", "/api/threads/th2/runs/active", tenant, 200},
		{"GET", "/api/threads/th1/runs/active", tenant, 404},
		{"GET", "/api/threads/bad!id/runs/active", tenant, 400},
		{"GET", "/api/threads/th1/runs/" + r1 + "/events", tenant, 200},
		{"GET", "/api/threads/th1/runs/" + r1 + "/events?after=1", tenant, 200},
		{"GET", "/api/threads/th1/runs/nope/events", tenant, 404},
		{"GET", "/api/threads/th1/runs/bad!id/events", tenant, 400},
		{"GET", "/api/threads/th1/runs/" + r1 + "/events", nil, 401},
		{"GET", "/api/threads/nope/runs/active", tenant, 404},
		{"GET", "/api/threads/nope/runs/" + r1 + "/events", tenant, 404},
		{"POST", "/api/threads/th1/runs/" + r1 + "/cancel", tenant, 202}, // ended: answered as it is
		{"POST", "/api/threads/th1/runs/nope/cancel", tenant, 404},
		{"POST", "/api/threads/th1/runs/bad!id/cancel", tenant, 400},
		{"POST", "/api/threads/th1/runs/" + r1 + "/cancel", nil, 401},

		{"GET", "/admin/threads", adm, 200},
		{"GET", "/admin/threads?tenant=t1&limit=1", adm, 200},
		{"GET", "/admin/threads", nil, 401},
		{"GET", "/admin/threads", []string{"Authorization", "Bearer nope"}, 401},
		{"GET", "/admin/threads?status=bogus", adm, 400},
		{"GET", "/admin/threads?cursor=bogus", adm, 400},
		{"GET", "/admin/export", adm, 200},
		{"GET", "/admin/export?since=yesterday", adm, 400},
		{"GET", "/admin/export", nil, 401},
		{"GET", "/admin/usage", adm, 200},
		{"GET", "/admin/usage?group_by=model", adm, 200},
		{"GET", "/admin/usage?group_by=planet", adm, 400},
		{"GET", "/admin/usage", nil, 401},
		{"GET", "/admin/threads/t1/th1", adm, 200},
		{"GET", "/admin/threads/t1/nope", adm, 404},
		{"GET", "/admin/threads/t1/bad!id", adm, 400},
		{"GET", "/admin/threads/t1/th1", nil, 401},
		{"GET", "/admin/threads/t1/th1/export", adm, 200},
		{"GET", "/admin/threads/t1/nope/export", adm, 404},
		{"GET", "/admin/threads/t1/th1/export", nil, 401},
		{"GET", "/admin/threads/t1/th1/runs/" + r1, adm, 200},
		{"GET", "/admin/threads/t1/th1/runs/nope", adm, 404},
		{"GET", "/admin/threads/t1/th1/runs/bad!id", adm, 400},
		{"GET", "/admin/threads/t1/bad!id/runs/" + r1, adm, 400},
		{"GET", "/admin/threads/t1/th1/runs/" + r1, nil, 401},
		{"DELETE", "/admin/threads/t1/th2", adm, 409},
		{"POST", "/api/threads/th2/runs/" + r2 + "/cancel", tenant, 202},
		{"DELETE", "/admin/threads/t1/th1", nil, 401},
		{"DELETE", "/admin/threads/t1/th1", adm, 200},
		{"DELETE", "/admin/threads/t1/th1", adm, 404},
		{"DELETE", "/admin/threads/t1/bad!id", adm, 400},
		{"GET", "/admin/tombstones", adm, 200},
		{"GET", "/admin/tombstones?limit=0", adm, 400},
		{"GET", "/admin/tombstones", nil, 401},
		{"DELETE", "/admin/subjects/t1/nobody?reason=ticket-1", adm, 200},
		{"DELETE", "/admin/subjects/t1/bad%7Bx%7D", adm, 400},
		{"DELETE", "/admin/subjects/t1/nobody", nil, 401},
		{"DELETE", "/admin/tenants/t9?actor=dpo", adm, 200},
		{"DELETE", "/admin/tenants/bad%20t", adm, 400},
		{"DELETE", "/admin/tenants/t9", nil, 401},
		{"POST", "/admin/prune?dry_run=true", adm, 200},
		{"POST", "/admin/prune", adm, 200},
		{"POST", "/admin/prune?dry_run=maybe", adm, 400},
		{"POST", "/admin/prune", nil, 401},

		{"GET", "/openapi.json", nil, 200},
	})

	// A proxy without a store: its API has nothing to read.
	exercise(noStore.URL, []call{
		{"GET", "/api/threads/th1", tenant, 404},
		{"GET", "/admin/threads", adm, 404},
		{"GET", "/admin/threads", nil, 401},
		{"GET", "/openapi.json", nil, 200},
	})

	// The store down: every route that reads it is a 503. The cancelled
	// run has ended first, so nothing of the turn is left to write.
	waitFor(t, "the cancelled run to end", func() bool {
		resp, _ := do(t, "GET", p.URL+"/api/threads/th2/runs/active", "", tenant...)
		return resp.StatusCode == 404
	})
	st.down.Store(true)
	exercise(p.URL, []call{
		{"GET", "/api/threads/th2", tenant, 503},
		{"GET", "/api/threads/th2/runs/active", tenant, 503},
		{"GET", "/api/threads/th2/runs/" + r2 + "/events", tenant, 503},
		{"POST", "/api/threads/th2/runs/" + r2 + "/cancel", tenant, 503},
		{"GET", "/admin/threads", adm, 503},
		{"GET", "/admin/export", adm, 503},
		{"GET", "/admin/usage", adm, 503},
		{"GET", "/admin/threads/t1/th2", adm, 503},
		{"DELETE", "/admin/threads/t1/th2", adm, 503},
		{"GET", "/admin/threads/t1/th2/export", adm, 503},
		{"GET", "/admin/threads/t1/th2/runs/" + r2, adm, 503},
	})
	exerciseBody(p.URL, []forkCall{
		{"/api/threads/th2/fork", `{"at_message":1}`, tenant, 503},
		{"/admin/threads/t1/th2/fork", `{"at_message":1}`, adm, 503},
	})
	st.down.Store(false)

	for path, item := range doc["paths"].(map[string]any) {
		for _, meth := range openAPIMethods {
			if _, ok := item.(map[string]any)[meth]; ok && !succeeded[strings.ToUpper(meth)+" "+path] {
				t.Errorf("%s %s: never exercised with a success", strings.ToUpper(meth), path)
			}
		}
	}
}

// forkCall is a fork request of TestOpenAPIDocument: a POST with a body.
type forkCall struct {
	path, body string
	hdr        []string
	want       int
}

func (d *downStore) ForkThread(ctx context.Context, f store.Fork) (store.Thread, error) {
	if err := d.err(); err != nil {
		return store.Thread{}, err
	}
	return d.Store.ForkThread(ctx, f)
}

// downStore is a store whose reads fail while down is set, as an
// unreachable one's do.
type downStore struct {
	store.Store
	down atomic.Bool
}

var errStoreDown = errors.New("test: the store is down")

// Unwrap lets the erasure reach the store's own interfaces (store.As).
func (d *downStore) Unwrap() store.Store { return d.Store }

func (d *downStore) err() error {
	if d.down.Load() {
		return errStoreDown
	}
	return nil
}

func (d *downStore) Ping(ctx context.Context) error {
	if err := d.err(); err != nil {
		return err
	}
	return d.Store.Ping(ctx)
}

func (d *downStore) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	if err := d.err(); err != nil {
		return store.Thread{}, err
	}
	return d.Store.LoadThread(ctx, k)
}

func (d *downStore) DeleteThread(ctx context.Context, k store.Key) error {
	if err := d.err(); err != nil {
		return err
	}
	return d.Store.DeleteThread(ctx, k)
}

func (d *downStore) GetRun(ctx context.Context, k store.Key, runID string) (store.Run, error) {
	if err := d.err(); err != nil {
		return store.Run{}, err
	}
	return d.Store.GetRun(ctx, k, runID)
}

func (d *downStore) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	if err := d.err(); err != nil {
		return nil, err
	}
	return d.Store.ListRuns(ctx, k)
}

func (d *downStore) RequestCancel(ctx context.Context, k store.Key, runID string) (store.Run, error) {
	if err := d.err(); err != nil {
		return store.Run{}, err
	}
	return d.Store.RequestCancel(ctx, k, runID)
}

func (d *downStore) ListThreads(ctx context.Context, q store.ThreadQuery) (store.ThreadPage, error) {
	if err := d.err(); err != nil {
		return store.ThreadPage{}, err
	}
	return d.Store.ListThreads(ctx, q)
}

// findOperation returns the documented path template that path (query
// left out) fits and its operation for method. A template with more
// literal segments wins, as OpenAPI wants concrete paths first.
func findOperation(doc map[string]any, method, path string) (string, map[string]any) {
	path, _, _ = strings.Cut(path, "?")
	segs := strings.Split(path, "/")
	best, bestLit := "", -1
	for tmpl := range doc["paths"].(map[string]any) {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		lit := 0
		for i := range ts {
			if strings.HasPrefix(ts[i], "{") && strings.HasSuffix(ts[i], "}") {
				continue
			}
			if ts[i] != segs[i] {
				lit = -1
				break
			}
			lit++
		}
		if lit > bestLit {
			best, bestLit = tmpl, lit
		}
	}
	if bestLit < 0 {
		return "", nil
	}
	op, _ := doc["paths"].(map[string]any)[best].(map[string]any)[strings.ToLower(method)].(map[string]any)
	return best, op
}

// schemaChecker checks answers against the document: the little of JSON
// Schema 2020-12 the document uses ($ref, oneOf, allOf, type, const,
// enum, pattern, minimum, properties, required, additionalProperties,
// items). It is stricter than the schema on one point: an object whose
// schema has properties may carry no key they do not describe, whatever
// additionalProperties says — the document must describe every field.
type schemaChecker struct{ doc map[string]any }

// resolve follows local references ("#/components/...").
func (c *schemaChecker) resolve(v map[string]any) map[string]any {
	for {
		ref, ok := v["$ref"].(string)
		if !ok {
			return v
		}
		var cur any = c.doc
		for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			cur = cur.(map[string]any)[tok]
		}
		next, _ := cur.(map[string]any)
		if next == nil {
			panic("openapi.json: unresolvable $ref " + ref)
		}
		// Siblings of $ref (a description) add nothing to check.
		v = next
	}
}

// checkResponse checks one answer against op's responses.
func (c *schemaChecker) checkResponse(op map[string]any, resp *http.Response, body []byte) []string {
	responses := op["responses"].(map[string]any)
	r, ok := responses[strconv.Itoa(resp.StatusCode)].(map[string]any)
	if !ok {
		if r, ok = responses["default"].(map[string]any); !ok {
			return []string{fmt.Sprintf("status %d is not documented", resp.StatusCode)}
		}
	}
	r = c.resolve(r)
	var errs []string
	headers, _ := r["headers"].(map[string]any)
	for _, name := range sortedKeys(keysOf(headers)) {
		h := c.resolve(headers[name].(map[string]any))
		if h["required"] == true && resp.Header.Get(name) == "" {
			errs = append(errs, "required header "+name+" is missing")
		}
	}
	content, _ := r["content"].(map[string]any)
	if len(content) == 0 {
		return errs
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	media, ok := content[ct].(map[string]any)
	if !ok {
		return append(errs, fmt.Sprintf("content type %q is not documented (%v)", ct, sortedKeys(keysOf(content))))
	}
	schema, _ := media["schema"].(map[string]any)
	var docs [][]byte
	switch ct {
	case "application/json":
		docs = [][]byte{body}
	case "application/x-ndjson":
		for _, line := range bytes.Split(body, []byte("\n")) {
			if len(line) > 0 {
				docs = append(docs, line)
			}
		}
		if len(docs) == 0 {
			return append(errs, "no JSONL line")
		}
	default:
		return errs // an event stream: a string, nothing to parse
	}
	for _, d := range docs {
		dec := json.NewDecoder(bytes.NewReader(d))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return append(errs, "body is not JSON: "+err.Error())
		}
		errs = append(errs, c.check("$", schema, v)...)
	}
	return errs
}

func keysOf(m map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// check returns what of v does not fit schema s, each with where (at).
func (c *schemaChecker) check(at string, s map[string]any, v any) []string {
	if s == nil {
		return nil
	}
	s = c.resolve(s)
	var errs []string
	fail := func(f string, a ...any) { errs = append(errs, at+": "+fmt.Sprintf(f, a...)) }
	if subs, ok := s["oneOf"].([]any); ok {
		n := 0
		var closest []string
		for _, sub := range subs {
			e := c.check(at, sub.(map[string]any), v)
			if len(e) == 0 {
				n++
			} else if closest == nil || len(e) < len(closest) {
				closest = e
			}
		}
		if n != 1 {
			fail("fits %d of oneOf's %d schemas, want 1 (%s)", n, len(subs), compact(v))
			if n == 0 {
				errs = append(errs, closest...) // why the nearest one does not fit
			}
		}
	}
	if subs, ok := s["allOf"].([]any); ok {
		for _, sub := range subs {
			errs = append(errs, c.check(at, sub.(map[string]any), v)...)
		}
	}
	if want, ok := s["const"]; ok && !reflect.DeepEqual(want, v) {
		fail("%s, want const %v", compact(v), want)
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			found = found || reflect.DeepEqual(e, v)
		}
		if !found {
			fail("%s is not one of %v", compact(v), enum)
		}
	}
	if typ, ok := s["type"]; ok {
		var types []any
		if ts, ok := typ.([]any); ok {
			types = ts
		} else {
			types = []any{typ}
		}
		got, fits := jsonType(v), false
		for _, want := range types {
			fits = fits || want == got || (want == "number" && got == "integer")
		}
		if !fits {
			fail("%s is a JSON %s, want %v", compact(v), got, typ)
			return errs
		}
	}
	switch v := v.(type) {
	case string:
		if pat, ok := s["pattern"].(string); ok && !regexp.MustCompile(pat).MatchString(v) {
			fail("%q does not match %s", v, pat)
		}
	case json.Number:
		if min, ok := s["minimum"].(json.Number); ok {
			if a, b := num(v), num(min); a < b {
				fail("%s is below the minimum %s", v, min)
			}
		}
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for _, k := range req {
			if _, ok := v[k.(string)]; !ok {
				fail("required field %q is missing", k)
			}
		}
		for _, k := range sortedKeys(keysOf(v)) {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, c.check(at+"."+k, ps, v[k])...)
			} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
				errs = append(errs, c.check(at+"."+k, ap, v[k])...)
			} else if props != nil {
				fail("field %q is not described in the schema", k)
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range v {
				errs = append(errs, c.check(fmt.Sprintf("%s[%d]", at, i), items, e)...)
			}
		}
	}
	return errs
}

func jsonType(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	default:
		return "object"
	}
}

func num(n json.Number) float64 {
	f, _ := n.Float64()
	return f
}

func compact(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 120 {
		b = append(b[:117], "..."...)
	}
	return string(b)
}
