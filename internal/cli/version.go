package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Build describes the binary: what debug.ReadBuildInfo recorded when it was
// built.
type Build struct {
	// Module is the main module's path, e.g. github.com/gomx-dev/gomx.
	Module string `json:"module"`
	// Version is the module version: a tag such as v0.1.0 when installed
	// with `go install ...@version`, a pseudo-version, or "(devel)" when
	// built from a checkout.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, "" when the
	// build did not record one (built outside a checkout, -buildvcs=false,
	// or installed from the module proxy, which records the version only).
	Revision string `json:"revision,omitempty"`
	// Time is the commit time of Revision, RFC 3339.
	Time string `json:"time,omitempty"`
	// Modified is true when the checkout had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
}

// ReadBuild returns the binary's build description. It never fails: what
// the build did not record is left empty (Version "unknown" when there is no
// build information at all).
func ReadBuild() Build {
	b := Build{Version: "unknown", Go: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Module, b.Version = bi.Main.Path, bi.Main.Version
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the version in one word, for JSON metadata: the module version,
// and the short revision when there is one ("(devel)+a46c2ef3c1d2-dirty").
func (b Build) String() string {
	s := b.Version
	if b.Revision != "" {
		r := b.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		s += "+" + r
		if b.Modified {
			s += "-dirty"
		}
	}
	return s
}

// PrintVersion writes the answer of a tool's version subcommand: the tool,
// module version, revision and toolchain, one per line.
func PrintVersion(w io.Writer, tool string) {
	b := ReadBuild()
	fmt.Fprintf(w, "%s %s\n", tool, b.Version)
	if b.Module != "" {
		fmt.Fprintf(w, "module:   %s\n", b.Module)
	}
	switch {
	case b.Revision != "":
		rev := b.Revision
		if b.Modified {
			rev += " (with uncommitted changes)"
		}
		if b.Time != "" {
			rev += ", committed " + b.Time
		}
		fmt.Fprintf(w, "revision: %s\n", rev)
	default:
		fmt.Fprintf(w, "revision: not recorded (built outside a git checkout, with -buildvcs=false, or installed by version)\n")
	}
	fmt.Fprintf(w, "go:       %s %s/%s\n", b.Go, runtime.GOOS, runtime.GOARCH)
}
