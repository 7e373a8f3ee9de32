// columns.js: what the result's columns are: each target's value, Source
// and Extra Info triple (for a method that answers range classes, the
// range column's midpoint and experimental columns too), the similarity
// and uncertainty columns, and the input's own columns, and the order the
// page shows them in. The CSV and JSON keep the wire's order; only the
// table reorders.

/** SYNTHETIC matches a Source cell of the synthetic backends. */
export const SYNTHETIC = /synthetic placeholder|synthetic backend/i;
export const SIMILARITY_COL = /^(mean|max) similarity to .+ training data$/;
const UNCERTAINTY_COL = /^Uncertainty (.+) (total|aleatoric|epistemic) \(SD, log10\)$/;
// The input column that names the enzyme, when the input has one.
const NAME_COL = /^(name|enzyme|enzyme name|protein name|protein|uniprot( id)?|id|label|entry)$/i;
const SEQUENCE_COL = /^Protein Sequences?$/;
const SUBSTRATE_COL = /^(Substrates?|Reaction|Substrate SMILES)$/;

/** targetOf is the target whose triple starts at column i: the next column is "Source <target>". */
export function targetOf(cols, i) {
  const next = cols[i + 1] || "";
  return next.startsWith("Source ") ? next.slice(7) : "";
}

/** uncertaintyCol is the result column of a target's uncertainty part
 * (total, aleatoric, epistemic): a standard deviation of log10(value). */
export function uncertaintyCol(target, part) { return "Uncertainty " + target + " " + part + " (SD, log10)"; }

const blank = (v) => v == null || v === "";

/**
 * rangeOf is the description of range column c in the JSON result's
 * `rangeClasses` (its classes in ascending order, their midpoints, the
 * midpoint and experimental columns beside it), or null when c holds
 * values. A range cell is a class's text, never a number.
 */
export function rangeOf(ranges, c) {
  const r = ranges && Object.prototype.hasOwnProperty.call(ranges, c) ? ranges[c] : null;
  if (!r || !Array.isArray(r.classes) || !r.classes.every((x) => typeof x === "string")) return null;
  return r;
}

/**
 * displayColumns orders the table for a scientist: the row's identity
 * first (the enzyme: the input's name column when it has one, else its
 * sequence; then the substrate), then each target's value with its total
 * uncertainty beside it (a range column with its midpoint and experimental
 * columns; `ranges` is the result's `rangeClasses`), then whatever else
 * varies from row to row. Similarity and experimental columns blank on
 * every row, and Source / Extra Info columns that hold the same text on
 * every row, are folded: not columns, but one note above the table
 * (returned in `folded`, column → text). `pinned` is how many leading
 * columns (with "#") stay in view when the table scrolls sideways.
 */
export function displayColumns(cols, rows, ranges) {
  const values = cols.filter((c, i) => i + 1 < cols.length && cols[i + 1] === "Source " + targetOf(cols, i));
  const sims = cols.filter((c) => SIMILARITY_COL.test(c));
  const meta = cols.filter((c) => /^(Source|Extra Info) /.test(c));
  const unc = cols.filter((c) => UNCERTAINTY_COL.test(c));
  // Each range column's midpoint and experimental columns, in that order.
  const beside = {};
  values.forEach((v) => {
    const r = rangeOf(ranges, v);
    if (r) beside[v] = [r.midpointColumn, r.experimentalColumn].filter((c) => typeof c === "string" && cols.includes(c));
  });
  const derived = [].concat(...Object.values(beside));
  const input = cols.filter((c) => !values.includes(c) && !sims.includes(c) && !meta.includes(c) && !unc.includes(c) && !derived.includes(c));
  const name = input.find((c) => NAME_COL.test(c.trim()));
  const seq = input.find((c) => SEQUENCE_COL.test(c));
  const sub = input.find((c) => SUBSTRATE_COL.test(c));
  const enzyme = name || seq;
  const identity = [enzyme, sub].filter(Boolean);

  const folded = {};
  const fold = (c, text) => { folded[c] = text; };
  sims.forEach((c) => { if (rows.every((r) => blank(r[c]))) fold(c, ""); });
  // No experimental value anywhere (no look-up asked, or none found).
  values.forEach((v) => {
    const e = (rangeOf(ranges, v) || {}).experimentalColumn;
    if (derived.includes(e) && rows.every((r) => blank(r[e]))) fold(e, "");
  });
  // A one-row result has nothing to fold; a list cell (substrates,
  // candidates) is the row's own detail even when it repeats.
  meta.forEach((c) => {
    const first = rows.length ? rows[0][c] : "";
    if (rows.length > 1 && !String(first).startsWith("[") && rows.every((r) => r[c] === first)) fold(c, blank(first) ? "" : String(first));
  });

  const order = ["#"].concat(identity);
  values.forEach((v, k) => {
    order.push(v);
    const t = targetOf(cols, cols.indexOf(v));
    const total = uncertaintyCol(t, "total");
    if (unc.includes(total)) order.push(total);
    (beside[v] || []).forEach((c) => { if (!(c in folded)) order.push(c); });
    void k;
  });
  const shown = new Set(order);
  const restOf = (list) => list.filter((c) => !shown.has(c) && !(c in folded));
  const rest = restOf(sims).concat(restOf(meta), restOf(input), restOf(unc));
  return { order: order.concat(rest), values, identity, enzyme, sequence: seq, substrate: sub, folded, pinned: 1 + identity.length };
}
