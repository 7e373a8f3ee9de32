"""Shared fixtures: tiny models written once per session, and a step server started
as a subprocess speaking the resident protocol (docs/gpu-host.md)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS_ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, STEPS_ROOT)

# How long a step server may take to load a tiny model or answer a batch on a busy
# 2-core CI machine; the real work is well under a second.
TIMEOUT_S = 120


def _require(*modules: str) -> None:
    """Skip when a library is missing, except under CI=true, where it must fail."""
    missing = []
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            missing.append(m)
    if missing:
        msg = f"missing Python libraries {missing}: run scripts/steps-venv.sh"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, str]:
    """Env entries pointing at tiny random-weight models (make_tiny_models.py)."""
    _require("torch", "numpy", "esm", "transformers", "sentencepiece")
    import make_tiny_models

    return make_tiny_models.make_all(str(tmp_path_factory.mktemp("tiny")))


@pytest.fixture
def media(tmp_path) -> str:
    m = tmp_path / "media"
    m.mkdir()
    return str(m)


def out_path(media: str, family: str, sid: str, suffix: str = ".npy") -> str:
    return os.path.join(media, "sequence_info", family, sid + suffix)


def manifest(
    step: str,
    media: str,
    seqs: dict[str, str],
    families: list[tuple[str, str]],
    batch: int = 1,
    truncated: dict[str, int] | None = None,
) -> dict:
    """A batch manifest owing every (family, suffix) file for each sequence."""
    truncated = truncated or {}
    items = []
    for sid, seq in seqs.items():
        outs = [out_path(media, f, sid, suf) for f, suf in families]
        items.append(
            {
                "seq_id": sid,
                "sequence": seq,
                "original_length": truncated.get(sid, len(seq)),
                "truncated": sid in truncated,
                "outputs": outs,
                "missing_outputs": list(outs),
            }
        )
    return {"version": 1, "job_id": "testjob", "step_key": step, "batch": batch, "media_root": media, "seqs": items}


class Server:
    """A step program in resident mode."""

    def __init__(self, step: str, env: dict[str, str], tmp: str):
        self.err_path = os.path.join(tmp, f"{step}.stderr")
        self.err = open(self.err_path, "w")
        full = dict(os.environ)
        full.update(env)
        full["PYTHONPATH"] = os.pathsep.join([STEPS_ROOT, HERE, full.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kinflow_steps", "--step", step],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            env=full,
        )
        self.ready = self.read()

    def read(self) -> dict:
        r, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT_S)
        if not r:
            raise AssertionError(f"no answer within {TIMEOUT_S}s; stderr:\n{self.stderr()}")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"server closed stdout (rc={self.proc.poll()}); stderr:\n{self.stderr()}")
        return json.loads(line)

    def send(self, m: dict) -> dict:
        self.proc.stdin.write(json.dumps(m) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stderr(self) -> str:
        self.err.flush()
        with open(self.err_path) as f:
            return f.read()

    def close(self) -> int:
        self.proc.stdin.close()
        deadline = time.monotonic() + TIMEOUT_S
        while self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.stdout.close()
        self.err.close()
        return self.proc.wait()


@pytest.fixture
def server(tiny, tmp_path):
    """Start step servers on the tiny models; all are closed (EOF) at the end, and each
    must exit 0."""
    started: list[Server] = []

    def start(step: str, **extra: str) -> Server:
        env = dict(tiny)
        env.update(extra)
        s = Server(step, env, str(tmp_path))
        started.append(s)
        assert s.ready.get("ready") is True, s.stderr()
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            assert s.close() == 0, s.stderr()


def hidden_files(media: str) -> list[str]:
    """Temp files left behind (names starting with '.', other than lock files)."""
    out = []
    for dirpath, _, files in os.walk(media):
        out += [os.path.join(dirpath, f) for f in files if f.startswith(".") and not f.endswith(".lock")]
    return out
