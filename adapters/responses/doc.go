// Package responses is the OpenAI Responses wire format (POST
// …/responses) and servers speaking it, such as the ChatGPT/Codex backend
// (its dialects). Its "messages" are the items of a request's input
// array, and an assembled turn is the array of output items a client
// appends to its next input.
//
// It owns the format whole: reading and editing a request's input
// (responses.go), assembling a streamed or non-streamed answer
// (responses.go, stream.go), restoring the reasoning items and encrypted
// content a client dropped (restore.go), expanding previous_response_id
// for an upstream that keeps no state, the repair rules of an input array
// and its skims (repair.go), and chronicle's errors (OpenAI's envelope,
// and the Responses stream's error event). The proxy reaches it through
// Wire, which adapters/formats registers.
package responses
