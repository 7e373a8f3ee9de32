"""The client against recorded answers (httpx.MockTransport): the reference deployment's
wire (bare NaN in JSON, 7-character ids, no Idempotency-Key), and the retry policies."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable

import httpx
import pytest

from kinflow_client import (
    APIConnectionError,
    Client,
    JobFailed,
    QuotaExceeded,
    ServerError,
    SyntheticResultWarning,
    WaitTimeout,
)
from kinflow_client import _client as client_mod

# A result as the reference deployment serves it (docs/python-client.md): Python's
# json.dumps with allow_nan, ", " / ": " separators, every blank cell a bare NaN,
# an int-only input column as ints, a per-substrate array cell as a string.
REFERENCE_RESULT = (
    '{"jobId": "aB3dE5g", "columns": ["kcat (1/s)", "Source kcat", "Extra Info kcat", "KM (mM)", "Source Km", '
    '"Extra Info Km", "Protein Sequence", "Substrate", "Replicate"], "rowCount": 3, "data": ['
    '{"kcat (1/s)": 12.345, "Source kcat": "Prediction from Method B", "Extra Info kcat": NaN, '
    '"KM (mM)": "[0.12,null,3.4]", "Source Km": "Prediction from Method C (per substrate)", '
    '"Extra Info Km": NaN, "Protein Sequence": "MKTAYIAK", "Substrate": "CCO", "Replicate": 1}, '
    '{"kcat (1/s)": NaN, "Source kcat": "Invalid substrate (not a valid SMILES or InChI)", "Extra Info kcat": NaN, '
    '"KM (mM)": NaN, "Source Km": "Invalid substrate (not a valid SMILES or InChI)", "Extra Info Km": NaN, '
    '"Protein Sequence": "MKTAYIAK", "Substrate": "x((", "Replicate": 2}, '
    '{"kcat (1/s)": 1e-05, "Source kcat": "BRENDA", "Extra Info kcat": "Experimental value from BRENDA", '
    '"KM (mM)": NaN, "Source Km": "Prediction could not be made", "Extra Info Km": NaN, '
    '"Protein Sequence": NaN, "Substrate": "O", "Replicate": 3}]}'
)


def status_body(job_id: str, status: str, **extra: object) -> dict[str, object]:
    stage = {
        "index": 0, "target": "kcat", "method_key": "B", "methodKey": "B", "method_name": "Method B",
        "methodName": "Method B", "status": "completed" if status == "Completed" else "running",
        "started_at": "2026-03-04T14:30:12+00:00", "completed_at": None, "message": "",
        "prediction": {"predictions_total": 3, "predictions_made": 3 if status == "Completed" else 1,
                       "predictionsTotal": 3, "predictionsMade": 3 if status == "Completed" else 1},
        "embedding": {"enabled": True, "state": "done", "method_key": "B", "methodKey": "B", "target": "kcat",
                      "total": 3, "cached_already": 1, "need_computation": 2, "computed": 2, "remaining": 0,
                      "cachedAlready": 1, "needComputation": 2},
    }  # fmt: skip
    body: dict[str, object] = {
        "jobId": job_id, "status": status, "submittedAt": "2026-03-04T14:30:00.123456+00:00",
        "elapsedSeconds": 5, "queueSeconds": 1, "computeSeconds": 4, "queuePosition": None,
        "progress": {"moleculesTotal": 3, "moleculesProcessed": 3, "predictionsTotal": 3, "predictionsMade": 1,
                     "invalidRows": 0, "stages": [stage], "activeStageIndex": 0, "completedStageCount": 0,
                     "totalStageCount": 1},
        "progressStages": [stage], "activeStageIndex": 0, "completedStageCount": 0, "totalStageCount": 1,
    }  # fmt: skip
    body.update(extra)
    return body


def reference_json(body: object) -> httpx.Response:
    # The reference's json.dumps: ", " and ": " separators, ASCII escapes.
    return httpx.Response(200, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


class Recorder:
    """A MockTransport handler scripted per path; records every request."""

    def __init__(self, routes: dict[str, list[Callable[[httpx.Request], httpx.Response]]]) -> None:
        self.routes = routes
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        for prefix, answers in self.routes.items():
            if request.url.path.startswith(prefix):
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                return answer(request)
        return httpx.Response(404, text="<html><body>Not Found</body></html>", headers={"Content-Type": "text/html"})

    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]


def make_client(rec: Recorder) -> tuple[Client, list[float]]:
    c = Client("http://reference.test", "ak_" + "1" * 64, transport=httpx.MockTransport(rec))
    slept: list[float] = []
    c._t.sleep = slept.append
    return c, slept


def test_reference_wire_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_mod.time, "sleep", lambda s: None)
    submitted = {
        "jobId": "aB3dE5g", "status": "Pending", "statusUrl": "/api/v1/status/aB3dE5g/",
        "resultUrl": "/api/v1/result/aB3dE5g/",
        "quota": {"limit": 20000, "used": 3, "remaining": 19997, "resetsInSeconds": 36000},
    }  # fmt: skip
    rec = Recorder(
        {
            "/api/v1/submit/": [lambda r: httpx.Response(201, json=submitted)],
            "/api/v1/status/aB3dE5g/": [
                lambda r: reference_json(status_body("aB3dE5g", "Processing")),
                lambda r: reference_json(status_body("aB3dE5g", "Completed", completedAt="x", resultUrl="y")),
            ],
            "/api/v1/result/aB3dE5g/": [
                lambda r: httpx.Response(
                    200, content=REFERENCE_RESULT.encode(), headers={"Content-Type": "application/json"}
                )
            ],
        }
    )
    c, _ = make_client(rec)
    job = c.submit([{"Protein Sequence": "MKTAYIAK", "Substrate": "CCO"}], targets="kcat", methods="B")
    assert job.id == "aB3dE5g"
    st = job.wait(progress=False)
    assert st.status == "Completed" and not st.synthetic and st.stages[0].embedding.done == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", SyntheticResultWarning)  # a real result warns nothing
        df = job.result()
    assert df.shape == (3, 9)
    assert df["kcat (1/s)"].dtype == "float64"
    assert df["kcat (1/s)"][0] == 12.345 and math.isnan(df["kcat (1/s)"][1]) and df["kcat (1/s)"][2] == 1e-05
    assert df["Extra Info kcat"].tolist() == ["", "", "Experimental value from BRENDA"]
    assert df["Extra Info Km"].tolist() == ["", "", ""]
    assert df["Source kcat"][1] == "Invalid substrate (not a valid SMILES or InChI)"
    assert df["KM (mM)"][0] == "[0.12,null,3.4]" and df["KM (mM)"][1] is None  # an array column stays text
    assert df["Replicate"].dtype == "int64" and df["Replicate"].tolist() == [1, 2, 3]
    assert df["Protein Sequence"][2] is None
    assert df.attrs["job_id"] == "aB3dE5g" and df.attrs["synthetic"] is False
    assert df.attrs["rowCount"] == 3 and df.attrs["source"] == "http://reference.test"
    # The submit was multipart with the options and an Idempotency-Key (the reference ignores it).
    sub = next(r for r in rec.requests if r.url.path == "/api/v1/submit/")
    assert sub.headers["Idempotency-Key"] and sub.headers["Authorization"] == "Bearer " + "ak_" + "1" * 64
    body = sub.read().decode()
    assert 'name="targets"' in body and '["kcat"]' in body and '{"kcat": "B"}' in body and "MKTAYIAK,CCO" in body


def test_kinflow_synthetic_result_warns() -> None:
    payload = {"jobId": "J" * 22, "columns": ["kcat (1/s)", "Source kcat"], "rowCount": 1,
               "data": [{"kcat (1/s)": None, "Source kcat": "Synthetic placeholder from Method B (not a prediction)"}],
               "synthetic": True}  # fmt: skip
    rec = Recorder({"/api/v1/result/": [lambda r: httpx.Response(200, json=payload)]})
    c, _ = make_client(rec)
    with pytest.warns(SyntheticResultWarning):
        df = client_mod.Job(c, "J" * 22).result()
    assert df.attrs["synthetic"] is True and math.isnan(df["kcat (1/s)"][0]) and df["kcat (1/s)"].dtype == "float64"


def test_reference_lost_submit_answer_is_not_resent() -> None:
    """The reference honours no Idempotency-Key (and has no OpenAPI document): no resend."""

    def lost(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset", request=request)

    rec = Recorder({"/api/v1/submit/": [lost]})
    c, slept = make_client(rec)
    with pytest.raises(APIConnectionError) as ei:
        c.submit([{"Protein Sequence": "MK", "Substrate": "O"}], targets="kcat", methods="B")
    assert rec.paths().count("/api/v1/submit/") == 1 and "/api/v1/openapi.json" in rec.paths()
    assert "did not resend" in str(ei.value) and slept == []


def test_submit_retried_with_one_key_when_the_server_honours_it() -> None:
    doc = {
        "openapi": "3.1.0",
        "paths": {"/api/v1/submit/": {"post": {"parameters": [{"$ref": "#/components/parameters/idem"}]}}},
        "components": {"parameters": {"idem": {"name": "Idempotency-Key", "in": "header"}}},
    }
    ok = {"jobId": "K" * 22, "status": "Pending", "statusUrl": "", "resultUrl": "", "quota": {}}

    def lost(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("server disconnected", request=request)

    rec = Recorder(
        {
            "/api/v1/openapi.json": [lambda r: httpx.Response(200, json=doc)],
            "/api/v1/submit/": [
                lost,
                lambda r: httpx.Response(503, json={"error": "could not be queued"}),
                lambda r: httpx.Response(502, text="<html>bad gateway</html>"),
                lambda r: httpx.Response(201, json=ok),
            ],
        }
    )
    c, slept = make_client(rec)
    job = c.submit([{"Protein Sequence": "MK", "Substrate": "O"}], targets="kcat", methods="B")
    subs = [r for r in rec.requests if r.url.path == "/api/v1/submit/"]
    assert job.id == "K" * 22 and len(subs) == 4 and len(slept) == 3
    assert len({r.headers["Idempotency-Key"] for r in subs}) == 1 == len({job.idempotency_key})
    assert rec.paths().count("/api/v1/openapi.json") == 1  # asked once


def test_submit_quota_exceeded_is_not_retried() -> None:
    headers = {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "3600"}
    msg = "Daily limit exceeded: 2 rows remaining today; this upload requires 3 rows."
    rec = Recorder({"/api/v1/submit/": [lambda r: httpx.Response(429, json={"error": msg}, headers=headers)]})
    c, slept = make_client(rec)
    with pytest.raises(QuotaExceeded) as ei:
        c.submit([{"Protein Sequence": "MK", "Substrate": "O"}] * 3, targets="kcat", methods="B")
    e = ei.value
    assert e.message == msg and e.status == 429 and e.limit == 10 and e.remaining == 2
    assert e.resets_in_seconds == 3600 and e.reset_at is not None and "resets at" in str(e)
    assert len(rec.requests) == 1 and slept == []


def test_get_retries_honour_retry_after_and_rate_limit_reset() -> None:
    quota = {"limit": 5, "used": 1, "remaining": 4, "resetsInSeconds": 100}

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    rec = Recorder(
        {
            "/api/v1/quota/": [
                lambda r: httpx.Response(503, json={"error": "busy"}, headers={"Retry-After": "2"}),
                lambda r: httpx.Response(429, json={"error": "slow down"}, headers={"X-RateLimit-Reset": "3"}),
                refused,
                lambda r: httpx.Response(504, text="gateway timeout"),
                lambda r: httpx.Response(200, json=quota),
            ]
        }
    )
    c, slept = make_client(rec)
    assert c.quota().remaining == 4
    assert slept[:2] == [2.0, 3.0] and len(slept) == 4
    assert all(0 <= s <= 30 for s in slept[2:])


def test_get_gives_up_with_the_servers_message() -> None:
    rec = Recorder({"/api/v1/status/": [lambda r: httpx.Response(502, text="<html>Bad Gateway</html>")]})
    c, slept = make_client(rec)
    with pytest.raises(ServerError) as ei:
        c.job("abc")
    assert ei.value.status == 502 and "Bad Gateway" in ei.value.message
    assert len(rec.requests) == 6 and len(slept) == 5  # 1 + DEFAULT_MAX_RETRIES


def test_a_long_advised_wait_is_raised_not_slept() -> None:
    rec = Recorder(
        {
            "/api/v1/quota/": [
                lambda r: httpx.Response(429, json={"error": "quota"}, headers={"X-RateLimit-Reset": "36000"})
            ]
        }
    )
    c, slept = make_client(rec)
    with pytest.raises(QuotaExceeded) as ei:
        c.quota()
    assert slept == [] and len(rec.requests) == 1 and ei.value.resets_in_seconds == 36000


def test_wait_polls_at_a_growing_interval_and_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    rec = Recorder({"/api/v1/status/": [lambda r: reference_json(status_body("abc", "Processing"))]})
    c, _ = make_client(rec)
    monkeypatch.setattr(client_mod.time, "monotonic", lambda: float(sum(slept)))  # time passes only asleep
    with pytest.raises(WaitTimeout) as ei:
        client_mod.Job(c, "abc").wait(progress=False, timeout=60)
    assert ei.value.status is not None and ei.value.status.status == "Processing"
    assert slept[:4] == [1.0, 1.5, 2.25, 3.375] and max(slept) == 10.0 and sum(slept) == 60.0
    assert "python -m kinflow_client wait abc" in str(ei.value) and "client.job('abc').wait()" in str(ei.value)


def test_failed_status_raises_job_failed() -> None:
    rec = Recorder(
        {"/api/v1/status/": [lambda r: reference_json(status_body("abc", "Failed", error="Method B failed: boom"))]}
    )
    c, _ = make_client(rec)
    with pytest.raises(JobFailed) as ei:
        client_mod.Job(c, "abc").wait(progress=False)
    assert ei.value.message == "Method B failed: boom" and ei.value.job_id == "abc"
