package api

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/wire"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/store"
)

// result answers GET /result/{id}/: the stored output.csv, or its JSON form
// with ?format=json (blanks as null, never NaN).
func (s *Server) result(c *gin.Context) {
	j, ok := s.ownedJob(c)
	if !ok {
		return
	}
	if s.jobExpired(j) { // retention.go: 410
		s.refuseExpired(c, j)
		return
	}
	if j.Status == store.JobFailed {
		// It never will be Completed: say so, not "poll until".
		abortError(c, http.StatusConflict, fmt.Sprintf("Job '%s' is not completed (status: Failed) and has no result: %s See /api/v1/status/%s/ for its stages.",
			j.ID, failedReason(j), j.ID))
		return
	}
	if j.Status != store.JobCompleted {
		abortError(c, http.StatusConflict, fmt.Sprintf("Job '%s' is not completed (status: %s). Poll /api/v1/status/%s/ until it is Completed.", j.ID, jobStatusOnWire(j.Status), j.ID))
		return
	}
	if j.OutputPath == "" {
		s.internalError(c, "result.no_output", fmt.Errorf("job %s is Completed without an output path", j.ID))
		return
	}
	// The result lives under the media root: while that is not there with
	// its identity (storage.go), 503 with Retry-After, not a 500 naming
	// what is missing; a read that fails because it went away meanwhile
	// answers the same.
	if err := s.mediaAway(false); err != nil {
		s.log.Warn("result.media_unavailable", "request_id", c.GetString(requestIDKey), "job_id", j.ID, "media_root", s.mediaRoot(), "error", err)
		refuseMediaRead(c)
		return
	}
	path := s.mediaPath(j.OutputPath)
	if c.Query("format") == "json" {
		raw, err := os.ReadFile(path)
		if err != nil {
			s.resultReadFailed(c, "result.read_failed", err)
			return
		}
		body, err := resultJSON(j.ID, raw, j.Synthetic)
		if err != nil {
			s.internalError(c, "result.parse_failed", err)
			return
		}
		if p, ok := s.readProvenance(j); ok {
			body = withProvenance(body, p)
		}
		ranges := s.rangeClasses(j)
		if ranges != nil {
			body = withKey(body, "rangeClasses", ranges)
		}
		body = withColumnNotes(body, rangeNotes(columnNotes(s.similarityNote(j)), ranges))
		body = withCharge(body, jobCharge(j))
		c.Data(http.StatusOK, "application/json; charset=utf-8", body)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		s.resultReadFailed(c, "result.open_failed", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.internalError(c, "result.stat_failed", err)
		return
	}
	c.Header("Content-Disposition", `attachment; filename="kinflow-`+j.ID+`-results.csv"`)
	c.DataFromReader(http.StatusOK, fi.Size(), "text/csv", f, nil)
}

// resultReadFailed answers a result file that could not be read: 503 when
// the media root went away (refuseMediaRead), else 500.
func (s *Server) resultReadFailed(c *gin.Context, what string, err error) {
	if merr := s.mediaAway(true); merr != nil {
		s.log.Warn(what, "request_id", c.GetString(requestIDKey), "media_root", s.mediaRoot(), "error", err, "media", merr)
		refuseMediaRead(c)
		return
	}
	s.internalError(c, what, err)
}

// mediaPath resolves a path recorded on a job (relative to the media root, or
// absolute as some writers record it).
func (s *Server) mediaPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.mediaRoot(), filepath.FromSlash(p))
}

func (s *Server) mediaRoot() string {
	if s.deps.Config != nil && s.deps.Config.MediaRoot != "" {
		return s.deps.Config.MediaRoot
	}
	return "media"
}

// naTokens are the cells pandas reads as missing; the reference's JSON form
// re-reads the CSV with pandas, so these become null too.
var naTokens = map[string]bool{"": true, "#N/A": true, "#N/A N/A": true, "#NA": true, "-1.#IND": true,
	"-1.#QNAN": true, "-NaN": true, "-nan": true, "1.#IND": true, "1.#QNAN": true, "<NA>": true, "N/A": true,
	"NA": true, "NULL": true, "NaN": true, "None": true, "n/a": true, "nan": true, "null": true}

type colKind int

const (
	kindInt colKind = iota
	kindFloat
	kindString
)

// resultJSON turns an output CSV into /result/'s JSON form: a column whose
// cells are all integers gives ints, all numbers gives floats, anything else
// strings; missing cells are null.
func resultJSON(id string, raw []byte, synthetic bool) ([]byte, error) {
	r := csv.NewReader(bytes.NewReader(raw))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		header = []string{}
	} else if err != nil {
		return nil, fmt.Errorf("read output header: %w", err)
	}
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read output rows: %w", err)
	}
	kinds := make([]colKind, len(header))
	for ci := range header {
		for _, row := range rows {
			v := cell(row, ci)
			if naTokens[v] {
				continue
			}
			if _, err := strconv.ParseInt(v, 10, 64); err == nil {
				continue
			}
			if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				kinds[ci] = max(kinds[ci], kindFloat)
				continue
			}
			kinds[ci] = kindString
			break
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"jobId":`)
	writeJSON(&b, id)
	b.WriteString(`,"columns":`)
	writeJSON(&b, header)
	b.WriteString(`,"rowCount":`)
	b.WriteString(strconv.Itoa(len(rows)))
	b.WriteString(`,"data":[`)
	for ri, row := range rows {
		if ri > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		for ci, name := range header {
			if ci > 0 {
				b.WriteByte(',')
			}
			writeJSON(&b, name)
			b.WriteByte(':')
			v := cell(row, ci)
			switch {
			case naTokens[v]:
				b.WriteString("null")
			case kinds[ci] == kindInt:
				n, _ := strconv.ParseInt(v, 10, 64)
				b.WriteString(strconv.FormatInt(n, 10))
			case kinds[ci] == kindFloat:
				f, _ := strconv.ParseFloat(v, 64)
				writeJSON(&b, f)
			default:
				writeJSON(&b, v)
			}
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	if synthetic {
		// kinflow adds this key when the numbers come from the synthetic
		// backends: they are stand-ins, not predictions.
		b.WriteString(`,"synthetic":true`)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func cell(row []string, i int) string {
	if i < len(row) {
		return row[i]
	}
	return ""
}

func writeJSON(b *bytes.Buffer, v any) {
	enc, _ := json.Marshal(v)
	b.Write(enc)
}

// withCharge adds `"charge": {...}` as the last key of a JSON result object.
func withCharge(body []byte, ch *wire.Charge) []byte {
	if ch == nil {
		return body
	}
	return withKey(body, "charge", ch)
}

// jobError is a Failed job's error as users read it (its status's error).
func jobError(j *store.Job) string {
	if msg := strings.TrimSpace(userMessage(j.ErrorMessage)); msg != "" {
		return msg
	}
	return "The job failed with an unknown error."
}

// failedReason is jobError ending with a full stop, for a sentence.
func failedReason(j *store.Job) string {
	msg := jobError(j)
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
