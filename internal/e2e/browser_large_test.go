package e2e

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// largeCSV is a 10,000-row input: 200 distinct sequences of 60 to 400
// residues (drawn from a fixed seed), three substrates and a Name column.
func largeCSV(rows int) string {
	r := mrand.New(mrand.NewPCG(28, 10000))
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	seqs := make([]string, 200)
	for i := range seqs {
		b := make([]byte, 60+r.IntN(341))
		for k := range b {
			b[k] = aa[r.IntN(len(aa))]
		}
		seqs[i] = string(b)
	}
	subs := []string{"CCO", "CC(=O)O", "OC1=CC=CC=C1"}
	var sb strings.Builder
	sb.WriteString("Name,Protein Sequence,Substrate\n")
	for i := range rows {
		fmt.Fprintf(&sb, "enzyme-%05d,%s,%s\n", i+1, seqs[r.IntN(len(seqs))], subs[r.IntN(len(subs))])
	}
	return sb.String()
}

// tableView is the result table as the page shows it.
type tableView struct {
	Rows     int      `json:"rows"`
	First    string   `json:"first"`
	PageInfo string   `json:"pageInfo"`
	Values   []string `json:"values"`
	NextOff  bool     `json:"nextOff"`
	PrevOff  bool     `json:"prevOff"`
	Sort     string   `json:"sort"`
}

const readTable = `(() => {
  const rows = [...document.querySelectorAll("#result-table tbody tr")];
  const heads = [...document.querySelectorAll("#result-table thead th")];
  const kcat = heads.findIndex((th) => th.dataset.col === "kcat (1/s)");
  const sorted = heads.find((th) => th.getAttribute("aria-sort") && th.getAttribute("aria-sort") !== "none");
  return {
    rows: rows.length,
    first: rows.length ? rows[0].cells[0].textContent : "",
    pageInfo: document.getElementById("result-pageinfo").textContent,
    values: rows.map((r) => r.cells[kcat].textContent),
    nextOff: document.getElementById("page-next").disabled,
    prevOff: document.getElementById("page-prev").disabled,
    sort: sorted ? sorted.dataset.col + " " + sorted.getAttribute("aria-sort") : "",
  };
})()`

// TestBrowserLargeResult opens a 10,000-row result (two targets, synthetic
// backends, no similarity dataset) in a real headless Chromium: the table
// shows one page of rows, pages forward and back, sorts by a value column
// both ways and by a text column, keeps the row number and value columns in
// view when scrolled sideways, shortens sequences with the full text on a
// click, explains the blank similarity columns in their header tooltip,
// and draws one log-scale distribution per predicted value with the
// synthetic source marked, and no uncertainty panel. The page reports the job's progress from
// `overall` while it runs. Screenshots go to $KINFLOW_E2E_SCREENSHOTS.
func TestBrowserLargeResult(t *testing.T) {
	b := newBrowser(t)
	dir := screenshotDir(t)
	s := newStack(t, nil, nil)
	const rows = 10000
	csvText := largeCSV(rows)
	const step = 60 * time.Second

	b.run(t, "open page", step,
		chromedp.Navigate(s.base+"/"),
		waitJS(`document.querySelectorAll("#method-kcat option").length > 0`),
	)
	// The start page says the server is synthetic, and each
	// method is described: what it predicts, its limits, its uncertainty,
	// its model version, a link to /methods/.
	type startView struct {
		Banner  string   `json:"banner"`
		Shown   bool     `json:"shown"`
		Options []string `json:"options"`
		Desc    string   `json:"desc"`
		Link    string   `json:"link"`
	}
	sv := eval[startView](t, b, `(() => { const bn = document.getElementById("start-synthetic");
		return {banner: bn.textContent, shown: !bn.hidden && bn.getBoundingClientRect().height > 0,
			options: [...document.querySelectorAll("#method-Km option")].map((o) => o.textContent),
			desc: document.getElementById("method-hint-kcat").textContent,
			link: (document.querySelector("#method-hint-kcat a") || {}).href || ""}; })()`)
	if !sv.Shown || !strings.Contains(strings.ToLower(sv.Banner), "synthetic") {
		t.Errorf("the start page does not say the server is synthetic: %+v", sv)
	}
	if !strings.Contains(sv.Desc, "Predicts") || !strings.Contains(sv.Desc, "Uncertainty") || !strings.Contains(sv.Desc, "Model version") ||
		!strings.HasSuffix(sv.Link, "/api/v1/methods/") || slices.ContainsFunc(sv.Options, func(o string) bool { return strings.Contains(o, " — ") }) ||
		!slices.ContainsFunc(sv.Options, func(o string) bool { return strings.Contains(o, "with uncertainty") }) {
		t.Errorf("methods not described: %+v", sv)
	}
	b.shot(t, dir, "00-start-synthetic")
	eval[bool](t, b, `(localStorage.setItem("kinflow.apiKey", `+jsString(s.key)+`), true)`)
	job := s.submit(csvText, []string{"kcat", "Km"}, map[string]string{"kcat": "B", "Km": "B"})
	b.run(t, "open job", step, chromedp.Navigate(s.base+"/#job="+job), chromedp.Reload())

	// Progress while it runs: the summary is overall.text, the bar its
	// percentage.
	type progressView struct {
		Summary string  `json:"summary"`
		Percent float64 `json:"percent"`
		Rows    string  `json:"rows"`
		Open    bool    `json:"open"`
	}
	const readProgress = `(() => ({summary: document.getElementById("job-summary").textContent,
		percent: document.getElementById("job-progress").value, rows: document.getElementById("job-rows").textContent,
		open: !document.getElementById("result-wrap").hidden}))()`
	var views []progressView
	shotTaken := false
	for deadline := time.Now().Add(8 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		v := eval[progressView](t, b, readProgress)
		if len(views) == 0 || v != views[len(views)-1] {
			views = append(views, v)
		}
		if !shotTaken && strings.Contains(v.Summary, "% · stage") {
			shotTaken = true
			b.shot(t, dir, "01-progress")
		}
		if v.Open {
			break
		}
		if e := eval[string](t, b, jobErrorJS); e != "" {
			t.Fatalf("the page shows an error instead of the result: %q; views %+v", e, views)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result after 8 min; views %+v (page errors %v)", views, b.pageErrors())
		}
	}
	for _, v := range views {
		t.Logf("progress view: %+v", v)
		if v.Summary != "Loading…" && v.Summary != "" && v.Rows != "10000" {
			t.Errorf("rows box %q, want 10000 (summary %q)", v.Rows, v.Summary)
		}
	}
	final := views[len(views)-1]
	if !strings.HasPrefix(final.Summary, "Completed in ") || !strings.Contains(final.Summary, "10000 rows, 2 stages") || final.Percent != 100 {
		t.Fatalf("final progress view %+v", final)
	}
	stages := eval[[]string](t, b, `[...document.querySelectorAll("#job-stages li")].map((li) => li.textContent)`)
	if len(stages) != 2 || !strings.Contains(stages[0], "10000 row(s)") || !strings.Contains(stages[1], "200 sequence(s), 200 embedded") {
		t.Errorf("the completed view does not summarise every stage: %q", stages)
	}

	// One page of 100 rows in the DOM.
	b.run(t, "result table", step, waitJS(`document.getElementById("result-count").textContent === "10000 row(s)"`))
	v := eval[tableView](t, b, readTable)
	if v.Rows != 100 || v.First != "1" || v.PageInfo != "Rows 1–100 of 10000 · page 1 of 100" || !v.PrevOff || v.NextOff {
		t.Fatalf("first page %+v", v)
	}
	b.shot(t, dir, "02-result-page")
	png := get(t, b, "table screenshot", chromedp.Screenshot(chromedp.CSS(".table-wrap.result")))
	writeShot(t, dir, "03-table.png", png)

	// The first view leads with identity: without any sideways
	// scrolling, every row of the page shows its enzyme label (the Name
	// column) and its substrate, then the values.
	type firstView struct {
		Order      []string `json:"order"`
		ScrollLeft float64  `json:"scrollLeft"`
		Hidden     []string `json:"hidden"`
		Names      []string `json:"names"`
		Subs       []string `json:"subs"`
		Folded     string   `json:"folded"`
	}
	fv := eval[firstView](t, b, `(() => {
		const wrap = document.querySelector(".table-wrap.result"), box = wrap.getBoundingClientRect();
		const heads = [...document.querySelectorAll("#result-table thead th")];
		const ni = heads.findIndex((th) => th.dataset.col === "Name"), si = heads.findIndex((th) => th.dataset.col === "Substrate");
		const hidden = [], names = [], subs = [];
		for (const r of document.querySelectorAll("#result-table tbody tr")) {
			for (const i of [ni, si]) {
				const c = r.cells[i], b = c && c.getBoundingClientRect();
				if (!b || b.left < box.left || b.right > box.left + wrap.clientWidth) hidden.push(r.cells[0].textContent + ":" + i);
			}
			names.push(r.cells[ni] ? r.cells[ni].textContent : ""); subs.push(r.cells[si] ? r.cells[si].textContent : "");
		}
		return {order: heads.map((th) => th.dataset.col || th.textContent), scrollLeft: wrap.scrollLeft, hidden, names, subs,
			folded: document.getElementById("result-folded").hidden ? "" : document.getElementById("result-folded").textContent};
	})()`)
	if len(fv.Order) < 5 || strings.Join(fv.Order[:5], "|") != "#|Name|Substrate|kcat (1/s)|KM (mM)" || fv.ScrollLeft != 0 || len(fv.Hidden) != 0 {
		t.Fatalf("first view: order %q, scrollLeft %v, identity cells out of view %v", fv.Order, fv.ScrollLeft, fv.Hidden)
	}
	for i, n := range fv.Names {
		if n != fmt.Sprintf("enzyme-%05d", i+1) || !slices.Contains([]string{"CCO", "CC(=O)O", "OC1=CC=CC=C1"}, fv.Subs[i]) {
			t.Fatalf("row %d shows enzyme %q, substrate %q", i+1, n, fv.Subs[i])
		}
	}
	// Blank similarity columns and Source cells that are the same on every
	// row are one note above the table, not columns.
	if slices.ContainsFunc(fv.Order, func(c string) bool { return strings.HasPrefix(c, "Source ") || strings.Contains(c, "similarity") }) ||
		!strings.Contains(fv.Folded, "Source kcat") || !strings.Contains(fv.Folded, "max similarity to B training data") {
		t.Fatalf("not folded: order %q, note %q", fv.Order, fv.Folded)
	}
	eval[bool](t, b, `(document.getElementById("result-folded").scrollIntoView({block: "start"}), true)`)
	png = get(t, b, "first view of the table", chromedp.CaptureScreenshot())
	writeShot(t, dir, "03b-first-view.png", png)

	// Paging: next, last, previous, page size.
	b.run(t, "next page", step, chromedp.Click(chromedp.ID("page-next")))
	if v := eval[tableView](t, b, readTable); v.First != "101" || v.Rows != 100 || v.PageInfo != "Rows 101–200 of 10000 · page 2 of 100" || v.PrevOff {
		t.Fatalf("page 2 %+v", v)
	}
	b.run(t, "last page", step, chromedp.Click(chromedp.ID("page-last")))
	if v := eval[tableView](t, b, readTable); v.First != "9901" || v.Rows != 100 || !v.NextOff || !strings.HasSuffix(v.PageInfo, "page 100 of 100") {
		t.Fatalf("last page %+v", v)
	}
	b.run(t, "previous page", step, chromedp.Click(chromedp.ID("page-prev")))
	if v := eval[tableView](t, b, readTable); v.First != "9801" {
		t.Fatalf("previous page %+v", v)
	}
	eval[bool](t, b, `(() => { const s = document.getElementById("page-size"); s.value = "500"; s.dispatchEvent(new Event("change")); return true; })()`)
	if v := eval[tableView](t, b, readTable); v.Rows != 500 || v.PageInfo != "Rows 9501–10000 of 10000 · page 20 of 20" {
		t.Fatalf("500 per page %+v", v)
	}

	// Sorting by the kcat column, against the API's own numbers.
	res := s.resultJSON(t, job, rows)
	var kcats []float64
	for _, r := range res.Data {
		if f, ok := r["kcat (1/s)"].(float64); ok {
			kcats = append(kcats, f)
		}
	}
	slices.Sort(kcats)
	if len(kcats) < rows/2 {
		t.Fatalf("only %d kcat values", len(kcats))
	}
	start := time.Now()
	b.run(t, "sort ascending", step, chromedp.Click(chromedp.CSS(`#result-table th[data-col="kcat (1/s)"] button`)))
	sortTook := time.Since(start)
	up := eval[tableView](t, b, readTable)
	if up.Sort != "kcat (1/s) ascending" || up.Values[0] != fmt.Sprint(kcats[0]) || !nonDecreasing(t, up.Values) || !strings.HasPrefix(up.PageInfo, "Rows 1–500 ") {
		t.Fatalf("ascending: sort %q, first %q (want %v), page %q", up.Sort, up.Values[0], kcats[0], up.PageInfo)
	}
	b.run(t, "sort descending", step, chromedp.Click(chromedp.CSS(`#result-table th[data-col="kcat (1/s)"] button`)))
	down := eval[tableView](t, b, readTable)
	if down.Sort != "kcat (1/s) descending" || down.Values[0] != fmt.Sprint(kcats[len(kcats)-1]) {
		t.Fatalf("descending: sort %q, first %q (want %v)", down.Sort, down.Values[0], kcats[len(kcats)-1])
	}
	t.Logf("sorting 10,000 rows by kcat and drawing 500 of them: %v (click to table, through CDP)", sortTook)
	b.run(t, "sort by name", step, chromedp.Click(chromedp.CSS(`#result-table th[data-col="Name"] button`)))
	names := eval[[]string](t, b, `(() => { const i = [...document.querySelectorAll("#result-table thead th")].findIndex((th) => th.dataset.col === "Name");
		return [...document.querySelectorAll("#result-table tbody tr")].slice(0, 3).map((r) => r.cells[i].textContent); })()`)
	if strings.Join(names, ",") != "enzyme-00001,enzyme-00002,enzyme-00003" {
		t.Fatalf("sorted by Name: %v", names)
	}
	eval[bool](t, b, `(() => { const s = document.getElementById("page-size"); s.value = "100"; s.dispatchEvent(new Event("change")); return true; })()`)

	// Identity columns kept in view when the table scrolls sideways (an
	// expanded sequence makes it wide enough to scroll).
	type pinView struct {
		Pinned   int     `json:"pinned"`
		Before   float64 `json:"before"`
		After    float64 `json:"after"`
		Scrolled float64 `json:"scrolled"`
		BoxW     float64 `json:"boxW"`
		BoxH     float64 `json:"boxH"`
	}
	// Sequences shortened; a click shows one whole, in a wide box that wraps.
	seq := eval[[]string](t, b, `(() => { const b = document.querySelector("#result-table tbody button.seq"); const short = b.textContent; b.click();
		return [short, b.textContent, b.getAttribute("aria-expanded")]; })()`)
	if !strings.Contains(seq[0], "…") || len(seq[0]) > 24 || len(seq[1]) < 60 || seq[2] != "true" || !strings.Contains(csvText, ","+seq[1]+",") {
		t.Fatalf("shortened sequence %q → %q (%s)", seq[0], seq[1], seq[2])
	}
	// On a narrower screen the table is wider than its box.
	b.run(t, "narrow", step, chromedp.EmulateViewport(760, 900))
	pin := eval[pinView](t, b, `(() => {
		const wrap = document.querySelector(".table-wrap.result");
		const open = document.querySelector("#result-table tbody button.seq[aria-expanded=true]").getBoundingClientRect();
		const cell = document.querySelector("#result-table tbody tr").cells[1];
		const before = cell.getBoundingClientRect().left - wrap.getBoundingClientRect().left;
		wrap.scrollLeft = 600;
		const after = cell.getBoundingClientRect().left - wrap.getBoundingClientRect().left;
		return {pinned: document.querySelectorAll("#result-table thead th.pin").length, before, after, scrolled: wrap.scrollLeft,
			boxW: open.width, boxH: open.height};
	})()`)
	if pin.Pinned != 3 || pin.Scrolled < 100 || pin.After != pin.Before {
		t.Fatalf("the Name column moved when the table scrolled by %v px: %v → %v (%d pinned)", pin.Scrolled, pin.Before, pin.After, pin.Pinned)
	}
	// Readable: wider than tall (a 400-residue sequence in a 36rem box is
	// a few lines, not a 370 px column).
	if pin.BoxW < 300 || pin.BoxH > 220 {
		t.Errorf("expanded sequence box %v × %v px", pin.BoxW, pin.BoxH)
	}
	png = get(t, b, "scrolled sideways", chromedp.Screenshot(chromedp.CSS(".table-wrap.result")))
	writeShot(t, dir, "04-scrolled-sideways.png", png)
	b.run(t, "wide again", step, chromedp.EmulateViewport(1280, 900))
	eval[bool](t, b, `(document.querySelector(".table-wrap.result").scrollLeft = 0, true)`)
	png = get(t, b, "expanded sequence", chromedp.Screenshot(chromedp.CSS(".table-wrap.result")))
	writeShot(t, dir, "04b-expanded.png", png)
	eval[bool](t, b, `(document.querySelector("#result-table tbody button.seq[aria-expanded=true]").click(), true)`)

	// The blank similarity columns say why, with the unit, in the note.
	tip := eval[string](t, b, `document.querySelector("#result-folded .folded-empty").textContent`)
	if !strings.Contains(tip, "% identity") || !strings.Contains(tip, "blank") {
		t.Fatalf("similarity note %q", tip)
	}

	// One distribution per predicted value, by source, synthetic marked.
	type plotView struct {
		Col    string   `json:"col"`
		Bars   int      `json:"bars"`
		Hatch  int      `json:"hatch"`
		Sum    int      `json:"sum"`
		Legend []string `json:"legend"`
		Warn   string   `json:"warn"`
		Ticks  []string `json:"ticks"`
	}
	plots := eval[[]plotView](t, b, `[...document.querySelectorAll("#result-plots figure.plot")].map((f) => ({
		col: f.dataset.col, bars: f.querySelectorAll("rect.bar").length, hatch: f.querySelectorAll("rect.hatch").length,
		sum: [...f.querySelectorAll("rect.bar title")].reduce((s, t) => s + parseInt(t.textContent.split(": ")[1], 10), 0),
		legend: [...f.querySelectorAll(".legend li")].map((li) => li.textContent),
		warn: (f.querySelector("text.warn") || {}).textContent || "",
		ticks: [...f.querySelectorAll("text.tick")].map((t) => t.textContent)}))`)
	if len(plots) != 2 || plots[0].Col != "kcat (1/s)" || plots[1].Col != "KM (mM)" {
		t.Fatalf("plots %+v", plots)
	}
	for _, p := range plots {
		if p.Bars < 3 || p.Hatch != p.Bars || p.Warn == "" || len(p.Legend) != 1 || !strings.HasPrefix(p.Legend[0], "Synthetic stand-in") {
			t.Errorf("plot %s: %+v", p.Col, p)
		}
	}
	// No uncertainty columns, no uncertainty panel (TestBrowserUncertaintyPlot
	// has one).
	if n := eval[int](t, b, `document.querySelectorAll("#result-plots figure.uncertainty, #result-plots svg.sd-hist, #result-plots svg.intervals").length`); n != 0 {
		t.Errorf("%d uncertainty panels in a result without uncertainty columns", n)
	}
	if plots[0].Sum != len(kcats) {
		t.Errorf("kcat plot counts %d values, the result has %d", plots[0].Sum, len(kcats))
	}
	png = get(t, b, "plot screenshot", chromedp.Screenshot(chromedp.ID("result-plots")))
	writeShot(t, dir, "05-plots.png", png)
	// Plot cards are their own size: none is much taller than its content.
	if slack := eval[float64](t, b, `Math.max(...[...document.querySelectorAll("#result-plots figure.plot")].map((f) =>
		f.getBoundingClientRect().height - [...f.children].reduce((s, c) => s + c.getBoundingClientRect().height, 0)))`); slack > 40 {
		t.Errorf("a plot card has %v px of empty space", slack)
	}

	// A job link opens the job: a fresh load of /#job=ID shows the job's
	// status in the first screen, without scrolling.
	other := s.submit("Protein Sequence,Substrate\nMKTAYIAKQRQISFVKSHFSRQ,CCO\n", []string{"kcat"}, map[string]string{"kcat": "B"})
	s.waitDone(other, 2*time.Minute)
	b.run(t, "job link", step, chromedp.Navigate("about:blank"), chromedp.Navigate(s.base+"/#job="+job),
		waitJS(`document.getElementById("job-summary").textContent.startsWith("Completed")`))
	type linkView struct {
		Top     float64 `json:"top"`
		Bottom  float64 `json:"bottom"`
		Height  float64 `json:"height"`
		ScrollY float64 `json:"scrollY"`
		Summary string  `json:"summary"`
		ETA     string  `json:"eta"`
		Stages  string  `json:"stages"`
	}
	lv := eval[linkView](t, b, `(() => { const r = document.getElementById("job-summary").getBoundingClientRect();
		const p = document.getElementById("job-progress").getBoundingClientRect();
		return {top: r.top, bottom: Math.max(r.bottom, p.bottom), height: innerHeight, scrollY: scrollY,
			summary: document.getElementById("job-summary").textContent, eta: document.getElementById("job-eta").textContent,
			stages: document.getElementById("job-stages").textContent}; })()`)
	if lv.Top < 0 || lv.Bottom > lv.Height || !strings.HasPrefix(lv.Summary, "Completed in ") {
		t.Fatalf("/#job=ID does not show the job's status in the first screen: %+v", lv)
	}
	// Details: a finished job has no "Time left: none", a stage names its
	// method once.
	if lv.ETA == "none" || strings.Contains(lv.Stages, "Method B (B)") {
		t.Errorf("job details: time left %q, stages %q", lv.ETA, lv.Stages)
	}
	png = get(t, b, "job link", chromedp.CaptureScreenshot())
	writeShot(t, dir, "06-job-link.png", png)

	// "Your jobs" lists this key's jobs, newest first, with status,
	// submission time, rows and a link.
	b.run(t, "jobs list", step, waitJS(`document.querySelectorAll("#jobs-table tbody tr").length >= 2`))
	type jobRow struct {
		ID   string `json:"id"`
		Text string `json:"text"`
		Href string `json:"href"`
	}
	jl := eval[[]jobRow](t, b, `[...document.querySelectorAll("#jobs-table tbody tr")].map((r) => ({id: r.dataset.job, text: r.textContent, href: r.querySelector("a").getAttribute("href")}))`)
	if len(jl) != 2 || jl[0].ID != other || jl[1].ID != job || jl[1].Href != "#job="+job ||
		!strings.Contains(jl[1].Text, "Completed") || !strings.Contains(jl[1].Text, "10000") || !strings.Contains(jl[0].Text, "Completed") {
		t.Fatalf("jobs list %+v, want %s then %s", jl, other, job)
	}
	png = get(t, b, "jobs list", chromedp.Screenshot(chromedp.ID("open-panel")))
	writeShot(t, dir, "07-jobs-list.png", png)
	// Its link opens the other job.
	b.run(t, "open from the list", step, chromedp.Click(chromedp.CSS(`#jobs-table a[href="#job=`+other+`"]`)),
		waitJS(`document.getElementById("job-id").textContent === `+jsString(other)+` && !document.getElementById("result-wrap").hidden`))

	if errs := b.pageErrors(); len(errs) > 0 {
		t.Fatalf("page errors (CSP violations, exceptions, console errors):\n%s", strings.Join(errs, "\n"))
	}
}

func nonDecreasing(t *testing.T, vals []string) bool {
	t.Helper()
	prev := -1.0
	for _, v := range vals {
		if v == "" {
			continue // blanks sort last
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); err != nil || f < prev {
			t.Logf("not sorted at %q after %v", v, prev)
			return false
		}
		prev = f
	}
	return true
}

func writeShot(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// resultJSON is job's result as JSON; it must have rows rows.
func (s *stack) resultJSON(t *testing.T, job string, rows int) (res struct {
	Columns []string         `json:"columns"`
	Data    []map[string]any `json:"data"`
}) {
	t.Helper()
	var body string
	if code := s.do("GET", "/api/v1/result/"+job+"/?format=json", nil, "", &body); code != 200 {
		t.Fatalf("result JSON: %d", code)
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || len(res.Data) != rows {
		t.Fatalf("result JSON: %v, %d rows", err, len(res.Data))
	}
	return res
}

// jobErrorJS reads the job's error box: "" while it is hidden. The page
// shows there what went wrong reading or drawing a result, so a test that
// waits for the result stops at once instead of at its deadline.
const jobErrorJS = `document.getElementById("job-error").hidden ? "" : document.getElementById("job-error").textContent`
