// Package usermsg turns internal error texts into what a user may read: the
// failing part named in plain words ("the database was unreachable"), and
// no connection string, host, port, database user or name. The full text
// goes to the operator's log (with the request or job id) by the caller;
// api and activities both use this one rule, defined once here.
package usermsg

import (
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// DatabaseUnreachable is the sentence for a failure to reach the
// application database.
const DatabaseUnreachable = "The database was unreachable; the job can be submitted again once the service has recovered."

// dbMarkers are texts of the Postgres and SQLite drivers' connection
// failures (pgconn's "failed to connect to `host=… user=… database=…`",
// a dial error, a server that went away, SQLite's open failure).
var dbMarkers = []string{
	"failed to connect to",
	"connect: connection refused",
	"dial error",
	"dial tcp",
	"server closed the connection unexpectedly",
	"terminating connection due to administrator command",
	"the database system is shutting down",
	"the database system is starting up",
	"sqlstate 57p01",
	"sqlstate 08",
	"conn closed",
	"unable to open database file",
	"driver: bad connection",
	"connection reset by peer",
}

// dbContext marks a text as coming from the database layer (so that a
// network failure in it is the database's, not a method program's).
var dbContext = []string{"host=", "database=", "user=", "postgres", "pgconn", "pgx", "sqlstate", "sql:", "gorm", "sqlite", "store:"}

// IsDatabaseUnreachable reports whether msg is a failure to reach the
// application database.
func IsDatabaseUnreachable(msg string) bool {
	low := strings.ToLower(msg)
	hit := false
	for _, m := range dbMarkers {
		if strings.Contains(low, m) {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	for _, c := range dbContext {
		if strings.Contains(low, c) {
			return true
		}
	}
	return strings.Contains(low, "failed to connect to")
}

// DatabaseDown reports whether err, returned by the store, is a failure to
// reach the database (a refused or dropped connection, a server shutting
// down) rather than an error of the query: by its type where the drivers
// give one, else by its text (IsDatabaseUnreachable).
func DatabaseDown(err error) bool {
	if err == nil {
		return false
	}
	var ce *pgconn.ConnectError
	// Not net.Error: a syscall.Errno satisfies it, so a missing file
	// would read as an outage.
	var ne *net.OpError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, driver.ErrBadConn):
		return true
	case errors.As(err, &pe):
		// Class 08 (connection exception) and 57P0x (operator
		// intervention: shutdown, crash, cannot connect now).
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	}
	return IsDatabaseUnreachable(err.Error())
}

var (
	// A URL with a scheme: connection strings (postgres://user:pw@host/db),
	// service addresses.
	urlRe = regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'"<>]+`)
	// key=value pairs of a libpq connection string.
	kvRe = regexp.MustCompile("(?i)\\b(host|hostaddr|port|user|password|dbname|database|sslmode|sslcert|sslkey|sslrootcert|application_name|target_session_attrs)=[^\\s`'\"]*")
	// An IPv4 address with an optional port, a bracketed IPv6 one, a
	// dotted host name (or localhost) with a port.
	ipv4Re     = regexp.MustCompile(`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b`)
	ipv6Re     = regexp.MustCompile(`\[[0-9a-fA-F:.%a-zA-Z]+\](?::\d{1,5})?`)
	hostPortRe = regexp.MustCompile(`\b(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+):\d{1,5}\b`)
)

// Redact is msg as a user may see it. A failure to reach the database is
// the one sentence DatabaseUnreachable; any other text keeps its words with
// connection strings, connection parameters, addresses and host:port pairs
// replaced by "[server address]".
func Redact(msg string) string {
	if IsDatabaseUnreachable(msg) {
		return DatabaseUnreachable
	}
	out := urlRe.ReplaceAllString(msg, "[server address]")
	out = kvRe.ReplaceAllString(out, "[server address]")
	out = ipv6Re.ReplaceAllString(out, "[server address]")
	out = ipv4Re.ReplaceAllString(out, "[server address]")
	out = hostPortRe.ReplaceAllString(out, "[server address]")
	for strings.Contains(out, "[server address] [server address]") {
		out = strings.ReplaceAll(out, "[server address] [server address]", "[server address]")
	}
	return out
}
