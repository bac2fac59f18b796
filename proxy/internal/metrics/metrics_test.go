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
