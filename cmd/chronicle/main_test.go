package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
)

// binary is the chronicle binary built once for the tests that run it as a
// real process (signals, exit codes).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chronicle-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "chronicle")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chronicle.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "chronicle ") {
		t.Fatalf("version: code %d, out %q", code, out.String())
	}
}

func TestInvalidConfigExitsNamingKey(t *testing.T) {
	path := writeConfig(t, "listen: nope\nconnections: [{name: a, provider: claude, base_url: 'http://x'}]\n")
	cmd := exec.Command(binary, "serve", "--config", path)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("chronicle started with an invalid config")
	}
	for _, want := range []string{"listen:", "connections[0] (a).provider"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not name %q:\n%s", want, out)
		}
	}
}

func TestConfigFromEnvironment(t *testing.T) {
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(os.Environ(), "CHRONICLE_CONFIG="+filepath.Join(t.TempDir(), "missing.yaml"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "missing.yaml") {
		t.Fatalf("CHRONICLE_CONFIG not used: %v\n%s", err, out)
	}
}

// process is a chronicle binary running for a test, with its log lines.
type process struct {
	cmd   *exec.Cmd
	lines chan string
	addr  string
}

var listenLine = regexp.MustCompile(`msg="chronicle listening" addr=(\S+)`)

func startChronicle(t *testing.T, config string) *process {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--config", writeConfig(t, config))
	// A working directory of its own: relative paths (the spool's
	// ./spool, say) are then the process's alone, and never land in the
	// source tree.
	cmd.Dir = t.TempDir()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &process{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	p.addr = p.waitLine(t, listenLine)[1]
	return p
}

// waitLine reads log lines until one matches re (or the process's log ends).
func (p *process) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	for line := range p.lines {
		if m := re.FindStringSubmatch(line); m != nil {
			return m
		}
	}
	t.Fatalf("log ended before a line matching %s", re)
	return nil
}

// TestSIGTERMDrainsStream: on SIGTERM chronicle stops taking new work but
// lets a stream in flight finish, then exits 0.
func TestSIGTERMDrainsStream(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := startChronicle(t, `
listen: 127.0.0.1:0
store: {path: `+t.TempDir()+`}
limits: {shutdown_timeout: 60s}
connections:
  - {name: openai, provider: openai, base_url: "`+m.URL()+`"}
`)
	req, _ := http.NewRequest("POST", "http://"+p.addr+"/openai/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("X-Mock-Gate", "drain")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(first, "data:") {
		t.Fatalf("first line %q, %v", first, err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, regexp.MustCompile(`msg=draining`))
	m.Release("drain") // the stream in flight may now finish
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("stream cut by shutdown: %v", err)
	}
	if !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("stream did not finish:\n%s", rest)
	}
	p.waitLine(t, regexp.MustCompile(`msg=stopped`))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("chronicle did not exit after draining")
	}
}
