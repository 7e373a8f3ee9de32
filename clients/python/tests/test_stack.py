"""The client against a real kinflow stack (see conftest.py): every call, end to end."""

from __future__ import annotations

import io
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest
from conftest import REPO, Stack, input_rows, start_stack

import kinflow_client
from kinflow_client import (
    Client,
    Conflict,
    Forbidden,
    InvalidInput,
    JobFailed,
    NotFound,
    QuotaExceeded,
    SyntheticResultWarning,
    Unauthorized,
)


@pytest.fixture
def client(stack: Stack) -> Client:
    return Client(stack.url, stack.key)


def test_environment_defaults(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINFLOW_URL", stack.url + "/api/v1/")
    monkeypatch.setenv("KINFLOW_API_KEY", stack.key)
    c = Client()
    assert c.base_url == stack.url
    assert c.quota().limit == 20000


def test_health_methods_quota(client: Client) -> None:
    h = client.health()
    assert h["status"] == "ok" and h["checks"]["database"] == "ok"
    methods = client.methods()
    b = [m for m in methods if m.target == "kcat" and m.id == "B"]
    assert b and "Protein Sequence" in b[0].required_columns
    assert {m.target for m in methods} == {"kcat", "Km", "kcat/Km"}
    q = client.quota()
    assert q.limit == 20000 and q.remaining == q.limit - q.used and 0 < q.resets_in_seconds <= 86400


def test_validate_reports_rows(client: Client) -> None:
    rows = input_rows(3)
    rows[1]["Substrate"] = "not-a-smiles(("
    rows[2]["Protein Sequence"] = "MKT1XZ"
    rep = client.validate(pd.DataFrame(rows))
    assert rep.row_count == 3 and not rep.ok and rep.problems == 2
    frame = rep.to_frame()
    assert sorted(frame["kind"]) == ["protein", "substrate"]
    assert "row" in rep.summary()
    assert client.validate(input_rows(2)).ok
    # validate_first refuses to submit flagged rows, with the report, and charges nothing.
    used = client.quota().used
    with pytest.raises(InvalidInput) as ei:
        client.submit(rows, targets="kcat", methods="B", validate_first=True)
    assert ei.value.report is not None and ei.value.report.problems == 2
    assert client.quota().used == used


def test_submit_wait_result_dataframe(client: Client, tmp_path: Path) -> None:
    rows = input_rows(4)
    rows[3]["Substrate"] = "not-a-smiles(("  # skipped row: blank prediction, reason in Source
    used = client.quota().used
    job = client.submit(
        pd.DataFrame(rows),
        methods={"kcat": "B", "Km": "C"},
        handle_long_sequences="skip",
        include_similarity_columns=False,
        canonicalize_substrates=True,
        use_experimental=False,
    )
    assert len(job.id) >= 22 and job.submitted["status"] == "Pending"
    assert job.submitted["quota"]["used"] == used + 4
    st = job.wait(progress=False, timeout=180)
    assert st.status == "Completed" and st.synthetic
    with pytest.warns(SyntheticResultWarning):
        df = job.result()
    assert len(df) == 4
    assert list(df.columns[:6]) == [
        "kcat (1/s)",
        "Source kcat",
        "Extra Info kcat",
        "KM (mM)",
        "Source Km",
        "Extra Info Km",
    ]
    assert df["kcat (1/s)"].dtype == "float64" and df["KM (mM)"].dtype == "float64"
    assert math.isnan(df["kcat (1/s)"][3]) and not math.isnan(df["kcat (1/s)"][0])
    assert df["Source kcat"][3].startswith("Invalid substrate")
    assert all(isinstance(v, str) for v in df["Extra Info kcat"])
    assert df.attrs["job_id"] == job.id and df.attrs["synthetic"] is True and df.attrs["rowCount"] == 4
    assert list(df["Name"]) == ["r0", "r1", "r2", "r3"]
    # The server's provenance rides along in df.attrs, whatever its shape.
    assert df.attrs.get("provenance"), sorted(df.attrs)
    # The CSV, byte for byte as served, written atomically.
    with pytest.warns(SyntheticResultWarning):
        out = job.result_csv(tmp_path / "out.csv")
    raw = httpx.get(
        f"{client.base_url}/api/v1/result/{job.id}/", headers={"Authorization": f"Bearer {client._t.api_key}"}
    )
    assert out.read_bytes() == raw.content
    back = pd.read_csv(out)
    assert list(back.columns) == list(df.columns)


def test_submit_from_path_and_list(client: Client, tmp_path: Path) -> None:
    p = tmp_path / "input.csv"
    pd.DataFrame(input_rows(2, seed=7)).to_csv(p, index=False)
    j1 = client.submit(p, targets=["kcat"], methods={"kcat": "B"}, disable_gpu_precompute=True)
    j2 = client.submit(str(REPO / "docs" / "example.csv"), targets="kcat", methods="B")
    j3 = client.submit(input_rows(1, seed=8), "Km", "C")
    for j, n in ((j1, 2), (j2, 3), (j3, 1)):
        j.wait(progress=False, timeout=180)
        with pytest.warns(SyntheticResultWarning):
            assert len(j.result()) == n


def test_bulk_priority(client: Client) -> None:
    # A job asked to be bulk is served as such; the status says so while it
    # runs. A priority the API does not know is refused before anything is sent.
    job = client.submit(input_rows(2, seed=21), targets="kcat", methods="B", priority="bulk")
    sharing = job.status().raw.get("sharing")
    if sharing is not None:  # absent only once the job has ended
        assert sharing["class"] == "bulk", sharing
    job.wait(progress=False, timeout=180)
    with pytest.raises(ValueError, match="priority"):
        client.submit(input_rows(1, seed=22), targets="kcat", methods="B", priority="high")  # type: ignore[arg-type]


def test_typed_errors(stack: Stack, client: Client) -> None:
    with pytest.raises(Unauthorized) as ei:
        Client(stack.url, "ak_" + "0" * 64).quota()
    assert ei.value.status == 401 and "Invalid or revoked" in ei.value.message
    with pytest.raises(Unauthorized):
        Client(stack.url, "").quota()
    with pytest.raises(NotFound) as nf:
        client.job("A" * 22)
    assert nf.value.status == 404 and "A" * 22 in nf.value.message
    with pytest.raises(InvalidInput) as bad:
        client.submit(input_rows(1), targets="kcat", methods="NOPE")
    assert bad.value.status == 400 and "Invalid method 'NOPE'" in bad.value.message
    with pytest.raises(ValueError):
        client.job("../etc")
    with pytest.raises(Conflict) as dup:  # the stack already generated this address's key
        Client(stack.url, "").generate_key()
    assert dup.value.status == 409


def test_blocked_owner_is_forbidden(stack: Stack, client: Client) -> None:
    stack.kinflow("key", "block", stack.key)
    try:
        with pytest.raises(Forbidden) as ei:
            client.quota()
        assert ei.value.status == 403 and ei.value.message
    finally:
        stack.kinflow("key", "unblock", stack.key)
    assert client.quota().limit == 20000


def test_result_before_completion_is_conflict(client: Client) -> None:
    job = client.submit(input_rows(30, seq_len=200, seed=3), targets="kcat", methods="B")
    try:
        job.result()
    except Conflict as e:
        assert e.status == 409 and "not completed" in e.message
    job.wait(progress=False, timeout=180)


def test_progress_bar_output(client: Client) -> None:
    job = client.submit(input_rows(5, seed=11), methods={"kcat": "B", "Km": "C"})
    buf = io.StringIO()
    st = job.wait(progress=True, file=buf, poll_interval=0.2)
    text = buf.getvalue()
    assert st.status == "Completed"
    # One bar for the whole job: its percentage is the job's `overall`, never going
    # back when the second stage starts; the final frame is full, says the job's sentence and
    # the synthetic flag, and shows no ETA.
    frames = [f for f in re.split(r"[\r\n]+", text) if f.strip()]
    percents = [int(m.group(1)) for f in frames if (m := re.search(r":\s+(\d+)%\|", f))]
    assert percents == sorted(percents) and percents[-1] == 100, frames
    last = frames[-1]
    assert last.startswith(f"job {job.id}:") and "Completed in" in last and "5 rows, 2 stages" in last, last
    assert "synthetic" in last and "ETA" not in last, last
    print(text.replace("\r", "\n"))


def test_jobs_lists_own_jobs(client: Client, stack: Stack) -> None:
    older = client.submit(input_rows(1, seed=20), targets="Km", methods="C")
    job = client.submit(input_rows(2, seed=21), targets="kcat", methods="B")
    jobs = client.jobs()
    assert older.id in [j.job_id for j in jobs]
    assert jobs and jobs[0].job_id == job.id
    assert jobs[0].targets == ["kcat"] and jobs[0].methods.get("kcat") == "B"
    assert len(client.jobs(limit=1)) == 1
    job.wait(progress=False, timeout=180)
    done = client.jobs(status="Completed")
    assert job.id in [j.job_id for j in done] and all(j.status == "Completed" for j in done)
    mine = next(j for j in done if j.job_id == job.id)
    assert mine.rows == 2 and mine.synthetic and mine.completed_at and mine.started_at
    # Every job, across pages of one: the cursor is followed to the end, newest first, no repeats.
    every = list(client.iter_jobs(page_size=1))
    assert len(every) == len({j.job_id for j in every}) == len(client.jobs()) >= 2
    assert [j.submitted_at for j in every] == sorted((j.submitted_at for j in every), reverse=True)


def test_quota_exceeded(stack: Stack, client: Client) -> None:
    used = client.quota().used
    stack.kinflow("key", "limit", stack.key, str(used + 2))
    try:
        with pytest.raises(QuotaExceeded) as ei:
            client.submit(input_rows(3, seed=5), targets="kcat", methods="B")
        e = ei.value
        assert e.status == 429 and "3" in e.message
        assert e.limit == used + 2 and e.remaining == 2
        assert e.reset_at is not None and e.resets_in_seconds is not None and 0 < e.resets_in_seconds <= 86400
        assert client.quota().used == used  # a 429 charges nothing
    finally:
        stack.kinflow("key", "limit", stack.key, "default")


class DropFirstSubmitAnswer(httpx.HTTPTransport):
    """Sends every request; throws away the answer of the first submit (after the server acted)."""

    def __init__(self) -> None:
        super().__init__()
        self.submits = 0
        self.keys: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        if request.url.path.startswith("/api/v1/submit"):
            self.submits += 1
            self.keys.append(request.headers.get("Idempotency-Key", ""))
            if self.submits == 1:
                resp.read()
                resp.close()
                raise httpx.ReadError("connection reset by peer (test: the answer is lost)", request=request)
        return resp


@pytest.fixture(scope="module")
def honours_idempotency(stack: Stack) -> bool:
    """Whether the server honours Idempotency-Key, by behaviour: one key, two submits."""
    key = f"probe-{time.time_ns()}"
    files = {"file": ("probe.csv", pd.DataFrame(input_rows(1, seed=99)).to_csv(index=False).encode(), "text/csv")}
    data = {"targets": '["kcat"]', "methods": '{"kcat": "B"}'}
    h = {"Authorization": f"Bearer {stack.key}", "Idempotency-Key": key}
    ids = [
        httpx.post(f"{stack.url}/api/v1/submit/", headers=h, data=data, files=files).json()["jobId"] for _ in range(2)
    ]
    return ids[0] == ids[1]


def test_lost_submit_answer_is_retried_without_a_second_charge(stack: Stack, honours_idempotency: bool) -> None:
    assert honours_idempotency, "a retried submit with one Idempotency-Key made a second job"
    # The client learns it from the server's OpenAPI document.
    assert Client(stack.url, stack.key)._t.supports_idempotency(), "honoured but not in the OpenAPI document"
    t = DropFirstSubmitAnswer()
    c = Client(stack.url, stack.key, transport=t)
    c._t.sleep = lambda s: None
    used = c.quota().used
    job = c.submit(input_rows(3, seed=31), targets="kcat", methods="B")
    assert t.submits == 2 and t.keys[0] == t.keys[1] != "" and job.idempotency_key == t.keys[0]
    assert c.quota().used == used + 3  # one charge
    job.wait(progress=False, timeout=180)
    assert [j.job_id for j in c.jobs(limit=5)].count(job.id) == 1


def test_own_idempotency_key(client: Client, honours_idempotency: bool) -> None:
    """A stored key makes a repeated submit safe; the same key for other rows is refused (422)."""
    assert honours_idempotency, "a retried submit with one Idempotency-Key made a second job"
    key = f"my-pipeline-run-{time.time_ns()}"
    rows = input_rows(2, seed=71)
    used = client.quota().used
    j1 = client.submit(rows, targets="kcat", methods="B", idempotency_key=key)
    j2 = client.submit(rows, targets="kcat", methods="B", idempotency_key=key)
    assert j1.id == j2.id and client.quota().used == used + 2
    with pytest.raises(InvalidInput) as ei:
        client.submit(input_rows(2, seed=72), targets="kcat", methods="B", idempotency_key=key)
    assert ei.value.status == 422 and "Idempotency-Key" in ei.value.message
    j1.wait(progress=False, timeout=180)


def test_lost_submit_answer_without_idempotency_is_not_resent(stack: Stack) -> None:
    """A server that does not honour Idempotency-Key: the client must not resend (it could charge twice)."""
    t = DropFirstSubmitAnswer()
    c = Client(stack.url, stack.key, transport=t)
    c._t._idempotency = False  # as if the server did not document it
    used = c.quota().used
    with pytest.raises(kinflow_client.APIConnectionError) as ei:
        c.submit(input_rows(2, seed=41), targets="kcat", methods="B")
    assert t.submits == 1 and "did not resend" in str(ei.value)
    assert c.quota().used == used + 2  # the one submit that reached the server


def test_reattach_from_a_new_process(stack: Stack, tmp_path: Path) -> None:
    """A process submits and dies while waiting; another re-attaches by id and gets the result."""
    env = {**os.environ, "KINFLOW_URL": stack.url, "KINFLOW_API_KEY": stack.key}
    csv = tmp_path / "in.csv"
    pd.DataFrame(input_rows(40, seq_len=300, seed=51)).to_csv(csv, index=False)
    first = subprocess.Popen(
        [sys.executable, "-m", "kinflow_client", "submit", str(csv), "--target", "kcat", "--method", "B", "--wait"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert first.stdout is not None
    job_id = first.stdout.readline().strip()
    assert len(job_id) >= 22, first.stderr.read() if first.stderr else ""
    time.sleep(0.5)
    was_waiting = first.poll() is None
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    code = (
        "import sys; from kinflow_client import Client\n"
        "job = Client().job(sys.argv[1])\n"
        "print('attached', job.status().status, flush=True)\n"
        "st = job.wait(progress=False, timeout=180)\n"
        "import warnings; warnings.simplefilter('ignore')\n"
        "df = job.result()\n"
        "print(st.status, len(df), df.attrs['job_id'])\n"
    )
    second = subprocess.run(
        [sys.executable, "-c", code, job_id], env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert second.returncode == 0, second.stderr
    lines = second.stdout.strip().splitlines()
    assert lines[-1] == f"Completed 40 {job_id}", second.stdout
    print(f"first process still waiting when killed: {was_waiting}; second saw: {lines[0]}")


def test_readme_example_runs(stack: Stack, tmp_path: Path) -> None:
    """The README's notebook example, as written, against the stack, from outside the checkout."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Python client") :]
    start = section.index("```python") + len("```python")
    block = section[start : section.index("```", start)]
    env = {**os.environ, "KINFLOW_URL": stack.url, "KINFLOW_API_KEY": stack.key}
    code = block + "\ndf = _\nprint(type(df).__name__, len(df), df.attrs['job_id'] == job.id)\n"
    code = code.replace("\njob.result()", "\n_ = job.result()")
    env["MPLBACKEND"] = "Agg"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "DataFrame 12 True", r.stdout
    assert "100%" in r.stderr and "Completed in" in r.stderr and "SyntheticResultWarning" in r.stderr
    # The warning names the user's line (the script's), not the package's.
    assert re.search(r"<string>:\d+: SyntheticResultWarning", r.stderr), r.stderr


def test_cli_submit_result_and_status(stack: Stack, tmp_path: Path) -> None:
    env = {**os.environ, "KINFLOW_URL": stack.url, "KINFLOW_API_KEY": stack.key}
    out = tmp_path / "out.csv"
    r = subprocess.run(
        [sys.executable, "-m", "kinflow_client", "submit", str(REPO / "docs" / "example.csv"),
         "--target", "kcat", "--method", "B", "-o", str(out)],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    assert "synthetic" in r.stderr and "Completed" in r.stderr
    assert pd.read_csv(out).shape[0] == 3
    s = subprocess.run(
        [sys.executable, "-m", "kinflow_client", "status", job_id], env=env, capture_output=True, text=True, check=False
    )
    assert s.returncode == 0 and f"job {job_id}: Completed" in s.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "kinflow_client", "submit", str(out), "--target", "kcat"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "in pairs" in bad.stderr
    q = subprocess.run([sys.executable, "-m", "kinflow_client", "quota"], env=env, capture_output=True, text=True)
    assert q.returncode == 0 and "remaining" in q.stdout
    js = subprocess.run(
        [sys.executable, "-m", "kinflow_client", "jobs", "--limit", "1"], env=env, capture_output=True, text=True
    )
    assert js.returncode == 0 and js.stdout.startswith(job_id) and "Completed" in js.stdout and "kcat=B" in js.stdout


@pytest.fixture(scope="module")
def failing_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A second stack whose GPU service is unreachable and fail-closed: every job fails, saying why."""
    tmp = tmp_path_factory.mktemp("failing")
    dead = f"http://127.0.0.1:{__import__('conftest').free_port()}"
    s = start_stack(tmp, {"GPU_EMBED_FAIL_CLOSED": "1", "GPU_EMBED_SERVICE_URL": dead})
    yield s
    s.stop()


def test_failed_job_raises_job_failed(failing_stack: Stack) -> None:
    c = Client(failing_stack.url, failing_stack.key)
    job = c.submit(input_rows(3, seed=61), targets="kcat", methods="B")
    with pytest.raises(JobFailed) as ei:
        job.wait(progress=False, timeout=120)
    e = ei.value
    assert e.job_id == job.id and "GPU_EMBED_FAIL_CLOSED=1" in e.message
    assert e.status is not None and e.status.status == "Failed"
    with pytest.raises(Conflict):
        job.result()
    assert c.quota().used == 0  # a failed job's rows are refunded
