// kinflow web page: plain JavaScript as native ES modules, no framework,
// no build step. This module wires the others together:
//   dom.js (helpers) · api.js (key and requests) · key.js (key panel)
//   form.js (methods, validate, submit) · status.js (following a job)
//   job.js (the job panel) · jobs.js (your jobs) · table.js, columns.js
//   and plots.js (the result).
// Every value from the API is written with textContent, never as HTML.
import { initKeyPanel } from "./key.js";
import { initForm } from "./form.js";
import { initJob, reopenJob } from "./job.js";
import { initJobs, refreshJobs } from "./jobs.js";
import { initTable } from "./table.js";

function init() {
  // A new key may open the job a link names, and lists its jobs.
  initKeyPanel(() => { refreshJobs(); reopenJob(); });
  initTable();
  initForm();
  initJobs();
  // A job reaching its end, or a newly opened one, changes the list.
  initJob(refreshJobs);
  window.addEventListener("hashchange", refreshJobs);
}

// Modules run after the document is parsed (they are deferred).
init();
