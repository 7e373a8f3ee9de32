package seqmapfile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kinflow/kinflow/internal/seqid"
)

func open(t *testing.T, media string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+Path(media)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type row struct {
	id, seq, sha, created, lastSeen string
	n, uses                         int
}

func rows(t *testing.T, db *sql.DB) map[string]row {
	t.Helper()
	rs, err := db.Query("SELECT id, seq, sha256, len, created_at, last_seen_at, uses_count FROM sequences")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	out := map[string]row{}
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.id, &r.seq, &r.sha, &r.n, &r.created, &r.lastSeen, &r.uses); err != nil {
			t.Fatal(err)
		}
		out[r.id] = r
	}
	return out
}

func entry(seq string) Entry { return Entry{ID: seqid.Base(seq), Seq: seq} }

// A missing file is created with the reference's table, indexes and WAL
// mode; each row carries its sequence's hash and length under kinflow's id,
// even an id that is not the sequence's base id (a suffixed or legacy one).
func TestWriteCreatesReferenceSchema(t *testing.T) {
	media := t.TempDir()
	es := []Entry{entry("MKTAYIAK"), {ID: "legacy_7", Seq: "MSEQVENCE"}, entry("MKTAYIAK")}
	if err := Write(context.Background(), media, es); err != nil {
		t.Fatal(err)
	}
	db := open(t, media)
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", mode, err)
	}
	var ddl string
	if err := db.QueryRow("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sequences'").Scan(&ddl); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"id           TEXT PRIMARY KEY", "seq          TEXT NOT NULL UNIQUE", "sha256       TEXT NOT NULL UNIQUE",
		"len          INTEGER NOT NULL", "created_at   TEXT NOT NULL DEFAULT (CURRENT_TIMESTAMP)",
		"last_seen_at TEXT NOT NULL DEFAULT (CURRENT_TIMESTAMP)", "uses_count   INTEGER NOT NULL DEFAULT 0"} {
		if !strings.Contains(ddl, col) {
			t.Errorf("table lacks %q:\n%s", col, ddl)
		}
	}
	for _, ix := range []string{"idx_sequences_seq", "idx_sequences_sha256", "idx_sequences_len"} {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = ?", ix).Scan(&n); err != nil || n != 1 {
			t.Errorf("index %s: %d (%v)", ix, n, err)
		}
	}
	got := rows(t, db)
	if len(got) != 2 {
		t.Fatalf("rows %v, want 2", got)
	}
	for _, e := range es[:2] {
		r := got[e.ID]
		if r.seq != e.Seq || r.sha != seqid.SHA256Hex(e.Seq) || r.n != len(e.Seq) || r.uses != 0 || len(r.created) != 19 || r.lastSeen != r.created {
			t.Errorf("row %s = %+v", e.ID, r)
		}
	}
}

// Writing again keeps every row (a sequence the file has under its id is
// only seen again), adds the new ones, and keeps rows of other sequences.
func TestWriteIsIdempotent(t *testing.T) {
	media := t.TempDir()
	ctx := context.Background()
	if err := Write(ctx, media, []Entry{entry("AAAA"), entry("CCCC")}); err != nil {
		t.Fatal(err)
	}
	db := open(t, media)
	if _, err := db.Exec("UPDATE sequences SET uses_count = 5, created_at = '2024-01-01 00:00:00'"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Write(ctx, media, []Entry{entry("AAAA"), entry("GGGG")}); err != nil {
			t.Fatal(err)
		}
	}
	got := rows(t, db)
	if len(got) != 3 {
		t.Fatalf("rows %v, want 3", got)
	}
	a := got[seqid.Base("AAAA")]
	if a.uses != 5 || a.created != "2024-01-01 00:00:00" || a.lastSeen == a.created {
		t.Errorf("seen-again row %+v: uses and created_at kept, last_seen_at renewed", a)
	}
	if g := got[seqid.Base("GGGG")]; g.seq != "GGGG" {
		t.Errorf("new row %+v", g)
	}
}

// The file's ids are never overwritten: the same sequence under another id,
// or the id under another sequence, is an error naming the id.
func TestWriteConflicts(t *testing.T) {
	media := t.TempDir()
	ctx := context.Background()
	if err := Write(ctx, media, []Entry{{ID: "abc_1", Seq: "AAAA"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		e      Entry
		fileID string
	}{
		{Entry{ID: seqid.Base("AAAA"), Seq: "AAAA"}, "abc_1"},
		{Entry{ID: "abc_1", Seq: "CCCC"}, ""},
	} {
		err := Write(ctx, media, []Entry{entry("TTTT"), c.e})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.ID != c.e.ID || ce.FileID != c.fileID || !strings.Contains(err.Error(), c.e.ID) {
			t.Errorf("%+v: error %v, want a conflict naming it", c.e, err)
		}
		if strings.Contains(err.Error(), media) {
			t.Errorf("error names the server path: %v", err)
		}
	}
	got := rows(t, open(t, media))
	if len(got) != 1 || got["abc_1"].seq != "AAAA" {
		t.Errorf("rows after conflicts %v: a conflicting chunk writes nothing", got)
	}
	if err := Write(ctx, media, []Entry{{ID: "x", Seq: "A"}, {ID: "x", Seq: "C"}}); err == nil {
		t.Error("one id for two sequences accepted")
	}
	if err := Write(ctx, media, []Entry{{ID: "../x", Seq: "A"}}); err == nil {
		t.Error("an unsafe id accepted")
	}
}

// Many chunks: every row is written, in transactions of ChunkRows.
func TestWriteManyChunks(t *testing.T) {
	media := t.TempDir()
	var es []Entry
	for i := range 3*ChunkRows + 7 {
		es = append(es, entry(fmt.Sprintf("MSEQ%dK", i)))
	}
	if err := Write(context.Background(), media, es); err != nil {
		t.Fatal(err)
	}
	if got := rows(t, open(t, media)); len(got) != len(es) {
		t.Errorf("%d rows, want %d", len(got), len(es))
	}
}

// Writers in one process, overlapping in their sequences, with a reader
// holding the file open, all succeed and leave one row per sequence.
func TestWriteConcurrent(t *testing.T) {
	media := t.TempDir()
	ctx := context.Background()
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var es []Entry
			for i := range 500 {
				es = append(es, entry(fmt.Sprintf("MK%dW%d", i, w%2)))
			}
			errs[w] = Write(ctx, media, es)
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("writer %d: %v", w, err)
		}
	}
	if got := rows(t, open(t, media)); len(got) != 1000 {
		t.Errorf("%d rows, want 1000", len(got))
	}
}

// Writers in separate processes (this test binary run again) share the
// file through SQLite's locks and the busy timeout.
func TestWriteTwoProcesses(t *testing.T) {
	if media := os.Getenv("SEQMAPFILE_CHILD_MEDIA"); media != "" {
		var es []Entry
		for i := range 1500 {
			es = append(es, entry(fmt.Sprintf("MP%d", i)))
		}
		if err := Write(context.Background(), media, es); err != nil {
			t.Fatal(err)
		}
		return
	}
	media := t.TempDir()
	var cmds []*exec.Cmd
	for range 2 {
		c := exec.Command(os.Args[0], "-test.run", "^TestWriteTwoProcesses$", "-test.count=1")
		c.Env = append(os.Environ(), "SEQMAPFILE_CHILD_MEDIA="+media)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	}
	if got := rows(t, open(t, media)); len(got) != 1500 {
		t.Errorf("%d rows, want 1500", len(got))
	}
	if _, err := os.Stat(filepath.Join(media, "sequence_info")); err != nil {
		t.Error(err)
	}
}
