package mock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The synthetic scenario (X-Mock-Scenario: synthetic, X-Mock-Chunks: N)
// streams N small text deltas in the provider's framing, then the finish,
// usage and terminal marker. The repeated event is a constant built once, so
// the mock stays cheap under a load benchmark.

const synthToken = "tok "

// synthEvents is head, then n middle events, then tail. When midPre is set
// the middle events carry a sequence number (Responses): midPre + seq + midSuf.
type synthEvents struct {
	head           [][]byte
	mid            []byte
	midPre, midSuf []byte
	seqBase        int
	n              int
	tail           [][]byte
}

func (s *synthEvents) Len() int { return len(s.head) + s.n + len(s.tail) }

func (s *synthEvents) Event(i int, buf []byte) []byte {
	if i < len(s.head) {
		return s.head[i]
	}
	i -= len(s.head)
	if i < s.n {
		if s.midPre == nil {
			return s.mid
		}
		buf = append(buf, s.midPre...)
		buf = strconv.AppendInt(buf, int64(s.seqBase+i), 10)
		return append(buf, s.midSuf...)
	}
	return s.tail[i-s.n]
}

const (
	oaEnv  = `{"id":"chatcmpl-mocksynthetic","object":"chat.completion.chunk","created":1770000000,"model":"mock-synthetic","system_fingerprint":"fp_mock","choices":[`
	dsEnv  = `{"id":"mock-synthetic","object":"chat.completion.chunk","created":1770000000,"model":"deepseek-chat","system_fingerprint":"fp_mock","choices":[`
	goaEnd = `],"created":1770000000,"id":"mocksynthetic","model":"gemini-mock-synthetic","object":"chat.completion.chunk"`
	gemEnd = `"modelVersion": "mock-synthetic","responseId": "mocksynthetic"}`
	respID = `"item_id":"msg_mocksynthetic","output_index":0,"content_index":0`
)

var (
	synOAHead  = []byte("data: " + oaEnv + `{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	synOAMid   = []byte("data: " + oaEnv + `{"index":0,"delta":{"content":"` + synthToken + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	synOAStop  = []byte("data: " + oaEnv + `{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n")
	synDSHead  = []byte("data: " + dsEnv + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	synDSMid   = []byte("data: " + dsEnv + `{"index":0,"delta":{"content":"` + synthToken + `"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	synGOAMid  = []byte(`data: {"choices":[{"delta":{"content":"` + synthToken + `","role":"assistant"},"index":0}` + goaEnd + "}\n\n")
	synGemMid  = `{"candidates": [{"content": {"parts": [{"text": "` + synthToken + `"}],"role": "model"},"index": 0}],` + gemEnd
	synGemSSE  = []byte("data: " + synGemMid + "\r\n\r\n")
	synGemArr0 = []byte("[" + indentJSON(synGemMid))
	synGemArr  = []byte("\n,\r\n" + indentJSON(synGemMid))
	synRespPre = []byte(`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":`)
	synRespSuf = []byte(`,` + respID + `,"delta":"` + synthToken + `","logprobs":[]}` + "\n\n")
)

func indentJSON(s string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(s), "", "  "); err != nil {
		panic("mock: synthetic JSON: " + err.Error())
	}
	return buf.String()
}

const synPrompt = 8

// synthetic returns the stream of the synthetic scenario for a provider.
func synthetic(p provider, n int, includeUsage, altSSE bool) eventSource {
	switch p {
	case provOpenAI:
		tail := [][]byte{synOAStop}
		if includeUsage {
			tail = append(tail, fmt.Appendf(nil, "data: %s],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
				oaEnv, synPrompt, n, n+synPrompt))
		}
		return &synthEvents{head: [][]byte{synOAHead}, mid: synOAMid, n: n, tail: append(tail, doneEventBytes)}
	case provDeepSeek:
		stop := fmt.Appendf(nil, "data: %s{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,\"prompt_cache_hit_tokens\":0,\"prompt_cache_miss_tokens\":%d}}\n\n",
			dsEnv, synPrompt, n, n+synPrompt, synPrompt)
		return &synthEvents{head: [][]byte{synDSHead}, mid: synDSMid, n: n, tail: [][]byte{stop, doneEventBytes}}
	case provGeminiOpenAI:
		stop := fmt.Appendf(nil, "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},\"finish_reason\":\"stop\",\"index\":0}%s,\"usage\":{\"completion_tokens\":%d,\"prompt_tokens\":%d,\"total_tokens\":%d}}\n\n",
			goaEnd, n, synPrompt, n+synPrompt)
		return &synthEvents{mid: synGOAMid, n: n, tail: [][]byte{stop, doneEventBytes}}
	case provGemini:
		last := fmt.Sprintf(`{"candidates": [{"content": {"parts": [{"text": ""}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": %d,"candidatesTokenCount": %d,"totalTokenCount": %d},`+gemEnd,
			synPrompt, n, n+synPrompt)
		if altSSE {
			return &synthEvents{mid: synGemSSE, n: n, tail: [][]byte{[]byte("data: " + last + "\r\n\r\n")}}
		}
		if n == 0 {
			return &synthEvents{tail: [][]byte{[]byte("[" + indentJSON(last) + "\n]")}}
		}
		return &synthEvents{head: [][]byte{synGemArr0}, mid: synGemArr, n: n - 1, tail: [][]byte{[]byte("\n,\r\n" + indentJSON(last) + "\n]")}}
	default:
		return synthResponses(n)
	}
}

func respEvent(typ, data string) []byte {
	return []byte("event: " + typ + "\ndata: " + data + "\n\n")
}

// synthResponses builds the Responses event sequence around n text deltas.
func synthResponses(n int) eventSource {
	text := strings.Repeat(synthToken, n)
	resp := func(status, output, usage string) string {
		return `{"id":"resp_mocksynthetic","object":"response","created_at":1770000000,"status":"` + status +
			`","model":"mock-synthetic","output":[` + output + `],"usage":` + usage + `}`
	}
	msg := func(status, content string) string {
		return `{"id":"msg_mocksynthetic","type":"message","status":"` + status + `","content":[` + content + `],"role":"assistant"}`
	}
	part := `{"type":"output_text","annotations":[],"logprobs":[],"text":"` + text + `"}`
	usage := fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}`, synPrompt, n, n+synPrompt)
	seq := func(i int) string { return strconv.Itoa(i) }
	t := n + 4
	return &synthEvents{
		head: [][]byte{
			respEvent("response.created", `{"type":"response.created","sequence_number":0,"response":`+resp("in_progress", "", "null")+`}`),
			respEvent("response.in_progress", `{"type":"response.in_progress","sequence_number":1,"response":`+resp("in_progress", "", "null")+`}`),
			respEvent("response.output_item.added", `{"type":"response.output_item.added","sequence_number":2,"output_index":0,"item":`+msg("in_progress", "")+`}`),
			respEvent("response.content_part.added", `{"type":"response.content_part.added","sequence_number":3,`+respID+`,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":""}}`),
		},
		midPre: synRespPre, midSuf: synRespSuf, seqBase: 4, n: n,
		tail: [][]byte{
			respEvent("response.output_text.done", `{"type":"response.output_text.done","sequence_number":`+seq(t)+`,`+respID+`,"text":"`+text+`","logprobs":[]}`),
			respEvent("response.content_part.done", `{"type":"response.content_part.done","sequence_number":`+seq(t+1)+`,`+respID+`,"part":`+part+`}`),
			respEvent("response.output_item.done", `{"type":"response.output_item.done","sequence_number":`+seq(t+2)+`,"output_index":0,"item":`+msg("completed", part)+`}`),
			respEvent("response.completed", `{"type":"response.completed","sequence_number":`+seq(t+3)+`,"response":`+resp("completed", msg("completed", part), usage)+`}`),
		},
	}
}

// syntheticJSON is the non-stream body of the synthetic scenario.
func syntheticJSON(p provider, n int) []byte {
	text := strings.Repeat(synthToken, n)
	switch p {
	case provOpenAI, provDeepSeek:
		return fmt.Appendf(nil, `{"id":"chatcmpl-mocksynthetic","object":"chat.completion","created":1770000000,"model":"mock-synthetic","choices":[{"index":0,"message":{"role":"assistant","content":"%s","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n",
			text, synPrompt, n, n+synPrompt)
	case provGeminiOpenAI:
		return fmt.Appendf(nil, `{"choices":[{"finish_reason":"stop","index":0,"message":{"content":"%s","role":"assistant"}}],"created":1770000000,"id":"mocksynthetic","model":"gemini-mock-synthetic","object":"chat.completion","usage":{"completion_tokens":%d,"prompt_tokens":%d,"total_tokens":%d}}`+"\n",
			text, n, synPrompt, n+synPrompt)
	case provGemini:
		return []byte(indentJSON(fmt.Sprintf(`{"candidates": [{"content": {"parts": [{"text": "%s"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": %d,"candidatesTokenCount": %d,"totalTokenCount": %d},`+gemEnd,
			text, synPrompt, n, n+synPrompt)) + "\n")
	default:
		part := `{"type":"output_text","annotations":[],"logprobs":[],"text":"` + text + `"}`
		return fmt.Appendf(nil, `{"id":"resp_mocksynthetic","object":"response","created_at":1770000000,"status":"completed","model":"mock-synthetic","output":[{"id":"msg_mocksynthetic","type":"message","status":"completed","content":[%s],"role":"assistant"}],"usage":{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}}`+"\n",
			part, synPrompt, n, n+synPrompt)
	}
}
