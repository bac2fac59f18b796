package mock

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

// knobs are the X-Mock-* request headers of one request.
type knobs struct {
	scenario   string
	chunks     int
	chunksSet  bool // X-Mock-Chunks was given
	firstByte  time.Duration
	chunkDelay time.Duration
	cutAfter   int // -1: off
	status     int
	errorBody  string
	retryAfter string
	gate       string
	dsGen      string
	// Anthropic only (-1: not given).
	toolCalls   int
	streamError int
	cacheMin    int
}

func parseKnobs(h http.Header) (knobs, error) {
	k := knobs{
		scenario:    h.Get("X-Mock-Scenario"),
		cutAfter:    -1,
		toolCalls:   -1,
		streamError: -1,
		cacheMin:    -1,
		chunksSet:   h.Get("X-Mock-Chunks") != "",
		errorBody:   h.Get("X-Mock-Error-Body"),
		retryAfter:  h.Get("X-Mock-Retry-After"),
		gate:        h.Get("X-Mock-Gate"),
		dsGen:       h.Get("X-Mock-DeepSeek-Generation"),
	}
	dur := func(name string, dst *time.Duration) error {
		if v := h.Get(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("%s: bad duration %q", name, v)
			}
			*dst = d
		}
		return nil
	}
	num := func(name string, dst *int) error {
		if v := h.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("%s: bad count %q", name, v)
			}
			*dst = n
		}
		return nil
	}
	for _, err := range []error{
		dur("X-Mock-First-Byte-Delay", &k.firstByte),
		dur("X-Mock-Chunk-Delay", &k.chunkDelay),
		num("X-Mock-Cut-After", &k.cutAfter),
		num("X-Mock-Chunks", &k.chunks),
		num("X-Mock-Status", &k.status),
		num("X-Mock-Tool-Calls", &k.toolCalls),
		num("X-Mock-Stream-Error", &k.streamError),
		num("X-Mock-Cache-Min-Tokens", &k.cacheMin),
	} {
		if err != nil {
			return k, err
		}
	}
	if k.status != 0 && (k.status < 100 || k.status > 599) {
		return k, fmt.Errorf("X-Mock-Status: bad status %d", k.status)
	}
	switch k.dsGen {
	case "", "r1", "v3.2", "v4":
	default:
		return k, fmt.Errorf("X-Mock-DeepSeek-Generation: want r1, v3.2 or v4, got %q", k.dsGen)
	}
	return k, nil
}

// handling is one provider request in progress.
type handling struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	e    *entry
	body []byte
	k    knobs

	prov      provider
	model     string   // gemini: from the path
	endpoint  string   // anthropic: anthMessages, anthCountTokens, anthModels, anthModel
	anth      *anthReq // anthropic: the parsed request
	canceled  bool     // the client went away first
	completed bool     // the answer was written in full
}

// route maps the path (and for chat paths the model) to a provider.
func route(path string, body []byte) (p provider, model string, stream bool, ok bool) {
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		m := gjson.GetBytes(body, "model").String()
		switch {
		case strings.HasPrefix(m, "deepseek"):
			return provDeepSeek, m, false, true
		case strings.HasPrefix(m, "gemini"), strings.HasPrefix(m, "models/gemini"):
			return provGeminiOpenAI, m, false, true
		}
		return provOpenAI, m, false, true
	case "/v1beta/openai/chat/completions":
		return provGeminiOpenAI, gjson.GetBytes(body, "model").String(), false, true
	case "/v1/responses", "/responses":
		return provResponses, gjson.GetBytes(body, "model").String(), false, true
	}
	if anthropicEndpoint(path) != "" {
		return provAnthropic, gjson.GetBytes(body, "model").String(), false, true
	}
	for _, prefix := range []string{"/v1beta/models/", "/v1/models/"} {
		rest, found := strings.CutPrefix(path, prefix)
		if !found {
			continue
		}
		if m, ok := strings.CutSuffix(rest, ":generateContent"); ok {
			return provGemini, m, false, true
		}
		if m, ok := strings.CutSuffix(rest, ":streamGenerateContent"); ok {
			return provGemini, m, true, true
		}
	}
	return "", "", false, false
}

// credential returns the API key the request carries, from Authorization:
// Bearer, x-api-key, x-goog-api-key or ?key=.
func credential(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
		return v
	}
	for _, h := range []string{"x-api-key", "x-goog-api-key"} {
		if v := r.Header.Get(h); v != "" {
			return v
		}
	}
	return r.URL.Query().Get("key")
}

func (h *handling) serve() {
	h.k.cutAfter = -1 // knobs are parsed only for known routes; until then none apply
	p, model, geminiStream, ok := route(h.r.URL.Path, h.body)
	if !ok {
		h.mockError(http.StatusNotFound, "unknown path "+h.r.URL.Path)
		return
	}
	h.prov, h.model = p, model
	h.s.update(h.e, func(q *Request) { q.Provider = string(p) })
	method := http.MethodPost
	if p == provAnthropic {
		h.endpoint = anthropicEndpoint(h.r.URL.Path)
		if h.endpoint == anthModels || h.endpoint == anthModel {
			method = http.MethodGet
		}
		h.w.Header().Set("request-id", anthropicID("req_011C", h.r.URL.Path+"\x00"+string(h.body), 20))
	}
	if h.r.Method != method {
		h.mockError(http.StatusMethodNotAllowed, "want "+method)
		return
	}
	k, err := parseKnobs(h.r.Header)
	if err != nil {
		h.mockError(http.StatusBadRequest, err.Error())
		return
	}
	h.k = k

	if p == provAnthropic {
		if rej := anthropicHeaderRejection(h.r); rej != nil {
			h.reject(rej)
			return
		}
		if method == http.MethodGet {
			if h.statusKnob() {
				return
			}
			h.anthropicModels()
			return
		}
	} else if key := credential(h.r); key == "" || key == "invalid" {
		h.reject(authRejection(p, key == ""))
		return
	}
	// jsonscan.Valid, not gjson.ValidBytes: it bounds nesting where gjson
	// recurses, and a few megabytes of "[" would overflow the stack.
	if !jsonscan.Valid(h.body) {
		h.reject(invalidJSONRejection(p))
		return
	}
	if rej := h.validate(); rej != nil {
		h.reject(rej)
		return
	}
	if h.statusKnob() {
		return
	}
	switch {
	case h.endpoint == anthCountTokens:
		h.anthropicCountTokens()
	case p == provAnthropic:
		h.replyAnthropic()
	default:
		h.reply(geminiStream)
	}
}

// statusKnob answers X-Mock-Status when set; true when it did.
func (h *handling) statusKnob() bool {
	if h.k.status == 0 {
		return false
	}
	rej, err := statusRejection(h.prov, h.k.status, h.k.errorBody)
	if err != nil {
		h.mockError(http.StatusBadRequest, "X-Mock-Error-Body: "+err.Error())
		return true
	}
	h.reject(rej)
	return true
}

// validate runs the provider's strictness rules in order.
func (h *handling) validate() *rejection {
	switch h.prov {
	case provOpenAI, provDeepSeek, provGeminiOpenAI:
		cr := parseChat(h.body)
		d := map[provider]chatDialect{provOpenAI: openAIDialect, provDeepSeek: deepSeekDialect, provGeminiOpenAI: geminiOpenAIDialect}[h.prov]
		if h.prov == provDeepSeek {
			gen := deepSeekGeneration(cr.model, h.k.dsGen)
			for _, rule := range deepSeekThinkingRules[:2] { // R1 shape rules come first
				if rej := rule(cr, gen); rej != nil {
					return rej
				}
			}
			for _, rule := range chatPairingRules {
				if rej := rule(cr, d); rej != nil {
					return rej
				}
			}
			for _, rule := range deepSeekThinkingRules[2:] {
				if rej := rule(cr, gen); rej != nil {
					return rej
				}
			}
			return nil
		}
		for _, rule := range chatPairingRules {
			if rej := rule(cr, d); rej != nil {
				return rej
			}
		}
		if h.prov == provGeminiOpenAI {
			return ruleGeminiOpenAIThoughtSignature(cr)
		}
	case provGemini:
		gr := parseGemini(h.model, h.body)
		for _, rule := range geminiRules {
			if rej := rule(gr); rej != nil {
				return rej
			}
		}
	case provResponses:
		rr := parseResponses(h.body)
		for _, rule := range responsesRules {
			if rej := rule(rr); rej != nil {
				return rej
			}
		}
	case provAnthropic:
		h.anth = parseAnthropic(h.body, h.r.Header, h.endpoint == anthCountTokens)
		h.anth.mem = h.s.anth
		for _, rule := range anthropicRules {
			if rej := rule(h.anth); rej != nil {
				return rej
			}
		}
	}
	return nil
}

// defaultScenario picks "tool-call" (or "parallel-tools" where the folder
// has no tool-call) when the request declares tools and ends with a user
// message, else "text".
func (h *handling) defaultScenario() string {
	wantTools := false
	switch h.prov {
	case provOpenAI, provDeepSeek, provGeminiOpenAI:
		last := gjson.GetBytes(h.body, "messages.@reverse.0.role").String()
		wantTools = len(gjson.GetBytes(h.body, "tools").Array()) > 0 && last == "user"
	case provGemini:
		gr := parseGemini(h.model, h.body)
		if n := len(gr.contents); gr.hasTools && n > 0 {
			c := gr.contents[n-1]
			wantTools = c.role == "user" && len(c.responses()) == 0
		}
	case provResponses:
		rr := parseResponses(h.body)
		if n := len(rr.items); rr.hasTools {
			wantTools = rr.stringInput || n > 0 && rr.items[n-1].typ == "message" && rr.items[n-1].role == "user"
		}
	}
	if !wantTools {
		return "text"
	}
	if loaded[h.prov].scenarios["tool-call"] != nil {
		return "tool-call"
	}
	return "parallel-tools"
}

func (h *handling) reply(geminiStream bool) {
	stream := geminiStream
	if h.prov != provGemini {
		stream = gjson.GetBytes(h.body, "stream").Bool()
	}
	includeUsage := gjson.GetBytes(h.body, "stream_options.include_usage").Bool()
	altSSE := h.prov != provGemini || h.r.URL.Query().Get("alt") == "sse"

	name := h.k.scenario
	if name == "" {
		name = h.defaultScenario()
	}
	h.s.update(h.e, func(q *Request) { q.Scenario = name })
	ctype := "text/event-stream"
	if !altSSE {
		ctype = "application/json; charset=UTF-8"
	}

	if name == "synthetic" {
		if stream {
			h.stream(synthetic(h.prov, h.k.chunks, includeUsage, altSSE), ctype)
		} else {
			h.whole(http.StatusOK, jsonType(h.prov), syntheticJSON(h.prov, h.k.chunks), "")
		}
		return
	}
	sc := loaded[h.prov].scenarios[name]
	if sc == nil {
		h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Scenario: no fixture %q in %s", name, h.prov))
		return
	}
	if !stream {
		if sc.json == nil {
			h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Scenario: %s/%s has no .json (non-stream) body", h.prov, name))
			return
		}
		h.whole(http.StatusOK, jsonType(h.prov), sc.json, "")
		return
	}
	events := sc.events
	switch {
	case h.prov == provOpenAI && !includeUsage:
		events = sc.eventsNoUsage
	case !altSSE:
		events = sc.array
	}
	if events == nil {
		h.mockError(http.StatusBadRequest, fmt.Sprintf("X-Mock-Scenario: %s/%s has no .sse (stream) body", h.prov, name))
		return
	}
	h.stream(fixedEvents(events), ctype)
}

func jsonType(p provider) string {
	if p == provGemini || p == provGeminiOpenAI {
		return "application/json; charset=UTF-8"
	}
	return "application/json"
}

// reject answers a rejection (strictness rule, auth, knob).
func (h *handling) reject(rej *rejection) {
	h.s.update(h.e, func(q *Request) { q.Rule = rej.rule })
	if h.prov == provAnthropic {
		if id := gjson.GetBytes(rej.body, "request_id").String(); id != "" {
			h.w.Header().Set("request-id", id)
		}
	}
	h.whole(rej.status, jsonType(h.prov), rej.body, rej.rule)
}

// mockError answers a problem with the mock's own use (unknown path, bad
// knob, missing fixture): not provider-shaped on purpose.
func (h *handling) mockError(status int, msg string) {
	h.s.update(h.e, func(q *Request) { q.Rule = "mock" })
	h.whole(status, "application/json", []byte(`{"mock_error":"`+jsonEscape("mockllm: "+msg)+`"}`+"\n"), "mock")
}

func (h *handling) setStatus(status int) {
	h.s.update(h.e, func(q *Request) { q.Status = status })
}

// whole writes a complete (non-stream) answer after the first-byte delay
// and the gate; X-Mock-Cut-After N cuts it after N body bytes.
func (h *handling) whole(status int, ctype string, body []byte, rule string) {
	ctx := h.r.Context()
	if !h.s.sleep(ctx, h.k.firstByte) {
		h.canceled = true
		return
	}
	if h.k.gate != "" && !h.s.waitGate(ctx, h.k.gate) {
		h.canceled = true
		return
	}
	hd := h.w.Header()
	hd.Set("Content-Type", ctype)
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	if rule != "" {
		hd.Set("X-Mock-Rule", rule)
	}
	if status >= 400 && h.k.retryAfter != "" {
		hd.Set("Retry-After", h.k.retryAfter)
	}
	h.setStatus(status)
	h.w.WriteHeader(status)
	if h.k.cutAfter >= 0 && h.k.cutAfter < len(body) {
		_, _ = h.w.Write(body[:h.k.cutAfter])
		h.cut()
	}
	if _, err := h.w.Write(body); err != nil {
		h.canceled = true
		return
	}
	h.completed = true
}

// cut flushes what was written and drops the connection without finishing
// the response (net/http closes the connection on ErrAbortHandler).
func (h *handling) cut() {
	_ = http.NewResponseController(h.w).Flush()
	h.s.update(h.e, func(q *Request) { q.Cut = true })
	h.completed = true
	panic(http.ErrAbortHandler)
}

// eventSource yields the events of one streamed answer.
type eventSource interface {
	Len() int
	// Event returns event i, possibly appended to buf.
	Event(i int, buf []byte) []byte
}

type fixedEvents [][]byte

func (f fixedEvents) Len() int                     { return len(f) }
func (f fixedEvents) Event(i int, _ []byte) []byte { return f[i] }

// stream writes the events one by one, flushing after each, honouring the
// first-byte delay, chunk delay, gate (after the first event) and cut knobs.
func (h *handling) stream(src eventSource, ctype string) {
	ctx := h.r.Context()
	if !h.s.sleep(ctx, h.k.firstByte) {
		h.canceled = true
		return
	}
	hd := h.w.Header()
	hd.Set("Content-Type", ctype)
	hd.Set("Cache-Control", "no-cache")
	h.setStatus(http.StatusOK)
	h.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(h.w)
	if err := rc.Flush(); err != nil {
		h.canceled = true
		return
	}
	var buf []byte
	for i, n := 0, src.Len(); i < n; i++ {
		if i == h.k.cutAfter {
			h.cut()
		}
		if i > 0 && !h.s.sleep(ctx, h.k.chunkDelay) {
			h.canceled = true
			return
		}
		buf = src.Event(i, buf[:0])
		if _, err := h.w.Write(buf); err != nil {
			h.canceled = true
			return
		}
		if err := rc.Flush(); err != nil {
			h.canceled = true
			return
		}
		if i == 0 && h.k.gate != "" && !h.s.waitGate(ctx, h.k.gate) {
			h.canceled = true
			return
		}
	}
	h.completed = true
}
