// Package repair owns the shared skeleton that makes a saved conversation
// history valid to send to a provider, written once for every wire format:
// the definition of a valid history (the check), the matching of results
// to calls, the four rules and the order they write a block in, renamed
// ids, the wordings, the edit list, the options, and skims. A format plugs
// in its reading of one element (Rules) and how its elements are edited
// and written (FlatRules or NestedRules); the formats' rules live in their
// packages (adapters/openaichat, adapters/gemini, adapters/responses).
// Repair does no I/O, keeps no state and is safe for concurrent use.
//
// Flat and Nested take the raw JSON array of one wire format and return
// the array to send, the edits made, and the calls that were answered
// because they never returned. The same input always gives the same bytes
// out, and repairing a repaired history changes nothing, byte for byte. A
// message that needs no edit keeps its exact bytes (unknown fields and
// whitespace inside it); a changed message is edited with sjson, so its
// other fields survive too. A history with no defect is returned as the
// input slice itself, with Changed false, after one validation pass and
// one scan that allocate nothing. Input that is not a JSON array gives
// ErrNotArray. The input must not be modified during the call; the
// returned Messages may be the input itself, and no returned string
// aliases it.
//
// # Terms
//
// A format's Scan gives each element a Role. A call turn is a RoleTurn
// element (an OpenAI chat assistant message with tool_calls), or a run of
// consecutive RoleTurnPart elements (Responses function_call and reasoning
// items; Gemini model contents — @google/genai's Chat keeps one model
// content per streamed chunk, and a content dropped as empty does not
// break a run). A result is an element of its own in a flat format (a
// RoleResult element: an OpenAI tool message, a Responses
// function_call_output item) and a part of a RoleBlock element in a nested
// one (a Gemini functionResponse part). A turn's block is, in a flat
// format, the run of results right after the turn; in a nested format,
// the element right after the turn when it is a RoleBlock element with at
// least one result. A valid history answers every call of a turn exactly
// once inside its block, uses every call id once, and has no empty
// assistant message; results inside a block may come in any order.
//
// # Matching
//
// A result with an id matches the call with that id (OpenAI tool_call_id,
// Responses call_id, a Gemini functionResponse with a non-empty id); one
// without an id matches a call without an id by name, in order. Each
// result, in history order, is given to the latest turn before it that has
// an unanswered matching call (the first such call in that turn); if
// none, to the earliest turn after it that has one; if none, it is an
// orphan. Results are matched before ids are renamed.
//
// # Rules (each item is one edit, of the kind named)
//
//   - dropped_empty: an element the format's Scan reports Empty is dropped
//     (an assistant message with no tool calls whose content is null, "",
//     [] or absent and that has no refusal, function_call or audio; a
//     Gemini model content with no parts or only parts that hold an empty
//     text, with at most thought and thoughtSignature beside it). CallID
//     is "".
//   - renamed_id: the second and later calls that reuse a call id get
//     id_2, id_3, …, the first suffix not used by any call or result in
//     the history; the call's result is renamed with it. CallID is the
//     new id. Calls without an id are never renamed.
//   - moved_result: a result outside its call's block is moved into it.
//   - synthetic_result: a call with no result gets one under its id.
//   - orphan_result: a result with no call (or a second result for an
//     already answered call) becomes a note in the user's voice that names
//     the call and carries the result's content.
//
// A block is written as: the results already in it, in their order; then
// for each other call of the turn, in call order, its moved result or a
// synthetic one. In a flat format, orphan notes found inside a block
// follow it and other orphans stay where they were. In a nested format an
// orphan part becomes a note part in place, an element left with no parts
// after its results moved out is dropped (no extra edit), and a turn with
// no block gets a new block element right after it.
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
// An orphan note starts with
//
//	Result of tool call REF, whose call is missing from this conversation:
//
// where REF is the call id (for a result without an id, its function
// name). Each format writes them in its own shape: see its AppendSynthetic
// and AppendOrphan.
package repair
