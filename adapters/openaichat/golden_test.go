package openaichat

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
)

var (
	openAIAd   = New(OpenAI)
	deepSeekAd = New(DeepSeek)
	gemOAIAd   = New(GeminiOpenAI)
)

var goldens = []formattest.Golden{
	{Dir: "openai-chat", Name: "text", Adapter: openAIAd, Model: "gpt-4.1-nano-2025-04-14",
		Usage: adapters.Usage{Present: true, InputTokens: 16, OutputTokens: 300}, Finish: adapters.FinishStop},
	{Dir: "openai-chat", Name: "parallel-tools", Adapter: openAIAd, Model: "gpt-4o-2024-08-06",
		Usage:  adapters.Usage{Present: true, InputTokens: 149, OutputTokens: 60},
		Finish: adapters.FinishToolCalls,
		Calls:  []adapters.ToolCall{{ID: "call_JMW1whyEaYG438VE1OIflxA2", Name: "GetWeatherArgs"}, {ID: "call_DNYTawLBoN8fj3KN6qU9N1Ou", Name: "get_stock_price"}}},
	{Dir: "openai-chat", Name: "parallel-tools", SSE: "parallel-tools.modern.sse", Adapter: openAIAd, NoJSON: true, Model: "gpt-4.1-2025-04-14",
		Usage:  adapters.Usage{Present: true, InputTokens: 149, OutputTokens: 60},
		Finish: adapters.FinishToolCalls,
		Calls:  []adapters.ToolCall{{ID: "call_JMW1whyEaYG438VE1OIflxA2", Name: "GetWeatherArgs"}, {ID: "call_DNYTawLBoN8fj3KN6qU9N1Ou", Name: "get_stock_price"}}},
	{Dir: "openai-chat", Name: "text-2024", Adapter: openAIAd, Expected: "-", NoJSON: true, Model: "gpt-4o-2024-08-06",
		Usage: adapters.Usage{Present: true, InputTokens: 14, OutputTokens: 30}, Finish: adapters.FinishStop},
	{Dir: "deepseek", Name: "text", Adapter: deepSeekAd, Model: "deepseek-reasoner",
		Usage: adapters.Usage{Present: true, InputTokens: 18, OutputTokens: 219, ReasoningTokens: 205}, Finish: adapters.FinishStop},
	{Dir: "deepseek", Name: "text", SSE: "text.keepalive.sse", Adapter: deepSeekAd, NoJSON: true, Model: "deepseek-reasoner",
		Usage: adapters.Usage{Present: true, InputTokens: 18, OutputTokens: 219, ReasoningTokens: 205}, Finish: adapters.FinishStop},
	{Dir: "deepseek", Name: "tool-call", Adapter: deepSeekAd, Model: "deepseek-reasoner",
		Usage:  adapters.Usage{Present: true, InputTokens: 339, OutputTokens: 83, CachedTokens: 320, ReasoningTokens: 39},
		Finish: adapters.FinishToolCalls, Calls: []adapters.ToolCall{{ID: "call_00_ioIn7yN9p1ZOMNpDLwd4MgAF", Name: "weather"}}},
	{Dir: "deepseek", Name: "parallel-tools", Adapter: deepSeekAd, Model: "deepseek-v4-flash",
		Usage:  adapters.Usage{Present: true, InputTokens: 412, OutputTokens: 97, CachedTokens: 384, ReasoningTokens: 44},
		Finish: adapters.FinishToolCalls,
		Calls:  []adapters.ToolCall{{ID: "call_00_mZGagcs09JjCniu4IpalMdlM", Name: "get_weather"}, {ID: "call_01_BkHb2Q3UzGZIX5OX85BBQUIg", Name: "get_weather"}}},
	{Dir: "gemini-openai", Name: "text", Adapter: gemOAIAd, Model: "gemini-3-flash-preview",
		Usage: adapters.Usage{Present: true, InputTokens: 9, OutputTokens: 23}, Finish: adapters.FinishStop,
		JSONExtra: `{"extra_content":{"google":{"thought_signature":"EjQKMgG+Pvb7jTIE4vjqfoGPCWFlBXybj9GGeZH0PyF/VwCKWplgsjvPQ0CgKW/C4SIZNBTB4JIilBSFFE19L2lhz82M3IXpmLLhiuoLof58QeerZVLv/Duz73bPyqFWxjk9BTnrReirhPWxcov/cI/NfcPEixWhsSXmYQJIkKhn"}}}`},
	{Dir: "gemini-openai", Name: "parallel-tools", Adapter: gemOAIAd, Model: "gemini-3-flash-preview",
		Usage: adapters.Usage{Present: true, InputTokens: 2114, OutputTokens: 38}, Finish: adapters.FinishToolCalls,
		Calls: []adapters.ToolCall{{ID: "call_291130", Name: "get_weather"}, {ID: "call_995178", Name: "get_weather"}}},
}

func TestGoldenStreams(t *testing.T) { formattest.GoldenStreams(t, goldens) }

func TestGoldenNonStream(t *testing.T) { formattest.GoldenNonStream(t, goldens) }
