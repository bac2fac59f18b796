// Command mockllm runs the strict mock LLM upstream of package mock as a
// separate process, for demos and for tests that drive a separate binary.
// It prints its base URL and stops on SIGINT or SIGTERM. The flavours, knobs
// and rules are described in cmd/mockllm/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9999", "address to listen on")
	maxRecorded := flag.Int("max-recorded", 10000, "requests kept in the log (0 = all)")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), `usage: mockllm [-listen ADDR] [-max-recorded N]

Strict mock LLM upstream. Provider paths:
  POST /v1/chat/completions, /chat/completions     OpenAI chat (DeepSeek, Gemini by model)
  POST /v1beta/openai/chat/completions             Gemini OpenAI-compatible
  POST /v1beta/models/{model}:generateContent      Gemini native (:streamGenerateContent?alt=sse)
  POST /v1/responses, /responses                   OpenAI Responses
  POST /v1/messages, /v1/messages/count_tokens     Anthropic Messages (x-api-key or Bearer, anthropic-version)
  GET  /v1/models, /v1/models/{id}                 Anthropic models
Control: GET /_mock/requests, GET /_mock/stats, POST /_mock/reset, POST /_mock/release?gate=NAME
Knobs: X-Mock-* request headers (see cmd/mockllm/README.md).

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()

	s, err := mock.Start(*listen, mock.Options{MaxRecorded: *maxRecorded})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
	fmt.Println(s.URL())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
}
