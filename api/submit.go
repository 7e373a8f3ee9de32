package api

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
)

// jobIDLen is the length of a job id: 22 characters of [A-Za-z0-9] carry
// about 131 bits, far beyond guessing (WIRE top, item 5).
const jobIDLen = 22

const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newJobID draws a job id from crypto/rand; bytes ≥ 248 are rejected so that
// every character is equally likely.
func newJobID() (string, error) {
	out := make([]byte, 0, jobIDLen)
	var buf [32]byte
	for len(out) < jobIDLen {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("draw job id: %w", err)
		}
		for _, b := range buf {
			if b < 248 && len(out) < jobIDLen {
				out = append(out, idAlphabet[int(b)%len(idAlphabet)])
			}
		}
	}
	return string(out), nil
}

// multipartMemory is how much of a multipart body is held in memory; the
// rest of an upload spills to a temporary file (a 10,000-row file of long
// sequences is ~100 MiB).
const multipartMemory = 16 << 20

// requestBody is a /validate/ or /submit/ body, either form.
type requestBody struct {
	isJSON bool
	json   *input.JSONBody
	form   map[string][]string
	file   *multipart.FileHeader
}

// inputError answers an *input.Error with its status and message; any other
// error is internal.
func (s *Server) inputError(c *gin.Context, err error) {
	if e, ok := input.AsError(err); ok {
		abortError(c, e.Status(), e.Msg)
		return
	}
	s.internalError(c, "input.failed", err)
}

// readBody reads the body as JSON when Content-Type contains
// application/json, else as a form (multipart or urlencoded).
func (s *Server) readBody(c *gin.Context) (*requestBody, bool) {
	limit := int64(128 << 20)
	if s.deps.Config != nil && s.deps.Config.MaxUploadBytes > 0 {
		limit = s.deps.Config.MaxUploadBytes
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	if strings.Contains(c.GetHeader("Content-Type"), "application/json") {
		jb, err := input.ParseJSONBody(c.Request.Body, s.maxRows())
		if err != nil {
			s.inputError(c, err)
			return nil, false
		}
		return &requestBody{isJSON: true, json: jb}, true
	}
	b := &requestBody{}
	err := c.Request.ParseMultipartForm(multipartMemory)
	switch {
	case err == nil:
		b.form = c.Request.MultipartForm.Value
		if fs := c.Request.MultipartForm.File["file"]; len(fs) > 0 {
			b.file = fs[0]
		}
	case errors.Is(err, http.ErrNotMultipart):
		if err := c.Request.ParseForm(); err != nil {
			s.formError(c, err)
			return nil, false
		}
		b.form = c.Request.PostForm
	default:
		s.formError(c, err)
		return nil, false
	}
	return b, true
}

func (s *Server) formError(c *gin.Context, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		abortError(c, http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body is larger than the limit of %d bytes.", mbe.Limit))
		return
	}
	abortError(c, http.StatusBadRequest, "Could not read the form body: send multipart/form-data with a .csv file, or a JSON body.")
}

func (s *Server) maxRows() int {
	if s.deps.Config != nil && s.deps.Config.MaxRows > 0 {
		return s.deps.Config.MaxRows
	}
	return input.DefaultMaxRows
}

// loadTable reads the body's table: the JSON `data`, or the uploaded .csv.
func (s *Server) loadTable(b *requestBody) (*input.Table, error) {
	if b.isJSON {
		if b.json.DataErr != nil {
			return nil, b.json.DataErr
		}
		return b.json.Data, nil
	}
	if b.file == nil {
		return nil, &input.Error{Kind: input.KindInvalid, Msg: "No file uploaded: send the input as the multipart field 'file' (a .csv file)."}
	}
	if err := input.CheckUploadName(b.file.Filename); err != nil {
		return nil, err
	}
	f, err := b.file.Open()
	if err != nil {
		return nil, fmt.Errorf("open upload: %w", err)
	}
	defer f.Close()
	return input.ParseCSV(f, s.maxRows())
}

type submitBody struct {
	JobID     string    `json:"jobId"`
	Status    string    `json:"status"`
	StatusURL string    `json:"statusUrl"`
	ResultURL string    `json:"resultUrl"`
	Quota     quotaBody `json:"quota"`
}

// submit answers POST /submit/: validate, reserve quota, store the input and
// the job, then start its workflow.
func (s *Server) submit(c *gin.Context) {
	b, ok := s.readBody(c)
	if !ok {
		return
	}
	var (
		raw input.RawOptions
		err error
	)
	if b.isJSON {
		raw, err = input.OptionsFromJSON(b.json.Fields)
	} else {
		raw, err = input.OptionsFromForm(b.form)
	}
	if err != nil {
		s.inputError(c, err)
		return
	}
	sub, err := input.ValidateSubmit(s.cat, raw, func() (*input.Table, error) { return s.loadTable(b) })
	if err != nil {
		s.inputError(c, err)
		return
	}
	if err := input.CheckProducts(c.Request.Context(), s.chem, sub.Table); err != nil {
		s.inputError(c, err)
		return
	}
	if b.file != nil {
		// The parsed table is all that is needed from here on.
		_ = c.Request.MultipartForm.RemoveAll()
	}

	k := authKey(c)
	limit := c.GetInt64(ctxLimit)
	now := s.now()
	day := store.QuotaDay(now)
	n := int64(len(sub.Table.Rows))
	// Everything after the charge must finish or be undone even if the
	// client goes away, so it runs on a context that is not cancelled with
	// the request. A crash of this process is covered by the submit
	// reconciler (reconcile.go): each step below leaves a state it finishes.
	ctx := context.WithoutCancel(c.Request.Context())
	job, stages, err := s.newJob(c, k, sub, now)
	if err != nil {
		s.internalError(c, "job.create_failed", err)
		return
	}
	// 1. Charge and job row (Submitting) in one transaction.
	admitted, used, err := s.deps.Store.ChargeAndCreateJob(ctx, job, stages, day, limit)
	if err != nil {
		s.internalError(c, "job.create_failed", err)
		return
	}
	setRateHeaders(c, limit, limit-used, now)
	if !admitted {
		s.deps.Metrics.QuotaRejected()
		abortError(c, http.StatusTooManyRequests, fmt.Sprintf(
			"Daily prediction limit exceeded: %d predictions remaining today; this upload requires %d.", limit-used, n))
		return
	}
	id := job.ID
	crashPoint("charged")
	// 2. The input file, atomically: present means complete.
	if err := s.writeInput(job.InputPath, sub.Table); err != nil {
		s.abandon(ctx, c, id, err)
		s.internalError(c, "job.input_failed", err)
		return
	}
	crashPoint("input-written")
	if _, err := s.deps.Store.TouchUser(ctx, job.IPAddress, now); err != nil {
		// Bookkeeping of the caller's address only; the job stands.
		s.log.Warn("apiuser.touch_failed", "request_id", c.GetString(requestIDKey), "error", err)
	}
	// 3. The workflow (id prediction:<jobId>: a second start is refused).
	if err := s.startJob(ctx, id); err != nil {
		s.log.Error("job.start_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", err)
		if ok, ferr := s.deps.Store.AbandonSubmit(ctx, id, "The job could not be queued.", false, s.now()); ferr != nil {
			s.log.Error("job.fail_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", ferr)
		} else if ok {
			used -= n
		}
		setRateHeaders(c, limit, limit-used, now)
		abortError(c, http.StatusServiceUnavailable, "The job could not be queued: the scheduler is unavailable. Nothing was charged; please retry shortly.")
		return
	}
	crashPoint("workflow-started")
	// 4. Queued. false means the worker already moved it on, or the
	// reconciler gave up on it: this request outlived
	// KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS before its input was written, and
	// the job was refunded and removed (its workflow finds no job and ends).
	if queued, err := s.deps.Store.MarkQueued(ctx, id); err != nil {
		s.log.Warn("job.mark_queued_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", err)
	} else if !queued {
		if _, jerr := s.deps.Store.Job(ctx, id); errors.Is(jerr, store.ErrNotFound) {
			s.log.Error("job.reconciled_away", "request_id", c.GetString(requestIDKey), "job_id", id)
			_ = os.RemoveAll(s.mediaPath("jobs/" + id))
			abortError(c, http.StatusServiceUnavailable, "The job could not be queued in time. Nothing was charged; please retry.")
			return
		}
	}
	crashPoint("queued")
	s.log.Info("job.created", "request_id", c.GetString(requestIDKey), "job_public_id", id, "rows", n)
	c.JSON(http.StatusCreated, submitBody{JobID: id, Status: store.JobPending,
		StatusURL: "/api/v1/status/" + id + "/", ResultURL: "/api/v1/result/" + id + "/",
		Quota: newQuotaBody(limit, used, now)})
}

// abandon refunds and removes a Submitting job whose input could not be
// written, with its media folder.
func (s *Server) abandon(ctx context.Context, c *gin.Context, id string, cause error) {
	if _, err := s.deps.Store.AbandonSubmit(ctx, id, "", true, s.now()); err != nil {
		s.log.Error("job.abandon_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", errors.Join(cause, err))
	}
	_ = os.RemoveAll(s.mediaPath("jobs/" + id))
}

func (s *Server) startJob(ctx context.Context, id string) error {
	if s.deps.Jobs == nil {
		return errors.New("no job starter configured")
	}
	return s.deps.Jobs.StartJob(ctx, id)
}

// newJob builds the job row (ChargeAndCreateJob stores it as Submitting)
// and its stage rows.
func (s *Server) newJob(c *gin.Context, k *store.AuthKey, sub *input.Submission, now time.Time) (*store.Job, []store.JobStage, error) {
	id, err := newJobID()
	if err != nil {
		return nil, nil, err
	}
	o := sub.Options
	targets, _ := json.Marshal(o.Targets)
	meths, _ := json.Marshal(o.Methods)
	job := &store.Job{ID: id, KeyID: k.ID, IPAddress: s.callerIP(c),
		PredictionType: strings.Join(o.Targets, "+"), Targets: string(targets), Methods: string(meths),
		KcatMethod: o.Methods[string(methods.Kcat)], KmMethod: o.Methods[string(methods.Km)], KcatKmMethod: o.Methods[string(methods.KcatKm)],
		HandleLongSequences: o.HandleLongSequences, CanonicalizeSubstrates: o.CanonicalizeSubstrates,
		IncludeSimilarityColumns: o.IncludeSimilarityColumns, UseExperimental: o.UseExperimental,
		DisableGPUPrecompute: o.DisableGPUPrecompute, RequestedRows: len(sub.Table.Rows),
		SubmittedAt: now.UTC(), InputPath: "jobs/" + id + "/input.csv"}
	stages := make([]store.JobStage, 0, len(o.Targets))
	for i, t := range o.Targets {
		key := o.Methods[t]
		name := key
		if d, ok := s.cat.Get(key); ok && d.DisplayName != "" {
			name = d.DisplayName
		}
		stages = append(stages, store.JobStage{JobID: id, Index: i, Target: t, MethodKey: key, MethodName: name,
			Status: "pending", EmbeddingEnabled: true, EmbeddingState: "pending"})
	}
	return job, stages, nil
}

// writeInput writes the job's input.csv atomically (temporary file, sync,
// rename): the file exists only once complete, which is how the reconciler
// tells a submit that can go on from one to undo.
func (s *Server) writeInput(rel string, t *input.Table) error {
	err := fsutil.WriteAtomic(s.mediaPath(rel), 0o644, func(w io.Writer) error {
		if err := input.WriteCSV(w, t); err != nil {
			return err
		}
		crashPoint("input-partial")
		return nil
	})
	if err != nil {
		return fmt.Errorf("write input %s: %w", rel, err)
	}
	return nil
}

// validate answers POST /validate/: the §4.6 report of the table. No quota
// is used and nothing is stored.
func (s *Server) validate(c *gin.Context) {
	b, ok := s.readBody(c)
	if !ok {
		return
	}
	var sim bool
	if b.isJSON {
		sim = input.RunSimilarityJSON(b.json.Fields)
	} else {
		sim = input.RunSimilarityForm(b.form)
	}
	t, err := s.loadTable(b)
	if err != nil {
		s.inputError(c, err)
		return
	}
	rep, err := input.Validate(c.Request.Context(), s.cat, s.chem, t, sim)
	if err != nil {
		s.inputError(c, err)
		return
	}
	if sim && s.deps.Similarity != nil {
		rep.Similarity = s.deps.Similarity.Analyze(c.Request.Context(), similarityRows(t))
	}
	c.JSON(http.StatusOK, rep)
}

// similarityRows are the Protein Sequence cells of t, untrimmed (WIRE §4.8).
func similarityRows(t *input.Table) []string {
	col := t.Col(input.ColProteinSequence)
	if col < 0 {
		return nil
	}
	out := make([]string, 0, len(t.Rows))
	for _, r := range t.Rows {
		out = append(out, r.Cells[col])
	}
	return out
}
