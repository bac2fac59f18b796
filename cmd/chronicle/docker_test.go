package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileHealthcheck runs the Dockerfile's HEALTHCHECK command as
// written (the real binary in place of /usr/local/bin/chronicle, the
// image's CHRONICLE_LISTEN pointed at a running proxy), since no Docker
// engine is at hand: it must pass against a live proxy and fail with
// nothing listening. It also checks that .dockerignore keeps the history
// and local stores out of the build context.
func TestDockerfileHealthcheck(t *testing.T) {
	raw, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// HEALTHCHECK [options] \ CMD ["..."] (one logical line).
	logical := strings.ReplaceAll(string(raw), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^HEALTHCHECK .*?CMD (\[.*\])\s*$`).FindStringSubmatch(logical)
	if m == nil {
		t.Fatal("Dockerfile has no HEALTHCHECK ... CMD [...] line")
	}
	var argv []string
	if err := json.Unmarshal([]byte(m[1]), &argv); err != nil {
		t.Fatalf("HEALTHCHECK CMD %s: %v", m[1], err)
	}
	if argv[0] != "/usr/local/bin/chronicle" || argv[1] != "healthcheck" {
		t.Fatalf("HEALTHCHECK runs %v", argv)
	}
	if !strings.Contains(string(raw), "CHRONICLE_LISTEN=0.0.0.0:8080") || !strings.Contains(string(raw), "65532") {
		t.Fatal("the Dockerfile no longer sets CHRONICLE_LISTEN=0.0.0.0:8080 or names the nonroot uid")
	}
	url := startCLIProxy(t, nil)
	port := url[strings.LastIndex(url, ":")+1:]
	check := func(listen string) error {
		cmd := exec.Command(binary, argv[1:]...)
		cmd.Env = append(os.Environ(), "CHRONICLE_LISTEN="+listen)
		out, err := cmd.CombinedOutput()
		t.Logf("CHRONICLE_LISTEN=%s: %s", listen, out)
		return err
	}
	if err := check("0.0.0.0:" + port); err != nil {
		t.Fatalf("health check against a live proxy: %v", err)
	}
	if err := check("0.0.0.0:1"); err == nil {
		t.Fatal("health check passed with nothing listening")
	}

	f, err := os.Open("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ignored := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			ignored[l] = true
		}
	}
	for _, p := range []string{".git", "data", "**/data", "**/testdata"} {
		if !ignored[p] {
			t.Errorf(".dockerignore does not exclude %s", p)
		}
	}
	for _, p := range []string{"go.mod", "go.sum", "config.example.yaml", "proxy", "cmd/chronicle", "*.go"} {
		if ignored[p] {
			t.Errorf(".dockerignore excludes %s, which the build needs", p)
		}
	}
}
