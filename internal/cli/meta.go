package cli

import (
	"os"
	"runtime"
)

// Meta is the run metadata every JSON Lines record of gomx's tools carries
// (docs/json.md): which tool and build produced it, where, and with how
// many Ps.
type Meta struct {
	// Tool is "ioatctl" or "mxbench".
	Tool string `json:"tool"`
	// Version is Build.String(): module version and short VCS revision.
	Version string `json:"version"`
	// Go is the toolchain that built the tool.
	Go string `json:"go"`
	// Host is the machine's host name ("" when it cannot be read).
	Host string `json:"host"`
	// GOMAXPROCS is the number of Ps the run had.
	GOMAXPROCS int `json:"gomaxprocs"`
	// NumCPU is the number of CPUs the process may run on.
	NumCPU int `json:"num_cpu"`
}

// NewMeta returns the metadata of this process for tool.
func NewMeta(tool string) Meta {
	h, _ := os.Hostname()
	b := ReadBuild()
	return Meta{Tool: tool, Version: b.String(), Go: b.Go, Host: h,
		GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU()}
}
