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
    if (!withOptions && $("opt-runsim").checked) fd.append("runSimilarity", "true");
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

  // showReport renders a /validate/ report and returns how many rows it flags.
  function showReport(rep) {
    const out = $("validate-out");
    out.replaceChildren();
    const rows = [];
    (rep.invalidProteins || []).forEach((p) => rows.push([p.row, "Protein Sequence" + (p.position ? " (candidate " + p.position + ")" : ""), short(p.value),
      p.reason + (p.invalid_chars && p.invalid_chars.length ? " (" + p.invalid_chars.join(" ") + ")" : "")]));
    (rep.invalidSubstrates || []).forEach((s) => {
      // A Substrates list reports its bad tokens with their positions.
      if (Array.isArray(s.value)) {
        const toks = (s.invalid_substrates || []).map((t) => (t.position ? "substrate " + t.position + ": " : "") + (t.value == null ? "(empty)" : t.value))
          .concat((s.invalid_products || []).map((t) => (t.position ? "product " + t.position + ": " : "") + (t.value == null ? "(empty)" : t.value)));
        rows.push([s.row, "Substrates", short(toks.length ? toks.join("; ") : s.value.join("; ")), s.reason]);
        return;
      }
      rows.push([s.row, "Substrate", short(s.value), s.reason]);
    });
    rows.sort((a, b) => a[0] - b[0]);
    const sel = selection();
    const lv = rep.lengthViolations || {};
    const long = Object.values(sel.methods).filter((m) => lv[m] > 0)
      .map((m) => "Method " + m + ": " + lv[m] + " sequence(s) longer than its limit of " + (rep.lengthLimits || {})[m] + " residues.");
    if (lv.Server > 0) long.push(lv.Server + " sequence(s) longer than the server limit of " + (rep.lengthLimits || {}).Server + ".");
    const head = el("p", rep.rowCount + " row(s) read. " +
      (rows.length ? rows.length + " row problem(s): those rows get no prediction." : "No row problems."),
      rows.length ? "error" : "ok");
    head.id = "validate-summary";
    out.append(head);
    long.forEach((l) => out.append(el("p", l, "hint")));
    if (rows.length) {
      const wrap = el("div", null, "table-wrap");
      wrap.tabIndex = 0; wrap.setAttribute("role", "region"); wrap.setAttribute("aria-label", "Row problems");
      const t = el("table"); t.id = "validate-table";
      const tr = el("tr");
      ["Row", "Column", "Value", "Problem"].forEach((h) => { const th = el("th", h); th.scope = "col"; tr.append(th); });
      const thead = el("thead"); thead.append(tr);
      const tb = el("tbody");
      rows.forEach((r) => {
        const row = el("tr");
        r.forEach((c, i) => row.append(el("td", c, i === 0 ? "num" : i === 2 ? "long" : "")));
        tb.append(row);
      });
      t.append(thead, tb); wrap.append(t); out.append(wrap);
    }
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
    if (sim.error) { out.append(el("p", sim.error, "error")); return; }
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

  function renderStatus(st) {
    const emb = (st.progress && st.progress.embedding) || null;
    const stages = st.progressStages || [];
    const active = st.activeStageIndex != null ? stages[st.activeStageIndex] : null;
    const total = emb ? emb.total : 0;
    const done = emb ? emb.cachedAlready + emb.computed : 0;
    let summary = st.status;
    if (st.status === "Pending" && st.queuePosition != null) summary += " · position " + st.queuePosition + " in the queue";
    if (active) summary += " · stage " + (active.index + 1) + " of " + st.totalStageCount + " (" + active.target + ", method " + active.methodKey + ")";
    if (emb && total > 0) summary += " · embeddings " + done + " of " + total;
    setText("job-summary", summary);
    const p = $("emb-progress");
    p.max = Math.max(total, 1);
    p.value = total > 0 ? done : (st.status === "Completed" ? 1 : 0);
    setText("emb-done", done);
    setText("emb-total", total);
    setText("emb-total2", emb ? emb.total : "–");
    setText("emb-cached", emb ? emb.cachedAlready : "–");
    setText("emb-computed", emb ? emb.computed : "–");
    setText("emb-remaining", emb ? emb.remaining : "–");
    const pr = st.progress || {};
    setText("pred-count", (pr.predictionsMade || 0) + " / " + (pr.predictionsTotal || 0) +
      (pr.predictionsCached ? " (" + pr.predictionsCached + " from the prediction cache)" : ""));
    setText("job-elapsed", (st.elapsedSeconds || 0) + " s");

    const ol = $("job-stages");
    const items = stages.map((s) => {
      const e = s.embedding || {};
      const pp = s.prediction || {};
      const li = el("li");
      li.append(el("strong", s.target + " · " + s.methodName + " (" + s.methodKey + ")"), document.createTextNode(": " + s.status));
      li.append(document.createTextNode(" — embeddings " + ((e.cachedAlready || 0) + (e.computed || 0)) + "/" + (e.total || 0) +
        " (cached " + (e.cachedAlready || 0) + ", computed " + (e.computed || 0) + ", remaining " + (e.remaining || 0) + ")" +
        ", predictions " + (pp.predictionsMade || 0) + "/" + (pp.predictionsTotal || 0) +
        (pp.predictionsCached ? " (" + pp.predictionsCached + " cached)" : "") + (s.message ? ". " + s.message : "")));
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

  function renderResult(res) {
    const cols = res.columns || [];
    const t = $("result-table");
    const hr = el("tr");
    cols.forEach((c) => { const th = el("th", c); th.scope = "col"; hr.append(th); });
    t.tHead.replaceChildren(hr);
    let synthetic = false;
    const frag = document.createDocumentFragment();
    (res.data || []).forEach((row) => {
      const tr = el("tr");
      cols.forEach((c) => {
        const v = row[c];
        const arr = arrayCell(v);
        const td = el("td", arr != null ? arr : v == null ? "" : v);
        if (arr != null) { td.className = "cells"; td.title = v; }
        else if (typeof v === "number") td.className = "num";
        else if (typeof v === "string" && v.length > 40 && !/\s/.test(v)) td.className = "long"; // sequences, SMILES
        else if (typeof v === "string" && v.length > 20) td.className = "text";
        if (typeof v === "string" && SYNTHETIC.test(v)) synthetic = true;
        tr.append(td);
      });
      frag.append(tr);
    });
    t.tBodies[0].replaceChildren(frag);
    $("synthetic-banner").hidden = !synthetic;
    setText("result-count", (res.rowCount || 0) + " row(s)");
  }

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
