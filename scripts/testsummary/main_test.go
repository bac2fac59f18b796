package main

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	stream := `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestOK"}
{"Action":"output","Package":"a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"a","Test":"TestOK","Elapsed":0.01}
{"Action":"run","Package":"a","Test":"TestBad"}
{"Action":"output","Package":"a","Test":"TestBad","Output":"    a_test.go:9: wrong answer\n"}
{"Action":"fail","Package":"a","Test":"TestBad","Elapsed":0.01}
{"Action":"skip","Package":"a","Test":"TestLater","Elapsed":0}
{"Action":"output","Package":"a","Output":"FAIL\n"}
{"Action":"fail","Package":"a","Elapsed":0.5}
{"Action":"pass","Package":"b","Test":"TestB"}
{"Action":"pass","Package":"b","Elapsed":1.25}
{"Action":"output","Package":"c","Output":"?   \tc\t[no test files]\n"}
{"Action":"skip","Package":"c","Elapsed":0}
{"ImportPath":"d [d.test]","Action":"build-output","Output":"d/x_test.go:3:1: syntax error\n"}
{"ImportPath":"d [d.test]","Action":"build-fail"}
{"Action":"output","Package":"d","Output":"FAIL\td [build failed]\n"}
{"Action":"fail","Package":"d","Elapsed":0,"FailedBuild":"d [d.test]"}
`
	var out strings.Builder
	c, err := summarize(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	if c.passed != 2 || c.failed != 1 || c.skipped != 1 || c.pkgOK != 1 || c.pkgFailed != 2 || c.pkgNoTests != 1 {
		t.Fatalf("counts %+v", c)
	}
	for _, want := range []string{
		"a_test.go:9: wrong answer", "ok  \tb\t1.250s", "syntax error", "d [build failed]",
		"== 2 tests passed, 1 skipped, 1 failed; 1 packages ok, 2 failed, 1 without tests", "FAIL a TestBad",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "=== RUN   TestOK") {
		t.Errorf("a passing test's output was printed:\n%s", out.String())
	}
}
