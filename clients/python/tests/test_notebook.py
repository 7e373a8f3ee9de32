"""A new user's notebook: a fresh venv, `pip install` of the client with its `notebook` extra only
(which brings the kernel, ipykernel), the
README's lines as cells, run headless by nbclient against the stack. It must show a progress bar
(a widget), a DataFrame and a plot, and no warning from tqdm."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, Stack, unavailable


def _readme_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Python client") :]
    start = section.index("```python") + len("```python")
    return [ln for ln in section[start : section.index("```", start)].splitlines() if ln.strip()]


def _fresh_venv(tmp: Path) -> Path:
    """A new virtual environment with the client installed as a user would (pip, from the folder)."""
    venv = tmp / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
    constraints = REPO / "clients" / "python" / "constraints.txt"
    r = subprocess.run(
        [*pip, "-c", str(constraints), f"{REPO / 'clients' / 'python'}[notebook]"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        unavailable(f"pip install of the client into a fresh venv failed (no package index?): {r.stderr[-2000:]}")
    subprocess.run(
        [str(py), "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "kinflow-fresh"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return venv


def test_new_users_notebook(stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    venv = _fresh_venv(tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(line) for line in _readme_lines()]
    monkeypatch.setenv("JUPYTER_PATH", str(venv / "share" / "jupyter"))
    monkeypatch.setenv("KINFLOW_URL", stack.url)
    monkeypatch.setenv("KINFLOW_API_KEY", stack.key)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    work = tmp_path / "work"  # not the checkout: nothing of it is at hand
    work.mkdir()
    client = nbclient.NotebookClient(
        nb, kernel_name="kinflow-fresh", timeout=300, resources={"metadata": {"path": str(work)}}
    )
    client.execute()
    outputs: list[dict[str, Any]] = [o for c in nb.cells for o in c.get("outputs", [])]
    kinds = {k for o in outputs for k in o.get("data", {})}
    streams = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    # A bar (the tqdm widget), a DataFrame (HTML table) and a plot (PNG).
    assert "application/vnd.jupyter.widget-view+json" in kinds, kinds
    assert any("<table" in o.get("data", {}).get("text/html", "") for o in outputs), kinds
    assert "image/png" in kinds, kinds
    assert "TqdmWarning" not in streams and "IProgress not found" not in streams, streams
    # The kernel ran the fresh venv's client, not the checkout's.
    probe = nbformat.v4.new_notebook()
    probe.cells = [nbformat.v4.new_code_cell("import kinflow_client, sys; print(sys.prefix, kinflow_client.__file__)")]
    nbclient.NotebookClient(probe, kernel_name="kinflow-fresh", timeout=120).execute()
    text = probe.cells[0]["outputs"][0]["text"]
    assert str(venv) in text and os.fspath(REPO / "clients") not in text, text
