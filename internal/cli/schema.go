package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
)

// Field is one documented field of a JSON record: its dotted name
// ("run.tool"), its type (string, number, integer, boolean, object) and
// whether it may be left out.
type Field struct {
	Name     string
	Type     string
	Optional bool
}

var (
	schemaHeading = regexp.MustCompile("^##+ .*`([a-z]+\\.[a-z]+/[0-9]+)`")
	schemaName    = regexp.MustCompile("`([a-z]+\\.[a-z]+/[0-9]+)`")
	fieldRow      = regexp.MustCompile("^\\| `([a-z0-9_.]+)` \\| ([a-z]+)(\\??) \\|")
)

// Schemas reads the schema tables of docs/json.md: each heading that names
// schemas in backquotes ("## `mxbench.pingpong/1` and `mxbench.stream/1`")
// starts a table of "| `field` | type | meaning |" rows that applies to all
// of them.
func Schemas(doc []byte) (map[string][]Field, error) {
	out := map[string][]Field{}
	var current []string
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			current = nil
			if schemaHeading.MatchString(line) {
				for _, m := range schemaName.FindAllStringSubmatch(line, -1) {
					current = append(current, m[1])
				}
			}
			continue
		}
		m := fieldRow.FindStringSubmatch(line)
		if m == nil || current == nil {
			continue
		}
		switch m[2] {
		case "string", "number", "integer", "boolean", "object":
		default:
			return nil, fmt.Errorf("field %s: unknown type %q", m[1], m[2])
		}
		for _, s := range current {
			out[s] = append(out[s], Field{Name: m[1], Type: m[2], Optional: m[3] == "?"})
		}
	}
	return out, sc.Err()
}

// CheckJSONLines checks tool output against the documented schemas: every
// line is one JSON object whose schema is documented, every field it has is
// documented with the right type, and every field not marked optional is
// there (an optional object's own fields only when the object is). It
// returns the schemas seen and every discrepancy.
func CheckJSONLines(doc, out []byte) (seen []string, errs []error) {
	schemas, err := Schemas(doc)
	if err != nil {
		return nil, []error{err}
	}
	got := map[string]bool{}
	for i, line := range bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			errs = append(errs, fmt.Errorf("line %d is not a JSON object: %v: %s", i+1, err, line))
			continue
		}
		name, _ := rec["schema"].(string)
		fields, ok := schemas[name]
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: schema %q is not documented", i+1, name))
			continue
		}
		got[name] = true
		flat := map[string]any{}
		flatten("", rec, flat)
		doc := map[string]Field{}
		for _, f := range fields {
			doc[f.Name] = f
		}
		for k, v := range flat {
			f, ok := doc[k]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s: field %q is printed but not documented", name, k))
			case !typeOK(f.Type, v):
				errs = append(errs, fmt.Errorf("%s: field %q is %T %v, documented as %s", name, k, v, v, f.Type))
			}
		}
		for _, f := range fields {
			if _, ok := flat[f.Name]; ok || f.Optional {
				continue
			}
			parent, _, nested := strings.Cut(f.Name, ".")
			if nested && doc[parent].Optional {
				if _, there := flat[parent]; !there {
					continue
				}
			}
			errs = append(errs, fmt.Errorf("%s: documented field %q is missing", name, f.Name))
		}
	}
	for s := range got {
		seen = append(seen, s)
	}
	sort.Strings(seen)
	return seen, errs
}

// flatten records every field of rec under its dotted name, objects
// included.
func flatten(prefix string, rec map[string]any, out map[string]any) {
	for k, v := range rec {
		name := prefix + k
		out[name] = v
		if m, ok := v.(map[string]any); ok {
			flatten(name+".", m, out)
		}
	}
}

func typeOK(typ string, v any) bool {
	switch typ {
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		x, ok := v.(float64)
		return ok && x == math.Trunc(x)
	}
	return false
}
