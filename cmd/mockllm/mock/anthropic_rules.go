package mock

import (
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// The Anthropic Messages strictness rules (wire-formats.md 6.2-6.5, 6.8 and
// the anthropic error fixtures). Each looks at one request and returns the
// 400 the real API answers, or nil. Texts are verbatim from the captures the
// reference cites unless a rule's comment says "composed".

// anthBlock is one content block of a message. A string content is one
// text block whose r is the string itself.
type anthBlock struct {
	typ      string
	r        gjson.Result
	msg, idx int // message index and index in its content
}

// text returns a text block's text.
func (b anthBlock) text() string {
	if b.r.Type == gjson.String {
		return b.r.String()
	}
	return b.r.Get("text").String()
}

func (b anthBlock) isThinking() bool { return b.typ == "thinking" || b.typ == "redacted_thinking" }

type anthMsg struct {
	role   string
	hasRol bool
	empty  bool // content missing, null, "", [] or not a string/array
	blocks []anthBlock
}

// anthTurn is a run of consecutive messages with the same role: the API
// combines them into one turn (6.2), so pairing is checked per turn.
type anthTurn struct {
	role   string
	first  int // index of its first message
	blocks []anthBlock
}

func (t anthTurn) has(typ string) bool {
	for _, b := range t.blocks {
		if b.typ == typ {
			return true
		}
	}
	return false
}

// anthReq is the part of a Messages (or count_tokens) request the rules,
// the synthetic answer and the prompt-cache simulation read.
type anthReq struct {
	countTokens bool
	version     string
	betas       string // anthropic-beta header, comma-separated
	model       gjson.Result
	maxTokens   gjson.Result
	messages    gjson.Result
	msgs        []anthMsg
	turns       []anthTurn
	thinking    gjson.Result
	thinkType   string // thinking.type
	toolChoice  gjson.Result
	tools       gjson.Result
	system      gjson.Result
	topCache    gjson.Result // top-level cache_control
	body        []byte
	// mem answers which thinking blocks the mock emitted together; nil
	// skips the "cannot be modified" rule.
	mem *anthropicState
}

func parseAnthropic(body []byte, h http.Header, countTokens bool) *anthReq {
	r := &anthReq{
		countTokens: countTokens,
		version:     h.Get("anthropic-version"),
		betas:       strings.Join(h.Values("anthropic-beta"), ","),
		body:        body,
	}
	res := gjson.GetManyBytes(body, "model", "max_tokens", "messages", "thinking", "tool_choice", "tools", "system", "cache_control")
	r.model, r.maxTokens, r.messages, r.thinking = res[0], res[1], res[2], res[3]
	r.toolChoice, r.tools, r.system, r.topCache = res[4], res[5], res[6], res[7]
	r.thinkType = r.thinking.Get("type").String()
	i := 0
	r.messages.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role")
		msg := anthMsg{role: role.String(), hasRol: role.Exists()}
		c := m.Get("content")
		switch {
		case c.Type == gjson.String:
			msg.empty = c.String() == ""
			if !msg.empty {
				msg.blocks = []anthBlock{{typ: "text", r: c, msg: i}}
			}
		case c.IsArray():
			j := 0
			c.ForEach(func(_, b gjson.Result) bool {
				msg.blocks = append(msg.blocks, anthBlock{typ: b.Get("type").String(), r: b, msg: i, idx: j})
				j++
				return true
			})
			msg.empty = j == 0
		default:
			msg.empty = true
		}
		r.msgs = append(r.msgs, msg)
		if n := len(r.turns); n > 0 && r.turns[n-1].role == msg.role {
			r.turns[n-1].blocks = append(r.turns[n-1].blocks, msg.blocks...)
		} else {
			r.turns = append(r.turns, anthTurn{role: msg.role, first: i, blocks: append([]anthBlock(nil), msg.blocks...)})
		}
		i++
		return true
	})
	return r
}

// thinkingOn: extended thinking is enabled or adaptive.
func (r *anthReq) thinkingOn() bool { return r.thinkType == "enabled" || r.thinkType == "adaptive" }

// interleaved: Claude may think after tool results (beta header, or adaptive).
func (r *anthReq) interleaved() bool {
	return r.thinkType == "adaptive" || strings.Contains(r.betas, "interleaved-thinking-2025-05-14")
}

// lastIsPrompt: the request ends with a user turn that holds no tool_result
// (a new prompt, not the continuation of a tool loop).
func (r *anthReq) lastIsPrompt() bool {
	n := len(r.turns)
	return n > 0 && r.turns[n-1].role == "user" && !r.turns[n-1].has("tool_result")
}

// callableTools returns the client tools (custom tools and Anthropic-defined
// client tools); server tools run on Anthropic's side and are never called
// by a tool_use block.
func (r *anthReq) callableTools() []gjson.Result {
	var out []gjson.Result
	r.tools.ForEach(func(_, t gjson.Result) bool {
		typ := t.Get("type").String()
		switch {
		case typ == "" || typ == "custom" || t.Get("input_schema").Exists():
		case strings.HasPrefix(typ, "bash_"), strings.HasPrefix(typ, "text_editor_"), strings.HasPrefix(typ, "memory_"), strings.HasPrefix(typ, "computer_"):
		default:
			return true
		}
		if t.Get("name").String() != "" {
			out = append(out, t)
		}
		return true
	})
	return out
}

func anthInvalid(msg, rule string) *rejection {
	return &rejection{400, anthropicErrorBody("invalid_request_error", msg), rule}
}

// ruleAnthropicRequired: the required fields. `max_tokens: Field required`
// is captured; the `model`/`messages` texts and the type errors are the
// same pydantic wording (composed).
func ruleAnthropicRequired(r *anthReq) *rejection {
	const rule = "anthropic-field-required"
	if !r.countTokens {
		mt := r.maxTokens
		switch {
		case !mt.Exists():
			return anthInvalid("max_tokens: Field required", rule)
		case mt.Type != gjson.Number || mt.Num != math.Trunc(mt.Num):
			return anthInvalid("max_tokens: Input should be a valid integer", rule)
		}
	}
	switch {
	case !r.messages.Exists():
		return anthInvalid("messages: Field required", rule)
	case !r.messages.IsArray():
		return anthInvalid("messages: Input should be a valid list", rule)
	case !r.model.Exists():
		return anthInvalid("model: Field required", rule)
	}
	return nil
}

// ruleAnthropicExtraInputs: with anthropic-version 2026-10-21 the sampling
// parameters are 400s even at their defaults (6.1; the temperature text is
// measured, top_p/top_k follow it).
func ruleAnthropicExtraInputs(r *anthReq) *rejection {
	if r.version != "2026-10-21" {
		return nil
	}
	for _, f := range []string{"temperature", "top_p", "top_k"} {
		if gjson.GetBytes(r.body, f).Exists() {
			return anthInvalid(f+": Extra inputs are not permitted", "anthropic-extra-inputs")
		}
	}
	return nil
}

func ruleAnthropicEmptyMessages(r *anthReq) *rejection {
	if len(r.msgs) == 0 {
		return anthInvalid("messages: at least one message is required", "anthropic-empty-messages")
	}
	return nil
}

// ruleAnthropicRoles: only user and assistant (the system text is captured;
// the "tool" one only in its first clause; a missing role is composed).
func ruleAnthropicRoles(r *anthReq) *rejection {
	const rule = "anthropic-unexpected-role"
	for i, m := range r.msgs {
		switch {
		case !m.hasRol:
			return anthInvalid(fmt.Sprintf("messages.%d.role: Field required", i), rule)
		case m.role == "system":
			return anthInvalid("messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, not \"system\" as an input message role.", rule)
		case m.role != "user" && m.role != "assistant":
			return anthInvalid(fmt.Sprintf("messages: Unexpected role %q", m.role), rule)
		}
	}
	return nil
}

// ruleAnthropicFirstRole: the first message is a user message (2024
// captures; the 2026 skill still lists it). Consecutive same-role messages
// are not an error: the API combines them.
func ruleAnthropicFirstRole(r *anthReq) *rejection {
	if len(r.msgs) > 0 && r.msgs[0].role != "user" {
		return anthInvalid(`messages: first message must use the "user" role`, "anthropic-first-message-role")
	}
	return nil
}

func ruleAnthropicEmptyContent(r *anthReq) *rejection {
	last := len(r.msgs) - 1
	for i, m := range r.msgs {
		if m.empty && !(i == last && m.role == "assistant") {
			return anthInvalid(fmt.Sprintf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i), "anthropic-empty-content")
		}
	}
	return nil
}

// ruleAnthropicEmptyText: text blocks must be non-empty (captured) and not
// whitespace only (rejected per the same sources; wording composed).
func ruleAnthropicEmptyText(r *anthReq) *rejection {
	for _, m := range r.msgs {
		for _, b := range m.blocks {
			if b.typ != "text" {
				continue
			}
			switch t := b.text(); {
			case t == "":
				return anthInvalid("messages: text content blocks must be non-empty", "anthropic-empty-text")
			case strings.TrimSpace(t) == "":
				return anthInvalid("messages: text content blocks must contain non-whitespace text", "anthropic-empty-text")
			}
		}
	}
	return nil
}

func ruleAnthropicToolResultRole(r *anthReq) *rejection {
	for i, m := range r.msgs {
		if m.role != "assistant" {
			continue
		}
		for _, b := range m.blocks {
			if b.typ == "tool_result" {
				return anthInvalid(fmt.Sprintf("messages.%d: `tool_result` blocks can only be in `user` messages", i), "anthropic-tool-result-in-assistant")
			}
		}
	}
	return nil
}

// ruleAnthropicToolUseInput: tool_use.input is an object, never a JSON
// string (pydantic wording, composed: 6.3 marks it not verified).
func ruleAnthropicToolUseInput(r *anthReq) *rejection {
	for _, m := range r.msgs {
		for _, b := range m.blocks {
			if b.typ != "tool_use" && b.typ != "server_tool_use" {
				continue
			}
			in := b.r.Get("input")
			path := fmt.Sprintf("messages.%d.content.%d.%s.input", b.msg, b.idx, b.typ)
			switch {
			case !in.Exists():
				return anthInvalid(path+": Field required", "anthropic-tool-use-input")
			case !in.IsObject():
				return anthInvalid(path+": Input should be a valid dictionary", "anthropic-tool-use-input")
			}
		}
	}
	return nil
}

func ruleAnthropicDuplicateToolUse(r *anthReq) *rejection {
	seen := map[string]bool{}
	for _, m := range r.msgs {
		for _, b := range m.blocks {
			if b.typ != "tool_use" && b.typ != "server_tool_use" {
				continue
			}
			id := b.r.Get("id").String()
			if seen[id] {
				return anthInvalid(fmt.Sprintf("messages.%d.content.%d: `tool_use` ids must be unique", b.msg, b.idx), "anthropic-duplicate-tool-use-id")
			}
			seen[id] = true
		}
	}
	return nil
}

// ruleAnthropicCacheControl: at most 4 breakpoints, the top-level automatic
// one included, and no ttl '1h' after a '5m' one in tools -> system ->
// messages order (6.5, captured texts; the bad-ttl text is composed).
func ruleAnthropicCacheControl(r *anthReq) *rejection {
	const rule = "anthropic-cache-control"
	type marker struct {
		path string
		cc   gjson.Result
	}
	var ms []marker
	add := func(path string, block gjson.Result) {
		if cc := block.Get("cache_control"); cc.Exists() && cc.Type != gjson.Null {
			ms = append(ms, marker{path, cc})
		}
	}
	i := 0
	r.tools.ForEach(func(_, t gjson.Result) bool {
		add(fmt.Sprintf("tools.%d", i), t)
		i++
		return true
	})
	if r.system.IsArray() {
		i = 0
		r.system.ForEach(func(_, b gjson.Result) bool {
			add(fmt.Sprintf("system.%d", i), b)
			i++
			return true
		})
	}
	for _, m := range r.msgs {
		for _, b := range m.blocks {
			if b.r.IsObject() {
				add(fmt.Sprintf("messages.%d.content.%d", b.msg, b.idx), b.r)
			}
		}
	}
	n := len(ms)
	if r.topCache.Exists() && r.topCache.Type != gjson.Null {
		n++
	}
	if n > 4 {
		return anthInvalid(fmt.Sprintf("A maximum of 4 blocks with cache_control may be provided. Found %d.", n), rule)
	}
	seen5m := false
	for _, m := range ms {
		switch ttl := m.cc.Get("ttl"); {
		case !ttl.Exists() || ttl.String() == "5m":
			seen5m = true
		case ttl.String() == "1h":
			if seen5m {
				return anthInvalid(m.path+".cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`.", rule)
			}
		default:
			return anthInvalid(m.path+".cache_control.ttl: Input should be '5m' or '1h'", rule)
		}
	}
	return nil
}

// ruleAnthropicThinkingConfig: the thinking parameter (6.4; the tag error is
// composed in pydantic's wording, the others are captured).
func ruleAnthropicThinkingConfig(r *anthReq) *rejection {
	const rule = "anthropic-thinking-config"
	switch r.thinkType {
	case "", "disabled", "adaptive":
	case "enabled":
		b := r.thinking.Get("budget_tokens")
		switch {
		case !b.Exists():
			return anthInvalid("thinking.enabled.budget_tokens: Field required", rule)
		case b.Num < 1024:
			return anthInvalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024", rule)
		case !r.countTokens && !r.interleaved() && r.maxTokens.Num <= b.Num:
			return anthInvalid("`max_tokens` must be greater than `thinking.budget_tokens`.", rule)
		}
	default:
		if r.thinking.Exists() && r.thinking.Type != gjson.Null {
			return anthInvalid(fmt.Sprintf("thinking: Input tag '%s' found using 'type' does not match any of the expected tags: 'adaptive', 'disabled', 'enabled'", r.thinkType), rule)
		}
	}
	if r.thinkingOn() {
		if t := r.toolChoice.Get("type").String(); t == "any" || t == "tool" {
			return anthInvalid("Thinking may not be enabled when tool_choice forces tool use.", rule)
		}
	}
	return nil
}

// ruleAnthropicThinkingBlockShape: required fields of thinking blocks, the
// first and last block of an assistant message that holds them, and no
// thinking in a final (prefill) assistant message when thinking is off.
func ruleAnthropicThinkingBlockShape(r *anthReq) *rejection {
	const rule = "anthropic-thinking-block-shape"
	last := len(r.msgs) - 1
	for i, m := range r.msgs {
		if m.role != "assistant" {
			continue
		}
		has := false
		for _, b := range m.blocks {
			path := fmt.Sprintf("messages.%d.content.%d.%s", i, b.idx, b.typ)
			switch b.typ {
			case "thinking":
				has = true
				if !b.r.Get("signature").Exists() {
					return anthInvalid(path+".signature: Field required", rule)
				}
				if !b.r.Get("thinking").Exists() {
					return anthInvalid(path+".thinking: Field required", rule)
				}
			case "redacted_thinking":
				has = true
				if !b.r.Get("data").Exists() {
					return anthInvalid(path+".data: Field required", rule) // composed
				}
			}
		}
		if !has {
			continue
		}
		if i == last && !r.thinkingOn() {
			for _, b := range m.blocks {
				if b.isThinking() {
					return anthInvalid(fmt.Sprintf("messages.%d.content.%d: When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request.", i, b.idx), rule)
				}
			}
		}
		if first := m.blocks[0]; !first.isThinking() {
			return anthInvalid(fmt.Sprintf("messages.%d.content.0: If an assistant message contains any thinking blocks, the first block must be `thinking` or `redacted_thinking`. Found `%s`.", i, first.typ), rule)
		}
		if m.blocks[len(m.blocks)-1].isThinking() {
			return anthInvalid(fmt.Sprintf("messages.%d: The final block in an assistant message cannot be `thinking`.", i), rule)
		}
	}
	return nil
}

// ruleAnthropicToolPairing walks the turns in order. An assistant turn's
// tool_use ids must all be answered by the tool_result blocks that open the
// next (user) turn, and its server_tool_use ids by a *_tool_result block in
// the same turn; a tool_result must answer a tool_use of the previous
// assistant turn. Bodies: the two pairing fixtures, filled with the message
// index (of the first unanswered tool_use / of the tool_result) and the ids.
func ruleAnthropicToolPairing(r *anthReq) *rejection {
	for ti, t := range r.turns {
		switch t.role {
		case "assistant":
			answered := map[string]bool{}
			for _, b := range t.blocks {
				if strings.HasSuffix(b.typ, "_tool_result") {
					answered[b.r.Get("tool_use_id").String()] = true
				}
			}
			if ti+1 < len(r.turns) {
				for _, b := range r.turns[ti+1].blocks {
					if b.typ != "tool_result" {
						break
					}
					answered[b.r.Get("tool_use_id").String()] = true
				}
			}
			var missing []string
			at := -1
			for _, b := range t.blocks {
				if b.typ != "tool_use" && b.typ != "server_tool_use" {
					continue
				}
				if id := b.r.Get("id").String(); !answered[id] {
					missing = append(missing, id)
					if at < 0 {
						at = b.msg
					}
				}
			}
			if len(missing) > 0 {
				return &rejection{400, tmplAnthUnanswered.fill(fmt.Sprintf("messages.%d:", at), "immediately after: "+strings.Join(missing, ", ")+"."), "anthropic-tool-use-without-result"}
			}
		case "user":
			calls := map[string]bool{}
			if ti > 0 {
				for _, b := range r.turns[ti-1].blocks {
					if b.typ == "tool_use" {
						calls[b.r.Get("id").String()] = true
					}
				}
			}
			for _, b := range t.blocks {
				if b.typ != "tool_result" {
					continue
				}
				if id := b.r.Get("tool_use_id").String(); !calls[id] {
					return &rejection{400, tmplAnthUnexpected.fill(fmt.Sprintf("messages.%d.content.%d:", b.msg, b.idx), "blocks: "+id+"."), "anthropic-tool-result-without-use"}
				}
			}
		}
	}
	return nil
}

// ruleAnthropicThinkingRequired: with thinking on, while a tool loop runs
// (the last turn carries tool_result blocks) the first assistant message
// after the last user prompt must start with its thinking block(s).
func ruleAnthropicThinkingRequired(r *anthReq) *rejection {
	n := len(r.turns)
	if !r.thinkingOn() || n == 0 || r.turns[n-1].role != "user" || !r.turns[n-1].has("tool_result") {
		return nil
	}
	start := 0
	for ti := n - 2; ti >= 0; ti-- {
		if t := r.turns[ti]; t.role == "user" && !t.has("tool_result") {
			start = ti + 1
			break
		}
	}
	for ti := start; ti < n; ti++ {
		t := r.turns[ti]
		if t.role != "assistant" {
			continue
		}
		m := r.msgs[t.first]
		if len(m.blocks) == 0 || m.blocks[0].isThinking() {
			return nil
		}
		return anthInvalid(fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking", t.first, m.blocks[0].typ), "anthropic-thinking-required")
	}
	return nil
}

// ruleAnthropicThinkingSignature: with thinking on, every thinking block's
// signature must verify against its text and the request model, and every
// redacted_thinking block's data against the model (the redacted text is
// composed by analogy; the thinking one is the fixture).
func ruleAnthropicThinkingSignature(r *anthReq) *rejection {
	if !r.thinkingOn() {
		return nil
	}
	model := r.model.String()
	for i, m := range r.msgs {
		if m.role != "assistant" {
			continue
		}
		for _, b := range m.blocks {
			switch b.typ {
			case "thinking":
				if !verifyThinkingSignature(model, b.r.Get("signature").String(), b.r.Get("thinking").String()) {
					return &rejection{400, tmplAnthBadSignature.fill(fmt.Sprintf("messages.%d.content.%d:", i, b.idx)), "anthropic-invalid-thinking-signature"}
				}
			case "redacted_thinking":
				if !verifyRedactedData(model, b.r.Get("data").String()) {
					return anthInvalid(fmt.Sprintf("messages.%d.content.%d: Invalid `data` in `redacted_thinking` block", i, b.idx), "anthropic-invalid-thinking-signature")
				}
			}
		}
	}
	return nil
}

// ruleAnthropicThinkingModified: with thinking on, the thinking blocks of
// the latest assistant message must be the ones the mock emitted in that
// response, all of them and in order (none dropped, merged or reordered).
// The response is found by the first of its blocks' signatures the mock
// knows; a message whose blocks the mock never emitted is not checked here.
func ruleAnthropicThinkingModified(r *anthReq) *rejection {
	if !r.thinkingOn() || r.mem == nil {
		return nil
	}
	li := -1
	for i, m := range r.msgs {
		if m.role == "assistant" {
			li = i
		}
	}
	if li < 0 {
		return nil
	}
	var got []thinkRef
	var at []int
	for _, b := range r.msgs[li].blocks {
		switch b.typ {
		case "thinking":
			got = append(got, thinkRef{b.typ, b.r.Get("signature").String()})
		case "redacted_thinking":
			got = append(got, thinkRef{b.typ, b.r.Get("data").String()})
		default:
			continue
		}
		at = append(at, b.idx)
	}
	var want []thinkRef
	for _, g := range got {
		if refs, ok := r.mem.emitted(g.val); ok {
			want = refs
			break
		}
	}
	if want == nil {
		return nil
	}
	for k := 0; k < len(got) || k < len(want); k++ {
		if k < len(got) && k < len(want) && got[k] == want[k] {
			continue
		}
		idx := 0
		switch {
		case k < len(at):
			idx = at[k]
		case len(at) > 0:
			idx = at[len(at)-1] + 1
		}
		return anthInvalid(fmt.Sprintf("messages.%d.content.%d: `thinking` or `redacted_thinking` blocks in the latest assistant message cannot be modified. These blocks must remain as they were in the original response.", li, idx), "anthropic-thinking-modified")
	}
	return nil
}

// anthropicRules run in this order (each is safe on its own, as the fuzz
// target runs them all on any body).
var anthropicRules = []func(*anthReq) *rejection{
	ruleAnthropicRequired,
	ruleAnthropicExtraInputs,
	ruleAnthropicEmptyMessages,
	ruleAnthropicRoles,
	ruleAnthropicFirstRole,
	ruleAnthropicEmptyContent,
	ruleAnthropicEmptyText,
	ruleAnthropicToolResultRole,
	ruleAnthropicToolUseInput,
	ruleAnthropicDuplicateToolUse,
	ruleAnthropicCacheControl,
	ruleAnthropicThinkingConfig,
	ruleAnthropicThinkingBlockShape,
	ruleAnthropicToolPairing,
	ruleAnthropicThinkingRequired,
	ruleAnthropicThinkingSignature,
	ruleAnthropicThinkingModified,
}
