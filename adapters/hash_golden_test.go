package adapters

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

// TestHashGolden pins HashMessage's output: stored threads keep these
// hashes, so a change to how messages are hashed (not only to what
// compares equal) would make every stored prefix look different. The
// inputs cover each JSON type, nesting, key order, duplicate keys,
// escapes in strings and keys, numbers by their text, whitespace, and
// bytes that are not JSON.
func TestHashGolden(t *testing.T) {
	for _, tc := range []struct{ msg, hash string }{
		{`{"role":"user","content":"hi"}`, "2396fd85c899e6d1cc7f74ff2a9b8a96"},
		{` {"content":"hi", "role":"user"} `, "2396fd85c899e6d1cc7f74ff2a9b8a96"},
		{`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`, "2dd888c25b4135f6513de2c3ce60793c"},
		{`{"b":[1, {"x":null}],"a":"\u0041","a":true}`, "06cfa76b6b721301781d630b402924fa"},
		{`{"k\"ey":1.0,"n":-1.5e3,"t":true,"f":false}`, "0de25a36a5bfd6bab9db1b93b24e56d7"},
		{`["a\nb","c",-1.5e3,false]`, "832382fbd1c1a555b1c6aba68b69b457"},
		{`["\ud83d\ude00","\ud83d x","\udc00","\u00e9\n\t\"\\\/\b\f\r"]`, "b36e5f1ed946dcaf1d8f1c7887b869fb"},
		{`{}`, "cf12b9aa38445e4bbff7e768dd4c1513"},
		{`[]`, "50edc262344620ebd2c9cabf9297150b"},
		{`""`, "76ca65fa532efea2d73e4cb2775f96cf"},
		{`0`, "2bf5c897fafb881833f1e2739c19f5be"},
		{`null`, "594e519ae499312b29433b7dd8a97ff0"},
		{`{"content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:,"}}]}`, "10eb26a07a33f995794324b6dd39fd91"},
		{`{"role":"user","content":"hi"`, "23d444ecc7af226a93b6db2e95fceab4"},
		{"not json \x00\xff", "056bad16abeab8408eb1212eb541e305"},
	} {
		if got := HashMessage([]byte(tc.msg)).String(); got != tc.hash {
			t.Errorf("HashMessage(%q) = %s, stored hashes have %s", tc.msg, got, tc.hash)
		}
		if jsonscan.Valid([]byte(tc.msg)) {
			if got := HashValidMessage([]byte(tc.msg)).String(); got != tc.hash {
				t.Errorf("HashValidMessage(%q) = %s, stored hashes have %s", tc.msg, got, tc.hash)
			}
		}
	}
}
