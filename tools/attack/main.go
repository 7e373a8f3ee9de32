// Command attack replays, against a running kinflow API, what a hostile or
// careless client of the waiting routes and webhooks tried: dressed-up
// notify URLs, huge headers, a waitSeconds that overflows, If-None-Match: *,
// streams without end from one key, a revoked key's open stream, and a loop
// of reads that cannot wait. It prints one line per check (held or broke)
// with what it measured, and exits 1 if any broke.
//
//	go run ./tools/attack -base http://127.0.0.1:8000
//
// The API must run with its defaults for the waits (KINFLOW_WAITS_PER_KEY
// 256) and webhooks (private addresses refused); method H's GPU step should
// be slow enough for a job to run a while (GPU_EMBED_SYNTHETIC_DELAY_MS=2000
// on the GPU host), so that streams have something to wait on. It uses
// loopback source addresses 127.0.0.50-52 for keys of its own.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinflow/kinflow/internal/client"
	"github.com/kinflow/kinflow/internal/loadgen"
)

func main() {
	base := flag.String("base", "http://127.0.0.1:8000", "the API's root")
	flag.Parse()
	a := &attack{base: *base}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a.ssrf(ctx)
	a.headers(ctx)
	a.waiting(ctx)
	if a.broke > 0 {
		fmt.Printf("%d checks broke\n", a.broke)
		os.Exit(1)
	}
	fmt.Println("every check held")
}

type attack struct {
	base  string
	broke int
}

func (a *attack) report(held bool, what, format string, args ...any) {
	word := "held "
	if !held {
		word = "BROKE"
		a.broke++
	}
	fmt.Printf("%s %-34s %s\n", word, what, fmt.Sprintf(format, args...))
}

// key revokes ip's key, if any, and makes a new one.
func (a *attack) key(ctx context.Context, ip string) (*client.Client, *http.Client) {
	hc := loadgen.ClientFrom(ip, true)
	c := &client.Client{BaseURL: a.base, HTTP: hc}
	if req, err := http.NewRequestWithContext(ctx, "POST", a.base+"/api/api-key/revoke/", nil); err == nil {
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	k, err := c.GenerateKey(ctx)
	if err != nil {
		fmt.Println("generate a key:", err)
		os.Exit(2)
	}
	c.Key = k.Key
	return c, hc
}

func (a *attack) submit(ctx context.Context, c *client.Client, rows int, notify string) (string, error) {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	out, err := c.Submit(ctx, "input.csv", strings.NewReader(loadgen.CSV(r, rows, 80)),
		client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "H"}, NotifyURL: notify})
	if err != nil {
		return "", err
	}
	return out.JobID, nil
}

// ssrf: every dressed-up form of a private address is refused at submit.
func (a *attack) ssrf(ctx context.Context) {
	c, _ := a.key(ctx, "127.0.0.50")
	forms := []string{
		"http://[::1%25lo]:8080/x", "http://[fe80::1%25lo]/x", "http://[fd00:ec2::254%25eth0]/x",
		"http://[64:ff9b::7f00:1]/x", "http://[2002:7f00:1::]/x", "http://[::ffff:0:7f00:1]/x",
		"http://[::127.0.0.1]/x", "http://[::ffff:127.0.0.1]/x", "http://[64:ff9b::a9fe:a9fe]/x",
		"http://[2002:a9fe:a9fe::]/x", "http://127.0.0.1%25lo/x", "http://localhost./x", "http://a.localhost/x",
		"http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x",
	}
	accepted := []string{}
	for _, u := range forms {
		if _, err := a.submit(ctx, c, 1, u); err == nil || !strings.Contains(err.Error(), "400") {
			accepted = append(accepted, fmt.Sprintf("%s (%v)", u, err))
		}
	}
	a.report(len(accepted) == 0, "SSRF: dressed-up notify URLs", "%d of %d refused with 400; accepted: %v", len(forms)-len(accepted), len(forms), accepted)
}

// headers: 16 connections sending 900 KB headers at 19 requests/s do not
// slow a calm reader, and are answered 431.
func (a *attack) headers(ctx context.Context) {
	c, _ := a.key(ctx, "127.0.0.51")
	job, err := a.submit(ctx, c, 1, "")
	if err != nil {
		a.report(false, "headers", "submit: %v", err)
		return
	}
	calm := func(n int) time.Duration {
		var ds []time.Duration
		for range n {
			start := time.Now()
			if _, err := c.Status(ctx, job); err != nil {
				return time.Hour
			}
			ds = append(ds, time.Since(start))
			time.Sleep(20 * time.Millisecond)
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	before := calm(50)
	stop := make(chan struct{})
	var sent, got431 atomic.Int64
	var wg sync.WaitGroup
	big := strings.Repeat("a", 900<<10)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * 16 / 19)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				conn, err := net.Dial("tcp", strings.TrimPrefix(a.base, "http://"))
				if err != nil {
					continue
				}
				sent.Add(1)
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				fmt.Fprintf(conn, "GET /api/v1/status/%s/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nIf-None-Match: %s\r\n\r\n", job, c.Key, big)
				if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
					if resp.StatusCode == 431 {
						got431.Add(1)
					}
					resp.Body.Close()
				}
				conn.Close()
			}
		}()
	}
	during := calm(250)
	close(stop)
	wg.Wait()
	a.report(during < 20*time.Millisecond+3*before && got431.Load() > 0 && got431.Load() >= sent.Load()*9/10, "huge headers",
		"calm status read p50 %v alone, %v under 16 connections of 900 KB headers; %d of %d answered 431", before, during, got431.Load(), sent.Load())
}

// waiting: the small ones and the streams of one key.
func (a *attack) waiting(ctx context.Context) {
	c, hc := a.key(ctx, "127.0.0.52")
	job, err := a.submit(ctx, c, 40, "")
	if err != nil {
		a.report(false, "waiting", "submit: %v", err)
		return
	}
	get := func(path string, hdr ...string) (*http.Response, time.Duration) {
		req, _ := http.NewRequestWithContext(ctx, "GET", a.base+path, nil)
		req.Header.Set("Authorization", "Bearer "+c.Key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return nil, time.Since(start)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp, time.Since(start)
	}
	path := "/api/v1/status/" + job + "/"
	resp, _ := get(path)
	if resp == nil {
		a.report(false, "waiting", "no status")
		return
	}
	tag := resp.Header.Get("ETag")
	// waitSeconds=1e19: held (capped), not answered at once. A change of
	// the running job may end it early, so it is asked with a fresh tag.
	// (Asked again when the job changed between the tag's read and the
	// poll: then the answer comes at once, rightly.)
	var took time.Duration
	for range 5 {
		if r, _ := get(path); r != nil {
			tag = r.Header.Get("ETag")
		}
		resp, took = get(path+"?waitSeconds=1e19", "If-None-Match", tag)
		if resp == nil || took > 50*time.Millisecond {
			break
		}
	}
	a.report(resp != nil && took > 50*time.Millisecond && (resp.StatusCode == 200 || took > 2*time.Second), "waitSeconds=1e19",
		"answered %v after %v (held until the job changed or the cap, not at once)", code(resp), took.Round(time.Millisecond))
	resp, took = get(path+"?waitSeconds=30", "If-None-Match", "*")
	a.report(resp != nil && resp.StatusCode == 304 && took < time.Second, "If-None-Match: *", "answered %v after %v", code(resp), took.Round(time.Millisecond))

	// A loop of reads that cannot wait spends the plain budget; a real
	// long poll still gets in.
	refused := 0
	for range 400 {
		if r, _ := get(path + "?waitSeconds=1"); r != nil && r.StatusCode == 429 {
			refused++
		}
	}
	resp, _ = get(path+"?waitSeconds=1", "If-None-Match", `W/"other"`)
	a.report(refused > 0 && resp != nil && resp.StatusCode != 429, "waiting budget", "%d of 400 looping reads refused; a real long poll then answered %v", refused, code(resp))

	// Streams without end from this key: bounded, the rest 429.
	time.Sleep(2 * time.Second) // let the plain bucket refill
	var held, tooMany atomic.Int64
	var streams []*http.Response
	var mu sync.Mutex
	var wg sync.WaitGroup
	// 50 a second: under the key's rate of waiting reads (100 a second),
	// so that the bound on open waits is what refuses.
	for range 600 {
		time.Sleep(20 * time.Millisecond)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", a.base+path+"events", nil)
			req.Header.Set("Authorization", "Bearer "+c.Key)
			resp, err := hc.Do(req)
			if err != nil {
				return
			}
			if resp.StatusCode == 200 {
				held.Add(1)
				mu.Lock()
				streams = append(streams, resp)
				mu.Unlock()
				return
			}
			if resp.StatusCode == 429 {
				tooMany.Add(1)
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	a.report(held.Load() <= 256 && tooMany.Load() > 0, "streams of one key", "%d held, %d answered 429 of 600 opened at 50 a second", held.Load(), tooMany.Load())

	// Revoking the key ends its open streams at once.
	ended := make(chan struct{}, len(streams))
	for _, s := range streams {
		go func() {
			_, _ = io.Copy(io.Discard, s.Body)
			ended <- struct{}{}
		}()
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", a.base+"/api/api-key/revoke/", nil)
	start := time.Now()
	if r, err := hc.Do(req); err == nil {
		r.Body.Close()
	}
	n := 0
	timeout := time.After(10 * time.Second)
wait:
	for n < len(streams) {
		select {
		case <-ended:
			n++
		case <-timeout:
			break wait
		}
	}
	a.report(n == len(streams), "revoked key's streams", "%d of %d ended %v after the revocation", n, len(streams), time.Since(start).Round(time.Millisecond))
}

func code(r *http.Response) any {
	if r == nil {
		return "no answer"
	}
	return r.StatusCode
}
