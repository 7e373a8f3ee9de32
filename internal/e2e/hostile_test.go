package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/client"
	"github.com/kinflow/kinflow/internal/loadgen"
)

// fdCount is how many descriptors process pid has open.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("count the descriptors of %d: %v", pid, err)
	}
	return len(ents)
}

// TestManyKeysWaitingLeaveOthersAlone: 20 keys (one per loopback address)
// each keep opening event streams on their running jobs, without end and
// far past their bound, on `kinflow dev` (api, worker and GPU host in one
// process). The process holds at most KINFLOW_WAITS_MAX streams, its
// descriptors stay bounded, every refusal is a 429, a calm key's jobs
// complete and its status reads are answered; the attackers' own jobs
// complete too. (Before the bound one key held 11,000 streams and jobs of
// other keys failed with "too many open files".)
func TestManyKeysWaitingLeaveOthersAlone(t *testing.T) {
	const attackers, maxAll, perKey = 20, 120, 12
	d, calmKey := startDev(t, fmt.Sprintf("KINFLOW_WAITS_PER_KEY=%d", perKey), fmt.Sprintf("KINFLOW_WAITS_MAX=%d", maxAll),
		"GPU_EMBED_SYNTHETIC_DELAY_MS=400")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := rand.New(rand.NewPCG(7, 52))
	type attacker struct {
		hc        *http.Client
		key, job  string
		jobStatus string
	}
	as := make([]*attacker, attackers)
	for i := range as {
		hc := loadgen.ClientFrom(fmt.Sprintf("127.0.0.%d", 10+i), false)
		api := &client.Client{BaseURL: d.BaseURL, HTTP: hc}
		k, err := api.GenerateKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		api.Key = k.Key
		// Method H: its GPU step takes 0.4 s a sequence here, so the job
		// runs while its key's streams wait on it.
		out, err := api.Submit(ctx, "input.csv", strings.NewReader(loadgen.CSV(r, 6, 80)),
			client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "H"}})
		if err != nil {
			t.Fatal(err)
		}
		as[i] = &attacker{hc: hc, key: k.Key, job: out.JobID}
	}
	pid := d.Procs()["kinflow"]
	fdsBefore := fdCount(t, pid)

	var (
		held, refused, other atomic.Int64 // held: streams answered 200
		peak                 atomic.Int64
		stop                 = make(chan struct{})
		wg                   sync.WaitGroup
	)
	for _, a := range as {
		for range perKey + 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequestWithContext(ctx, "GET", d.BaseURL+"/api/v1/status/"+a.job+"/events", nil)
					req.Header.Set("Authorization", "Bearer "+a.key)
					resp, err := a.hc.Do(req)
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					switch resp.StatusCode {
					case http.StatusOK:
						held.Add(1)
						buf := make([]byte, 4096)
						for {
							if _, err := resp.Body.Read(buf); err != nil {
								break
							}
						}
					case http.StatusTooManyRequests:
						refused.Add(1)
						if resp.Header.Get("Retry-After") == "" {
							other.Add(1)
						}
					default:
						other.Add(1)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						// A hostile client ignores Retry-After, but not the
						// scheduler: a short pause keeps the loop from
						// spinning the test's own CPU.
						time.Sleep(100 * time.Millisecond)
					}
				}
			}()
		}
	}
	var fdPeak atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				if n := int64(len(ents)); n > fdPeak.Load() {
					fdPeak.Store(n)
				}
			}
			// The server's own count of the waits it holds.
			if n, ok := scrapeGauge(d.BaseURL, "kinflow_api_waits"); ok && n > peak.Load() {
				peak.Store(n)
			}
		}
	}()

	// Meanwhile a calm key submits jobs (method J, no GPU step) and
	// waits for them; its status reads are timed.
	time.Sleep(2 * time.Second)
	calm := &client.Client{BaseURL: d.BaseURL, Key: calmKey}
	var calmReads []time.Duration
	var calmJobs []string
	for range 5 {
		out, err := calm.Submit(ctx, "input.csv", strings.NewReader(loadgen.CSV(r, 3, 80)),
			client.SubmitOptions{Targets: []string{"Km"}, Methods: map[string]string{"Km": "J"}})
		if err != nil {
			t.Fatal(err)
		}
		calmJobs = append(calmJobs, out.JobID)
	}
	for _, id := range calmJobs {
		for {
			start := time.Now()
			st, err := calm.Status(ctx, id)
			calmReads = append(calmReads, time.Since(start))
			if err != nil {
				t.Fatalf("calm key's status read: %v", err)
			}
			if st.Finished() {
				if st.Status != "Completed" {
					t.Fatalf("calm key's job %s: %s (%s)", id, st.Status, st.Error)
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The attackers' own jobs complete as well.
	for _, a := range as {
		api := &client.Client{BaseURL: d.BaseURL, Key: a.key, HTTP: a.hc}
		st, err := api.Wait(ctx, a.job, time.Second, nil)
		if err != nil || st.Status != "Completed" {
			t.Fatalf("attacker's job %s: %v %v", a.job, st, err)
		}
		a.jobStatus = st.Status
	}
	close(stop)
	cancel()
	wg.Wait()

	slices.Sort(calmReads)
	p50, worst := calmReads[len(calmReads)/2], calmReads[len(calmReads)-1]
	t.Logf("%d keys opening streams without end: %d streams opened, at most %d held at once (bound %d), %d refused with 429; descriptors of kinflow dev %d before, %d at the peak; the calm key's %d status reads p50 %v, max %v; every job Completed",
		attackers, held.Load(), peak.Load(), maxAll, refused.Load(), fdsBefore, fdPeak.Load(), len(calmReads), p50, worst)
	if peak.Load() > maxAll || peak.Load() == 0 {
		t.Fatalf("%d streams held at once, bound %d", peak.Load(), maxAll)
	}
	if refused.Load() == 0 || other.Load() != 0 {
		t.Fatalf("%d refusals (want some, each a 429 with Retry-After), %d other answers", refused.Load(), other.Load())
	}
	// Each held stream is one descriptor of the process, a refused
	// connection one for the moment it is answered; the margin covers the
	// jobs' own files, database and Temporal connections.
	if bound := int64(fdsBefore + maxAll + 400); fdPeak.Load() > bound {
		t.Fatalf("descriptors of kinflow dev peaked at %d, want at most %d", fdPeak.Load(), bound)
	}
	if worst > 5*time.Second {
		t.Fatalf("a calm status read took %v", worst)
	}
}

// scrapeGauge reads one unlabelled gauge from the API's /metrics.
func scrapeGauge(base, name string) (int64, bool) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err == nil
		}
	}
	return 0, false
}
