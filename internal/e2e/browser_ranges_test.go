package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// rangeResult is a JSON result with its range classes.
type rangeResult struct {
	Columns      []string                    `json:"columns"`
	Data         []map[string]any            `json:"data"`
	ColumnNotes  map[string]string           `json:"columnNotes"`
	RangeClasses map[string]rangeDescription `json:"rangeClasses"`
	Synthetic    bool                        `json:"synthetic"`
}

type rangeDescription struct {
	Target             string    `json:"target"`
	Classes            []string  `json:"classes"`
	Midpoints          []float64 `json:"midpoints"`
	MidpointColumn     string    `json:"midpointColumn"`
	ExperimentalColumn string    `json:"experimentalColumn"`
}

func (s *stack) rangeResult(t *testing.T, job string, rows int) rangeResult {
	t.Helper()
	var body string
	if code := s.do("GET", "/api/v1/result/"+job+"/?format=json", nil, "", &body); code != 200 {
		t.Fatalf("result JSON: %d", code)
	}
	var res rangeResult
	if err := json.Unmarshal([]byte(body), &res); err != nil || len(res.Data) != rows {
		t.Fatalf("result JSON: %v, %d rows", err, len(res.Data))
	}
	return res
}

// rangeTexts is a range cell's classes: its text, or each text of a
// per-substrate list (nil for a substrate without one); none for a blank.
func rangeTexts(t *testing.T, v any) []*string {
	t.Helper()
	s, ok := v.(string)
	if !ok || s == "" {
		if v != nil {
			t.Fatalf("range cell %v (%T) is not text", v, v)
		}
		return nil
	}
	if !strings.HasPrefix(s, "[") {
		return []*string{&s}
	}
	var list []*string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		t.Fatalf("range list cell %q: %v", s, err)
	}
	return list
}

// classCounts is the API's own count per class of a range column (each
// class of a list cell counted), and its rows without a class.
func classCounts(t *testing.T, res rangeResult, col string) (counts []int, blank int) {
	t.Helper()
	rc := res.RangeClasses[col]
	counts = make([]int, len(rc.Classes))
	for _, row := range res.Data {
		texts := rangeTexts(t, row[col])
		named := 0
		for _, x := range texts {
			if x == nil {
				continue
			}
			i := slices.Index(rc.Classes, *x)
			if i < 0 {
				t.Fatalf("%s: %q is none of the classes %q", col, *x, rc.Classes)
			}
			counts[i]++
			named++
		}
		if named == 0 {
			blank++
		}
	}
	return counts, blank
}

// classPlot is a range column's class-count plot as the page draws it.
type classPlot struct {
	Col     string   `json:"col"`
	Kind    string   `json:"kind"`
	Classes []string `json:"classes"`
	Counts  []int    `json:"counts"`
	Shown   []string `json:"shown"` // the count written above each bar
	Bars    []int    `json:"bars"`  // rect.bar per class
	Hatch   []int    `json:"hatch"` // rect.hatch per class
	Sums    []int    `json:"sums"`  // the counts of each class's bars' tooltips
	Labels  []string `json:"labels"`
	Warn    []string `json:"warn"`
	Legend  []string `json:"legend"`
	Caption string   `json:"caption"`
	Outside []string `json:"outside"` // texts not wholly inside the plot
}

const readPlots = `[...document.querySelectorAll("#result-plots figure.plot")].map((f) => {
  const svg = f.querySelector("svg.class-counts");
  const groups = svg ? [...svg.querySelectorAll("g.class-bar")] : [];
  const box = svg ? svg.getBoundingClientRect() : null;
  return {
    col: f.dataset.col, kind: f.dataset.kind || "values",
    classes: groups.map((g) => g.dataset.class),
    counts: groups.map((g) => Number(g.dataset.count)),
    shown: groups.map((g) => (g.querySelector("text.count") || {}).textContent || ""),
    bars: groups.map((g) => g.querySelectorAll("rect.bar").length),
    hatch: groups.map((g) => g.querySelectorAll("rect.hatch").length),
    sums: groups.map((g) => [...g.querySelectorAll("rect.bar title")].reduce((s, t) => s + parseInt(t.textContent.split(": ")[1], 10), 0)),
    labels: svg ? [...svg.querySelectorAll("text.class-label")].map((t) => t.textContent) : [],
    warn: [...f.querySelectorAll("text.warn")].map((t) => t.textContent),
    legend: [...f.querySelectorAll(".legend li")].map((li) => li.textContent),
    caption: (f.querySelector("figcaption") || {}).textContent || "",
    outside: svg ? [...svg.querySelectorAll("text")].filter((t) => {
      const r = t.getBoundingClientRect();
      return r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1;
    }).map((t) => t.textContent) : [],
  };
})`

// checkClassPlot holds a range column's plot to the API's own counts: one
// bar per class in class order (a class no row has at 0, with no rect), x
// labels the class texts, every bar hatched as synthetic, the plot marked
// synthetic, no text cut off.
func checkClassPlot(t *testing.T, p classPlot, rc rangeDescription, counts []int) {
	t.Helper()
	t.Logf("%s: classes %q counts %v (shown %q), caption %q", p.Col, p.Classes, p.Counts, p.Shown, p.Caption)
	if p.Kind != "range" {
		t.Errorf("%s: a %q plot, want the class counts", p.Col, p.Kind)
	}
	if !slices.Equal(p.Classes, rc.Classes) || !slices.Equal(p.Labels, rc.Classes) {
		t.Errorf("%s: bars %q, x labels %q; want one per class in order %q", p.Col, p.Classes, p.Labels, rc.Classes)
	}
	if !slices.Equal(p.Counts, counts) {
		t.Errorf("%s: counts %v, the API's %v", p.Col, p.Counts, counts)
	}
	for i, n := range counts {
		if i >= len(p.Bars) {
			break
		}
		if p.Shown[i] != strconv.Itoa(n) || p.Sums[i] != n || (n == 0) != (p.Bars[i] == 0) || p.Hatch[i] != p.Bars[i] {
			t.Errorf("%s class %q: %d rows, drawn as %d bar(s) (%d hatched) of %d, labelled %q", p.Col, rc.Classes[i], n, p.Bars[i], p.Hatch[i], p.Sums[i], p.Shown[i])
		}
	}
	if len(p.Warn) != 1 || p.Warn[0] != "SYNTHETIC — not predictions" {
		t.Errorf("%s: synthetic marks %q", p.Col, p.Warn)
	}
	if len(p.Legend) != 1 || !strings.HasPrefix(p.Legend[0], "Synthetic stand-in (") || !strings.HasSuffix(p.Legend[0], "— not a prediction") {
		t.Errorf("%s: legend %q", p.Col, p.Legend)
	}
	if !strings.Contains(p.Caption, "per predicted range class") || !strings.Contains(p.Caption, "synthetic stand-ins, not predictions") ||
		!strings.Contains(p.Caption, "not an interval") {
		t.Errorf("%s: caption %q", p.Col, p.Caption)
	}
	if len(p.Outside) > 0 {
		t.Errorf("%s: texts cut off at the plot's edge: %q", p.Col, p.Outside)
	}
}

// submitExperimental uploads csv for kcat and Km by method K with the
// experimental look-up on, and returns the job id.
func (s *stack) submitExperimental(t *testing.T, csv string) string {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csv))
	for k, v := range map[string]string{"targets": `["kcat","Km"]`, "methods": `{"kcat":"K","Km":"K"}`, "useExperimental": "true"} {
		_ = mw.WriteField(k, v)
	}
	_ = mw.Close()
	var sub struct {
		JobID string `json:"jobId"`
		Error string `json:"error"`
	}
	if code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &sub); code != 201 {
		t.Fatalf("submit: %d %s", code, sub.Error)
	}
	return sub.JobID
}

// TestBrowserRangeClasses opens results of method K (range classes of kcat
// and Km, the synthetic stack) in a real headless Chromium. A 300-row job
// with one more row whose kcat is measured (the experimental look-up):
// the kcat range column shows each row's class text as the API gives it,
// its midpoint and experimental columns beside it (Km's experimental
// column, blank on every row, folded into the note above the table), the
// column note in its header; sorting by the range column orders the rows
// by midpoint both ways, the measured row (no class) last. Each range
// column's plot is the count of rows per class: one bar per class in
// class order, its count the API's, x labels the class texts, synthetic
// hatched and marked, and no log histogram of the range column. A 2-row
// job with a two-substrate Km: the per-substrate classes as lines in the
// table, every class in the plot with most at 0. Screenshots go to
// $KINFLOW_E2E_SCREENSHOTS.
func TestBrowserRangeClasses(t *testing.T) {
	b := newBrowser(t)
	dir := screenshotDir(t)
	s := newStack(t, nil, nil)
	const step = 60 * time.Second
	const kcatCol, kmCol = "Predicted kcat range: kcat (1/s)", "Predicted KM range: kM (M)"

	// One row's kcat is measured: its range and midpoint stay blank, the
	// value goes to the experimental column.
	measured := strings.Repeat("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", 3)
	const inchi = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"
	p := filepath.Join(s.media, "experimental", "kcat_experimental.csv")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("substrate_inchi,protein_sequence,protein_ID,kcat_value,kcat_SD,from_brenda,from_sabio,from_uniprot\n\""+
		inchi+"\","+measured+",P00330,42.0,1.5,1,0,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const rows = 301
	in := largeCSV(rows-1) + "enzyme-measured," + measured + ",\"" + inchi + "\"\n"

	b.run(t, "open page", step,
		chromedp.Navigate(s.base+"/"),
		waitJS(`document.querySelectorAll("#method-kcat option").length > 0`),
	)
	eval[bool](t, b, `(localStorage.setItem("kinflow.apiKey", `+jsString(s.key)+`), true)`)
	job := s.submitExperimental(t, in)
	b.run(t, "open job", step, chromedp.Navigate(s.base+"/#job="+job), chromedp.Reload())
	b.run(t, "result", 5*time.Minute, waitJS(`(document.getElementById("result-count").textContent === "`+strconv.Itoa(rows)+` row(s)" &&
		document.querySelectorAll("#result-plots figure.plot").length > 0) || !document.getElementById("job-error").hidden`))
	if e := eval[string](t, b, jobErrorJS); e != "" {
		t.Fatalf("the page shows an error instead of the result: %q", e)
	}

	// The API's own answer.
	res := s.rangeResult(t, job, rows)
	rc, ok := res.RangeClasses[kcatCol]
	if !ok || len(rc.Classes) != 8 || rc.MidpointColumn != "Derived kcat range midpoint (1/s)" || rc.ExperimentalColumn != "Experimental kcat (1/s)" || !res.Synthetic {
		t.Fatalf("rangeClasses %+v (synthetic %v)", res.RangeClasses, res.Synthetic)
	}
	rcKm := res.RangeClasses[kmCol]
	midOf := func(n int) (float64, bool) { v, ok := res.Data[n-1][rc.MidpointColumn].(float64); return v, ok }
	if _, ok := midOf(rows); ok || res.Data[rows-1][kcatCol] != nil || res.Data[rows-1][rc.ExperimentalColumn] != 42.0 {
		t.Fatalf("the measured row: %v", res.Data[rows-1])
	}

	// The table: the range column with its midpoint and experimental
	// columns beside it, its note in its header; Km's experimental column,
	// blank on every row, is in the note above the table.
	heads := eval[[]string](t, b, `[...document.querySelectorAll("#result-table thead th")].map((th) => th.dataset.col || th.textContent)`)
	if k := slices.Index(heads, kcatCol); k < 0 || k+2 >= len(heads) || heads[k+1] != rc.MidpointColumn || heads[k+2] != rc.ExperimentalColumn {
		t.Errorf("kcat's midpoint and experimental columns are not beside its range: %q", heads)
	}
	if slices.Contains(heads, rcKm.ExperimentalColumn) || !strings.Contains(eval[string](t, b, `document.getElementById("result-folded").textContent`), rcKm.ExperimentalColumn) {
		t.Errorf("Km's experimental column, blank on every row, is not folded: %q", heads)
	}
	note := eval[string](t, b, `document.querySelector('#result-table th[data-col="`+kcatCol+`"]').title`)
	if note == "" || note != res.ColumnNotes[kcatCol] || !strings.Contains(eval[string](t, b, `document.getElementById("result-notes").textContent`), note) {
		t.Errorf("the range column's note %q; the API's %q", note, res.ColumnNotes[kcatCol])
	}

	type shownRow struct {
		N     int    `json:"n"`
		Range string `json:"range"`
		Mid   string `json:"mid"`
		Class string `json:"class"`
	}
	readRows := `(() => {
	  const heads = [...document.querySelectorAll("#result-table thead th")].map((th) => th.dataset.col);
	  const r = heads.indexOf(` + jsString(kcatCol) + `), m = heads.indexOf(` + jsString(rc.MidpointColumn) + `);
	  return [...document.querySelectorAll("#result-table tbody tr")].map((tr) => ({
	    n: Number(tr.cells[0].textContent), range: tr.cells[r].textContent, mid: tr.cells[m].textContent, class: tr.cells[r].className }));
	})()`
	checkRows := func(what string, got []shownRow, want []int) {
		t.Helper()
		ns := make([]int, len(got))
		for i, g := range got {
			ns[i] = g.N
			row := res.Data[g.N-1]
			text, _ := row[kcatCol].(string)
			mid, hasMid := midOf(g.N)
			shownMid, err := strconv.ParseFloat(g.Mid, 64)
			if g.Range != text || (hasMid && (err != nil || shownMid != mid)) || (!hasMid && g.Mid != "") || (text != "" && !slices.Contains(rc.Classes, g.Range)) {
				t.Errorf("%s: row %d shows %q (midpoint %q); the API has %q (midpoint %v)", what, g.N, g.Range, g.Mid, text, row[rc.MidpointColumn])
			}
			if !strings.Contains(g.Class, "range") || strings.Contains(g.Class, "num") {
				t.Errorf("%s: row %d's range cell is drawn as %q, not as text", what, g.N, g.Class)
			}
		}
		if want != nil && !slices.Equal(ns, want) {
			t.Errorf("%s: rows in the order %v…, want %v…", what, ns[:min(12, len(ns))], want[:min(12, len(want))])
		}
	}
	first := eval[[]shownRow](t, b, readRows)
	if len(first) != 100 {
		t.Fatalf("first page: %d rows", len(first))
	}
	checkRows("first page", first, nil)
	b.shot(t, dir, "01-range-result")

	// Sorting by the range column orders by midpoint (ties by row number),
	// the row without a class last, either way.
	order := func(dir float64) []int {
		ns := make([]int, rows)
		for i := range ns {
			ns[i] = i + 1
		}
		sort.SliceStable(ns, func(i, j int) bool {
			x, okx := midOf(ns[i])
			y, oky := midOf(ns[j])
			if !okx || !oky {
				return okx && !oky
			}
			return dir*x < dir*y
		})
		return ns
	}
	eval[bool](t, b, `(() => { const s = document.getElementById("page-size"); s.value = "500"; s.dispatchEvent(new Event("change")); return true; })()`)
	sortBtn := chromedp.CSS(`#result-table th[data-col="` + kcatCol + `"] button`)
	aria := `document.querySelector('#result-table th[data-col="` + kcatCol + `"]').getAttribute("aria-sort")`
	b.run(t, "sort ascending", step, chromedp.Click(sortBtn), waitJS(aria+` === "ascending"`))
	up := eval[[]shownRow](t, b, readRows)
	if len(up) != rows {
		t.Fatalf("ascending: %d rows shown", len(up))
	}
	checkRows("ascending", up, order(1))
	// Not vacuous: the rows span several classes.
	if up[0].Range == up[rows-2].Range {
		t.Errorf("ascending: every row in class %q", up[0].Range)
	}
	b.shot(t, dir, "02-range-sorted")
	b.run(t, "sort descending", step, chromedp.Click(sortBtn), waitJS(aria+` === "descending"`))
	checkRows("descending", eval[[]shownRow](t, b, readRows), order(-1))

	// The plots: each range column's class counts, nothing else.
	plots := eval[[]classPlot](t, b, readPlots)
	kinds := make([]string, len(plots))
	for i, p := range plots {
		kinds[i] = p.Col + "/" + p.Kind
	}
	if strings.Join(kinds, ",") != kcatCol+"/range,"+kmCol+"/range" {
		t.Fatalf("plots %q: want the class counts of kcat's and Km's range columns only", kinds)
	}
	counts, blank := classCounts(t, res, kcatCol)
	if blank != 1 {
		t.Errorf("kcat: %d rows without a class, want the measured one", blank)
	}
	checkClassPlot(t, plots[0], rc, counts)
	if !strings.Contains(plots[0].Caption, "1 row(s) without a class (1 with an experimental value in Experimental kcat (1/s))") {
		t.Errorf("kcat caption %q does not count the measured row", plots[0].Caption)
	}
	kmCounts, _ := classCounts(t, res, kmCol)
	checkClassPlot(t, plots[1], rcKm, kmCounts)
	png := get(t, b, "plot screenshot", chromedp.Screenshot(chromedp.ID("result-plots")))
	writeShot(t, dir, "03-range-plots.png", png)

	// A 2-row job, one row with two substrates: Km's classes per
	// substrate as lines; every class in each plot, most at 0.
	small := s.submit("Protein Sequence,Substrates\nMKTAYIAKQRQISF,CCO;CCN\nMKTAYIAKQRQISFVKSHF,CCO\n", []string{"kcat", "Km"}, map[string]string{"kcat": "K", "Km": "K"})
	if st := s.waitDone(small, 2*time.Minute); st.Status != "Completed" {
		t.Fatalf("small job: %s %s", st.Status, st.Error)
	}
	b.run(t, "open the small job", step, chromedp.Navigate(s.base+"/#job="+small), chromedp.Reload(),
		waitJS(`document.getElementById("job-id").textContent === `+jsString(small)+` && document.getElementById("result-count").textContent === "2 row(s)" &&
			document.querySelectorAll("#result-plots figure.plot").length === 2`))
	sres := s.rangeResult(t, small, 2)
	list := rangeTexts(t, sres.Data[0][kmCol])
	if len(list) != 2 || list[0] == nil || list[1] == nil {
		t.Fatalf("the two-substrate row's Km range %v", sres.Data[0][kmCol])
	}
	cell := eval[string](t, b, `(() => { const heads = [...document.querySelectorAll("#result-table thead th")].map((th) => th.dataset.col);
		return document.querySelector("#result-table tbody tr").cells[heads.indexOf(`+jsString(kmCol)+`)].innerText; })()`)
	if want := fmt.Sprintf("substrate 1: %s\nsubstrate 2: %s", *list[0], *list[1]); cell != want {
		t.Errorf("the two-substrate row's Km range cell shows %q, want %q", cell, want)
	}
	plots = eval[[]classPlot](t, b, readPlots)
	for i, col := range []string{kcatCol, kmCol} {
		counts, _ := classCounts(t, sres, col)
		checkClassPlot(t, plots[i], sres.RangeClasses[col], counts)
		zeros := 0
		for _, n := range counts {
			if n == 0 {
				zeros++
			}
		}
		if want := len(counts) - 3; zeros < want {
			t.Errorf("%s: %d classes at 0 of %d; 2 rows (3 Km substrates) leave at least %d", col, zeros, len(counts), want)
		}
	}
	// Counts of one or two: whole-row ticks, each once.
	if problems := eval[[]string](t, b, plotAxisProblems); len(problems) > 0 {
		t.Errorf("plot axes of a 2-row result:\n%s", strings.Join(problems, "\n"))
	}
	png = get(t, b, "small plots", chromedp.Screenshot(chromedp.ID("result-plots")))
	writeShot(t, dir, "04-range-plots-zero-counts.png", png)
	b.shot(t, dir, "05-range-small-result")

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors (CSP violations, exceptions, console errors):\n%s", strings.Join(errs, "\n"))
	}
}
