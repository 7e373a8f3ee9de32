package api

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// BenchmarkStatus measures GET /status/{id}/ through the real router
// (request id, CORS, auth with its key lookup and quota read, then the job,
// stage, queue and event reads) on each database, next to a bare Gin handler
// that answers a fixed JSON body: the difference is kinflow's own cost.
func BenchmarkStatus(b *testing.B) {
	b.Run("bare-gin", func(b *testing.B) {
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		e.GET("/api/v1/status/:id/", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"jobId": c.Param("id"), "status": "Pending"}) })
		req := httptest.NewRequest("GET", "/api/v1/status/abc/", nil)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
		}
	})
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			// One key reads as fast as it can: the per-key read rate
			// (KINFLOW_STATUS_READS_PER_SECOND) would answer 429; this
			// measures the reads.
			h := newHarness(b, testenv.OpenStore(b, d), func(c *config.Config, _ *Deps) { c.StatusReadsPerSecond = 0 })
			const ip = "192.0.2.77"
			key := h.newKey(ip)
			body, ct := multipartBody(b, "in.csv", csvRows(10), "targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"E"}`)
			r := h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct)
			if r.Code != 201 {
				b.Fatalf("submit %d %s", r.Code, r.Body)
			}
			path := "/api/v1/status/" + r.json(b)["jobId"].(string) + "/"
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest("GET", path, nil)
					req.RemoteAddr = ip + ":4000"
					req.Header.Set("Authorization", "Bearer "+key)
					rec := httptest.NewRecorder()
					h.srv.ServeHTTP(rec, req)
					if rec.Code != 200 {
						b.Fatalf("status %d", rec.Code)
					}
				}
			})
		})
	}
}

// BenchmarkSubmit10k measures one POST /submit/ of a 10,000-row CSV (about
// 3.3 MB of 300-residue sequences) end to end: parse, validate, quota,
// input.csv, job rows; allocations per submit are reported.
func BenchmarkSubmit10k(b *testing.B) {
	seq := strings.Repeat("ACDEFGHIKLMNPQRSTVWY", 15)
	var csv strings.Builder
	csv.WriteString("Protein Sequence,Substrate\n")
	for i := range 10000 {
		fmt.Fprintf(&csv, "%s,CC(=O)O%d\n", seq, i%10)
	}
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		b.Run(string(d), func(b *testing.B) {
			h := newHarness(b, testenv.OpenStore(b, d), func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = 1 << 30 })
			const ip = "192.0.2.78"
			key := h.newKey(ip)
			body, ct := multipartBody(b, "in.csv", csv.String(), "targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"C"}`)
			raw, _ := io.ReadAll(body)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r := h.do("POST", "/api/v1/submit/", ip, key, bytes.NewReader(raw), "Content-Type", ct)
				if r.Code != 201 {
					b.Fatalf("submit %d %s", r.Code, r.Body)
				}
			}
		})
		// The same with a fresh Idempotency-Key per submit: the request
		// hash and the key's claim are its whole extra cost.
		b.Run(string(d)+"-idempotency-key", func(b *testing.B) {
			h := newHarness(b, testenv.OpenStore(b, d), func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = 1 << 30 })
			const ip = "192.0.2.79"
			key := h.newKey(ip)
			body, ct := multipartBody(b, "in.csv", csv.String(), "targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"C"}`)
			raw, _ := io.ReadAll(body)
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			n := 0
			b.ResetTimer()
			for b.Loop() {
				n++
				r := h.do("POST", "/api/v1/submit/", ip, key, bytes.NewReader(raw), "Content-Type", ct, "Idempotency-Key", fmt.Sprintf("bench-%d", n))
				if r.Code != 201 {
					b.Fatalf("submit %d %s", r.Code, r.Body)
				}
			}
		})
	}
}
