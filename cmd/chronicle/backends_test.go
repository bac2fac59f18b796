package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
)

// TestOpenStoreKeepsTheURLOut: a Redis store that cannot be opened is
// reported under its key, store.url, never with the URL (and its
// password) in the message.
func TestOpenStoreKeepsTheURLOut(t *testing.T) {
	const password = "hunter2-not-logged"
	cfg, err := config.Parse([]byte(`
store: {driver: redis, url: "redis://:`+password+`@127.0.0.1:1/0"}
connections:
  - {name: a, provider: openai, base_url: "http://127.0.0.1:1"}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := openStore(ctx, cfg, nil)
	if err == nil {
		st.Close()
		t.Fatal("a Redis store on a closed port opened")
	}
	if !strings.HasPrefix(err.Error(), "store.url: ") || strings.Contains(err.Error(), password) {
		t.Fatalf("error %q", err)
	}
}

func TestRedactURLError(t *testing.T) {
	const url = "redis://:pw@host:6379/0"
	err := redactURLError(errors.New("dial "+url+": refused"), url)
	if got, want := err.Error(), "dial [store.url]: refused"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if err := redactURLError(errors.New("other"), url); err.Error() != "other" {
		t.Fatalf("an error without the URL changed: %q", err)
	}
}
