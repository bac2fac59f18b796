package rawjson

import "github.com/tidwall/gjson"

// TopLevelValue returns the offset of the value of the first top-level
// member named key. It gives up (ok false) on a key spelled with escapes.
func TopLevelValue(body []byte, key string) (at int, ok bool) {
	found := false
	walked := WalkTopLevel(body, func(name []byte, i int) bool {
		if string(name) == key {
			at, found = i, true
		}
		return found
	})
	return at, walked && found
}

// ModelAndStream reads the top-level "model" (a string) and "stream" (a
// bool) as gjson would, in one walk over the members that skips values
// without parsing them (a history of 200 messages is mostly string bytes,
// which the skip passes with a vectorised search). A body the walk cannot
// read (an escaped key, malformed JSON) is read with gjson.
func ModelAndStream(body []byte) (model string, stream bool) {
	var modelRaw, streamRaw []byte
	var seenModel, seenStream, bad bool
	raw := func(at int) []byte {
		end, ok := SkipValue(body, at)
		bad = bad || !ok
		return body[at:max(at, end)]
	}
	ok := WalkTopLevel(body, func(key []byte, at int) bool {
		switch {
		case !seenModel && string(key) == "model":
			modelRaw, seenModel = raw(at), true
		case !seenStream && string(key) == "stream":
			streamRaw, seenStream = raw(at), true
		}
		return bad || seenModel && seenStream
	})
	if !ok || bad {
		return Get(body, "model").String(), Get(body, "stream").Bool()
	}
	if seenModel {
		model = gjson.ParseBytes(modelRaw).String()
	}
	if seenStream {
		stream = gjson.ParseBytes(streamRaw).Bool()
	}
	return model, stream
}

// WalkTopLevel calls fn with each top-level member's key and the offset
// of its value, and skips the value, until fn returns true (stop). ok is
// false when body is not an object it can read (a key with escapes,
// malformed JSON): nothing it reported can then be relied on.
func WalkTopLevel(body []byte, fn func(key []byte, at int) (stop bool)) (ok bool) {
	return WalkMembers(body, func(key []byte, at int) (bool, int) { return fn(key, at), 0 })
}

// WalkMembers is WalkTopLevel for a caller that skips some values itself:
// fn returns the offset just past the value when it found it (0: not
// found, WalkMembers skips it).
func WalkMembers(body []byte, fn func(key []byte, at int) (stop bool, end int)) (ok bool) {
	i := SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return true
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(body) && body[j] != '"' {
			if body[j] == '\\' {
				return false
			}
			j++
		}
		if j >= len(body) {
			return false
		}
		key := body[i+1 : j]
		i = SkipSpace(body, j+1)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		i = SkipSpace(body, i+1)
		stop, end := fn(key, i)
		if stop {
			return true
		}
		if end > i {
			i = end
		} else if i, ok = SkipValue(body, i); !ok {
			return false
		}
		i = SkipSpace(body, i)
		if i >= len(body) {
			return false
		}
		if body[i] == '}' {
			return true
		}
		if body[i] != ',' {
			return false
		}
		i = SkipSpace(body, i+1)
	}
}
