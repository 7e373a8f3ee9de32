"""Turning the API's inputs and results into bytes and DataFrames (pandas does the CSV)."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Union

import pandas as pd

#: What submit() and validate() accept as input rows.
InputData = Union[pd.DataFrame, str, "os.PathLike[str]", Sequence[Mapping[str, Any]]]

_TEXT_PREFIXES = ("Source ", "Extra Info ")

# The result's extra columns with a method's uncertainty, after every other
# column: "Uncertainty <target> total (SD, log10)", then its aleatoric and
# epistemic parts, as standard deviations of log10 of the value.
UNCERTAINTY_PREFIX = "Uncertainty "

# Where a server puts notes about result columns (why the similarity columns
# are blank, their unit): {"column name": "note"}. Read defensively: a server
# without it, or with another shape, leaves df.attrs["column_notes"] empty.
COLUMN_NOTES_FIELD = "columnNotes"


def example_frame() -> pd.DataFrame:
    """A small input frame that travels with the package: 3 enzymes by 4 substrates.

    The columns are the API's (``Protein Sequence``, ``Substrate``) and a
    ``Name`` that the result keeps, so ``client.submit(example_frame(),
    targets="kcat", methods="B")`` works from anywhere, without a checkout.
    """
    text = resources.files("kinflow_client").joinpath("data/example.csv").read_text(encoding="utf-8")
    frame: pd.DataFrame = pd.read_csv(io.StringIO(text))
    return frame


def value_columns(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """The predicted-value columns of a result: (target, value column, Source column) each.

    A result puts each target's value column right before its ``Source <target>``.
    """
    cols = [str(c) for c in df.columns]
    out: list[tuple[str, str, str]] = []
    for i, c in enumerate(cols):
        if c.startswith("Source ") and i > 0 and not cols[i - 1].startswith(_TEXT_PREFIXES):
            out.append((c[len("Source ") :], cols[i - 1], c))
    return out


def uncertainty_columns(df: pd.DataFrame, target: str) -> list[str]:
    """A target's uncertainty columns (total first, then its parts); empty when the method gives none."""
    head = f"{UNCERTAINTY_PREFIX}{target} "
    return [str(c) for c in df.columns if str(c).startswith(head)]


def _column_notes(payload: Mapping[str, Any]) -> dict[str, str]:
    notes = payload.get(COLUMN_NOTES_FIELD)
    if isinstance(notes, Mapping):
        return {str(k): str(v) for k, v in notes.items() if isinstance(v, str) and v}
    if isinstance(notes, list):
        out: dict[str, str] = {}
        for n in notes:
            if isinstance(n, Mapping) and isinstance(n.get("column"), str) and isinstance(n.get("note"), str):
                out[n["column"]] = n["note"]
        return out
    return {}


def input_csv(data: InputData) -> tuple[str, bytes]:
    """The upload's file name and CSV bytes for a DataFrame, a CSV path or a list of dicts."""
    if isinstance(data, pd.DataFrame):
        return "input.csv", data.to_csv(index=False).encode("utf-8")
    if isinstance(data, (str, os.PathLike)):
        p = Path(data)
        return p.name, p.read_bytes()
    if isinstance(data, Sequence) and not isinstance(data, (bytes, bytearray)):
        if not all(isinstance(r, Mapping) for r in data):
            raise TypeError("a list input must hold one dict per row (column name -> value)")
        frame = pd.DataFrame.from_records([dict(r) for r in data if isinstance(r, Mapping)])
        return "input.csv", frame.to_csv(index=False).encode("utf-8")
    raise TypeError(f"input must be a pandas DataFrame, a CSV path or a list of dicts, not {type(data).__name__}")


def _missing(v: Any) -> bool:
    # The reference deployment sends blanks as the bare JSON token NaN
    # (Python's json reads it as float('nan')); kinflow sends null.
    return v is None or (isinstance(v, float) and math.isnan(v))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def result_frame(payload: Mapping[str, Any], *, base_url: str) -> pd.DataFrame:
    """The DataFrame of a JSON result (kinflow's null or the reference's NaN for blanks).

    Numeric columns are float64 with NaN for blanks (a column of whole numbers
    with no blank stays int64), the ``Source …`` and ``Extra Info …`` columns
    are strings ("" for blank), other text columns keep NaN for blanks as
    ``pandas.read_csv`` does. Everything beside the rows goes to ``df.attrs``,
    with ``column_notes`` (column → note from the server) and
    ``similarity_note`` (why the similarity columns are blank, when they are).
    """
    columns = payload.get("columns")
    data = payload.get("data")
    if not isinstance(columns, list) or not isinstance(data, list):
        raise ValueError("the result has no 'columns' and 'data' lists")
    cols = [str(c) for c in columns]
    series: dict[str, pd.Series[Any]] = {}
    for c in cols:
        values = [row.get(c) if isinstance(row, Mapping) else None for row in data]
        present = [v for v in values if not _missing(v)]
        if c.startswith(_TEXT_PREFIXES):
            series[c] = pd.Series(["" if _missing(v) else str(v) for v in values], dtype=str)
        elif all(_is_number(v) for v in present):
            if present and len(present) == len(values) and all(isinstance(v, int) for v in present):
                series[c] = pd.Series(values, dtype="int64")
            else:
                floats: list[float] = [math.nan if _missing(v) else float(v or 0) for v in values]
                series[c] = pd.Series(floats, dtype="float64")
        else:
            series[c] = pd.Series([None if _missing(v) else v for v in values], dtype=object)
    frame: pd.DataFrame = pd.DataFrame(series, columns=cols)
    # One spelling per key, the documented one: the payload's camelCase keys
    # that have a snake_case name here (jobId → job_id, columnNotes →
    # column_notes) are kept under that name only.
    attrs: dict[str, Any] = {k: v for k, v in payload.items() if k not in ("data", "jobId", "columnNotes")}
    attrs["job_id"] = payload.get("jobId")
    attrs["synthetic"] = payload.get("synthetic") is True
    attrs["source"] = base_url
    notes = _column_notes(payload)
    attrs["column_notes"] = notes
    # The similarity columns' note on its own, the first place a reader looks.
    sim = [v for k, v in notes.items() if "similarity" in k.lower()]
    attrs["similarity_note"] = sim[0] if sim else None
    frame.attrs.update(attrs)
    return frame
