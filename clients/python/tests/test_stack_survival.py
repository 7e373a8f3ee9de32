"""The client that survives, against real kinflow stacks: a two-minute outage of the whole stack while a script
waits, Ctrl-C in a script and in the CLI, a free identical resubmit, uncertainty columns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import httpx
import pandas as pd
from conftest import Stack, input_rows, start_stack

import kinflow_client
from kinflow_client import Client, SyntheticResultWarning

# How long the stack stays down while the client waits: two minutes, an outage an operator fixes.
OUTAGE_SECONDS = 120


def _waiter(env: dict[str, str], code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_wait_survives_a_two_minute_outage(tmp_path: Path) -> None:
    """A script submits and waits; the stack (api, workers, Temporal) stops for two minutes and
    comes back on the same data; the same wait() call returns the Completed job."""
    s = start_stack(tmp_path)
    try:
        env = {**os.environ, "KINFLOW_URL": s.url, "KINFLOW_API_KEY": s.key}
        csv = tmp_path / "in.csv"
        pd.DataFrame(input_rows(60, seq_len=300, seed=71)).to_csv(csv, index=False)
        code = (
            "import sys, time\n"
            "from kinflow_client import Client\n"
            "job = Client().submit(sys.argv[1], targets='kcat', methods='B')\n"
            "print(job.id, flush=True)\n"
            "t0 = time.monotonic()\n"
            "st = job.wait(progress=False)\n"
            "print(st.status, int(time.monotonic() - t0), flush=True)\n"
        )
        w = _waiter(env, code, str(csv))
        assert w.stdout is not None
        job_id = w.stdout.readline().strip()
        assert len(job_id) >= 22, w.stderr.read() if w.stderr else ""
        s.stop()
        down = time.monotonic()
        # The api is really away, and the waiting script keeps waiting.
        while time.monotonic() - down < OUTAGE_SECONDS:
            try:
                httpx.get(f"{s.url}/api/v1/health/", timeout=2)
                raise AssertionError("the api answered during the outage")
            except httpx.TransportError:
                pass
            assert w.poll() is None, f"the waiter gave up during the outage: {w.stderr.read() if w.stderr else ''}"
            time.sleep(5)
        s = start_stack(tmp_path, ports=s.ports, key=s.key)
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        status, waited = out.split()
        assert status == "Completed" and int(waited) >= OUTAGE_SECONDS, out
        st = httpx.get(f"{s.url}/api/v1/status/{job_id}/", headers={"Authorization": f"Bearer {s.key}"}).json()
        assert st["status"] == "Completed"
        print(f"job {job_id}: waited {waited} s across a {OUTAGE_SECONDS} s outage")
    finally:
        s.stop()


def _interrupted(stack: Stack, tmp_path: Path, argv: list[str]) -> tuple[str, str, int]:
    """Run argv (which prints the job id first, then waits), Ctrl-C it while it waits.

    The synthetic stack finishes a job in about a second; it is paused
    (SIGSTOP) from the job id on, so the job cannot finish before the Ctrl-C
    and the script is surely inside wait(), its status poll unanswered.
    """
    env = {**os.environ, "KINFLOW_URL": stack.url, "KINFLOW_API_KEY": stack.key}
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    job_id = p.stdout.readline().strip()
    os.kill(stack.proc.pid, signal.SIGSTOP)
    try:
        assert len(job_id) >= 22, p.stderr.read() if p.stderr else ""
        time.sleep(1.5)
        assert p.poll() is None, "the script ended before Ctrl-C"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        os.kill(stack.proc.pid, signal.SIGCONT)
    return job_id, err, p.returncode


def test_ctrl_c_prints_the_reattach_line(stack: Stack, tmp_path: Path) -> None:
    csv = tmp_path / "big.csv"
    pd.DataFrame(input_rows(20, seed=81)).to_csv(csv, index=False)
    code = (
        "import sys\n"
        "from kinflow_client import Client\n"
        "job = Client().submit(sys.argv[1], targets='kcat', methods='B')\n"
        "print(job.id, flush=True)\n"
        "job.wait(progress=False)\n"
    )
    job_id, err, rc = _interrupted(stack, tmp_path, [sys.executable, "-c", code, str(csv)])
    assert rc != 0 and "KeyboardInterrupt" in err
    assert f"python -m kinflow_client wait {job_id}" in err and f"client.job('{job_id}').wait()" in err, err
    # The CLI: exit 130 and the same line, printed once.
    cli = [sys.executable, "-m", "kinflow_client", "-q", "submit", str(csv), "--target", "kcat", "--method", "B"]
    job_id, err, rc = _interrupted(stack, tmp_path, [*cli, "--wait"])
    assert rc == 130 and err.count(f"python -m kinflow_client wait {job_id}") == 1, err


def test_identical_resubmit_is_free_and_says_so(stack: Stack) -> None:
    """Rows whose every prediction came from the prediction cache are refunded; the
    status, the result's attrs and the quota say how many."""
    c = Client(stack.url, stack.key)
    rows = input_rows(12, seed=91)
    first = c.submit(rows, targets="kcat", methods="B")
    st1 = first.wait(progress=False, timeout=180)
    used = c.quota().used
    again = c.submit(rows, targets="kcat", methods="B")
    st2 = again.wait(progress=False, timeout=180)
    assert st1.rows_charged == 12 and st1.cached_rows_refunded == 0
    assert (st2.rows_charged, st2.rows_refunded, st2.cached_rows_refunded) == (12, 12, 12), st2.raw.get("charge")
    assert c.quota().used == used  # charged 12 at submit, refunded 12 at the end
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntheticResultWarning)
        df = again.result()
    assert df.attrs["charge"] == {"rowsCharged": 12, "rowsRefunded": 12, "cachedRowsRefunded": 12}


def test_uncertainty_reaches_the_dataframe(stack: Stack) -> None:
    """A method that gives uncertainties (E) has them after every other column of the result,
    in the DataFrame and in the plot's caption; one that gives none (B) has none."""
    c = Client(stack.url, stack.key)
    gives = {(m.target, m.id): m.gives_uncertainty for m in c.methods()}
    assert gives[("Km", "E")] and not gives[("Km", "B")]
    job = c.submit(input_rows(5, seed=93), methods={"kcat": "B", "Km": "E"})
    job.wait(progress=False, timeout=180)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntheticResultWarning)
        df = job.result()
    unc = [col for col in df.columns if str(col).startswith("Uncertainty")]
    assert unc == [
        "Uncertainty Km total (SD, log10)", "Uncertainty Km aleatoric (SD, log10)",
        "Uncertainty Km epistemic (SD, log10)",
    ] and list(df.columns[-3:]) == unc  # fmt: skip
    assert df[unc[0]].dtype == "float64" and df[unc[0]].between(0.2, 0.8).all()
    fig = kinflow_client.plot_result(df)
    titles = [ax.get_title() for ax in fig.get_axes()]
    assert "uncertainty" not in titles[0] and "median uncertainty" in titles[1], titles
    # Km's uncertainty panels (the SD's distribution, the ±1 SD intervals) and none for kcat.
    assert len(titles) == 4 and titles[2].startswith("Km uncertainty\n5 rows") and titles[3].startswith("Km: each"), (
        titles
    )
    assert "SYNTHETIC" in fig.texts[0].get_text()
