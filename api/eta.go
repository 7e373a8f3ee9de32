package api

import (
	"math"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// The time left of a running job (`overall.etaSeconds`) is estimated per
// phase, not from the overall percentage: a stage is an embedding phase
// (files computed of those missing) and a prediction phase (units made of
// its total), and each phase takes a start-up time (a program loading its
// model) plus a time per unit. The percentage weighs the two phases of a
// stage alike and counts the job's preparation and every model load as if
// they were work, so an extrapolation from it was pessimistic early: "41 s
// left" at 0:10 of a 32 s job, "3:01 left" at 0:49 of a 1:54 job.
//
// A phase's rate is measured from what this process observed of it: the
// first time each count was seen, from the first count above zero on (so a
// model load is not taken for slow work). A phase not yet running is
// estimated from what earlier jobs of the same method and target took here
// (the prior), else from the start-up and per-unit time of the job's own
// measured phase of the same kind (a later stage's prediction from an
// earlier one's). The current phase's rate is blended with its prior while
// few units are done. No time left is given ("estimating…") until some phase
// of the job itself has a measured rate, nor while a phase to come has
// neither a prior nor a measured phase of its kind to go by: an embedding
// says nothing of how long the predictions after it take.

// etaMinRateSpan is the shortest observed span that gives a phase a rate:
// counts are written about twice a second, so shorter spans are noise.
const etaMinRateSpan = time.Second

// etaPriorWeight is how many units of evidence a prior counts for against a
// running phase's own measurements: a tenth of the phase, at least one.
func etaPriorWeight(n int) float64 { return math.Max(1, 0.1*float64(n)) }

// etaMaxJobs bounds the jobs whose observations are kept; past it the
// least recently seen go.
const etaMaxJobs = 4096

// etaMaxPriors bounds the (method, target, phase) priors kept.
const etaMaxPriors = 1024

const (
	kindEmbed   = 0
	kindPredict = 1
)

type etaPhaseKey struct{ stage, kind int }

// etaPhaseObs is what was observed of one phase of one job: the first count
// above zero and the latest count, each with when it was first seen.
type etaPhaseObs struct {
	firstT, lastT time.Time
	firstD, lastD int
}

// etaJob is one job's observations.
type etaJob struct {
	phases   map[etaPhaseKey]*etaPhaseObs
	learned  map[etaPhaseKey]bool
	lastSeen time.Time
}

type etaPriorKey struct {
	method, target string
	kind           int
}

// etaPrior is what a phase of a method took in earlier jobs: start-up
// seconds, seconds per unit, and the last phase's units and seconds (for a
// phase whose units are not known yet: a stage's missing files are counted
// by its plan).
type etaPrior struct {
	lat, spu float64
	// rated: lat and spu were measured (else only n and dur are known).
	rated bool
	n     int
	dur   float64
	seen  time.Time
}

// etaBook is the server's observations of running jobs and its priors.
type etaBook struct {
	mu     sync.Mutex
	jobs   map[string]*etaJob
	priors map[etaPriorKey]etaPrior
}

// etaPhase is one phase of a stage as a snapshot shows it.
type etaPhase struct {
	key   etaPhaseKey
	prior etaPriorKey
	state int // etaDone, etaCurrent, etaFuture
	done  int
	// total is the phase's units; unknown (-1) for the embedding of a
	// stage not planned yet.
	total int
	// start is when the phase began (current and done phases), from the
	// stage's row: its start for the embedding, the embedding's last
	// progress write (the plan's, when nothing was missing) for the
	// prediction.
	start time.Time
	// end is when a done prediction phase ended: its stage's completion.
	end time.Time
}

const (
	etaDone = iota
	etaCurrent
	etaFuture
)

// etaPhases splits a job's stages into phases, in the order they run.
func etaPhases(stages []store.JobStage) []etaPhase {
	var out []etaPhase
	for _, st := range stages {
		emb := etaPhase{key: etaPhaseKey{st.Index, kindEmbed}, prior: etaPriorKey{st.MethodKey, st.Target, kindEmbed},
			done: st.EmbeddingComputed, total: st.EmbeddingNeed}
		pred := etaPhase{key: etaPhaseKey{st.Index, kindPredict}, prior: etaPriorKey{st.MethodKey, st.Target, kindPredict},
			done: st.PredictionsMade, total: st.PredictionsTotal}
		if st.StartedAt != nil {
			emb.start, pred.start = *st.StartedAt, *st.StartedAt
		}
		if st.CompletedAt != nil {
			pred.end = *st.CompletedAt
		}
		if st.EmbeddingUpdatedAt != nil && (st.StartedAt == nil || st.EmbeddingUpdatedAt.After(*st.StartedAt)) {
			pred.start = *st.EmbeddingUpdatedAt
		}
		planned := st.EmbeddingState != "" && st.EmbeddingState != "pending" || st.EmbeddingNeed > 0
		switch {
		case st.Status == "completed" || st.Status == "failed":
			emb.state, pred.state = etaDone, etaDone
		case st.Status == "running" && !planned:
			// Marked running, not planned yet: the embedding's size is not
			// known.
			emb.state, pred.state, emb.total = etaCurrent, etaFuture, -1
		case st.Status == "running" && st.EmbeddingState == "running" && st.EmbeddingNeed > st.EmbeddingComputed:
			emb.state, pred.state = etaCurrent, etaFuture
		case st.Status == "running":
			emb.state, pred.state = etaDone, etaCurrent
		default:
			emb.state, pred.state, emb.total = etaFuture, etaFuture, -1
		}
		out = append(out, emb, pred)
	}
	return out
}

// etaFit is a phase's measured start-up time and time per unit.
type etaFit struct{ lat, spu float64 }

func (f etaFit) duration(n int) float64 { return f.lat + float64(n)*f.spu }

// fit is the phase's measurement from o; ok is false without a rate.
func (o *etaPhaseObs) fit(start time.Time) (etaFit, bool) {
	if o == nil || o.lastD <= o.firstD || o.lastT.Sub(o.firstT) < etaMinRateSpan {
		return etaFit{}, false
	}
	spu := o.lastT.Sub(o.firstT).Seconds() / float64(o.lastD-o.firstD)
	lat := 0.0
	if !start.IsZero() {
		lat = math.Max(0, o.firstT.Sub(start).Seconds()-float64(o.firstD)*spu)
	}
	return etaFit{lat: lat, spu: spu}, true
}

// observe records a running job's snapshot at now and learns the priors of
// the phases it saw end.
func (b *etaBook) observe(jobID string, phases []etaPhase, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobLocked(jobID, now)
	for i, p := range phases {
		if p.state == etaFuture || p.done <= 0 {
			continue
		}
		o := j.phases[p.key]
		switch {
		case o == nil && p.state == etaCurrent:
			j.phases[p.key] = &etaPhaseObs{firstT: now, lastT: now, firstD: p.done, lastD: p.done}
		case o != nil && p.done > o.lastD && p.state == etaCurrent:
			o.lastT, o.lastD = now, p.done
		case o != nil && p.done > o.lastD:
			// Its last count was written as it ended, which the rows say;
			// now may be much later.
			if end, ok := phaseEnd(phases, i); ok && end.After(o.lastT) && !end.After(now) {
				o.lastT, o.lastD = end, p.done
			}
		}
	}
	b.learnLocked(j, phases, now)
}

// finish learns from a job's last snapshot and forgets the job.
func (b *etaBook) finish(jobID string, phases []etaPhase, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobs[jobID]
	if j == nil {
		return
	}
	b.learnLocked(j, phases, now)
	delete(b.jobs, jobID)
}

func (b *etaBook) jobLocked(jobID string, now time.Time) *etaJob {
	if b.jobs == nil {
		b.jobs = map[string]*etaJob{}
	}
	j := b.jobs[jobID]
	if j == nil {
		if len(b.jobs) >= etaMaxJobs {
			var oldest string
			var at time.Time
			for id, x := range b.jobs {
				if oldest == "" || x.lastSeen.Before(at) {
					oldest, at = id, x.lastSeen
				}
			}
			delete(b.jobs, oldest)
		}
		j = &etaJob{phases: map[etaPhaseKey]*etaPhaseObs{}, learned: map[etaPhaseKey]bool{}}
		b.jobs[jobID] = j
	}
	j.lastSeen = now
	return j
}

// learnLocked folds each ended phase into its prior, once: half the new
// phase, half what was known. A phase with a measured rate gives its
// start-up time and time per unit; one without (nothing to compute, or over
// between two observations) only its length, from the stage's row.
func (b *etaBook) learnLocked(j *etaJob, phases []etaPhase, now time.Time) {
	for i, p := range phases {
		if p.state != etaDone || j.learned[p.key] {
			continue
		}
		n := max(p.total, 0)
		f, rated := j.phases[p.key].fit(p.start)
		dur := f.duration(n)
		if !rated {
			end, ok := phaseEnd(phases, i)
			if !ok || p.start.IsZero() || end.Before(p.start) {
				continue
			}
			dur = end.Sub(p.start).Seconds()
		}
		j.learned[p.key] = true
		if b.priors == nil {
			b.priors = map[etaPriorKey]etaPrior{}
		}
		pr, had := b.priors[p.prior]
		if !had && len(b.priors) >= etaMaxPriors {
			for k, x := range b.priors {
				if x.seen.Before(now.Add(-24 * time.Hour)) {
					delete(b.priors, k)
				}
			}
			if len(b.priors) >= etaMaxPriors {
				continue
			}
		}
		next := etaPrior{lat: pr.lat, spu: pr.spu, rated: pr.rated, n: n, dur: dur, seen: now}
		switch {
		case rated && pr.rated:
			next.lat, next.spu = (pr.lat+f.lat)/2, (pr.spu+f.spu)/2
		case rated:
			next.lat, next.spu, next.rated = f.lat, f.spu, true
		}
		b.priors[p.prior] = next
	}
}

// phaseEnd is when phases[i], ended, ended: an embedding when its
// stage's prediction began, a prediction when its stage completed.
func phaseEnd(phases []etaPhase, i int) (time.Time, bool) {
	p := phases[i]
	if p.key.kind == kindEmbed && i+1 < len(phases) && !phases[i+1].start.IsZero() {
		return phases[i+1].start, true
	}
	if p.key.kind == kindPredict && !p.end.IsZero() {
		return p.end, true
	}
	return time.Time{}, false
}

// estimate is the seconds left of a running job at now, or nil while no
// phase of the job has a measured rate.
func (b *etaBook) estimate(jobID string, phases []etaPhase, now time.Time) *int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	j := b.jobs[jobID]
	if j == nil {
		return nil
	}
	// The job's own measured phases, the latest of each kind: the
	// fallback of a phase with neither a rate nor a prior.
	var ref etaRefs
	fits := map[etaPhaseKey]etaFit{}
	for _, p := range phases {
		if p.state == etaFuture {
			continue
		}
		if f, ok := j.phases[p.key].fit(p.start); ok {
			fits[p.key] = f
			ref.kind[p.key.kind], ref.rated = &f, true
		}
	}
	if !ref.rated {
		return nil
	}
	left := 0.0
	for _, p := range phases {
		var sec float64
		ok := true
		switch p.state {
		case etaCurrent:
			sec, ok = b.currentLeftLocked(j, p, fits, ref, now)
		case etaFuture:
			sec, ok = b.wholeLocked(p, ref)
		}
		if !ok {
			return nil // a phase to come has nothing to go by
		}
		left += sec
	}
	eta := int64(math.Round(math.Max(0, left)))
	return &eta
}

// etaRefs are a job's latest measured phase of each kind.
type etaRefs struct {
	kind  [2]*etaFit
	rated bool
}

// currentLeftLocked is the running phase's seconds left: from its own
// rate, blended with its prior while few units are done; before it has a
// rate, what the whole phase takes (wholeLocked) less the time it has run.
func (b *etaBook) currentLeftLocked(j *etaJob, p etaPhase, fits map[etaPhaseKey]etaFit, ref etaRefs, now time.Time) (float64, bool) {
	pr, havePrior := b.priors[p.prior]
	if f, ok := fits[p.key]; ok && p.total >= 0 {
		o := j.phases[p.key]
		spu, span := f.spu, float64(o.lastD-o.firstD)
		if havePrior && pr.rated {
			w := etaPriorWeight(p.total)
			spu = (f.spu*span + pr.spu*w) / (span + w)
		}
		return math.Max(0, float64(p.total-o.lastD)*spu-now.Sub(o.lastT).Seconds()), true
	}
	left, ok := b.wholeLocked(p, ref)
	if !ok {
		return 0, false
	}
	if !p.start.IsZero() {
		left -= now.Sub(p.start).Seconds()
	}
	if havePrior && pr.rated && p.total > 0 {
		left = math.Max(left, float64(p.total-p.done)*pr.spu)
	}
	return math.Max(0, left), true
}

// wholeLocked is the seconds a phase takes from its start: its prior (start-up
// time and time per unit, or the last one's length while its units are not
// known), else the start-up time and time per unit of the job's measured
// phase of its kind; ok is false with neither, or with only the job's
// phase and the units not known yet.
func (b *etaBook) wholeLocked(p etaPhase, ref etaRefs) (float64, bool) {
	if p.total == 0 {
		return 0, true // nothing to compute
	}
	if pr, ok := b.priors[p.prior]; ok {
		switch {
		case p.total > 0 && pr.rated:
			return pr.lat + float64(p.total)*pr.spu, true
		case p.total > 0 && pr.n > 0:
			return pr.dur * float64(p.total) / float64(pr.n), true
		case p.total < 0:
			return pr.dur, true
		}
	}
	if f := ref.kind[p.key.kind]; f != nil && p.total > 0 {
		return f.duration(p.total), true
	}
	return 0, false
}

// etaOf records a running job's snapshot at now and returns its time left
// (nil while not known); an ended job's last snapshot teaches the priors,
// and its observations are dropped.
func (s *Server) etaOf(j *store.Job, wireStatus string, stages []store.JobStage, now time.Time) *int64 {
	switch wireStatus {
	case store.JobPending:
		return nil
	case store.JobCompleted, store.JobFailed:
		s.eta.finish(j.ID, etaPhases(stages), now)
		return nil
	}
	phases := etaPhases(stages)
	s.eta.observe(j.ID, phases, now)
	return s.eta.estimate(j.ID, phases, now)
}
