"""Turning the API's inputs and results into bytes and DataFrames (pandas does the CSV)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import pandas as pd

#: What submit() and validate() accept as input rows.
InputData = Union[pd.DataFrame, str, "os.PathLike[str]", Sequence[Mapping[str, Any]]]

_TEXT_PREFIXES = ("Source ", "Extra Info ")


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
    ``pandas.read_csv`` does. Everything beside the rows goes to ``df.attrs``.
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
    attrs: dict[str, Any] = {k: v for k, v in payload.items() if k != "data"}
    attrs["job_id"] = payload.get("jobId")
    attrs["synthetic"] = payload.get("synthetic") is True
    attrs["source"] = base_url
    frame.attrs.update(attrs)
    return frame
