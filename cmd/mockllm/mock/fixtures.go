package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
)

// provider names one wire dialect the mock speaks; the value is the fixture folder.
type provider string

const (
	provOpenAI       provider = "openai-chat"
	provDeepSeek     provider = "deepseek"
	provGeminiOpenAI provider = "gemini-openai"
	provGemini       provider = "gemini"
	provResponses    provider = "openai-responses"
	provAnthropic    provider = "anthropic"
)

var allProviders = []provider{provOpenAI, provDeepSeek, provGeminiOpenAI, provGemini, provResponses, provAnthropic}

// scenario is one fixture base name of a provider folder, pre-split so that a
// reply is a sequence of writes of cached bytes.
type scenario struct {
	name string
	// events is the .sse file split after every event separator; the
	// concatenation is the file byte for byte. Nil when there is no .sse.
	events [][]byte
	// eventsNoUsage is events as real OpenAI sends them without
	// stream_options.include_usage: no choices:[] usage chunk and no
	// "usage":null fields. Only set for openai-chat.
	eventsNoUsage [][]byte
	// array is the Gemini streamGenerateContent body without alt=sse: one
	// JSON array, one element per SSE event. Only set for gemini.
	array [][]byte
	// json is the non-stream body (.json). Nil when there is none.
	json []byte
}

// providerData is everything the mock serves for one provider.
type providerData struct {
	scenarios map[string]*scenario
	errors    map[string][]byte // "error.rate-limit" -> body
}

var (
	loadOnce sync.Once
	loaded   map[provider]*providerData
	loadErr  error
	// issuedSignatures holds every Gemini thought signature that appears in
	// the gemini and gemini-openai fixtures: the ones the mock hands out.
	issuedSignatures map[string]bool
	// issuedResponsesCalls holds every call_id of the openai-responses
	// fixtures, accepted as answered-to when previous_response_id is used.
	issuedResponsesCalls map[string]bool
)

var (
	sigRe    = regexp.MustCompile(`"thought(?:Signature|_signature)":\s*"([^"]+)"`)
	callIDRe = regexp.MustCompile(`"call_id":\s*"([^"]+)"`)
)

// load reads and pre-splits every fixture once per process.
func load() error {
	loadOnce.Do(func() {
		loaded = make(map[provider]*providerData)
		issuedSignatures = make(map[string]bool)
		issuedResponsesCalls = make(map[string]bool)
		fixtureThinking = make(map[string]string)
		fixtureMessages = make(map[string][]thinkRef)
		for _, p := range allProviders {
			pd, err := loadProvider(p)
			if err != nil {
				loadErr = err
				return
			}
			loaded[p] = pd
		}
		loadErr = checkTemplates()
	})
	return loadErr
}

func loadProvider(p provider) (*providerData, error) {
	dir := "providers/" + string(p)
	entries, err := fs.ReadDir(fixtures.FS, dir)
	if err != nil {
		return nil, fmt.Errorf("mock: read fixtures %s: %w", dir, err)
	}
	pd := &providerData{scenarios: map[string]*scenario{}, errors: map[string][]byte{}}
	get := func(name string) *scenario {
		sc := pd.scenarios[name]
		if sc == nil {
			sc = &scenario{name: name}
			pd.scenarios[name] = sc
		}
		return sc
	}
	for _, e := range entries {
		fn := e.Name()
		b, err := fs.ReadFile(fixtures.FS, dir+"/"+fn)
		if err != nil {
			return nil, fmt.Errorf("mock: read fixture %s/%s: %w", dir, fn, err)
		}
		if p == provGemini || p == provGeminiOpenAI {
			for _, m := range sigRe.FindAllSubmatch(b, -1) {
				issuedSignatures[string(m[1])] = true
			}
		}
		if p == provResponses {
			for _, m := range callIDRe.FindAllSubmatch(b, -1) {
				issuedResponsesCalls[string(m[1])] = true
			}
		}
		if p == provAnthropic && strings.HasSuffix(fn, ".json") {
			collectAnthropicFixtureThinking(b)
		}
		switch {
		case strings.HasPrefix(fn, "error.") && strings.HasSuffix(fn, ".json"):
			pd.errors[strings.TrimSuffix(fn, ".json")] = b
		case strings.HasPrefix(fn, "request."), strings.Contains(fn, ".expected."), fn == "README.md":
			// Not a reply.
		case strings.HasSuffix(fn, ".sse"):
			sc := get(strings.TrimSuffix(fn, ".sse"))
			sep := "\n\n"
			if p == provGemini {
				sep = "\r\n\r\n"
			}
			sc.events = splitEvents(b, sep)
			if p == provOpenAI {
				sc.eventsNoUsage = stripUsage(sc.events)
			}
			if p == provGemini {
				arr, err := jsonArrayElements(sc.events)
				if err != nil {
					return nil, fmt.Errorf("mock: %s/%s: %w", dir, fn, err)
				}
				sc.array = arr
			}
		case strings.HasSuffix(fn, ".json"):
			get(strings.TrimSuffix(fn, ".json")).json = b
		}
	}
	return pd, nil
}

// splitEvents cuts an SSE body after every separator. Each event keeps its
// separator, so writing the events in order reproduces the body exactly.
func splitEvents(b []byte, sep string) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte(sep))
		if i < 0 {
			out = append(out, b)
			break
		}
		out = append(out, b[:i+len(sep)])
		b = b[i+len(sep):]
	}
	return out
}

var (
	usageNull      = []byte(`,"usage":null`)
	emptyChoices   = []byte(`"choices":[]`)
	dataPrefix     = []byte("data: ")
	doneEventBytes = []byte("data: [DONE]\n\n")
)

// stripUsage returns the OpenAI chat events as the API sends them when
// stream_options.include_usage is not set (wire-formats.md 1.3): no
// "usage":null on the chunks and no final choices:[] usage chunk. A literal
// ,"usage":null cannot occur inside a JSON string (its quotes would be escaped).
func stripUsage(events [][]byte) [][]byte {
	out := make([][]byte, 0, len(events))
	for _, ev := range events {
		if bytes.Contains(ev, emptyChoices) && bytes.Contains(ev, []byte(`"usage":{`)) {
			continue
		}
		out = append(out, bytes.ReplaceAll(ev, usageNull, nil))
	}
	return out
}

// jsonArrayElements turns Gemini SSE events into the pieces of the JSON array
// that :streamGenerateContent sends without alt=sse: "[{" first, elements
// pretty-printed with two spaces, separated by "\n,\r\n", closed by "\n]"
// (the layout Google's endpoint emits; composed, no fixture records it).
func jsonArrayElements(events [][]byte) ([][]byte, error) {
	out := make([][]byte, 0, len(events))
	for i, ev := range events {
		payload := bytes.TrimSpace(bytes.TrimPrefix(ev, dataPrefix))
		var buf bytes.Buffer
		if err := json.Indent(&buf, payload, "", "  "); err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		var piece []byte
		if i == 0 {
			piece = append(piece, '[')
		} else {
			piece = append(piece, "\n,\r\n"...)
		}
		piece = append(piece, buf.Bytes()...)
		if i == len(events)-1 {
			piece = append(piece, "\n]"...)
		}
		out = append(out, piece)
	}
	return out, nil
}

func errorFixture(p provider, name string) []byte {
	return loaded[p].errors[name]
}
