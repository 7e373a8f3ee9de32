// status.js: how the page follows a job's status. Everything that fetches
// /status/ is here, in watchStatus, so that the transport (polling today)
// can become an event stream without touching what draws the status.
import { api } from "./api.js";

const POLL_MS = 1000; // status is read from the database only: cheap to poll
const FINAL = new Set(["Completed", "Failed"]);

/**
 * watchStatus follows job id: onStatus(st) for every status read, until a
 * final one (Completed or Failed); onError(e) when a read fails (a network
 * or server error is retried after a pause, anything else ends the watch).
 * It returns a function that stops the watch.
 */
export function watchStatus(id, onStatus, onError) {
  let timer = null;
  let stopped = false;
  const next = (ms) => { if (!stopped) timer = setTimeout(read, ms); };
  async function read() {
    let st;
    try {
      st = await api("GET", "/api/v1/status/" + encodeURIComponent(id) + "/");
    } catch (e) {
      if (stopped) return;
      onError(e);
      if (e.status === 0 || e.status >= 500) next(POLL_MS * 3);
      return;
    }
    if (stopped) return;
    onStatus(st);
    if (!FINAL.has(st.status)) next(POLL_MS);
  }
  read();
  return () => { stopped = true; if (timer) clearTimeout(timer); };
}
