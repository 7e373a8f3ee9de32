package seqmapfile_test

import (
	"context"
	"testing"

	"github.com/kinflow/kinflow/internal/seqmapfile"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// A file written here is what `kinflow seqmap import` reads: imported into
// an empty store it gives back every id, a legacy one too, and importing it
// into the store whose ids it holds is a no-op.
func TestWrittenFileImportsWithTheSameIDs(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		seqs := []string{"MKTAYIAKQR", "MSEQVENCEA", "MKTAYIAKQW"}
		ids, err := s.SeqIDs(ctx, seqs)
		if err != nil {
			t.Fatal(err)
		}
		media := t.TempDir()
		es := []seqmapfile.Entry{{ID: "legacy_3", Seq: "MLEGACY"}}
		for i, seq := range seqs {
			es = append(es, seqmapfile.Entry{ID: ids[i], Seq: seq})
		}
		if err := seqmapfile.Write(ctx, media, es); err != nil {
			t.Fatal(err)
		}
		res, err := s.ImportSeqmap(ctx, seqmapfile.Path(media))
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != 4 || res.Imported != 1 || res.AlreadyPresent != 3 {
			t.Errorf("import %+v, want 4 rows, 1 new (the legacy id), 3 present", res)
		}
		got, err := s.LookupSeqIDs(ctx, append(seqs, "MLEGACY"))
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range append(es[1:], es[0]) {
			if got[i] != e.ID {
				t.Errorf("%s: id %q after import, want %q", e.Seq, got[i], e.ID)
			}
		}
	})
}
