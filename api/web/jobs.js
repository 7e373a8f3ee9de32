// jobs.js: "Your jobs", the key's jobs from GET /jobs/ (newest first),
// each with its input file's name, its status, when it was submitted, its
// rows and a link that opens it, so that a lost link is never a lost job.
import { $, el, when } from "./dom.js";
import { api, storedKey } from "./api.js";

const PAGE = 20; // one screen of jobs; "More" pages on with nextCursor
let next = null;

function row(j) {
  const tr = el("tr");
  tr.dataset.job = j.jobId;
  const a = el("a", j.jobId);
  a.href = "#job=" + encodeURIComponent(j.jobId);
  const link = el("td"); link.append(a);
  const what = (j.targets || []).map((t) => t + " " + ((j.methods || {})[t] || "")).join(", ");
  // The uploaded file's name (the page sends pasted text as pasted.csv);
  // a job submitted as JSON has none.
  const input = el("td", j.inputName || "–", "text-name");
  if (j.inputName) input.title = j.inputName;
  tr.append(link, input, el("td", j.status + (j.synthetic ? " (synthetic)" : "")), el("td", when(j.submittedAt)),
    el("td", j.rows, "num"), el("td", what));
  if (j.jobId === (/^#job=(.+)$/.exec(location.hash) || [])[1]) tr.classList.add("current");
  return tr;
}

async function load(more) {
  const state = $("jobs-state");
  if (!storedKey()) {
    $("jobs-wrap").hidden = true;
    $("jobs-more").hidden = true;
    state.textContent = "Your jobs are listed here once this browser has a key.";
    return;
  }
  let page;
  try {
    page = await api("GET", "/api/v1/jobs/?limit=" + PAGE + (more && next ? "&cursor=" + encodeURIComponent(next) : ""));
  } catch (e) {
    state.textContent = "Could not read your jobs: " + e.message;
    return;
  }
  const body = $("jobs-table").tBodies[0];
  const rows = (page.jobs || []).map(row);
  if (more) body.append(...rows); else body.replaceChildren(...rows);
  next = page.nextCursor || null;
  $("jobs-more").hidden = !next;
  const n = body.rows.length;
  $("jobs-wrap").hidden = n === 0;
  state.textContent = n ? n + (next ? "+" : "") + " job(s) submitted with this key, newest first." : "No jobs submitted with this key yet.";
}

/** refreshJobs reloads the first page of the list. */
export function refreshJobs() { return load(false); }

/** initJobs wires the list and loads it. */
export function initJobs() {
  $("jobs-more").addEventListener("click", () => load(true));
  $("jobs-refresh").addEventListener("click", () => load(false));
  return load(false);
}
