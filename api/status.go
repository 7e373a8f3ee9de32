package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/wire"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/store"
)

// jobIDPattern is the wire's slug pattern for the job id path segment
// (jobfiles.SlugPattern); anything else is answered like an unknown route
// (JSON 404).
var jobIDPattern = jobfiles.SlugPattern

// gpuEventsKept is how many GPU-precompute events a status shows: the last
// 20, as the reference deployment keeps.
const gpuEventsKept = 20

// ownedJob loads the path's job for the authenticated key, answering 404 for
// a bad slug, an unknown id and another key's job alike.
func (s *Server) ownedJob(c *gin.Context) (*store.Job, bool) {
	id := c.Param("id")
	if !jobIDPattern.MatchString(id) {
		abortError(c, http.StatusNotFound, "Not found.")
		return nil, false
	}
	j, err := s.deps.Store.JobOwnedBy(c.Request.Context(), id, authKey(c).ID)
	if errors.Is(err, store.ErrNotFound) {
		abortError(c, http.StatusNotFound, fmt.Sprintf("No job found with id '%s'.", id))
		return nil, false
	}
	if err != nil {
		s.internalError(c, "job.read_failed", err)
		return nil, false
	}
	return j, true
}

// statusBody is /status/'s payload, keys in the wire's fixed order.
type statusBody struct {
	JobID               string         `json:"jobId"`
	Status              string         `json:"status"`
	SubmittedAt         string         `json:"submittedAt"`
	ElapsedSeconds      int64          `json:"elapsedSeconds"`
	QueueSeconds        *int64         `json:"queueSeconds"`
	ComputeSeconds      *int64         `json:"computeSeconds"`
	QueuePosition       *int           `json:"queuePosition"`
	Progress            progressBody   `json:"progress"`
	ProgressStages      []stageBody    `json:"progressStages"`
	ActiveStageIndex    *int           `json:"activeStageIndex"`
	CompletedStageCount int            `json:"completedStageCount"`
	TotalStageCount     int            `json:"totalStageCount"`
	GPUPrecompute       *gpuPrecompute `json:"gpuPrecompute,omitempty"`
	CompletedAt         string         `json:"completedAt,omitempty"`
	ResultURL           string         `json:"resultUrl,omitempty"`
	Error               string         `json:"error,omitempty"`
	// Expired is kinflow's addition: set once the job's files and result
	// are gone (KINFLOW_JOB_RETENTION_DAYS after its end); /result/
	// answers 410 then, and the status carries no resultUrl.
	Expired bool `json:"expired,omitempty"`
	// Synthetic is kinflow's addition: set when the job runs on the
	// synthetic backends, whose numbers are stand-ins, not predictions.
	Synthetic bool `json:"synthetic,omitempty"`
	// Provenance is kinflow's addition, on a finished job: per stage, the
	// method and its model version, the engine's fingerprint and the
	// fingerprint of each artefact family the stage read.
	Provenance []provenance.Stage `json:"provenance,omitempty"`
	// Notice is kinflow's addition: one sentence when the job read cached
	// files of unverified origin or synthetic artefacts.
	Notice string `json:"notice,omitempty"`
	// Overall is kinflow's addition (progress.go): the whole job in rows
	// and sequences, one percentage, an ETA and one line of text.
	Overall wire.Overall `json:"overall"`
	// Similarity is kinflow's addition (similarity_note.go): what the
	// similarity columns hold, or why they are blank; absent when the job
	// has none.
	Similarity *wire.SimilarityNote `json:"similarity,omitempty"`
	// Charge is kinflow's addition, on a finished job: the rows charged
	// and given back to the key's daily quota.
	Charge *wire.Charge `json:"charge,omitempty"`
	// Sharing is kinflow's addition (sharing.go), on an unfinished job:
	// its class and the other keys' work it shares the queues with.
	Sharing *wire.Sharing `json:"sharing,omitempty"`
}

// jobCharge is j's charge once it has finished (nil before).
func jobCharge(j *store.Job) *wire.Charge {
	if j.Status != store.JobCompleted && j.Status != store.JobFailed {
		return nil
	}
	return &wire.Charge{RowsCharged: j.RequestedRows, RowsRefunded: j.RefundedRows, CachedRowsRefunded: j.RefundedCachedRows}
}

type progressBody struct {
	MoleculesTotal     int `json:"moleculesTotal"`
	MoleculesProcessed int `json:"moleculesProcessed"`
	PredictionsTotal   int `json:"predictionsTotal"`
	PredictionsMade    int `json:"predictionsMade"`
	// PredictionsCached is kinflow's addition: the prediction units
	// served from the prediction cache instead of the engine.
	PredictionsCached   int           `json:"predictionsCached"`
	InvalidRows         int           `json:"invalidRows"`
	Stages              []stageBody   `json:"stages"`
	ActiveStageIndex    *int          `json:"activeStageIndex"`
	CompletedStageCount int           `json:"completedStageCount"`
	TotalStageCount     int           `json:"totalStageCount"`
	Embedding           *jobEmbedding `json:"embedding,omitempty"`
}

// jobEmbedding is the status's progress.embedding, keys in order.
type jobEmbedding struct {
	Enabled         bool    `json:"enabled"`
	State           string  `json:"state"`
	MethodKey       string  `json:"methodKey"`
	MethodKeySnake  string  `json:"method_key"`
	Target          string  `json:"target"`
	Total           int     `json:"total"`
	CachedAlready   int     `json:"cachedAlready"`
	CachedSnake     int     `json:"cached_already"`
	NeedComputation int     `json:"needComputation"`
	NeedSnake       int     `json:"need_computation"`
	Computed        int     `json:"computed"`
	Remaining       int     `json:"remaining"`
	UpdatedAt       *string `json:"updatedAt"`
}

type stageBody struct {
	Index          int             `json:"index"`
	Target         string          `json:"target"`
	MethodKeySnake string          `json:"method_key"`
	MethodKey      string          `json:"methodKey"`
	MethodNameSn   string          `json:"method_name"`
	MethodName     string          `json:"methodName"`
	Status         string          `json:"status"`
	StartedAt      *string         `json:"started_at"`
	CompletedAt    *string         `json:"completed_at"`
	Message        string          `json:"message"`
	Prediction     stagePrediction `json:"prediction"`
	Embedding      stageEmbedding  `json:"embedding"`
	// stageUserUnits are kinflow's additions (progress.go): the stage in
	// rows and sequences, its percentage and duration.
	stageUserUnits
}

type stagePrediction struct {
	MoleculesTotalSn     int `json:"molecules_total"`
	MoleculesProcessedSn int `json:"molecules_processed"`
	InvalidRowsSn        int `json:"invalid_rows"`
	PredictionsTotalSn   int `json:"predictions_total"`
	PredictionsMadeSn    int `json:"predictions_made"`
	MoleculesTotal       int `json:"moleculesTotal"`
	MoleculesProcessed   int `json:"moleculesProcessed"`
	InvalidRows          int `json:"invalidRows"`
	PredictionsTotal     int `json:"predictionsTotal"`
	PredictionsMade      int `json:"predictionsMade"`
	// PredictionsCached (and its snake_case twin) is kinflow's addition.
	PredictionsCachedSn int `json:"predictions_cached"`
	PredictionsCached   int `json:"predictionsCached"`
}

type stageEmbedding struct {
	Enabled         bool   `json:"enabled"`
	State           string `json:"state"`
	MethodKeySnake  string `json:"method_key"`
	MethodKey       string `json:"methodKey"`
	Target          string `json:"target"`
	Total           int    `json:"total"`
	CachedSnake     int    `json:"cached_already"`
	NeedSnake       int    `json:"need_computation"`
	Computed        int    `json:"computed"`
	Remaining       int    `json:"remaining"`
	CachedAlready   int    `json:"cachedAlready"`
	NeedComputation int    `json:"needComputation"`
}

// gpuEvent is one GPU-precompute event: no job id, so it can also be shown
// publicly.
type gpuEvent struct {
	MethodKey      string  `json:"methodKey"`
	MethodKeySnake string  `json:"method_key"`
	Target         string  `json:"target"`
	Attempted      bool    `json:"attempted"`
	UsedGPU        bool    `json:"usedGpu"`
	UsedGPUSnake   bool    `json:"used_gpu"`
	Completed      bool    `json:"completed"`
	Failed         bool    `json:"failed"`
	Reason         *string `json:"reason"`
	UpdatedAt      string  `json:"updatedAt"`
}

// gpuPrecompute is a job's aggregated GPU-precompute record.
type gpuPrecompute struct {
	gpuEvent
	Events []gpuEvent `json:"events"`
}

func toGPUEvent(e store.JobEvent) gpuEvent {
	var reason *string
	if e.Reason != "" {
		r := e.Reason
		reason = &r
	}
	return gpuEvent{MethodKey: e.MethodKey, MethodKeySnake: e.MethodKey, Target: e.Target,
		Attempted: e.Attempted, UsedGPU: e.UsedGPU, UsedGPUSnake: e.UsedGPU,
		Completed: e.Completed, Failed: e.Failed, Reason: reason, UpdatedAt: isoformat(e.CreatedAt)}
}

// aggregateGPU folds a job's events as the reference deployment does: method,
// target, completed, reason and time from the latest; attempted, usedGpu and
// failed OR-ed.
func aggregateGPU(evs []store.JobEvent) *gpuPrecompute {
	if len(evs) == 0 {
		return nil
	}
	out := &gpuPrecompute{Events: make([]gpuEvent, 0, len(evs))}
	var attempted, used, failed bool
	for _, e := range evs {
		out.Events = append(out.Events, toGPUEvent(e))
		attempted = attempted || e.Attempted
		used = used || e.UsedGPU
		failed = failed || e.Failed
	}
	out.gpuEvent = out.Events[len(out.Events)-1]
	out.Attempted, out.UsedGPU, out.UsedGPUSnake, out.Failed = attempted, used, used, failed
	return out
}

func isoPtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := isoformat(*t)
	return &s
}

func wholeSeconds(d time.Duration) int64 { return max(0, int64(d/time.Second)) }

func embeddingState(st store.JobStage) string {
	if st.EmbeddingState != "" {
		return st.EmbeddingState
	}
	if !st.EmbeddingEnabled {
		return "not_required"
	}
	return "pending"
}

func toStageBody(st store.JobStage) stageBody {
	name := st.MethodName
	if name == "" {
		name = st.MethodKey
	}
	rem := st.EmbeddingNeed - st.EmbeddingComputed
	return stageBody{
		Index: st.Index, Target: st.Target, MethodKeySnake: st.MethodKey, MethodKey: st.MethodKey,
		MethodNameSn: name, MethodName: name, Status: st.Status,
		StartedAt: isoPtr(st.StartedAt), CompletedAt: isoPtr(st.CompletedAt), Message: userMessage(st.Message),
		Prediction: stagePrediction{
			MoleculesTotalSn: st.MoleculesTotal, MoleculesProcessedSn: st.MoleculesProcessed, InvalidRowsSn: st.InvalidRows,
			PredictionsTotalSn: st.PredictionsTotal, PredictionsMadeSn: st.PredictionsMade,
			MoleculesTotal: st.MoleculesTotal, MoleculesProcessed: st.MoleculesProcessed, InvalidRows: st.InvalidRows,
			PredictionsTotal: st.PredictionsTotal, PredictionsMade: st.PredictionsMade,
			PredictionsCachedSn: st.PredictionsCached, PredictionsCached: st.PredictionsCached,
		},
		Embedding: stageEmbedding{
			Enabled: st.EmbeddingEnabled, State: embeddingState(st), MethodKeySnake: st.MethodKey, MethodKey: st.MethodKey,
			Target: st.Target, Total: st.EmbeddingTotal, CachedSnake: st.EmbeddingCached, NeedSnake: st.EmbeddingNeed,
			Computed: st.EmbeddingComputed, Remaining: rem, CachedAlready: st.EmbeddingCached, NeedComputation: st.EmbeddingNeed,
		},
	}
}

// activeStage is the status's activeStageIndex: the first running stage, else
// the first pending one, else the last; nil without stages.
func activeStage(stages []store.JobStage) *int {
	if len(stages) == 0 {
		return nil
	}
	for _, want := range []string{"running", "pending"} {
		for i := range stages {
			if stages[i].Status == want {
				return &stages[i].Index
			}
		}
	}
	return &stages[len(stages)-1].Index
}

// embeddingSource is the stage progress.embedding is read from: the running
// stage, else the last one.
func embeddingSource(stages []store.JobStage) *store.JobStage {
	for i := range stages {
		if stages[i].Status == "running" {
			return &stages[i]
		}
	}
	return &stages[len(stages)-1]
}

// statusSnap is what a job's status is made of that only a write changes:
// its row, stages, GPU-precompute events and queue position, read together,
// and the ETag of that state. The clock fields (elapsedSeconds, ETA) are
// computed from it at each answer, so they stay out of the ETag.
type statusSnap struct {
	job      store.Job
	stages   []store.JobStage
	evs      []store.JobEvent
	queuePos *int
	etag     string
	// files are the files beside the job that its status shows, read once
	// per snapshot when the job has ended (jobFiles).
	files *snapFiles
}

// snapFiles are a finished job's provenance and similarity note: final once
// it ended (written before its last database write), so each snapshot of an
// ended job reads them once, not once per status read.
type snapFiles struct {
	once     sync.Once
	prov     jobProvenance
	haveProv bool
	sim      *wire.SimilarityNote
}

// finished reports whether the snapshot's job has ended.
func (sn *statusSnap) finished() bool {
	return sn.job.Status == store.JobCompleted || sn.job.Status == store.JobFailed
}

// loadStatusSnap reads job id's snapshot from the database (any owner).
func (s *Server) loadStatusSnap(ctx context.Context, id string) (*statusSnap, error) {
	j, err := s.deps.Store.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	stages, err := s.deps.Store.JobStages(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	evs, err := s.deps.Store.GPUPrecomputeEvents(ctx, j.ID, gpuEventsKept)
	if err != nil {
		return nil, err
	}
	sn := &statusSnap{job: *j, stages: stages, evs: evs, files: &snapFiles{}}
	if jobStatusOnWire(j.Status) == store.JobPending {
		pos, err := s.deps.Store.QueuePosition(ctx, j.SubmittedAt)
		if err != nil {
			return nil, err
		}
		sn.queuePos = &pos
	}
	sn.etag = snapETag(sn)
	return sn, nil
}

// withQueuePos is sn with queue position pos (sn itself when it is the
// same): the rest of a Pending job's status changes only with its own
// writes.
func (sn *statusSnap) withQueuePos(pos int) *statusSnap {
	if sn.queuePos != nil && *sn.queuePos == pos {
		return sn
	}
	out := *sn
	out.queuePos = &pos
	out.etag = snapETag(&out)
	return &out
}

// snapETag is a weak ETag of the state a client sees: the job's row, its
// stages, its events and its queue position (weak: the clock fields of the
// body move on under the same tag).
func snapETag(sn *statusSnap) string {
	b, _ := json.Marshal(struct {
		J  store.Job
		S  []store.JobStage
		E  []store.JobEvent
		QP *int
	}{sn.job, sn.stages, sn.evs, sn.queuePos})
	sum := sha256.Sum256(b)
	return `W/"` + hex.EncodeToString(sum[:12]) + `"`
}

// ownedSnap is the path's job snapshot for the authenticated key (from the
// status cache), answering 404 for a bad slug, an unknown id and another
// key's job alike.
func (s *Server) ownedSnap(c *gin.Context) (*statusSnap, bool) {
	id := c.Param("id")
	if !jobIDPattern.MatchString(id) {
		abortError(c, http.StatusNotFound, "Not found.")
		return nil, false
	}
	sn, err := s.statuses.get(c.Request.Context(), id)
	if errors.Is(err, store.ErrNotFound) || err == nil && sn.job.KeyID != authKey(c).ID {
		abortError(c, http.StatusNotFound, fmt.Sprintf("No job found with id '%s'.", id))
		return nil, false
	}
	if err != nil {
		s.internalError(c, "job.read_failed", err)
		return nil, false
	}
	return sn, true
}

// status answers GET /status/{id}/ from the status cache (a database read
// only when the job changed). It carries an ETag; If-None-Match with it
// answers 304, and with ?waitSeconds=N the request is held until the state
// differs or N seconds pass (then 304). If-None-Match: * matches any state
// (RFC 9110): it answers 304 at once, never held.
func (s *Server) status(c *gin.Context) {
	wait, ok := s.waitSeconds(c)
	if !ok {
		return
	}
	inm, ok := parseIfNoneMatch(c)
	if !ok {
		return
	}
	sn, ok := s.ownedSnap(c)
	if !ok {
		return
	}
	if inm.matches(sn.etag) && !inm.any && wait > 0 && !sn.finished() {
		ctx, leave, ok := s.enterWait(c)
		if !ok {
			return
		}
		var err error
		sn, _, err = s.statuses.wait(ctx, sn.job.ID, sn.etag, time.Now().Add(wait))
		gone := keyGone(ctx)
		leave()
		switch {
		case gone:
			abortError(c, http.StatusUnauthorized, msgInvalidKey)
			return
		case err != nil:
			// The client went away while waiting: nobody reads the answer.
			c.AbortWithStatus(statusClientClosed)
			return
		}
	}
	c.Header("ETag", sn.etag)
	// no-cache: a cache may keep the answer but must ask again (with
	// If-None-Match) before reusing it.
	c.Header("Cache-Control", "private, no-cache")
	if inm.matches(sn.etag) {
		c.Status(http.StatusNotModified)
		c.Writer.WriteHeaderNow()
		return
	}
	c.JSON(http.StatusOK, s.statusBodyOf(sn, s.now()))
}

// waitSeconds parses ?waitSeconds=N (whole or fractional seconds, capped by
// KINFLOW_STATUS_WAIT_MAX_SECONDS); 0 without it.
func (s *Server) waitSeconds(c *gin.Context) (time.Duration, bool) {
	maxWait := 60 * time.Second
	if s.deps.Config != nil && s.deps.Config.StatusWaitMax > 0 {
		maxWait = s.deps.Config.StatusWaitMax
	}
	d, err := parseWaitSeconds(c.Query("waitSeconds"), maxWait)
	if err != nil {
		abortError(c, http.StatusBadRequest, "waitSeconds must be a number of seconds, 0 or more.")
		return 0, false
	}
	return d, true
}

// parseWaitSeconds is ?waitSeconds='s value as a duration capped at
// maxWait ("" is 0). The cap is applied to the number before it becomes a
// duration, so a huge value (1e19) is capped instead of overflowing.
func parseWaitSeconds(v string, maxWait time.Duration) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errors.New("not a number of seconds")
	}
	if f >= maxWait.Seconds() {
		return maxWait, nil
	}
	return time.Duration(f * float64(time.Second)), nil
}

// maxETagEntries bounds the entity tags one If-None-Match may list: a
// client has one status ETag per job, and a long list only costs the
// server comparisons.
const maxETagEntries = 16

// ifNoneMatch is a parsed If-None-Match header.
type ifNoneMatch struct {
	// any is "*": every current state matches.
	any bool
	// tags are the listed entity tags without W/ (weak comparison).
	tags []string
}

// matches is If-None-Match's weak comparison against etag.
func (m ifNoneMatch) matches(etag string) bool {
	if m.any {
		return true
	}
	want := strings.TrimPrefix(etag, "W/")
	for _, t := range m.tags {
		if t == want {
			return true
		}
	}
	return false
}

// parseIfNoneMatch reads the request's If-None-Match, answering 431 past
// maxETagEntries entries; ok is false when an answer was sent.
func parseIfNoneMatch(c *gin.Context) (ifNoneMatch, bool) {
	m, err := parseETags(c.Request.Header.Values("If-None-Match"))
	if err != nil {
		abortError(c, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf(
			"If-None-Match lists more than %d entity tags; send the ETag of the status you have.", maxETagEntries))
		return m, false
	}
	return m, true
}

// errTooManyETags is an If-None-Match over maxETagEntries tags.
var errTooManyETags = errors.New("too many entity tags in If-None-Match")

// parseETags parses If-None-Match header values (comma-separated entity
// tags, or *); more than maxETagEntries tags is errTooManyETags.
func parseETags(values []string) (ifNoneMatch, error) {
	var m ifNoneMatch
	for _, h := range values {
		for _, t := range strings.Split(h, ",") {
			t = strings.TrimSpace(t)
			switch {
			case t == "":
				continue
			case t == "*":
				m.any = true
				continue
			}
			if len(m.tags) == maxETagEntries {
				return m, errTooManyETags
			}
			m.tags = append(m.tags, strings.TrimPrefix(t, "W/"))
		}
	}
	return m, nil
}

// jobFiles are the job's provenance and similarity note: read once per
// snapshot of an ended job, at each call before (the similarity file is
// written while the job runs, with no database write of its own).
func (s *Server) jobFiles(sn *statusSnap) (jobProvenance, bool, *wire.SimilarityNote) {
	read := func() (jobProvenance, bool, *wire.SimilarityNote) {
		p, ok := s.readProvenance(&sn.job)
		return p, ok, s.similarityNote(&sn.job)
	}
	f := sn.files
	if f == nil || !sn.finished() {
		return read()
	}
	f.once.Do(func() { f.prov, f.haveProv, f.sim = read() })
	return f.prov, f.haveProv, f.sim
}

// statusBodyOf renders a snapshot as /status/'s body at now (the clock
// fields, and the files beside the job: stage counts, provenance,
// similarity).
func (s *Server) statusBodyOf(sn *statusSnap, now time.Time) statusBody {
	j, stages, evs := &sn.job, sn.stages, sn.evs
	end := now
	if j.CompletedAt != nil {
		end = *j.CompletedAt
	}
	b := statusBody{JobID: j.ID, Status: jobStatusOnWire(j.Status), SubmittedAt: isoformat(j.SubmittedAt),
		ElapsedSeconds: wholeSeconds(end.Sub(j.SubmittedAt))}
	switch {
	case j.StartedAt != nil:
		q := wholeSeconds(j.StartedAt.Sub(j.SubmittedAt))
		cs := wholeSeconds(end.Sub(*j.StartedAt))
		b.QueueSeconds, b.ComputeSeconds = &q, &cs
	case b.Status == store.JobPending:
		q := b.ElapsedSeconds
		b.QueueSeconds = &q
	}
	if b.Status == store.JobPending && sn.queuePos != nil {
		pos := *sn.queuePos
		b.QueuePosition = &pos
	}
	b.ProgressStages = make([]stageBody, 0, len(stages))
	units := make([]stageUserUnits, len(stages))
	for i, st := range stages {
		sb := toStageBody(st)
		c, ok := s.stageCountsOf(j.ID, st)
		units[i] = stageUnits(st, c, ok, now)
		sb.stageUserUnits = units[i]
		b.ProgressStages = append(b.ProgressStages, sb)
		if st.Status == "completed" {
			b.CompletedStageCount++
		}
	}
	b.ActiveStageIndex = activeStage(stages)
	b.TotalStageCount = len(stages)
	b.Progress = progressBody{MoleculesTotal: j.TotalMolecules, MoleculesProcessed: j.MoleculesProcessed,
		PredictionsTotal: j.TotalPredictions, PredictionsMade: j.PredictionsMade, PredictionsCached: j.PredictionsCached, InvalidRows: j.InvalidRows,
		Stages: b.ProgressStages, ActiveStageIndex: b.ActiveStageIndex,
		CompletedStageCount: b.CompletedStageCount, TotalStageCount: b.TotalStageCount}
	if len(stages) > 0 {
		st := embeddingSource(stages)
		sb := toStageBody(*st).Embedding
		b.Progress.Embedding = &jobEmbedding{Enabled: sb.Enabled, State: sb.State, MethodKey: sb.MethodKey,
			MethodKeySnake: sb.MethodKey, Target: sb.Target, Total: sb.Total, CachedAlready: sb.CachedAlready,
			CachedSnake: sb.CachedAlready, NeedComputation: sb.NeedComputation, NeedSnake: sb.NeedComputation,
			Computed: sb.Computed, Remaining: sb.Remaining, UpdatedAt: isoPtr(st.EmbeddingUpdatedAt)}
	}
	b.GPUPrecompute = aggregateGPU(evs)
	b.Synthetic = j.Synthetic
	p, haveProv, sim := s.jobFiles(sn)
	if haveProv {
		b.Provenance, b.Notice = p.Stages, p.Notice
	}
	b.Overall = overall(j, b.Status, b.QueuePosition, stages, units, s.etaOf(j, b.Status, stages, now), now)
	b.Similarity = sim
	b.Charge = jobCharge(j)
	if !sn.finished() && s.sharing != nil {
		if work, ok := s.sharing.snapshot(context.Background()); ok {
			b.Sharing = sharingOf(j, work)
		}
	}
	b.Expired = s.jobExpired(j)
	switch j.Status {
	case store.JobCompleted:
		if j.CompletedAt != nil {
			b.CompletedAt = isoformat(*j.CompletedAt)
		}
		if !b.Expired {
			b.ResultURL = "/api/v1/result/" + j.ID + "/"
		}
	case store.JobFailed:
		b.Error = jobError(j)
	}
	return b
}
