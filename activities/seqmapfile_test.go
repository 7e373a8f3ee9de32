package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/seqmapfile"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// seqmapEngine stands in for a reference program that resolves its rows'
// ids in <media>/sequence_info/seqmap.sqlite3 (by sha256 and by sequence,
// as the reference's seqmap tool and its direct readers do) and records,
// per row, the id kinflow sent (seq_id, "" when not sent) and the ids the
// file gave.
const seqmapEngine = `import hashlib, json, os, sqlite3, sys
a = sys.argv[1:]
media, inp, out = a[a.index("--media") + 1], a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
con = sqlite3.connect(os.path.join(media, "sequence_info", "seqmap.sqlite3"), timeout=5)
seen = []
for r in job["rows"]:
    seq = r["sequence"]
    by_sha = [x[0] for x in con.execute("SELECT id FROM sequences WHERE sha256 = ?", (hashlib.sha256(seq.encode()).hexdigest(),))]
    by_seq = [x[0] for x in con.execute("SELECT id FROM sequences WHERE seq = ?", (seq,))]
    seen.append({"seq": seq, "sent": r.get("seq_id", ""), "by_sha": by_sha, "by_seq": by_seq})
json.dump(seen, open(os.path.join(os.environ["KEEP_DIR"], job["method"] + "-seqmap.json"), "w"))
json.dump({"predictions": [1] * len(job["rows"])}, open(out, "w"))
`

// seqmapHarness is a predict harness whose methods H (row_seq_id) and I run
// seqmapEngine.
func seqmapHarness(t *testing.T, s *store.Store) (*predictHarness, string) {
	dir := t.TempDir()
	script := filepath.Join(dir, "seqmap.py")
	if err := os.WriteFile(script, []byte(seqmapEngine), 0o644); err != nil {
		t.Fatal(err)
	}
	py := python(t)
	keep := filepath.Join(dir, "keep")
	_ = os.MkdirAll(keep, 0o755)
	cmd := fmt.Sprintf(`{python: %s, script: %s, argv: ["{python}", "{script}", "--media", "{media}", "--input", "{input}", "--output", "{output}"], extra_env: {KEEP_DIR: %s}}`, py, script, keep)
	return newPredictHarness(t, s, nil, fmt.Sprintf("  - key: H\n    command: %s\n", cmd)), keep
}

// Before method H's program runs, every row's sequence is in the media
// root's seqmap.sqlite3 under exactly the seq_id the row was sent with.
func TestProgramFindsKinflowIDsInSeqmapFile(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h, keep := seqmapHarness(t, s)
		h.submit("jobseqmap1", map[string]string{"kcat": "H"}, true, fourRows)
		if _, err := h.predict("jobseqmap1", 0); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(keep, "H-seqmap.json"))
		if err != nil {
			t.Fatal(err)
		}
		var seen []struct {
			Seq   string   `json:"seq"`
			Sent  string   `json:"sent"`
			BySHA []string `json:"by_sha"`
			BySeq []string `json:"by_seq"`
		}
		if err := json.Unmarshal(raw, &seen); err != nil {
			t.Fatal(err)
		}
		if len(seen) != 4 {
			t.Fatalf("program saw %d rows, want 4", len(seen))
		}
		for _, r := range seen {
			ids, err := s.LookupSeqIDs(context.Background(), []string{r.Seq})
			if err != nil {
				t.Fatal(err)
			}
			if r.Sent == "" || r.Sent != ids[0] || len(r.BySHA) != 1 || r.BySHA[0] != r.Sent || len(r.BySeq) != 1 || r.BySeq[0] != r.Sent {
				t.Errorf("%s: sent %q, store %q, file by sha256 %q, by seq %q", r.Seq, r.Sent, ids[0], r.BySHA, r.BySeq)
			}
		}
	})
}

// A seqmap.sqlite3 holding a row's sequence under another id fails the
// stage before the program runs, naming the ids and no server path.
func TestSeqmapFileConflictFailsStage(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	h, keep := seqmapHarness(t, s)
	if err := seqmapfile.Write(context.Background(), h.a.Config.MediaRoot, []seqmapfile.Entry{{ID: "other_1", Seq: "MKTAYI"}}); err != nil {
		t.Fatal(err)
	}
	h.submit("jobseqmap2", map[string]string{"kcat": "H"}, true, fourRows)
	_, err := h.predict("jobseqmap2", 0)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() || app.Type() != ErrPrediction {
		t.Fatalf("error %v, want a non-retryable %s", err, ErrPrediction)
	}
	msg := app.Message()
	if !strings.HasPrefix(msg, "kcat: Method H cannot run: sequence_info/seqmap.sqlite3 holds the sequence of kinflow's id") ||
		!strings.Contains(msg, `"other_1"`) || strings.Contains(msg, h.a.Config.MediaRoot) {
		t.Errorf("message %q", msg)
	}
	if _, err := os.Stat(filepath.Join(keep, "H-seqmap.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the program ran on ids that disagree (%v)", err)
	}
}
