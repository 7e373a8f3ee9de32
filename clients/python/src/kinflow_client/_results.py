"""Turning the API's inputs and results into bytes and DataFrames (pandas does the CSV)."""

from __future__ import annotations

import io
import json
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

# Where a server describes the result's range columns (a method that answers
# a range class, not a value): {"range column": {"target", "classes" (in
# ascending order), "midpoints", "midpointColumn", "experimentalColumn", ...}}.
# Absent when the job has no such method.
RANGE_CLASSES_FIELD = "rangeClasses"


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


def range_classes(payload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The result's range columns, each with its description (``classes`` a list of texts);
    an entry of another shape is left out."""
    ranges = payload.get(RANGE_CLASSES_FIELD)
    if not isinstance(ranges, Mapping):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for col, desc in ranges.items():
        if not isinstance(desc, Mapping):
            continue
        classes = desc.get("classes")
        if isinstance(classes, list) and classes and all(isinstance(c, str) for c in classes):
            out[str(col)] = dict(desc)
    return out


def range_columns(df: pd.DataFrame) -> dict[str, list[str]]:
    """A result frame's range columns (from ``df.attrs["range_classes"]``), each with its classes in order."""
    ranges = df.attrs.get("range_classes")
    if not isinstance(ranges, Mapping):
        return {}
    return {
        str(c): [str(x) for x in d["classes"]]
        for c, d in ranges.items()
        if str(c) in df.columns and isinstance(d, Mapping) and isinstance(d.get("classes"), list)
    }


def _range_series(values: list[Any], classes: list[str]) -> pd.Series[Any]:
    """A range column: an ordered Categorical of its class texts (NaN for a blank). With a
    per-substrate cell (a JSON list of class texts or null) the column is objects instead: such a
    cell becomes a list of texts and None, another cell its text, a blank None. A cell that names
    no class leaves the column as text (objects), never read as a number."""
    present = [v for v in values if not _missing(v)]
    if all(isinstance(v, str) and v in classes for v in present):
        cat = pd.Categorical([None if _missing(v) else v for v in values], categories=classes, ordered=True)
        series: pd.Series[Any] = pd.Series(cat)
        return series
    cells: list[Any] = []
    for v in values:
        if _missing(v):
            cells.append(None)
            continue
        text = str(v)
        if text.startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                items = None
            if isinstance(items, list):
                cells.append([None if x is None else str(x) for x in items])
                continue
        cells.append(text)
    objects: pd.Series[Any] = pd.Series(cells, dtype=object)
    return objects


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
    ``pandas.read_csv`` does. A range column (a key of the result's
    ``rangeClasses``: a method that answers a range class, such as
    ``Predicted kcat range: kcat (1/s)``) is an ordered pandas Categorical
    whose categories are its classes in ascending order, NaN for a blank; a
    class is a range, not a number or an interval around one. When the
    column holds a per-substrate Km cell (a JSON list of class texts or
    null), it is an object column instead: such a cell becomes a list of
    class texts and None, another cell its text. The midpoint column beside
    it is float like any number column. Everything beside the rows goes to
    ``df.attrs``, with ``column_notes`` (column → note from the server),
    ``similarity_note`` (why the similarity columns are blank, when they
    are) and ``range_classes`` (the result's ``rangeClasses``, {} without
    range columns).
    """
    columns = payload.get("columns")
    data = payload.get("data")
    if not isinstance(columns, list) or not isinstance(data, list):
        raise ValueError("the result has no 'columns' and 'data' lists")
    cols = [str(c) for c in columns]
    ranges = range_classes(payload)
    series: dict[str, pd.Series[Any]] = {}
    for c in cols:
        values = [row.get(c) if isinstance(row, Mapping) else None for row in data]
        present = [v for v in values if not _missing(v)]
        if c in ranges:
            series[c] = _range_series(values, [str(x) for x in ranges[c]["classes"]])
        elif c.startswith(_TEXT_PREFIXES):
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
    # column_notes, rangeClasses → range_classes) are kept under that name only.
    attrs: dict[str, Any] = {
        k: v for k, v in payload.items() if k not in ("data", "jobId", COLUMN_NOTES_FIELD, RANGE_CLASSES_FIELD)
    }
    attrs["job_id"] = payload.get("jobId")
    attrs["synthetic"] = payload.get("synthetic") is True
    attrs["source"] = base_url
    notes = _column_notes(payload)
    attrs["column_notes"] = notes
    # The similarity columns' note on its own, the first place a reader looks.
    sim = [v for k, v in notes.items() if "similarity" in k.lower()]
    attrs["similarity_note"] = sim[0] if sim else None
    raw_ranges = payload.get(RANGE_CLASSES_FIELD)
    attrs["range_classes"] = dict(raw_ranges) if isinstance(raw_ranges, Mapping) else {}
    frame.attrs.update(attrs)
    return frame
