package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/wire"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/store"
)

// Phases of a job in the status's `overall` object (kinflow's addition).
const (
	phaseQueued     = "queued"
	phasePreparing  = "preparing"
	phaseEmbedding  = "embedding"
	phasePredicting = "predicting"
	phaseFinishing  = "finishing"
	phaseCompleted  = "completed"
	phaseFailed     = "failed"
)

// stageCountsOf is a stage's counts; ok is false before its plan. Its plan
// records them in the stage's row; a stage planned by a worker from before
// that (migration 0013) has them in its counts.json.
func (s *Server) stageCountsOf(jobID string, st store.JobStage) (jobfiles.StageCounts, bool) {
	if st.CountRows != nil && st.CountUnits != nil && st.CountSequences != nil { // written together
		return jobfiles.StageCounts{Rows: *st.CountRows, Units: *st.CountUnits, Sequences: *st.CountSequences}, true
	}
	if st.Status == "pending" || st.Status == "" { // planned only once it runs
		return jobfiles.StageCounts{}, false
	}
	return s.readStageCounts(jobID, st.Index)
}

// readStageCounts reads a stage's counts.json (written by workers from
// before migration 0013); ok is false when there is none. Counts once read
// are kept (the plan writes the same counts on a retry), so a polled status
// costs no file read per stage.
func (s *Server) readStageCounts(jobID string, index int) (jobfiles.StageCounts, bool) {
	if c, ok := s.stageCounts.get(jobID, index); ok {
		return c, true
	}
	c, err := jobfiles.ReadStageCounts(s.mediaRoot(), jobID, index)
	if err != nil {
		return c, false
	}
	s.stageCounts.put(jobID, index, c)
	return c, true
}

// stageCountsCacheMax bounds the stage counts kept; past it the cache starts
// again empty (a read then costs one file open, as before the cache).
const stageCountsCacheMax = 8192

type stageCountsKey struct {
	job   string
	stage int
}

// stageCountsCache is the counts of stages whose plan wrote them.
type stageCountsCache struct {
	mu sync.Mutex
	m  map[stageCountsKey]jobfiles.StageCounts
}

func (c *stageCountsCache) get(job string, stage int) (jobfiles.StageCounts, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[stageCountsKey{job, stage}]
	return v, ok
}

func (c *stageCountsCache) put(job string, stage int, v jobfiles.StageCounts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= stageCountsCacheMax {
		c.m = make(map[stageCountsKey]jobfiles.StageCounts)
	}
	c.m[stageCountsKey{job, stage}] = v
}

// stageUserUnits are the additions to a stage object: the stage in the
// user's units.
type stageUserUnits struct {
	// Rows handed to the stage; Sequences its distinct sequences (null
	// before its plan); SequencesEmbedded how many of them have their
	// embeddings (cached or computed), estimated from the file counts.
	Rows              int     `json:"rows"`
	Sequences         *int    `json:"sequences"`
	SequencesEmbedded *int    `json:"sequencesEmbedded"`
	Percent           float64 `json:"percent"`
	// Seconds the stage ran (until now while running); null before it
	// starts.
	Seconds *int64 `json:"seconds"`
}

// stageFraction is how much of a stage is done, 0–1.
func stageFraction(st store.JobStage) float64 {
	switch st.Status {
	case "completed":
		return 1
	case "pending", "":
		return 0
	}
	pred := 0.0
	if st.PredictionsTotal > 0 {
		pred = math.Min(1, float64(st.PredictionsMade)/float64(st.PredictionsTotal))
	}
	if st.EmbeddingNeed <= 0 {
		return pred
	}
	emb := math.Min(1, float64(st.EmbeddingComputed)/float64(st.EmbeddingNeed))
	return 0.5*emb + 0.5*pred
}

// stageUnits computes a stage's additions.
func stageUnits(st store.JobStage, c jobfiles.StageCounts, haveCounts bool, now time.Time) stageUserUnits {
	u := stageUserUnits{Rows: st.MoleculesTotal, Percent: round1(100 * stageFraction(st))}
	if haveCounts {
		u.Rows = c.Rows
		n := c.Sequences
		u.Sequences = &n
		done := 0
		switch {
		case st.EmbeddingTotal > 0:
			done = int(int64(n) * int64(st.EmbeddingCached+st.EmbeddingComputed) / int64(st.EmbeddingTotal))
		case st.Status == "completed" || st.EmbeddingState == "done":
			done = n
		}
		done = min(done, n)
		u.SequencesEmbedded = &done
	}
	if st.StartedAt != nil {
		end := now
		if st.CompletedAt != nil {
			end = *st.CompletedAt
		}
		sec := wholeSeconds(end.Sub(*st.StartedAt))
		u.Seconds = &sec
	}
	return u
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// overall builds the `overall` object from the job, its stages and their
// user-unit additions (same order as stages).
// eta is a running job's time left (eta.go), nil while not known.
func overall(j *store.Job, wireStatus string, queuePos *int, stages []store.JobStage, units []stageUserUnits, eta *int64, now time.Time) wire.Overall {
	o := wire.Overall{Rows: j.RequestedRows, Stages: len(stages)}
	sum := 0.0
	for _, st := range stages {
		sum += stageFraction(st)
	}
	if len(stages) > 0 {
		o.Percent = round1(100 * sum / float64(len(stages)))
	}
	var active *store.JobStage
	var au stageUserUnits
	if idx := activeStage(stages); idx != nil {
		for i := range stages {
			if stages[i].Index == *idx {
				active, au = &stages[i], units[i]
				n := stages[i].Index + 1
				o.Stage = &n
			}
		}
	}
	if active != nil {
		o.Sequences = au.Sequences
	}
	switch wireStatus {
	case store.JobPending:
		o.Phase, o.Percent = phaseQueued, 0
	case store.JobCompleted:
		o.Phase, o.Percent = phaseCompleted, 100
	case store.JobFailed:
		o.Phase = phaseFailed
	default:
		switch {
		case active == nil || active.Status == "pending":
			// Before the first stage, or between two stages.
			o.Phase = phasePreparing
		case active.Status != "running":
			// Every stage is done; the result is being written.
			o.Phase = phaseFinishing
		case active.EmbeddingNeed > active.EmbeddingComputed && active.EmbeddingState == "running":
			o.Phase = phaseEmbedding
		default:
			o.Phase = phasePredicting
		}
	}
	switch o.Phase {
	case phaseCompleted, phaseFailed:
		zero := int64(0)
		o.ETASeconds = &zero
	case phaseQueued:
	default:
		o.ETASeconds = eta
	}
	o.Text = overallText(j, o, queuePos, active, au, now)
	return o
}

// overallText is the one-line state: what the web page's summary, the CLI
// bar and the Python client's bar all print.
func overallText(j *store.Job, o wire.Overall, queuePos *int, active *store.JobStage, au stageUserUnits, now time.Time) string {
	rows := plural(o.Rows, "row", "rows")
	stageName := func() string {
		if active == nil {
			return ""
		}
		name := active.MethodName
		if name == "" {
			name = active.MethodKey
		}
		return fmt.Sprintf("stage %d of %d (%s, %s)", active.Index+1, o.Stages, active.Target, name)
	}
	switch o.Phase {
	case phaseQueued:
		if queuePos != nil {
			return fmt.Sprintf("Queued, position %d: %s.", *queuePos, rows)
		}
		return "Queued: " + rows + "."
	case phaseCompleted:
		took := ""
		if j.CompletedAt != nil {
			took = " in " + humanDuration(time.Duration(wholeSeconds(j.CompletedAt.Sub(j.SubmittedAt)))*time.Second)
		}
		return fmt.Sprintf("Completed%s: %s, %s.", took, rows, plural(o.Stages, "stage", "stages"))
	case phaseFailed:
		if active != nil {
			return fmt.Sprintf("Failed at %s.", stageName())
		}
		return "Failed."
	case phasePreparing:
		if active == nil || o.Percent == 0 {
			return fmt.Sprintf("%s%% · preparing %s.", fmtPercent(o.Percent), rows)
		}
	}
	var what string
	switch o.Phase {
	case phaseEmbedding:
		if au.Sequences != nil && au.SequencesEmbedded != nil {
			what = fmt.Sprintf("embedding sequences, about %d of %d done", *au.SequencesEmbedded, *au.Sequences)
		} else {
			what = "embedding sequences"
		}
	case phasePredicting:
		what = fmt.Sprintf("predicting, %d of %d predictions made", active.PredictionsMade, active.PredictionsTotal)
		if active.PredictionsCached > 0 {
			what += fmt.Sprintf(" (%d from the prediction cache)", active.PredictionsCached)
		}
	case phaseFinishing:
		what = "writing the result"
	case phasePreparing:
		what = "starting"
	}
	parts := []string{fmtPercent(o.Percent) + "%"}
	if s := stageName(); s != "" && o.Phase != phaseFinishing {
		parts = append(parts, s+": "+what)
	} else {
		parts = append(parts, what)
	}
	parts = append(parts, rows)
	if o.ETASeconds != nil && *o.ETASeconds > 0 {
		parts = append(parts, "about "+humanDuration(time.Duration(*o.ETASeconds)*time.Second)+" left")
	}
	return strings.Join(parts, " · ") + "."
}

func fmtPercent(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// humanDuration writes d as "45 s", "3 min 20 s" or "2 h 5 min".
func humanDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", max(0, s))
	case s < 3600:
		if s%60 == 0 {
			return fmt.Sprintf("%d min", s/60)
		}
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	default:
		return fmt.Sprintf("%d h %d min", s/3600, (s%3600)/60)
	}
}
