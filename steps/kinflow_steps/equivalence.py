"""Numerical equivalence of two artefacts: the bound every step must meet against an
independent computation at the reference's precision, and the check
``kinflow cache verify`` repeats in Go with the same numbers.

* pooled vectors ``[D]``: cosine similarity >= POOLED_MIN_COSINE (0.9999);
* residue matrices ``[L, D]``: the cosine of every residue row >= RESIDUE_MIN_COSINE
  (0.999);
* the lengths agree: |‖a‖ − ‖b‖| / max(‖a‖, ‖b‖) <= POOLED_MAX_NORM_DIFF (0.01) for
  pooled vectors and RESIDUE_MAX_NORM_DIFF (0.05) per residue row, so that a scaled
  file (sums where the family holds means) fails, as ``kinflow cache verify`` rules;
* no NaN or infinity in either array, and the same shape.

Cosine is computed in float64. Two all-zero vectors are equal (cosine 1); a zero
vector against a non-zero one has cosine 0.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

POOLED_MIN_COSINE = 0.9999
RESIDUE_MIN_COSINE = 0.999
POOLED_MAX_NORM_DIFF = 0.01
RESIDUE_MAX_NORM_DIFF = 0.05


@dataclass
class Report:
    """The outcome of one comparison; ``ok`` is the verdict, ``reason`` says why not."""

    kind: str  # "pooled" or "residue"
    shape: tuple[int, ...]
    min_cosine: float
    mean_cosine: float
    worst_row: int  # the residue row of min_cosine (0 for pooled vectors)
    max_abs_diff: float
    bound: float
    nonfinite: int  # non-finite values in a and b together
    ok: bool
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def _as_array(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().to("cpu").float().numpy()
    return np.asarray(x)


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of each row of a with the same row of b (float64, 2-D)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    dot = (a * b).sum(axis=-1)
    na = np.sqrt((a * a).sum(axis=-1))
    nb = np.sqrt((b * b).sum(axis=-1))
    both_zero = (na == 0) & (nb == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(na * nb > 0, dot / (na * nb), 0.0)
    return np.where(both_zero, 1.0, cos)


def compare(a: Any, b: Any, kind: str | None = None) -> Report:
    """Compare artefact a (the program's) with b (the independent computation).
    kind: ``pooled`` (1-D) or ``residue`` (2-D); default from a's shape."""
    x = _as_array(a)
    y = _as_array(b)
    if kind is None:
        kind = "pooled" if x.ndim == 1 else "residue"
    bound = POOLED_MIN_COSINE if kind == "pooled" else RESIDUE_MIN_COSINE
    shape = tuple(int(n) for n in x.shape)
    nonfinite = int((~np.isfinite(x)).sum() + (~np.isfinite(y)).sum()) if x.size + y.size else 0
    if x.shape != y.shape:
        return Report(kind, shape, math.nan, math.nan, 0, math.nan, bound, nonfinite, False,
                      f"shape {list(x.shape)} != {list(y.shape)}")  # fmt: skip
    want_ndim = 1 if kind == "pooled" else 2
    if x.ndim != want_ndim:
        return Report(kind, shape, math.nan, math.nan, 0, math.nan, bound, nonfinite, False,
                      f"a {kind} artefact has {want_ndim} dimension(s), not {x.ndim}")  # fmt: skip
    if nonfinite:
        return Report(kind, shape, math.nan, math.nan, 0, math.nan, bound, nonfinite, False,
                      f"{nonfinite} non-finite value(s)")  # fmt: skip
    rows_a = x.reshape(1, -1) if kind == "pooled" else x
    rows_b = y.reshape(1, -1) if kind == "pooled" else y
    if rows_a.shape[0] == 0:
        return Report(kind, shape, math.nan, math.nan, 0, 0.0, bound, 0, False, "no rows")
    cos = row_cosines(rows_a, rows_b)
    worst = int(np.argmin(cos))
    lo = float(cos[worst])
    diff = float(np.abs(rows_a.astype(np.float64) - rows_b.astype(np.float64)).max())
    ok = lo >= bound
    reason = "" if ok else f"cosine {lo:.6f} < {bound}" + (f" at residue {worst}" if kind == "residue" else "")
    if ok:
        na = np.sqrt((rows_a.astype(np.float64) ** 2).sum(axis=-1))
        nb = np.sqrt((rows_b.astype(np.float64) ** 2).sum(axis=-1))
        top = np.maximum(na, nb)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.where(top > 0, np.abs(na - nb) / top, 0.0)
        norm_bound = POOLED_MAX_NORM_DIFF if kind == "pooled" else RESIDUE_MAX_NORM_DIFF
        far = int(np.argmax(rel))
        if float(rel[far]) > norm_bound:
            ok = False
            reason = f"length differs by {float(rel[far]):.4f} > {norm_bound} (relative)" + (
                f" at residue {far}" if kind == "residue" else ""
            )
    return Report(kind, shape, lo, float(cos.mean()), worst, diff, bound, 0, ok, reason)


def load_artefact(path: str) -> np.ndarray:
    """An artefact file as a NumPy array: ``.npy`` (no pickles) or a ``.pt`` tensor."""
    if path.endswith(".pt"):
        import torch

        return _as_array(torch.load(path, map_location="cpu", weights_only=True))
    return np.load(path, allow_pickle=False)


def compare_files(path_a: str, path_b: str, kind: str | None = None) -> Report:
    """compare() on two artefact files."""
    return compare(load_artefact(path_a), load_artefact(path_b), kind)


def main(argv: list[str] | None = None) -> int:
    """``python -m kinflow_steps.equivalence A B [--kind pooled|residue]``: one JSON
    report line; exit 0 within the bound, 1 outside it, 2 on an unreadable file."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(prog="python -m kinflow_steps.equivalence", description=main.__doc__.split(":")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--kind", choices=["pooled", "residue"])
    args = ap.parse_args(argv)
    try:
        rep = compare_files(args.a, args.b, args.kind)
    except (OSError, ValueError, RuntimeError) as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 2
    print(json.dumps(rep.as_dict()))
    sys.stdout.flush()
    return 0 if rep.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
