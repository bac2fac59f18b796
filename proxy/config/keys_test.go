package config

import (
	"reflect"
	"strings"
)

// yamlKeys lists the yaml key names of every field reachable from v.
func yamlKeys(v any) []string {
	var out []string
	var walk func(t reflect.Type)
	seen := map[reflect.Type]bool{}
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			out = append(out, tag)
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(v))
	return out
}
