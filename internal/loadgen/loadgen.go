// Package loadgen drives a running kinflow API the way a crowd of users
// does: many jobs submitted at the same moment, each polled until it ends,
// while other clients read /status/. The load tests (internal/e2e) assert
// with it that every job of a burst completes; the benchmark
// (tools/loadbench, `make bench-load`) reports its figures.
//
// Traffic goes only to the BaseURL given, which the callers point at a
// loopback address; every loop is bounded by a count and by Timeout.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinflow/kinflow/internal/client"
)

// Options describe one burst.
type Options struct {
	// BaseURL is the API's root, e.g. http://127.0.0.1:8000.
	BaseURL string
	// Key is the API key of every job; empty: one is generated.
	Key string
	// Jobs small jobs are submitted at once, each of Rows rows of distinct
	// random sequences of SeqLen residues.
	Jobs, Rows, SeqLen int
	// Target and Method of every job (kcat, B by default).
	Target, Method string
	// BigRows, when above 0, first submits one job of that many rows and
	// then the burst: small jobs must not queue behind it.
	BigRows int
	// BigLead is how long after the large job's submit the burst starts,
	// so that it meets the large job in its embedding phase.
	BigLead time.Duration
	// Seed makes the sequences; runs with the same seed send the same jobs
	// (0: drawn at random, so nothing comes from the prediction cache).
	Seed uint64
	// Poll paces each job's waiter (default 100 ms): client.Wait rides
	// the API's long poll, asking again at most every Poll/4 after a
	// change, and polls every Poll against a server without ETags.
	Poll time.Duration
	// NaivePoll, when above 0, makes every job's waiter poll as a naive
	// script does instead of client.Wait: GET /status/ every NaivePoll on a
	// new connection each time, without ETags, carrying on through 429s.
	NaivePoll time.Duration
	// StatusClients read /status/ of the burst's jobs in a closed loop for
	// the length of the run, to measure the endpoint under load (0: none).
	StatusClients int
	// Timeout bounds the whole run (default 10 minutes).
	Timeout time.Duration
	// HTTP is the client (default: 3 min timeout per request, enough idle
	// connections; the load tests assert completion, not speed).
	HTTP *http.Client
}

// Job is one job's outcome.
type Job struct {
	ID     string
	Rows   int
	Status string
	Error  string
	// Latency is from the submit request's start to the first status read
	// that saw the job Completed or Failed.
	Latency time.Duration
	// Submit is how long the submit request took to be answered.
	Submit time.Duration
}

// Result are a run's figures.
type Result struct {
	Jobs      []Job
	Big       *Job
	Completed int
	Failed    int
	// Unfinished are jobs still not Completed or Failed at Timeout.
	Unfinished int
	// Wall is from the first submit to the last job's end.
	Wall time.Duration
	// JobsPerSec is small jobs completed per second of Wall.
	JobsPerSec    float64
	P50, P99, Max time.Duration
	// StatusRequests were answered by /status/ during the run, StatusPerSec
	// of them per second, StatusP99 the slowest percentile's latency.
	StatusRequests int
	StatusPerSec   float64
	StatusP99      time.Duration
	// StatusRefused are status reads answered 429 (the per-key read rate),
	// by the status clients and the naive pollers.
	StatusRefused int
}

func (o *Options) defaults() {
	if o.Rows <= 0 {
		o.Rows = 3
	}
	if o.SeqLen <= 0 {
		o.SeqLen = 120
	}
	if o.Target == "" {
		o.Target = "kcat"
	}
	if o.Method == "" {
		o.Method = "B"
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second,
		}}
	}
}

// Run submits the burst and waits for every job. It returns an error only
// when the run could not be made (no key, a refused submit); jobs that fail
// or never finish are counted in the result for the caller to judge.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.Key == "" {
		k, err := GenerateKey(ctx, o.BaseURL)
		if err != nil {
			return nil, err
		}
		o.Key = k
	}
	c := &driver{o: o, api: &client.Client{BaseURL: o.BaseURL, Key: o.Key, HTTP: o.HTTP}}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	bodies := make([]string, o.Jobs)
	for i := range bodies {
		bodies[i] = CSV(rng, o.Rows, o.SeqLen)
	}
	res := &Result{Jobs: make([]Job, o.Jobs)}
	start := time.Now()
	var bigDone chan struct{}
	if o.BigRows > 0 {
		id, err := c.submit(ctx, CSV(rng, o.BigRows, o.SeqLen))
		if err != nil {
			return nil, fmt.Errorf("submit the large job: %w", err)
		}
		res.Big = &Job{ID: id, Rows: o.BigRows}
		bigDone = make(chan struct{})
		go func() {
			defer close(bigDone)
			c.wait(ctx, res.Big, start)
		}()
		select {
		case <-time.After(o.BigLead):
		case <-ctx.Done():
		}
	}

	// The burst: every small job submitted at the same moment.
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		firstEr error
		ids     = make(chan string, o.Jobs)
	)
	burst := time.Now()
	if o.BigRows == 0 {
		start = burst
	}
	stopStatus := make(chan struct{})
	var statusWG sync.WaitGroup
	var sc statusCounter
	for range o.StatusClients {
		statusWG.Add(1)
		go func() {
			defer statusWG.Done()
			c.statusLoop(ctx, ids, stopStatus, &sc)
		}()
	}
	for i := range o.Jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := &res.Jobs[i]
			j.Rows = o.Rows
			t0 := time.Now()
			id, err := c.submit(ctx, bodies[i])
			j.Submit = time.Since(t0)
			if err != nil {
				errMu.Lock()
				if firstEr == nil {
					firstEr = err
				}
				errMu.Unlock()
				j.Status, j.Error = "NotSubmitted", err.Error()
				return
			}
			j.ID = id
			ids <- id
			c.wait(ctx, j, t0)
		}()
	}
	wg.Wait()
	end := time.Now()
	close(stopStatus)
	statusWG.Wait()
	if bigDone != nil {
		<-bigDone
	}
	if firstEr != nil {
		return res, firstEr
	}
	var lat []time.Duration
	for _, j := range res.Jobs {
		switch j.Status {
		case "Completed":
			res.Completed++
			lat = append(lat, j.Latency)
		case "Failed":
			res.Failed++
		default:
			res.Unfinished++
		}
	}
	res.Wall = end.Sub(burst)
	if res.Wall > 0 {
		res.JobsPerSec = float64(res.Completed) / res.Wall.Seconds()
	}
	res.P50, res.P99, res.Max = Percentile(lat, 50), Percentile(lat, 99), Percentile(lat, 100)
	res.StatusRequests = int(sc.n.Load())
	if res.Wall > 0 {
		res.StatusPerSec = float64(res.StatusRequests) / res.Wall.Seconds()
	}
	res.StatusP99 = Percentile(sc.latencies(), 99)
	res.StatusRefused = int(c.refused.Load())
	return res, nil
}

// Percentile is the p-th percentile (nearest rank) of ds; 0 when empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// CSV is an input file of n rows of distinct random sequences of length
// seqLen with one substrate each.
func CSV(r *rand.Rand, n, seqLen int) string {
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	subs := []string{"CC(=O)O", "OC(=O)CCC(=O)O", "CCO", "OCC(O)CO"}
	var b strings.Builder
	b.Grow(n * (seqLen + 20))
	b.WriteString("Protein Sequence,Substrate\n")
	seq := make([]byte, seqLen)
	for range n {
		seq[0] = 'M'
		for j := 1; j < seqLen; j++ {
			seq[j] = aa[r.IntN(len(aa))]
		}
		b.Write(seq)
		b.WriteByte(',')
		b.WriteString(subs[r.IntN(len(subs))])
		b.WriteByte('\n')
	}
	return b.String()
}

// driver sends the run's requests through the Go client (internal/client):
// its submit carries an Idempotency-Key and retries, as a careful user's does.
type driver struct {
	o   Options
	api *client.Client
	// refused counts status reads answered 429.
	refused atomic.Int64
}

type statusCounter struct {
	n   atomic.Int64
	mu  sync.Mutex
	lat []time.Duration
}

func (s *statusCounter) add(d time.Duration) {
	s.n.Add(1)
	s.mu.Lock()
	s.lat = append(s.lat, d)
	s.mu.Unlock()
}

func (s *statusCounter) latencies() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lat)
}

// ClientFrom is an HTTP client whose connections leave from the loopback
// address local (127.0.0.2 and on): the API takes it for another caller,
// which may hold a key of its own (one active key per address). Without
// keepAlive each request has a connection of its own, closed after it.
func ClientFrom(local string, keepAlive bool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{
		DialContext: d.DialContext, DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 512,
	}}
}

// GenerateKey asks the API at baseURL for a key (one per address: a second
// call from the same address is refused while the first key is active).
func GenerateKey(ctx context.Context, baseURL string) (string, error) {
	k, err := (&client.Client{BaseURL: baseURL}).GenerateKey(ctx)
	if err != nil {
		return "", fmt.Errorf("generate an API key: %w", err)
	}
	return k.Key, nil
}

func (c *driver) submit(ctx context.Context, csv string) (string, error) {
	out, err := c.api.Submit(ctx, "input.csv", strings.NewReader(csv), client.SubmitOptions{
		Targets: []string{c.o.Target}, Methods: map[string]string{c.o.Target: c.o.Method},
		IncludeSimilarityColumns: true,
	})
	if err != nil {
		return "", err
	}
	return out.JobID, nil
}

// wait polls j until it ends or ctx does; a failed read is read again.
func (c *driver) wait(ctx context.Context, j *Job, since time.Time) {
	if c.o.NaivePoll > 0 {
		c.naiveWait(ctx, j, since)
		return
	}
	for ctx.Err() == nil {
		st, err := c.api.Wait(ctx, j.ID, c.o.Poll, func(st *client.Status) { j.Status = st.Status })
		if err == nil {
			j.Status, j.Latency, j.Error = st.Status, time.Since(since), st.Error
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.o.Poll):
		}
	}
}

// naiveWait polls j as a naive script does (NaivePoll).
func (c *driver) naiveWait(ctx context.Context, j *Job, since time.Time) {
	fresh := &client.Client{BaseURL: c.o.BaseURL, Key: c.o.Key, HTTP: &http.Client{
		Timeout: c.o.HTTP.Timeout, Transport: &http.Transport{DisableKeepAlives: true},
	}}
	for ctx.Err() == nil {
		st, err := fresh.Status(ctx, j.ID)
		switch {
		case err == nil:
			j.Status, j.Error = st.Status, st.Error
			if st.Finished() {
				j.Latency = time.Since(since)
				return
			}
		case client.IsStatus(err, http.StatusTooManyRequests):
			c.refused.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(c.o.NaivePoll):
		}
	}
}

// statusLoop reads the status of the burst's jobs, one after another, until
// stop closes.
func (c *driver) statusLoop(ctx context.Context, ids <-chan string, stop <-chan struct{}, sc *statusCounter) {
	var mine []string
	// ready is always ready: with a job to read, the select never blocks.
	ready := make(chan struct{})
	close(ready)
	for i := 0; ; i++ {
		var read <-chan struct{}
		if len(mine) > 0 {
			read = ready
		}
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case id := <-ids:
			mine = append(mine, id)
			continue
		case <-read:
		}
		t0 := time.Now()
		_, err := c.api.Status(ctx, mine[i%len(mine)])
		switch {
		case err == nil:
			sc.add(time.Since(t0))
		case client.IsStatus(err, http.StatusTooManyRequests):
			c.refused.Add(1)
		}
	}
}

// ErrIncomplete is returned by Check when a job of the burst did not end
// Completed.
var ErrIncomplete = errors.New("not every job completed")

// Check returns an error naming the jobs that did not complete.
func (r *Result) Check() error {
	var bad []string
	for _, j := range r.Jobs {
		if j.Status != "Completed" {
			bad = append(bad, fmt.Sprintf("%s: %s %s", j.ID, j.Status, j.Error))
		}
	}
	if r.Big != nil && r.Big.Status != "Completed" {
		bad = append(bad, fmt.Sprintf("large job %s: %s %s", r.Big.ID, r.Big.Status, r.Big.Error))
	}
	if len(bad) == 0 {
		return nil
	}
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("… and %d more", len(bad)-10))
	}
	return fmt.Errorf("%w: %d of %d: %s", ErrIncomplete, len(bad), len(r.Jobs), strings.Join(bad, "; "))
}

// Summary is the result in one line.
func (r *Result) Summary() string {
	s := fmt.Sprintf("%d jobs: %d completed, %d failed, %d unfinished in %.2f s = %.1f jobs/s; latency p50 %.2f s, p99 %.2f s, max %.2f s; /status/ %d req (%.0f req/s, p99 %.0f ms)",
		len(r.Jobs), r.Completed, r.Failed, r.Unfinished, r.Wall.Seconds(), r.JobsPerSec,
		r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), r.StatusRequests, r.StatusPerSec, float64(r.StatusP99.Microseconds())/1000)
	if r.StatusRefused > 0 {
		s += fmt.Sprintf("; %d status reads refused (429)", r.StatusRefused)
	}
	if r.Big != nil {
		s += fmt.Sprintf("; large job (%d rows) %s in %.1f s", r.Big.Rows, r.Big.Status, r.Big.Latency.Seconds())
	}
	return s
}
