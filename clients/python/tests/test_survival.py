"""The client that survives, against scripted answers (httpx.MockTransport): outages
ridden out by wait(), the re-attach line on every give-up and on Ctrl-C, per-call settings,
AsyncClient, typed timestamps, the example frame, the plot and the result's notes."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import pandas as pd
import pytest
from test_wire import REFERENCE_RESULT, Recorder, make_client, reference_json, status_body

import kinflow_client
from kinflow_client import AsyncClient, Client, Conflict, ConnectionLost
from kinflow_client import _client as client_mod


def _down(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def _fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.sleep records instead of sleeping; time.monotonic advances only by those sleeps."""
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    monkeypatch.setattr(client_mod.time, "monotonic", lambda: float(sum(slept)))
    return slept


def test_wait_rides_out_an_outage_and_gives_up_naming_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _fake_clock(monkeypatch)
    rec = Recorder({"/api/v1/status/": [_down]})
    c, retry_sleeps = make_client(rec)
    with pytest.raises(ConnectionLost) as ei:
        client_mod.Job(c, "abc").wait(progress=False, outage=300)
    msg = str(ei.value)
    # Named job, the shell line and the Python line that re-attach.
    assert "job abc" in msg and "python -m kinflow_client wait abc" in msg and "client.job('abc').wait()" in msg
    assert isinstance(ei.value, kinflow_client.APIConnectionError) and ei.value.job_id == "abc"
    # It kept trying for the whole outage budget, no longer, with growing and
    # jittered pauses bounded by the maximum.
    assert sum(slept) == pytest.approx(300) and ei.value.outage == pytest.approx(300)
    assert max(slept) <= 30.0 and len(set(slept)) > 3 and slept[0] <= 1.0
    assert len(slept) >= 10
    # Each poll also used the request's own retries (5 by default).
    assert len(rec.requests) == 6 * (len(slept) + 1) and len(retry_sleeps) == 5 * (len(slept) + 1)


def test_wait_comes_back_after_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    slept = _fake_clock(monkeypatch)
    answers = [_down] * 30 + [
        lambda r: httpx.Response(503, json={"error": "restarting"}),
        lambda r: reference_json(status_body("abc", "Processing")),
        lambda r: reference_json(status_body("abc", "Completed")),
    ]
    rec = Recorder({"/api/v1/status/": answers})
    c, _ = make_client(rec)
    c = c.with_options(max_retries=0)
    buf = io.StringIO()
    st = client_mod.Job(c, "abc").wait(file=buf)
    assert st.status == "Completed" and len(rec.requests) == 33
    assert sum(slept) > 60  # thirty failed polls did not end the wait
    assert "server unreachable" in buf.getvalue()


def test_ctrl_c_names_the_job_and_the_reattach_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(client_mod.time, "sleep", interrupt)
    rec = Recorder({"/api/v1/status/": [lambda r: reference_json(status_body("abc", "Processing"))]})
    c, _ = make_client(rec)
    with pytest.raises(KeyboardInterrupt) as ei:
        client_mod.Job(c, "abc").wait(progress=False)
    err = capsys.readouterr().err
    assert "job abc" in err and "python -m kinflow_client wait abc" in err and "client.job('abc').wait()" in err
    assert "python -m kinflow_client wait abc" in str(ei.value)


def test_settings_from_arguments_environment_and_with_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json={"limit": 5, "used": 1, "remaining": 4, "resetsInSeconds": 60})

    monkeypatch.setenv("KINFLOW_TIMEOUT", "7")
    monkeypatch.setenv("KINFLOW_MAX_RETRIES", "2")
    monkeypatch.setenv("KINFLOW_WAIT_OUTAGE", "90")
    c = Client("http://x.test", "k", transport=httpx.MockTransport(handler))
    assert (c.timeout, c.max_retries, c.wait_outage) == (7.0, 2, 90.0)
    slow = c.with_options(timeout=300, max_retries=0, wait_outage=5)
    assert (slow.timeout, slow.max_retries, slow.wait_outage) == (300.0, 0, 5.0)
    assert (c.timeout, c.max_retries, c.wait_outage) == (7.0, 2, 90.0)  # the original is unchanged
    c.quota()
    slow.quota()
    assert [t["read"] for t in seen] == [7.0, 300.0]  # type: ignore[index]
    assert Client("http://x.test", "k", timeout=11, max_retries=1).timeout == 11.0  # an argument wins
    monkeypatch.setenv("KINFLOW_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="KINFLOW_TIMEOUT"):
        Client("http://x.test", "k")


def test_timestamps_are_datetimes_and_the_charge_is_read() -> None:
    body = status_body(
        "abc", "Completed", completedAt="2026-03-04T14:31:40.5Z",
        charge={"rowsCharged": 200, "rowsRefunded": 200, "cachedRowsRefunded": 198},
    )  # fmt: skip
    st = kinflow_client.JobStatus.from_json(body)
    assert st.submitted_at is not None and st.submitted_at.isoformat() == "2026-03-04T14:30:00.123456+00:00"
    assert st.completed_at is not None and st.completed_at.microsecond == 500000
    assert (st.rows_charged, st.rows_refunded, st.cached_rows_refunded) == (200, 200, 198)
    js = kinflow_client.JobSummary.from_json({"jobId": "a", "submittedAt": "2026-03-04T14:30:00", "startedAt": None})
    assert js.submitted_at is not None and js.submitted_at.tzinfo is not None and js.started_at is None


def test_result_too_early_advises_wait() -> None:
    err = {"error": "Job 'abc' is not completed (status: Pending). Poll /api/v1/status/abc/ until it is Completed."}
    rec = Recorder({"/api/v1/result/": [lambda r: httpx.Response(409, json=err)]})
    c, _ = make_client(rec)
    with pytest.raises(Conflict) as ei:
        client_mod.Job(c, "abc").result()
    assert "job.wait()" in str(ei.value) and ei.value.status == 409


def test_validate_sends_the_chosen_targets_and_methods() -> None:
    forms: list[dict[str, list[str]]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = request.content.decode()
        fields = {}
        for part in body.split("--")[1:]:
            if 'name="' in part and "filename=" not in part:
                name = part.split('name="')[1].split('"')[0]
                fields[name] = [part.split("\r\n\r\n", 1)[1].rsplit("\r\n", 1)[0]]
        forms.append(fields)
        msg = {"row": None, "column": "x", "level": "info", "text": "All good."}
        return httpx.Response(
            200, json={"rowCount": 1, "invalidSubstrates": [], "invalidProteins": [], "messages": [msg]}
        )

    c = Client("http://x.test", "k", transport=httpx.MockTransport(handler))
    rep = c.validate([{"Protein Sequence": "MKT", "Substrate": "CCO"}], targets="kcat", methods="B")
    assert json.loads(forms[0]["targets"][0]) == ["kcat"] and json.loads(forms[0]["methods"][0]) == {"kcat": "B"}
    assert "All good." in rep.summary()
    c.validate([{"Protein Sequence": "MKT", "Substrate": "CCO"}])
    assert "targets" not in forms[1]  # without a choice: every method, as before


def test_example_frame_travels_with_the_package() -> None:
    df = kinflow_client.example_frame()
    assert list(df.columns) == ["Protein Sequence", "Substrate", "Name"] and len(df) == 12
    assert df["Protein Sequence"].str.fullmatch("[ACDEFGHIKLMNPQRSTVWY]+").all()


def test_result_notes_and_plot() -> None:
    payload = json.loads(REFERENCE_RESULT)
    payload["columns"] += ["Uncertainty kcat total (SD, log10)"]
    for row, sd in zip(payload["data"], [0.4, None, None], strict=True):
        row["Uncertainty kcat total (SD, log10)"] = sd
    payload["columnNotes"] = {"max similarity to B training data": "No similarity dataset on this server (% identity)."}
    df = kinflow_client._results.result_frame(payload, base_url="http://x")
    assert df.attrs["similarity_note"].startswith("No similarity dataset")
    assert kinflow_client._results.value_columns(df) == [
        ("kcat", "kcat (1/s)", "Source kcat"), ("Km", "KM (mM)", "Source Km")]  # fmt: skip
    fig = kinflow_client.plot_result(df)
    axes = fig.get_axes()
    # kcat has an uncertainty column: its two uncertainty panels follow the value panels; Km has none.
    assert len(axes) == 4 and axes[0].get_xscale() == "log"
    # (Titles are wrapped to the panel's width: compare them as words.)
    assert "median uncertainty ±0.40" in " ".join(axes[0].get_title().split())
    assert "SYNTHETIC" not in fig.texts[0].get_text()
    sd_ax, iv_ax = axes[2], axes[3]
    assert sd_ax.get_title().startswith(
        "kcat uncertainty\n1 rows; median total SD 0.40 log10 units (\u00d7/\u00f7 2.5)"
    )
    assert sd_ax.get_xlabel() == "total SD of log10(kcat), log10 units"
    assert sum(p.get_height() for p in sd_ax.patches) == 1
    assert [t.get_text() for t in sd_ax.get_legend().get_texts()][-1] == "median 0.4 (\u00d7/\u00f7 2.51)"
    # The one row with a value and an SD: 12.345 from 12.345 / 10**0.4 to 12.345 * 10**0.4, on a log axis.
    assert iv_ax.get_xscale() == "log" and iv_ax.get_xlabel() == "kcat (1/s) (log scale), \u00b11 total SD"
    (seg,) = iv_ax.containers[0].lines[2][0].get_segments()
    assert seg[0][0] == pytest.approx(12.345 / 10**0.4) and seg[1][0] == pytest.approx(12.345 * 10**0.4)
    assert iv_ax.get_ylabel() == "rows ranked by value"
    # Without uncertainty columns: the value panels only.
    plain = kinflow_client.plot_result(df.drop(columns=["Uncertainty kcat total (SD, log10)"]))
    assert len(plain.get_axes()) == 2 and not any("uncertainty" in a.get_title() for a in plain.get_axes()[1:])
    # Km: the array cell "[0.12,null,3.4]" gives two values; the two blank rows are counted as left out.
    assert axes[1].get_title().startswith("Km\n2 values, 2 rows blank")
    labels = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert labels == ["Prediction from Method B", "BRENDA"]
    # Synthetic: named in the title, hatched, grey.
    payload["synthetic"] = True
    fig = kinflow_client.plot_result(kinflow_client._results.result_frame(payload, base_url="http://x"))
    assert "SYNTHETIC" in fig.texts[0].get_text()
    assert all(p.get_hatch() == "//" for p in fig.get_axes()[0].patches if p.get_height() > 0)
    # ...and so are the uncertainty panels: hatched bars, dashed intervals, the watermark.
    sd_ax, iv_ax = fig.get_axes()[2], fig.get_axes()[3]
    assert all(p.get_hatch() == "//" for p in sd_ax.patches if p.get_height() > 0)
    assert iv_ax.containers[0].lines[2][0].get_linestyle()[0][1] is not None
    assert all(any(t.get_text() == "SYNTHETIC" for t in ax.texts) for ax in fig.get_axes())
    with pytest.raises(ValueError, match="no value column"):
        kinflow_client.plot_result(pd.DataFrame({"a": [1]}))


def test_async_client_has_the_same_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(_: float) -> None:
        return None

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    submitted = {"jobId": "aB3dE5g", "status": "Pending"}
    statuses = [_down] * 3 + [
        lambda r: reference_json(status_body("aB3dE5g", "Processing")),
        lambda r: reference_json(status_body("aB3dE5g", "Completed")),
    ]
    rec = Recorder(
        {
            "/api/v1/submit/": [lambda r: httpx.Response(201, json=submitted)],
            "/api/v1/status/": statuses,
            "/api/v1/result/": [lambda r: httpx.Response(200, content=REFERENCE_RESULT.encode())],
            "/api/v1/openapi.json": [lambda r: httpx.Response(404)],
        }
    )

    async def main() -> tuple[str, int, list[str]]:
        async with AsyncClient("http://x.test", "k", transport=httpx.MockTransport(rec), max_retries=0) as c:
            job = await c.submit(kinflow_client.example_frame(), targets="kcat", methods="B")
            st = await job.wait(progress=False)
            df = await job.result()
            return st.status, len(df), [n for n in dir(Client) if not n.startswith("_") and not hasattr(AsyncClient, n)]

    status, rows, missing = asyncio.run(main())
    assert status == "Completed" and rows == 3 and missing == []
    assert [n for n in dir(client_mod.Job) if not n.startswith("_") and not hasattr(kinflow_client.AsyncJob, n)] == [
        "plot"
    ]


def test_async_wait_cancelled_prints_the_reattach_line(capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder({"/api/v1/status/": [lambda r: reference_json(status_body("abc", "Processing"))]})

    async def main() -> None:
        async with AsyncClient("http://x.test", "k", transport=httpx.MockTransport(rec)) as c:
            task = asyncio.create_task(kinflow_client.AsyncJob(c, "abc").wait(progress=False, poll_interval=30))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    err = capsys.readouterr().err
    assert "job abc" in err and "python -m kinflow_client wait abc" in err
