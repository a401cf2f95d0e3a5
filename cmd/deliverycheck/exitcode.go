package main

import "fmt"

// Exit codes. A run's verdict maps to 0/1/2 so CI can tell "the pipeline
// broke its promise" from "we could not tell"; everything that is the
// harness's own failure gets its own code so it is never mistaken for a
// verdict.
const (
	exitValid    = 0
	exitInvalid  = 1
	exitUnknown  = 2
	exitBadInput = 3 // malformed history, scenario or flags
	exitHarness  = 4 // the harness itself failed (a server did not start, ...)
)

// exitCodeError carries the process exit code a command wants, with an
// optional error to print.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCodeError) Unwrap() error { return e.err }

// ExitCode is the code the process should exit with.
func (e *exitCodeError) ExitCode() int { return e.code }

// withCode wraps err so main exits with code.
func withCode(code int, err error) error { return &exitCodeError{code: code, err: err} }
