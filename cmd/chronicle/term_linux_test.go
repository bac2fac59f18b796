package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the controlling side, and the terminal
// a program writes to.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ptmx, tty
}

// runOnTerminal runs the command with stderr on a real terminal and returns
// what the terminal received.
func runOnTerminal(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	// Raw mode: the terminal passes \r and \n through untranslated.
	termios, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	termios.Oflag &^= unix.OPOST
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, termios); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, ptmx) // ends with EIO once the terminal is closed
		got <- b.String()
	}()
	var out bytes.Buffer
	code := run(args, &out, tty)
	tty.Close()
	return code, <-got
}

func TestIsTerminal(t *testing.T) {
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	defer tty.Close()
	if !isTerminal(tty) {
		t.Error("a pseudo-terminal is not a terminal")
	}
	f, err := os.CreateTemp(t.TempDir(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"file": f, "pipe": w} {
		if isTerminal(f) {
			t.Errorf("a %s is a terminal", name)
		}
	}
}

// TestThreadsExportProgressOnTerminal: with stderr on a terminal, export -o
// draws its progress bar (with stderr elsewhere it writes one line at the
// end: TestThreadsExportAndRm).
func TestThreadsExportProgressOnTerminal(t *testing.T) {
	sources(t, 40, func(t *testing.T, src []string) {
		file := filepath.Join(t.TempDir(), "out.jsonl")
		code, errOut := runOnTerminal(t, append([]string{"threads", "export", "-o", file, "--tenant", "bulk"}, src...)...)
		if code != 0 || !strings.Contains(errOut, "\rexport [##############################] 40/40 threads") {
			t.Fatalf("progress bar: %d %q", code, errOut)
		}
		// A text filter: the total is unknown, the count still shows.
		code, errOut = runOnTerminal(t, append([]string{"threads", "export", "-o", file, "--q", "bulk message 7"}, src...)...)
		if code != 0 || !strings.Contains(errOut, "\rexport 1 threads") {
			t.Fatalf("export --q: %d %q", code, errOut)
		}
	})
}
