// kinflow web page: plain JavaScript, no framework, no build step.
// Every value from the API is written with textContent, never as HTML.
"use strict";

(function () {
  const KEY_STORE = "kinflow.apiKey";
  const POLL_MS = 1000; // status is read from the database only: cheap to poll
  const SYNTHETIC = /synthetic placeholder|synthetic backend/i;

  const $ = (id) => document.getElementById(id);
  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  };

  // ---- API access --------------------------------------------------------

  function storedKey() {
    try { return localStorage.getItem(KEY_STORE) || ""; } catch (_) { return ""; }
  }
  function storeKey(k) {
    try { if (k) localStorage.setItem(KEY_STORE, k); else localStorage.removeItem(KEY_STORE); } catch (_) { /* private mode */ }
  }

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  // api sends a request and returns the parsed JSON (or the raw Response
  // when raw is set); a non-2xx answer throws an APIError with the API's
  // {"error"} text.
  async function api(method, path, { body, auth = true, raw = false, idempotencyKey = "" } = {}) {
    const headers = {};
    if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
    if (auth) {
      const k = storedKey();
      if (!k) throw new APIError(401, "No API key in this browser: generate one above, or paste one you have.");
      headers.Authorization = "Bearer " + k;
    }
    let resp;
    try {
      resp = await fetch(path, { method, headers, body, cache: "no-store" });
    } catch (e) {
      throw new APIError(0, "Cannot reach the kinflow API (" + e.message + ").");
    }
    if (!resp.ok) {
      let msg = resp.status + " " + resp.statusText;
      try { const j = await resp.json(); if (j && j.error) msg = j.error; } catch (_) { /* not JSON */ }
      throw new APIError(resp.status, msg);
    }
    return raw ? resp : resp.json();
  }

  function notice(msg) {
    const n = $("notice");
    n.textContent = msg || "";
    n.hidden = !msg;
  }

  // ---- API key panel -----------------------------------------------------

  async function refreshKey() {
    const state = $("key-state");
    try {
      const s = await api("GET", "/api/api-key/", { auth: false });
      const local = storedKey();
      if (s.hasKey) {
        const mine = local && s.keySuffix && local.endsWith(s.keySuffix.replace(/^…/, ""));
        state.textContent = "This address has an active key ending " + s.keySuffix +
          (mine ? " (kept in this browser)." : local ? ". The key kept in this browser is a different one." :
            ". It is not kept in this browser: paste it below, or revoke it and generate a new one.");
      } else {
        state.textContent = "This address has no active key." + (local ? " The key kept in this browser no longer works." : "");
      }
      $("key-generate").disabled = s.hasKey;
      $("key-revoke").disabled = !s.hasKey;
    } catch (e) {
      state.textContent = "Could not read the key status: " + e.message;
    }
  }

  async function generateKey() {
    notice("");
    try {
      const k = await api("POST", "/api/api-key/generate/", { auth: false });
      storeKey(k.key);
      $("key-full").value = k.key;
      $("key-new").hidden = false;
      $("key-copy-state").textContent = k.message || "";
      $("key-full").focus();
      $("key-full").select();
    } catch (e) {
      notice("Generate: " + e.message);
    }
    await refreshKey();
  }

  async function copyKey() {
    const v = $("key-full").value;
    try {
      await navigator.clipboard.writeText(v);
      $("key-copy-state").textContent = "Copied to the clipboard.";
    } catch (_) {
      $("key-full").select();
      $("key-copy-state").textContent = "Select the key and copy it (Ctrl+C / ⌘C).";
    }
  }

  let revokeArmed = false;
  async function revokeKey() {
    const b = $("key-revoke");
    if (!revokeArmed) { // two steps instead of window.confirm, which blocks and is not styled
      revokeArmed = true;
      b.textContent = "Confirm: revoke the key";
      setTimeout(() => { revokeArmed = false; b.textContent = "Revoke this address's key"; }, 8000);
      return;
    }
    revokeArmed = false;
    b.textContent = "Revoke this address's key";
    notice("");
    try {
      await api("POST", "/api/api-key/revoke/", { auth: false });
      storeKey("");
      $("key-new").hidden = true;
      $("key-full").value = "";
    } catch (e) {
      notice("Revoke: " + e.message);
    }
    await refreshKey();
  }

  // ---- methods and the submit form ---------------------------------------

  let catalogue = null;

  async function loadMethods() {
    const box = $("targets");
    try {
      catalogue = await api("GET", "/api/v1/methods/", { auth: false });
    } catch (e) {
      $("methods-state").textContent = "Could not load the methods: " + e.message;
      return;
    }
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
        const o = el("option", m.id + " — " + m.displayName);
        o.value = m.id;
        sel.append(o);
      });
      const hint = el("p", "", "hint"); hint.id = "method-hint-" + slug;
      sel.setAttribute("aria-describedby", hint.id);
      const describe = () => {
        const m = list.find((x) => x.id === sel.value);
        // A method reading Substrate also takes a ;-separated Substrates
        // list (WIRE §13.1), and every method several candidate sequences.
        const cols = (m && m.requiredColumns || []).map((c) => (c === "Substrate" ? "Substrate (or a ;-separated Substrates list)" : c));
        const behavior = m && m.inputBehaviorByTarget ? m.inputBehaviorByTarget[t] : "";
        hint.textContent = m ? "Needs columns: " + cols.join(", ") +
          (m.maxSeqLen ? " · up to " + m.maxSeqLen + " residues" : "") +
          (behavior === "native_multi" ? " · takes the substrate list whole" : "") : "";
      };
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
      // The report covers the methods chosen in the form (issue 28).
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
  function resetConfirm() {
    confirmed = false;
    submitKey = "";
    $("submit-btn").textContent = "Validate and submit";
  }

  function short(v) {
    const s = Array.isArray(v) ? v.join("; ") : String(v == null ? "" : v);
    return s.length > 60 ? s.slice(0, 57) + "…" : s;
  }

  // showReport renders a /validate/ report and returns how many rows it
  // flags. The sentences are the server's (`messages`), the same in every
  // client; a server without them gets the older rendering.
  function showReport(rep) {
    const out = $("validate-out");
    out.replaceChildren();
    if (!Array.isArray(rep.messages)) return showReportLegacy(out, rep);
    const rowMsgs = rep.messages.filter((m) => m.row != null);
    const other = rep.messages.filter((m) => m.row == null && m.column !== "similarity");
    const flagged = new Set(rowMsgs.filter((m) => m.level === "error").map((m) => m.row)).size;
    const head = el("p", rep.rowCount + " row(s) read. " +
      (flagged ? flagged + " row(s) with problems: those rows get no prediction." : "No row problems.") +
      (Array.isArray(rep.methods) ? " Checked for method(s) " + rep.methods.join(", ") + "." : ""),
      flagged ? "error" : "ok");
    head.id = "validate-summary";
    out.append(head);
    other.forEach((m) => out.append(el("p", m.text, "hint msg-" + m.level)));
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
        const text = m.text.replace(/^Row \d+, [^:]+: /, "");
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
    // No dataset for the request is information, not an error (issue 28).
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

  async function onValidate() {
    try { await validate(); } catch (e) { showError(e); }
  }

  function showError(e) {
    const out = $("validate-out");
    out.replaceChildren(el("p", e.message, "error"));
  }

  async function onSubmit(ev) {
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

  // ---- job page -----------------------------------------------------------

  let pollTimer = null;
  let currentJob = null;
  let downloadURL = null;

  function jobFromHash() {
    const m = /^#job=([A-Za-z0-9_-]+)$/.exec(location.hash);
    return m ? m[1] : null;
  }

  function onHash() {
    const id = jobFromHash();
    if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    currentJob = id;
    const panel = $("job-panel");
    if (!id) { panel.hidden = true; return; }
    panel.hidden = false;
    $("job-id").textContent = id;
    $("job-summary").textContent = "Loading…";
    $("job-error").hidden = true;
    $("result-wrap").hidden = true;
    $("synthetic-banner").hidden = true;
    $("job-stages").replaceChildren();
    $("gpu-events").replaceChildren();
    $("gpu-wrap").hidden = true;
    $("job-h").focus();
    poll(id);
  }

  async function poll(id) {
    if (id !== currentJob) return;
    let st;
    try {
      st = await api("GET", "/api/v1/status/" + encodeURIComponent(id) + "/");
    } catch (e) {
      if (id !== currentJob) return;
      $("job-summary").textContent = "";
      const err = $("job-error");
      err.textContent = e.message;
      err.hidden = false;
      if (e.status === 0 || e.status >= 500) pollTimer = setTimeout(() => poll(id), POLL_MS * 3);
      return;
    }
    if (id !== currentJob) return;
    renderStatus(st);
    if (st.status === "Completed") { loadResult(id); return; }
    if (st.status === "Failed") return;
    pollTimer = setTimeout(() => poll(id), POLL_MS);
  }

  function setText(id, v) {
    const e = $(id);
    const s = String(v);
    if (e.textContent !== s) e.textContent = s; // untouched nodes: no needless repaint
  }

  // clock writes seconds as m:ss (h:mm:ss from an hour), as the CLI does.
  function clock(sec) {
    sec = Math.max(0, Math.round(sec || 0));
    const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), x = sec % 60;
    const two = (n) => String(n).padStart(2, "0");
    return h ? h + ":" + two(m) + ":" + two(x) : m + ":" + two(x);
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
    setText("job-eta", o && o.etaSeconds != null ? (o.etaSeconds === 0 ? "none" : clock(o.etaSeconds)) : "–");
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
      li.append(el("strong", s.target + " · " + s.methodName + " (" + s.methodKey + ")"), document.createTextNode(": " + s.status));
      const parts = [];
      if (s.rows != null) parts.push(s.rows + " row(s)");
      if (s.sequences != null) parts.push(s.sequences + " sequence(s)" + (s.sequencesEmbedded != null ? ", " + s.sequencesEmbedded + " embedded" : ""));
      parts.push("predictions " + (pp.predictionsMade || 0) + "/" + (pp.predictionsTotal || 0) +
        (pp.predictionsCached ? " (" + pp.predictionsCached + " from the prediction cache)" : ""));
      if (s.seconds != null) parts.push(clock(s.seconds));
      parts.push("embedding files " + ((e.cachedAlready || 0) + (e.computed || 0)) + "/" + (e.total || 0) +
        " (cached " + (e.cachedAlready || 0) + ", computed " + (e.computed || 0) + ", remaining " + (e.remaining || 0) + ")");
      li.append(document.createTextNode(" — " + parts.join(" · ") + (s.message ? ". " + s.message : "")));
      return li;
    });
    if (ol.textContent !== items.map((i) => i.textContent).join("")) ol.replaceChildren(...items);

    const g = st.gpuPrecompute;
    if (g && g.events && g.events.length) {
      $("gpu-wrap").hidden = false;
      const evs = g.events.map((e) => el("li", e.updatedAt.replace("T", " ").replace(/\.\d+/, "").replace("+00:00", " UTC") + " · " +
        e.target + " " + e.methodKey + ": " + (e.reason || "—") + (e.usedGpu ? " (GPU)" : "") + (e.failed ? " (failed)" : "")));
      const ev = $("gpu-events");
      if (ev.textContent !== evs.map((i) => i.textContent).join("")) ev.replaceChildren(...evs);
    }
    if (st.status === "Failed") {
      const err = $("job-error");
      err.textContent = "The job failed: " + (st.error || "no reason given");
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

  // arrayCell turns a result cell holding a JSON array (WIRE §13: a Km or
  // kcat/Km list per substrate, an Extra Info list of substrates or
  // candidate sequences) into readable lines; null when v is not one.
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

  // ---- the result: a sortable, paged table and distribution plots --------

  const NS = "http://www.w3.org/2000/svg";
  const svgEl = (tag, attrs, cls) => {
    const e = document.createElementNS(NS, tag);
    Object.keys(attrs || {}).forEach((k) => e.setAttribute(k, String(attrs[k])));
    if (cls) e.setAttribute("class", cls);
    return e;
  };
  // stackedBars draws a histogram's frame and bars into svg: the hatch
  // pattern for synthetic sources, the count grid with its ticks, the bars
  // of each bin stacked by group (o.groups, o.counts[group][bin]) with a
  // tooltip each, a hatch over every bar of a synthetic group, and the axes.
  const stackedBars = (svg, o) => {
    const { L, T, pw, ph, nb, bw, top } = o;
    const defs = svgEl("defs");
    const pat = svgEl("pattern", { id: o.hatchID, width: 6, height: 6, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
    pat.append(svgEl("rect", { width: 6, height: 6, fill: "#ffffff", "fill-opacity": 0 }), svgEl("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#3d2800", "stroke-width": 2 }));
    defs.append(pat);
    svg.append(defs);
    [0, 0.5, 1].forEach((f) => {
      const y = T + ph - f * ph;
      svg.append(svgEl("line", { x1: L, x2: L + pw, y1: y, y2: y }, "grid"));
      const t = svgEl("text", { x: L - 4, y: y + 3, "text-anchor": "end" }, "tick");
      t.textContent = String(Math.round(f * top));
      svg.append(t);
    });
    for (let b = 0; b < nb; b++) {
      let y = T + ph;
      o.groups.forEach((l, g) => {
        const n = o.counts[g][b];
        if (!n) return;
        const h = (n / top) * ph;
        y -= h;
        const attrs = { x: L + b * bw + 0.5, y: y, width: Math.max(1, bw - 1), height: h, fill: o.fill(l, g) };
        const r = svgEl("rect", attrs, "bar");
        if (o.tagSource) r.dataset.source = l;
        const tip = svgEl("title");
        tip.textContent = o.tip(l, n, b);
        r.append(tip);
        svg.append(r);
        if (o.hatched(l)) svg.append(svgEl("rect", Object.assign({}, attrs, { fill: "url(#" + o.hatchID + ")" }), "hatch"));
      });
    }
    svg.append(svgEl("polyline", { points: L + "," + T + " " + L + "," + (T + ph) + " " + (L + pw) + "," + (T + ph) }, "axis"));
  };
  // Source colours: distinct for colour-blind readers (Okabe–Ito), in the
  // order sources are first met; synthetic sources are hatched as well.
  const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000"];
  const SIMILARITY_COL = /^(mean|max) similarity to .+ training data$/;
  // A cell longer than SHORTEN_AT without spaces (a sequence, a SMILES) is
  // shown shortened; a click shows it whole.
  const SHORTEN_AT = 24;

  const table = { res: null, cols: [], pinned: 0, order: [], sortCol: null, sortDir: 1, page: 0, size: 100, notes: {} };

  // displayColumns puts what a scientist reads first: the value columns,
  // the similarity columns, the Source and Extra Info columns, then the
  // input columns; a leading "#" is the row's number in the result.
  function displayColumns(cols) {
    const values = cols.filter((c, i) => i + 1 < cols.length && cols[i + 1] === "Source " + targetOf(cols, i));
    const sims = cols.filter((c) => SIMILARITY_COL.test(c));
    const meta = cols.filter((c) => /^(Source|Extra Info) /.test(c));
    const rest = cols.filter((c) => !values.includes(c) && !sims.includes(c) && !meta.includes(c));
    return { order: values.concat(sims, meta, rest), values };
  }

  // targetOf is the target whose triple starts at column i: the next
  // column is "Source <target>".
  function targetOf(cols, i) {
    const next = cols[i + 1] || "";
    return next.startsWith("Source ") ? next.slice(7) : "";
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

  function renderResult(res) {
    table.res = res;
    table.cols = res.columns || [];
    const d = displayColumns(table.cols);
    table.order = ["#"].concat(d.order);
    table.pinned = 1 + d.values.length;
    table.values = d.values;
    table.notes = res.columnNotes || {};
    table.rows = (res.data || []).map((row, i) => ({ n: i + 1, row }));
    table.sortCol = null; table.sortDir = 1; table.page = 0;
    table.size = Number($("page-size").value) || 100;
    const synthetic = res.synthetic === true || table.rows.some(({ row }) =>
      table.cols.some((c) => /^Source /.test(c) && typeof row[c] === "string" && SYNTHETIC.test(row[c])));
    $("synthetic-banner").hidden = !synthetic;
    setText("result-count", (res.rowCount || 0) + " row(s)");
    const noteText = [...new Set(Object.values(table.notes))].join(" ");
    $("result-notes").textContent = noteText;
    $("result-notes").hidden = !noteText;
    renderHead();
    renderPage();
    // The plots' drawing time is measured ("kinflow-plots"): the browser
    // test holds it to a bound for a 10,000-row result.
    const t0 = performance.now();
    renderPlots(res, d.values, synthetic);
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
      hr.append(th);
    });
    $("result-table").tHead.replaceChildren(hr);
  }

  function sortBy(c) {
    if (table.sortCol === c) table.sortDir = -table.sortDir;
    else { table.sortCol = c; table.sortDir = 1; }
    const dir = table.sortDir;
    table.rows.sort((a, b) => {
      const x = a.row[c], y = b.row[c];
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

  function pageCount() { return Math.max(1, Math.ceil(table.rows.length / table.size)); }

  function goPage(p) {
    table.page = Math.min(Math.max(0, p), pageCount() - 1);
    renderPage();
  }

  // cellNode renders one cell: array cells as lines, long cells shortened
  // behind a button that shows the whole text.
  function cellNode(v, c) {
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

  // sourceLabel names a Source cell's origin for the plot legend.
  function sourceLabel(src) {
    const s = String(src || "");
    if (SYNTHETIC.test(s)) return "Synthetic stand-in";
    const m = /^Prediction from (.+)$/.exec(s);
    if (m) return m[1];
    return s || "No source";
  }

  // plotValues collects one value column's positive numbers by source; a
  // list cell (one value per substrate) counts each of its numbers.
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

  function fmtPow(e) {
    const v = Math.pow(10, e);
    if (e >= -3 && e <= 4) return String(Number(v.toPrecision(1)));
    return "1e" + e;
  }

  // renderPlots draws, per value column, a histogram of log10(value) with
  // bars stacked by source; synthetic sources are hatched and named so.
  function renderPlots(res, valueCols, synthetic) {
    const box = $("result-plots");
    box.replaceChildren();
    valueCols.forEach((col, k) => {
      const i = table.cols.indexOf(col);
      const srcCol = "Source " + targetOf(table.cols, i);
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
      const top = Math.max(...stack);
      const W = 360, H = 190, L = 40, R = 20, T = 22, B = 34;
      const pw = W - L - R, ph = H - T - B, bw = pw / nb;
      const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img" });
      const desc = col + ": distribution of " + all.length + " value(s) on a log scale, by source" +
        (synthetic ? "; synthetic stand-ins, not predictions" : "") + ".";
      svg.setAttribute("aria-label", desc);
      const title = svgEl("title"); title.textContent = desc; svg.append(title);
      const hatchID = "hatch-" + k;
      stackedBars(svg, {
        L, T, pw, ph, nb, bw, top, groups: labels, counts, hatchID, tagSource: true,
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
      const xl = svgEl("text", { x: L + pw / 2, y: H - 4, "text-anchor": "middle" }, "label");
      xl.textContent = col + " (log scale)";
      svg.append(xl);
      const yl = svgEl("text", { x: L, y: 12 }, "label");
      yl.textContent = "count";
      svg.append(yl);
      if (synthetic) {
        const w = svgEl("text", { x: L + pw, y: 12, "text-anchor": "end" }, "warn");
        w.textContent = "SYNTHETIC — not predictions";
        svg.append(w);
      }
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
        li.append(sw, el("span", l + " (" + groups.get(l).length + ")" + (l === "Synthetic stand-in" ? " — not a prediction" : "")));
        legend.append(li);
      });
      const notes = [];
      if (blank) notes.push(blank + " row(s) without a value");
      if (nonPositive) notes.push(nonPositive + " value(s) ≤ 0 not shown on the log scale");
      fig.append(svg, legend, el("figcaption", desc + (notes.length ? " " + notes.join("; ") + "." : "")));
      box.append(fig);
      const target = targetOf(table.cols, i);
      if (table.cols.includes(uncertaintyCol(target, "total"))) {
        renderUncertainty(box, res, col, target, srcCol, labels, synthetic, k);
      }
    });
  }

  // uncertaintyCol is the result column of a target's uncertainty part
  // (total, aleatoric, epistemic): a standard deviation of log10(value).
  function uncertaintyCol(target, part) { return "Uncertainty " + target + " " + part + " (SD, log10)"; }

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

    // Panel 1: the distribution of the total SD.
    const hiSD = Math.max(0.1, Math.ceil(Math.max(...sds) * 10) / 10);
    const nb = 24, bw = pw / nb;
    const groups = [...new Set(rows.map((r) => r.label))];
    const counts = groups.map(() => new Array(nb).fill(0));
    rows.forEach((r) => { counts[groups.indexOf(r.label)][Math.min(nb - 1, Math.floor(r.sd / hiSD * nb))]++; });
    const top = Math.max(...new Array(nb).fill(0).map((_, b) => groups.reduce((s, _g, g) => s + counts[g][b], 0)));
    const hist = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img" }, "sd-hist");
    const hdesc = "Uncertainty of " + col + ": distribution of the total standard deviation of log10(value) over " + rows.length +
      " row(s), in log10 units; median " + fmtNum(med) + " (" + fold(med) + ")" + (synthetic ? "; synthetic stand-ins, not predictions" : "") + ".";
    hist.setAttribute("aria-label", hdesc);
    const ht = svgEl("title"); ht.textContent = hdesc; hist.append(ht);
    stackedBars(hist, {
      L, T, pw, ph, nb, bw, top, groups, counts, hatchID: "hatch-u" + k,
      fill: (l) => colour(l),
      hatched: isSyn,
      tip: (l, n, b) => l + ": " + n + " row(s) with total SD " + fmtNum(b * hiSD / nb) + " to " + fmtNum((b + 1) * hiSD / nb) + " log10 units",
    });
    for (let j = 0; j <= 4; j++) {
      const x = L + (j / 4) * pw;
      hist.append(svgEl("line", { x1: x, x2: x, y1: T + ph, y2: T + ph + 4 }, "axis"));
      const t = svgEl("text", { x: x, y: T + ph + 15, "text-anchor": "middle" }, "tick");
      t.textContent = fmtNum(j * hiSD / 4);
      hist.append(t);
    }
    const mx = L + Math.min(1, med / hiSD) * pw;
    hist.append(svgEl("line", { x1: mx, x2: mx, y1: T, y2: T + ph }, "median"));
    const mt = svgEl("text", { x: Math.min(mx + 3, L + pw - 2), y: T + 10, "text-anchor": mx + 3 > L + pw - 90 ? "end" : "start" }, "label median-label");
    mt.textContent = "median " + fmtNum(med) + " (" + fold(med) + ")";
    hist.append(mt);
    const hx = svgEl("text", { x: L + pw / 2, y: H - 4, "text-anchor": "middle" }, "label");
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

  function fmtNum(x) { return Number(x.toPrecision(3)).toString(); }

  // ---- wiring ---------------------------------------------------------------

  function init() {
    $("key-generate").addEventListener("click", generateKey);
    $("key-revoke").addEventListener("click", revokeKey);
    $("key-copy").addEventListener("click", copyKey);
    $("key-use").addEventListener("click", () => {
      const v = $("key-input").value.trim();
      if (!v) return;
      storeKey(v);
      $("key-input").value = "";
      refreshKey();
    });
    $("key-forget").addEventListener("click", () => { storeKey(""); refreshKey(); });
    $("validate-btn").addEventListener("click", onValidate);
    $("page-first").addEventListener("click", () => goPage(0));
    $("page-prev").addEventListener("click", () => goPage(table.page - 1));
    $("page-next").addEventListener("click", () => goPage(table.page + 1));
    $("page-last").addEventListener("click", () => goPage(pageCount() - 1));
    $("page-size").addEventListener("change", () => {
      const first = table.page * table.size;
      table.size = Number($("page-size").value) || 100;
      goPage(Math.floor(first / table.size));
    });
    $("submit-form").addEventListener("submit", onSubmit);
    // Any change to the form (file, text, targets, methods, every option)
    // is a new request: it needs a new validation and a new Idempotency-Key.
    $("submit-form").addEventListener("change", resetConfirm);
    $("csv-text").addEventListener("input", resetConfirm);
    $("open-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = $("open-id").value.trim();
      if (/^[A-Za-z0-9_-]+$/.test(v)) location.hash = "#job=" + v;
    });
    window.addEventListener("hashchange", onHash);
    refreshKey();
    loadMethods();
    if (jobFromHash()) onHash();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
