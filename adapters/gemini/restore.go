package gemini

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Restorable implements adapters.Adapter.
func (g *Adapter) Restorable(stored []byte) bool {
	return bytes.Contains(stored, []byte(`"thoughtSignature"`))
}

// Restore implements adapters.Adapter for Gemini contents. An incoming model Content
// matches a stored one by functionCall ids where it has them, else the
// stored model Content at the same position among model Contents when their
// non-thought parts are canonically equal (text equal, function names
// equal, args equal as JSON values). From a match it restores
// thoughtSignature on functionCall parts (aligned by order), on non-empty
// text parts and on thought parts (aligned by order when the counts agree).
// The model does not select anything: Gemini wants signatures back always.
func (g *Adapter) Restore(incoming, stored []byte, model string) ([]byte, []adapters.Restored, error) {
	if !g.Restorable(stored) {
		return incoming, nil, nil // no signature stored: nothing to restore
	}
	in := gjson.Parse(rawjson.Str(incoming))
	if !in.IsArray() {
		return incoming, nil, fmt.Errorf("restore: %w", adapters.ErrNoMessages)
	}
	st := gjson.Parse(rawjson.Str(stored))
	if !st.IsArray() {
		return incoming, nil, nil
	}
	var stModel []gjson.Result
	byCall := map[string]int{}
	st.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str != "model" {
			return true
		}
		m.Get("parts").ForEach(func(_, p gjson.Result) bool {
			if id := p.Get("functionCall.id").Str; id != "" {
				byCall[id] = len(stModel)
			}
			return true
		})
		stModel = append(stModel, m)
		return true
	})
	if len(stModel) == 0 {
		return incoming, nil, nil
	}
	var edits []adapters.Replacement
	var restored []adapters.Restored
	k, i := -1, -1
	var ferr error
	in.ForEach(func(_, m gjson.Result) bool {
		i++
		if m.Get("role").Str != "model" {
			return true
		}
		k++
		parts := adapters.Elements(m.Get("parts"))
		var s gjson.Result
		found := false
		for _, p := range parts {
			if j, ok := byCall[p.Get("functionCall.id").Str]; ok {
				s, found = stModel[j], true
				break
			}
		}
		if !found && k < len(stModel) && geminiSame(parts, adapters.Elements(stModel[k].Get("parts"))) {
			s, found = stModel[k], true
		}
		if !found {
			return true
		}
		stParts := adapters.Elements(s.Get("parts"))
		var msg []byte
		n := 0
		for _, cls := range []partClass{classCall, classText, classThought} {
			a, b := partsOf(parts, cls), partsOf(stParts, cls)
			if len(a) != len(b) {
				continue
			}
			for x := range a {
				sr := stParts[b[x]].Get("thoughtSignature")
				if !adapters.Usable(sr) || !adapters.Dropped(parts[a[x]].Get("thoughtSignature")) {
					continue
				}
				if msg == nil {
					msg = append([]byte(nil), m.Raw...)
				}
				var err error
				if msg, err = adapters.SetField(msg, "parts."+strconv.Itoa(a[x])+".thoughtSignature", sr.Raw); err != nil {
					ferr = err
					return false
				}
				n++
			}
		}
		if msg != nil {
			edits = append(edits, adapters.Replacement{Start: m.Index, End: m.Index + len(m.Raw), Val: msg})
			for range n {
				restored = append(restored, adapters.Restored{Field: adapters.FieldThoughtSignature, MessageIndex: i})
			}
		}
		return true
	})
	if ferr != nil {
		return incoming, nil, ferr
	}
	return adapters.Splice(incoming, edits), restored, nil
}

type partClass uint8

const (
	classOther partClass = iota
	classCall
	classText    // non-empty, non-thought text
	classThought // thought text
	classEmpty   // empty text
)

func classify(p gjson.Result) partClass {
	switch {
	case p.Get("functionCall").Exists():
		return classCall
	case p.Get("text").Type == gjson.String:
		if p.Get("thought").Bool() {
			return classThought
		}
		if p.Get("text").Str == "" {
			return classEmpty
		}
		return classText
	}
	return classOther
}

// partsOf returns the indexes of the parts of one class.
func partsOf(parts []gjson.Result, cls partClass) []int {
	var out []int
	for i, p := range parts {
		if classify(p) == cls {
			out = append(out, i)
		}
	}
	return out
}

// geminiSame compares the non-thought, non-empty parts of two Contents.
func geminiSame(a, b []gjson.Result) bool {
	keep := func(ps []gjson.Result) []gjson.Result {
		var out []gjson.Result
		for _, p := range ps {
			if c := classify(p); c != classThought && c != classEmpty {
				out = append(out, p)
			}
		}
		return out
	}
	a, b = keep(a), keep(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ca, cb := classify(a[i]), classify(b[i])
		if ca != cb {
			return false
		}
		switch ca {
		case classCall:
			if a[i].Get("functionCall.name").Str != b[i].Get("functionCall.name").Str ||
				!adapters.JSONEqual([]byte(a[i].Get("functionCall.args").Raw), []byte(b[i].Get("functionCall.args").Raw)) &&
					(a[i].Get("functionCall.args").Exists() || b[i].Get("functionCall.args").Exists()) {
				return false
			}
		case classText:
			if a[i].Get("text").Str != b[i].Get("text").Str {
				return false
			}
		default:
			if !adapters.JSONEqual(withoutSig(a[i]), withoutSig(b[i])) {
				return false
			}
		}
	}
	return true
}

func withoutSig(p gjson.Result) []byte {
	b := []byte(p.Raw)
	if p.Get("thoughtSignature").Exists() {
		b, _ = sjson.DeleteBytes(b, "thoughtSignature")
	}
	return b
}
