package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/fairness"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
)

// jobIDLen is the length of a job id: 22 characters of [A-Za-z0-9] carry
// about 131 bits, far beyond guessing: a job id must not lead anyone to
// another's job.
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
	if !s.takeBody(c, limit) {
		return nil, false
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

// unitCapsOf are the server's caps on prediction units (one row may not buy
// unbounded work, though quota counts rows), read once when the Server is
// made. Without a configuration (a Server built bare) they are the
// configuration keys' defaults, from the one table of keys.
func unitCapsOf(cfg *config.Config) input.UnitCaps {
	if cfg == nil {
		var err error
		if cfg, err = config.Load(func(string) (string, bool) { return "", false }); err != nil {
			return input.UnitCaps{}
		}
	}
	return input.UnitCaps{PerRow: cfg.MaxUnitsPerRow, PerJob: cfg.MaxUnitsPerJob, CellBytes: cfg.MaxCellBytes, RowListBytes: cfg.MaxRowListBytes}
}

// options reads the body's option fields, JSON or form.
func (b *requestBody) options() (input.RawOptions, error) {
	if b.isJSON {
		return input.OptionsFromJSON(b.json.Fields)
	}
	return input.OptionsFromForm(b.form)
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
	idemKey, ok := idempotencyKey(c)
	if !ok {
		return
	}
	b, ok := s.readBody(c)
	if !ok {
		return
	}
	sub, ok := s.submission(c, b)
	if !ok {
		return
	}

	if s.mediaFull() { // storage.go: 503, nothing charged
		refuseStorageFull(c)
		return
	}
	if err := s.mediaAway(false); err != nil { // storage.go: 503, nothing charged
		s.log.Error("job.media_unavailable", "request_id", c.GetString(requestIDKey), "media_root", s.mediaRoot(), "error", err)
		refuseStorageUnavailable(c)
		return
	}
	k := authKey(c)
	notifyURL, ok := s.submitNotifyURL(c, b, k)
	if !ok {
		return
	}
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
	// Rows the prediction cache already holds are refunded at the end, so
	// they are not asked of the quota when the plain charge would not fit.
	job.QuotaCreditRows = s.quotaCredit(ctx, c, k.ID, day, limit, sub)
	job.NotifyURL = notifyURL
	job.InputName = uploadName(b)
	// 1. Charge and job row (Submitting) in one transaction; with an
	// Idempotency-Key, the key's claim too.
	res, ok := s.charge(ctx, c, idemKey, k.ID, job, stages, sub, limit, now)
	if !ok {
		return
	}
	used := res.Used
	setRateHeaders(c, limit, limit-used, now)
	switch {
	case res.Mismatch:
		abortError(c, http.StatusUnprocessableEntity, "This Idempotency-Key was already used for a different request in the last 24 hours: send a new key for a new request, or the same request to get its job.")
		return
	case !res.Admitted:
		s.deps.Metrics.QuotaRejected()
		need := job.Charge()
		held := ""
		if job.QuotaCreditRows > 0 {
			held = fmt.Sprintf(" (%d of its %d rows are already in the prediction cache and cost nothing)", job.QuotaCreditRows, n)
		}
		abortError(c, http.StatusTooManyRequests, fmt.Sprintf(
			"Daily limit exceeded: %d rows remaining today; this upload requires %d rows%s.", max(0, limit-used), need, held))
		return
	case res.Replay != nil:
		s.replaySubmit(c, ctx, res.Replay, sub, limit, used, now)
		return
	}
	id := job.ID
	crashPoint("charged")
	// 2. The input file, atomically: present means complete.
	if err := s.writeInput(job.InputPath, sub.Table); err != nil {
		s.abandon(ctx, c, id, err)
		// Storage full or not writable at all (storage.go): 503, the
		// charge refunded by abandon. The error, with its path, goes to
		// the log only.
		// A root that went away after the check above fails the write
		// with a missing folder: that is the storage's failure too.
		if full, down := fsutil.NoSpace(err), fsutil.Unwritable(err) || s.mediaAway(true) != nil; full || down {
			s.log.Error("job.input_failed", "request_id", c.GetString(requestIDKey), "error", err)
			setRateHeaders(c, limit, limit-used+job.Charge(), now)
			if full {
				refuseStorageFull(c)
			} else {
				refuseStorageUnavailable(c)
			}
			return
		}
		s.internalError(c, "job.input_failed", err)
		return
	}
	crashPoint("input-written")
	if _, err := s.deps.Store.TouchUser(ctx, job.IPAddress, now); err != nil {
		// Bookkeeping of the caller's address only; the job stands.
		s.log.Warn("apiuser.touch_failed", "request_id", c.GetString(requestIDKey), "error", err)
	}
	// 3. The workflow (id prediction:<jobId>: a second start is refused,
	// and means a retry with the same Idempotency-Key started it). A start
	// the scheduler refused leaves nothing: the caller hears 503 with no
	// job id, so a Failed job in its /jobs/ would be one it never had (a
	// workflow that started after all finds no job and ends).
	if err := s.startJob(ctx, id); err != nil && !alreadyStarted(err) {
		s.log.Error("job.start_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", err)
		if ok, ferr := s.deps.Store.AbandonSubmit(ctx, id, "", true, s.now()); ferr != nil {
			s.log.Error("job.fail_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", ferr)
		} else if ok {
			used -= job.Charge()
			_ = os.RemoveAll(s.mediaPath(jobfiles.DirRel(id)))
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
			_ = os.RemoveAll(s.mediaPath(jobfiles.DirRel(id)))
			abortError(c, http.StatusServiceUnavailable, "The job could not be queued in time. Nothing was charged; please retry.")
			return
		}
	}
	crashPoint("queued")
	s.log.Info("job.created", "request_id", c.GetString(requestIDKey), "job_public_id", id, "rows", n)
	c.JSON(http.StatusCreated, newSubmitBody(id, store.JobPending, limit, used, now))
}

// submission reads and checks the request's options and table; false when
// it answered the request (400 with the reason).
func (s *Server) submission(c *gin.Context, b *requestBody) (*input.Submission, bool) {
	raw, err := b.options()
	if err != nil {
		s.inputError(c, err)
		return nil, false
	}
	sub, err := input.ValidateSubmit(s.cat, raw, func() (*input.Table, error) { return s.loadTable(b) })
	if err != nil {
		s.inputError(c, err)
		return nil, false
	}
	// One row may not buy unbounded work: quota counts rows, so the
	// prediction units a row (and a job) may carry, and the bytes of its
	// cells, are capped; checked first, being the cheapest.
	if err := input.CountUnits(s.cat, sub.Table, sub.Options.Targets, sub.Options.Methods, s.caps).Err(); err != nil {
		s.inputError(c, err)
		return nil, false
	}
	if err := input.CheckProducts(c.Request.Context(), s.chem, sub.Table); err != nil {
		s.inputError(c, err)
		return nil, false
	}
	if b.file != nil {
		// The parsed table is all that is needed from here on.
		_ = c.Request.MultipartForm.RemoveAll()
	}
	return sub, true
}

// charge charges the key and creates the job row (Submitting) in one
// transaction; with an Idempotency-Key, the key's claim too. False when it
// answered the request (503 for a full database disk, 500).
func (s *Server) charge(ctx context.Context, c *gin.Context, idemKey string, keyID int64, job *store.Job, stages []store.JobStage, sub *input.Submission, limit int64, now time.Time) (store.SubmitResult, bool) {
	day := store.QuotaDay(now)
	var res store.SubmitResult
	var err error
	if idemKey == "" {
		res.Admitted, res.Used, err = s.deps.Store.ChargeAndCreateJob(ctx, job, stages, day, limit)
	} else {
		idem := store.Idempotency{KeyHash: store.HashKey(idemKey), RequestHash: requestHash(sub)}
		mu := &s.idemLocks[(uint64(keyID)+uint64(idem.KeyHash[0])<<8+uint64(idem.KeyHash[1]))%uint64(len(s.idemLocks))]
		mu.Lock()
		res, err = s.deps.Store.ChargeAndCreateJobOnce(ctx, job, stages, day, limit, idem, now)
		mu.Unlock()
	}
	if err != nil {
		if fsutil.NoSpace(err) { // the database's disk is full
			s.log.Error("job.create_failed", "request_id", c.GetString(requestIDKey), "error", err)
			s.noteDatabaseFull()
			refuseStorageFull(c)
			return res, false
		}
		s.internalError(c, "job.create_failed", err)
		return res, false
	}
	return res, true
}

func newSubmitBody(id, status string, limit, used int64, now time.Time) submitBody {
	return submitBody{JobID: id, Status: status,
		StatusURL: "/api/v1/status/" + id + "/", ResultURL: "/api/v1/result/" + id + "/",
		Quota: newQuotaBody(limit, used, now)}
}

// idempotencyKeyMax is the longest Idempotency-Key accepted (Stripe's
// limit; a UUID is 36 characters).
const idempotencyKeyMax = 255

// idempotencyKey reads the optional Idempotency-Key header: 1 to 255
// printable ASCII characters. It answers 400 and reports false when the
// header is present but malformed.
func idempotencyKey(c *gin.Context) (string, bool) {
	vs := c.Request.Header.Values("Idempotency-Key")
	if len(vs) == 0 {
		return "", true
	}
	v := strings.TrimSpace(vs[0])
	bad := len(vs) > 1 || v == "" || len(v) > idempotencyKeyMax
	for i := 0; i < len(v) && !bad; i++ {
		bad = v[i] < 0x20 || v[i] > 0x7e
	}
	if bad {
		abortError(c, http.StatusBadRequest, fmt.Sprintf("Invalid Idempotency-Key header: send one value of 1 to %d printable ASCII characters (a UUID is a good choice).", idempotencyKeyMax))
		return "", false
	}
	return v, true
}

// requestHash is the SHA-256 of what a submit asks for: its validated
// options and its input rows as they would be stored. Two requests that
// differ only in form encoding (multipart boundary, field order, JSON
// spacing) hash alike.
func requestHash(sub *input.Submission) string {
	h := sha256.New()
	opts, _ := json.Marshal(sub.Options)
	h.Write(opts)
	h.Write([]byte{0})
	_ = input.WriteCSV(h, sub.Table)
	return hex.EncodeToString(h.Sum(nil))
}

// replaySubmit answers a submit whose Idempotency-Key and request match an
// earlier one: 201 with the earlier job, nothing charged. When the earlier
// submit was cut off before its job was queued (the api killed, the client
// never answered), the retry finishes it with the same idempotent steps:
// write the input if absent (the request is the same, so is the input),
// start the workflow (a second start is refused and counts as started),
// mark it Pending.
func (s *Server) replaySubmit(c *gin.Context, ctx context.Context, j *store.Job, sub *input.Submission, limit, used int64, now time.Time) {
	rid := c.GetString(requestIDKey)
	c.Header("Idempotent-Replayed", "true")
	if j.Status == store.JobSubmitting {
		if _, err := os.Stat(s.mediaPath(j.InputPath)); err != nil {
			if err := s.writeInput(j.InputPath, sub.Table); err != nil {
				if fsutil.NoSpace(err) || fsutil.Unwritable(err) || s.mediaAway(true) != nil {
					// The job stays Submitting: a retry finishes it, or
					// the reconciler refunds and removes it.
					s.log.Error("job.input_failed", "request_id", rid, "job_id", j.ID, "error", err)
					c.Header("Retry-After", strconv.Itoa(storageRetryAfter))
					abortError(c, http.StatusServiceUnavailable, "Storage unavailable: the job's input could not be stored. Please retry later with the same Idempotency-Key.")
					return
				}
				s.internalError(c, "job.input_failed", err)
				return
			}
		}
		if err := s.startJob(ctx, j.ID); err != nil && !alreadyStarted(err) {
			s.log.Error("job.start_failed", "request_id", rid, "job_id", j.ID, "error", err)
			abortError(c, http.StatusServiceUnavailable, "The job could not be queued: the scheduler is unavailable. Please retry shortly with the same Idempotency-Key.")
			return
		}
		if queued, err := s.deps.Store.MarkQueued(ctx, j.ID); err != nil {
			s.log.Warn("job.mark_queued_failed", "request_id", rid, "job_id", j.ID, "error", err)
		} else if !queued {
			if _, jerr := s.deps.Store.Job(ctx, j.ID); errors.Is(jerr, store.ErrNotFound) {
				// The reconciler undid it meanwhile, and released the key;
				// the input this retry wrote belongs to no job.
				s.log.Error("job.reconciled_away", "request_id", rid, "job_id", j.ID)
				_ = os.RemoveAll(s.mediaPath(jobfiles.DirRel(j.ID)))
				abortError(c, http.StatusServiceUnavailable, "The job could not be queued in time. Nothing was charged; please retry.")
				return
			}
		}
	}
	s.log.Info("job.replayed", "request_id", rid, "job_public_id", j.ID)
	c.JSON(http.StatusCreated, newSubmitBody(j.ID, jobStatusOnWire(j.Status), limit, used, now))
}

// abandon refunds and removes a Submitting job whose input could not be
// written, with its media folder.
func (s *Server) abandon(ctx context.Context, c *gin.Context, id string, cause error) {
	if _, err := s.deps.Store.AbandonSubmit(ctx, id, "", true, s.now()); err != nil {
		s.log.Error("job.abandon_failed", "request_id", c.GetString(requestIDKey), "job_id", id, "error", errors.Join(cause, err))
	}
	_ = os.RemoveAll(s.mediaPath(jobfiles.DirRel(id)))
}

func (s *Server) startJob(ctx context.Context, id string) error {
	if s.deps.Jobs == nil {
		return errors.New("no job starter configured")
	}
	return s.deps.Jobs.StartJob(ctx, id)
}

// quotaCredit is how many of sub's rows the prediction cache already holds
// for every chosen target, when the plain charge of every row would not fit
// in the key's quota (else 0: the end of the job refunds cached rows
// anyway). It reads the cached-rows ledger (predcache.RowsHeld): one index
// probe per row and target. A job that asked not to use the cache gets no
// credit; a failed read is logged and gives none.
func (s *Server) quotaCredit(ctx context.Context, c *gin.Context, keyID int64, day string, limit int64, sub *input.Submission) int {
	o := sub.Options
	n := int64(len(sub.Table.Rows))
	if !o.UsePredictionCache || n == 0 {
		return 0
	}
	used, err := s.deps.Store.QuotaUsed(ctx, keyID, day)
	if err != nil || used+n <= limit {
		return 0
	}
	version := func(m string) string {
		if d, ok := s.cat.Get(m); ok {
			return d.ModelVersion
		}
		return ""
	}
	specs := predcache.RowSpecs(o.Targets, o.Methods, version, o.CanonicalizeSubstrates, o.HandleLongSequences)
	rows := make([][]string, len(sub.Table.Rows))
	for i, r := range sub.Table.Rows {
		rows[i] = r.Cells
	}
	held, err := predcache.RowsHeld(ctx, s.deps.Store, specs, sub.Table.Columns, rows)
	if err != nil {
		s.log.Warn("quota.cached_rows_failed", "request_id", c.GetString(requestIDKey), "error", err)
		return 0
	}
	return held
}

// uploadName is the name the body's file was uploaded as, kept with its
// job for the list of jobs: its base name (a client may send a path),
// without control characters, at most 255 bytes of whole characters; ""
// for a JSON body.
func uploadName(b *requestBody) string {
	if b.isJSON || b.file == nil {
		return ""
	}
	name := b.file.Filename
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, name)
	for len(name) > 255 {
		_, n := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-n]
	}
	return name
}

// newJob builds the job row (ChargeAndCreateJob stores it as Submitting)
// and its stage rows.
func (s *Server) newJob(c *gin.Context, k *store.AuthKey, sub *input.Submission, now time.Time) (*store.Job, []store.JobStage, error) {
	id, err := newJobID()
	if err != nil {
		return nil, nil, err
	}
	o := sub.Options
	job := &store.Job{ID: id, KeyID: k.ID, IPAddress: s.callerIP(c),
		PredictionType: strings.Join(o.Targets, "+"), Targets: o.Targets, Methods: o.Methods,
		KcatMethod: o.Methods[string(methods.Kcat)], KmMethod: o.Methods[string(methods.Km)], KcatKmMethod: o.Methods[string(methods.KcatKm)],
		HandleLongSequences: o.HandleLongSequences, CanonicalizeSubstrates: o.CanonicalizeSubstrates,
		IncludeSimilarityColumns: o.IncludeSimilarityColumns, UseExperimental: o.UseExperimental,
		DisableGPUPrecompute: o.DisableGPUPrecompute, UsePredictionCache: o.UsePredictionCache, RequestedRows: len(sub.Table.Rows),
		SubmittedAt: now.UTC(), InputPath: jobfiles.InputRel(id), Priority: string(s.jobClass(len(sub.Table.Rows), o.Priority))}
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

// jobClass is the class of a job of rows rows whose submit asked for
// request (internal/fairness).
func (s *Server) jobClass(rows int, request string) fairness.Class {
	small, bulk := 0, 0
	if cfg := s.deps.Config; cfg != nil {
		small, bulk = cfg.SmallJobRows, cfg.BulkJobRows
	}
	return fairness.ClassFor(rows, request, small, bulk)
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

// validate answers POST /validate/: the validation report of the table. No
// quota is used and nothing is stored.
func (s *Server) validate(c *gin.Context) {
	vctx, done, ok := s.validateLimits(c) // validate_limit.go
	if !ok {
		return
	}
	defer done()
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
	keys, opts, err := s.validateChoice(b) // validate_choice.go
	if err != nil {
		s.inputError(c, err)
		return
	}
	t, err := s.loadTable(b)
	if err != nil {
		s.inputError(c, err)
		return
	}
	rep, err := input.Validate(vctx, s.cat, s.chem, t, sim)
	if err == nil {
		err = vctx.Err() // past the bound in checks that do not wait on it
	}
	if err != nil {
		if s.validateTimedOut(c, vctx, err) {
			return
		}
		s.inputError(c, err)
		return
	}
	if sim && s.deps.Similarity != nil {
		rep.Similarity = s.similarityFor(vctx, similarityRows(t), keys)
	}
	// The prediction units against the caps: of the chosen targets and
	// methods, or the most any method makes of each row.
	var u input.UnitsReport
	if opts != nil {
		u = input.CountUnits(s.cat, t, opts.Targets, opts.Methods, s.caps)
	} else {
		u = input.CountUnits(s.cat, t, nil, nil, s.caps)
	}
	rep.PredictionUnits = &u
	finishReport(rep, keys)
	c.JSON(http.StatusOK, rep)
}

// similarityRows are the Protein Sequence cells of t, untrimmed, as the
// reference deployment's similarity search takes them.
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
