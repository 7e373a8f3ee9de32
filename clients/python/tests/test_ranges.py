"""Range classes (a method that answers a class of kcat or Km, not a value), against a result in the
server's shape: each range column an ordered Categorical of its classes, NaN for a blank; a
per-substrate Km cell a list of class texts; the midpoint a float; ``df.attrs["range_classes"]``;
the plot's count per class; ``MethodInfo.range_classes``."""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import httpx
import pandas as pd
import pytest
from conftest import Stack, input_rows
from test_wire import Recorder, make_client

import kinflow_client
from kinflow_client import Client, SyntheticResultWarning
from kinflow_client import _client as client_mod
from kinflow_client._core import _methods_from_json
from kinflow_client._results import range_columns, result_frame

KCAT = "Predicted kcat range: kcat (1/s)"
KM = "Predicted KM range: kM (M)"
KCAT_MID, KM_MID = "Derived kcat range midpoint (1/s)", "Derived KM range midpoint (M)"
KCAT_EXP, KM_EXP = "Experimental kcat (1/s)", "Experimental KM (source units)"
KCAT_CLASSES = ["0 to 1e-08 s^-1", "1e-08 to 0.01 s^-1", "0.01 to 0.1 s^-1", "0.1 to 1 s^-1",
                "1 to 10 s^-1", "10 to 100 s^-1", "100 to 1000 s^-1", "1000 to 1e+08 s^-1"]  # fmt: skip
KCAT_MIDS = [5e-09, 1e-05, 0.03162277660168379, 0.31622776601683794, 3.1622776601683795,
             31.622776601683793, 316.22776601683796, 316227.7660168379]  # fmt: skip
KM_CLASSES = ["1e-14 to 1e-05 M", "1e-05 to 0.0001 M", "0.0001 to 0.001 M", "0.001 to 0.01 M",
              "0.01 to 0.1 M", "0.1 to 10000 M"]  # fmt: skip
KM_MIDS = [3.1622776601683794e-10, 3.1622776601683795e-05, 0.00031622776601683794, 0.0031622776601683794,
           0.031622776601683791, 31.622776601683793]  # fmt: skip
NOTE = ("A predicted range class (from low to high, in the unit shown), not a confidence interval or an error "
        "bound: read it as a category, never as a number.")  # fmt: skip
SYN = "Synthetic placeholder from Method K (not a prediction)"


def _row(kcat: int | None, km: int | None, **extra: Any) -> dict[str, Any]:
    return {
        KCAT: None if kcat is None else KCAT_CLASSES[kcat], "Source kcat": SYN, "Extra Info kcat": None,
        KCAT_MID: None if kcat is None else KCAT_MIDS[kcat], KCAT_EXP: None,
        KM: None if km is None else KM_CLASSES[km], "Source Km": SYN, "Extra Info Km": None,
        KM_MID: None if km is None else KM_MIDS[km], KM_EXP: None,
        "Protein Sequence": "MKTAYIAKQR", "Substrate": "CCO", **extra,
    }  # fmt: skip


# A synthetic job of method K on kcat and Km as the server answers it: rows in classes 4, 1, 4
# and 7 of kcat (a middle class empty, as most are), a row whose kcat was measured (its range and
# midpoint blank, the value in the experimental column) and a row with no prediction.
RESULT: dict[str, Any] = {
    "jobId": "K" * 22,
    "columns": [KCAT, "Source kcat", "Extra Info kcat", KCAT_MID, KCAT_EXP,
                KM, "Source Km", "Extra Info Km", KM_MID, KM_EXP, "Protein Sequence", "Substrate"],
    "rowCount": 6,
    "data": [
        _row(4, 2), _row(1, 0), _row(4, 5), _row(7, 2),
        _row(None, 3, **{"Source kcat": "BRENDA", "Extra Info kcat": "Experimental value from BRENDA", KCAT_EXP: 42.0}),
        _row(None, None, **{"Source kcat": "Prediction could not be made", "Source Km": "No prediction"}),
    ],
    "columnNotes": {KCAT: NOTE, KM: NOTE},
    "rangeClasses": {
        KCAT: {"target": "kcat", "unit": "s^-1", "classes": KCAT_CLASSES, "midpoints": KCAT_MIDS,
               "midpointColumn": KCAT_MID, "experimentalColumn": KCAT_EXP},
        KM: {"target": "Km", "unit": "M", "classes": KM_CLASSES, "midpoints": KM_MIDS,
             "midpointColumn": KM_MID, "experimentalColumn": KM_EXP},
    },
    "synthetic": True,
    "charge": {"rowsCharged": 6, "rowsRefunded": 1, "cachedRowsRefunded": 0},
}  # fmt: skip


def frame(payload: dict[str, Any] | None = None) -> pd.DataFrame:
    return result_frame(copy.deepcopy(payload or RESULT), base_url="http://kinflow.test")


def test_range_column_is_an_ordered_categorical_of_its_classes() -> None:
    df = frame()
    col = df[KCAT]
    assert isinstance(col.dtype, pd.CategoricalDtype) and col.dtype.ordered
    assert list(col.cat.categories) == KCAT_CLASSES and list(df[KM].cat.categories) == KM_CLASSES
    assert col.tolist()[:4] == [KCAT_CLASSES[4], KCAT_CLASSES[1], KCAT_CLASSES[4], KCAT_CLASSES[7]]
    # The measured row and the row without a prediction: NaN, not a class.
    assert col.isna().tolist() == [False] * 4 + [True, True] and math.isnan(col.iloc[4]) and col.cat.codes.iloc[5] == -1
    # Ordered: comparisons and sorting follow the classes, not the texts' spelling.
    assert (col < "10 to 100 s^-1").tolist() == [True, True, True, False, False, False]
    assert df.sort_values(KCAT)[KCAT].tolist()[:4] == [KCAT_CLASSES[i] for i in (1, 4, 4, 7)]
    assert col.max() == KCAT_CLASSES[7]
    # The midpoint stays a float, NaN where there is no class; the experimental value a float.
    assert df[KCAT_MID].dtype == "float64" and df[KCAT_MID].tolist()[:4] == [KCAT_MIDS[i] for i in (4, 1, 4, 7)]
    assert df[KCAT_MID].isna().tolist() == [False] * 4 + [True, True]
    assert df[KCAT_EXP].dtype == "float64" and df[KCAT_EXP].iloc[4] == 42.0 and df[KCAT_EXP].isna().sum() == 5
    # Sorting by the midpoint gives the same order as by the class.
    assert df.sort_values(KCAT_MID).index.tolist()[:4] == df.sort_values(KCAT).index.tolist()[:4]
    assert df["Source kcat"].iloc[4] == "BRENDA" and df["Extra Info kcat"].iloc[0] == ""


def test_attrs_keep_the_range_classes_in_one_spelling() -> None:
    df = frame()
    assert df.attrs["range_classes"] == RESULT["rangeClasses"] and "rangeClasses" not in df.attrs
    assert df.attrs["column_notes"][KCAT] == NOTE and df.attrs["synthetic"] is True
    assert range_columns(df) == {KCAT: KCAT_CLASSES, KM: KM_CLASSES}
    # A result without range columns: none, and its columns as before.
    plain = {k: v for k, v in RESULT.items() if k != "rangeClasses"}
    df = frame(plain)
    assert df.attrs["range_classes"] == {} and range_columns(df) == {} and df[KCAT].dtype == object


def test_per_substrate_km_cells_stay_lists_of_class_texts() -> None:
    payload = copy.deepcopy(RESULT)
    # A row of two substrates: the Km range a JSON list of texts (null for one without a class);
    # the server then sends the whole midpoint column as text.
    payload["data"][0][KM] = f'["{KM_CLASSES[1]}",null]'
    for row in payload["data"]:
        row[KM_MID] = None if row[KM_MID] is None else repr(row[KM_MID])
    payload["data"][0][KM_MID] = f"[{KM_MIDS[1]!r},null]"
    df = frame(payload)
    km = df[KM]
    assert km.dtype == object
    assert km.iloc[0] == [KM_CLASSES[1], None] and km.iloc[1] == KM_CLASSES[0] and km.iloc[5] is None
    # kcat has no list: still a Categorical.
    assert isinstance(df[KCAT].dtype, pd.CategoricalDtype)
    # The plot counts each substrate's class.
    pytest.importorskip("matplotlib")
    ax = kinflow_client.plot_result(df).get_axes()[1]
    assert _counts(ax, len(KM_CLASSES)) == [1, 1, 1, 1, 0, 1]


def _counts(ax: Any, n: int) -> list[int]:
    """The height of each class's stacked bar."""
    totals = [0.0] * n
    for bars in ax.containers:
        for i, p in enumerate(bars):
            totals[i] += p.get_height()
    return [int(t) for t in totals]


def test_plot_counts_rows_per_class() -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = kinflow_client.plot_result(frame())
    kcat_ax, km_ax = fig.get_axes()
    for ax, classes, counts in (
        (kcat_ax, KCAT_CLASSES, [0, 1, 0, 0, 2, 0, 0, 1]),
        (km_ax, KM_CLASSES, [1, 0, 2, 1, 0, 1]),
    ):
        # One bar per class in class order, a class no row has at 0; the class texts on the x axis.
        assert ax.get_xscale() == "linear" and len(ax.containers) == 1 and len(ax.containers[0]) == len(classes)
        assert [t.get_text() for t in ax.get_xticklabels()] == classes
        assert _counts(ax, len(classes)) == counts
        assert [t.get_text() for t in ax.texts if t.get_text().isdigit()] == [str(n) for n in counts]
        # Synthetic: hatched and watermarked; whole counts on the y axis.
        assert all(p.get_hatch() == "//" for p in ax.patches)
        assert any(t.get_text() == "SYNTHETIC" for t in ax.texts)
        assert all(float(v).is_integer() for v in ax.get_yticks()) and ax.get_legend() is None
    assert "SYNTHETIC" in fig.texts[0].get_text()
    # One legend for the range panels, below them, naming the synthetic source.
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [SYN] and legend.legend_handles[0].get_hatch() == "//"
    title = " ".join(kcat_ax.get_title().split())
    assert title.startswith("kcat range class") and "4 values in 8 classes" in title, title
    assert "2 rows without a class (1 with an experimental value)" in title, title
    assert kcat_ax.get_xlabel() == f"{KCAT} (class)" and kcat_ax.get_ylabel() == "rows"
    # The legend covers no bar nor any axes' labels, and stays inside the figure.
    agg = FigureCanvasAgg(fig)
    agg.draw()
    renderer = agg.get_renderer()
    leg = legend.get_window_extent(renderer)
    assert leg.x0 >= 0 and leg.x1 <= fig.bbox.x1 and leg.y0 >= 0 and leg.y1 <= fig.bbox.y1, (leg, fig.bbox)
    for ax in (kcat_ax, km_ax):
        assert not leg.overlaps(ax.get_tightbbox(renderer)), (ax.get_title(), leg)
        for p in ax.patches:
            if p.get_height() > 0:
                assert not leg.overlaps(p.get_window_extent(renderer)), (ax.get_title(), leg)


def test_job_result_and_methods_end_to_end() -> None:
    c, _ = make_client(Recorder({"/api/v1/result/": [lambda r: httpx.Response(200, json=RESULT)]}))
    with pytest.warns(SyntheticResultWarning):
        df = client_mod.Job(c, "K" * 22).result()
    assert isinstance(df[KCAT].dtype, pd.CategoricalDtype) and list(df[KCAT].cat.categories) == KCAT_CLASSES
    assert df.attrs["range_classes"][KCAT]["midpointColumn"] == KCAT_MID

    edges = [0, 1e-8, 1e-2, 0.1, 1, 10, 100, 1000, 1e8]
    kcat = {"unit": "s^-1", "edges": edges, "classes": KCAT_CLASSES, "midpoints": KCAT_MIDS}
    body = {
        "methods": {
            "kcat": [
                {"id": "B", "displayName": "Method B", "inputFormat": "single", "rangeClasses": None},
                {"id": "K", "displayName": "Method K", "inputFormat": "single",
                 "rangeClasses": {"kcat": kcat, "Km": {"unit": "M", "classes": KM_CLASSES}}},
            ]
        }
    }  # fmt: skip
    b, k = _methods_from_json(body)
    assert b.range_classes is None and not b.gives_range
    assert k.gives_range and k.range_classes is not None and k.range_classes["classes"] == KCAT_CLASSES


def test_range_classes_from_a_real_stack(stack: Stack) -> None:
    """Method K on the synthetic stack: its /methods/ entry names the classes, and the result's
    range columns are Categoricals of exactly those classes, each row's class that of its midpoint."""
    c = Client(stack.url, stack.key)
    info = {(m.target, m.id): m for m in c.methods()}
    assert info[("kcat", "K")].gives_range and not info[("kcat", "B")].gives_range
    kcat_rc, km_rc = info[("kcat", "K")].range_classes, info[("Km", "K")].range_classes
    assert kcat_rc is not None and km_rc is not None and kcat_rc["classes"] == KCAT_CLASSES
    job = c.submit(input_rows(8, seed=51), methods={"kcat": "K", "Km": "K"})
    job.wait(progress=False, timeout=180)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntheticResultWarning)
        df = job.result()
    assert set(df.attrs["range_classes"]) == {KCAT, KM}
    for col, mid, rc in ((KCAT, KCAT_MID, kcat_rc), (KM, KM_MID, km_rc)):
        assert isinstance(df[col].dtype, pd.CategoricalDtype) and df[col].dtype.ordered
        assert list(df[col].cat.categories) == rc["classes"] and df[col].notna().all()
        assert df[mid].dtype == "float64"
        # Each row's class is the class of its midpoint.
        assert [rc["midpoints"][code] for code in df[col].cat.codes] == df[mid].tolist()
    pytest.importorskip("matplotlib")
    fig = kinflow_client.plot_result(df)
    assert [a.get_title().split("\n")[0] for a in fig.get_axes()] == ["kcat range class", "Km range class"]
    assert sum(_counts(fig.get_axes()[0], len(KCAT_CLASSES))) == 8
