// form.js: the methods (described from /methods/), the submit form, the
// validation report and the submit itself.
import { $, el, short, formWording } from "./dom.js";
import { api, APIError, notice } from "./api.js";

let catalogue = null;

// describeMethod writes what a scientist needs to choose method m for
// target t: what it predicts, the columns it reads, its limits, whether it
// gives an uncertainty, its model version and where to read more. The
// wording is the form's (the option names above), not the wire's.
function describeMethod(box, m, t) {
  box.replaceChildren();
  if (!m) return;
  const line = (label, text) => {
    const p = el("p", null, "method-fact");
    p.append(el("strong", label + ": "), document.createTextNode(text));
    box.append(p);
  };
  // A method reading Substrate also takes a ;-separated Substrates list,
  // and every method several candidate sequences (docs/api.md, "Substrate
  // lists, candidate sequences and per-target results").
  const cols = (m.requiredColumns || []).map((c) => (c === "Substrate" ? "Substrate (or a ;-separated Substrates list)" : c));
  const behavior = m.inputBehaviorByTarget ? m.inputBehaviorByTarget[t] : "";
  const targets = (m.supports || []).join(", ");
  if (targets) line("Predicts", targets);
  line("Needs columns", cols.join(", ") + (behavior === "native_multi" ? " (takes the substrate list whole)" : ""));
  line("Longest sequence", m.maxSeqLen ? m.maxSeqLen + " residues (longer ones follow the \u201cLong sequences\u201d option below)" : "no limit of its own");
  line("Uncertainty", m.uncertainty ? "yes: each value comes with its " + m.uncertainty.measure + " (" + (m.uncertainty.parts || []).join(", ") + ")" : "no");
  line("Model version", m.modelVersion || "–");
  if (m.moreInfo) line("About", m.moreInfo);
  const links = el("p", null, "method-fact");
  const a = el("a", "all methods' details (/methods/)");
  a.href = "/api/v1/methods/";
  links.append(a);
  if (m.citationUrl) {
    const c = el("a", m.publicationTitle || "publication");
    c.href = m.citationUrl; c.rel = "noopener noreferrer";
    links.append(document.createTextNode(" · "), c);
  }
  box.append(links);
}

/** isSynthetic tells whether /methods/ said the server is synthetic. */
export function isSynthetic() { return !!(catalogue && catalogue.synthetic); }

/** loadMethods reads /methods/ and builds a checkbox and a method choice,
 * with its description, per target; the start page's synthetic banner
 * follows the catalogue's `synthetic`. */
export async function loadMethods() {
  const box = $("targets");
  try {
    catalogue = await api("GET", "/api/v1/methods/", { auth: false });
  } catch (e) {
    $("methods-state").textContent = "Could not load the methods: " + e.message;
    return;
  }
  $("start-synthetic").hidden = !catalogue.synthetic;
  $("methods-state").remove();
  const lo = catalogue.longSequenceOptions || {};
  $("long-truncate-hint").textContent = lo.truncate ? "— " + lo.truncate : "";
  $("long-skip-hint").textContent = lo.skip ? "— " + lo.skip : "";
  (catalogue.predictionTypes || []).forEach((t, i) => {
    const list = (catalogue.methods && catalogue.methods[t]) || [];
    const slug = t.replace(/[^A-Za-z0-9]/g, "_");
    const wrap = el("div", null, "target");
    const c = el("div", null, "choice");
    const cb = el("input");
    cb.type = "checkbox"; cb.id = "target-" + slug; cb.value = t; cb.checked = i === 0;
    cb.dataset.target = t;
    const cl = el("label", "Predict " + t); cl.htmlFor = cb.id;
    c.append(cb, cl);
    const sl = el("label", "Method for " + t); sl.htmlFor = "method-" + slug;
    const sel = el("select"); sel.id = "method-" + slug; sel.disabled = !cb.checked;
    list.forEach((m) => {
      // The display name already names the method ("Method B"); the key
      // is added only when it says something more.
      const name = m.displayName && m.displayName !== "Method " + m.id ? m.displayName + " (" + m.id + ")" : (m.displayName || m.id);
      const o = el("option", name + (m.uncertainty ? " · with uncertainty" : ""));
      o.value = m.id;
      sel.append(o);
    });
    const hint = el("div", "", "hint method-desc"); hint.id = "method-hint-" + slug;
    sel.setAttribute("aria-describedby", hint.id);
    const describe = () => describeMethod(hint, list.find((x) => x.id === sel.value), t);
    sel.addEventListener("change", () => { describe(); resetConfirm(); });
    cb.addEventListener("change", () => { sel.disabled = !cb.checked; resetConfirm(); });
    describe();
    wrap.append(c, sl, sel, hint);
    box.append(wrap);
  });
}

function selection() {
  const targets = [], methods = {};
  document.querySelectorAll("#targets input[type=checkbox]").forEach((cb) => {
    if (!cb.checked) return;
    const t = cb.dataset.target;
    const sel = $("method-" + t.replace(/[^A-Za-z0-9]/g, "_"));
    targets.push(t);
    methods[t] = sel.value;
  });
  return { targets, methods };
}

function inputFile() {
  const f = $("csv-file").files[0];
  if (f) return f;
  const text = $("csv-text").value;
  if (text.trim() === "") return null;
  return new File([text], "pasted.csv", { type: "text/csv" });
}

function buildForm(withOptions) {
  const f = inputFile();
  if (!f) throw new APIError(400, "Choose a .csv file or paste CSV text first.");
  const fd = new FormData();
  fd.append("file", f, f.name.toLowerCase().endsWith(".csv") ? f.name : f.name + ".csv");
  if (!withOptions) {
    if ($("opt-runsim").checked) fd.append("runSimilarity", "true");
    // The report covers the methods chosen in the form, not every method,
    // so that it speaks of what the submit would run.
    const s = selection();
    if (s.targets.length) {
      fd.append("targets", JSON.stringify(s.targets));
      fd.append("methods", JSON.stringify(s.methods));
    }
  }
  if (withOptions) {
    const s = selection();
    if (s.targets.length === 0) throw new APIError(400, "Choose at least one target to predict.");
    fd.append("targets", JSON.stringify(s.targets));
    fd.append("methods", JSON.stringify(s.methods));
    fd.append("handleLongSequences", document.querySelector("input[name=long]:checked").value);
    fd.append("canonicalizeSubstrates", $("opt-canon").checked ? "true" : "false");
    fd.append("includeSimilarityColumns", $("opt-sim").checked ? "true" : "false");
    fd.append("disableGpuPrecompute", $("opt-nogpu").checked ? "true" : "false");
  }
  return fd;
}

let confirmed = false;
// submitKey is the Idempotency-Key of the submit being made: kept across
// retries of the same form (a lost answer, a restarting API), so that a
// retry gets the job already made instead of a second one; a change of
// the form or a success starts a new one.
let submitKey = "";
function newIdempotencyKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}
export function resetConfirm() {
  confirmed = false;
  submitKey = "";
  $("submit-btn").textContent = "Validate and submit";
}



// skippedLong is how many sequences "Skip long sequences" leaves out,
// from the report's lengthViolations: the most of any method it covers
// (the chosen ones, when it names them) or of the server's limit, each
// counted against its own limit. The report counts sequences, so a row
// is one unless it lists candidate sequences. 0 with "Truncate".
function skippedLong(rep) {
  if (document.querySelector("input[name=long]:checked").value !== "skip") return 0;
  const v = rep.lengthViolations || {}, lim = rep.lengthLimits || {};
  const keys = Array.isArray(rep.methods) ? rep.methods.concat("Server") : Object.keys(v);
  return Math.max(0, ...keys.map((k) => (lim[k] != null && Number(v[k])) || 0));
}

// lastReport is the report shown, drawn again when the long-sequence
// option changes (the report does not depend on it; its summary does).
let lastReport = null;

// showReport renders a /validate/ report and returns how many rows it
// flags, the rows "Skip long sequences" leaves out included. The
// sentences are the server's (`messages`), the same in every client; a
// server without them gets the older rendering.
function showReport(rep) {
  lastReport = rep;
  const out = $("validate-out");
  out.replaceChildren();
  if (!Array.isArray(rep.messages)) return showReportLegacy(out, rep);
  const rowMsgs = rep.messages.filter((m) => m.row != null);
  const other = rep.messages.filter((m) => m.row == null && m.column !== "similarity");
  const bad = new Set(rowMsgs.filter((m) => m.level === "error").map((m) => m.row)).size;
  const long = skippedLong(rep);
  // A long row with another problem would count twice: never more than
  // the rows read.
  const flagged = Math.min(rep.rowCount, bad + long);
  const parts = [];
  if (bad) parts.push(bad + " with problems");
  if (long) parts.push(long + " with a sequence longer than a method's limit, left out by \u201cSkip long sequences\u201d");
  const head = el("p", rep.rowCount + " row(s) read. " +
    (flagged ? flagged + " row(s) get no prediction (" + parts.join("; ") + ")." : "No row problems.") +
    (Array.isArray(rep.methods) ? " Checked for method(s) " + rep.methods.join(", ") + "." : ""),
    flagged ? "error" : "ok");
  head.id = "validate-summary";
  out.append(head);
  other.forEach((m) => out.append(el("p", formWording(m.text), "hint msg-" + m.level)));
  if (rowMsgs.length) {
    const wrap = el("div", null, "table-wrap");
    wrap.tabIndex = 0; wrap.setAttribute("role", "region"); wrap.setAttribute("aria-label", "Row problems");
    const t = el("table"); t.id = "validate-table";
    const tr = el("tr");
    ["Row", "Column", "Problem"].forEach((h) => { const th = el("th", h); th.scope = "col"; tr.append(th); });
    const thead = el("thead"); thead.append(tr);
    const tb = el("tbody");
    rowMsgs.forEach((m) => {
      const row = el("tr");
      // The sentence without its "Row R, Column: " lead, which the first
      // two cells show.
      const text = formWording(m.text.replace(/^Row \d+, [^:]+: /, ""));
      row.append(el("td", m.row, "num"), el("td", m.column), el("td", text, "text"));
      tb.append(row);
    });
    t.append(thead, tb); wrap.append(t); out.append(wrap);
  }
  showSimilarity(out, rep.similarity);
  return flagged;
}

function showReportLegacy(out, rep) {
  const rows = [];
  (rep.invalidProteins || []).forEach((p) => rows.push([p.row, "Protein Sequence", short(p.value), p.reason]));
  (rep.invalidSubstrates || []).forEach((s) => rows.push([s.row, "Substrate", short(s.value), s.reason]));
  rows.sort((a, b) => a[0] - b[0]);
  const head = el("p", rep.rowCount + " row(s) read. " +
    (rows.length ? rows.length + " row problem(s): those rows get no prediction." : "No row problems."), rows.length ? "error" : "ok");
  head.id = "validate-summary";
  out.append(head);
  rows.forEach((r) => out.append(el("p", "Row " + r[0] + ", " + r[1] + ": " + r[3] + " (" + r[2] + ")", "hint")));
  showSimilarity(out, rep.similarity);
  return rows.length;
}

// showSimilarity draws /validate/'s similarity object: per training set, a
// bar chart of the rows' max identity (0–100 %, one bar per percent) and
// the two averages. Plain SVG built with DOM calls; no inline styles.
function showSimilarity(out, sim) {
  if (!sim) return;
  const h = el("h3", "Similarity to the methods' training data");
  out.append(h);
  // No dataset for the request is information, not an error: some methods
  // have no training set to compare with.
  if (sim.error) { out.append(el("p", sim.error, sim.unavailable ? "hint msg-info" : "error")); return; }
  Object.keys(sim).forEach((label) => {
    const s = sim[label] || {};
    const hist = s.histogram_max || {};
    const counts = s.count_max || {};
    let top = 0;
    for (let i = 0; i <= 100; i++) top = Math.max(top, Number(hist[String(i)]) || 0);
    const fig = el("figure", null, "simchart");
    const NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 303 110");
    svg.setAttribute("role", "img");
    const desc = "Training set " + label + ": average max identity " + s.average_max_similarity +
      " %, average mean identity " + s.average_mean_similarity + " %.";
    svg.setAttribute("aria-label", desc);
    const title = document.createElementNS(NS, "title");
    title.textContent = desc;
    svg.append(title);
    for (let i = 0; i <= 100; i++) {
      const pct = Number(hist[String(i)]) || 0;
      if (pct <= 0 || top <= 0) continue;
      const hgt = Math.max(1, (pct / top) * 96);
      const r = document.createElementNS(NS, "rect");
      r.setAttribute("x", String(i * 3));
      r.setAttribute("y", String(100 - hgt));
      r.setAttribute("width", "2.5");
      r.setAttribute("height", String(hgt));
      r.setAttribute("class", "bar");
      const tip = document.createElementNS(NS, "title");
      tip.textContent = i + " % identity: " + (counts[String(i)] || 0) + " row(s), " + pct.toFixed(1) + " %";
      r.append(tip);
      svg.append(r);
    }
    const axis = document.createElementNS(NS, "line");
    axis.setAttribute("x1", "0"); axis.setAttribute("x2", "303");
    axis.setAttribute("y1", "100.5"); axis.setAttribute("y2", "100.5");
    axis.setAttribute("class", "axis");
    svg.append(axis);
    [[0, "start"], [50, "middle"], [100, "end"]].forEach(([v, anchor]) => {
      const tx = document.createElementNS(NS, "text");
      tx.setAttribute("x", String(v === 100 ? 303 : v * 3 + 1));
      tx.setAttribute("y", "109");
      tx.setAttribute("text-anchor", anchor);
      tx.setAttribute("class", "tick");
      tx.textContent = v + "%";
      svg.append(tx);
    });
    fig.append(svg, el("figcaption", desc + " Bars: share of rows by their best identity to this training set."));
    out.append(fig);
  });
}

async function validate() {
  notice("");
  const rep = await api("POST", "/api/v1/validate/", { body: buildForm(false) });
  return showReport(rep);
}

export async function onValidate() {
  try { await validate(); } catch (e) { showError(e); }
}

function showError(e) {
  lastReport = null;
  const out = $("validate-out");
  out.replaceChildren(el("p", e.message, "error"));
}

export async function onSubmit(ev) {
  ev.preventDefault();
  const btn = $("submit-btn");
  btn.disabled = true;
  try {
    const fd = buildForm(true); // fails early on a missing file or target
    if (!confirmed) {
      const problems = await validate();
      if (problems > 0) {
        confirmed = true;
        btn.textContent = "Submit anyway (" + problems + " row(s) flagged)";
        return;
      }
    }
    if (!submitKey) submitKey = newIdempotencyKey();
    let job;
    for (let attempt = 0; ; attempt++) {
      try {
        job = await api("POST", "/api/v1/submit/", { body: fd, idempotencyKey: submitKey });
        break;
      } catch (e) {
        // No answer or a server error: the same key again, after a pause.
        if (attempt >= 2 || (e.status !== 0 && e.status < 500)) throw e;
        await new Promise((r) => setTimeout(r, 1000 * (attempt + 1)));
      }
    }
    resetConfirm();
    location.hash = "#job=" + encodeURIComponent(job.jobId);
  } catch (e) {
    showError(e);
  } finally {
    btn.disabled = false;
  }
}


/** initForm wires the submit form and loads the methods. */
export function initForm() {
  $("validate-btn").addEventListener("click", onValidate);
  $("submit-form").addEventListener("submit", onSubmit);
  // Any change to the form (file, text, targets, methods, every option)
  // is a new request: it needs a new validation and a new Idempotency-Key.
  $("submit-form").addEventListener("change", resetConfirm);
  $("csv-text").addEventListener("input", resetConfirm);
  document.querySelectorAll("input[name=long]").forEach((r) => r.addEventListener("change", () => {
    if (lastReport) showReport(lastReport);
  }));
  return loadMethods();
}
