// Package cli holds what gomx's command-line tools share about failing
// well: usage errors that say which help to read, and the mapping of an
// error to the process exit status (0 success or an explicit -h, 2 a usage
// error, 1 anything else).
package cli

import (
	"errors"
	"flag"
	"fmt"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError is an error in the command line: a bad flag, a bad value, a
// missing argument. Its message ends with where to read the usage.
type UsageError struct {
	Tool string // the command, e.g. "mxbench"
	Cmd  string // the subcommand, "" for the top level
	Err  error
}

// Error implements error.
func (e *UsageError) Error() string {
	hint := "run `" + e.Tool + " help` for the subcommands"
	if e.Cmd != "" {
		hint = "run `" + e.Tool + " " + e.Cmd + " -h` for its flags"
	}
	return e.Err.Error() + " (" + hint + ")"
}

// Unwrap returns the underlying error.
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError of tool's subcommand cmd.
func Usagef(tool, cmd, format string, args ...any) error {
	return &UsageError{Tool: tool, Cmd: cmd, Err: fmt.Errorf(format, args...)}
}

// Code maps a command's error to its exit status: ExitOK for success and
// for an explicit request for help (flag.ErrHelp), ExitUsage for a
// UsageError, ExitFailure for anything else.
func Code(err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	}
	return ExitFailure
}
