// Package input parses and validates what users send to kinflow: the CSV
// upload or JSON `data` table, the submit and validate options, and the
// residue and chemistry content of each row (docs/input.md).
//
// It is pure: no database, no HTTP framework. The API calls it to answer
// /validate/ and /submit/, and the job worker calls it for run-time row
// validation (the skip reasons). Chemistry checks use a Go SMILES/InChI
// syntax checker that always runs and, when Debian's python3-rdkit is
// installed, a long-lived RDKit helper process (see Chemistry).
package input

import (
	"errors"
	"fmt"
	"net/http"
)

// Kind classifies an input error so the API can map it to a status code.
type Kind int

const (
	// KindInvalid is a malformed or unacceptable request: HTTP 400.
	KindInvalid Kind = iota
	// KindTooManyRows is a table with more rows than the configured maximum.
	// /validate/ and /submit/ answer it with 400.
	KindTooManyRows
	// KindTooLarge is a body that exceeded the byte limit the caller set with
	// http.MaxBytesReader: HTTP 413.
	KindTooLarge
)

// Error is every user-facing error of this package. Msg is safe to show to
// the caller as the `error` field of the JSON body.
type Error struct {
	Kind Kind
	Msg  string
	// Err is the underlying cause, if any; it is never shown to the caller.
	Err error
}

// Error implements error; it is the user-facing message (the cause is
// reachable through Unwrap, for logs).
func (e *Error) Error() string { return e.Msg }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Status is the HTTP status the API answers this error with.
func (e *Error) Status() int {
	switch e.Kind {
	case KindTooLarge:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusBadRequest
	}
}

func invalidf(format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Msg: fmt.Sprintf(format, args...)}
}

// readErr turns an error from reading the request body into an *Error:
// a body over the caller's http.MaxBytesReader limit becomes KindTooLarge.
func readErr(prefix string, err error) *Error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Error{Kind: KindTooLarge, Msg: fmt.Sprintf("Request body is larger than the limit of %d bytes.", mbe.Limit), Err: err}
	}
	return &Error{Kind: KindInvalid, Msg: prefix + err.Error(), Err: err}
}

// AsError returns err as an *Error when it is (or wraps) one.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}
