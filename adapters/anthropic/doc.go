// Package anthropic is the Anthropic Messages wire format (POST
// /v1/messages, stream and non-stream).
//
// It owns the format whole: reading and editing a request's messages and
// its top-level system (anthropic.go), assembling a streamed or
// non-streamed answer into the assistant message a client appends to its
// history, with its signed thinking, redacted_thinking and tool_use blocks
// (stream.go), putting back the thinking blocks a client dropped, emptied
// or re-serialised (restore.go), the repair rules of a messages array and
// its skims (repair.go), where a pool key goes (x-api-key, or Bearer for
// the 2026-10-21 API), and chronicle's errors in Anthropic's envelope. The
// proxy reaches it through Wire, which adapters/formats registers.
//
// Anthropic has no session or cache-key field: its prompt cache matches by
// prefix, so chronicle keeps the prefix byte-identical and injects nothing
// into the body (a connection's session headers still apply).
package anthropic
