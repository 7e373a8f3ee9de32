package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/client"
)

// Tenant is one API key of a fairness run: its address (each address holds
// one key), its key, and the jobs it submits.
type Tenant struct {
	Name string
	// Local is the loopback address its requests leave from (127.0.0.2 and
	// on): another caller to the API, with a key of its own.
	Local string
	Key   string
	api   *client.Client
}

// NewTenant generates a key for a caller at local.
func NewTenant(ctx context.Context, baseURL, name, local string) (*Tenant, error) {
	hc := ClientFrom(local, true)
	k, err := (&client.Client{BaseURL: baseURL, HTTP: hc}).GenerateKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("generate %s's key: %w", name, err)
	}
	return &Tenant{Name: name, Local: local, Key: k.Key, api: &client.Client{BaseURL: baseURL, Key: k.Key, HTTP: hc}}, nil
}

// Suffix is the key's last six characters, as `kinflow key` names it.
func (t *Tenant) Suffix() string { return t.Key[len(t.Key)-6:] }

// FairJob is one job of a fairness run.
type FairJob struct {
	Tenant string
	ID     string
	Status string
	// Submitted and Ended are measured from the run's start.
	Submitted, Ended time.Duration
	// SharedWith is the most other keys its status said it shared the
	// queues with while it ran (`sharing.otherKeys`).
	SharedWith int
}

// Took is the job's time from submit to end.
func (j FairJob) Took() time.Duration { return j.Ended - j.Submitted }

// SubmitBacklog submits n jobs of rows rows each for t at once (distinct
// sequences, drawn from seed, so nothing is cached) and returns them as
// they end, measured from start; poll is the waits' long-poll step.
func SubmitBacklog(ctx context.Context, t *Tenant, n, rows int, seed uint64, start time.Time, poll time.Duration) ([]FairJob, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x51ed2701))
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = CSV(rng, rows, 120)
	}
	jobs := make([]FairJob, n)
	for i, b := range bodies {
		out, err := t.api.Submit(ctx, "input.csv", strings.NewReader(b), client.SubmitOptions{
			Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"},
		})
		if err != nil {
			return nil, fmt.Errorf("%s's job %d: %w", t.Name, i+1, err)
		}
		jobs[i] = FairJob{Tenant: t.Name, ID: out.JobID, Submitted: time.Since(start)}
	}
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := &jobs[i]
			for ctx.Err() == nil {
				st, err := t.api.Wait(ctx, j.ID, poll, func(st *client.Status) {
					if st.Sharing != nil {
						j.SharedWith = max(j.SharedWith, st.Sharing.OtherKeys)
					}
				})
				if err == nil {
					j.Status, j.Ended = st.Status, time.Since(start)
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(poll):
				}
			}
			j.Status = "Unfinished"
		}()
	}
	wg.Wait()
	return jobs, nil
}

// FairResult is a fairness run's figures.
type FairResult struct {
	// Alone is B's job alone; WithBacklog is B's job submitted behind A's
	// backlog; Backlog are A's jobs of that run.
	Alone       FairJob
	WithBacklog FairJob
	Backlog     []FairJob
}

// Factor is B's time behind A's backlog ÷ its time alone.
func (r FairResult) Factor() float64 {
	return r.WithBacklog.Took().Seconds() / max(r.Alone.Took().Seconds(), 1e-9)
}

// EndedBefore counts A's jobs that ended after B's: how many of the
// backlog B's job overtook.
func (r FairResult) Overtook() int {
	n := 0
	for _, j := range r.Backlog {
		if j.Ended > r.WithBacklog.Ended {
			n++
		}
	}
	return n
}

// BacklogWall is the time from A's first submit to its last job's end.
func (r FairResult) BacklogWall() time.Duration {
	var first, last time.Duration
	for i, j := range r.Backlog {
		if i == 0 || j.Submitted < first {
			first = j.Submitted
		}
		last = max(last, j.Ended)
	}
	return last - first
}

// Summary is one line of the run's figures.
func (r FairResult) Summary() string {
	return fmt.Sprintf("B alone %.1f s; B behind A's %d jobs %.1f s (×%.2f), overtaking %d of them; A's backlog %.1f s",
		r.Alone.Took().Seconds(), len(r.Backlog), r.WithBacklog.Took().Seconds(), r.Factor(), r.Overtook(), r.BacklogWall().Seconds())
}

// Check is an error unless every job of the run Completed.
func (r FairResult) Check() error {
	for _, j := range append([]FairJob{r.Alone, r.WithBacklog}, r.Backlog...) {
		if j.Status != "Completed" {
			return fmt.Errorf("%s's job %s ended %s", j.Tenant, j.ID, j.Status)
		}
	}
	return nil
}

// RunFairness is the two-key scenario: B's job of rows rows alone, then A
// submits backlog such jobs and, lead later, B one more. Each job's
// sequences are its own (nothing cached), so each costs the GPU host the
// same.
func RunFairness(ctx context.Context, a, b *Tenant, backlog, rows int, lead, poll time.Duration) (FairResult, error) {
	var r FairResult
	start := time.Now()
	alone, err := SubmitBacklog(ctx, b, 1, rows, rand.Uint64(), start, poll)
	if err != nil {
		return r, err
	}
	r.Alone = alone[0]
	start = time.Now()
	var (
		wg      sync.WaitGroup
		backErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.Backlog, backErr = SubmitBacklog(ctx, a, backlog, rows, rand.Uint64(), start, poll)
	}()
	select {
	case <-time.After(lead):
	case <-ctx.Done():
	}
	withB, err := SubmitBacklog(ctx, b, 1, rows, rand.Uint64(), start, poll)
	wg.Wait()
	if err != nil {
		return r, err
	}
	if backErr != nil {
		return r, backErr
	}
	r.WithBacklog = withB[0]
	slices.SortFunc(r.Backlog, func(x, y FairJob) int { return int(x.Ended - y.Ended) })
	return r, nil
}

// WeightResult is a weighted run's figures: two keys' backlogs submitted
// at once, and each key's jobs ended by the time the first backlog ended.
type WeightResult struct {
	Light, Heavy []FairJob
	// LightDone and HeavyDone count each key's jobs ended by then.
	LightDone, HeavyDone int
}

// Ratio is the heavier key's jobs done ÷ the lighter key's.
func (r WeightResult) Ratio() float64 { return float64(r.HeavyDone) / float64(max(r.LightDone, 1)) }

// RunWeighted submits n jobs of rows rows for light and for heavy at the
// same moment (light's first) and counts each key's jobs ended when the
// first of the two backlogs has ended.
func RunWeighted(ctx context.Context, light, heavy *Tenant, n, rows int, poll time.Duration) (WeightResult, error) {
	var r WeightResult
	start := time.Now()
	var (
		wg         sync.WaitGroup
		lErr, hErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.Light, lErr = SubmitBacklog(ctx, light, n, rows, rand.Uint64(), start, poll)
	}()
	go func() {
		defer wg.Done()
		r.Heavy, hErr = SubmitBacklog(ctx, heavy, n, rows, rand.Uint64(), start, poll)
	}()
	wg.Wait()
	if lErr != nil {
		return r, lErr
	}
	if hErr != nil {
		return r, hErr
	}
	last := func(js []FairJob) time.Duration {
		var m time.Duration
		for _, j := range js {
			m = max(m, j.Ended)
		}
		return m
	}
	cut := min(last(r.Light), last(r.Heavy))
	for _, j := range r.Light {
		if j.Ended <= cut {
			r.LightDone++
		}
	}
	for _, j := range r.Heavy {
		if j.Ended <= cut {
			r.HeavyDone++
		}
	}
	return r, nil
}
