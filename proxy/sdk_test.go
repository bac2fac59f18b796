package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"
)

// sdkClient is openai-go pointed at a chronicle connection, as an app would
// configure it: only the base URL changes.
func sdkClient(p *testProxy, conn, key string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithBaseURL(p.URL + "/" + conn + "/v1/"),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
	}, opts...)...)
}

// TestOpenAIGoChat: openai-go's chat client, non-stream and stream, through
// chronicle in append mode; the thread holds both turns.
func TestOpenAIGoChat(t *testing.T) {
	forEachBackend(t, func(t *testing.T, p *testProxy, m *testMock) {
		ctx := context.Background()
		c := sdkClient(p, "openai", "sdk-key", option.WithHeader("X-Thread-Id", "t-sdk"), option.WithHeader("X-Thread-Mode", "append"))
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Choices[0].Message.Content == "" {
			t.Fatal("empty answer")
		}
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("and again")},
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if acc.Choices[0].Message.Content == "" {
			t.Fatal("empty streamed answer")
		}
		th := apiThread(t, p, "sdk-key", "t-sdk")
		msgs := th.Get("messages").Array()
		if len(msgs) != 4 || msgs[3].Get("content").String() != acc.Choices[0].Message.Content {
			t.Fatalf("thread has %d messages; last %.300s, streamed %.80q; request %s", len(msgs), msgs[len(msgs)-1].Raw, acc.Choices[0].Message.Content, m.Requests()[1].Body)
		}
		// The second request carried only the new message; the upstream got
		// the whole conversation.
		sent := gjson.GetBytes(m.Requests()[1].Body, "messages").Array()
		if len(sent) != 3 {
			t.Fatalf("upstream got %d messages", len(sent))
		}
	})
}

const responsesConfig = `
leases: {ttl: 3s}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
  - {name: stateless, provider: openai, base_url: "${MOCK}", expand_previous_response: true, session_headers: [session-id]}
`

func weatherTool() []responses.ToolUnionParam {
	return []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather",
		map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false)}
}

func functionOutputs(resp *responses.Response) responses.ResponseInputParam {
	var out responses.ResponseInputParam
	for _, it := range resp.Output {
		if it.Type == "function_call" {
			item := responses.ResponseInputItemParamOfFunctionCallOutput(`{"temp_c":14}`)
			item.OfFunctionCallOutput.CallID = openai.String(it.CallID)
			out = append(out, item)
		}
	}
	return out
}

// TestOpenAIGoResponses: openai-go's Responses client through chronicle —
// a tool loop in append mode, a crash mid-turn then a continue the strict
// mock accepts, dropped reasoning items restored, and previous_response_id
// expanded for a stateless connection.
func TestOpenAIGoResponses(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyWith(t, m, responsesConfig, b.open(t))
			ctx := context.Background()

			t.Run("tool loop in append mode", func(t *testing.T) {
				c := sdkClient(p, "openai", "rk", option.WithHeader("X-Thread-Id", "t-resp-loop"), option.WithHeader("X-Thread-Mode", "append"))
				first, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris and Tokyo?")},
				})
				if err != nil {
					t.Fatal(err)
				}
				outputs := functionOutputs(first)
				if len(outputs) == 0 {
					t.Fatalf("no function call in %s", first.RawJSON())
				}
				m.Reset()
				second, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(),
					Input: responses.ResponseNewParamsInputUnion{OfInputItemList: outputs},
				})
				if err != nil {
					t.Fatalf("append with only the outputs: %v", err)
				}
				if second.OutputText() == "" {
					t.Fatalf("second answer %s", second.RawJSON())
				}
				sent := gjson.GetBytes(m.Requests()[0].Body, "input").Array()
				if len(sent) < 2+len(outputs) || sent[0].Get("role").String() != "user" {
					t.Fatalf("upstream input: %s", gjson.GetBytes(m.Requests()[0].Body, "input").Raw)
				}
				run := apiThread(t, p, "rk", "t-resp-loop").Get("runs")
				if run.Get("0.status").String() != "interrupted" || run.Get("0.resumed_by").String() != run.Get("1.id").String() {
					t.Fatalf("runs: %s", run.Raw)
				}
			})

			t.Run("crash then continue", func(t *testing.T) {
				c := sdkClient(p, "openai", "rk", option.WithHeader("X-Thread-Id", "t-resp-crash"))
				if _, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
				}); err != nil {
					t.Fatal(err)
				}
				// The app died before running the tools; after its restart it
				// continues the stored thread with an empty input.
				m.Reset()
				var raw []byte
				resp, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(),
					Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{}},
				}, option.WithResponseBodyInto(&raw))
				_ = resp
				if err != nil {
					t.Fatalf("continue: %v", err)
				}
				req := m.Requests()[0]
				if req.Status != 200 {
					t.Fatalf("mock answered %d (%s)", req.Status, req.Rule)
				}
				if !strings.Contains(gjson.GetBytes(req.Body, "input").Raw, "interrupted before it returned") {
					t.Fatalf("upstream input not repaired: %s", gjson.GetBytes(req.Body, "input").Raw)
				}
			})

			t.Run("dropped reasoning restored", func(t *testing.T) {
				c := sdkClient(p, "openai", "rk", option.WithHeader("X-Thread-Id", "t-resp-reason"))
				first, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
				}, option.WithHeader("X-Mock-Scenario", "reasoning-tool"))
				if err != nil {
					t.Fatal(err)
				}
				// The app keeps the user message and the function call but
				// drops the reasoning item, as many clients do.
				input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("weather in Paris?", responses.EasyInputMessageRoleUser)}
				for _, it := range first.Output {
					if it.Type == "function_call" {
						input = append(input, responses.ResponseInputItemParamOfFunctionCall(it.Arguments.OfString, it.CallID, it.Name))
					}
				}
				input = append(input, functionOutputs(first)...)
				m.Reset()
				var httpResp *http.Response
				if _, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(),
					Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
				}, option.WithResponseInto(&httpResp)); err != nil {
					t.Fatal(err)
				}
				if httpResp.Header.Get("X-Restored") == "" {
					t.Fatal("no X-Restored header")
				}
				sent := gjson.GetBytes(m.Requests()[0].Body, "input")
				if sent.Get("1.type").String() != "reasoning" || sent.Get("1.encrypted_content").String() == "" {
					t.Fatalf("reasoning item not restored: %s", sent.Raw)
				}
			})

			t.Run("previous_response_id expanded", func(t *testing.T) {
				c := sdkClient(p, "stateless", "rk", option.WithHeader("X-Thread-Id", "t-resp-prev"))
				first, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(), Store: openai.Bool(false),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
				})
				if err != nil {
					t.Fatal(err)
				}
				m.Reset()
				if _, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: "gpt-5", Tools: weatherTool(), Store: openai.Bool(false),
					PreviousResponseID: openai.String(first.ID),
					Input:              responses.ResponseNewParamsInputUnion{OfInputItemList: functionOutputs(first)},
				}); err != nil {
					t.Fatal(err)
				}
				req := m.Requests()[0]
				if gjson.GetBytes(req.Body, "previous_response_id").Exists() {
					t.Fatal("previous_response_id reached a stateless upstream")
				}
				if in := gjson.GetBytes(req.Body, "input").Array(); len(in) < 3 || in[0].Get("role").String() != "user" {
					t.Fatalf("input not expanded: %s", gjson.GetBytes(req.Body, "input").Raw)
				}
				if req.Header.Get("Session-Id") == "" || req.Header.Get("Session-Id") != gjson.GetBytes(req.Body, "prompt_cache_key").String() {
					t.Fatalf("session header %q, prompt_cache_key %q", req.Header.Get("Session-Id"), gjson.GetBytes(req.Body, "prompt_cache_key").String())
				}
			})
		})
	}
}
