package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkTree walks a decoded YAML document against the Config type before it
// is decoded, and reports every key the type has no field for and every
// value of the wrong kind, each with its key path
// (`connections[0] (a).timeout: unknown key`). yaml's own strict mode stops
// at the first unknown key; this finds them all. It takes the offending
// nodes out of the tree (an unknown key is removed, a bad value becomes
// null, so defaults apply), so the decode that follows sees only what it
// can take and validation still reports the rest.
func checkTree(doc *yaml.Node) []error {
	var errs []error
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if n.Kind == 0 || isNull(n) {
		return nil
	}
	if !checkNode(n, reflect.TypeOf(Config{}), "", &errs) {
		errs = append(errs, fmt.Errorf("the file must be a mapping of keys (listen:, store:, connections: ...) (line %d)", n.Line))
		*n = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	return errs
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// checkNode checks n against t, at key path path. It reports false when n
// cannot be decoded into t at all; the caller then reports it (with its key)
// and replaces it with null.
func checkNode(n *yaml.Node, t reflect.Type, path string, errs *[]error) bool {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if isNull(n) {
		return true
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || (t.Kind() != reflect.Struct && t.Kind() != reflect.Slice && t.Kind() != reflect.Map) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %s (line %d)", path, valueProblem(n, t, err), n.Line))
			nullify(n)
		}
		return true
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return bad(n, path, "want a mapping of keys", errs)
		}
		fields := yamlFields(t)
		kept := n.Content[:0]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, fmt.Errorf("%s: unknown key (line %d)", join(path, k.Value), k.Line))
				continue
			}
			checkNode(v, f, join(path, k.Value), errs)
			kept = append(kept, k, v)
		}
		n.Content = kept
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return bad(n, path, "want a list", errs)
		}
		for i, el := range n.Content {
			checkNode(el, t.Elem(), fmt.Sprintf("%s[%d]%s", path, i, nameOf(el)), errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return bad(n, path, "want a mapping", errs)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkNode(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), errs)
		}
	}
	return true
}

// bad reports a value of the wrong shape and makes it null; at the top
// level (no path) it leaves the report to checkTree.
func bad(n *yaml.Node, path, want string, errs *[]error) bool {
	if path == "" {
		return false
	}
	*errs = append(*errs, fmt.Errorf("%s: %s, got %s (line %d)", path, want, kindName(n), n.Line))
	nullify(n)
	return true
}

func nullify(n *yaml.Node) {
	line, col := n.Line, n.Column
	*n = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "", Line: line, Column: col}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// nameOf labels a list element by its name key, as Validate labels
// connections: " (openai)".
func nameOf(n *yaml.Node) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == yaml.ScalarNode && n.Content[i+1].Value != "" {
			return " (" + n.Content[i+1].Value + ")"
		}
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// valueProblem words why a scalar does not fit t: the type's own message
// (Duration says what it wants), or what kind of value the key takes.
func valueProblem(n *yaml.Node, t reflect.Type, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	var want string
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "want a whole number"
	case reflect.Float32, reflect.Float64:
		want = "want a number"
	case reflect.Bool:
		want = "want true or false"
	case reflect.String:
		want = "want a string"
	default:
		return strings.Join(te.Errors, "; ")
	}
	return want + ", got " + kindName(n)
}

// yamlFields maps t's yaml keys to their field types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		out[tag] = f.Type
	}
	return out
}
