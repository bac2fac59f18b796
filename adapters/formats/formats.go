// Package formats is the lookup of wire formats: it holds every format
// package's Wire, and picks the adapter of a request from what is known
// of it — a connection's provider and the request path, the path alone
// before a connection is known, or a stored thread's format. It is the
// one place besides the format packages that knows which formats exist
// and which provider speaks which; the proxy asks it and nothing else.
package formats

import (
	"bytes"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/anthropic"
	"github.com/chronicle-proxy/chronicle/adapters/gemini"
	"github.com/chronicle-proxy/chronicle/adapters/openaichat"
	"github.com/chronicle-proxy/chronicle/adapters/responses"
)

// wires are the formats, each as its package exports it.
var wires = []adapters.Wire{openaichat.Wire, gemini.Wire, responses.Wire, anthropic.Wire}

// byFormat is each format's adapter in its default dialect.
var byFormat = func() map[adapters.Format]adapters.Adapter {
	m := make(map[adapters.Format]adapters.Adapter, len(wires))
	for _, w := range wires {
		m[w.Format] = mustNew(w, "", nil)
	}
	return m
}()

func mustNew(w adapters.Wire, dialect string, sessionHeaders []string) adapters.Adapter {
	a, ok := w.New(dialect, sessionHeaders)
	if !ok {
		panic("formats: " + string(w.Format) + " has no dialect " + dialect)
	}
	return a
}

// Default is the adapter of a request nothing else names a format for:
// OpenAI chat's.
func Default() adapters.Adapter { return byFormat[adapters.FormatOpenAIChat] }

// ForThread is the adapter of a stored thread's format, in its default
// dialect (for chronicle's own events, where no connection names one);
// Default for a format it does not know.
func ForThread(f adapters.Format) adapters.Adapter {
	if a, ok := byFormat[f]; ok {
		return a
	}
	return Default()
}

// ForPath guesses the caller's wire format from the request path alone,
// for errors that come before a connection is known: Gemini's for a
// native Gemini path, Anthropic's for …/v1/messages (and its
// count_tokens), else Default.
func ForPath(path []byte) adapters.Adapter {
	if p := bytes.TrimRight(path, "/"); bytes.HasSuffix(p, []byte("/v1/messages")) || bytes.HasSuffix(p, []byte("/v1/messages/count_tokens")) {
		return byFormat[adapters.FormatAnthropic]
	}
	if !bytes.Contains(path, []byte("/openai/")) && bytes.Contains(path, []byte("/models/")) &&
		(bytes.Contains(path, []byte(":generateContent")) || bytes.Contains(path, []byte(":streamGenerateContent")) || bytes.Contains(path, []byte("/v1beta/"))) {
		return byFormat[adapters.FormatGemini]
	}
	return Default()
}

// route is one wire format a provider's connections speak: in which
// dialect, and for which request paths (nil: every path no route before
// it takes).
type route struct {
	wire    adapters.Wire
	dialect string
	takes   func(path []byte) bool
}

// providers are the routes of each provider (a connection's provider in
// the config), in order; other providers (openai-compatible) take
// otherProvider's.
var providers = map[string][]route{
	"openai": {
		{responses.Wire, "openai", isResponsesPath},
		{openaichat.Wire, openaichat.OpenAI.Name, nil},
	},
	"deepseek": {
		{openaichat.Wire, openaichat.DeepSeek.Name, nil},
	},
	"anthropic": {
		{anthropic.Wire, "", nil},
	},
	"gemini": {
		// Gemini's OpenAI-compatible endpoint, under …/openai/.
		{openaichat.Wire, openaichat.GeminiOpenAI.Name, underOpenAI},
		{gemini.Wire, "", nil},
	},
}

// Providers are the provider names a connection may give, in the order
// the config's documentation lists them; OpenAICompatible is the one for
// any other OpenAI-compatible server.
var Providers = []string{"openai", "deepseek", "gemini", "anthropic", OpenAICompatible}

// OpenAICompatible is the provider of OpenAI-compatible servers.
const OpenAICompatible = "openai-compatible"

// Known reports whether provider is one a connection may give.
func Known(provider string) bool {
	for _, p := range Providers {
		if p == provider {
			return true
		}
	}
	return false
}

var otherProvider = []route{
	{responses.Wire, "openai", isResponsesPath},
	{openaichat.Wire, openaichat.OpenAICompatible.Name, nil},
}

// underOpenAI reports whether path is under Gemini's OpenAI-compatible
// endpoint.
func underOpenAI(path []byte) bool { return bytes.Contains(path, []byte("/openai/")) }

// isResponsesPath reports whether path is the Responses API (…/responses,
// or one of its sub-resources).
func isResponsesPath(path []byte) bool {
	p := bytes.TrimRight(path, "/")
	return bytes.HasSuffix(p, []byte("/responses")) || bytes.Contains(p, []byte("/responses/"))
}

// Connection is the adapters of one connection: its own, since a
// connection's session headers are its config. Immutable.
type Connection struct {
	routes []connRoute
}

type connRoute struct {
	ad    adapters.Adapter
	takes func(path []byte) bool
}

// ForConnection builds the adapters of a connection of provider, with the
// connection's session headers added to each dialect's.
func ForConnection(provider string, sessionHeaders []string) *Connection {
	rs, ok := providers[provider]
	if !ok {
		rs = otherProvider
	}
	c := &Connection{routes: make([]connRoute, len(rs))}
	for i, r := range rs {
		c.routes[i] = connRoute{ad: mustNew(r.wire, r.dialect, sessionHeaders), takes: r.takes}
	}
	return c
}

// Adapter is the wire format of a request to path on the connection.
func (c *Connection) Adapter(path []byte) adapters.Adapter {
	for _, r := range c.routes {
		if r.takes == nil || r.takes(path) {
			return r.ad
		}
	}
	return c.routes[len(c.routes)-1].ad
}
