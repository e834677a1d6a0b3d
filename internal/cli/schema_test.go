package cli

import (
	"os"
	"strings"
	"testing"
)

const testDoc = "# x\n\n## `t.a/1` and `t.b/1`\n\n| field | type | meaning |\n|---|---|---|\n" +
	"| `schema` | string | |\n| `n` | integer | |\n| `x` | number? | |\n| `o` | object? | |\n| `o.k` | string | |\n" +
	"\n## Other\n\n| `ignored` | string | |\n"

func TestSchemas(t *testing.T) {
	s, err := Schemas([]byte(testDoc))
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || len(s["t.a/1"]) != 5 || len(s["t.b/1"]) != 5 {
		t.Fatalf("parsed %v", s)
	}
	if f := s["t.a/1"][2]; f.Name != "x" || f.Type != "number" || !f.Optional {
		t.Errorf("field x parsed as %+v", f)
	}
	for _, tc := range []struct {
		out  string
		want string // in the one error; "" for none
	}{
		{`{"schema":"t.a/1","n":3}`, ""},
		{`{"schema":"t.b/1","n":3,"x":1.5,"o":{"k":"v"}}`, ""},
		{`{"schema":"t.a/1"}`, `"n" is missing`},
		{`{"schema":"t.a/1","n":3.5}`, "documented as integer"},
		{`{"schema":"t.a/1","n":3,"extra":true}`, `"extra" is printed but not documented`},
		{`{"schema":"t.a/1","n":3,"o":{}}`, `"o.k" is missing`},
		{`{"schema":"t.c/1"}`, "not documented"},
		{`not json`, "not a JSON object"},
	} {
		_, errs := CheckJSONLines([]byte(testDoc), []byte(tc.out+"\n"))
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.out, errs)
		case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
			t.Errorf("%s: errors %v, want one saying %q", tc.out, errs, tc.want)
		}
	}
}

// docs/json.md documents every schema the tools print; the tools' own
// tests check their output against it.
func TestJSONDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Schemas(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ioatctl.list/2", "ioatctl.copy/1", "ioatctl.verify/1", "ioatctl.overlap/1", "mxbench.pingpong/1", "mxbench.stream/1"} {
		fields := s[name]
		has := map[string]bool{}
		for _, f := range fields {
			has[f.Name] = true
		}
		for _, want := range []string{"schema", "run", "run.tool", "run.version", "run.host", "run.gomaxprocs"} {
			if !has[want] {
				t.Errorf("%s: documents no %q", name, want)
			}
		}
	}
}
