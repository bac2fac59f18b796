// Package adapters is the contract every provider wire format meets, and
// what the formats share. Each format is a package of its own (openaichat:
// OpenAI chat completions and its dialects — DeepSeek, Gemini's
// OpenAI-compatible endpoint and other OpenAI-compatible servers; gemini:
// Gemini native; responses: OpenAI Responses), and adapters/formats is the
// lookup the proxy picks one with. This package owns the types they speak
// in (Format, Op, Turn, Usage, Message, Assembler, Prepare, Upstream, …),
// the Adapter interface, made of one small interface per concern, and the
// shared helpers: message hashing, known-prefix matching of a history the
// proxy keeps, the walk over a messages array, Gemini's JSON-array stream
// reader, restoration and request helpers; the raw-JSON helpers are in
// adapters/rawjson, validation in adapters/jsonscan, SSE in adapters/sse.
//
// Bodies are read with gjson and edited with sjson on the raw bytes; nothing
// is unmarshalled and re-marshalled, so untouched bytes and unknown fields
// survive exactly. The package knows nothing about storage or HTTP servers.
//
// # A new wire format
//
// A format is one package under adapters that imports adapters and repair
// (never the other way round) and provides:
//
//   - an Adapter implementation: reading and editing the request
//     (RequestReader), the session id and usage options sent upstream
//     (UpstreamShaper), a streaming Assembler and ParseResponse
//     (AnswerAssembler), Restore, and Repair, Skim and ValidSkimsAt through
//     package repair (HistoryKeeper), and its errors (ErrorShaper);
//     Chainer too if its requests can chain on a stored answer;
//   - its repair rules: a repair.Rules Scan giving each element of a
//     history its role, calls and results, and the repair.FlatRules or
//     repair.NestedRules edits, handed to repair.Flat or repair.Nested;
//   - one exported value, Wire (its Format, and New building the adapter
//     of a dialect with a connection's session headers), registered in
//     adapters/formats with the providers and paths that speak it;
//   - its tests, goldens and fuzz targets, on adapters/internal/formattest.
//
// A new Format value is a new stored format name; existing ones never
// change.
package adapters

import (
	"errors"

	"github.com/chronicle-proxy/chronicle/repair"
)

// Sentinel errors returned (wrapped) by this package.
var (
	// ErrInvalidJSON means a body or message is not valid JSON.
	ErrInvalidJSON = errors.New("adapters: invalid JSON")
	// ErrNoMessages means a request body has no messages/contents array.
	ErrNoMessages = errors.New("adapters: no messages array")
	// ErrNoAnswer means a non-stream response has no choice/candidate.
	ErrNoAnswer = errors.New("adapters: response has no answer")
)

// Format names a wire format; it is what a stored thread's "format" says.
type Format string

// The wire formats.
const (
	FormatOpenAIChat      Format = "openai-chat"
	FormatGemini          Format = "gemini"
	FormatOpenAIResponses Format = "openai-responses"
	FormatAnthropic       Format = "anthropic-messages"
)

// OpKind says what a request is.
type OpKind uint8

const (
	// OpPassThrough is any request chronicle forwards without persisting
	// (/v1/models, /v1/embeddings, countTokens, …).
	OpPassThrough OpKind = iota
	// OpGenerate is a conversation turn: chat completions, generateContent,
	// responses.
	OpGenerate
)

// Framing says how a response body is framed.
type Framing uint8

const (
	// FramingJSON is one JSON body (a non-stream answer).
	FramingJSON Framing = iota
	// FramingSSE is a text/event-stream body; read it with adapters/sse.
	FramingSSE
	// FramingJSONArray is Gemini's streamGenerateContent without alt=sse:
	// one JSON array whose elements arrive over time; read it with
	// ArrayReader.
	FramingJSONArray
)

// Op is what Classify learns about a request.
type Op struct {
	Kind    OpKind
	Stream  bool
	Framing Framing
	// Model is the model the request names ("" when it names none).
	Model string
}

// Usage is the token accounting of one turn, in chronicle's terms.
type Usage struct {
	// Present is false when the provider reported no usage.
	Present bool
	// InputTokens counts prompt tokens, cached ones included.
	InputTokens int64
	// OutputTokens counts generated tokens, reasoning/thought tokens
	// included (Gemini: candidatesTokenCount + thoughtsTokenCount).
	OutputTokens int64
	// CachedTokens counts prompt tokens served from a cache.
	CachedTokens int64
	// ReasoningTokens counts reasoning/thought tokens (also in OutputTokens).
	ReasoningTokens int64
}

// FinishReason says how a turn ended.
type FinishReason string

// The finish reasons.
const (
	// FinishNone means no finish reason was seen (a truncated stream).
	FinishNone FinishReason = ""
	// FinishStop is a normal end (text answer).
	FinishStop FinishReason = "stop"
	// FinishToolCalls means the turn ended in tool calls that wait for
	// results. Reported whenever the answer holds tool calls and the
	// provider said "stop" (Gemini and its OpenAI endpoint do).
	FinishToolCalls FinishReason = "tool_calls"
	// FinishLength means the output-token limit cut the answer.
	FinishLength FinishReason = "length"
	// FinishContentFilter means a safety/content filter stopped it.
	FinishContentFilter FinishReason = "content_filter"
	// FinishError means the provider reported an error or an abnormal end
	// (an error object in the stream, MALFORMED_FUNCTION_CALL, OTHER, …).
	FinishError FinishReason = "error"
)

// ToolCall is one tool/function call of an assistant message.
type ToolCall struct {
	// ID is the call id; "" where the format has none (Gemini calls
	// without functionCall.id).
	ID   string
	Name string
}

// ToolResult is one tool/function result of a message.
type ToolResult struct {
	// CallID is the id of the call answered; "" where the format has none.
	CallID string
	// Name is the function name where the format carries it (Gemini
	// functionResponse.name, OpenAI legacy role "function"), else "".
	Name string
}

// Turn is an assembled answer.
type Turn struct {
	// Message is the assistant/model message in the provider's request
	// format: exactly what a client appends to its history. Compact JSON,
	// owned by the caller.
	Message []byte
	Usage   Usage
	Finish  FinishReason
	// FinishRaw is the provider's own finish value ("stop", "MAX_TOKENS").
	FinishRaw string
	// ToolCalls lists the calls in Message, in order.
	ToolCalls []ToolCall
	// Terminal reports that the provider's end marker was seen: "[DONE]"
	// for OpenAI chat, a candidate finishReason for Gemini. A stream
	// without it is truncated and its turn must not land in the thread.
	// Always true for a parsed non-stream body.
	Terminal bool
	// Error is the raw error object when the provider reported one inside
	// the body or stream, else nil.
	Error []byte
	// Model is the model the answer names (gen_ai.response.model): the
	// body's or the first chunk's "model", Gemini's modelVersion,
	// Anthropic's message.model, the Responses response.model; "" when
	// it names none. The upstream chose it, so it is no metric label.
	Model string
}

// Assembler builds a Turn from a stream's payloads.
//
// Feed takes one payload at a time: the Data of each SSE event (including
// "[DONE]"), or each element of a Gemini JSON-array stream. Feed does not
// retain data. Result may be called at any point; Reset makes the assembler
// reusable (pool them). Not safe for concurrent use.
type Assembler interface {
	Feed(data []byte) error
	Result() Turn
	Reset()
	// Done reports that the provider's last event has been fed: "[DONE]"
	// for OpenAI chat, the chunk with a finishReason for Gemini, a
	// terminal response event for Responses. Cheap; call it per event.
	Done() bool
}

// Message is one entry of a messages/contents array, as WalkMessages yields
// it. Its slices are valid only during the callback.
type Message struct {
	// Index is the position in the array.
	Index int
	// Raw is the message's bytes, a slice of the input (no copy).
	Raw []byte
	// Role is the message's role ("user", "assistant", "tool", "model", …).
	Role string
	// Calls are the tool calls the message makes.
	Calls []ToolCall
	// Results are the tool results the message carries.
	Results []ToolResult
	// EmptyText reports that the message has no non-empty text
	// (content null, "", absent, or only empty text parts).
	EmptyText bool
}

// Restored names one field put back into an incoming message.
type Restored struct {
	// Field is the restored field: "reasoning_content",
	// "thought_signature" (Gemini part or OpenAI-compatible extra_content).
	Field string
	// MessageIndex indexes the incoming messages array.
	MessageIndex int
}

// Header is one header edit for the upstream request.
type Header struct {
	Name, Value string
}

// Adapter is what the proxy asks about one wire format: the small
// interfaces below, one per concern, in one value. Implementations are
// immutable and safe for concurrent use.
type Adapter interface {
	// Format names the wire format.
	Format() Format
	RequestReader
	UpstreamShaper
	AnswerAssembler
	HistoryKeeper
	ErrorShaper
}

// RequestReader reads and edits a request body of the format.
type RequestReader interface {
	// Classify says what a request is. path is the upstream path (after
	// the connection segment), query the raw query string.
	Classify(method, path, query string, body []byte) Op
	// Messages returns the raw messages/contents array (a slice of body)
	// and whether the body has one (a valid JSON array).
	Messages(body []byte) ([]byte, bool)
	// MessagesKnown is Messages for a caller that holds the thread's
	// stored messages: the leading elements that repeat known byte for
	// byte are not validated again, and the Prefix says which they are
	// (KnownPrefix of the returned array; zero for a string input).
	MessagesKnown(body []byte, known [][]byte) ([]byte, Prefix, bool)
	// SetMessages returns body with its messages/contents array replaced.
	SetMessages(body, messages []byte) ([]byte, error)
	// System returns Gemini's raw systemInstruction, nil elsewhere.
	System(body []byte) []byte
	// SetSystem sets (or, with nil, deletes) the systemInstruction; a no-op
	// for formats without one.
	SetSystem(body, system []byte) ([]byte, error)
	// WalkMessages calls fn for each message of a messages array, in
	// order, until fn returns false.
	WalkMessages(messages []byte, fn func(Message) bool) error
	// ShapeProblem says what is wrong with a generate request body, valid
	// JSON, in which MessagesKnown found no history: "" when the body is a
	// JSON object without the format's history member (or with it null),
	// which continues the stored thread; otherwise one sentence for the
	// caller, naming the member the format expects. It reads only bodies
	// the fast path refused.
	ShapeProblem(body []byte) string
	// MissingModel is the provider's own refusal of a generate request
	// that names no model (model is ""), where the provider wants one in
	// the body: its status and body, and refused=false when the provider
	// accepts such a request (or model is set).
	MissingModel(model string) (status int, body []byte, refused bool)
}

// UpstreamShaper edits what goes to the upstream and what comes back.
type UpstreamShaper interface {
	// PrepareUpstream injects the session id (when the format uses one)
	// and, for streams, asks for usage. It returns the new body, header
	// edits, the session id the upstream receives ("" if none) and whether
	// chronicle added stream_options.include_usage (then strip every
	// forwarded event with StripAddedUsage).
	PrepareUpstream(body []byte, p Prepare) (Upstream, error)
	// StripAddedUsage removes from one forwarded SSE event what
	// chronicle's include_usage added. See the implementations.
	StripAddedUsage(event []byte) (out []byte, drop bool)
}

// AnswerAssembler reads the provider's answer.
type AnswerAssembler interface {
	// NewAssembler returns an assembler for this format's streams.
	NewAssembler() Assembler
	// ParseResponse assembles a non-stream response body.
	ParseResponse(body []byte) (Turn, error)
	// MessageText returns the visible text of an assembled message (a
	// reply so far, for a run's partial snapshot); reasoning is left out.
	MessageText(msg []byte) string
	// ReplyMessages splits an assembled reply (Turn.Message) into the
	// messages it adds to the thread, each a copy or the reply itself.
	ReplyMessages(reply []byte) [][]byte
}

// HistoryKeeper keeps a thread's history one the provider accepts.
type HistoryKeeper interface {
	// Restore puts back provider fields that incoming messages dropped,
	// taking them from the stored thread's messages; model selects the
	// provider's rule for what is sent back. It returns incoming itself
	// when nothing changed.
	Restore(incoming, stored []byte, model string) ([]byte, []Restored, error)
	// Restorable reports whether a stored message carries a field Restore
	// could put back; Restore changes nothing when no stored message does.
	Restorable(stored []byte) bool
	// Repair makes a messages array valid to send (package repair, with
	// this format's rules).
	Repair(messages []byte, opts repair.Options) (repair.Result, error)
	// Skim is what Repair's check reads of one message, to keep with it.
	Skim(msg []byte) repair.Skim
	// ValidSkimsAt reports whether Repair would leave the history of the
	// n skims at returns, in order, as it is.
	ValidSkimsAt(n int, at func(int) *repair.Skim) bool
}

// ErrorShaper writes chronicle's own errors in the provider's shape.
type ErrorShaper interface {
	// ErrorBody is chronicle's own error in the provider's shape.
	ErrorBody(status int, code, message string) []byte
	// StreamErrorEvent is the SSE event that reports an error after a
	// stream's headers went out.
	StreamErrorEvent(status int, code, message string) []byte
}

// Chainer is an Adapter whose requests may chain on a stored answer by
// its id instead of repeating the history (the Responses API's
// previous_response_id). Formats without such chaining do not implement
// it.
type Chainer interface {
	// ExpandPreviousResponse rewrites a request that chains on a stored
	// answer for an upstream that keeps no state: the reference removed,
	// stored (the JSON array of the chained thread's messages) put before
	// the request's own. A body that chains on nothing is returned as it
	// is.
	ExpandPreviousResponse(body, stored []byte) ([]byte, error)
}

// Headers reads a request's headers (fasthttp's RequestHeader is one).
type Headers interface {
	Peek(name string) []byte
}

// KeyPlacer is an Adapter whose provider takes the API key somewhere
// other than "Authorization: Bearer", the default. Formats sent the key
// as a Bearer token do not implement it.
type KeyPlacer interface {
	// KeyHeader names the header a connection's pool key goes upstream
	// in, and what precedes the key in its value ("Bearer " or ""), for
	// the client's request headers req (some providers' API versions
	// change where the key goes).
	KeyHeader(req Headers) (name, prefix string)
}

// KeyHeader is where a's provider takes a pool key: a's KeyHeader when it
// is a KeyPlacer, else "Authorization: Bearer ".
func KeyHeader(a Adapter, req Headers) (name, prefix string) {
	if kp, ok := a.(KeyPlacer); ok {
		return kp.KeyHeader(req)
	}
	return "Authorization", "Bearer "
}

// Wire is one wire format as its package exports it: the one value the
// lookup (adapters/formats) registers for the format.
type Wire struct {
	// Format names the format.
	Format Format
	// New returns the format's adapter in one of its dialects (the
	// format's configurations for families of servers; "" is its
	// default), with sessionHeaders (a connection's) added to the
	// dialect's own session headers. ok is false for a dialect the format
	// does not have.
	New func(dialect string, sessionHeaders []string) (a Adapter, ok bool)
}

// MissingModel is a.MissingModel(model), for callers that hold an
// Adapter.
func MissingModel(a Adapter, model string) (status int, body []byte, refused bool) {
	return a.MissingModel(model)
}

// Prepare is what PrepareUpstream needs besides the body.
type Prepare struct {
	// SessionID is the thread's session id ("" for none).
	SessionID string
	// Stream: the request streams.
	Stream bool
	// Messages is the body's messages array as a slice of body, or nil.
	// No top-level key lies inside it, so looking for one skips it.
	Messages []byte
	// Buf, when it has the room, is where a new body may be built
	// (appended to Buf[:0]); it must not overlap body. The caller may
	// reuse it once the returned body is no longer needed.
	Buf []byte
	// Splice: the caller can send a body with an insertion
	// (Upstream.Insert), so members may be added to body without copying
	// it. Set for bodies too large to build in Buf.
	Splice bool
}

// Upstream is what PrepareUpstream decided.
type Upstream struct {
	// Body is the body to send; with Insert, before the insertion.
	Body []byte
	// Insert, when not nil, goes into Body at offset At: the body to send
	// is Body[:At], Insert, Body[At:]. Only when Prepare.Splice was set;
	// Bytes joins the three.
	Insert []byte
	At     int
	// Headers are header edits to apply (set, replacing any value).
	Headers []Header
	// SessionID is the session id the upstream receives, "" if none.
	SessionID string
	// AddedUsage reports that chronicle added include_usage.
	AddedUsage bool
}

// Len is the length of the body to send.
func (u Upstream) Len() int { return len(u.Body) + len(u.Insert) }

// Bytes returns the body to send in one slice: Body itself, or a new
// buffer holding Body with Insert in place.
func (u Upstream) Bytes() []byte {
	if u.Insert == nil {
		return u.Body
	}
	out := make([]byte, 0, u.Len())
	return append(append(append(out, u.Body[:u.At]...), u.Insert...), u.Body[u.At:]...)
}
