package anthropic

import (
	"bytes"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
)

var ad = New()

var goldens = []formattest.Golden{
	{Dir: "anthropic", Name: "text", Adapter: ad, Model: "claude-sonnet-4-5-20250929",
		Usage: adapters.Usage{Present: true, InputTokens: 12, OutputTokens: 30}, Finish: adapters.FinishStop},
	{Dir: "anthropic", Name: "thinking", Adapter: ad, Model: "claude-sonnet-4-5-20250929",
		Usage: adapters.Usage{Present: true, InputTokens: 69, OutputTokens: 53}, Finish: adapters.FinishStop},
	{Dir: "anthropic", Name: "parallel-tools", Adapter: ad, Model: "claude-sonnet-4-5-20250929",
		Usage:  adapters.Usage{Present: true, InputTokens: 612 + 1536, OutputTokens: 131, CachedTokens: 1536},
		Finish: adapters.FinishToolCalls,
		Calls:  []adapters.ToolCall{{ID: "toolu_01TzKb9eUtnJodw30dXxCNFG", Name: "get_weather"}, {ID: "toolu_016t3H0gpONSuLusGiIbIpCu", Name: "get_weather"}}},
}

func TestGoldenStreams(t *testing.T) { formattest.GoldenStreams(t, goldens) }

func TestGoldenNonStream(t *testing.T) { formattest.GoldenNonStream(t, goldens) }

// TestNonStreamContentByteExact: a non-stream answer's content is kept
// byte for byte (compacted only where the body had spaces).
func TestNonStreamContentByteExact(t *testing.T) {
	for _, g := range goldens {
		body := formattest.Fixture(t, "anthropic/"+g.Name+".json")
		turn, err := ad.ParseResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		want := gjson.GetBytes(body, "content").Get("@ugly").Raw
		if got := gjson.GetBytes(turn.Message, "content").Raw; got != want {
			t.Errorf("%s: content %s\nwant %s", g.Name, got, want)
		}
	}
}

// TestStreamError: a mid-stream error event ends the turn failed with the
// provider's error object, not terminal.
func TestStreamError(t *testing.T) {
	turn := formattest.FeedAll(t, ad,
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":5,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	if turn.Finish != adapters.FinishError || turn.Terminal || gjson.GetBytes(turn.Error, "type").String() != "overloaded_error" {
		t.Fatalf("turn %+v", turn)
	}
	if got := ad.MessageText(turn.Message); got != "Hel" {
		t.Fatalf("partial text %q", got)
	}
}

// TestAssemblerBlocks: tool input from fragments (first fragment ""),
// an input-less tool_use, redacted thinking and server tool blocks kept
// whole, cumulative usage taken last.
func TestAssemblerBlocks(t *testing.T) {
	turn := formattest.FeedAll(t, ad,
		`{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":4,"cache_read_input_tokens":6,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"x\"}"}}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://a"}]}}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":""}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":" 1}"}}`,
		`{"type":"content_block_start","index":4,"content_block":{"type":"tool_use","id":"toolu_2","name":"g","input":{}}}`,
		`{"type":"ping"}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}`,
		`{"type":"message_delta","delta":{},"usage":{"output_tokens":9}}`,
		`{"type":"message_stop"}`)
	formattest.MustEqualJSON(t, `{"role":"assistant","content":[
		{"type":"redacted_thinking","data":"EmwKAhgBEgy"},
		{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"x"}},
		{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://a"}]},
		{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}},
		{"type":"tool_use","id":"toolu_2","name":"g","input":{}}]}`, turn.Message)
	if want := (adapters.Usage{Present: true, InputTokens: 20, OutputTokens: 9, CachedTokens: 6}); turn.Usage != want {
		t.Errorf("usage %+v, want %+v", turn.Usage, want)
	}
	if !turn.Terminal || turn.Finish != adapters.FinishToolCalls || len(turn.ToolCalls) != 2 {
		t.Errorf("turn %+v", turn)
	}
}

func TestErrorShape(t *testing.T) {
	for _, c := range []struct {
		status int
		typ    string
	}{{400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"}, {409, "conflict_error"},
		{413, "request_too_large"}, {429, "rate_limit_error"}, {502, "api_error"}, {503, "api_error"}, {529, "overloaded_error"}} {
		b := ad.ErrorBody(c.status, "thread_busy", `say "hi"`)
		if r := gjson.ParseBytes(b); r.Get("type").Str != "error" || r.Get("error.type").Str != c.typ ||
			r.Get("error.message").Str != `say "hi"` || r.Get("error.code").Str != "thread_busy" {
			t.Errorf("%d: %s", c.status, b)
		}
	}
	ev := ad.StreamErrorEvent(503, "store_unavailable", "down")
	if !bytes.HasPrefix(ev, []byte("event: error\ndata: {")) || !bytes.HasSuffix(ev, []byte("}\n\n")) {
		t.Errorf("event %q", ev)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		method, path, query, body string
		kind                      adapters.OpKind
		stream                    bool
	}{
		{"POST", "/v1/messages", "", `{"model":"m","stream":true}`, adapters.OpGenerate, true},
		{"POST", "/v1/messages", "beta=true", `{"model":"m"}`, adapters.OpGenerate, false},
		{"POST", "/v1/messages/count_tokens", "", `{"model":"m"}`, adapters.OpPassThrough, false},
		{"POST", "/v1/messages/batches", "", `{}`, adapters.OpPassThrough, false},
		{"GET", "/v1/models", "", ``, adapters.OpPassThrough, false},
	} {
		op := ad.Classify(c.method, c.path, c.query, []byte(c.body))
		if op.Kind != c.kind || op.Stream != c.stream {
			t.Errorf("%s %s?%s: %+v", c.method, c.path, c.query, op)
		}
	}
}

type headers map[string]string

func (h headers) Peek(k string) []byte { return []byte(h[k]) }

func TestKeyHeader(t *testing.T) {
	for version, want := range map[string]string{"2023-06-01": "X-Api-Key", "": "X-Api-Key", "2026-10-21": "Authorization", "2027-01-01": "Authorization"} {
		if name, _ := ad.KeyHeader(headers{"Anthropic-Version": version}); name != want {
			t.Errorf("%q: %s, want %s", version, name, want)
		}
	}
}

func FuzzAssembler(f *testing.F) {
	formattest.FuzzAssembler(f, ad,
		`{"type":"message_start","message":{"usage":{"input_tokens":3}}}`+"\n"+
			`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`+"\n"+
			`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"a \"q\" \u00e9"}}`+"\n"+
			`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"S"}}`+"\n"+
			`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`+"\n"+
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}`+"\n"+
			`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":2}}`+"\n"+
			`{"type":"message_stop"}`,
		`{"type":"error","error":{"type":"api_error","message":"x"}}`,
		`{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"orphan"}}`,
	)
}
