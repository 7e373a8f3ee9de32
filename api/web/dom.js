// dom.js: small DOM and number helpers shared by the page's modules.
// Every value from the API is written with textContent, never as HTML.

/** $ is the element with id. */
export const $ = (id) => document.getElementById(id);

/** el makes an element with optional text and class. */
export const el = (tag, text, cls) => {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
};

/** short shortens a value (or list) to 60 characters for a message. */
export function short(v) {
  const s = Array.isArray(v) ? v.join("; ") : String(v == null ? "" : v);
  return s.length > 60 ? s.slice(0, 57) + "…" : s;
}

/** setText writes v into element id when it changed (no needless repaint). */
export function setText(id, v) {
  const e = $(id);
  const s = String(v);
  if (e.textContent !== s) e.textContent = s;
}

/** clock writes seconds as m:ss (h:mm:ss from an hour), as the CLI does. */
export function clock(sec) {
  sec = Math.max(0, Math.round(sec || 0));
  const h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), x = sec % 60;
  const two = (n) => String(n).padStart(2, "0");
  return h ? h + ":" + two(m) + ":" + two(x) : m + ":" + two(x);
}

/** when writes an ISO time as "YYYY-MM-DD HH:MM:SS UTC". */
export function when(iso) {
  return String(iso || "").replace("T", " ").replace(/\.\d+/, "").replace(/(Z|[+-]00:00)$/, " UTC");
}

export const NS = "http://www.w3.org/2000/svg";

/** svgEl makes an SVG element with attributes and an optional class. */
export const svgEl = (tag, attrs, cls) => {
  const e = document.createElementNS(NS, tag);
  Object.keys(attrs || {}).forEach((k) => e.setAttribute(k, String(attrs[k])));
  if (cls) e.setAttribute("class", cls);
  return e;
};

/** fmtPow labels a power of ten on a log axis. */
export function fmtPow(e) {
  const v = Math.pow(10, e);
  if (e >= -3 && e <= 4) return String(Number(v.toPrecision(1)));
  return "1e" + e;
}

/** fmtNum writes x with three significant digits. */
export function fmtNum(x) { return Number(x.toPrecision(3)).toString(); }

// formWording puts the form's words for the wire's options in a server
// message ("Skip long sequences", not handleLongSequences=skip).
export function formWording(msg) {
  return String(msg)
    .replace(/handleLongSequences\s*=\s*skip/g, "\u201cSkip long sequences\u201d")
    .replace(/handleLongSequences\s*=\s*truncate/g, "\u201cTruncate long sequences\u201d");
}
