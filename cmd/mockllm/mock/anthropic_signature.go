package mock

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// Anthropic thinking signatures (wire-formats.md 6.4). The real API returns
// the full thinking encrypted in the signature and refuses a block whose text
// or signature changed, or that another model produced. The mock signs what
// it emits and checks it on the way back:
//
//	signature = base64std("mock" || nonce[12] || HMAC-SHA256(key, "thinking\x00" model "\x00" nonce text))
//	data      = base64std("mock" || nonce[12] || HMAC-SHA256(key, "redacted_thinking\x00" model "\x00" nonce))
//
// with a fixed key, so a signature verifies only with the same thinking text
// (byte for byte) and the same request model. The nonce (derived from the
// message id and block index) makes every block's signature distinct, also
// for empty-text blocks (display "omitted"). The signatures that appear in
// the anthropic fixtures cannot be recomputed; they verify against the
// thinking text the fixture gives them, for any model.

const anthropicSigningKey = "mockllm anthropic thinking signing key v1"

var sigMagic = []byte("mock")

const sigNonceLen = 12

func anthropicMAC(kind, model string, nonce []byte, text string) []byte {
	m := hmac.New(sha256.New, []byte(anthropicSigningKey))
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(model))
	m.Write([]byte{0})
	m.Write(nonce)
	m.Write([]byte(text))
	return m.Sum(nil)
}

func anthropicSeal(kind, model string, nonce []byte, text string) string {
	raw := make([]byte, 0, len(sigMagic)+sigNonceLen+sha256.Size)
	raw = append(raw, sigMagic...)
	raw = append(raw, nonce[:sigNonceLen]...)
	raw = append(raw, anthropicMAC(kind, model, nonce[:sigNonceLen], text)...)
	return base64.StdEncoding.EncodeToString(raw)
}

func anthropicOpen(kind, model, sealed, text string) bool {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(raw) != len(sigMagic)+sigNonceLen+sha256.Size || string(raw[:len(sigMagic)]) != string(sigMagic) {
		return false
	}
	nonce := raw[len(sigMagic) : len(sigMagic)+sigNonceLen]
	return hmac.Equal(raw[len(sigMagic)+sigNonceLen:], anthropicMAC(kind, model, nonce, text))
}

// nonceFor derives a block nonce from a seed (message id) and block index.
func nonceFor(seed string, index int) []byte {
	h := sha256.Sum256([]byte(seed + "\x00" + strconv.Itoa(index)))
	return h[:sigNonceLen]
}

// AnthropicThinkingSignature returns a signature the mock accepts for a
// thinking block with exactly this text, sent with this request model. Tests
// use it to build histories without a round trip.
func AnthropicThinkingSignature(model, thinking string) string {
	return anthropicSeal("thinking", model, nonceFor(model+"\x00"+thinking, 0), thinking)
}

// AnthropicRedactedThinkingData returns redacted_thinking data the mock
// accepts with this request model; seed only makes it distinct.
func AnthropicRedactedThinkingData(model, seed string) string {
	return anthropicSeal("redacted_thinking", model, nonceFor(seed, 0), "")
}

// verifyThinkingSignature reports whether sig is a valid signature of text
// for model: a mock signature, or a fixture signature with its own text.
func verifyThinkingSignature(model, sig, text string) bool {
	if t, ok := fixtureThinking[sig]; ok {
		return t == text
	}
	return anthropicOpen("thinking", model, sig, text)
}

func verifyRedactedData(model, data string) bool {
	if _, ok := fixtureThinking[data]; ok {
		return true
	}
	return anthropicOpen("redacted_thinking", model, data, "")
}

// thinkRef is one thinking-type block of an assistant message as the mock
// emitted it: its type and its signature (thinking) or data (redacted).
type thinkRef struct {
	typ, val string
}

var (
	// fixtureThinking maps every thinking signature of the anthropic
	// fixtures to its thinking text (filled by load).
	fixtureThinking map[string]string
	// fixtureMessages maps each such signature to the thinking blocks of
	// the fixture message it belongs to, in order.
	fixtureMessages map[string][]thinkRef
)

// collectAnthropicFixtureThinking records the thinking blocks of every
// content array in an anthropic fixture body (responses, expected
// messages, request histories).
func collectAnthropicFixtureThinking(b []byte) {
	var walk func(r gjson.Result)
	walk = func(r gjson.Result) {
		switch {
		case r.IsArray():
			var refs []thinkRef
			r.ForEach(func(_, el gjson.Result) bool {
				switch el.Get("type").String() {
				case "thinking":
					sig := el.Get("signature").String()
					fixtureThinking[sig] = el.Get("thinking").String()
					refs = append(refs, thinkRef{"thinking", sig})
				case "redacted_thinking":
					data := el.Get("data").String()
					fixtureThinking[data] = ""
					refs = append(refs, thinkRef{"redacted_thinking", data})
				}
				walk(el)
				return true
			})
			for _, ref := range refs {
				fixtureMessages[ref.val] = refs
			}
		case r.IsObject():
			r.ForEach(func(_, v gjson.Result) bool {
				walk(v)
				return true
			})
		}
	}
	walk(gjson.ParseBytes(b))
}

// anthropicMemoryCap bounds the messages and cache entries a Server
// remembers (oldest dropped first), so long load runs stay flat.
const anthropicMemoryCap = 1 << 14

// anthropicState is what a Server remembers across Anthropic requests: the
// thinking blocks of the messages it emitted (for the "cannot be modified"
// rule) and the prompt-cache entries (prefix hash -> expiry). Reset clears it.
type anthropicState struct {
	mu         sync.Mutex
	bySig      map[string][]thinkRef
	sigOrder   [][]thinkRef
	cache      map[[32]byte]cacheEntry
	cacheOrder [][32]byte
	// now is the clock of the cache (tests replace it).
	now func() time.Time
}

func newAnthropicState() *anthropicState {
	return &anthropicState{bySig: map[string][]thinkRef{}, cache: map[[32]byte]cacheEntry{}, now: time.Now}
}

func (a *anthropicState) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bySig = map[string][]thinkRef{}
	a.sigOrder = nil
	a.cache = map[[32]byte]cacheEntry{}
	a.cacheOrder = nil
}

// remember records the thinking blocks of an emitted message.
func (a *anthropicState) remember(refs []thinkRef) {
	if len(refs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sigOrder) >= anthropicMemoryCap {
		for _, r := range a.sigOrder[0] {
			delete(a.bySig, r.val)
		}
		a.sigOrder = a.sigOrder[1:]
	}
	a.sigOrder = append(a.sigOrder, refs)
	for _, r := range refs {
		a.bySig[r.val] = refs
	}
}

// emitted returns the thinking blocks of the message (emitted by this server
// or in a fixture) that holds the block with this signature or data.
func (a *anthropicState) emitted(val string) ([]thinkRef, bool) {
	if refs, ok := fixtureMessages[val]; ok {
		return refs, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	refs, ok := a.bySig[val]
	return refs, ok
}
