// Package seqmapfile writes kinflow's sequence ids into the reference
// deployment's sequence map file, <media root>/sequence_info/seqmap.sqlite3.
//
// The methods' own programs (the reference's scripts, run by the command
// engine) find each sequence's id in that file, through the reference's
// seqmap tool (get-or-create by SHA-256) or by reading it directly, and then
// read the sequence's cached files by that id. kinflow keeps its ids in its
// own database; before a program runs, Write puts the ids of the program's
// sequences into the file, so the program finds kinflow's ids and reads the
// files kinflow's cache holds, instead of failing on a missing table or
// minting ids that name no cached file.
//
// The file keeps the reference's schema: one table, sequences, with id
// (primary key), seq and sha256 (both unique), len, created_at and
// last_seen_at (TEXT, "YYYY-MM-DD HH:MM:SS" UTC, as SQLite's
// CURRENT_TIMESTAMP writes them) and uses_count, plus an index on len, in
// WAL mode. Programs read and write it while kinflow writes it, so Write
// takes the write lock in short transactions of ChunkRows rows and waits
// for a busy file up to BusyTimeout.
package seqmapfile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	sqlite "modernc.org/sqlite"
	sqlitelib "modernc.org/sqlite/lib"

	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/seqid"
)

// RelPath is the file's path under the media root.
const RelPath = "sequence_info/seqmap.sqlite3"

// ChunkRows is how many sequences one transaction writes: the write lock is
// held for a few milliseconds, so a program resolving its ids meanwhile
// waits no longer than that.
const ChunkRows = 200

// BusyTimeout is how long one statement waits for a lock another process
// holds on the file before it fails as busy.
const BusyTimeout = 30 * time.Second

// schema is the reference's table and indexes (created only when absent;
// an existing file is used as it is).
var schema = []string{
	`CREATE TABLE IF NOT EXISTS sequences (
		id           TEXT PRIMARY KEY,
		seq          TEXT NOT NULL UNIQUE,
		sha256       TEXT NOT NULL UNIQUE,
		len          INTEGER NOT NULL,
		created_at   TEXT NOT NULL DEFAULT (CURRENT_TIMESTAMP),
		last_seen_at TEXT NOT NULL DEFAULT (CURRENT_TIMESTAMP),
		uses_count   INTEGER NOT NULL DEFAULT 0
	)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS idx_sequences_seq ON sequences(seq)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS idx_sequences_sha256 ON sequences(sha256)`,
	`CREATE INDEX IF NOT EXISTS idx_sequences_len ON sequences(len)`,
}

// Entry is one sequence under kinflow's id for it.
type Entry struct {
	ID  string
	Seq string
}

// ConflictError says the file disagrees with kinflow's ids: it holds the
// sequence of kinflow's id ID under another id (FileID), or ID for another
// sequence. A program would then read another sequence's files, so the
// file is never overwritten: an operator reconciles it.
type ConflictError struct {
	// ID is kinflow's id.
	ID string
	// FileID is the id the file holds for ID's sequence; empty when the
	// file holds ID for another sequence.
	FileID string
}

func (e *ConflictError) Error() string {
	if e.FileID != "" {
		return fmt.Sprintf("%s holds the sequence of kinflow's id %q under id %q", RelPath, e.ID, e.FileID)
	}
	return fmt.Sprintf("%s holds kinflow's id %q for another sequence", RelPath, e.ID)
}

// Path is the file's path under the media root.
func Path(mediaRoot string) string { return filepath.Join(mediaRoot, filepath.FromSlash(RelPath)) }

// Busy reports an error of a file that stayed locked by another process
// past BusyTimeout: writing again later may succeed.
func Busy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	c := se.Code() & 0xff
	return c == sqlitelib.SQLITE_BUSY || c == sqlitelib.SQLITE_LOCKED
}

// Write puts every entry into the file under the media root, creating the
// folder (mediaroot.MkdirAll), the file and its table when absent. A
// sequence already there under its id gets its last_seen_at renewed; a new
// one is inserted with uses_count 0 (the programs' own get-or-create counts
// their uses). Writing the same entries again changes nothing but
// last_seen_at. When the file holds an entry's sequence under another id,
// or its id for another sequence, Write stops with a *ConflictError naming
// it; the chunks before it stay written (their ids are kinflow's).
// Safe under concurrent writers in one or many processes.
func Write(ctx context.Context, mediaRoot string, entries []Entry) error {
	entries, err := distinct(entries)
	if err != nil || len(entries) == 0 {
		return err
	}
	path := Path(mediaRoot)
	if err := mediaroot.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// _txlock=immediate takes the write lock at BEGIN: a transaction that
	// read first and then wrote could not upgrade its lock past a
	// concurrent writer and would fail at once instead of waiting.
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate",
		path, BusyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return fmt.Errorf("open %s: %w", RelPath, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for from := 0; from < len(entries); from += ChunkRows {
		if err := writeChunk(ctx, db, entries[from:min(from+ChunkRows, len(entries))], from == 0); err != nil {
			return err
		}
	}
	return nil
}

// distinct drops repeated entries; one id for two sequences, or one
// sequence under two ids, is the caller's error.
func distinct(entries []Entry) ([]Entry, error) {
	byID := make(map[string]string, len(entries))
	bySeq := make(map[string]string, len(entries))
	out := make([]Entry, 0, len(entries))
	for _, e := range entries {
		if !seqid.Valid(e.ID) {
			return nil, fmt.Errorf("seqmap file: %q is not a valid seq id", e.ID)
		}
		if s, ok := byID[e.ID]; ok {
			if s != e.Seq {
				return nil, fmt.Errorf("seqmap file: id %q given for two sequences", e.ID)
			}
			continue
		}
		if id, ok := bySeq[e.Seq]; ok {
			return nil, fmt.Errorf("seqmap file: one sequence given under ids %q and %q", id, e.ID)
		}
		byID[e.ID], bySeq[e.Seq] = e.Seq, e.ID
		out = append(out, e)
	}
	return out, nil
}

// writeChunk writes one chunk in one transaction (creating the schema in
// the first): the rows the file has are checked and renewed, the missing
// ones inserted, all under the write lock, so no other writer can insert a
// disagreeing row between the check and the insert.
func writeChunk(ctx context.Context, db *sql.DB, part []Entry, first bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("write %s: %w", RelPath, err)
	}
	defer func() { _ = tx.Rollback() }()
	if first {
		for _, q := range schema {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("create %s: %w", RelPath, err)
			}
		}
	}
	shas := make([]string, len(part))
	args := make([]any, 0, 2*len(part))
	for i, e := range part {
		shas[i] = seqid.SHA256Hex(e.Seq)
		args = append(args, e.ID)
	}
	for _, s := range shas {
		args = append(args, s)
	}
	marks := strings.TrimSuffix(strings.Repeat("?,", len(part)), ",")
	rows, err := tx.QueryContext(ctx, "SELECT id, seq FROM sequences WHERE id IN ("+marks+") OR sha256 IN ("+marks+")", args...)
	if err != nil {
		return fmt.Errorf("read %s: %w", RelPath, err)
	}
	seqOf := map[string]string{} // the file's id → sequence, for the rows found
	idOf := map[string]string{}  // the file's sequence → id
	for rows.Next() {
		var id, seq string
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return fmt.Errorf("read %s: %w", RelPath, err)
		}
		seqOf[id], idOf[seq] = seq, id
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("read %s: %w", RelPath, err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s: %w", RelPath, err)
	}
	now := time.Now().UTC().Format(time.DateTime)
	var seen []any
	var insert []any
	for i, e := range part {
		if s, ok := seqOf[e.ID]; ok && s != e.Seq {
			return &ConflictError{ID: e.ID}
		}
		if id, ok := idOf[e.Seq]; ok && id != e.ID {
			return &ConflictError{ID: e.ID, FileID: id}
		}
		if _, ok := seqOf[e.ID]; ok {
			seen = append(seen, e.ID)
			continue
		}
		insert = append(insert, e.ID, e.Seq, shas[i], utf8.RuneCountInString(e.Seq), now, now)
	}
	if len(insert) > 0 {
		vals := strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?,0),", len(insert)/6), ",")
		if _, err := tx.ExecContext(ctx, "INSERT INTO sequences(id, seq, sha256, len, created_at, last_seen_at, uses_count) VALUES "+vals, insert...); err != nil {
			// The check above found neither the id nor the sha256: a
			// unique failure here is the same sequence stored under another
			// hash, a file kinflow cannot trust.
			return fmt.Errorf("write %s: %w", RelPath, err)
		}
	}
	if len(seen) > 0 {
		q := "UPDATE sequences SET last_seen_at = ? WHERE id IN (" + strings.TrimSuffix(strings.Repeat("?,", len(seen)), ",") + ")"
		if _, err := tx.ExecContext(ctx, q, append([]any{now}, seen...)...); err != nil {
			return fmt.Errorf("write %s: %w", RelPath, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write %s: %w", RelPath, err)
	}
	return nil
}
