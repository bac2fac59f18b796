package proxy

import (
	"bufio"
	"net"

	"github.com/chronicle-proxy/chronicle/proxy/api"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// newTenantAPI builds the /api handler (proxy/api) on this server's store,
// client keys, local runs and follow feeds.
func (s *Server) newTenantAPI() *api.Handler {
	return api.New(api.Options{
		Store: s.store, StoreTimeout: s.storeTimeout, Logger: s.log, Shape: openAIAdapter,
		Tenant:      s.apiTenant,
		CancelLocal: s.cancelLocal,
		Follow: func(w *bufio.Writer, conn net.Conn, k store.Key, runID string, after int64) {
			s.streamEvents(w, conn, k, runID, after, true, nil)
		},
	})
}

// apiTenant is the tenant of an /api request: the one its credential
// names, as for its provider calls.
func (s *Server) apiTenant(ctx *fasthttp.RequestCtx) (string, *apierr.Error) {
	key, cred := clientKey(&ctx.Request)
	if cred == credNone {
		return "", apierr.New(apierr.MissingAPIKey, "No API key was provided.")
	}
	if !s.clients.enabled() {
		return passThroughTenant(key), nil
	}
	if tenant := s.clients.tenant(key); tenant != "" {
		return tenant, nil
	}
	return "", apierr.New(apierr.InvalidAPIKey, "The API key is not one of this proxy's client keys.")
}
