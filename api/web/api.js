// api.js: the API key kept in this browser and every request to the API.
import { $ } from "./dom.js";

const KEY_STORE = "kinflow.apiKey";

export function storedKey() {
  try { return localStorage.getItem(KEY_STORE) || ""; } catch (_) { return ""; }
}
export function storeKey(k) {
  try { if (k) localStorage.setItem(KEY_STORE, k); else localStorage.removeItem(KEY_STORE); } catch (_) { /* private mode */ }
}

export class APIError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// api sends a request and returns the parsed JSON (or the raw Response
// when raw is set); a non-2xx answer throws an APIError with the API's
// {"error"} text.
export async function api(method, path, { body, auth = true, raw = false, idempotencyKey = "" } = {}) {
  const headers = {};
  if (idempotencyKey) headers["Idempotency-Key"] = idempotencyKey;
  if (auth) {
    const k = storedKey();
    if (!k) throw new APIError(401, "No API key in this browser: generate one in the API key panel, or paste one you have there.");
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

// notice shows msg in the page's alert box ("" hides it).
export function notice(msg) {
  const n = $("notice");
  n.textContent = msg || "";
  n.hidden = !msg;
}
