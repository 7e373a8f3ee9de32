// Package client is a small Go client of kinflow's REST API, used by the
// `kinflow` command-line subcommands (key, validate, submit, status, result,
// methods). It speaks the wire format of docs/api.md: API-key routes by
// caller IP, everything else with `Authorization: Bearer <key>`, and every
// error as JSON {"error": "..."}.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/wire"
)

// DefaultBaseURL is where `make run` serves the API.
const DefaultBaseURL = "http://127.0.0.1:8000"

// errorBodyLimit caps how much of an error answer is read: an error body is
// one short JSON object, and a misconfigured URL (some other server) must not
// make the client buffer a large page.
const errorBodyLimit = 64 << 10

// Client calls one kinflow API. The zero HTTP client means a client with a
// 60 s timeout per request.
type Client struct {
	// BaseURL is the API's origin, e.g. http://127.0.0.1:8000 (no /api suffix).
	BaseURL string
	// Key is the API key sent as a bearer token; the key routes ignore it.
	Key string
	// HTTP is the transport; nil means a default client.
	HTTP *http.Client
}

// defaultHTTP bounds each request: uploads of the largest accepted input
// (128 MiB) finish well within a minute on a LAN, and a hung server must
// not hang a script forever. Waiting for a job polls with short requests.
var defaultHTTP = &http.Client{Timeout: 60 * time.Second}

// New returns a client of baseURL (DefaultBaseURL when empty) with key.
func New(baseURL, key string) *Client {
	if strings.TrimSpace(baseURL) == "" {
		baseURL = DefaultBaseURL
	}
	return &Client{BaseURL: strings.TrimRight(strings.TrimSpace(baseURL), "/"), Key: strings.TrimSpace(key)}
}

// APIError is an answer with a non-2xx status: Message is the API's
// {"error"} text (or a short excerpt of a body that was not JSON).
type APIError struct {
	Status  int
	Message string
	// RetryAfter is the answer's Retry-After (429, 503), 0 without one.
	RetryAfter time.Duration
}

// Error implements error: the API's message and the status code.
func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// IsStatus reports whether err is an *APIError with the given status.
func IsStatus(err error, status int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == status
}

// ErrNoKey is returned by the authenticated calls when no key is set.
var ErrNoKey = errors.New("no API key: pass --key or set KINFLOW_API_KEY (`kinflow key generate` makes one)")

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
}

// do sends a request and returns the response when its status is 2xx; any
// other status becomes an *APIError. The caller closes the body.
func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, auth bool) (*http.Response, error) {
	return c.doHeader(ctx, method, path, body, contentType, auth, nil)
}

// doHeader is do with extra request headers.
func (c *Client) doHeader(ctx context.Context, method, path string, body io.Reader, contentType string, auth bool, header http.Header) (*http.Response, error) {
	if auth && c.Key == "" {
		return nil, ErrNoKey
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+c.Key)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach kinflow at %s: %w", c.BaseURL, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 || resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
	var eb struct {
		Error string `json:"error"`
	}
	msg := ""
	if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
		msg = eb.Error
	} else {
		msg = strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		msg = fmt.Sprintf("unexpected answer from %s%s: %s", c.BaseURL, path, msg)
	}
	ae := &APIError{Status: resp.StatusCode, Message: msg}
	if n, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && n > 0 {
		ae.RetryAfter = time.Duration(n) * time.Second
	}
	return nil, ae
}

// getJSON sends a request and decodes a 2xx JSON answer into out.
func (c *Client) getJSON(ctx context.Context, method, path string, body io.Reader, contentType string, auth bool, out any) error {
	resp, err := c.do(ctx, method, path, body, contentType, auth)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// KeyStatus is GET /api/api-key/.
type KeyStatus struct {
	HasKey    bool   `json:"hasKey"`
	KeySuffix string `json:"keySuffix"`
}

// KeyStatus reports whether the caller's address has an active key.
func (c *Client) KeyStatus(ctx context.Context) (KeyStatus, error) {
	var out KeyStatus
	err := c.getJSON(ctx, http.MethodGet, "/api/api-key/", nil, "", false, &out)
	return out, err
}

// GeneratedKey is POST /api/api-key/generate/'s answer; Key is shown once.
type GeneratedKey struct {
	Key       string `json:"key"`
	KeySuffix string `json:"keySuffix"`
	Message   string `json:"message"`
}

// GenerateKey makes a key for the caller's address (409 when one is active).
func (c *Client) GenerateKey(ctx context.Context) (GeneratedKey, error) {
	var out GeneratedKey
	err := c.getJSON(ctx, http.MethodPost, "/api/api-key/generate/", nil, "", false, &out)
	return out, err
}

// RevokeKey revokes the caller address's active key (404 when none).
func (c *Client) RevokeKey(ctx context.Context) error {
	var out struct {
		Revoked bool `json:"revoked"`
	}
	if err := c.getJSON(ctx, http.MethodPost, "/api/api-key/revoke/", nil, "", false, &out); err != nil {
		return err
	}
	if !out.Revoked {
		return errors.New("revoke: the API did not confirm the revocation")
	}
	return nil
}

// Method is one entry of GET /api/v1/methods/.
type Method struct {
	ID          string   `json:"id"`
	DisplayName string   `json:"displayName"`
	Supports    []string `json:"supports"`
	InputFormat string   `json:"inputFormat"`
	MaxSeqLen   *int     `json:"maxSeqLen"`
	Required    []string `json:"requiredColumns"`
	// AcceptedCSVTypes and InputBehaviorByTarget say which substrate
	// layouts the method takes and how a `Substrates` list reaches it per
	// target.
	AcceptedCSVTypes      []string          `json:"acceptedCsvTypes"`
	InputBehaviorByTarget map[string]string `json:"inputBehaviorByTarget"`
	// Uncertainty is set for a method whose results carry an uncertainty
	// beside each value (nil for the others).
	Uncertainty *struct {
		Measure string   `json:"measure"`
		Parts   []string `json:"parts"`
	} `json:"uncertainty"`
	// RangeClasses is set, per target, for a method that answers range
	// classes rather than values (nil for the others).
	RangeClasses map[string]wire.RangeClasses `json:"rangeClasses"`
}

// Methods is GET /api/v1/methods/: methods by target, and the targets in order.
type Methods struct {
	Methods         map[string][]Method `json:"methods"`
	PredictionTypes []string            `json:"predictionTypes"`
}

// Methods lists the method catalogue.
func (c *Client) Methods(ctx context.Context) (Methods, error) {
	var out Methods
	err := c.getJSON(ctx, http.MethodGet, "/api/v1/methods/", nil, "", false, &out)
	return out, err
}

// ValidateReport is the part of POST /api/v1/validate/'s report the client
// reads; Raw is the whole answer.
type ValidateReport struct {
	RowCount          int `json:"rowCount"`
	InvalidSubstrates []struct {
		Row    int    `json:"row"`
		Value  any    `json:"value"`
		Reason string `json:"reason"`
		// InvalidSubstrates and InvalidProducts are a `Substrates` list's
		// bad tokens with their 1-based positions (nil for an empty list).
		InvalidSubstrates []TokenIssue `json:"invalid_substrates"`
		InvalidProducts   []TokenIssue `json:"invalid_products"`
	} `json:"invalidSubstrates"`
	InvalidProteins []struct {
		Row          int      `json:"row"`
		Value        string   `json:"value"`
		Position     int      `json:"position"`
		InvalidChars []string `json:"invalid_chars"`
		Reason       string   `json:"reason"`
	} `json:"invalidProteins"`
	LengthViolations map[string]int `json:"lengthViolations"`
	// Messages are the server's sentences for every finding, rows in order
	// (kinflow's addition; absent from older servers).
	Messages []ValidateMessage `json:"messages"`
	Raw      json.RawMessage   `json:"-"`
}

// ValidateMessage is one finding of a validation report in plain language.
type ValidateMessage struct {
	Row    *int   `json:"row"`
	Column string `json:"column"`
	// Level is "error" (the row gets no prediction), "warning" or "info".
	Level string `json:"level"`
	Text  string `json:"text"`
}

// TokenIssue is one bad token of a substrate or product list.
type TokenIssue struct {
	Position *int    `json:"position"`
	Value    *string `json:"value"`
}

// Problems counts the rows the report flags.
func (r *ValidateReport) Problems() int {
	return len(r.InvalidSubstrates) + len(r.InvalidProteins)
}

// ValidateOptions are a validation's optional fields: with Targets and
// Methods the report covers only the chosen methods.
type ValidateOptions struct {
	Targets       []string
	Methods       map[string]string
	RunSimilarity bool
}

// Validate checks a CSV without submitting it (no quota used).
func (c *Client) Validate(ctx context.Context, filename string, csv io.Reader, opts ...ValidateOptions) (*ValidateReport, error) {
	fields := map[string]string{}
	for _, o := range opts {
		if len(o.Targets) > 0 {
			t, _ := json.Marshal(o.Targets)
			m, _ := json.Marshal(o.Methods)
			fields["targets"], fields["methods"] = string(t), string(m)
		}
		if o.RunSimilarity {
			fields["runSimilarity"] = "true"
		}
	}
	body, ctype, err := multipartBody(filename, csv, fields)
	if err != nil {
		return nil, err
	}
	var raw json.RawMessage
	if err := c.getJSON(ctx, http.MethodPost, "/api/v1/validate/", body, ctype, true, &raw); err != nil {
		return nil, err
	}
	rep := &ValidateReport{Raw: raw}
	if err := json.Unmarshal(raw, rep); err != nil {
		return nil, fmt.Errorf("decode validation report: %w", err)
	}
	return rep, nil
}

// SubmitOptions are a submission's options (docs/api.md). Targets and
// Methods are required; the rest keep the API's defaults when zero.
type SubmitOptions struct {
	// Targets are the targets to predict (kcat, Km, kcat/Km), in any order.
	Targets []string
	// Methods maps each target to a method id from Methods().
	Methods map[string]string
	// HandleLongSequences is "truncate" or "skip"; "" keeps the default.
	HandleLongSequences string
	// CanonicalizeSubstrates nil keeps the default (true).
	CanonicalizeSubstrates   *bool
	IncludeSimilarityColumns bool
	DisableGPUPrecompute     bool
	// UsePredictionCache nil keeps the default (true): rows predicted
	// before with the same model are served from the prediction cache.
	UsePredictionCache *bool
	// IdempotencyKey is sent as the Idempotency-Key header; empty means a
	// new random key for this call, resent on each of its retries.
	IdempotencyKey string
	// NotifyURL is where the job's end is announced (docs/api.md,
	// Webhooks); empty: the key's default, if it has one.
	NotifyURL string
	// Priority "bulk" asks for the job to wait behind interactive and
	// normal work (docs/api.md, "When the service is busy"); "" lets the
	// job's size decide.
	Priority string
}

func (o SubmitOptions) fields() (map[string]string, error) {
	f := map[string]string{}
	t, err := json.Marshal(o.Targets)
	if err != nil {
		return nil, fmt.Errorf("encode targets: %w", err)
	}
	m, err := json.Marshal(o.Methods)
	if err != nil {
		return nil, fmt.Errorf("encode methods: %w", err)
	}
	f["targets"], f["methods"] = string(t), string(m)
	if o.HandleLongSequences != "" {
		f["handleLongSequences"] = o.HandleLongSequences
	}
	if o.CanonicalizeSubstrates != nil {
		f["canonicalizeSubstrates"] = strconv.FormatBool(*o.CanonicalizeSubstrates)
	}
	if o.IncludeSimilarityColumns {
		f["includeSimilarityColumns"] = "true"
	}
	if o.DisableGPUPrecompute {
		f["disableGpuPrecompute"] = "true"
	}
	if o.UsePredictionCache != nil {
		f["usePredictionCache"] = strconv.FormatBool(*o.UsePredictionCache)
	}
	if o.Priority != "" {
		f["priority"] = o.Priority
	}
	if o.NotifyURL != "" {
		f["notifyUrl"] = o.NotifyURL
	}
	return f, nil
}

// Submitted is POST /api/v1/submit/'s 201 answer.
type Submitted struct {
	JobID     string `json:"jobId"`
	Status    string `json:"status"`
	StatusURL string `json:"statusUrl"`
	ResultURL string `json:"resultUrl"`
}

// Submit retries: a submit that got no answer (connection lost, the API
// restarting) or a 5xx is sent again with the same Idempotency-Key, so a
// retry never makes a second job or a second charge. Three retries with
// doubling delays from half a second ride out an API restart.
const (
	submitRetries    = 3
	submitRetryDelay = 500 * time.Millisecond
)

// Submit uploads a CSV as a new job. It sends an Idempotency-Key
// (opts.IdempotencyKey, or a random one) and retries a lost or 5xx answer
// with the same key: the API answers a repeated key with the job the first
// attempt created.
func (c *Client) Submit(ctx context.Context, filename string, csv io.Reader, opts SubmitOptions) (*Submitted, error) {
	fields, err := opts.fields()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(csv)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filename, err)
	}
	idem := opts.IdempotencyKey
	if idem == "" {
		idem = NewIdempotencyKey()
	}
	header := http.Header{"Idempotency-Key": {idem}}
	delay := submitRetryDelay
	for attempt := 0; ; attempt++ {
		body, ctype, err := multipartBody(filename, bytes.NewReader(data), fields)
		if err != nil {
			return nil, err
		}
		resp, err := c.doHeader(ctx, http.MethodPost, "/api/v1/submit/", body, ctype, true, header)
		if err == nil {
			defer resp.Body.Close()
			var out Submitted
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				return nil, fmt.Errorf("decode submit answer: %w", err)
			}
			return &out, nil
		}
		var ae *APIError
		retryable := !errors.As(err, &ae) || ae.Status >= 500
		if !retryable || attempt == submitRetries || errors.Is(err, ErrNoKey) || ctx.Err() != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// NewIdempotencyKey is a random Idempotency-Key (128 bits, hex).
func NewIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Job is one entry of GET /api/v1/jobs/ (internal/wire).
type Job = wire.Job

// JobsPage is one page of GET /api/v1/jobs/ (internal/wire).
type JobsPage = wire.JobsPage

// Jobs lists the key's own jobs, newest first: one page of at most limit
// (0: the API's default), after cursor (""), only in status ("" for all;
// comma-separated for several).
func (c *Client) Jobs(ctx context.Context, status string, limit int, cursor string) (*JobsPage, error) {
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/api/v1/jobs/"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out JobsPage
	if err := c.getJSON(ctx, http.MethodGet, path, nil, "", true, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// multipartBody builds a multipart form with the CSV as the field "file".
// The body is buffered: the API caps uploads at 128 MiB, and a buffered
// body lets the transport send a Content-Length.
func multipartBody(filename string, csv io.Reader, fields map[string]string) (io.Reader, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			return nil, "", fmt.Errorf("build form: %w", err)
		}
	}
	fw, err := mw.CreateFormFile("file", filename)
	if err != nil {
		return nil, "", fmt.Errorf("build form: %w", err)
	}
	if _, err := io.Copy(fw, csv); err != nil {
		return nil, "", fmt.Errorf("read %s: %w", filename, err)
	}
	if err := mw.Close(); err != nil {
		return nil, "", fmt.Errorf("build form: %w", err)
	}
	return &buf, mw.FormDataContentType(), nil
}

// Embedding is a stage's (or the job's) embedding counters, counted in
// cache files, not sequences.
type Embedding struct {
	Enabled         bool   `json:"enabled"`
	State           string `json:"state"`
	MethodKey       string `json:"methodKey"`
	Target          string `json:"target"`
	Total           int    `json:"total"`
	CachedAlready   int    `json:"cachedAlready"`
	NeedComputation int    `json:"needComputation"`
	Computed        int    `json:"computed"`
	Remaining       int    `json:"remaining"`
}

// Stage is one entry of progressStages.
type Stage struct {
	Index      int    `json:"index"`
	Target     string `json:"target"`
	MethodKey  string `json:"methodKey"`
	MethodName string `json:"methodName"`
	Status     string `json:"status"`
	Message    string `json:"message"`
	Prediction struct {
		PredictionsTotal int `json:"predictionsTotal"`
		PredictionsMade  int `json:"predictionsMade"`
		// PredictionsCached are the units served from the prediction cache.
		PredictionsCached int `json:"predictionsCached"`
	} `json:"prediction"`
	Embedding Embedding `json:"embedding"`
	// Rows, Sequences, SequencesEmbedded, Percent and Seconds are the stage
	// in the user's units (kinflow's additions; zero/nil from older servers).
	Rows              int     `json:"rows"`
	Sequences         *int    `json:"sequences"`
	SequencesEmbedded *int    `json:"sequencesEmbedded"`
	Percent           float64 `json:"percent"`
	Seconds           *int64  `json:"seconds"`
}

// Overall is the status's `overall` object: the whole job in rows and
// sequences, one percentage, an ETA and one line of text (internal/wire).
type Overall = wire.Overall

// SimilarityNote is the status's `similarity` object: what the similarity
// columns hold, or why they are blank (internal/wire).
type SimilarityNote = wire.SimilarityNote

// Status is the part of GET /api/v1/status/{id}/ the client reads; Raw is
// the whole answer.
type Status struct {
	JobID          string  `json:"jobId"`
	Status         string  `json:"status"`
	ElapsedSeconds int64   `json:"elapsedSeconds"`
	QueuePosition  *int    `json:"queuePosition"`
	Stages         []Stage `json:"progressStages"`
	Progress       struct {
		PredictionsTotal  int        `json:"predictionsTotal"`
		PredictionsMade   int        `json:"predictionsMade"`
		PredictionsCached int        `json:"predictionsCached"`
		Embedding         *Embedding `json:"embedding"`
	} `json:"progress"`
	ActiveStageIndex    *int `json:"activeStageIndex"`
	CompletedStageCount int  `json:"completedStageCount"`
	TotalStageCount     int  `json:"totalStageCount"`
	GPUPrecompute       *struct {
		Reason  *string `json:"reason"`
		UsedGPU bool    `json:"usedGpu"`
		Failed  bool    `json:"failed"`
	} `json:"gpuPrecompute"`
	Error string `json:"error"`
	// Overall is nil from a server older than kinflow's `overall`.
	Overall    *Overall        `json:"overall"`
	Similarity *SimilarityNote `json:"similarity"`
	// Charge is what a finished job cost the key's daily quota; nil before
	// the job ends.
	Charge *Charge `json:"charge"`
	// Sharing is an unfinished job's class and the other keys' work it
	// shares the queues with; nil once it ended or from an older server.
	Sharing *wire.Sharing   `json:"sharing"`
	Raw     json.RawMessage `json:"-"`
}

// Charge is the status's `charge`: the rows charged at submit, the rows
// refunded at the end, and of those the rows served wholly from the
// prediction cache (internal/wire).
type Charge = wire.Charge

// Finished reports whether the job reached a final status.
func (s *Status) Finished() bool { return s.Status == "Completed" || s.Status == "Failed" }

// Status reads a job's status.
func (c *Client) Status(ctx context.Context, jobID string) (*Status, error) {
	st, _, err := c.StatusIfChanged(ctx, jobID, "", 0)
	return st, err
}

// LongPollWait is how long Wait asks the server to hold each status read
// for a change: under the default HTTP client's 60 s timeout and the
// server's default cap (60 s), so neither cuts a held request.
const LongPollWait = 30 * time.Second

// StatusIfChanged reads a job's status. With etag (the ETag of the last
// status read), it answers nil while the state is still that one; with
// wait as well, the server holds the request until the state changes or
// wait passes. tag is the answer's ETag ("" from a server without them,
// which ignores both and always answers the status).
func (c *Client) StatusIfChanged(ctx context.Context, jobID, etag string, wait time.Duration) (st *Status, tag string, err error) {
	path := "/api/v1/status/" + url.PathEscape(jobID) + "/"
	var h http.Header
	if etag != "" {
		h = http.Header{"If-None-Match": {etag}}
	}
	// The first read of a wait (no etag yet) says waitSeconds too: the
	// server answers it at once, and counts it among the waiting reads
	// (once per job in 10 s), whose per-key budget a looping poller of the
	// same key cannot exhaust.
	if wait > 0 {
		path += "?waitSeconds=" + strconv.Itoa(int(wait/time.Second))
	}
	resp, err := c.doHeader(ctx, http.MethodGet, path, nil, "", true, h)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	tag = resp.Header.Get("ETag")
	if resp.StatusCode == http.StatusNotModified {
		return nil, tag, nil
	}
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, "", fmt.Errorf("decode GET %s answer: %w", path, err)
	}
	st = &Status{Raw: raw}
	if err := json.Unmarshal(raw, st); err != nil {
		return nil, "", fmt.Errorf("decode status: %w", err)
	}
	return st, tag, nil
}

// Wait follows a job until it is Completed or Failed (or ctx ends), calling
// onUpdate with every new status. It rides the server's long poll: each
// request is held until the state changes (LongPollWait at most), so it asks
// about once per change, at most every interval/4; against a server without
// ETags it polls every interval. A 429 waits its Retry-After. When ctx ends
// it returns the last status read (nil if none) with ctx's error.
func (c *Client) Wait(ctx context.Context, jobID string, interval time.Duration, onUpdate func(*Status)) (*Status, error) {
	var last *Status
	etag := ""
	for {
		asked := time.Now()
		st, tag, err := c.StatusIfChanged(ctx, jobID, etag, LongPollWait)
		var pause time.Duration
		var ae *APIError
		switch {
		case err != nil && ctx.Err() != nil:
			return last, fmt.Errorf("wait for job %s: %w", jobID, ctx.Err())
		case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
			pause = max(ae.RetryAfter, interval)
		case err != nil:
			return last, err
		case st == nil:
			// 304 after the wait: ask again at once (unless it came
			// back at once: then something between does not hold it).
			pause = interval/4 - time.Since(asked)
		default:
			last, etag = st, tag
			if onUpdate != nil {
				onUpdate(st)
			}
			if st.Finished() {
				return st, nil
			}
			pause = interval
			if tag != "" {
				// A change came; the next one is waited for by the
				// server. The pause coalesces a burst of changes.
				pause = interval / 4
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("wait for job %s: %w", jobID, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// Result copies a completed job's result to w: the CSV, or with asJSON the
// JSON form. 409 until the job is Completed.
func (c *Client) Result(ctx context.Context, jobID string, asJSON bool, w io.Writer) error {
	path := "/api/v1/result/" + url.PathEscape(jobID) + "/"
	if asJSON {
		path += "?format=json"
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil, "", true)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("read result of %s: %w", jobID, err)
	}
	return nil
}
