"""Fixtures: a real kinflow stack (`bin/kinflow dev`: Temporal dev server, SQLite, API,
workers, synthetic GPU host) on free ports, started once per test session.

Needs bin/kinflow (`make build`) and bin/temporal (`make bin/temporal`). Without
them the stack tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
KINFLOW = Path(os.environ.get("KINFLOW_BIN", REPO / "bin" / "kinflow"))
TEMPORAL = Path(os.environ.get("KINFLOW_TEMPORAL_CLI", REPO / "bin" / "temporal"))


def unavailable(why: str) -> None:
    """Skip a test whose component is missing; under CI=true, fail it instead."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why} (CI=true: a missing component fails)")
    pytest.skip(why)


_ports_given: set[int] = set()
_port_rng = random.SystemRandom()  # untouched by any test that seeds `random`


def free_port() -> int:
    """A free port below the kernel's ephemeral range, never handed out twice.

    As kinflow's Go tests do (internal/freeport): a bind to port 0 gives a
    just-closed port again within a few hundred binds, and an outgoing
    connection may take an ephemeral port before the stack binds it.
    """
    for _ in range(500):
        port = _port_rng.randrange(20000, 32000)
        if port in _ports_given:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _ports_given.add(port)
        return port
    raise RuntimeError("no free port in 20000-32000")


@dataclass
class Stack:
    """A running `kinflow dev` and the key it generated."""

    url: str
    key: str
    db_url: str
    tmp: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str] = field(repr=False)
    ports: tuple[int, int, int, int] = (0, 0, 0, 0)

    def kinflow(self, *args: str) -> str:
        """Run an operator command (`kinflow key limit ...`) on the stack's database."""
        out = subprocess.run(
            [str(KINFLOW), *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        if out.returncode != 0:
            raise AssertionError(f"kinflow {' '.join(args)}: {out.stderr}")
        return out.stdout

    def log(self) -> str:
        p = self.tmp / "dev.log"
        return p.read_text(errors="replace")[-4000:] if p.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_stack(
    tmp: Path,
    extra_env: dict[str, str] | None = None,
    *,
    ports: tuple[int, int, int, int] | None = None,
    key: str | None = None,
) -> Stack:
    """Start `kinflow dev` on free ports with its data under tmp, and generate a key.

    A restart passes the first start's ``ports`` (api, temporal, ui, gpu) and
    ``key``: the same data folder and database then carry the jobs on.
    """
    for p, how in ((KINFLOW, "make build"), (TEMPORAL, "make bin/temporal")):
        if not p.exists():
            unavailable(f"{p} is missing (run `{how}`)")
    api, temporal, ui, gpu = ports or tuple(free_port() for _ in range(4))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KINFLOW_", "GPU_EMBED_"))}
    db_url = f"sqlite:{tmp / 'kinflow.db'}"
    env.update(
        {
            "KINFLOW_API_LISTEN": f"127.0.0.1:{api}",
            "KINFLOW_TEMPORAL_ADDRESS": f"127.0.0.1:{temporal}",
            "KINFLOW_GPU_LISTEN": f"127.0.0.1:{gpu}",
            "KINFLOW_DATABASE_URL": db_url,
            "KINFLOW_MEDIA_ROOT": str(tmp / "media"),
        }
    )
    env.update(extra_env or {})
    log = open(tmp / "dev.log", "ab")  # noqa: SIM115 (the process writes it until stop)
    proc = subprocess.Popen(
        [str(KINFLOW), "dev", "--temporal-cli", str(TEMPORAL), "--data-dir", str(tmp / ".data"),
         "--temporal-ui-port", str(ui)],
        cwd=REPO, env=env, stdout=log, stderr=log,
    )  # fmt: skip
    url = f"http://127.0.0.1:{api}"
    stack = Stack(url=url, key="", db_url=db_url, tmp=tmp, proc=proc, env=env, ports=(api, temporal, ui, gpu))
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"kinflow dev exited ({proc.returncode}):\n{stack.log()}")
        try:
            if httpx.get(f"{url}/api/v1/health/", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            stack.stop()
            raise AssertionError(f"kinflow dev did not answer /api/v1/health/ within 120 s:\n{stack.log()}")
        time.sleep(0.3)
    if key is not None:
        stack.key = key
        return stack
    r = httpx.post(f"{url}/api/api-key/generate/", timeout=10)
    assert r.status_code == 201, r.text
    stack.key = r.json()["key"]
    return stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The shared stack: real API, workers, Temporal and SQLite."""
    tmp = tmp_path_factory.mktemp("stack")
    s = start_stack(tmp)
    yield s
    s.stop()
    if s.proc.returncode not in (0, -signal.SIGINT):
        print(f"kinflow dev exit {s.proc.returncode}:\n{s.log()}", file=sys.stderr)
    shutil.rmtree(tmp / "media", ignore_errors=True)


def input_rows(n: int, seq_len: int = 60, seed: int = 1) -> list[dict[str, str]]:
    """n rows of random sequences and valid substrates."""
    r = random.Random(seed)
    aa = "ACDEFGHIKLMNPQRSTVWY"
    subs = ["CC(=O)O", "OC(=O)CCC(=O)O", "C1=CC=CC=C1O", "CCO", "OCC(O)CO"]
    return [
        {
            "Protein Sequence": "".join(r.choice(aa) for _ in range(seq_len)),
            "Substrate": r.choice(subs),
            "Name": f"r{i}",
        }
        for i in range(n)
    ]
