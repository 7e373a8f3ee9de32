package api

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// etaSample is one recorded progress write of a job: at t seconds after its
// start, stage's phase reached done of total.
type etaSample struct {
	t           float64
	stage       int
	phase       string
	done, total int
}

// etaCurve is a recorded job (testdata/eta): its stages and its progress
// writes in order; the last sample (phase "done") is when it ended.
type etaCurve struct {
	name    string
	stages  []store.JobStage
	samples []etaSample
}

func (c etaCurve) end() float64 { return c.samples[len(c.samples)-1].t }

func readCurve(t *testing.T, name string) etaCurve {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "eta", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := etaCurve{name: name}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "# stage,"); ok {
			p := strings.Split(rest, ",")
			i, _ := strconv.Atoi(p[0])
			units, _ := strconv.Atoi(p[3])
			c.stages = append(c.stages, store.JobStage{Index: i, Target: p[1], MethodKey: p[2], Status: "pending",
				EmbeddingEnabled: true, EmbeddingState: "pending", PredictionsTotal: units})
			continue
		}
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "t,") || line == "" {
			continue
		}
		p := strings.Split(line, ",")
		var s etaSample
		s.t, _ = strconv.ParseFloat(p[0], 64)
		s.stage, _ = strconv.Atoi(p[1])
		s.phase = p[2]
		s.done, _ = strconv.Atoi(p[3])
		s.total, _ = strconv.Atoi(p[4])
		c.samples = append(c.samples, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return c
}

// etaReplay writes a curve's samples into job and stage rows as the worker
// does, up to a moment.
type etaReplay struct {
	c      etaCurve
	t0     time.Time
	job    store.Job
	stages []store.JobStage
	next   int
}

func newReplay(c etaCurve, id string, t0 time.Time) *etaReplay {
	r := &etaReplay{c: c, t0: t0, stages: append([]store.JobStage(nil), c.stages...)}
	start := t0
	r.job = store.Job{ID: id, Status: store.JobProcessing, SubmittedAt: t0, StartedAt: &start}
	return r
}

func (r *etaReplay) at(sec float64) time.Time {
	return r.t0.Add(time.Duration(sec * float64(time.Second)))
}

// until applies the samples written by sec.
func (r *etaReplay) until(sec float64) {
	for ; r.next < len(r.c.samples) && r.c.samples[r.next].t <= sec; r.next++ {
		s := r.c.samples[r.next]
		at := r.at(s.t)
		if s.phase == "done" {
			r.job.Status, r.job.CompletedAt = store.JobCompleted, &at
			continue
		}
		if s.stage < 0 {
			continue
		}
		st := &r.stages[s.stage]
		switch s.phase {
		case "plan":
			st.Status, st.StartedAt = "running", &at
		case "embed":
			st.EmbeddingState, st.EmbeddingNeed, st.EmbeddingComputed, st.EmbeddingUpdatedAt = "running", s.total, s.done, &at
		case "cached":
			st.EmbeddingState, st.EmbeddingUpdatedAt = "done", &at
		case "noembed":
			st.EmbeddingState, st.EmbeddingEnabled = "not_required", false
		case "predict":
			st.PredictionsMade = s.done
		case "complete":
			st.Status, st.CompletedAt = "completed", &at
			if st.EmbeddingState == "running" {
				st.EmbeddingState = "done"
			}
		}
	}
}

// firstRate is when the job first has a measured rate: a phase's count
// above zero, and a higher one at least etaMinRateSpan later.
func (c etaCurve) firstRate() float64 {
	first := map[[2]any]etaSample{}
	for _, s := range c.samples {
		if s.done <= 0 || (s.phase != "embed" && s.phase != "predict") {
			continue
		}
		k := [2]any{s.stage, s.phase}
		f, ok := first[k]
		if !ok {
			first[k] = s
			continue
		}
		if s.done > f.done && s.t-f.t >= etaMinRateSpan.Seconds() {
			return s.t
		}
	}
	return math.Inf(1)
}

// linearETA is the estimate before the per-phase one: the compute time
// times the part of the overall percentage still to go, from 20 % and 10 s.
func linearETA(stages []store.JobStage, sec float64) *int64 {
	sum := 0.0
	for _, st := range stages {
		sum += stageFraction(st)
	}
	p := round1(100 * sum / float64(len(stages)))
	if p < 20 || sec < 10 {
		return nil
	}
	v := int64(math.Round(sec * (100 - p) / p))
	return &v
}

// etaPoint is one poll of a replayed job: the estimates then and the truth.
type etaPoint struct {
	sec      float64
	est, old *int64
	truth    float64
}

// replayETA polls a curve every poll seconds (and at the extra moments)
// through book, as the status does: each poll observes the rows and
// estimates; the job's last poll teaches the priors.
func replayETA(b *etaBook, c etaCurve, id string, poll float64, extra ...float64) []etaPoint {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	r := newReplay(c, id, t0)
	var times []float64
	for s := 0.0; s <= c.end()+poll; s += poll {
		times = append(times, s)
	}
	times = append(times, extra...)
	sortFloats(times)
	var out []etaPoint
	for _, sec := range times {
		r.until(sec)
		now := r.at(sec)
		phases := etaPhases(r.stages)
		if r.job.Status == store.JobCompleted {
			b.finish(id, phases, now)
			break
		}
		b.observe(id, phases, now)
		out = append(out, etaPoint{sec: sec, est: b.estimate(id, phases, now), old: linearETA(r.stages, sec), truth: c.end() - sec})
	}
	return out
}

func sortFloats(v []float64) {
	for i := 1; i < len(v); i++ {
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
}

func fmtETA(v *int64) string {
	if v == nil {
		return "estimating…"
	}
	return clock(*v)
}

func clock(s int64) string { return fmt.Sprintf("%d:%02d", s/60, s%60) }

// etaWithin: the estimate is within ±35 % of the true time left, or 2 s
// (the display's and the polls' resolution) near the end.
func etaWithin(est int64, truth float64) bool {
	return math.Abs(float64(est)-truth) <= math.Max(0.35*truth, 2)
}

// checkCurve asserts that nothing is shown before the job has a measured
// rate, and from a quarter of the job on every estimate shown is within
// etaWithin of the truth; with warm (the server ran the job's methods
// before, or its only phase is the one running) an estimate is shown from
// soon after the first rate on. It logs the figures.
func checkCurve(t *testing.T, c etaCurve, pts []etaPoint, poll float64, warm bool) {
	t.Helper()
	rate := c.firstRate()
	for _, p := range pts {
		t.Logf("%s %5.1fs: before %-12s after %-12s truth %s", c.name, p.sec, fmtETA(p.old), fmtETA(p.est), clock(int64(math.Round(p.truth))))
		switch {
		case p.sec < rate && p.est != nil:
			t.Errorf("%s at %.1f s: %s left before the job has a rate (from %.1f s)", c.name, p.sec, fmtETA(p.est), rate)
		case warm && p.sec >= rate+2*poll && p.est == nil:
			t.Errorf("%s at %.1f s: no estimate, though a rate exists since %.1f s", c.name, p.sec, rate)
		case p.sec >= 0.25*c.end() && p.est != nil && !etaWithin(*p.est, p.truth):
			t.Errorf("%s at %.1f s: %s left, truth %.1f s", c.name, p.sec, fmtETA(p.est), p.truth)
		}
	}
}

// TestETARecordedJobs replays the recorded progress of a 32 s job and of a
// 1:54 job (testdata/eta), polled every second, and of a steady one. On a
// server that never ran the jobs' methods, nothing is shown until the phases
// to come have something to go by (the 32 s job's predictions, the 1:54
// job's second stage), and what is shown from a quarter of the job on is
// within ±35 %; run again, the first run's phases are the priors, and the
// estimate is shown from the first rate on and within ±35 % from a quarter
// of the job on. The steady job is right from its first rate.
func TestETARecordedJobs(t *testing.T) {
	for _, tc := range []struct {
		file      string
		userAt    float64
		userSaw   int64
		firstCold float64 // when the first run first shows an estimate, at the latest
	}{
		{"job-32s.csv", 10.25, 41, 23},
		{"job-1m54s.csv", 49, 181, 84},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c := readCurve(t, tc.file)
			var b etaBook
			cold := replayETA(&b, c, "cold", 1, tc.userAt)
			checkCurve(t, c, cold, 1, false)
			if at := pointAt(cold, tc.userAt); at.old == nil || *at.old != tc.userSaw {
				t.Fatalf("the old estimate at %.2f s is %s; the user saw %s", tc.userAt, fmtETA(at.old), clock(tc.userSaw))
			}
			if at := pointAt(cold, tc.firstCold); at.est == nil {
				t.Errorf("the first run shows no estimate at %.0f s", tc.firstCold)
			}
			warm := replayETA(&b, c, "warm", 1, tc.userAt)
			checkCurve(t, c, warm, 1, true)
			at := pointAt(warm, tc.userAt)
			t.Logf("at %.2f s: before %s, first run %s, run again %s, truth %.1f s", tc.userAt, fmtETA(at.old),
				fmtETA(pointAt(cold, tc.userAt).est), fmtETA(at.est), at.truth)
		})
	}
	t.Run("steady", func(t *testing.T) {
		c := readCurve(t, "steady-62s.csv")
		var b etaBook
		checkCurve(t, c, replayETA(&b, c, "s", 1), 1, true)
	})
}

func pointAt(pts []etaPoint, sec float64) etaPoint {
	for _, p := range pts {
		if p.sec == sec {
			return p
		}
	}
	return etaPoint{}
}
