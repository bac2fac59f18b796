// Package repair owns the pure functions that make a saved conversation
// history valid to send to a provider. They do no I/O, keep no state and
// are safe for concurrent use.
//
// Each function takes the raw JSON array of one wire format — OpenAIChat
// an OpenAI chat `messages` array (also DeepSeek and other
// OpenAI-compatible endpoints), Gemini a Gemini native `contents` array,
// Responses an OpenAI Responses `input` item array — and returns the array to send, the edits made, and the calls that were
// answered because they never returned. The same input always gives the
// same bytes out, and repairing a repaired history changes nothing, byte
// for byte. A message that needs no edit keeps its exact bytes (unknown
// fields and whitespace inside it); a changed message is edited with sjson,
// so its other fields survive too. A history with no defect is returned as
// the input slice itself, with Changed false, after one validation pass and
// one scan that allocate nothing. Input that is not a JSON array gives
// ErrNotArray. The input must not be modified during the call; the
// returned Messages may be the input itself, and no returned string
// aliases it.
//
// # Terms
//
// A call turn is an assistant message with tool_calls (OpenAI); a run of
// consecutive model contents with at least one functionCall part (Gemini;
// @google/genai's Chat keeps one model content per streamed chunk, and a
// content dropped as empty does not break a run); a run of consecutive
// function_call items, reasoning items among them included (Responses). A
// result is a `tool` message, a functionResponse part or a
// function_call_output item. A turn's block is, for OpenAI and Responses,
// the run of results right after the turn; for Gemini, the content right
// after the turn when it is a non-model content with at least one
// functionResponse part. A Responses call is matched by call_id. A valid history answers every call of
// a turn exactly once inside its block, uses every call id once, and has
// no empty assistant message; results inside a block may come in any
// order.
//
// # Matching
//
// OpenAI results match calls by tool_call_id. A Gemini functionResponse
// with a non-empty `id` matches the functionCall with that id; one
// without an id matches a call without an id by name, in order. Each
// result, in history order, is given to the latest turn before it that
// has an unanswered matching call (the first such call in that turn); if
// none, to the earliest turn after it that has one; if none, it is an
// orphan. Results are matched before ids are renamed.
//
// # Rules (each item is one edit, of the kind named)
//
//   - dropped_empty: an assistant message with no tool calls whose content
//     is null, "", [] or absent (and no refusal, function_call or audio)
//     is dropped (Responses: an assistant message item with such a
//     content); for Gemini, a model content with no parts or only parts
//     that hold an empty text (with at most `thought` and
//     `thoughtSignature` beside it). CallID is "".
//   - renamed_id: the second and later calls that reuse a call id get
//     id_2, id_3, …, the first suffix not used by any call or result in
//     the history; the call's result is renamed with it. CallID is the
//     new id. Gemini calls without an id are never renamed.
//   - moved_result: a result outside its call's block is moved into it.
//   - synthetic_result: a call with no result gets one under its id.
//   - orphan_result: a result with no call (or a second result for an
//     already answered call) becomes a note in the user's voice that names
//     the call and carries the result's content.
//
// A block is written as: the results already in it, in their order; then
// for each other call of the turn, in call order, its moved result or a
// synthetic one. OpenAI orphan notes found inside a block follow it; other
// orphans stay where they were. For Gemini an orphan part becomes a text
// part in place, a content left with no parts after its results moved out
// is dropped (no extra edit), and a turn with no block gets a new
// {"role":"user","parts":[…]} content right after it.
//
// # Wordings
//
// A synthetic result for a tool named in Options.ReadOnlyTools says
//
//	The call to NAME was interrupted before it returned; it changed nothing and is safe to call again.
//
// and for any other tool
//
//	The call to NAME was interrupted before it returned; it may have partly run, so check its effect before calling it again.
//
// For OpenAI it is {"role":"tool","tool_call_id":ID,"content":TEXT}; for
// Gemini {"functionResponse":{"id":ID,"name":NAME,"response":{"error":TEXT}}}
// ("id" only when the call has one); for Responses
// {"type":"function_call_output","call_id":ID,"output":TEXT}.
//
// An orphan note starts with
//
//	Result of tool call REF, whose call is missing from this conversation:
//
// where REF is the call id (for a Gemini result without an id, its
// function name). For OpenAI the note is {"role":"user","content":…}:
// a string content is appended after a newline; an array content keeps
// its parts after a first text part holding the line above; a null or
// absent content leaves the line alone. For Gemini it is the part
// {"text":…} with the compacted JSON of functionResponse.response after a
// newline. For Responses it is
// {"type":"message","role":"user","content":[{"type":"input_text","text":…},…]},
// following the OpenAI rules for a string or array output.
package repair
