package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/kinflow/kinflow/internal/seqid"
)

// seqChunk is how many sequences one query handles: 500 rows × 7 columns
// stay far below SQLite's 32,766 and Postgres's 65,535 bind parameters, and
// 10,000 sequences take 20 round trips per phase instead of 10,000.
const seqChunk = 500

// maxSeqIDAttempts bounds the collision loop of one SeqIDs call. Each round
// resolves every id not taken concurrently; needing more than a few rounds
// means something other than hash collisions is wrong.
const maxSeqIDAttempts = 64

// ErrHashCollision is returned when two different sequences share a
// SHA-256: the full sequence is always compared, never only the hash.
var ErrHashCollision = errors.New("sequence SHA-256 collision")

// SeqIDs maps each sequence to its seq id, in order, creating ids for new
// sequences (get-or-create, docs/embedding.md, "Sequence ids"): an existing sequence (found by its
// SHA-256, full text compared) keeps its id; a new one gets the first 12 hex
// characters of its SHA-256, or base_1, base_2, … when that id belongs to
// another sequence. Every occurrence counts a use (uses_count, last_seen_at).
// Sequences are used exactly as given; normalisation is the caller's.
// Safe under concurrent callers in one or many processes.
func (s *Store) SeqIDs(ctx context.Context, seqs []string) ([]string, error) {
	return s.AssignSeqIDs(ctx, seqs, true)
}

// AssignSeqIDs is SeqIDs with the use counting optional: planning tools
// (`kinflow plan`) map sequences without counting a use.
func (s *Store) AssignSeqIDs(ctx context.Context, seqs []string, countUse bool) ([]string, error) {
	bySHA := make(map[string]*seqEntry, len(seqs))
	order := make([]*seqEntry, 0, len(seqs))
	perInput := make([]*seqEntry, len(seqs))
	for i, seq := range seqs {
		sha := seqid.SHA256Hex(seq)
		e := bySHA[sha]
		if e == nil {
			e = &seqEntry{seq: seq, sha: sha}
			bySHA[sha] = e
			order = append(order, e)
		}
		e.uses++
		perInput[i] = e
	}
	if err := s.lookupSeqs(ctx, bySHA, order); err != nil {
		return nil, err
	}
	missing := make([]*seqEntry, 0)
	for _, e := range order {
		if e.id == "" {
			missing = append(missing, e)
		}
	}
	if err := s.insertSeqs(ctx, bySHA, missing); err != nil {
		return nil, err
	}
	if countUse {
		uses := make(map[string]int64, len(order))
		for _, e := range order {
			uses[e.sha] = e.uses
		}
		if err := s.countUses(ctx, uses); err != nil {
			return nil, err
		}
	}
	out := make([]string, len(seqs))
	for i, e := range perInput {
		out[i] = e.id
	}
	return out, nil
}

// seqEntry is one distinct sequence of an AssignSeqIDs call.
type seqEntry struct {
	seq, sha, id string
	uses         int64
}

// lookupSeqs fills the ids of the entries whose sequence is stored (bySHA
// indexes every entry of the call).
func (s *Store) lookupSeqs(ctx context.Context, bySHA map[string]*seqEntry, es []*seqEntry) error {
	for from := 0; from < len(es); from += seqChunk {
		part := es[from:min(from+seqChunk, len(es))]
		shas := make([]string, len(part))
		for i, e := range part {
			shas[i] = e.sha
		}
		rows, err := s.Unprepared(ctx).Raw("SELECT id, seq, sha256 FROM sequences WHERE sha256 IN ?", shas).Rows()
		if err != nil {
			return fmt.Errorf("look up sequences: %w", err)
		}
		for rows.Next() {
			var id, seq, sha string
			if err := rows.Scan(&id, &seq, &sha); err != nil {
				rows.Close()
				return fmt.Errorf("look up sequences: %w", err)
			}
			e := bySHA[sha]
			if e == nil {
				continue
			}
			if e.seq != seq {
				rows.Close()
				return fmt.Errorf("%w: %s", ErrHashCollision, sha)
			}
			e.id = id
		}
		if err := rows.Close(); err != nil {
			return fmt.Errorf("look up sequences: %w", err)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("look up sequences: %w", err)
		}
	}
	return nil
}

// insertSeqs stores the sequences missing from the map, each under its
// first free candidate id, in rounds until every one has an id (a round
// loses a candidate or a whole insert to a concurrent caller).
func (s *Store) insertSeqs(ctx context.Context, bySHA map[string]*seqEntry, missing []*seqEntry) error {
	// Concurrent callers insert in one order (by hash, hence by base id),
	// so Postgres's unique-index waits cannot form a cycle.
	sort.Slice(missing, func(i, j int) bool { return missing[i].sha < missing[j].sha })
	for attempt := 0; len(missing) > 0; attempt++ {
		if attempt == maxSeqIDAttempts {
			return fmt.Errorf("assign seq ids: %d sequences still unassigned after %d rounds", len(missing), attempt)
		}
		cand, err := s.freeCandidates(ctx, missing)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		rows := make([]Sequence, len(missing))
		for i, e := range missing {
			rows[i] = Sequence{ID: cand[i], Seq: e.seq, SHA256: e.sha, Len: utf8.RuneCountInString(e.seq),
				CreatedAt: now, LastSeenAt: now}
		}
		// DO NOTHING on any conflict: the same sequence inserted concurrently
		// (sha256) or its candidate id taken meanwhile (id); both are
		// resolved by the lookup below.
		if err := s.DB.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).CreateInBatches(rows, seqChunk).Error; err != nil {
			// Postgres may still pick this insert as a deadlock victim
			// against a concurrent one; the next round retries it.
			if !isDeadlock(err) {
				return fmt.Errorf("insert sequences: %w", err)
			}
		}
		if err := s.lookupSeqs(ctx, bySHA, missing); err != nil {
			return err
		}
		still := missing[:0]
		for _, e := range missing {
			if e.id == "" {
				still = append(still, e)
			}
		}
		missing = still
	}
	return nil
}

// freeCandidates chooses a free candidate id per sequence: base, then
// base_1, … (taken neither in the map nor by another of missing).
func (s *Store) freeCandidates(ctx context.Context, missing []*seqEntry) ([]string, error) {
	cand := make([]string, len(missing))
	next := make([]int, len(missing))
	for i, e := range missing {
		cand[i] = seqid.Base(e.seq)
	}
	for {
		taken, err := s.takenIDs(ctx, cand)
		if err != nil {
			return nil, err
		}
		local := make(map[string]bool, len(cand))
		again := false
		for i := range cand {
			if taken[cand[i]] || local[cand[i]] {
				next[i]++
				cand[i] = seqid.Candidate(seqid.Base(missing[i].seq), next[i])
				again = true
				continue
			}
			local[cand[i]] = true
		}
		if !again {
			return cand, nil
		}
	}
}

// countUses adds each sequence's uses (sha → occurrences) with one UPDATE
// per chunk of sequences sharing a count.
//
// On Postgres two callers counting overlapping sequences would otherwise
// lock their rows in scan order, which changes as updates move rows, and
// deadlock; each statement therefore locks its rows first in id order
// (SELECT … ORDER BY id FOR UPDATE), so the waits cannot form a cycle. A
// deadlock reported all the same is retried: Postgres rolled that statement
// back entirely, so running it again counts each use once.
func (s *Store) countUses(ctx context.Context, uses map[string]int64) error {
	byUses := map[int64][]string{}
	for sha, n := range uses {
		byUses[n] = append(byUses[n], sha)
	}
	counts := make([]int64, 0, len(byUses))
	for n := range byUses {
		counts = append(counts, n)
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i] < counts[j] })
	query := "UPDATE sequences SET uses_count = uses_count + ?, last_seen_at = ? WHERE sha256 IN ?"
	if s.Dialect == Postgres {
		query = `UPDATE sequences AS s SET uses_count = s.uses_count + ?, last_seen_at = ?
			FROM (SELECT id FROM sequences WHERE sha256 IN ? ORDER BY id FOR UPDATE) AS locked
			WHERE s.id = locked.id`
	}
	now := time.Now().UTC()
	for _, n := range counts {
		shas := byUses[n]
		sort.Strings(shas)
		for from := 0; from < len(shas); from += seqChunk {
			part := shas[from:min(from+seqChunk, len(shas))]
			var err error
			for try := 0; ; try++ {
				err = s.DB.WithContext(ctx).Exec(query, n, now, part).Error
				if err == nil || !isDeadlock(err) || try == maxDeadlockRetries {
					break
				}
				if err := sleepCtx(ctx, time.Duration(try+1)*10*time.Millisecond); err != nil {
					return fmt.Errorf("count sequence uses: %w", err)
				}
			}
			if err != nil {
				return fmt.Errorf("count sequence uses: %w", err)
			}
		}
	}
	return nil
}

// maxDeadlockRetries bounds how often a statement Postgres chose as a
// deadlock victim is run again.
const maxDeadlockRetries = 8

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// takenIDs returns which of ids exist.
func (s *Store) takenIDs(ctx context.Context, ids []string) (map[string]bool, error) {
	taken := map[string]bool{}
	for from := 0; from < len(ids); from += seqChunk {
		var got []string
		if err := s.Unprepared(ctx).Raw("SELECT id FROM sequences WHERE id IN ?", ids[from:min(from+seqChunk, len(ids))]).
			Scan(&got).Error; err != nil {
			return nil, fmt.Errorf("look up seq ids: %w", err)
		}
		for _, id := range got {
			taken[id] = true
		}
	}
	return taken, nil
}

// LookupSeqIDs returns the stored ids of seqs ("" for a sequence not in the
// map), without creating or counting anything.
func (s *Store) LookupSeqIDs(ctx context.Context, seqs []string) ([]string, error) {
	out := make([]string, len(seqs))
	idx := map[string][]int{}
	var shas []string
	for i, seq := range seqs {
		sha := seqid.SHA256Hex(seq)
		if _, ok := idx[sha]; !ok {
			shas = append(shas, sha)
		}
		idx[sha] = append(idx[sha], i)
	}
	for from := 0; from < len(shas); from += seqChunk {
		var rows []Sequence
		if err := s.Unprepared(ctx).Where("sha256 IN ?", shas[from:min(from+seqChunk, len(shas))]).Find(&rows).Error; err != nil {
			return nil, fmt.Errorf("look up sequences: %w", err)
		}
		for _, r := range rows {
			for _, i := range idx[r.SHA256] {
				if seqs[i] != r.Seq {
					return nil, fmt.Errorf("%w: %s", ErrHashCollision, r.SHA256)
				}
				out[i] = r.ID
			}
		}
	}
	return out, nil
}

// ImportResult summarises ImportSeqmap.
type ImportResult struct {
	// Rows is the number of rows in the reference file.
	Rows int
	// Imported rows were new here.
	Imported int
	// AlreadyPresent rows were here already with the same id.
	AlreadyPresent int
}

// ImportSeqmap takes over a reference deployment's seqmap.sqlite3 (its
// table `sequences`: id, seq, sha256, len, …), keeping every id it holds, so that deployment's cache is reused
// as it is. It runs in one transaction: if any row conflicts with the map
// here (the same sequence under another id, or the id used by another
// sequence) or holds an id that is not a safe file name, nothing is imported
// and the error names the row. Importing the same file twice is a no-op.
func (s *Store) ImportSeqmap(ctx context.Context, sqlitePath string) (ImportResult, error) {
	var res ImportResult
	if _, err := os.Stat(sqlitePath); err != nil {
		return res, fmt.Errorf("seqmap import: %w", err)
	}
	src, err := gorm.Open(sqlite.Open("file:"+sqlitePath+"?mode=ro&_pragma=busy_timeout(10000)"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return res, fmt.Errorf("seqmap import: open %s: %w", sqlitePath, err)
	}
	srcDB, err := src.DB()
	if err != nil {
		return res, fmt.Errorf("seqmap import: %w", err)
	}
	defer srcDB.Close()
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		last := ""
		for {
			rows, err := srcDB.QueryContext(ctx, `SELECT id, seq, len, created_at, last_seen_at, uses_count FROM sequences
				WHERE id > ? ORDER BY id LIMIT ?`, last, seqChunk)
			if err != nil {
				return fmt.Errorf("read %s: %w", sqlitePath, err)
			}
			var batch []Sequence
			for rows.Next() {
				var (
					r        Sequence
					created  sql.NullString
					lastSeen sql.NullString
					uses     sql.NullInt64
					n        sql.NullInt64
				)
				if err := rows.Scan(&r.ID, &r.Seq, &n, &created, &lastSeen, &uses); err != nil {
					rows.Close()
					return fmt.Errorf("read %s: %w", sqlitePath, err)
				}
				if !seqid.Valid(r.ID) {
					rows.Close()
					return fmt.Errorf("row %q: the id is not a safe cache file name; fix it in the source map first", r.ID)
				}
				r.SHA256 = seqid.SHA256Hex(r.Seq)
				r.Len = utf8.RuneCountInString(r.Seq)
				r.CreatedAt = parseRefTime(created)
				r.LastSeenAt = parseRefTime(lastSeen)
				if r.LastSeenAt.IsZero() {
					r.LastSeenAt = r.CreatedAt
				}
				r.UsesCount = uses.Int64
				batch = append(batch, r)
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("read %s: %w", sqlitePath, err)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read %s: %w", sqlitePath, err)
			}
			if len(batch) == 0 {
				return nil
			}
			last = batch[len(batch)-1].ID
			res.Rows += len(batch)
			ins := tx.Clauses(clause.OnConflict{DoNothing: true}).Create(&batch)
			if ins.Error != nil {
				return fmt.Errorf("import sequences: %w", ins.Error)
			}
			res.Imported += int(ins.RowsAffected)
			// Every row must now be here under its own id.
			ids := make([]string, len(batch))
			for i, r := range batch {
				ids[i] = r.ID
			}
			var here []Sequence
			if err := tx.Select("id", "sha256").Where("id IN ?", ids).Find(&here).Error; err != nil {
				return fmt.Errorf("verify import: %w", err)
			}
			shaOf := make(map[string]string, len(here))
			for _, h := range here {
				shaOf[h.ID] = h.SHA256
			}
			for _, r := range batch {
				if shaOf[r.ID] != r.SHA256 {
					return fmt.Errorf("%w: row %q: this map holds its sequence under another id, or its id for another sequence", ErrConflict, r.ID)
				}
			}
		}
	})
	if err != nil {
		return ImportResult{}, fmt.Errorf("seqmap import: %w", err)
	}
	res.AlreadyPresent = res.Rows - res.Imported
	return res, nil
}

// isDeadlock reports a Postgres deadlock (40P01), which the server resolves
// by rolling back one statement, so retrying it is safe.
func isDeadlock(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "40P01"
}

// parseRefTime reads the reference's TEXT timestamps (ISO 8601 in its
// variants); unreadable or empty values give the zero time, replaced by now.
func parseRefTime(v sql.NullString) time.Time {
	if v.Valid {
		s := strings.TrimSpace(v.String)
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00",
			"2006-01-02 15:04:05.999999999", "2006-01-02"} {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC()
			}
		}
	}
	return time.Now().UTC()
}
