// status.js: how the page follows a job's status. Everything that reads
// /status/ is here, in watchStatus: it rides the job's event stream
// (GET /status/<id>/events, Server-Sent Events) and falls back to polling
// against a server without one.
import { api, storedKey } from "./api.js";

const POLL_MS = 1000; // fallback polling pace
const RETRY_MS = 2000; // pause before a dropped stream is reopened
const FINAL = new Set(["Completed", "Failed"]);

/**
 * watchStatus follows job id: onStatus(st) for every status it learns, until
 * a final one (Completed or Failed); onError(e) when a read fails (a network
 * or server error is retried after a pause, anything else ends the watch).
 * It returns a function that stops the watch.
 *
 * The stream is read with fetch, not EventSource, because EventSource
 * cannot send the Authorization header that carries the API key.
 */
export function watchStatus(id, onStatus, onError) {
  const ctl = { stopped: false, timer: null, abort: null };
  const base = "/api/v1/status/" + encodeURIComponent(id) + "/";
  let lastID = "";
  const later = (fn, ms) => { if (!ctl.stopped) ctl.timer = setTimeout(fn, ms); };

  async function poll() {
    let st;
    try {
      st = await api("GET", base);
    } catch (e) {
      if (ctl.stopped) return;
      onError(e);
      if (e.status === 0 || e.status >= 500) later(poll, POLL_MS * 3);
      return;
    }
    if (ctl.stopped) return;
    onStatus(st);
    if (!FINAL.has(st.status)) later(poll, POLL_MS);
  }

  async function stream() {
    const headers = { Accept: "text/event-stream", Authorization: "Bearer " + storedKey() };
    if (lastID) headers["Last-Event-ID"] = lastID;
    const abort = new AbortController();
    ctl.abort = abort;
    let resp;
    try {
      resp = await fetch(base + "events", { headers, cache: "no-store", signal: abort.signal });
    } catch (e) {
      if (ctl.stopped) return;
      onError({ status: 0, message: "Cannot reach the kinflow API (" + e.message + ")." });
      later(stream, RETRY_MS);
      return;
    }
    if (resp.status === 204) return; // the job is over and we saw its end
    const type = resp.headers.get("Content-Type") || "";
    if (!resp.ok || !type.startsWith("text/event-stream")) {
      // No stream on this server (or it refused it): read the status the
      // plain way, which also reports a 401/404 through onError.
      abort.abort();
      poll();
      return;
    }
    let ended = false;
    try {
      ended = await readEvents(resp.body, (ev) => {
        if (ev.id) lastID = ev.id;
        if (ev.event === "status" && ev.data) onStatus(JSON.parse(ev.data));
        return ev.event === "end";
      });
    } catch (e) {
      if (ctl.stopped) return;
    }
    if (!ended) later(stream, RETRY_MS); // dropped mid-job: resume from lastID
  }

  if (typeof ReadableStream === "undefined" || typeof AbortController === "undefined") poll();
  else stream();
  return () => {
    ctl.stopped = true;
    if (ctl.timer) clearTimeout(ctl.timer);
    if (ctl.abort) ctl.abort.abort();
  };
}

// readEvents parses a text/event-stream body, calling onEvent({id, event,
// data}) for each event until onEvent returns true (then it resolves true)
// or the body ends (false).
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  let ev = { id: "", event: "message", data: "" };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (ev.data || ev.event !== "message") {
          if (onEvent(ev)) { reader.cancel().catch(() => {}); return true; }
        }
        ev = { id: "", event: "message", data: "" };
        continue;
      }
      if (line.startsWith(":")) continue; // keep-alive comment
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "id") ev.id = val;
      else if (field === "event") ev.event = val;
      else if (field === "data") ev.data = ev.data ? ev.data + "\n" + val : val;
    }
  }
}
