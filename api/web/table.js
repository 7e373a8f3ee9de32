// table.js: the result as a sortable, paged table that leads with each
// row's identity (the enzyme and the substrate), then each value with its
// uncertainty beside it (a range class with its midpoint); what is the
// same on every row is said once above the table instead of in a column.
import { $, el, setText } from "./dom.js";
import { SYNTHETIC, displayColumns, rangeOf } from "./columns.js";
import { renderPlots } from "./plots.js";

// A cell longer than SHORTEN_AT without spaces (a sequence, a SMILES) is
// shown shortened; a click shows it whole, in a box that wraps.
const SHORTEN_AT = 24;

/** table is the state of the result table (exported for the page's wiring). */
export const table = { res: null, cols: [], pinned: 0, order: [], sortCol: null, sortDir: 1, page: 0, size: 100, notes: {}, rows: [], ranges: {} };

// arrayCell turns a result cell holding a JSON array (a Km or kcat/Km list
// per substrate, an Extra Info list of substrates or candidate sequences;
// docs/api.md, "Substrate lists, candidate sequences and per-target
// results") into readable lines; null when v is not one.
function arrayCell(v) {
  if (typeof v !== "string" || v[0] !== "[") return null;
  let a;
  try { a = JSON.parse(v); } catch (e) { return null; }
  if (!Array.isArray(a)) return null;
  if (a.length === 0) return "(none)";
  const num = (x) => (x == null ? "no value" : String(x));
  if (a.every((x) => x == null || typeof x === "number")) {
    return a.map((x, i) => "substrate " + (i + 1) + ": " + num(x)).join("\n");
  }
  const line = (it, lead) => {
    const what = it.error ? it.error : num(it.prediction);
    return lead + ": " + what + (it.selected ? "  (selected)" : "");
  };
  const lines = [];
  a.forEach((it) => {
    if (!it || typeof it !== "object") return;
    if (it.sequenceIndex != null) {
      const seq = String(it.sequence || "");
      const lead = "sequence " + it.sequenceIndex + " (" + (seq.length > 12 ? seq.slice(0, 12) + "…" : seq) + ")";
      if (Array.isArray(it.substrates)) {
        lines.push(lead + ":");
        it.substrates.forEach((s) => lines.push(line(s, "  substrate " + s.substrateIndex + " " + s.substrate)));
      } else {
        lines.push(line(it, lead));
      }
    } else if (it.substrateIndex != null) {
      lines.push(line(it, "substrate " + it.substrateIndex + " " + it.substrate));
    }
  });
  return lines.join("\n");
}

// rangeCell turns a range column's cell into its text: the class's text
// as the server wrote it, or for a per-substrate list (a JSON list of
// class texts or null) one line per substrate. Never read as a number.
function rangeCell(v) {
  if (typeof v === "string" && v[0] === "[") {
    let a = null;
    try { a = JSON.parse(v); } catch (e) { a = null; }
    if (Array.isArray(a)) {
      if (a.length === 0) return "(none)";
      return a.map((x, i) => "substrate " + (i + 1) + ": " + (x == null ? "no class" : String(x))).join("\n");
    }
  }
  return v == null ? "" : String(v);
}

// firstNumber is a number cell's value, or the first number of a list
// cell (a per-substrate list, JSON text); null when there is none.
function firstNumber(v) {
  if (typeof v === "number") return Number.isFinite(v) ? v : null;
  if (typeof v !== "string" || v === "") return null;
  if (v[0] !== "[") { const x = Number(v); return Number.isFinite(x) ? x : null; }
  let a;
  try { a = JSON.parse(v); } catch (e) { return null; }
  const x = Array.isArray(a) ? a.find((y) => typeof y === "number") : undefined;
  return x === undefined ? null : x;
}

// rangeSortKey is what a range column sorts by: the row's midpoint (the
// midpoint column, a number column; a list cell by its first substrate's),
// else the midpoint of the class the cell names; null for a blank.
function rangeSortKey(row, c, r) {
  const m = firstNumber(row[r.midpointColumn]);
  if (m !== null) return m;
  let text = row[c];
  if (typeof text === "string" && text[0] === "[") {
    try { const a = JSON.parse(text); text = Array.isArray(a) ? a.find((x) => x != null) : null; } catch (e) { text = null; }
  }
  const i = r.classes.indexOf(text);
  return i >= 0 && Array.isArray(r.midpoints) && typeof r.midpoints[i] === "number" ? r.midpoints[i] : null;
}

function sortKey(v) {
  if (v == null || v === "") return null;
  return v;
}

function compareCells(a, b) {
  const x = sortKey(a), y = sortKey(b);
  if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1; // blanks last either way
  if (typeof x === "number" && typeof y === "number") return x - y;
  return String(x).localeCompare(String(y), undefined, { numeric: true });
}

// renderFolded writes the note above the table: the columns that are not
// shown because they say the same on every row, with what they say.
function renderFolded(folded) {
  const box = $("result-folded");
  box.replaceChildren();
  const same = Object.keys(folded).filter((c) => folded[c] !== "");
  const empty = Object.keys(folded).filter((c) => folded[c] === "");
  if (same.length) {
    box.append(el("p", "The same on every row:", "folded-head"));
    const ul = el("ul");
    same.forEach((c) => {
      const li = el("li");
      li.dataset.col = c;
      li.append(el("strong", c + ": "), document.createTextNode(folded[c]));
      ul.append(li);
    });
    box.append(ul);
  }
  if (empty.length) {
    const why = [...new Set(empty.map((c) => table.notes[c]).filter(Boolean))].join(" ");
    const p = el("p", null, "folded-empty");
    p.dataset.cols = empty.join("|");
    p.append(el("strong", "Blank on every row: "), document.createTextNode(empty.join(", ") + "." + (why ? " " + why : "")));
    box.append(p);
  }
  box.append(el("p", "These columns are in the CSV and JSON downloads as usual.", "hint"));
  box.hidden = !(same.length || empty.length);
}

/** renderResult shows a /result/?format=json answer: the table, its notes and the plots. */
export function renderResult(res) {
  table.res = res;
  table.cols = res.columns || [];
  const data = res.data || [];
  table.ranges = res.rangeClasses && typeof res.rangeClasses === "object" ? res.rangeClasses : {};
  const d = displayColumns(table.cols, data, table.ranges);
  table.order = d.order;
  table.pinned = d.pinned;
  table.values = d.values;
  table.enzyme = d.enzyme;
  table.sequence = d.sequence;
  table.notes = res.columnNotes || {};
  table.rows = data.map((row, i) => ({ n: i + 1, row }));
  table.sortCol = null; table.sortDir = 1; table.page = 0;
  table.size = Number($("page-size").value) || 100;
  const synthetic = res.synthetic === true || table.rows.some(({ row }) =>
    table.cols.some((c) => /^Source /.test(c) && typeof row[c] === "string" && SYNTHETIC.test(row[c])));
  $("synthetic-banner").hidden = !synthetic;
  setText("result-count", (res.rowCount || 0) + " row(s)");
  // Column notes of folded columns are said in the fold note.
  const noteText = [...new Set(Object.keys(table.notes).filter((c) => !(c in d.folded)).map((c) => table.notes[c]))].join(" ");
  $("result-notes").textContent = noteText;
  $("result-notes").hidden = !noteText;
  renderFolded(d.folded);
  renderHead();
  renderPage();
  // The plots' drawing time is measured ("kinflow-plots"): the browser
  // test holds it to a bound for a 10,000-row result.
  const t0 = performance.now();
  renderPlots(res, table.cols, d.values, synthetic);
  performance.measure("kinflow-plots", { start: t0 });
}

function renderHead() {
  const hr = el("tr");
  table.order.forEach((c, i) => {
    const th = el("th");
    th.scope = "col";
    if (i < table.pinned) th.classList.add("pin");
    if (c === "#") { th.textContent = "#"; th.title = "Row number in the result"; hr.append(th); return; }
    const b = el("button", null, "sort");
    b.type = "button";
    b.append(el("span", c), el("span", "↕", "arrow"));
    b.addEventListener("click", () => sortBy(c));
    th.append(b);
    th.dataset.col = c;
    th.setAttribute("aria-sort", "none");
    if (table.notes[c]) { th.title = table.notes[c]; th.classList.add("note"); }
    if (c === table.enzyme && c !== table.sequence) th.title = "The enzyme: the input's " + c + " column";
    hr.append(th);
  });
  $("result-table").tHead.replaceChildren(hr);
}

function sortBy(c) {
  if (table.sortCol === c) table.sortDir = -table.sortDir;
  else { table.sortCol = c; table.sortDir = 1; }
  const dir = table.sortDir;
  // A range column sorts by its rows' midpoints, not by its texts (each
  // row's worked out once, not at every comparison).
  const r = rangeOf(table.ranges, c);
  const keys = r ? new Map(table.rows.map((it) => [it.n, rangeSortKey(it.row, c, r)])) : null;
  const key = keys ? (it) => keys.get(it.n) : (it) => it.row[c];
  table.rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const blankX = x == null || x === "", blankY = y == null || y === "";
    if (blankX || blankY) return blankX === blankY ? a.n - b.n : blankX ? 1 : -1;
    return dir * compareCells(x, y) || a.n - b.n;
  });
  $("result-table").tHead.querySelectorAll("th[data-col]").forEach((th) => {
    const on = th.dataset.col === c;
    th.setAttribute("aria-sort", on ? (dir > 0 ? "ascending" : "descending") : "none");
    th.querySelector(".arrow").textContent = on ? (dir > 0 ? "↑" : "↓") : "↕";
  });
  table.page = 0;
  renderPage();
}

/** pageCount is the number of pages at the current page size. */
export function pageCount() { return Math.max(1, Math.ceil(table.rows.length / table.size)); }

/** goPage shows page p (0-based, clamped). */
export function goPage(p) {
  table.page = Math.min(Math.max(0, p), pageCount() - 1);
  renderPage();
}

// cellNode renders one cell: a range column's class as its text, array
// cells as lines, long cells shortened behind a button that shows the
// whole text in a wrapping box.
function cellNode(v, c) {
  if (rangeOf(table.ranges, c)) {
    const text = rangeCell(v);
    const td = el("td", text, text.includes("\n") ? "cells range" : "range");
    if (typeof v === "string" && v[0] === "[") td.title = v;
    return td;
  }
  const arr = arrayCell(v);
  if (arr != null) { const td = el("td", arr, "cells"); td.title = v; return td; }
  if (typeof v === "number") return el("td", v, "num");
  const text = v == null ? "" : String(v);
  if (text.length > SHORTEN_AT && !/\s/.test(text)) {
    const td = el("td", null, "seqcell");
    const b = el("button", text.slice(0, 10) + "…" + text.slice(-6), "seq");
    b.type = "button";
    b.setAttribute("aria-expanded", "false");
    b.setAttribute("aria-label", c + ": " + text.length + " characters, shortened; show all");
    b.title = text.length + " characters: click to show all";
    b.addEventListener("click", () => {
      const open = b.getAttribute("aria-expanded") !== "true";
      b.setAttribute("aria-expanded", String(open));
      b.textContent = open ? text : text.slice(0, 10) + "…" + text.slice(-6);
      b.setAttribute("aria-label", c + ": " + text.length + " characters" + (open ? "; shorten" : ", shortened; show all"));
      td.classList.toggle("open", open);
      pinColumns();
    });
    td.append(b);
    return td;
  }
  const td = el("td", text, text.length > 20 ? "text" : "");
  if (text.length > 20) td.title = text; // one line in the table, whole in the tooltip
  return td;
}

function renderPage() {
  const start = table.page * table.size;
  const slice = table.rows.slice(start, start + table.size);
  const frag = document.createDocumentFragment();
  slice.forEach(({ n, row }) => {
    const tr = el("tr");
    table.order.forEach((c, i) => {
      const td = c === "#" ? el("td", n, "rownum") : cellNode(row[c], c);
      if (i < table.pinned) td.classList.add("pin");
      tr.append(td);
    });
    frag.append(tr);
  });
  $("result-table").tBodies[0].replaceChildren(frag);
  const total = table.rows.length;
  setText("result-pageinfo", total ? "Rows " + (start + 1) + "–" + (start + slice.length) + " of " + total +
    " · page " + (table.page + 1) + " of " + pageCount() : "No rows");
  $("page-first").disabled = $("page-prev").disabled = table.page === 0;
  $("page-next").disabled = $("page-last").disabled = table.page >= pageCount() - 1;
  pinColumns();
}

// pinColumns keeps the row number and the value columns in view when the
// table scrolls sideways: each pinned cell sticks at the summed width of
// the pinned cells before it (set through the CSSOM, which the page's
// CSP allows, unlike style attributes).
function pinColumns() {
  const head = $("result-table").tHead.rows[0];
  if (!head) return;
  let left = 0;
  const lefts = [];
  for (let i = 0; i < table.pinned && i < head.cells.length; i++) {
    lefts.push(left);
    left += head.cells[i].getBoundingClientRect().width;
  }
  const apply = (row) => { for (let i = 0; i < lefts.length; i++) if (row.cells[i]) row.cells[i].style.left = lefts[i] + "px"; };
  apply(head);
  for (const row of $("result-table").tBodies[0].rows) apply(row);
}

/** initTable wires the pager. */
export function initTable() {
  $("page-first").addEventListener("click", () => goPage(0));
  $("page-prev").addEventListener("click", () => goPage(table.page - 1));
  $("page-next").addEventListener("click", () => goPage(table.page + 1));
  $("page-last").addEventListener("click", () => goPage(pageCount() - 1));
  $("page-size").addEventListener("change", () => {
    const first = table.page * table.size;
    table.size = Number($("page-size").value) || 100;
    goPage(Math.floor(first / table.size));
  });
}
