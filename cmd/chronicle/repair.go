package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/formats"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/tidwall/gjson"
)

const repairUsage = `usage: chronicle repair [--format openai|gemini|responses|anthropic] [--read-only-tools a,b] [--json] < history.json

Reads a history (a messages, contents or input array, or a whole request
body) from stdin and prints it repaired, with the calls that never returned
and the edits made.
`

// repairFormats are the wire formats --format names.
var repairFormats = map[string]adapters.Format{
	"openai":    adapters.FormatOpenAIChat,
	"deepseek":  adapters.FormatOpenAIChat,
	"gemini":    adapters.FormatGemini,
	"responses": adapters.FormatOpenAIResponses,
	"anthropic": adapters.FormatAnthropic,
}

// repairCmd reads a history from stdin — a bare messages/contents/input
// array, or a whole request body holding one — and prints the repaired
// array, then the calls that never returned and the edits, for operators.
func repairCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("repair", flag.ContinueOnError)
	format := fs.String("format", "openai", "history format: openai (chat messages, also DeepSeek), gemini (contents), responses (input items) or anthropic (Messages)")
	readOnly := fs.String("read-only-tools", "", "comma-separated tools that change nothing (their interrupted calls are safe to repeat)")
	asJSON := fs.Bool("json", false, "print one JSON object {messages, interrupted, edits} instead of text")
	if code, done := parseFlags(fs, repairUsage, stdout, stderr, func() error { return fs.Parse(args) }); done {
		return code
	}
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle repair: reading stdin: %v\n", err)
		return 1
	}
	history := bytes.TrimSpace(in)
	if len(history) > 0 && history[0] == '{' {
		// A whole request body: take its history array.
		for _, key := range []string{"messages", "contents", "input"} {
			if r := gjson.GetBytes(history, key); r.IsArray() {
				history = []byte(r.Raw)
				break
			}
		}
	}
	opts := repair.Options{}
	if *readOnly != "" {
		opts.ReadOnlyTools = strings.Split(*readOnly, ",")
	}
	f, ok := repairFormats[*format]
	if !ok {
		fmt.Fprintf(stderr, "chronicle repair: --format: want openai, gemini, responses or anthropic, got %q\n", *format)
		return 2
	}
	res, err := formats.ForThread(f).Repair(history, opts)
	if err != nil {
		fmt.Fprintf(stderr, "chronicle repair: %v\n", err)
		return 1
	}
	if *asJSON {
		type call struct {
			ID   string `json:"call_id"`
			Name string `json:"name"`
		}
		type edit struct {
			Kind   string `json:"kind"`
			CallID string `json:"call_id"`
		}
		out := struct {
			Messages    json.RawMessage `json:"messages"`
			Interrupted []call          `json:"interrupted"`
			Edits       []edit          `json:"edits"`
		}{Messages: res.Messages, Interrupted: []call{}, Edits: []edit{}}
		for _, c := range res.Interrupted {
			out.Interrupted = append(out.Interrupted, call{c.ID, c.Name})
		}
		for _, e := range res.Edits {
			out.Edits = append(out.Edits, edit{e.Kind, e.CallID})
		}
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(out)
		return 0
	}
	stdout.Write(res.Messages)
	fmt.Fprintln(stdout)
	ids := make([]string, len(res.Interrupted))
	for i, c := range res.Interrupted {
		ids[i] = c.ID
	}
	fmt.Fprintf(stderr, "interrupted calls: %s\n", strings.Join(ids, ","))
	fmt.Fprintf(stderr, "edits: %d\n", len(res.Edits))
	for _, e := range res.Edits {
		fmt.Fprintf(stderr, "  %s %s\n", e.Kind, e.CallID)
	}
	return 0
}
