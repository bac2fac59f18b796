package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// TestModelLabelsBounded: a client picks the model string, so a
// connection's model labels are its first maxModelLabels well-formed model
// names; every other name counts as "other".
func TestModelLabelsBounded(t *testing.T) {
	m := New("test")
	m.RegisterConnections([]string{"a", "b"})
	for i := range 3 * maxModelLabels {
		m.ObserveTokens("a", fmt.Sprintf("model-%d", i), 10, 1, 0, 0)
	}
	m.ObserveTokens("a", "model-0", 5, 0, 0, 0) // a model already labelled keeps its label
	for _, odd := range []string{strings.Repeat("x", maxModelLabelLen+1), "gpt 4o", `a"b`, "", "é"} {
		m.ObserveTokens("b", odd, 1, 0, 0, 0)
	}
	m.ObserveTokens("b", "models/gemini-2.5-flash", 1, 0, 0, 0)
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]map[string]float64{} // connection → model → input tokens
	for _, f := range families {
		if f.GetName() != "chronicle_tokens_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range s.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["kind"] != "input" {
				continue
			}
			if models[l["connection"]] == nil {
				models[l["connection"]] = map[string]float64{}
			}
			models[l["connection"]][l["model"]] = s.GetCounter().GetValue()
		}
	}
	if n := len(models["a"]); n != maxModelLabels+1 {
		t.Errorf("connection a has %d model labels, want %d and other", n, maxModelLabels)
	}
	if models["a"]["model-0"] != 15 || models["a"]["other"] != float64(10*2*maxModelLabels) {
		t.Errorf("connection a: model-0 %v, other %v", models["a"]["model-0"], models["a"]["other"])
	}
	if len(models["b"]) != 2 || models["b"]["other"] != 5 || models["b"]["models/gemini-2.5-flash"] != 1 {
		t.Errorf("connection b: %v", models["b"])
	}
}

// TestMetricsHotPathAllocs: recording a request, its tokens, a store call,
// a rejection, a stream and an upstream head allocates nothing once the
// series exist (they are resolved, not looked up by label values).
func TestMetricsHotPathAllocs(t *testing.T) {
	m := New("test")
	m.RegisterConnections([]string{"openai"})
	start := time.Now()
	deadline := start.Add(time.Minute)
	down := errors.New("down")
	record := func() {
		m.ObserveRequest("openai", "stream", 200, time.Millisecond)
		m.ObserveRequest("", "api", 404, time.Millisecond)
		m.ObserveTokens("openai", "gpt-4o", 10, 5, 2, 1)
		m.ObserveGenAI(GenAI{Connection: "openai", Operation: "chat", Provider: "openai", Model: "gpt-4o",
			Duration: time.Second, FirstToken: time.Millisecond, Usage: true, InputTokens: 10, OutputTokens: 5})
		m.ObserveGenAI(GenAI{Connection: "openai", Operation: "chat", Provider: "openai", Model: "gpt-4o",
			Duration: time.Second, ErrorType: "502"})
		m.observeStore("finish", start, nil)
		m.observeStore("start_run", start, down)
		m.Rejected("openai", "queue_full")
		m.StreamOpened("openai")
		m.StreamClosed("openai")
		m.ObserveTTFB("openai", time.Minute, deadline)
		m.Runs(store.Completed)
	}
	record() // first use of the request and model series
	if n := testing.AllocsPerRun(200, record); n != 0 {
		t.Fatalf("the metrics hot path allocates %.1f times per request", n)
	}
}

// TestGenAISeries: ObserveGenAI's arithmetic and rules, with exact values:
// time per output token is the time after the first event over the output
// tokens less one; a failure records its duration under its error type and
// no time to first token; a model past the cap counts as "other".
func TestGenAISeries(t *testing.T) {
	m := New("test")
	m.RegisterConnections([]string{"c"})
	g := GenAI{Connection: "c", Operation: "chat", Provider: "openai", Model: "gpt-4o",
		Duration: 2 * time.Second, FirstToken: 500 * time.Millisecond, Usage: true, InputTokens: 10, OutputTokens: 4}
	m.ObserveGenAI(g)
	failed := g
	failed.ErrorType, failed.FirstToken = "stream_truncated", 0
	m.ObserveGenAI(failed)
	whole := g
	whole.FirstToken = 0 // not streamed: no time to first token, none per output token
	m.ObserveGenAI(whole)
	m.ObserveGenAI(GenAI{Connection: "c", Operation: "", Model: "gpt-4o", Duration: time.Second}) // no generation
	for i := range maxModelLabels {
		m.ObserveTokens("c", fmt.Sprintf("m-%d", i), 1, 0, 0, 0)
	}
	late := g
	late.Model = "late-model"
	m.ObserveGenAI(late)

	type hist struct {
		count uint64
		sum   float64
	}
	got := map[string]hist{}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "gen_ai_") {
			continue
		}
		for _, s := range f.GetMetric() {
			key := f.GetName() // and the labels below, in name order
			for _, lp := range s.GetLabel() {
				switch lp.GetName() {
				case labelModel, labelTokenType, labelErrorType:
					key += "," + lp.GetValue()
				}
			}
			got[key] = hist{s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()}
		}
	}
	want := map[string]hist{
		"gen_ai_client_token_usage,gpt-4o,input":                         {3, 30},
		"gen_ai_client_token_usage,gpt-4o,output":                        {3, 12},
		"gen_ai_server_request_duration_seconds,,gpt-4o":                 {2, 4},
		"gen_ai_server_request_duration_seconds,stream_truncated,gpt-4o": {1, 2},
		"gen_ai_server_time_to_first_token_seconds,gpt-4o":               {1, 0.5},
		"gen_ai_server_time_per_output_token_seconds,gpt-4o":             {1, 0.5},
		"gen_ai_client_token_usage,other,input":                          {1, 10},
		"gen_ai_client_token_usage,other,output":                         {1, 4},
		"gen_ai_server_request_duration_seconds,,other":                  {1, 2},
		"gen_ai_server_time_to_first_token_seconds,other":                {1, 0.5},
		"gen_ai_server_time_per_output_token_seconds,other":              {1, 0.5},
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s: %+v", k, got[k])
		}
	}
}
