package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"

	"github.com/kinflow/kinflow/internal/testenv"
)

// screenshotDir is where the browser test keeps its screenshots:
// $KINFLOW_E2E_SCREENSHOTS/<test>, else <tmp>/kinflow-e2e-screenshots/<test>
// (kept after the run, overwritten by the next one).
func screenshotDir(t *testing.T) string {
	root := os.Getenv("KINFLOW_E2E_SCREENSHOTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "kinflow-e2e-screenshots")
	}
	dir := filepath.Join(root, regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(t.Name(), "_"))
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// chromium finds Debian's chromium (or another Chrome) for the browser test.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Unavailable(t, "no chromium binary (Debian: apt-get install chromium; scripts/test-deps.sh installs it)")
	return ""
}

// browser starts a fresh headless Chromium and returns a tab context; page
// errors (exceptions, console errors, browser log errors such as CSP
// violations) are collected.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	exe := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	b := &browser{ctx: ctx}
	// The first call starts the browser (a few seconds); it must not carry a
	// deadline, which would stop the whole browser when it expires.
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("start chromium %s: %v", exe, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				b.mu.Lock()
				b.errors = append(b.errors, m.String()+" "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) pageErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// run runs steps with a deadline; a step of the page that never happens
// fails the test instead of hanging it.
func (b *browser) run(t *testing.T, what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v (page errors: %v)", what, err, b.pageErrors())
	}
}

// get runs one action that returns a value, with a deadline.
func get[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v (page errors: %v)", what, err, b.pageErrors())
	}
	return v
}

// eval evaluates a JavaScript expression into T (promises awaited).
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	return get(t, b, "evaluate "+expr, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

func (b *browser) shot(t *testing.T, dir, name string) {
	t.Helper()
	png := get(t, b, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// waitJS polls a JavaScript expression until it is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond))
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := poll(ctx, tg)
		return chromedp.Void{}, err
	}
}

// jobView is what the job panel shows.
type jobView struct {
	Summary   string `json:"summary"`
	Done      int    `json:"done"`
	Total     int    `json:"total"`
	Cached    string `json:"cached"`
	Computed  string `json:"computed"`
	Remaining string `json:"remaining"`
	Progress  struct {
		Value float64 `json:"value"`
		Max   float64 `json:"max"`
	} `json:"progress"`
	Stages     []string `json:"stages"`
	GPU        []string `json:"gpu"`
	ResultOpen bool     `json:"resultOpen"`
	Error      string   `json:"error"`
}

const readJobView = `(() => {
  const t = (id) => document.getElementById(id).textContent;
  const p = document.getElementById("emb-progress");
  return {
    summary: t("job-summary"), done: +t("emb-done"), total: +t("emb-total"),
    cached: t("emb-cached"), computed: t("emb-computed"), remaining: t("emb-remaining"),
    progress: {value: p.value, max: p.max},
    stages: [...document.querySelectorAll("#job-stages li")].map((li) => li.textContent),
    gpu: [...document.querySelectorAll("#gpu-events li")].map((li) => li.textContent),
    resultOpen: !document.getElementById("result-wrap").hidden,
    error: document.getElementById("job-error").hidden ? "" : t("job-error"),
  };
})()`

// keyWorks reports the status of an authenticated API call with key.
func keyWorks(t *testing.T, base, key string) int {
	req, _ := http.NewRequest("GET", base+"/api/v1/quota/", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestBrowserKeySubmitProgressResult drives the web page in a real headless
// Chromium against a real stack: revoke the address's existing key and
// generate a new one (kept in localStorage), see validation row errors,
// submit docs/example.csv, watch the embedding progress reach its total
// without reloading, read the result table and download, then revoke the
// key. Screenshots of each step are kept (paths in the log).
func TestBrowserKeySubmitProgressResult(t *testing.T) {
	b := newBrowser(t)
	dir := screenshotDir(t)
	// 1.5 s per sequence on the GPU host: the three sequences of the
	// example take several 1 s polls, so intermediate progress is visible.
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=1500")
	s := newStack(t, nil, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow}})
	example := filepath.Join(testenv.RepoRoot(), "docs", "example.csv")
	const step = 30 * time.Second
	id := func(s string) chromedp.ID { return chromedp.ID(s) }

	// The stack holds this address's key already: the page shows its suffix.
	suffix := "…" + s.key[len(s.key)-6:]
	b.run(t, "open page", step,
		chromedp.Navigate(s.base+"/"),
		waitJS(`document.getElementById("key-state").textContent.includes(`+jsString("active key ending "+suffix)+`)`),
		waitJS(`document.querySelectorAll("#method-kcat option").length > 0`),
	)
	b.shot(t, dir, "01-existing-key")

	// A job link opened in a browser without a key: the job panel says a
	// key is needed and where the key panel is, shows no empty progress,
	// and its button leads to the usable control there (this address has a
	// key already, so Generate is off and the paste field is open).
	linked := submitWithKey(t, s.base, s.key, "Protein Sequence,Substrate\nMKTAYIAKQRQ,CCO\n", `["kcat"]`, `{"kcat":"B"}`)
	b.run(t, "open a job link without a key", step,
		chromedp.Navigate(s.base+"/#job="+linked),
		waitJS(`!document.getElementById("job-needkey").hidden && document.getElementById("key-generate").disabled`),
	)
	type noKeyView struct {
		Summary   string `json:"summary"`
		Text      string `json:"text"`
		Body      bool   `json:"body"`
		Manual    bool   `json:"manual"`
		GenTitle  string `json:"genTitle"`
		Focused   string `json:"focused"`
		KeyInView bool   `json:"keyInView"`
	}
	const readNoKey = `(() => { const r = document.getElementById("key-panel").getBoundingClientRect();
		return {summary: document.getElementById("job-summary").textContent, text: document.getElementById("job-needkey").textContent,
			body: !document.getElementById("job-body").hidden, manual: document.getElementById("key-manual").open,
			genTitle: document.getElementById("key-generate").title, focused: document.activeElement.id,
			keyInView: r.top >= 0 && r.top < innerHeight}; })()`
	nk := eval[noKeyView](t, b, readNoKey)
	if nk.Summary != "An API key is needed to see this job." || !strings.Contains(nk.Text, "API key panel just below") ||
		strings.Contains(nk.Text, "above") || nk.Body || !nk.Manual || nk.GenTitle == "" {
		t.Errorf("job link without a key: %+v", nk)
	}
	b.shot(t, dir, "01b-job-link-without-key")
	b.run(t, "go to the key panel", step, chromedp.Click(id("job-needkey-go")), waitJS(`document.activeElement.id === "key-input"`))
	if nk = eval[noKeyView](t, b, readNoKey); !nk.KeyInView || nk.Focused != "key-input" {
		t.Errorf("the job panel's button does not lead to the key panel: %+v", nk)
	}
	// Pasting the key that submitted the job opens it where it is.
	b.run(t, "use the key", step,
		chromedp.SendKeys(id("key-input"), s.key),
		chromedp.Click(id("key-use")),
		waitJS(`!document.getElementById("job-body").hidden && document.getElementById("job-needkey").hidden`),
		waitJS(`!!document.querySelector('#jobs-table tr[data-job=`+jsString(linked)+`]')`),
	)
	// "Your jobs" names each job's input file.
	if cells := eval[[]string](t, b, `[...document.querySelector('#jobs-table tr[data-job=`+jsString(linked)+`]').cells].map((c) => c.textContent)`); len(cells) < 2 || cells[1] != "lists.csv" {
		t.Errorf("jobs list row %q: want the input file lists.csv in its second cell", cells)
	}
	b.run(t, "forget the key, close the job", step,
		chromedp.Click(id("key-forget")),
		chromedp.Navigate(s.base+"/"),
		chromedp.Reload(),
		waitJS(`document.getElementById("key-state").textContent.includes(`+jsString("active key ending "+suffix)+`)`),
		waitJS(`document.querySelectorAll("#method-kcat option").length > 0`),
	)

	// Revoke (two clicks: arm, confirm), then generate.
	b.run(t, "revoke existing key", step,
		chromedp.Click(id("key-revoke")),
		waitJS(`document.getElementById("key-revoke").textContent.startsWith("Confirm")`),
		chromedp.Click(id("key-revoke")),
		waitJS(`document.getElementById("key-state").textContent.includes("no active key")`),
	)
	if code := keyWorks(t, s.base, s.key); code != 401 {
		t.Fatalf("the revoked stack key answers %d", code)
	}
	b.run(t, "generate key", step,
		chromedp.Click(id("key-generate")),
		chromedp.WaitVisible(id("key-new")),
		waitJS(`document.getElementById("key-state").textContent.includes("kept in this browser")`),
	)
	key := get(t, b, "key field", chromedp.Value(id("key-full")))
	stored := eval[string](t, b, `localStorage.getItem("kinflow.apiKey") || ""`)
	if !strings.HasPrefix(key, "ak_") || len(key) != 67 || stored != key {
		t.Fatalf("shown key %q, stored %q", key, stored)
	}
	if code := keyWorks(t, s.base, key); code != 200 {
		t.Fatalf("the generated key answers %d", code)
	}
	s.key = key // the stack's own requests (resultCSV) use the page's key from now on
	if focused := eval[string](t, b, `document.activeElement.id`); focused != "key-full" {
		t.Errorf("focus after generate on %q, want the key field", focused)
	}
	b.shot(t, dir, "02-key-generated")

	// Every control has a label, the ones built from /methods/ included.
	unlabelled := eval[[]string](t, b, `[...document.querySelectorAll("input, select, textarea")]
		.filter((e) => e.type !== "hidden" && e.labels.length === 0 && !e.getAttribute("aria-label")).map((e) => e.id || e.outerHTML)`)
	if len(unlabelled) > 0 {
		t.Errorf("controls without a label: %v", unlabelled)
	}

	// Validation row errors for pasted text.
	b.run(t, "validate pasted rows", step,
		chromedp.SetValue(id("csv-text"), "Protein Sequence,Substrate\nMKTAYIAKQRQ,CCO\nMK1TZ,CCO\n"),
		chromedp.Click(id("validate-btn")),
		chromedp.WaitVisible(id("validate-table")),
	)
	rowsText := eval[string](t, b, `document.querySelector("#validate-table tbody").textContent`)
	if !strings.Contains(rowsText, "2 characters are not amino acids: '1' at position 3, 'Z' at position 5.") || !strings.HasPrefix(rowsText, "2Protein Sequence") {
		t.Fatalf("validation rows %q", rowsText)
	}
	b.shot(t, dir, "03-validation-errors")

	// Similarity histograms: a training set for method B in the stack's
	// media root (the API checks for it per request), the pasted sequence
	// an exact copy of one of its entries. The chart is plain SVG under the
	// page's strict CSP (a violation fails the test via the page errors).
	if _, err := exec.LookPath("mmseqs"); err != nil {
		testenv.Unavailable(t, "mmseqs2 is not installed (Debian package mmseqs2)")
	}
	fasta := filepath.Join(s.media, "fastas", "B_sequences.fasta")
	simSeq := strings.Repeat("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", 4)
	if err := os.MkdirAll(filepath.Dir(fasta), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fasta, []byte(">t0\n"+simSeq+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Validation reports the methods chosen in the form: method
	// B, whose training set is there.
	if sel := eval[string](t, b, `(() => {
		const m = document.getElementById("method-kcat");
		m.value = "B";
		m.dispatchEvent(new Event("change"));
		return m.value;
	})()`); sel != "B" {
		t.Fatalf("method B not selectable: %q", sel)
	}
	b.run(t, "validate with similarity", 90*time.Second,
		chromedp.SetValue(id("csv-text"), "Protein Sequence,Substrate\n"+simSeq+",CCO\n"),
		chromedp.Click(id("opt-runsim")),
		chromedp.Click(id("validate-btn")),
		waitJS(`document.querySelectorAll(".simchart svg rect.bar").length === 1`),
	)
	if caption := eval[string](t, b, `document.querySelector(".simchart figcaption").textContent`); !strings.Contains(caption, "Training set B: average max identity 100 %") {
		t.Errorf("similarity chart caption %q", caption)
	}
	b.shot(t, dir, "03b-similarity-chart")
	b.run(t, "similarity off again", step, chromedp.Click(id("opt-runsim")))

	// A sequence longer than method B's limit: the message uses the form's
	// words ("Skip long sequences"), not the wire option.
	b.run(t, "validate a long sequence", step,
		chromedp.SetValue(id("csv-text"), "Protein Sequence,Substrate\n"+strings.Repeat("MKTAYIAKQR", 110)+",CCO\n"),
		chromedp.Click(id("validate-btn")),
		waitJS(`document.getElementById("validate-out").textContent.includes("longer than")`),
	)
	if out := eval[string](t, b, `document.getElementById("validate-out").textContent`); strings.Contains(out, "handleLongSequences") ||
		!strings.Contains(out, "Skip long sequences") {
		t.Errorf("long-sequence message in the wire's words: %q", out)
	}
	// A good row, a bad one and a long one: truncated, the long row is
	// predicted; with "Skip long sequences" it is one more row without a
	// prediction, in the summary and in the submit's count.
	b.run(t, "validate good, bad and long rows", step,
		chromedp.SetValue(id("csv-text"), "Protein Sequence,Substrate\nMKTAYIAKQRQ,CCO\nMK1TZ,CCO\n"+strings.Repeat("MKTAYIAKQR", 110)+",CCO\n"),
		chromedp.Click(id("validate-btn")),
		waitJS(`document.getElementById("validate-summary").textContent.startsWith("3 row(s) read.")`),
	)
	summary := `document.getElementById("validate-summary").textContent`
	if got := eval[string](t, b, summary); got != "3 row(s) read. 1 row(s) get no prediction (1 with problems). Checked for method(s) B." {
		t.Errorf("summary, long sequences truncated: %q", got)
	}
	b.run(t, "skip long sequences", step, chromedp.Click(id("long-skip")), waitJS(summary+`.includes("2 row(s)")`))
	if got := eval[string](t, b, summary); got != "3 row(s) read. 2 row(s) get no prediction (1 with problems; 1 with a sequence longer than a method's limit, left out by \u201cSkip long sequences\u201d). Checked for method(s) B." {
		t.Errorf("summary, long sequences skipped: %q", got)
	}
	b.run(t, "truncate long sequences again", step, chromedp.Click(id("long-truncate")), waitJS(summary+`.includes("1 row(s) get")`))

	// Submit the example file (a chosen file wins over pasted text; clear
	// it anyway), method B for kcat.
	if sel := eval[string](t, b, `(() => {
		document.getElementById("csv-text").value = "";
		const m = document.getElementById("method-kcat");
		m.value = "B";
		m.dispatchEvent(new Event("change"));
		return m.value;
	})()`); sel != "B" {
		t.Fatalf("method B not selectable: %q", sel)
	}
	b.run(t, "submit example", step,
		chromedp.SetUploadFiles(id("csv-file"), []string{example}),
		chromedp.Click(id("submit-btn")),
		waitJS(`location.hash.startsWith("#job=")`),
	)
	jobID := strings.TrimPrefix(eval[string](t, b, `location.hash`), "#job=")
	// The page sent an Idempotency-Key with the submit, so a retry makes no
	// second job.
	st, _ := s.openStoreAndKey(t)
	var claims int64
	st.DB.Raw("SELECT COUNT(*) FROM idempotency_keys WHERE job_id = ?", jobID).Scan(&claims)
	if claims != 1 {
		t.Errorf("the page's submit carried no Idempotency-Key (%d claims for job %s)", claims, jobID)
	}
	if validated := eval[string](t, b, `document.getElementById("validate-summary").textContent`); validated != "3 row(s) read. No row problems. Checked for method(s) B." {
		t.Errorf("validation before submit: %q", validated)
	}

	// Progress: read the panel every 200 ms until the embedding count
	// reaches its total and the result is shown, without reloading.
	var seen []jobView
	intermediate := false
	deadline := time.Now().Add(120 * time.Second)
	for {
		v := eval[jobView](t, b, readJobView)
		if len(seen) == 0 || fmt.Sprint(v) != fmt.Sprint(seen[len(seen)-1]) {
			seen = append(seen, v)
		}
		if v.Error != "" {
			t.Fatalf("job error on the page: %s", v.Error)
		}
		if v.Total > 0 && v.Done < v.Total && !intermediate {
			intermediate = true
			b.shot(t, dir, "04-progress")
		}
		if v.ResultOpen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result after 120 s; views %+v", seen)
		}
		time.Sleep(200 * time.Millisecond)
	}
	final := seen[len(seen)-1]
	for _, v := range seen {
		t.Logf("view: %s | %d/%d | stages %q", v.Summary, v.Done, v.Total, v.Stages)
	}
	if !intermediate {
		t.Errorf("never saw the embedding count below its total: %+v", seen)
	}
	// The page followed the job on its event stream (one request, kept
	// open), not by polling /status/.
	type statusReads struct {
		Stream int `json:"stream"`
		Polls  int `json:"polls"`
	}
	reads := eval[statusReads](t, b, `(() => {
  const r = performance.getEntriesByType("resource").map(e => e.name).filter(n => n.includes("/api/v1/status/"));
  return {stream: r.filter(n => n.endsWith("/events")).length, polls: r.filter(n => !n.endsWith("/events")).length};
})()`)
	if reads.Stream < 1 || reads.Polls > 0 {
		t.Errorf("status reads of the page: %d event stream(s), %d poll(s); want the stream only", reads.Stream, reads.Polls)
	}
	if final.Total != 3 || final.Done != 3 || final.Progress.Value != 3 || final.Progress.Max != 3 ||
		final.Computed != "3" || final.Remaining != "0" || !strings.HasPrefix(final.Summary, "Completed") {
		t.Fatalf("final view %+v", final)
	}
	if len(final.Stages) != 1 || !strings.Contains(final.Stages[0], "kcat") || !strings.Contains(final.Stages[0], "embedding files 3/3") || !strings.Contains(final.Stages[0], "3 row(s)") {
		t.Fatalf("stages %q", final.Stages)
	}
	if len(final.GPU) == 0 || !strings.Contains(strings.Join(final.GPU, " "), "done") {
		t.Fatalf("GPU events %q", final.GPU)
	}

	// The result table, the synthetic banner and the download link.
	type resultView struct {
		Headers  []string `json:"headers"`
		Rows     int      `json:"rows"`
		Text     string   `json:"text"`
		Banner   bool     `json:"banner"`
		Href     string   `json:"href"`
		Download string   `json:"download"`
		Count    string   `json:"count"`
	}
	table := eval[resultView](t, b, `(() => {
		const a = document.getElementById("result-download");
		return {
			headers: [...document.querySelectorAll("#result-table thead th")].map((th) => th.textContent),
			rows: document.querySelectorAll("#result-table tbody tr").length,
			// Source cells the same on every row are said once, above the table.
			text: document.querySelector("#result-table tbody").textContent + " " + document.getElementById("result-folded").textContent,
			banner: !document.getElementById("synthetic-banner").hidden,
			href: a.href, download: a.download, count: document.getElementById("result-count").textContent,
		};
	})()`)
	if table.Rows != 3 || !strings.Contains(table.Text, "Synthetic placeholder") || !table.Banner ||
		!strings.HasPrefix(table.Href, "blob:") || table.Download != "kinflow-"+jobID+"-results.csv" || table.Count != "3 row(s)" {
		t.Fatalf("result view %+v", table)
	}
	// A few rows: the count axes still step by whole rows, each label once.
	if problems := eval[[]string](t, b, plotAxisProblems); len(problems) > 0 {
		t.Errorf("plot axes of a 3-row result:\n%s", strings.Join(problems, "\n"))
	}
	// The job's row in "Your jobs" names the uploaded file.
	b.run(t, "jobs list", step, waitJS(`!!document.querySelector('#jobs-table tr[data-job=`+jsString(jobID)+`]')`))
	if cells := eval[[]string](t, b, `[...document.querySelector('#jobs-table tr[data-job=`+jsString(jobID)+`]').cells].map((c) => c.textContent)`); len(cells) < 2 || cells[1] != "example.csv" {
		t.Errorf("jobs list row %q: want the input file example.csv in its second cell", cells)
	}
	// Click the download link as a user would; the browser saves the file.
	downloads := t.TempDir()
	if _, err := chromedp.CallBrowser(b.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
		t.Fatal(err)
	}
	b.run(t, "download", step, chromedp.Click(id("result-download")))
	saved := filepath.Join(downloads, "kinflow-"+jobID+"-results.csv")
	var downloaded []byte
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if data, err := os.ReadFile(saved); err == nil && len(data) > 0 {
			downloaded = data
			break
		}
	}
	if string(downloaded) != s.resultCSV(jobID) {
		t.Fatalf("downloaded CSV %s differs from the API's:\n%s", saved, downloaded)
	}
	b.shot(t, dir, "05-results")

	// A result with substrate lists and candidates: array cells
	// are shown as readable lines, the raw JSON in the cell's title. The
	// similarity box starts checked (the API's default is true).
	if !eval[bool](t, b, `document.getElementById("opt-sim").checked`) {
		t.Error(`"Include similarity columns" does not start checked`)
	}
	listJob := submitWithKey(t, s.base, key, "Protein Sequence,Substrates\n"+
		"MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ;MKTAYIAKQRQ,CCO;O\n", `["kcat","Km"]`, `{"kcat":"B","Km":"B"}`)
	if st := s.waitDone(listJob, 90*time.Second); st.Status != "Completed" {
		t.Fatalf("list job %s: %s", st.Status, st.Error)
	}
	b.run(t, "open list job", step,
		chromedp.Navigate(s.base+"/#job="+listJob),
		waitJS(`!document.getElementById("result-wrap").hidden && document.getElementById("result-count").textContent === "1 row(s)"`),
	)
	cells := eval[[]string](t, b, `[...document.querySelectorAll("#result-table tbody td.cells")].map((td) => td.innerText)`)
	joined := strings.Join(cells, "\n---\n")
	if len(cells) < 3 || !strings.Contains(joined, "substrate 1: ") || !strings.Contains(joined, "substrate 2: ") ||
		!strings.Contains(joined, "sequence 1 (MKTAYIAKQRQI…):") || !strings.Contains(joined, "(selected)") || strings.Contains(joined, `"substrateIndex"`) {
		t.Errorf("array cells not readable:\n%s", joined)
	}
	if problems := eval[[]string](t, b, plotAxisProblems); len(problems) > 0 {
		t.Errorf("plot axes of a 1-row result:\n%s", strings.Join(problems, "\n"))
	}
	b.shot(t, dir, "05b-substrate-lists")

	// Readable on a phone: no horizontal scrolling of the page itself.
	b.run(t, "phone", step, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
	if overflow := eval[int](t, b, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); overflow > 0 {
		t.Errorf("page overflows a 390 px phone screen by %d px", overflow)
	}
	b.shot(t, dir, "06-phone")

	// Revoke the generated key from the page.
	b.run(t, "revoke", step,
		chromedp.EmulateViewport(1280, 900),
		chromedp.Click(id("key-revoke")),
		waitJS(`document.getElementById("key-revoke").textContent.startsWith("Confirm")`),
		chromedp.Click(id("key-revoke")),
		waitJS(`document.getElementById("key-state").textContent.includes("no active key")`),
	)
	if stored := eval[string](t, b, `localStorage.getItem("kinflow.apiKey") || ""`); stored != "" {
		t.Errorf("key still in localStorage after revoke")
	}
	if code := keyWorks(t, s.base, key); code != 401 {
		t.Fatalf("revoked key answers %d", code)
	}
	eval[bool](t, b, `(window.scrollTo(0, 0), true)`)
	b.shot(t, dir, "07-revoked")

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors (CSP violations, exceptions, console errors):\n%s", strings.Join(errs, "\n"))
	}
}

// plotAxisProblems lists what is wrong with the axes of the result's plots:
// a bar chart without a count axis; a count axis tick that is not a whole number, or comes twice or out of
// order (a grid line at half a row); a value axis label said twice; the
// SD histogram's median label lying on a bar. Empty: none.
const plotAxisProblems = `(() => {
  const out = [];
  const hit = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
  document.querySelectorAll("#result-plots svg[role=img]").forEach((svg, i) => {
    const name = (svg.closest("figure") || {dataset: {}}).dataset.col + " " + (svg.getAttribute("class") || "values") + " (plot " + i + ")";
    const counts = [...svg.querySelectorAll("text.count-tick")].map((t) => t.textContent);
    if (svg.querySelector("rect.bar") && counts.length < 2) out.push(name + ": count axis ticks " + JSON.stringify(counts));
    counts.forEach((c, k) => {
      if (!/^(0|[1-9][0-9]*)$/.test(c)) out.push(name + ": count tick " + JSON.stringify(c) + " is not a whole number");
      else if (k > 0 && +c <= +counts[k - 1]) out.push(name + ": count ticks " + JSON.stringify(counts) + " repeat or go down");
    });
    const values = [...svg.querySelectorAll("text.tick")].filter((t) => !t.matches(".count-tick, .count, .class-label")).map((t) => t.textContent);
    if (new Set(values).size !== values.length) out.push(name + ": axis labels repeat " + JSON.stringify(values));
    const med = svg.querySelector("text.median-label");
    if (med) {
      const m = med.getBBox();
      if ([...svg.querySelectorAll("rect.bar")].some((r) => hit(m, r.getBBox()))) out.push(name + ": the median label lies on a bar");
    }
  });
  return out;
})()`

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// submitWithKey posts a CSV job with key and returns its id.
func submitWithKey(t *testing.T, base, key, csvText, targets, methods string) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "lists.csv")
	_, _ = fw.Write([]byte(csvText))
	_ = mw.WriteField("targets", targets)
	_ = mw.WriteField("methods", methods)
	_ = mw.Close()
	req, _ := http.NewRequest("POST", base+"/api/v1/submit/", &buf)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		JobID string `json:"jobId"`
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != 201 {
		t.Fatalf("submit: %d %s", resp.StatusCode, out.Error)
	}
	return out.JobID
}
