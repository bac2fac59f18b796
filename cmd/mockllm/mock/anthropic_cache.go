package mock

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Prompt-cache simulation for the Anthropic synthetic answers (6.5), kept
// simple on purpose:
//
//   - The rendered prompt is a chain of segments: the model, each tool, each
//     system block, one segment for tool_choice + thinking (no tokens), then
//     every content block of every message (a role marker at each turn; a
//     string content counts as one text block). A segment is its JSON with
//     cache_control removed and whitespace compacted; key order counts. The
//     hash at a segment covers everything before it, so changing a tool
//     misses everything, system misses system and messages, tool_choice or
//     thinking misses the messages.
//   - Tokens are estimated as bytes/4 per segment (count_tokens answers the
//     same estimate).
//   - Breakpoints: blocks with cache_control, and the last block when the
//     top-level cache_control is set. A breakpoint reads the longest cached
//     prefix among itself and the 20 segments before it; everything after the
//     read up to the last breakpoint is written (split by ttl into
//     ephemeral_5m / ephemeral_1h). Prefixes shorter than the minimum
//     (X-Mock-Cache-Min-Tokens, default 1024) are neither written nor read.
//   - Entries live 5 minutes or 1 hour; a read refreshes them. Only
//     successful synthetic answers write; count_tokens and fixture replays
//     (whose usage is the fixture's) do not. Reset empties the cache.

// defaultCacheMinTokens is the minimum cacheable prefix of most current
// models (1024; the table of 6.5 has 512 to 4096).
const defaultCacheMinTokens = 1024

// cacheLookback is how many blocks a breakpoint looks back for an entry.
const cacheLookback = 20

type promptSeg struct {
	hash   [32]byte // covers this segment and everything before it
	tokens int      // cumulative tokens through this segment
	ttl    string   // breakpoint ttl ("5m", "1h"); "" when not a breakpoint
}

type cacheEntry struct {
	exp time.Time
	ttl time.Duration
}

func estimateTokens(n int) int { return max(1, (n+3)/4) }

// canonicalBlock renders a block for hashing: a string content as the text
// block it stands for, else the block without cache_control, compacted.
func canonicalBlock(b gjson.Result) []byte {
	if b.Type == gjson.String {
		return []byte(`{"type":"text","text":` + b.Raw + `}`)
	}
	raw := []byte(b.Raw)
	if b.Get("cache_control").Exists() {
		if out, err := sjson.DeleteBytes(raw, "cache_control"); err == nil {
			raw = out
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

func ttlOf(cc gjson.Result) string {
	if !cc.Exists() || cc.Type == gjson.Null {
		return ""
	}
	if t := cc.Get("ttl").String(); t != "" {
		return t
	}
	return "5m"
}

// anthropicPrompt splits a request into its prompt segments.
func anthropicPrompt(r *anthReq) []promptSeg {
	var segs []promptSeg
	prev := sha256.Sum256([]byte("model\x00" + r.model.String()))
	cum := 0
	add := func(kind string, raw []byte, ttl string, counts bool) {
		h := sha256.New()
		h.Write(prev[:])
		h.Write([]byte(kind))
		h.Write([]byte{0})
		h.Write(raw)
		h.Sum(prev[:0])
		if counts {
			cum += estimateTokens(len(raw))
		}
		segs = append(segs, promptSeg{prev, cum, ttl})
	}
	r.tools.ForEach(func(_, t gjson.Result) bool {
		add("tool", canonicalBlock(t), ttlOf(t.Get("cache_control")), true)
		return true
	})
	switch {
	case r.system.Type == gjson.String:
		add("system", canonicalBlock(r.system), "", true)
	case r.system.IsArray():
		r.system.ForEach(func(_, b gjson.Result) bool {
			add("system", canonicalBlock(b), ttlOf(b.Get("cache_control")), true)
			return true
		})
	}
	add("meta", []byte(r.toolChoice.Raw+"\x00"+r.thinking.Raw), "", false)
	for _, t := range r.turns {
		for i, b := range t.blocks {
			kind := "block"
			if i == 0 {
				kind = "turn " + t.role
			}
			add(kind, canonicalBlock(b.r), ttlOf(b.r.Get("cache_control")), true)
		}
	}
	if ttl := ttlOf(r.topCache); ttl != "" && len(segs) > 0 && segs[len(segs)-1].ttl == "" {
		segs[len(segs)-1].ttl = ttl
	}
	return segs
}

// cacheUsage looks the request's breakpoints up, writes the new entries and
// returns the tokens read and written (by ttl).
func (a *anthropicState) cacheUsage(segs []promptSeg, minTokens int) (read, w5m, w1h int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	for b, s := range segs {
		if s.ttl == "" {
			continue
		}
		for j := b; j >= 0 && j >= b-cacheLookback; j-- {
			e, ok := a.cache[segs[j].hash]
			if !ok || !now.Before(e.exp) || segs[j].tokens < minTokens {
				continue
			}
			read = max(read, segs[j].tokens)
			e.exp = now.Add(e.ttl)
			a.cache[segs[j].hash] = e
			break
		}
	}
	done := read
	for _, s := range segs {
		if s.ttl == "" || s.tokens < minTokens {
			continue
		}
		ttl := 5 * time.Minute
		if s.ttl == "1h" {
			ttl = time.Hour
		}
		if s.tokens > done {
			if s.ttl == "1h" {
				w1h += s.tokens - done
			} else {
				w5m += s.tokens - done
			}
			done = s.tokens
		}
		e, ok := a.cache[s.hash]
		if !ok {
			if len(a.cacheOrder) >= anthropicMemoryCap {
				delete(a.cache, a.cacheOrder[0])
				a.cacheOrder = a.cacheOrder[1:]
			}
			a.cacheOrder = append(a.cacheOrder, s.hash)
		}
		e.ttl = max(e.ttl, ttl)
		e.exp = now.Add(e.ttl)
		a.cache[s.hash] = e
	}
	return read, w5m, w1h
}
