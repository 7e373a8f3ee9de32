// job.js: the job panel: opened by /#job=ID (at the top of the page, so
// that a job link shows its job without scrolling), its status drawn from
// `overall`, and the result once it is complete.
import { $, el, setText, clock, when, formWording } from "./dom.js";
import { api, storedKey } from "./api.js";
import { goToKeyPanel } from "./key.js";
import { watchStatus } from "./status.js";
import { renderResult } from "./table.js";

let stopWatch = null;
let currentJob = null;
let downloadURL = null;
// onFinal is called when a watched job reaches a final state (the jobs
// list refreshes).
let onFinal = () => {};

/** jobFromHash is the job id of a #job=ID address, else null. */
export function jobFromHash() {
  const m = /^#job=([A-Za-z0-9_-]+)$/.exec(location.hash);
  return m ? m[1] : null;
}

/** onHash opens the job the address names (or closes the panel); quiet
 * reopens it where it is, without moving the focus or the page. */
export function onHash(quiet) {
  const id = jobFromHash();
  if (stopWatch) { stopWatch(); stopWatch = null; }
  currentJob = id;
  const panel = $("job-panel");
  if (!id) { panel.hidden = true; return; }
  panel.hidden = false;
  $("job-id").textContent = id;
  $("job-summary").textContent = "Loading…";
  $("job-error").hidden = true;
  $("result-wrap").hidden = true;
  $("synthetic-banner").hidden = true;
  // The bar and the counts wait for the job's first status: before it,
  // they would say 0 % of a job not read yet.
  $("job-body").hidden = true;
  $("job-needkey").hidden = true;
  $("job-stages").replaceChildren();
  $("gpu-events").replaceChildren();
  $("gpu-wrap").hidden = true;
  if (quiet !== true) {
    // The panel leads the page; focusing its heading brings it into view
    // (and tells a screen reader where it is).
    $("job-h").focus();
    panel.scrollIntoView({ block: "start" });
  }
  if (!storedKey()) {
    // Only the key that submitted a job can read it; the key panel is
    // the next one down the page.
    $("job-summary").textContent = "An API key is needed to see this job.";
    $("job-needkey-text").textContent = "This browser has no API key. A job is shown only to the key that submitted it: " +
      "paste that key in the API key panel just below this one (\u201cUse a key you already have\u201d), and the job opens here.";
    $("job-needkey").hidden = false;
    return;
  }
  stopWatch = watchStatus(id, (st) => {
    if (id !== currentJob) return;
    $("job-error").hidden = true;
    $("job-body").hidden = false;
    renderStatus(st);
    if (st.status === "Completed") loadResult(id);
    if (st.status === "Completed" || st.status === "Failed") onFinal();
  }, (e) => {
    if (id !== currentJob) return;
    $("job-summary").textContent = "";
    const err = $("job-error");
    err.textContent = e.message;
    err.hidden = false;
  });
}

/** initJob wires the job panel and the "Open a job" form. */
export function initJob(final) {
  onFinal = final || onFinal;
  $("open-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("open-id").value.trim();
    if (/^[A-Za-z0-9_-]+$/.test(v)) location.hash = "#job=" + v;
  });
  $("job-needkey-go").addEventListener("click", goToKeyPanel);
  window.addEventListener("hashchange", () => onHash());
  if (jobFromHash()) onHash();
}

/** reopenJob reads the open job again (after the kept key changed),
 * leaving the focus where it is. */
export function reopenJob() {
  if (jobFromHash()) onHash(true);
}

// renderStatus draws a status from its `overall` object (the whole job
// in rows and sequences, one percentage, the ETA): the summary line, the
// bar and the boxes all read the same numbers. Embedding files stay as
// detail; the stage list summarises every stage.
function renderStatus(st) {
  const o = st.overall || null;
  const emb = (st.progress && st.progress.embedding) || null;
  const stages = st.progressStages || [];
  const active = st.activeStageIndex != null ? stages.find((x) => x.index === st.activeStageIndex) : null;
  const total = emb ? emb.total : 0;
  const done = emb ? emb.cachedAlready + emb.computed : 0;
  const pct = o ? o.percent : (st.status === "Completed" ? 100 : 0);
  setText("job-summary", o ? o.text : st.status);
  const jp = $("job-progress");
  jp.value = pct;
  setText("job-percent", pct + " %");
  setText("job-rows", o ? o.rows : "–");
  setText("job-seqs", o && o.sequences != null ? o.sequences : "–");
  setText("job-stage", o && o.stage != null ? o.stage + " of " + o.stages : "–");
  setText("job-elapsed", clock(st.elapsedSeconds));
  // A finished job has no time left to show; a running one shows the ETA
  // once the server gives one (it waits until the job has run a little).
  const final = st.status === "Completed" || st.status === "Failed";
  setText("job-eta", final ? "done" : o && o.etaSeconds ? clock(o.etaSeconds) : "estimating…");
  const ap = active ? active.prediction || {} : {};
  setText("pred-count", active ? (ap.predictionsMade || 0) + " / " + (ap.predictionsTotal || 0) +
    (ap.predictionsCached ? " (" + ap.predictionsCached + " from the prediction cache)" : "") : "–");
  const p = $("emb-progress");
  p.max = Math.max(total, 1);
  p.value = total > 0 ? done : (st.status === "Completed" ? 1 : 0);
  setText("emb-done", done);
  setText("emb-total", total);
  setText("emb-total2", emb ? emb.total : "–");
  setText("emb-cached", emb ? emb.cachedAlready : "–");
  setText("emb-computed", emb ? emb.computed : "–");
  setText("emb-remaining", emb ? emb.remaining : "–");

  const ol = $("job-stages");
  const items = stages.map((s) => {
    const e = s.embedding || {};
    const pp = s.prediction || {};
    const li = el("li");
    if (s.status === "failed") li.className = "stage-failed";
    // "Method B", not "Method B (B)": the key is added only when the name
    // does not already say it.
    const name = s.methodName && s.methodName !== "Method " + s.methodKey ? s.methodName + " (" + s.methodKey + ")" : (s.methodName || s.methodKey);
    li.append(el("strong", s.target + " · " + name), document.createTextNode(": " + s.status));
    const parts = [];
    if (s.rows != null) parts.push(s.rows + " row(s)");
    if (s.sequences != null) parts.push(s.sequences + " sequence(s)" + (s.sequencesEmbedded != null ? ", " + s.sequencesEmbedded + " embedded" : ""));
    if (pp.predictionsTotal || s.status !== "pending") {
      parts.push("predictions " + (pp.predictionsMade || 0) + "/" + (pp.predictionsTotal || 0) +
        (pp.predictionsCached ? " (" + pp.predictionsCached + " from the prediction cache)" : ""));
    }
    if (s.seconds != null) parts.push(clock(s.seconds));
    // Embedding files only once the stage knows how many it needs: a
    // pending stage's "0/0" says nothing.
    if (e.total) {
      parts.push("embedding files " + ((e.cachedAlready || 0) + (e.computed || 0)) + "/" + e.total +
        " (cached " + (e.cachedAlready || 0) + ", computed " + (e.computed || 0) + ", remaining " + (e.remaining || 0) + ")");
    }
    li.append(document.createTextNode((parts.length ? " — " + parts.join(" · ") : "") + (s.message ? ". " + formWording(s.message) : "")));
    return li;
  });
  if (ol.textContent !== items.map((i) => i.textContent).join("")) ol.replaceChildren(...items);

  const g = st.gpuPrecompute;
  if (g && g.events && g.events.length) {
    $("gpu-wrap").hidden = false;
    const evs = g.events.map((e) => el("li", when(e.updatedAt) + " · " +
      e.target + " " + e.methodKey + ": " + (e.reason || "—") + (e.usedGpu ? " (GPU)" : "") + (e.failed ? " (failed)" : "")));
    const ev = $("gpu-events");
    if (ev.textContent !== evs.map((i) => i.textContent).join("")) ev.replaceChildren(...evs);
  }
  if (st.status === "Failed") {
    const err = $("job-error");
    err.textContent = "The job failed: " + formWording(st.error || "no reason given");
    err.hidden = false;
  }
}

async function loadResult(id) {
  try {
    const [res, csvResp] = await Promise.all([
      api("GET", "/api/v1/result/" + encodeURIComponent(id) + "/?format=json"),
      api("GET", "/api/v1/result/" + encodeURIComponent(id) + "/", { raw: true }),
    ]);
    if (id !== currentJob) return;
    const blob = await csvResp.blob();
    if (downloadURL) URL.revokeObjectURL(downloadURL);
    downloadURL = URL.createObjectURL(blob);
    const a = $("result-download");
    a.href = downloadURL;
    a.download = "kinflow-" + id + "-results.csv";
    renderResult(res);
    $("result-wrap").hidden = false;
  } catch (e) {
    const err = $("job-error");
    err.textContent = "Could not read the result: " + e.message;
    err.hidden = false;
  }
}
