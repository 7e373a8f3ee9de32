package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

const seqA = "MKTAYIAKQRQISFVKSHFSRQ"

// csvRows is a valid input of n rows for single-substrate methods.
func csvRows(n int) string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate,Note\n")
	for i := range n {
		fmt.Fprintf(&b, "%s,CC(=O)O,row %d\n", seqA, i)
	}
	return b.String()
}

// multipartBody builds a submit form; fields are name, value pairs.
func multipartBody(tb testing.TB, filename, content string, fields ...string) (io.Reader, string) {
	tb.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			tb.Fatal(err)
		}
	}
	if filename != "" {
		fw, err := w.CreateFormFile("file", filename)
		if err != nil {
			tb.Fatal(err)
		}
		io.WriteString(fw, content)
	}
	w.Close()
	return &buf, w.FormDataContentType()
}

func (h *harness) submitCSV(ip, key, content string, fields ...string) resp {
	body, ct := multipartBody(h.t, "input.csv", content, fields...)
	return h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct)
}

func (h *harness) submitJSON(ip, key string, v any) resp {
	return h.do("POST", "/api/v1/submit/", ip, key, jsonBody(h.t, v), "Content-Type", "application/json")
}

var jobIDRe = regexp.MustCompile(`^[A-Za-z0-9]{22,}$`)

func TestSubmitMultipartAndJSON(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.20"
		key := h.newKey(ip)

		r := h.submitCSV(ip, key, csvRows(3)+",,\n", "targets", `[ "Km" , "kcat" ,"kcat"]`, "methods", `{"kcat":"B","Km":"C", "kcat/Km": "I"}`,
			"handleLongSequences", "skip", "canonicalizeSubstrates", `"False"`, "disableGpuPrecompute", "yes")
		wantStatus(t, r, 201)
		if got := r.Body.String(); !strings.HasPrefix(got, `{"jobId":"`) || !strings.Contains(got, `"status":"Pending","statusUrl":"/api/v1/status/`) {
			t.Fatalf("key order: %s", got)
		}
		b := r.json(t)
		id := b["jobId"].(string)
		if !jobIDRe.MatchString(id) || b["resultUrl"] != "/api/v1/result/"+id+"/" {
			t.Fatalf("body %v", b)
		}
		q := b["quota"].(map[string]any)
		if q["limit"] != 20000.0 || q["used"] != 3.0 || q["remaining"] != 19997.0 {
			t.Fatalf("quota %v", q)
		}
		if r.Header().Get("X-RateLimit-Remaining") != "19997" || r.Header().Get("X-RateLimit-Limit") != "20000" {
			t.Fatalf("headers %v", r.Header())
		}
		if got := h.starter.started(); len(got) != 1 || got[0] != id {
			t.Fatalf("started %v", got)
		}
		var j store.Job
		if err := st.DB.Where("id = ?", id).Take(&j).Error; err != nil {
			t.Fatal(err)
		}
		if j.Status != "Pending" || !slices.Equal(j.Targets, []string{"kcat", "Km"}) || j.PredictionType != "kcat+Km" || j.KcatMethod != "B" ||
			j.KmMethod != "C" || j.KcatKmMethod != "I" || j.HandleLongSequences != "skip" || j.CanonicalizeSubstrates ||
			!j.DisableGPUPrecompute || !j.IncludeSimilarityColumns || j.UseExperimental || j.RequestedRows != 3 ||
			j.InputPath != "jobs/"+id+"/input.csv" || j.IPAddress != ip {
			t.Fatalf("job row %+v", j)
		}
		stages, _ := st.JobStages(t.Context(), id)
		if len(stages) != 2 || stages[0].Target != "kcat" || stages[0].MethodKey != "B" || stages[0].MethodName != "Method B" ||
			stages[1].Target != "Km" || stages[1].MethodKey != "C" || stages[1].Status != "pending" ||
			!stages[1].EmbeddingEnabled || stages[1].EmbeddingState != "pending" {
			t.Fatalf("stages %+v", stages)
		}
		in, err := os.ReadFile(filepath.Join(h.cfg.MediaRoot, "jobs", id, "input.csv"))
		if err != nil || string(in) != csvRows(3) {
			t.Fatalf("input.csv %q %v", in, err)
		}

		// The JSON form, with the legacy fields.
		r = h.submitJSON(ip, key, map[string]any{
			"data":           []map[string]any{{"Protein Sequence": seqA, "Substrate": "O"}, {"Protein Sequence": seqA, "Substrate": "CCO"}},
			"predictionType": "both", "kcatMethod": "E", "kmMethod": "G", "useExperimental": true,
		})
		wantStatus(t, r, 201)
		id2 := r.json(t)["jobId"].(string)
		j = store.Job{}
		st.DB.Where("id = ?", id2).Take(&j)
		if !slices.Equal(j.Targets, []string{"kcat", "Km"}) || j.KcatMethod != "E" || j.KmMethod != "G" || j.RequestedRows != 2 || !j.UseExperimental {
			t.Fatalf("legacy job %+v", j)
		}
		if r.json(t)["quota"].(map[string]any)["used"] != 5.0 {
			t.Fatalf("%s", r.Body)
		}
	})
}

func TestSubmitValidationFailures(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.MaxRows = 50; c.MaxUploadBytes = 64 << 10 })
		const ip = "198.51.100.21"
		key := h.newKey(ip)
		ok := []string{"targets", `["kcat"]`, "methods", `{"kcat":"B"}`}
		emptySubs := "Protein Sequence,Substrate\n" + strings.Repeat(seqA+",\n", 3) + strings.Repeat(seqA+",O\n", 7)
		cases := []struct {
			name, file, content string
			fields              []string
			code                int
			want                string // substring of the error
		}{
			{"no targets", "a.csv", csvRows(1), []string{"methods", `{"kcat":"B"}`}, 400, "targets"},
			{"targets not JSON", "a.csv", csvRows(1), []string{"targets", `[kcat`, "methods", `{"kcat":"B"}`}, 400, "targets"},
			{"methods not JSON", "a.csv", csvRows(1), []string{"targets", `["kcat"]`, "methods", `{kcat`}, 400, "methods"},
			{"methods not object", "a.csv", csvRows(1), []string{"targets", `["kcat"]`, "methods", `["B"]`}, 400, "methods"},
			{"bad target", "a.csv", csvRows(1), []string{"targets", `["KCAT"]`, "methods", `{"kcat":"B"}`}, 400, "KCAT"},
			{"bad mapping key", "a.csv", csvRows(1), []string{"targets", `["kcat"]`, "methods", `{"kcat":"B","km":"C"}`}, 400, "km"},
			{"missing method", "a.csv", csvRows(1), []string{"targets", `["kcat","Km"]`, "methods", `{"kcat":"B"}`}, 400, "Km"},
			{"unknown method", "a.csv", csvRows(1), []string{"targets", `["kcat"]`, "methods", `{"kcat":"b"}`}, 400, "A-H, A-L, B"},
			{"unsupported method", "a.csv", csvRows(1), []string{"targets", `["kcat"]`, "methods", `{"kcat":"J"}`}, 400, "'J'"},
			{"bad long mode", "a.csv", csvRows(1), append(ok, "handleLongSequences", "Skip"), 400, "handleLongSeq"},
			{"empty long mode", "a.csv", csvRows(1), append(ok, "handleLongSequences", ""), 400, "handleLongSeq"},
			{"no file", "", "", ok, 400, "file"},
			{"not csv", "a.txt", csvRows(1), ok, 400, ".csv"},
			{"bad csv", "a.csv", "Protein Sequence,Substrate\nA,B,C\n", ok, 400, "Could not read CSV file"},
			{"empty file", "a.csv", "", ok, 400, "Could not read CSV file"},
			{"missing columns", "a.csv", "Sequence,Substrate\nMK,O\n", ok, 400, "Missing required columns: Protein Sequence"},
			{"missing substrate", "a.csv", "Protein Sequence\nMK\n", ok, 400, "Missing required columns: Substrate"},
			{"method D columns", "a.csv", csvRows(1), []string{"targets", `["kcat"]`, "methods", `{"kcat":"D"}`}, 400, "Missing required columns: Products, Substrates"},
			{"substrate mostly empty", "a.csv", emptySubs, ok, 400, "Rows 2, 3, 4 have no Substrate value"},
			{"too many rows", "a.csv", csvRows(51), ok, 400, "50"},
			{"too large", "a.csv", csvRows(2000), ok, 413, "limit"},
		}
		for _, c := range cases {
			var (
				body io.Reader
				ct   string
			)
			if c.file == "" {
				body, ct = multipartBody(t, "", "", c.fields...)
			} else {
				body, ct = multipartBody(t, c.file, c.content, c.fields...)
			}
			r := h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct)
			if r.Code != c.code {
				t.Errorf("%s: status %d, want %d: %s", c.name, r.Code, c.code, r.Body)
				continue
			}
			if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, c.want) {
				t.Errorf("%s: error %q lacks %q", c.name, msg, c.want)
			}
		}
		jsonCases := []struct {
			name, body string
			code       int
		}{
			{"not JSON", `{"data": [`, 400},
			{"array", `[{"Protein Sequence":"MK"}]`, 400},
			{"no data", `{"targets":["kcat"],"methods":{"kcat":"B"}}`, 400},
			{"empty data", `{"data":[],"targets":["kcat"],"methods":{"kcat":"B"}}`, 400},
			{"data not list", `{"data":{"a":1},"targets":["kcat"],"methods":{"kcat":"B"}}`, 400},
			{"null long mode", `{"data":[{"Protein Sequence":"MK","Substrate":"O"}],"targets":["kcat"],"methods":{"kcat":"B"},"handleLongSequences":null}`, 400},
		}
		for _, c := range jsonCases {
			r := h.do("POST", "/api/v1/submit", ip, key, strings.NewReader(c.body), "Content-Type", "application/json; charset=utf-8")
			if r.Code != c.code {
				t.Errorf("%s: status %d, want %d: %s", c.name, r.Code, c.code, r.Body)
			}
			r.json(t)
		}
		// Nothing was created or charged by any failure.
		var jobs int64
		st.DB.Model(&store.Job{}).Count(&jobs)
		used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0))
		entries, _ := os.ReadDir(filepath.Join(h.cfg.MediaRoot, "jobs"))
		if jobs != 0 || used != 0 || len(entries) != 0 || len(h.starter.started()) != 0 {
			t.Fatalf("failures left %d jobs, %d used, %d folders", jobs, used, len(entries))
		}
		// 405 comes after authentication.
		wantStatus(t, h.do("GET", "/api/v1/submit/", ip, "", nil), 401)
		r := h.do("GET", "/api/v1/submit/", ip, key, nil)
		wantStatus(t, r, 405)
		wantStatus(t, h.do("PUT", "/api/v1/validate", ip, key, nil), 405)
	})
}

func authKeyID(tb testing.TB, st *store.Store, ip string) int64 {
	tb.Helper()
	k, err := st.ActiveKeyForIP(tb.Context(), ip)
	if err != nil {
		tb.Fatal(err)
	}
	return k.ID
}

func TestQuotaExhaustionAndReset(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = 10 })
		const ip = "198.51.100.22"
		key := h.newKey(ip)
		ok := []string{"targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"B"}`}
		wantStatus(t, h.submitCSV(ip, key, csvRows(6), ok...), 201)
		r := h.submitCSV(ip, key, csvRows(5), ok...)
		wantStatus(t, r, 429)
		if msg := r.json(t)["error"].(string); !strings.Contains(msg, "4 rows remaining") || !strings.Contains(msg, "requires 5 rows") {
			t.Fatalf("429: %s", msg)
		}
		if r.Header().Get("X-RateLimit-Limit") != "10" || r.Header().Get("X-RateLimit-Remaining") != "4" || r.Header().Get("X-RateLimit-Reset") != "34199" {
			t.Fatalf("429 headers %v", r.Header())
		}
		wantStatus(t, h.submitCSV(ip, key, csvRows(4), ok...), 201)
		wantStatus(t, h.submitCSV(ip, key, csvRows(1), ok...), 429)
		var jobs int64
		st.DB.Model(&store.Job{}).Count(&jobs)
		entries, _ := os.ReadDir(filepath.Join(h.cfg.MediaRoot, "jobs"))
		if jobs != 2 || len(entries) != 2 {
			t.Fatalf("429 left something behind: %d jobs, %d folders", jobs, len(entries))
		}
		r = h.do("GET", "/api/v1/quota/", ip, key, nil)
		if r.Body.String() != `{"limit":10,"used":10,"remaining":0,"resetsInSeconds":34199}` {
			t.Fatalf("quota %s", r.Body)
		}
		// /validate/ does not need quota.
		// The next UTC day starts from zero.
		h.clock.Set(time.Date(2026, 3, 5, 0, 0, 1, 0, time.UTC))
		r = h.do("GET", "/api/v1/quota/", ip, key, nil)
		if r.Body.String() != `{"limit":10,"used":0,"remaining":10,"resetsInSeconds":86399}` || r.Header().Get("X-RateLimit-Remaining") != "10" {
			t.Fatalf("next day %s", r.Body)
		}
		wantStatus(t, h.submitCSV(ip, key, csvRows(10), ok...), 201)

		// A custom limit replaces the default, per key.
		st.DB.Model(&store.APIKey{}).Where("ip_address = ?", ip).Update("custom_daily_limit", 12)
		r = h.do("GET", "/api/v1/quota", ip, key, nil)
		if r.json(t)["limit"] != 12.0 || r.Header().Get("X-RateLimit-Limit") != "12" || r.Header().Get("X-RateLimit-Remaining") != "2" {
			t.Fatalf("custom %s %v", r.Body, r.Header())
		}
		// Another key of another IP has its own counter.
		other := h.newKey("198.51.100.23")
		r = h.do("GET", "/api/v1/quota/", "198.51.100.23", other, nil)
		if r.json(t)["used"] != 0.0 {
			t.Fatalf("other key %s", r.Body)
		}
	})
}

func TestSubmitQueueDown(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		h.starter.err = errQueueDown
		const ip = "198.51.100.24"
		key := h.newKey(ip)
		r := h.submitCSV(ip, key, csvRows(4), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
		wantStatus(t, r, 503)
		if r.Header().Get("X-RateLimit-Remaining") != "20000" {
			t.Fatalf("headers %v", r.Header())
		}
		// Nothing is left of a submit the scheduler refused: no job (the
		// 503 named none, so /jobs/ must not list one), no input folder,
		// no charge.
		var n int64
		st.DB.Model(&store.Job{}).Count(&n)
		if n != 0 {
			t.Fatalf("%d job rows after a refused submit", n)
		}
		if jobs := h.do("GET", "/api/v1/jobs/", ip, key, nil); !strings.Contains(jobs.Body.String(), `"jobs":[]`) {
			t.Fatalf("jobs after a refused submit: %s", jobs.Body)
		}
		if ents, _ := os.ReadDir(h.srv.mediaPath("jobs")); len(ents) != 0 {
			t.Fatalf("job folders left: %v", ents)
		}
		if used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0)); used != 0 {
			t.Fatalf("used %d after a refund", used)
		}
	})
}

// TestConcurrentSubmitsAtQuotaBoundary: 200 concurrent 1-row submits against
// a limit of 150 admit exactly 150.
func TestConcurrentSubmitsAtQuotaBoundary(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		const limit, clients = 150, 200
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = limit })
		const ip = "198.51.100.25"
		key := h.newKey(ip)
		body := csvRows(1)
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			codes = map[int]int{}
		)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := h.submitCSV(ip, key, body, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
				mu.Lock()
				codes[r.Code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if codes[201] != limit || codes[429] != clients-limit {
			t.Fatalf("codes %v", codes)
		}
		var jobs int64
		st.DB.Model(&store.Job{}).Count(&jobs)
		used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0))
		if jobs != limit || used != limit || len(h.starter.started()) != limit {
			t.Fatalf("%d jobs, %d used", jobs, used)
		}
	})
}

func TestSubmitHTTPServerJSONLarge(t *testing.T) {
	// A JSON body far above the reference's 2.5 MiB cap is accepted.
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.26"
		key := h.newKey(ip)
		long := strings.Repeat("ACDEFGHIKLMNPQRSTVWY", 50)
		rows := make([]map[string]string, 4000)
		for i := range rows {
			rows[i] = map[string]string{"Protein Sequence": long, "Substrate": "CCO"}
		}
		b, _ := json.Marshal(map[string]any{"data": rows, "targets": []string{"kcat"}, "methods": map[string]string{"kcat": "B"}})
		if len(b) < 3<<20 {
			t.Fatalf("body only %d bytes", len(b))
		}
		r := h.do("POST", "/api/v1/submit/", ip, key, bytes.NewReader(b), "Content-Type", "application/json")
		wantStatus(t, r, http.StatusCreated)
	})
}
