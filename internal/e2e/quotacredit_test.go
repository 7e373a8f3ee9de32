package e2e

import (
	"bytes"
	"mime/multipart"
	"strings"
	"testing"
	"time"
)

// TestQuotaCountsCachedRowsEndToEnd on a real stack: a
// 10,000-row job completes; with 500 rows of quota left, the identical
// resubmit is admitted (every row is in the prediction cache, as the
// worker's Finalize recorded), takes nothing from the quota and charges
// nothing at its end; a job with 5,000 new rows gets its 429, in rows.
func TestQuotaCountsCachedRowsEndToEnd(t *testing.T) {
	s := newStack(t, nil, nil)
	const rows = 10000
	csvText := largeCSV(rows)
	targets, meths := []string{"kcat", "Km"}, map[string]string{"kcat": "B", "Km": "B"}
	first := s.submit(csvText, targets, meths)
	if st := s.waitDone(first, 8*time.Minute); st.Status != "Completed" {
		t.Fatalf("first job %s: %s", st.Status, st.Error)
	}
	var q struct {
		Used      int64 `json:"used"`
		Remaining int64 `json:"remaining"`
	}
	quota := func() (int64, int64) {
		if code := s.do("GET", "/api/v1/quota/", nil, "", &q); code != 200 {
			t.Fatalf("quota: %d", code)
		}
		return q.Used, q.Remaining
	}
	used, _ := quota()
	st, keyID := s.openStoreAndKey(t)
	if err := st.DB.Exec("UPDATE api_keys SET custom_daily_limit = ? WHERE id = ?", used+500, keyID).Error; err != nil {
		t.Fatal(err)
	}
	if _, left := quota(); left != 500 {
		t.Fatalf("%d rows left, want 500", left)
	}

	again := s.submit(csvText, targets, meths) // fails the test unless 201
	if u, _ := quota(); u != used {
		t.Errorf("the identical resubmit took %d rows of quota", u-used)
	}
	if st := s.waitDone(again, 8*time.Minute); st.Status != "Completed" {
		t.Fatalf("resubmit %s: %s", st.Status, st.Error)
	}
	if u, _ := quota(); u != used {
		t.Errorf("the identical resubmit charged %d rows at its end", u-used)
	}
	var charge struct {
		Charge struct {
			RowsCharged, RowsRefunded, CachedRowsRefunded int
		} `json:"charge"`
	}
	s.do("GET", "/api/v1/status/"+again+"/", nil, "", &charge)
	if c := charge.Charge; c.RowsCharged != rows || c.RowsRefunded != rows || c.CachedRowsRefunded != rows {
		t.Errorf("resubmit's charge %+v", c)
	}

	// Half the rows new (other names): 5,000 rows needed, 500 left.
	half := strings.Replace(csvText, "enzyme-0", "enzyme-N", rows/2)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(half))
	_ = mw.WriteField("targets", `["kcat","Km"]`)
	_ = mw.WriteField("methods", `{"kcat":"B","Km":"B"}`)
	_ = mw.Close()
	var refused struct {
		Error string `json:"error"`
	}
	if code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &refused); code != 429 ||
		!strings.Contains(refused.Error, "500 rows remaining today") || !strings.Contains(refused.Error, "requires 5000 rows") {
		t.Fatalf("half-new job: %d %q", code, refused.Error)
	}
}
