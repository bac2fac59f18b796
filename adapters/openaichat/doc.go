// Package openaichat is the OpenAI chat completions wire format (POST
// …/chat/completions) and its dialects: OpenAI itself, DeepSeek, Gemini's
// OpenAI-compatible endpoint and other OpenAI-compatible servers, which
// are configurations (Dialect) of one schema, not formats of their own.
//
// It owns the format whole: reading and editing a request's messages
// array (chat.go), assembling a streamed or non-streamed answer into the
// assistant message a client appends to its history (chat.go, stream.go),
// restoring the reasoning_content and thought signatures a client dropped
// (restore.go), the repair rules of a messages array and its skims
// (repair.go), and chronicle's errors in OpenAI's envelope. The proxy
// reaches it through Wire, which adapters/formats registers.
package openaichat
