package apierr

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// codes lists the Code constants declared in codes.go.
func codes(t *testing.T) []Code {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []Code
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			lit := v.Values[0].(*ast.BasicLit).Value
			out = append(out, Code(strings.Trim(lit, `"`)))
		}
	}
	if len(out) < 30 {
		t.Fatalf("found %d codes in codes.go; the parser missed some", len(out))
	}
	return out
}

func TestEveryCodeHasAStatus(t *testing.T) {
	seen := map[Code]bool{}
	for _, c := range codes(t) {
		if seen[c] {
			t.Errorf("code %q is declared twice", c)
		}
		seen[c] = true
		if _, ok := table[c]; !ok {
			t.Errorf("code %q has no status in table", c)
		}
	}
	if len(table) != len(seen) {
		t.Errorf("table has %d entries, codes.go declares %d codes", len(table), len(seen))
	}
}

// TestREADMEListsEveryCode keeps the README's error table (the HTTP
// contract) in step with the codes the proxy answers with.
func TestREADMEListsEveryCode(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(readme), "\n## Errors\n")
	if i < 0 {
		t.Fatal("README has no Errors section")
	}
	section := string(readme[i:])
	if j := strings.Index(section[1:], "\n## "); j >= 0 {
		section = section[:j+1]
	}
	for _, c := range codes(t) {
		if !strings.Contains(section, "`"+string(c)+"`") {
			t.Errorf("README's Errors section does not list %q", c)
		}
	}
}

type fakeShape struct{}

func (fakeShape) ErrorBody(status int, code, message string) []byte {
	return []byte(`{"status":` + itoa(status) + `,"code":"` + code + `","message":"` + message + `"}`)
}

func (fakeShape) StreamErrorEvent(status int, code, message string) []byte {
	return []byte("data: " + code + "\n\n")
}

func itoa(n int) string {
	var b [8]byte
	i := len(b)
	for n > 0 || i == len(b) {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name       string
		err        *Error
		wantStatus int
		wantRetry  string
		wantBody   string
	}{
		{"plain", New(ThreadNotFound, "No such thread."), 404, "", `{"status":404,"code":"thread_not_found","message":"No such thread."}`},
		{"retry", Retry(ThreadBusy, 3, "Busy."), 409, "3", `{"status":409,"code":"thread_busy","message":"Busy."}`},
		{"retry at least 1", Retry(QueueFull, 0, "Full."), 429, "1", `{"status":429,"code":"queue_full","message":"Full."}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Response.Header.Set("X-Stale", "1")
			Write(&ctx, fakeShape{}, tt.err)
			if got := ctx.Response.StatusCode(); got != tt.wantStatus {
				t.Errorf("status %d, want %d", got, tt.wantStatus)
			}
			if got := string(ctx.Response.Header.Peek("Retry-After")); got != tt.wantRetry {
				t.Errorf("Retry-After %q, want %q", got, tt.wantRetry)
			}
			if got := string(ctx.Response.Header.Peek("X-Stale")); got != "" {
				t.Errorf("a header of the answer it replaced survived: %q", got)
			}
			if got := string(ctx.Response.Body()); got != tt.wantBody {
				t.Errorf("body %s, want %s", got, tt.wantBody)
			}
		})
	}
}

func TestUpstream(t *testing.T) {
	if got := Upstream(fasthttp.ErrTimeout).Code; got != UpstreamTimeout {
		t.Errorf("timeout → %s, want %s", got, UpstreamTimeout)
	}
	if got := Upstream(fasthttp.ErrConnectionClosed).Code; got != UpstreamUnavailable {
		t.Errorf("closed → %s, want %s", got, UpstreamUnavailable)
	}
	if got := Upstream(fasthttp.ErrConnectionClosed).Status(); got != 502 {
		t.Errorf("closed → status %d, want 502", got)
	}
}

func TestAs(t *testing.T) {
	def := New(BadRequest, "default")
	if got := As(New(InvalidJSON, "x"), def); got.Code != InvalidJSON {
		t.Errorf("As kept %s, want %s", got.Code, InvalidJSON)
	}
	if got := As(os.ErrNotExist, def); got != def {
		t.Errorf("As of a foreign error = %v, want the default", got)
	}
}
