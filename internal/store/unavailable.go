package store

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err says the database could not be reached
// or was going away (refused or reset connections, a server shutting down
// or starting up), as opposed to an error of the statement: what a caller
// may ride out by waiting.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exception; 57P01-03: admin/crash shutdown,
		// cannot connect now.
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	m := strings.ToLower(err.Error())
	for _, s := range []string{"connection refused", "connection reset", "broken pipe", "conn closed", "unexpected eof",
		"the database system is shutting down", "the database system is starting up", "failed to connect", "terminating connection"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// UnavailableText is a narrow Unavailable for an error's text alone (a
// step's message that crossed Temporal): only the driver's own words for a
// database it could not reach, never a generic network failure of
// something else.
func UnavailableText(msg string) bool {
	m := strings.ToLower(msg)
	for _, s := range []string{"failed to connect to `user=", "the database system is shutting down", "the database system is starting up",
		"(sqlstate 08", "(sqlstate 57p01)", "(sqlstate 57p02)", "(sqlstate 57p03)"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}
