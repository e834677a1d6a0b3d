// Package cli is the one command-line layer of gomx's tools (ioatctl,
// mxbench): how they fail, how they help, and what they say about
// themselves.
//
// # Failing well
//
// A tool's run function returns an error; Report prints it on stderr as one
// line, "tool: problem (fix)", and Code maps it to the exit status: 0 for
// success and for an explicit -h, 2 for a UsageError (a bad flag, a bad
// value, a missing argument: the message says which help to read), 1 for
// anything that went wrong while running. A tool never prints a flag dump
// in answer to a mistake: the one line says what was wrong and how to fix
// it.
//
// # Helping
//
// -h prints the subcommand's synopsis, a description, examples and the
// flags (FlagHelp) on stdout, and exits 0. Version describes the build:
// the module version and the VCS revision debug.ReadBuildInfo records.
//
// # Progress
//
// A Progress line is drawn on stderr only when stderr is a terminal and a
// run has lasted a few seconds; it is erased before a result is printed,
// so it never duplicates results and never reaches a file or a pipe.
//
// # Machine-readable output
//
// Meta is the run metadata every JSON Lines record carries beside its
// schema name and version; docs/json.md documents each record.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
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

// Report prints err on w as one line, "tool: message", unless err is nil
// or a request for help. Line breaks inside the message (errors.Join puts
// them between joined errors) become "; ", so that the line reads whole in
// a log.
func Report(w io.Writer, tool string, err error) {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return
	}
	msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
	msg = strings.ReplaceAll(msg, " ; ", "; ")
	if msg == "" {
		msg = "failed (no detail given)"
	}
	fmt.Fprintf(w, "%s: %s\n", tool, msg)
}
