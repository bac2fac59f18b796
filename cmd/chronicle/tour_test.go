package main

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeTour is issue 33's item 5: the README's two-minute tour must
// work when pasted. It runs the tour's commands exactly as written, with
// bash -e (so a curl that finds nothing listening fails the tour), in a
// copy of the repository (the tour builds into bin/ and stores in ./data).
// It needs ports 8080 and 9999, bash and curl; without them it skips.
func TestReadmeTour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the tour")
	}
	for _, tool := range []string{"bash", "curl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:9999"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the tour needs %s: %v", addr, err)
		}
		ln.Close()
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	tour := tourScript(t, string(readme))
	dir := copyRepo(t, "../..")
	if err := os.WriteFile(filepath.Join(dir, "tour.sh"), []byte(tour), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "tour.sh")
	cmd.Dir = dir
	// The tour and what it starts in the background are one process
	// group, killed whole when the tour ends (it ends with kill %1 %2, but
	// not if a command fails first) or times out.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Output to a file, not a pipe: the servers left in the background
	// would hold a pipe open, and Run would wait for them.
	outFile, err := os.Create(filepath.Join(t.TempDir(), "tour.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	err = cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	raw, _ := os.ReadFile(outFile.Name())
	out := bytes.NewBuffer(raw)
	if err != nil {
		t.Fatalf("the tour failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{`"object": "chat.completion"`, "data: [DONE]", "did not have response messages: call_1",
		"X-Repaired: 1", "X-Interrupted-Calls: call_1", `"id":"tour-1"`, `"status":"ok"`, "chronicle_runs_total{"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the tour's output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}

// tourScript is the first sh block after the README's tour heading.
func tourScript(t *testing.T, readme string) string {
	t.Helper()
	i := strings.Index(readme, "## A two-minute tour")
	if i < 0 {
		t.Fatal("README has no two-minute tour")
	}
	rest := readme[i:]
	start := strings.Index(rest, "```sh\n")
	if start < 0 {
		t.Fatal("the tour has no sh block")
	}
	rest = rest[start+len("```sh\n"):]
	end := strings.Index(rest, "```")
	if end < 0 {
		t.Fatal("the tour's sh block does not end")
	}
	return rest[:end]
}

// copyRepo copies the repository's files (not .git, bin or data) to a
// temporary directory.
func copyRepo(t *testing.T, root string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		switch rel {
		case ".git", "bin", "data", "docs": // .git is a file in a worktree
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
