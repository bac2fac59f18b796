package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/valyala/fasthttp"
)

// credential is where a client's provider key came from.
type credential uint8

const (
	credNone credential = iota
	credBearer
	credXAPIKey
	credGoogHeader
	credQueryKey
)

// clientKey finds the caller's key in the places SDKs put it: Authorization
// Bearer (OpenAI, DeepSeek, Gemini's OpenAI endpoint), x-api-key, x-goog-api-key
// (@google/genai) and ?key= (Gemini REST). The returned slice aliases the
// request and is valid only while the handler runs.
func clientKey(req *fasthttp.Request) ([]byte, credential) {
	if v := req.Header.Peek("Authorization"); len(v) > 7 && bytes.EqualFold(v[:7], []byte("Bearer ")) {
		if k := bytes.TrimSpace(v[7:]); len(k) > 0 {
			return k, credBearer
		}
	}
	if v := req.Header.Peek("X-Goog-Api-Key"); len(v) > 0 {
		return v, credGoogHeader
	}
	if v := req.Header.Peek("X-Api-Key"); len(v) > 0 {
		return v, credXAPIKey
	}
	if v := req.URI().QueryArgs().Peek("key"); len(v) > 0 {
		return v, credQueryKey
	}
	return nil, credNone
}

// clientTable maps configured client keys to tenants. Lookups compare in
// constant time so response timing tells nothing about a key's prefix.
type clientTable struct {
	keys    [][]byte
	tenants []string
}

func newClientTable(clients []config.Client) *clientTable {
	t := &clientTable{}
	for _, c := range clients {
		t.keys = append(t.keys, []byte(c.Key.Reveal()))
		t.tenants = append(t.tenants, c.Tenant)
	}
	return t
}

// enabled reports whether client keys are configured (else: pass-through).
func (t *clientTable) enabled() bool { return len(t.keys) > 0 }

// tenant returns the tenant of key, or "" when the key is unknown.
func (t *clientTable) tenant(key []byte) string {
	found := -1
	for i, k := range t.keys {
		if subtle.ConstantTimeCompare(k, key) == 1 {
			found = i
		}
	}
	if found < 0 {
		return ""
	}
	return t.tenants[found]
}

// passThroughTenant names the tenant of a pass-through caller: a hash of its
// own provider key, so callers with different keys never share threads and
// the key itself is never stored.
func passThroughTenant(key []byte) string {
	sum := sha256.Sum256(key)
	return hexID("k-", sum[:12])
}

// authenticate is the auth stage: it finds the client's credential and
// its tenant (with client keys configured, the key's; without, one derived
// from the key, so tenants that share a proxy never share threads). A
// request without a credential, or with a key that is not a client's, is
// answered here (ok false).
//
//go:noinline
func (s *Server) authenticate(ctx *fasthttp.RequestCtx, shape apierr.Shape) (tenant string, cred credential, ok bool) {
	key, cred := clientKey(&ctx.Request)
	if cred == credNone {
		apierr.Write(ctx, shape, apierr.New(apierr.MissingAPIKey,
			"No API key was provided: send it as Authorization: Bearer, x-api-key, x-goog-api-key or ?key=."))
		return "", cred, false
	}
	if !s.clients.enabled() {
		return passThroughTenant(key), cred, true
	}
	if tenant = s.clients.tenant(key); tenant == "" {
		apierr.Write(ctx, shape, apierr.New(apierr.InvalidAPIKey,
			"The API key is not one of this proxy's client keys."))
		return "", cred, false
	}
	return tenant, cred, true
}

// stripClientCredential removes every place a client key can travel, before
// a pool key is set in its stead.
func stripClientCredential(req *fasthttp.Request) {
	req.Header.Del("Authorization")
	req.Header.Del("X-Api-Key")
	req.Header.Del("X-Goog-Api-Key")
	req.URI().QueryArgs().Del("key")
}
