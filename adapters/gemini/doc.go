// Package gemini is the Gemini native wire format (generateContent,
// streamGenerateContent with and without alt=sse).
//
// It owns the format whole: reading and editing a request's contents and
// systemInstruction (gemini.go), assembling a streamed (SSE or JSON
// array) or non-streamed answer into the model content a client appends
// to its history (gemini.go, stream.go), restoring the thought signatures
// a client dropped (restore.go), the repair rules of a contents array and
// its skims (repair.go), and chronicle's errors in Google's envelope. The
// proxy reaches it through Wire, which adapters/formats registers.
package gemini
