// plots.js: the result's distribution plots (one log-scale histogram per
// value column, stacked by source; for a range column, the count of rows
// per class) and, for a method that gives an uncertainty, its uncertainty
// panels. Plain SVG built with DOM calls; no inline styles. Synthetic
// sources are hatched and named so.
import { $, el, svgEl, fmtNum, fmtPow } from "./dom.js";
import { SYNTHETIC, rangeOf, targetOf, uncertaintyCol } from "./columns.js";

// countAxis is a count axis for counts up to max: whole-number ticks a
// round step apart (1, 2 or 5 times a power of ten, at most about five
// of them), each label once, and the axis top, the first tick at or above
// max (the height the bars are scaled to).
export function countAxis(max) {
  const raw = Math.max(1, max) / 4;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = Math.max(1, [1, 2, 5, 10].map((f) => f * mag).find((x) => x >= raw));
  const top = Math.max(step, Math.ceil(max / step) * step);
  const ticks = [];
  for (let v = 0; v <= top; v += step) ticks.push(v);
  return { top, ticks };
}

// stackedBars draws a histogram's frame and bars into svg: the hatch
// pattern for synthetic sources, the count grid with its ticks, the bars
// of each bin stacked by group (o.groups, o.counts[group][bin]) with a
// tooltip each, a hatch over every bar of a synthetic group, and the axes.
// o.gap is the room between bars (1 unless given); o.bin(b), when given,
// is the group each bin's bars are drawn into; o.ticks the counts the grid
// marks (o.top is the count at the top of the plot: countAxis gives both).
const stackedBars = (svg, o) => {
  const { L, T, pw, ph, nb, bw, top } = o;
  const gap = o.gap || 1;
  const defs = svgEl("defs");
  const pat = svgEl("pattern", { id: o.hatchID, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  pat.append(svgEl("rect", { width: 6, height: 6, fill: "#ffffff", "fill-opacity": 0 }), svgEl("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#3d2800", "stroke-width": 2 }));
  defs.append(pat);
  svg.append(defs);
  o.ticks.forEach((v) => {
    const y = T + ph - (v / top) * ph;
    svg.append(svgEl("line", { x1: L, x2: L + pw, y1: y, y2: y }, "grid"));
    const t = svgEl("text", { x: L - 4, y: y + 3, "text-anchor": "end" }, "tick count-tick");
    t.textContent = String(v);
    svg.append(t);
  });
  for (let b = 0; b < nb; b++) {
    let y = T + ph;
    const into = o.bin ? o.bin(b) : svg;
    o.groups.forEach((l, g) => {
      const n = o.counts[g][b];
      if (!n) return;
      const h = (n / top) * ph;
      y -= h;
      const attrs = { x: L + b * bw + gap / 2, y: y, width: Math.max(1, bw - gap), height: h, fill: o.fill(l, g) };
      const r = svgEl("rect", attrs, "bar");
      if (o.tagSource) r.dataset.source = l;
      const tip = svgEl("title");
      tip.textContent = o.tip(l, n, b);
      r.append(tip);
      into.append(r);
      if (o.hatched(l)) into.append(svgEl("rect", Object.assign({}, attrs, { fill: "url(#" + o.hatchID + ")" }), "hatch"));
    });
    if (into !== svg) svg.append(into);
  }
  svg.append(svgEl("polyline", { points: L + "," + T + " " + L + "," + (T + ph) + " " + (L + pw) + "," + (T + ph) }, "axis"));
};
// Source colours: distinct for colour-blind readers (Okabe–Ito), in the
// order sources are first met; synthetic sources are hatched as well.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000"];

// sourceLabel names a Source cell's origin for the plot legend.
function sourceLabel(src) {
  const s = String(src || "");
  if (SYNTHETIC.test(s)) return "Synthetic stand-in";
  const m = /^Prediction from (.+)$/.exec(s);
  if (m) return m[1];
  return s || "No source";
}

// sourceLegend is a plot's legend: one swatch per source in the plot's
// colours (a synthetic one hatched and named so) with n(label) beside it.
function sourceLegend(labels, n, hatchID) {
  const legend = el("ul", null, "legend");
  labels.forEach((l, g) => {
    const li = el("li");
    const sw = svgEl("svg", { viewBox: "0 0 14 14", "aria-hidden": "true" });
    sw.append(svgEl("rect", { width: 14, height: 14, fill: PALETTE[g % PALETTE.length] }));
    if (l === "Synthetic stand-in") {
      const p2 = svgEl("pattern", { id: hatchID + "-l" + g, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
      p2.append(svgEl("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#3d2800", "stroke-width": 2 }));
      sw.append(p2, svgEl("rect", { width: 14, height: 14, fill: "url(#" + hatchID + "-l" + g + ")" }));
    }
    li.append(sw, el("span", l + " (" + n(l) + ")" + (l === "Synthetic stand-in" ? " — not a prediction" : "")));
    legend.append(li);
  });
  return legend;
}

// plotValues collects one value column's positive numbers by source; a
// list cell (one value per substrate) counts each of its numbers.
/** countTitles writes a count plot's x label, its "count" y label and, for
 * synthetic values, the warning in its top right corner. */
function countTitles(svg, L, pw, H, xlabel, synthetic) {
  const xl = svgEl("text", { x: L + pw / 2, y: H - 4, "text-anchor": "middle" }, "label");
  xl.textContent = xlabel;
  svg.append(xl);
  const yl = svgEl("text", { x: L, y: 12 }, "label");
  yl.textContent = "count";
  svg.append(yl);
  if (synthetic) {
    const w = svgEl("text", { x: L + pw, y: 12, "text-anchor": "end" }, "warn");
    w.textContent = "SYNTHETIC — not predictions";
    svg.append(w);
  }
}

function plotValues(res, col, srcCol) {
  const groups = new Map();
  let blank = 0, nonPositive = 0;
  (res.data || []).forEach((row) => {
    let vals = [];
    const v = row[col];
    if (typeof v === "number") vals = [v];
    else if (typeof v === "string" && v[0] === "[") {
      try { const a = JSON.parse(v); if (Array.isArray(a)) vals = a.filter((x) => typeof x === "number"); } catch (_) { /* not a list */ }
    }
    if (!vals.length) { blank++; return; }
    const label = sourceLabel(row[srcCol]);
    vals.forEach((x) => {
      if (!(x > 0)) { nonPositive++; return; }
      if (!groups.has(label)) groups.set(label, []);
      groups.get(label).push(Math.log10(x));
    });
  });
  return { groups, blank, nonPositive };
}


// bars stacked by source; synthetic sources are hatched and named so.
/** renderPlots draws a histogram of log10(value) per value column, bars
 * stacked by source; a range column (a key of the result's `rangeClasses`)
 * gets its count of rows per class instead. */
export function renderPlots(res, cols, valueCols, synthetic) {
  const box = $("result-plots");
  box.replaceChildren();
  valueCols.forEach((col, k) => {
    const i = cols.indexOf(col);
    const srcCol = "Source " + targetOf(cols, i);
    const range = rangeOf(res.rangeClasses, col);
    if (range) {
      renderRangeCounts(box, res, col, srcCol, range, synthetic, k);
      return;
    }
    const { groups, blank, nonPositive } = plotValues(res, col, srcCol);
    const all = [].concat(...groups.values());
    const fig = el("figure", null, "plot");
    fig.dataset.col = col;
    if (!all.length) {
      fig.append(el("figcaption", col + ": no positive values to plot (" + blank + " row(s) without a value)."));
      box.append(fig);
      return;
    }
    let lo = Math.floor(Math.min(...all)), hi = Math.ceil(Math.max(...all));
    if (hi === lo) hi = lo + 1;
    const PER_DECADE = 4;
    const nb = (hi - lo) * PER_DECADE;
    const labels = [...groups.keys()];
    const counts = labels.map(() => new Array(nb).fill(0));
    labels.forEach((l, g) => groups.get(l).forEach((x) => {
      counts[g][Math.min(nb - 1, Math.floor((x - lo) * PER_DECADE))]++;
    }));
    const stack = new Array(nb).fill(0).map((_, b) => labels.reduce((s, _l, g) => s + counts[g][b], 0));
    const { top, ticks } = countAxis(Math.max(...stack));
    const W = 360, H = 190, L = 40, R = 20, T = 22, B = 34;
    const pw = W - L - R, ph = H - T - B, bw = pw / nb;
    const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
    const desc = col + ": distribution of " + all.length + " value(s) on a log scale, by source" +
      (synthetic ? "; synthetic stand-ins, not predictions" : "") + ".";
    svg.setAttribute("aria-label", desc);
    const title = svgEl("title"); title.textContent = desc; svg.append(title);
    const hatchID = "hatch-" + k;
    stackedBars(svg, {
      L, T, pw, ph, nb, bw, top, ticks, groups: labels, counts, hatchID, tagSource: true,
      fill: (l, g) => PALETTE[g % PALETTE.length],
      hatched: (l) => l === "Synthetic stand-in",
      tip: (l, n, b) => l + ": " + n + " value(s) from " + fmtNum(Math.pow(10, lo + b / PER_DECADE)) + " to " + fmtNum(Math.pow(10, lo + (b + 1) / PER_DECADE)),
    });
    for (let e = lo; e <= hi; e++) {
      const x = L + (e - lo) * PER_DECADE * bw;
      svg.append(svgEl("line", { x1: x, x2: x, y1: T + ph, y2: T + ph + 4 }, "axis"));
      const t = svgEl("text", { x: x, y: T + ph + 15, "text-anchor": "middle" }, "tick");
      t.textContent = fmtPow(e);
      svg.append(t);
    }
    countTitles(svg, L, pw, H, col + " (log scale)", synthetic);
    const legend = sourceLegend(labels, (l) => groups.get(l).length, hatchID);
    const notes = [];
    if (blank) notes.push(blank + " row(s) without a value");
    if (nonPositive) notes.push(nonPositive + " value(s) ≤ 0 not shown on the log scale");
    fig.append(svg, legend, el("figcaption", desc + (notes.length ? " " + notes.join("; ") + "." : "")));
    box.append(fig);
    const target = targetOf(cols, i);
    if (cols.includes(uncertaintyCol(target, "total"))) {
      renderUncertainty(box, res, col, target, srcCol, labels, synthetic, k);
    }
  });
}

function median(xs) {
  if (!xs.length) return NaN;
  const a = xs.slice().sort((x, y) => x - y), m = a.length >> 1;
  return a.length % 2 ? a[m] : (a[m - 1] + a[m]) / 2;
}

// uncertaintyRows pairs each row's positive scalar value with its total
// SD (log10 units), by source; rows without either are left out.
function uncertaintyRows(res, col, target, srcCol) {
  const tc = uncertaintyCol(target, "total"), ac = uncertaintyCol(target, "aleatoric"), ec = uncertaintyCol(target, "epistemic");
  const out = [], alea = [], epi = [];
  (res.data || []).forEach((row) => {
    const v = Number(row[col]), sd = row[tc] == null || row[tc] === "" ? NaN : Number(row[tc]);
    if (!(sd >= 0) || !(v > 0) || typeof row[col] === "string") return;
    out.push({ x: Math.log10(v), sd, label: sourceLabel(row[srcCol]) });
    if (row[ac] != null && row[ac] !== "" && Number(row[ac]) >= 0) alea.push(Number(row[ac]));
    if (row[ec] != null && row[ec] !== "" && Number(row[ec]) >= 0) epi.push(Number(row[ec]));
  });
  return { rows: out, alea, epi };
}

// renderUncertainty adds a target's uncertainty panels after its value
// plot: the distribution of the per-row total SD (log10 units, with its
// median as a fold factor), and each value's ±1 SD interval for an even
// sample of at most INTERVALS rows ranked by value (few enough that each
// interval stays a line of its own). Colours follow the
// value plot's sources; synthetic stand-ins are hatched or dashed and
// named so.
const INTERVALS = 80;
function renderUncertainty(box, res, col, target, srcCol, labels, synthetic, k) {
  const { rows, alea, epi } = uncertaintyRows(res, col, target, srcCol);
  const fig = el("figure", null, "plot uncertainty");
  fig.dataset.col = col;
  fig.dataset.kind = "uncertainty";
  if (!rows.length) {
    fig.append(el("figcaption", "Uncertainty of " + col + ": the method gives one, but no row has both a value and its uncertainty."));
    box.append(fig);
    return;
  }
  const colour = (l) => { const g = labels.indexOf(l); return PALETTE[(g < 0 ? labels.length : g) % PALETTE.length]; };
  const isSyn = (l) => l === "Synthetic stand-in";
  const sds = rows.map((r) => r.sd);
  const med = median(sds);
  const fold = (sd) => "×/÷ " + fmtNum(Math.pow(10, sd));
  const warn = (svg, x) => {
    if (!synthetic) return;
    const w = svgEl("text", { x: x, y: 12, "text-anchor": "end" }, "warn");
    w.textContent = "SYNTHETIC — not predictions";
    svg.append(w);
  };
  const W = 360, H = 190, L = 40, R = 20, T = 22, B = 34, pw = W - L - R, ph = H - T - B;
  // The SD histogram has a line of its own above its bars for the
  // median's label, under the axis titles: the label never lies on a bar.
  const MT = T + 14, MH = H + 14;

  // Panel 1: the distribution of the total SD.
  const hiSD = Math.max(0.1, Math.ceil(Math.max(...sds) * 10) / 10);
  const nb = 24, bw = pw / nb;
  const groups = [...new Set(rows.map((r) => r.label))];
  const counts = groups.map(() => new Array(nb).fill(0));
  rows.forEach((r) => { counts[groups.indexOf(r.label)][Math.min(nb - 1, Math.floor(r.sd / hiSD * nb))]++; });
  const { top, ticks } = countAxis(Math.max(...new Array(nb).fill(0).map((_, b) => groups.reduce((s, _g, g) => s + counts[g][b], 0))));
  const hist = svgEl("svg", { viewBox: "0 0 " + W + " " + MH, role: "img" }, "sd-hist");
  const hdesc = "Uncertainty of " + col + ": distribution of the total standard deviation of log10(value) over " + rows.length +
    " row(s), in log10 units; median " + fmtNum(med) + " (" + fold(med) + ")" + (synthetic ? "; synthetic stand-ins, not predictions" : "") + ".";
  hist.setAttribute("aria-label", hdesc);
  const ht = svgEl("title"); ht.textContent = hdesc; hist.append(ht);
  stackedBars(hist, {
    L, T: MT, pw, ph, nb, bw, top, ticks, groups, counts, hatchID: "hatch-u" + k,
    fill: (l) => colour(l),
    hatched: isSyn,
    tip: (l, n, b) => l + ": " + n + " row(s) with total SD " + fmtNum(b * hiSD / nb) + " to " + fmtNum((b + 1) * hiSD / nb) + " log10 units",
  });
  for (let j = 0; j <= 4; j++) {
    const x = L + (j / 4) * pw;
    hist.append(svgEl("line", { x1: x, x2: x, y1: MT + ph, y2: MT + ph + 4 }, "axis"));
    const t = svgEl("text", { x: x, y: MT + ph + 15, "text-anchor": "middle" }, "tick");
    t.textContent = fmtNum(j * hiSD / 4);
    hist.append(t);
  }
  const mx = L + Math.min(1, med / hiSD) * pw;
  hist.append(svgEl("line", { x1: mx, x2: mx, y1: MT - 12, y2: MT + ph }, "median"));
  // The median's label sits on its own line above the bars, right of the
  // median's line, or left of it when it would run past the plot (about
  // 6 px a character at 11 px).
  const mlabel = "median " + fmtNum(med) + " (" + fold(med) + ")";
  const mw = mlabel.length * 6;
  const right = mx + 3 + mw <= L + pw;
  const mt = svgEl("text", { x: right ? mx + 3 : Math.max(L + mw, mx - 3), y: MT - 3, "text-anchor": right ? "start" : "end" }, "label median-label");
  mt.textContent = mlabel;
  hist.append(mt);
  const hx = svgEl("text", { x: L + pw / 2, y: MH - 4, "text-anchor": "middle" }, "label");
  hx.textContent = "total SD of log10(" + target + "), log10 units";
  hist.append(hx);
  const hy = svgEl("text", { x: L, y: 12 }, "label");
  hy.textContent = "rows";
  hist.append(hy);
  warn(hist, L + pw);

  // Panel 2: ±1 SD intervals for an even sample of the rows ranked by value.
  const ranked = rows.slice().sort((a, b) => a.x - b.x);
  const m = Math.min(INTERVALS, ranked.length);
  const sample = [];
  for (let j = 0; j < m; j++) sample.push(ranked[m === 1 ? 0 : Math.round(j * (ranked.length - 1) / (m - 1))]);
  let lo = Math.floor(Math.min(...sample.map((r) => r.x - r.sd))), hi = Math.ceil(Math.max(...sample.map((r) => r.x + r.sd)));
  if (hi === lo) hi = lo + 1;
  const IT = 32, IH = 270, ip = IH - IT - B;
  const xs = (x) => L + ((x - lo) / (hi - lo)) * pw;
  const ivs = svgEl("svg", { viewBox: "0 0 " + W + " " + IH, role: "img" }, "intervals");
  const idesc = col + ": each value with its ±1 total SD interval (log scale) for " + m + " of " + rows.length +
    " row(s), evenly spaced by rank" + (synthetic ? "; synthetic stand-ins, not predictions" : "") + ".";
  ivs.setAttribute("aria-label", idesc);
  const it = svgEl("title"); it.textContent = idesc; ivs.append(it);
  for (let e = lo; e <= hi; e++) {
    const x = xs(e);
    ivs.append(svgEl("line", { x1: x, x2: x, y1: IT, y2: IT + ip }, "grid"));
    const t = svgEl("text", { x: x, y: IT + ip + 15, "text-anchor": "middle" }, "tick");
    t.textContent = fmtPow(e);
    ivs.append(t);
  }
  const step = ip / m;
  sample.forEach((r, j) => {
    const y = IT + ip - (j + 0.5) * step;
    const g = svgEl("g", null, "interval");
    const line = svgEl("line", { x1: xs(r.x - r.sd), x2: xs(r.x + r.sd), y1: y, y2: y, stroke: colour(r.label) }, isSyn(r.label) ? "band synthetic" : "band");
    const dot = svgEl("circle", { cx: xs(r.x), cy: y, r: Math.max(1, Math.min(2.2, step / 2)), fill: colour(r.label) }, "point");
    const tip = svgEl("title");
    tip.textContent = r.label + ": " + fmtNum(Math.pow(10, r.x)) + " (" + fold(r.sd) + ", total SD " + fmtNum(r.sd) + " log10 units): " +
      fmtNum(Math.pow(10, r.x - r.sd)) + " to " + fmtNum(Math.pow(10, r.x + r.sd));
    g.append(line, dot, tip);
    ivs.append(g);
  });
  ivs.append(svgEl("polyline", { points: L + "," + IT + " " + L + "," + (IT + ip) + " " + (L + pw) + "," + (IT + ip) }, "axis"));
  const ix = svgEl("text", { x: L + pw / 2, y: IH - 4, "text-anchor": "middle" }, "label");
  ix.textContent = col + " (log scale), ±1 total SD";
  ivs.append(ix);
  const iy = svgEl("text", { x: L, y: 26 }, "label");
  iy.textContent = m < rows.length ? "rows ranked by value (" + m + " of " + rows.length + ")" : "rows ranked by value";
  ivs.append(iy);
  warn(ivs, L + pw);

  const legend = el("ul", null, "legend");
  groups.forEach((l) => {
    const li = el("li");
    const sw = svgEl("svg", { viewBox: "0 0 14 14", "aria-hidden": "true" });
    sw.append(svgEl("line", { x1: 0, x2: 14, y1: 7, y2: 7, stroke: colour(l), "stroke-width": 3 }, isSyn(l) ? "band synthetic" : "band"));
    li.append(sw, el("span", l + (isSyn(l) ? " — a stand-in uncertainty, not a method's" : "")));
    legend.append(li);
  });
  const parts = [];
  if (alea.length) parts.push("aleatoric median " + fmtNum(median(alea)));
  if (epi.length) parts.push("epistemic median " + fmtNum(median(epi)));
  const cap = "Uncertainty of " + col + " (" + rows.length + " row(s) with one): the method's standard deviation of log10(value), in log10 units " +
    "(an SD of 0.3 is a factor of about 2 either way); total median " + fmtNum(med) + " (" + fold(med) + ")" +
    (parts.length ? ", " + parts.join(", ") : "") + "." + (synthetic ? " Synthetic stand-ins, not predictions." : "");
  fig.append(hist, ivs, legend, el("figcaption", cap));
  box.append(fig);
}

// rangeCounts counts one range column's cells per class, by source: a
// cell names its class by its text; a list cell (one class per substrate)
// counts each of its classes. Blank rows are counted apart, with those
// that hold an experimental value instead; a text that names no class of
// the column (never expected) is counted apart too, not drawn.
function rangeCounts(res, col, srcCol, r) {
  const groups = new Map();
  let blank = 0, experimental = 0, unknown = 0, total = 0;
  const count = (label, text) => {
    const c = r.classes.indexOf(text);
    if (c < 0) { unknown++; return; }
    if (!groups.has(label)) groups.set(label, new Array(r.classes.length).fill(0));
    groups.get(label)[c]++;
    total++;
  };
  (res.data || []).forEach((row) => {
    const v = row[col];
    let texts = [];
    if (typeof v === "string" && v[0] === "[") {
      try { const a = JSON.parse(v); if (Array.isArray(a)) texts = a.filter((x) => typeof x === "string"); } catch (_) { /* not a list */ }
    } else if (typeof v === "string" && v !== "") texts = [v];
    if (!texts.length) {
      blank++;
      const e = r.experimentalColumn ? row[r.experimentalColumn] : null;
      if (e != null && e !== "") experimental++;
      return;
    }
    const label = sourceLabel(row[srcCol]);
    texts.forEach((t) => count(label, t));
  });
  return { groups, blank, experimental, unknown, total };
}

// renderRangeCounts draws a range column's count per class: one bar per
// class in the classes' order (every class, a class no row has at 0),
// stacked by source in the value plots' colours, the class texts under
// the axis, each bar's count above it; synthetic stand-ins hatched and
// named so. A class is a range, not an interval around a value, so there
// is no log axis and no midpoint in it.
function renderRangeCounts(box, res, col, srcCol, r, synthetic, k) {
  const { groups, blank, experimental, unknown, total } = rangeCounts(res, col, srcCol, r);
  const fig = el("figure", null, "plot range");
  fig.dataset.col = col;
  fig.dataset.kind = "range";
  const nb = r.classes.length;
  const notes = [];
  if (blank) notes.push(blank + " row(s) without a class" + (experimental ? " (" + experimental + " with an experimental value in " + r.experimentalColumn + ")" : ""));
  if (unknown) notes.push(unknown + " cell(s) naming no class of this column, not counted");
  if (!total || !nb) {
    fig.append(el("figcaption", col + ": no range classes to count" + (notes.length ? " (" + notes.join("; ") + ")" : "") + "."));
    box.append(fig);
    return;
  }
  const labels = [...groups.keys()];
  const counts = labels.map((l) => groups.get(l));
  const perClass = r.classes.map((_, c) => labels.reduce((s, _l, g) => s + counts[g][c], 0));
  const { top, ticks } = countAxis(Math.max(...perClass));
  // The class texts stand under the axis turned by TURN degrees; their
  // room is estimated (about 5.6 px a character at 10 px), as the page
  // cannot measure text before the result is shown.
  const TURN = 50, CH = 5.6;
  const longest = Math.max(...r.classes.map((c) => c.length));
  const sin = Math.sin(TURN * Math.PI / 180), cos = Math.cos(TURN * Math.PI / 180);
  const W = 360, R = 12, T = 30, ph = 120;
  const L = Math.max(40, Math.ceil(r.classes[0].length * CH * cos - 12));
  const B = Math.ceil(12 + longest * CH * sin) + 22;
  const H = T + ph + B, pw = W - L - R, bw = pw / nb;
  const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img" }, "class-counts");
  const desc = col + ": count of " + total + " value(s) per predicted range class, " + nb + " classes in ascending order, by source" +
    (synthetic ? "; synthetic stand-ins, not predictions" : "") + ".";
  svg.setAttribute("aria-label", desc);
  const title = svgEl("title"); title.textContent = desc; svg.append(title);
  const hatchID = "hatch-r" + k;
  const bins = r.classes.map((c, b) => {
    const g = svgEl("g", null, "class-bar");
    g.dataset.class = c;
    g.dataset.count = String(perClass[b]);
    const tip = svgEl("title");
    tip.textContent = c + ": " + perClass[b] + " value(s)";
    g.append(tip);
    return g;
  });
  stackedBars(svg, {
    L, T, pw, ph, nb, bw, top, ticks, groups: labels, counts, hatchID, tagSource: true, gap: Math.min(8, bw / 4),
    fill: (l, g) => PALETTE[g % PALETTE.length],
    hatched: (l) => l === "Synthetic stand-in",
    tip: (l, n, b) => l + ": " + n + " value(s) in class " + r.classes[b],
    bin: (b) => bins[b],
  });
  r.classes.forEach((c, b) => {
    const x = L + (b + 0.5) * bw;
    const n = svgEl("text", { x: x, y: T + ph - (perClass[b] / top) * ph - 3, "text-anchor": "middle" }, "tick count");
    n.textContent = String(perClass[b]);
    bins[b].append(n);
    svg.append(svgEl("line", { x1: x, x2: x, y1: T + ph, y2: T + ph + 4 }, "axis"));
    const y = T + ph + 12;
    const t = svgEl("text", { x: x, y: y, "text-anchor": "end", transform: "rotate(-" + TURN + " " + x + " " + y + ")" }, "tick class-label");
    t.textContent = c;
    svg.append(t);
  });
  countTitles(svg, L, pw, H, col + " (class)", synthetic);
  const legend = sourceLegend(labels, (l) => groups.get(l).reduce((s, n) => s + n, 0), hatchID);
  fig.append(svg, legend, el("figcaption", desc + " A class is a predicted range, not an interval around a value." +
    (notes.length ? " " + notes.join("; ") + "." : "")));
  box.append(fig);
}
