"""The scientist's second look at the client: one bar for the whole job driven by the
status's ``overall`` (percentage and the server's ETA, shown only once the server gives one), the
``overall`` sentence in ``status``, warnings that name the caller's line, one spelling per
``df.attrs`` key, and a plot whose saved image keeps its title."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import pytest
from test_wire import Recorder, make_client, reference_json, status_body

from kinflow_client import SyntheticResultWarning
from kinflow_client import _client as client_mod


def overall(percent: float, text: str, eta: int | None, phase: str = "predicting", stage: int = 1) -> dict[str, object]:
    return {"percent": percent, "etaSeconds": eta, "phase": phase, "rows": 3, "sequences": 3,
            "stage": stage, "stages": 2, "text": text}  # fmt: skip


# A two-stage job as the server reports it: each stage's own counters restart
# (kcat 3/3, then Km 0/3), the whole job's percentage does not.
STATUSES = [
    status_body("two", "Pending", overall=overall(0, "Queued, position 1: 3 rows.", None, "queued")),
    status_body("two", "Processing", overall=overall(10, "10% · stage 1 of 2 (kcat, Method B): predicting, 1 of 3 "
                                                            "predictions made · 3 rows.", None)),
    status_body("two", "Processing", overall=overall(50, "50% · stage 2 of 2 (Km, Method B): starting · 3 rows · "
                                                            "about 20 s left.", 20, "preparing", 2)),
    status_body("two", "Processing", overall=overall(75, "75% · stage 2 of 2 (Km, Method B): predicting, 1 of 3 "
                                                            "predictions made · 3 rows · about 9 s left.", 9, stage=2)),
    status_body("two", "Completed", overall=overall(100, "Completed in 31 s: 3 rows, 2 stages.", 0, "completed", 2),
                charge={"rowsCharged": 3, "rowsRefunded": 1, "cachedRowsRefunded": 1}, synthetic=True),
]  # fmt: skip


def test_one_bar_for_the_whole_job_driven_by_overall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_mod.time, "sleep", lambda s: None)
    answers = [lambda r, b=b: reference_json(b) for b in STATUSES]
    c, _ = make_client(Recorder({"/api/v1/status/": answers}))
    buf = io.StringIO()
    st = client_mod.Job(c, "two").wait(progress=True, file=buf)
    assert st.status == "Completed" and st.overall is not None and st.overall.percent == 100
    frames = [f for f in re.split(r"[\r\n]+", buf.getvalue()) if f.strip()]
    percents = [int(m.group(1)) for f in frames if (m := re.search(r":\s+(\d+)%\|", f))]
    # One bar (one description), its percentage the job's: it never goes back
    # when the second stage starts, and ends at 100.
    assert {f.split(":")[0].strip() for f in frames} == {"job two"}, frames
    assert percents == sorted(percents) and percents[-1] == 100 and 50 in percents and 75 in percents, percents
    by_pct = {int(m.group(1)): f for f in frames if (m := re.search(r":\s+(\d+)%\|", f))}
    # The server's ETA, only once it gives one; none on a finished job.
    assert "ETA" not in by_pct[10] and "about" not in by_pct[10], by_pct[10]
    assert "ETA 0:20" in by_pct[50] and "stage 2 of 2 (Km, Method B)" in by_pct[50], by_pct[50]
    assert "ETA" not in by_pct[100] and "Completed in 31 s" in by_pct[100] and "synthetic" in by_pct[100]
    # The status says the whole job too.
    assert "Completed in 31 s: 3 rows, 2 stages." in repr(st)
    assert st.charge_line == "charged 3 rows, refunded 1 (1 from the prediction cache): 2 rows from the daily quota"


def test_cli_status_prints_overall_and_charge(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kinflow_client import cli

    c, _ = make_client(Recorder({"/api/v1/status/": [lambda r: reference_json(STATUSES[-1])]}))
    monkeypatch.setattr(cli, "Client", lambda *a, **k: c)
    assert cli.main(["status", "two"]) == 0
    out = capsys.readouterr().out
    assert "Completed in 31 s: 3 rows, 2 stages." in out and "charged 3 rows, refunded 1" in out, out


SYNTHETIC_RESULT = {
    "jobId": "J" * 22, "columns": ["kcat (1/s)", "Source kcat", "Extra Info kcat", "Protein Sequence"], "rowCount": 3,
    "columnNotes": {"Protein Sequence": "as given"}, "synthetic": True,
    "charge": {"rowsCharged": 3, "rowsRefunded": 0, "cachedRowsRefunded": 0},
    "data": [{"kcat (1/s)": v, "Source kcat": "Synthetic placeholder from Method B (not a prediction)",
              "Extra Info kcat": "", "Protein Sequence": "MKT"} for v in (0.5, 12.0, 300.0)],
}  # fmt: skip


def synthetic_job() -> client_mod.Job:
    c, _ = make_client(Recorder({"/api/v1/result/": [lambda r: httpx.Response(200, json=SYNTHETIC_RESULT)]}))
    return client_mod.Job(c, "J" * 22)


def test_warnings_point_at_the_callers_line() -> None:
    job = synthetic_job()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        job.result()
        pytest.importorskip("matplotlib")
        job.plot()
    synth = [w for w in got if issubclass(w.category, SyntheticResultWarning)]
    assert len(synth) == 2 and {w.filename for w in synth} == {__file__}, [(w.filename, w.lineno) for w in synth]


def test_df_attrs_one_spelling_per_key() -> None:
    with pytest.warns(SyntheticResultWarning):
        df = synthetic_job().result()
    keys = list(df.attrs)
    snake = [re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower() for k in keys]
    assert len(set(snake)) == len(keys), keys
    # The documented names (docs/python-client.md).
    assert df.attrs["job_id"] == "J" * 22 and df.attrs["column_notes"] == {"Protein Sequence": "as given"}
    assert "jobId" not in keys and "columnNotes" not in keys and df.attrs["charge"]["rowsCharged"] == 3


def test_saved_plot_keeps_its_title(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imread

    with pytest.warns(SyntheticResultWarning):
        fig = synthetic_job().plot()
    out = tmp_path / "plot.png"
    fig.savefig(out)  # as a user would: no bbox_inches
    agg = FigureCanvasAgg(fig)
    agg.draw()
    renderer = agg.get_renderer()
    title = fig._suptitle
    assert title is not None and "SYNTHETIC" in title.get_text()
    box, canvas = title.get_window_extent(renderer), fig.bbox
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= canvas.x1 and box.y1 <= canvas.y1, (box, canvas)
    for ax in fig.axes:
        t = ax.title.get_window_extent(renderer)
        assert t.y1 <= box.y0 + 1 and t.x0 >= 0 and t.x1 <= canvas.x1, (ax.title.get_text(), t, box)
    # The saved image: the title's ink lies inside it, the first rows above it blank.
    img = imread(out)
    h = img.shape[0]
    top, bottom = int(h - box.y1 * h / canvas.y1), int(h - box.y0 * h / canvas.y1)
    dark = (img[max(0, top) : bottom, :, :3].min(axis=2) < 0.5).sum()
    assert top >= 0 and dark > 50, (top, bottom, dark)


def test_notebook_extra_brings_a_kernel() -> None:
    """The ``notebook`` extra names ipykernel, so that a venv with only the extra runs a notebook
    (test_notebook.py runs one under nbclient)."""
    meta = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('kinflow-client') or []))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    notebook = [r for r in meta.stdout.splitlines() if re.search(r"extra == ['\"]notebook['\"]", r)]
    assert any(r.startswith("ipykernel") for r in notebook), notebook
