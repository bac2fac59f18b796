// Package route holds the one description of chronicle's own HTTP routes
// (/api, /admin) that both serves them and lists them: each handler
// package keeps a table of Routes and dispatches by Match, and the OpenAPI
// document's test compares that table with the document.
package route

import "strings"

// Route is one route: a method and a path pattern in OpenAPI's template
// syntax ("/api/threads/{thread}"), whose {name} segments match any one
// path segment.
type Route struct {
	Method string
	Path   string
}

// Match reports whether a request with method and path segments parts
// (split on "/", the leading and trailing "/" trimmed, after prefix, e.g.
// "/api") fits r, and returns the values of r's {name} segments in order.
// It allocates only the returned values.
func (r Route) Match(prefix, method string, parts []string) ([]string, bool) {
	if method != r.Method {
		return nil, false
	}
	pat, ok := strings.CutPrefix(r.Path, prefix+"/")
	if !ok {
		return nil, false
	}
	var vals []string
	for i := 0; ; i++ {
		var seg string
		var more bool
		seg, pat, more = strings.Cut(pat, "/")
		if i >= len(parts) {
			return nil, false
		}
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			vals = append(vals, parts[i])
		} else if seg != parts[i] {
			return nil, false
		}
		if !more {
			if i+1 != len(parts) {
				return nil, false
			}
			return vals, true
		}
	}
}
