// Command testsummary reads `go test -json` on stdin and prints what
// `go test` prints (a line per package; the output of each failing test
// and of each package that failed to build), then one line of counts:
//
//	== 1234 tests passed, 12 skipped, 0 failed; 25 packages ok, 0 failed, 3 without tests
//
// It exits 1 if any test or package failed, or if the stream held
// nothing. scripts/test pipes the race run through it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of test2json's output (go doc cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

type counts struct {
	passed, failed, skipped          int
	pkgOK, pkgFailed, pkgNoTests     int
	failedTests, failedPkgs, summary []string
}

func main() {
	c, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if c.failed > 0 || c.pkgFailed > 0 || c.pkgOK+c.pkgNoTests == 0 {
		os.Exit(1)
	}
}

func summarize(r io.Reader, w io.Writer) (*counts, error) {
	var c counts
	// Output held per test (and per package, key "pkg\x00") until the test
	// ends: printed only when it failed.
	held := map[string]*strings.Builder{}
	hold := func(key, s string) {
		b := held[key]
		if b == nil {
			b = &strings.Builder{}
			held[key] = b
		}
		b.WriteString(s)
	}
	take := func(key string) string {
		b := held[key]
		delete(held, key)
		if b == nil {
			return ""
		}
		return b.String()
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not test2json (a build error printed as is): pass it on.
			fmt.Fprintf(w, "%s\n", line)
			continue
		}
		pkg := e.Package
		if pkg == "" {
			pkg = e.ImportPath
		}
		key := pkg + "\x00" + e.Test
		switch e.Action {
		case "output", "build-output":
			hold(key, e.Output)
		case "pass", "fail", "skip":
			out := take(key)
			if e.Test != "" {
				switch e.Action {
				case "pass":
					c.passed++
				case "skip":
					c.skipped++
				case "fail":
					c.failed++
					c.failedTests = append(c.failedTests, pkg+" "+e.Test)
					io.WriteString(w, out)
				}
				continue
			}
			switch {
			case e.Action == "fail":
				c.pkgFailed++
				c.failedPkgs = append(c.failedPkgs, pkg)
				io.WriteString(w, out)
			case strings.Contains(out, "[no test files]") || e.Action == "skip":
				c.pkgNoTests++
			default:
				c.pkgOK++
				fmt.Fprintf(w, "ok  \t%s\t%.3fs\n", pkg, e.Elapsed)
			}
		case "build-fail":
			io.WriteString(w, take(key))
		}
	}
	if err := sc.Err(); err != nil {
		return &c, err
	}
	fmt.Fprintf(w, "== %d tests passed, %d skipped, %d failed; %d packages ok, %d failed, %d without tests\n",
		c.passed, c.skipped, c.failed, c.pkgOK, c.pkgFailed, c.pkgNoTests)
	for _, t := range c.failedTests {
		fmt.Fprintf(w, "FAIL %s\n", t)
	}
	return &c, nil
}
