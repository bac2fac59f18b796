package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters/internal/formattest"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/tidwall/gjson"
)

func repairAnthropic(b []byte, opts repair.Options) (repair.Result, error) { return ad.Repair(b, opts) }

// checkValid is an independent validator of Anthropic messages, written
// with encoding/json: consecutive same-role messages are one turn (the API
// combines them); an assistant turn's tool_use ids are all answered by the
// tool_result blocks that open the next turn; every tool_result answers a
// tool_use of the turn before; ids are unique; no assistant message is
// empty.
func checkValid(b []byte) error {
	type msg struct {
		Role    string
		Content json.RawMessage
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return err
	}
	msgs := make([]msg, len(raws))
	for i, r := range raws {
		var fields map[string]json.RawMessage
		json.Unmarshal(r, &fields) // what does not fit stays zero, as repair sees it
		json.Unmarshal(fields["role"], &msgs[i].Role)
		msgs[i].Content = fields["content"]
	}
	blocksOf := func(c json.RawMessage) []map[string]any {
		var bs []map[string]any
		if json.Unmarshal(c, &bs) != nil {
			var s string
			if json.Unmarshal(c, &s) == nil {
				return []map[string]any{{"type": "text", "text": s}}
			}
		}
		return bs
	}
	type turn struct {
		role   string
		blocks []map[string]any
	}
	var turns []turn
	for i, m := range msgs {
		bs := blocksOf(m.Content)
		if m.Role == "assistant" {
			empty := true
			for _, b := range bs {
				if b["type"] != "thinking" && b["type"] != "redacted_thinking" && !(b["type"] == "text" && b["text"] == "") {
					empty = false
				}
			}
			if empty {
				return fmt.Errorf("message %d: empty assistant message", i)
			}
		}
		if n := len(turns); n > 0 && turns[n-1].role == m.Role {
			turns[n-1].blocks = append(turns[n-1].blocks, bs...)
			continue
		}
		turns = append(turns, turn{m.Role, bs})
	}
	seen := map[string]bool{}
	for ti, t := range turns {
		var calls []string
		for _, b := range t.blocks {
			if b["type"] == "tool_use" {
				id, _ := b["id"].(string)
				if seen[id] {
					return fmt.Errorf("turn %d: tool_use id %s reused", ti, id)
				}
				seen[id] = true
				calls = append(calls, id)
			}
		}
		if t.role != "assistant" {
			continue
		}
		answered := map[string]bool{}
		if ti+1 < len(turns) {
			for _, b := range turns[ti+1].blocks {
				if b["type"] != "tool_result" {
					break
				}
				id, _ := b["tool_use_id"].(string)
				answered[id] = true
			}
		}
		for _, c := range calls {
			if !answered[c] {
				return fmt.Errorf("turn %d: tool_use %s unanswered", ti, c)
			}
		}
	}
	for ti, t := range turns {
		prev := map[string]bool{}
		if ti > 0 {
			for _, b := range turns[ti-1].blocks {
				if b["type"] == "tool_use" {
					id, _ := b["id"].(string)
					prev[id] = true
				}
			}
		}
		for _, b := range t.blocks {
			if id, _ := b["tool_use_id"].(string); b["type"] == "tool_result" && !prev[id] {
				return fmt.Errorf("turn %d: tool_result %v without its tool_use", ti, b["tool_use_id"])
			}
		}
	}
	return nil
}

func TestRepairGolden(t *testing.T) {
	formattest.RepairGolden(t, "repair", repairAnthropic, checkValid)
}

func TestRepairNotArray(t *testing.T) { formattest.NotArray(t, "anthropic", repairAnthropic) }

func TestRepairNoDefectReturnsInput(t *testing.T) {
	formattest.NoDefectReturnsInput(t, "repair", repairAnthropic)
}

// TestMockUpstream: each golden history is refused raw by the strict mock
// (as Anthropic refuses it) and accepted repaired.
func TestMockUpstream(t *testing.T) {
	formattest.MockUpstream(t, "repair", repairAnthropic, func(base string, c *formattest.Case, history []byte) *http.Request {
		req, err := http.NewRequest("POST", base+"/v1/messages", bytes.NewReader(formattest.MockBody(t, c, "messages", history, true)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-api-key", "x")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("X-Mock-Scenario", "synthetic")
		return req
	})
}

func TestSkimsAgreeWithScan(t *testing.T) {
	for name, c := range formattest.LoadCases(t, "repair") {
		t.Run(name, func(t *testing.T) {
			formattest.CheckSkims(t, formattest.Skims{Name: "anthropic", Skim: ad.Skim, Valid: repair.ValidSkims, Scan: func(arr gjson.Result) bool { return repair.Valid(rules, []byte(arr.Raw)) }}, c.Input)
		})
	}
}

// genAnthropic builds a messages array from prog, one op per byte, for the
// fuzzer: tool_use and tool_result blocks with a few ids, text, empty
// assistant messages.
func genAnthropic(prog []byte) []byte {
	ids := []string{"toolu_1", "toolu_2", "toolu_1"}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, op := range prog {
		if i > 0 {
			b.WriteByte(',')
		}
		id := ids[int(op>>4)%len(ids)]
		switch op % 7 {
		case 0:
			b.WriteString(`{"role":"user","content":"hi"}`)
		case 1:
			fmt.Fprintf(&b, `{"role":"assistant","content":[{"type":"tool_use","id":%q,"name":"get_weather","input":{}}]}`, id)
		case 2:
			fmt.Fprintf(&b, `{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"ok"}]}`, id)
		case 3:
			b.WriteString(`{"role":"assistant","content":[]}`)
		case 4:
			fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":"x"},{"type":"tool_result","tool_use_id":%q,"content":"ok"}]}`, id)
		case 5:
			b.WriteString(`{"role":"assistant","content":"Sure."}`)
		case 6:
			fmt.Fprintf(&b, `{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":%q,"name":"get_time","input":{}}]}`, id)
		}
	}
	b.WriteByte(']')
	return b.Bytes()
}

func FuzzRepair(f *testing.F) {
	formattest.SeedCorpus(f, "repair")
	f.Fuzz(func(t *testing.T, data []byte) {
		formattest.FuzzBody(t, data, genAnthropic, repairAnthropic, checkValid)
	})
}

// cleanHistory is a valid tool loop of n rounds.
func cleanHistory(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`[{"role":"user","content":"go"}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"role":"assistant","content":[{"type":"text","text":"step %d"},{"type":"tool_use","id":"toolu_%d","name":"get_weather","input":{"city":"Paris"}}]}`, i, i)
		fmt.Fprintf(&b, `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_%d","content":"sunny"}]}`, i)
	}
	b.WriteByte(']')
	return b.Bytes()
}

func BenchmarkRepair500Clean(b *testing.B) {
	formattest.BenchRepair(b, repairAnthropic, cleanHistory(250), false)
}
