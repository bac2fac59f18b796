package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
)

// TestHelpExitsZero is issue 33's item 12: `chronicle threads --help` (and
// each command's) printed an error and exited 2; help goes to stdout and
// exits 0, from the real binary.
func TestHelpExitsZero(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "chronicle threads ls|show|export|rm|prune"},
		{[]string{"subjects", "--help"}, "chronicle subjects rm"},
		{[]string{"tombstones", "--help"}, "chronicle tombstones"},
		{[]string{"threads", "--help"}, "chronicle threads export [source]"},
		{[]string{"threads", "-h"}, "chronicle threads export [source]"},
		{[]string{"threads", "help"}, "chronicle threads export [source]"},
		{[]string{"threads", "ls", "--help"}, "-tenant string"},
		{[]string{"threads", "show", "-h"}, "chronicle threads show"},
		{[]string{"threads", "export", "--help"}, "-o string"},
		{[]string{"threads", "rm", "acme", "t1", "--help"}, "chronicle threads rm"},
		{[]string{"serve", "--help"}, "usage: chronicle serve"},
		{[]string{"serve", "-h"}, "-config string"},
		{[]string{"repair", "--help"}, "usage: chronicle repair"},
		{[]string{"healthcheck", "--help"}, "usage: chronicle healthcheck"},
		{[]string{"keys", "--help"}, "chronicle keys rewrap --config FILE"},
		{[]string{"keys", "rewrap", "-h"}, "-config string"},
	}
	for _, c := range cases {
		cmd := exec.Command(binary, c.args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil || !strings.Contains(out.String(), c.want) || errb.Len() != 0 {
			t.Errorf("%v: %v\nstdout: %s\nstderr: %s", c.args, err, out.String(), errb.String())
		}
	}
	// A flag that does not exist is still an error: exit 2, usage on stderr.
	for _, args := range [][]string{{"threads", "ls", "--nope"}, {"serve", "--nope"}, {"healthcheck", "--nope"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "flag provided but not defined") || !strings.Contains(errOut, "usage:") {
			t.Errorf("%v: %d %q %q", args, code, out, errOut)
		}
	}
}

// TestHealthcheck: `chronicle healthcheck` is the container's health check
// (distroless has no curl): exit 0 when the proxy's /healthz answers 200,
// 1 when it answers otherwise or nothing listens.
func TestHealthcheck(t *testing.T) {
	url := startCLIProxy(t, nil)
	code, out, errOut := runCLI(t, "healthcheck", "--url", url+"/healthz")
	if code != 0 || !strings.Contains(out, `"status":"ok"`) {
		t.Fatalf("healthy proxy: %d %q %q", code, out, errOut)
	}
	// The default URL follows CHRONICLE_LISTEN, as the image sets it.
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	t.Setenv("CHRONICLE_LISTEN", "0.0.0.0:"+port)
	if code, out, errOut := runCLI(t, "healthcheck"); code != 0 || !strings.Contains(out, `"status":"ok"`) {
		t.Fatalf("default URL from CHRONICLE_LISTEN=0.0.0.0:%s (%s): %d %q %q", port, host, code, out, errOut)
	}
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"status":"draining"}`, http.StatusServiceUnavailable)
	}))
	defer sick.Close()
	if code, _, errOut := runCLI(t, "healthcheck", "--url", sick.URL+"/healthz"); code != 1 || !strings.Contains(errOut, "503") {
		t.Fatalf("503: %d %q", code, errOut)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	if code, _, errOut := runCLI(t, "healthcheck", "--url", "http://"+addr+"/healthz"); code != 1 || !strings.Contains(errOut, "refused") {
		t.Fatalf("nothing listening: %d %q", code, errOut)
	}
	for listen, want := range map[string]string{
		"": "http://127.0.0.1:8080/healthz", "0.0.0.0:9000": "http://127.0.0.1:9000/healthz",
		"[::]:9001": "http://127.0.0.1:9001/healthz", "10.0.0.2:80": "http://10.0.0.2:80/healthz", "nonsense": "http://127.0.0.1:8080/healthz",
	} {
		if got := defaultHealthURL(listen); got != want {
			t.Errorf("defaultHealthURL(%q) = %q, want %q", listen, got, want)
		}
	}
}
