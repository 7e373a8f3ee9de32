package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/libtnb/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/kinflow/kinflow/internal/seqid"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func usesOf(t *testing.T, s *store.Store, id string) int64 {
	t.Helper()
	var r store.Sequence
	if err := s.DB.First(&r, "id = ?", id).Error; err != nil {
		t.Fatalf("row %s: %v", id, err)
	}
	return r.UsesCount
}

func TestSeqIDsGetOrCreate(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		ids, err := s.SeqIDs(ctx, []string{"MKT", "ACD", "MKT"})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"366893d2245f", seqid.Base("ACD"), "366893d2245f"}; !reflect.DeepEqual(ids, want) {
			t.Fatalf("ids %v, want %v", ids, want)
		}
		if u := usesOf(t, s, ids[0]); u != 2 {
			t.Errorf("uses of MKT = %d, want 2", u)
		}
		again, err := s.SeqIDs(ctx, []string{"ACD", "mkt"})
		if err != nil || again[0] != ids[1] || again[1] == ids[0] {
			t.Fatalf("second call %v %v", again, err)
		}
		var r store.Sequence
		_ = s.DB.First(&r, "id = ?", ids[1]).Error
		if r.UsesCount != 2 || r.Len != 3 || r.Seq != "ACD" || r.SHA256 != seqid.SHA256Hex("ACD") {
			t.Errorf("row %+v", r)
		}
		// Planning lookups neither create nor count.
		got, err := s.AssignSeqIDs(ctx, []string{"ACD"}, false)
		if err != nil || got[0] != ids[1] || usesOf(t, s, ids[1]) != 2 {
			t.Errorf("AssignSeqIDs without counting: %v %v", got, err)
		}
		look, err := s.LookupSeqIDs(ctx, []string{"ACD", "NEVER"})
		if err != nil || !reflect.DeepEqual(look, []string{ids[1], ""}) {
			t.Errorf("LookupSeqIDs %v %v", look, err)
		}
		if out, err := s.SeqIDs(ctx, nil); err != nil || len(out) != 0 {
			t.Errorf("empty input: %v %v", out, err)
		}
	})
}

func TestSeqIDsCollisionSuffixes(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		base := seqid.Base("QQQ")
		// Legacy rows hold QQQ's base id and base_1 for other sequences.
		for i, id := range []string{base, base + "_1"} {
			seq := fmt.Sprintf("LEGACY%d", i)
			if err := s.DB.Create(&store.Sequence{ID: id, Seq: seq, SHA256: seqid.SHA256Hex(seq), Len: len(seq)}).Error; err != nil {
				t.Fatal(err)
			}
		}
		ids, err := s.SeqIDs(ctx, []string{"QQQ", "LEGACY0"})
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != base+"_2" || ids[1] != base {
			t.Fatalf("ids %v", ids)
		}
		if again, _ := s.SeqIDs(ctx, []string{"QQQ"}); again[0] != base+"_2" {
			t.Errorf("stable id %v", again)
		}
	})
}

func TestSeqIDsConcurrentCallers(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const callers, n = 8, 300
		seqs := make([]string, n)
		for i := range seqs {
			seqs[i] = fmt.Sprintf("MKTW%dACDEFG", i)
		}
		results := make([][]string, callers)
		inputs := make([][]string, callers)
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for c := 0; c < callers; c++ {
			in := append([]string(nil), seqs[c*20:c*20+160]...)
			r := rand.New(rand.NewPCG(uint64(c), 7))
			r.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
			inputs[c] = in
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				ids, err := s.SeqIDs(ctx, inputs[c])
				if err != nil {
					errs <- err
					return
				}
				results[c] = ids
			}(c)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		idOf := map[string]string{}
		total := 0
		for c := range results {
			for i, id := range results[c] {
				seq := inputs[c][i]
				if prev, ok := idOf[seq]; ok && prev != id {
					t.Fatalf("%s got ids %s and %s", seq, prev, id)
				}
				idOf[seq] = id
				if id != seqid.Base(seq) {
					t.Errorf("%s: id %s", seq, id)
				}
				total++
			}
		}
		var count, uses int64
		s.DB.Model(&store.Sequence{}).Count(&count)
		s.DB.Model(&store.Sequence{}).Select("COALESCE(SUM(uses_count), 0)").Scan(&uses)
		if int(count) != len(idOf) || int(uses) != total {
			t.Errorf("rows %d (want %d), uses %d (want %d)", count, len(idOf), uses, total)
		}
	})
}

func TestSeqIDsTenThousand(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		seqs := make([]string, 10000)
		for i := range seqs {
			seqs[i] = fmt.Sprintf("MKT%08dWW", i)
		}
		ids, err := s.SeqIDs(context.Background(), seqs)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			seen[id] = true
		}
		if len(seen) != 10000 {
			t.Fatalf("%d distinct ids", len(seen))
		}
	})
}

// writeReferenceSeqmap creates a seqmap.sqlite3 with the reference's schema.
func writeReferenceSeqmap(t *testing.T, rows [][3]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "seqmap.sqlite3")
	db, err := gorm.Open(sqlite.Open(path), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer sqlDB.Close()
	for _, stmt := range []string{
		`CREATE TABLE sequences(id TEXT PRIMARY KEY, seq TEXT UNIQUE NOT NULL, sha256 TEXT UNIQUE NOT NULL, len INTEGER NOT NULL,
			created_at TEXT, last_seen_at TEXT, uses_count INTEGER NOT NULL DEFAULT 0)`,
		`CREATE INDEX idx_len ON sequences(len)`,
	} {
		if err := db.Exec(stmt).Error; err != nil {
			t.Fatal(err)
		}
	}
	tx := db.Begin()
	defer tx.Commit()
	for _, r := range rows {
		if err := tx.Exec(`INSERT INTO sequences VALUES (?, ?, ?, ?, ?, ?, ?)`, r[0], r[1], seqid.SHA256Hex(r[1]), len(r[1]),
			r[2], nil, 5).Error; err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestImportSeqmap(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		base := seqid.Base("AAA")
		rows := [][3]string{
			{base, "AAA", "2026-05-18T10:00:00.123456+00:00"},
			{seqid.Base("CCC") + "_1", "CCC", "2026-05-18 10:00:00"},
			{"legacy_7", "DDD", ""},
		}
		for i := 0; i < 1200; i++ {
			seq := fmt.Sprintf("BULK%d", i)
			rows = append(rows, [3]string{seqid.Base(seq), seq, "2026-01-01T00:00:00"})
		}
		path := writeReferenceSeqmap(t, rows)
		res, err := s.ImportSeqmap(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != 1203 || res.Imported != 1203 || res.AlreadyPresent != 0 {
			t.Fatalf("result %+v", res)
		}
		ids, err := s.SeqIDs(ctx, []string{"AAA", "CCC", "DDD", "EEE"})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{base, seqid.Base("CCC") + "_1", "legacy_7", seqid.Base("EEE")}; !reflect.DeepEqual(ids, want) {
			t.Fatalf("ids after import %v, want %v", ids, want)
		}
		if u := usesOf(t, s, "legacy_7"); u != 6 {
			t.Errorf("uses kept and counted: %d", u)
		}
		var r store.Sequence
		s.DB.First(&r, "id = ?", base)
		if r.CreatedAt.UTC().Format("2006-01-02T15:04:05") != "2026-05-18T10:00:00" {
			t.Errorf("created_at %v", r.CreatedAt)
		}
		// Importing again changes nothing.
		if res, err := s.ImportSeqmap(ctx, path); err != nil || res.Imported != 0 || res.AlreadyPresent != 1203 {
			t.Errorf("re-import %+v %v", res, err)
		}
		// A map that disagrees is refused as a whole.
		var before int64
		s.DB.Model(&store.Sequence{}).Count(&before)
		bad := writeReferenceSeqmap(t, [][3]string{{"fresh_1", "FRESH", ""}, {"other_id", "AAA", ""}})
		if _, err := s.ImportSeqmap(ctx, bad); !errors.Is(err, store.ErrConflict) {
			t.Errorf("conflicting import: %v", err)
		}
		var after int64
		s.DB.Model(&store.Sequence{}).Count(&after)
		if after != before {
			t.Errorf("a refused import wrote %d rows", after-before)
		}
		unsafe := writeReferenceSeqmap(t, [][3]string{{"../escape", "ZZZ", ""}})
		if _, err := s.ImportSeqmap(ctx, unsafe); err == nil {
			t.Error("unsafe id imported")
		}
		if _, err := s.ImportSeqmap(ctx, filepath.Join(t.TempDir(), "missing.sqlite3")); err == nil {
			t.Error("missing file imported")
		}
	})
}

func BenchmarkSeqIDs10000(b *testing.B) {
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			s := testenv.OpenStore(b, d)
			seqs := make([]string, 10000)
			for i := range seqs {
				seqs[i] = fmt.Sprintf("MKT%08dWW", i)
			}
			ctx := context.Background()
			b.Run("new", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					s.DB.Exec("DELETE FROM sequences")
					b.StartTimer()
					if _, err := s.SeqIDs(ctx, seqs); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("existing", func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if _, err := s.SeqIDs(ctx, seqs); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
