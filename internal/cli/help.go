package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Help is what a subcommand's -h says besides its flags.
type Help struct {
	Tool    string   // "ioatctl"
	Name    string   // "copy"
	Args    string   // synopsis of the arguments, "[--size S] ..."
	Summary string   // one line, no final period
	Notes   string   // prose, lines ending in "\n"; may be empty
	Example []string // command lines, each followed by "  # what it does" when useful
}

// Print writes the help, then the flags of fs, on w.
func (h Help) Print(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s %s %s\n\n%s.\n", h.Tool, h.Name, h.Args, capitalize(h.Summary))
	if h.Notes != "" {
		fmt.Fprintf(w, "\n%s", h.Notes)
	}
	if len(h.Example) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range h.Example {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if fs != nil {
		fmt.Fprintf(w, "\nFlags (one or two dashes):\n")
		FlagHelp(w, fs)
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// FlagHelp writes the flags of fs on w, two lines each: the flag and its
// argument (a backquoted word of the usage, as flag.UnquoteUsage finds it,
// or the Placeholder() of a Value that has one), then its usage with the default when that is not a zero value
// and the usage does not already state it. Unlike flag.PrintDefaults it
// never prints "(default -1)" beside a usage that explains the default.
func FlagHelp(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		if p, ok := f.Value.(interface{ Placeholder() string }); ok && arg == "value" {
			arg = p.Placeholder()
		}
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintf(w, "%s\n        %s", line, usage)
		switch f.DefValue {
		case "", "0", "false", "0s", "[]", "0 B":
		default:
			if !strings.Contains(usage, "(default") {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
		}
		fmt.Fprintln(w)
	})
}

// NewFlags returns a FlagSet for a subcommand that reports errors instead
// of printing or exiting: ParseFlags prints the help.
func NewFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// ParseFlags parses args with fs, allowing flags after positional
// arguments ("bind 0000:00:04.0 --all"), and returns the positional
// arguments. On -h it prints h and the flags on stdout and returns
// flag.ErrHelp; a bad flag or value is a UsageError of h's tool and
// subcommand.
func ParseFlags(stdout io.Writer, h Help, fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				h.Print(stdout, fs)
				return nil, err
			}
			return nil, &UsageError{Tool: h.Tool, Cmd: h.Name, Err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
