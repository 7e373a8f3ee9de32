package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserUncertaintyPlot opens a 10,000-row result whose Km comes from
// a method that gives uncertainty (E, the synthetic engine's flagged
// stand-in) and whose kcat does not (B) in a real headless Chromium. Km's
// value plot is followed by its uncertainty panel: the distribution of the
// per-row total SD in log10 units (one count per row that has one, the
// median in the caption as the API's numbers give it) and the ±1 SD
// intervals of an even sample of 80 rows ranked by value, synthetic
// marked in both; kcat has no such panel (TestBrowserLargeResult: none in
// a result without uncertainty columns). Drawing every plot stays within a
// bound. Screenshots go to $KINFLOW_E2E_SCREENSHOTS.
func TestBrowserUncertaintyPlot(t *testing.T) {
	b := newBrowser(t)
	dir := screenshotDir(t)
	s := newStack(t, nil, nil)
	const rows = 10000
	const step = 60 * time.Second

	b.run(t, "open page", step,
		chromedp.Navigate(s.base+"/"),
		waitJS(`document.querySelectorAll("#method-kcat option").length > 0`),
	)
	eval[bool](t, b, `(localStorage.setItem("kinflow.apiKey", `+jsString(s.key)+`), true)`)
	job := s.submit(largeCSV(rows), []string{"kcat", "Km"}, map[string]string{"kcat": "B", "Km": "E"})
	b.run(t, "open job", step, chromedp.Navigate(s.base+"/#job="+job), chromedp.Reload())
	b.run(t, "result", 9*time.Minute, waitJS(`(document.getElementById("result-count").textContent === "10000 row(s)" &&
		document.querySelectorAll("#result-plots figure.plot").length > 0) || !document.getElementById("job-error").hidden`))
	if e := eval[string](t, b, jobErrorJS); e != "" {
		t.Fatalf("the page shows an error instead of the result: %q", e)
	}

	// The API's own numbers: each row's Km and its total SD.
	res := s.resultJSON(t, job, rows)
	const totalCol = "Uncertainty Km total (SD, log10)"
	if !slices.Contains(res.Columns, totalCol) || slices.ContainsFunc(res.Columns, func(c string) bool { return strings.HasPrefix(c, "Uncertainty kcat") }) {
		t.Fatalf("columns %q", res.Columns)
	}
	var sds []float64
	for _, r := range res.Data {
		km, ok1 := r["KM (mM)"].(float64)
		sd, ok2 := r[totalCol].(float64)
		if ok1 && ok2 && km > 0 {
			sds = append(sds, sd)
		}
	}
	if len(sds) < rows/2 {
		t.Fatalf("only %d rows with a Km and its uncertainty", len(sds))
	}
	slices.Sort(sds)
	med := sds[len(sds)/2]
	if len(sds)%2 == 0 {
		med = (sds[len(sds)/2-1] + sds[len(sds)/2]) / 2
	}
	medText := strconv.FormatFloat(mustFloat(t, strconv.FormatFloat(med, 'g', 3, 64)), 'f', -1, 64)

	type plotView struct {
		Col       string   `json:"col"`
		Kind      string   `json:"kind"`
		Bars      int      `json:"bars"`
		Hatch     int      `json:"hatch"`
		Sum       int      `json:"sum"`
		Intervals int      `json:"intervals"`
		Dashed    int      `json:"dashed"`
		Warn      []string `json:"warn"`
		Labels    []string `json:"labels"`
		Caption   string   `json:"caption"`
	}
	plots := eval[[]plotView](t, b, `[...document.querySelectorAll("#result-plots figure.plot")].map((f) => ({
		col: f.dataset.col, kind: f.dataset.kind || "values",
		bars: f.querySelectorAll("svg.sd-hist rect.bar").length, hatch: f.querySelectorAll("svg.sd-hist rect.hatch").length,
		sum: [...f.querySelectorAll("svg.sd-hist rect.bar title")].reduce((s, t) => s + parseInt(t.textContent.split(": ")[1], 10), 0),
		intervals: f.querySelectorAll("svg.intervals g.interval").length,
		dashed: f.querySelectorAll("svg.intervals line.band.synthetic").length,
		warn: [...f.querySelectorAll("text.warn")].map((t) => t.textContent),
		labels: [...f.querySelectorAll("text.label")].map((t) => t.textContent),
		caption: (f.querySelector("figcaption") || {}).textContent || ""}))`)
	kinds := make([]string, len(plots))
	for i, p := range plots {
		kinds[i] = p.Col + "/" + p.Kind
	}
	if strings.Join(kinds, ",") != "kcat (1/s)/values,KM (mM)/values,KM (mM)/uncertainty" {
		t.Fatalf("plots %q: want kcat's and Km's values and Km's uncertainty only", kinds)
	}
	u := plots[2]
	t.Logf("uncertainty panel: %d bars, %d intervals, labels %q, caption %q", u.Bars, u.Intervals, u.Labels, u.Caption)
	if u.Sum != len(sds) || u.Bars < 3 || u.Hatch != u.Bars {
		t.Errorf("SD histogram: %d bars (%d hatched) counting %d rows; the result has %d rows with a Km and its SD", u.Bars, u.Hatch, u.Sum, len(sds))
	}
	if u.Intervals != 80 || u.Dashed != 80 {
		t.Errorf("intervals: %d drawn (%d dashed as synthetic), want 80", u.Intervals, u.Dashed)
	}
	if len(u.Warn) != 2 || u.Warn[0] != "SYNTHETIC — not predictions" || u.Warn[1] != u.Warn[0] {
		t.Errorf("synthetic marks %q", u.Warn)
	}
	if !slices.Contains(u.Labels, "total SD of log10(Km), log10 units") || !slices.Contains(u.Labels, "KM (mM) (log scale), ±1 total SD") ||
		!slices.Contains(u.Labels, fmt.Sprintf("rows ranked by value (80 of %d)", len(sds))) {
		t.Errorf("axis labels %q", u.Labels)
	}
	if !strings.Contains(u.Caption, "log10 units") || !strings.Contains(u.Caption, "total median "+medText+" (×/÷ ") ||
		!strings.Contains(u.Caption, "aleatoric median") || !strings.Contains(u.Caption, "Synthetic stand-ins, not predictions.") {
		t.Errorf("caption %q (median %s)", u.Caption, medText)
	}

	// Km's uncertainty is beside Km in the table, and the median
	// label of the SD histogram lies whole inside its plot.
	heads := eval[[]string](t, b, `[...document.querySelectorAll("#result-table thead th")].map((th) => th.dataset.col || th.textContent)`)
	if k := slices.Index(heads, "KM (mM)"); k < 0 || k+1 >= len(heads) || heads[k+1] != totalCol {
		t.Errorf("Km's uncertainty is not beside Km: %q", heads)
	}
	if box := eval[[]float64](t, b, `(() => { const m = document.querySelector("svg.sd-hist text.median-label").getBBox();
		return [m.x, m.x + m.width, m.y]; })()`); box[0] < 0 || box[1] > 360 || box[2] < 0 {
		t.Errorf("median label clipped: x %v to %v, y %v (plot 0 to 360)", box[0], box[1], box[2])
	}

	// Whole-row count ticks, each axis label once, the median label on
	// its own line above the bars.
	if problems := eval[[]string](t, b, plotAxisProblems); len(problems) > 0 {
		t.Errorf("plot axes:\n%s", strings.Join(problems, "\n"))
	}

	took := eval[float64](t, b, `Math.max(...performance.getEntriesByName("kinflow-plots").map((e) => e.duration))`)
	// Reported, not asserted: speed is a benchmark's business, not a test's
	// (docs/BENCHMARKS.md has the figure).
	t.Logf("drawing the plots of 10,000 rows (values and uncertainty): %.0f ms", took)
	b.shot(t, dir, "01-result-with-uncertainty")
	png := get(t, b, "plot screenshot", chromedp.Screenshot(chromedp.ID("result-plots")))
	writeShot(t, dir, "02-plots-with-uncertainty.png", png)
	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors (CSP violations, exceptions, console errors):\n%s", strings.Join(errs, "\n"))
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
