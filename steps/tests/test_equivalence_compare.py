"""kinflow_steps.equivalence.compare: the bound, shapes, non-finite values, files."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from conftest import STEPS_ROOT

from kinflow_steps.equivalence import compare


def test_bounds_and_edge_cases():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64).astype(np.float32)
    assert compare(a, a).ok and compare(a, a).min_cosine > 0.999999
    r = compare(a, a + 0.05 * rng.standard_normal(64).astype(np.float32))
    assert not r.ok and r.kind == "pooled" and "cosine" in r.reason
    m = rng.standard_normal((10, 8))
    bad = m.copy()
    bad[7] = -bad[7]
    r = compare(m, bad)
    assert not r.ok and r.worst_row == 7 and "residue 7" in r.reason
    assert compare(np.zeros(4), np.zeros(4)).ok  # two zero vectors are equal
    assert not compare(np.zeros(4), np.ones(4)).ok
    nan = a.copy()
    nan[3] = np.nan
    r = compare(nan, a)
    assert not r.ok and r.nonfinite == 1
    assert not compare(a, a[:10]).ok and "shape" in compare(a, a[:10]).reason
    assert not compare(m, m, kind="pooled").ok
    # A scaled artefact (sums where the family holds means) has cosine 1 but the
    # wrong length: refused, pooled and per residue row, as `kinflow cache verify` does.
    r = compare(a, 2 * a)
    assert r.min_cosine > 0.999999 and not r.ok and "length" in r.reason
    assert compare(a, 1.005 * a).ok
    scaled = m.copy()
    scaled[4] *= 1.2
    r = compare(m, scaled)
    assert not r.ok and "length" in r.reason and "residue 4" in r.reason
    assert compare(m, 1.04 * m).ok


def test_cli(tmp_path):
    a = np.arange(1, 9, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", a * 1.001)  # same direction, length within 1 %
    np.save(tmp_path / "c.npy", a[::-1].copy())

    def run(x, y):
        return subprocess.run(
            [sys.executable, "-m", "kinflow_steps.equivalence", str(tmp_path / x), str(tmp_path / y)],
            capture_output=True,
            text=True,
            cwd=STEPS_ROOT,
        )

    r = run("a.npy", "b.npy")
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True
    r = run("a.npy", "c.npy")
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False
    r = run("a.npy", "missing.npy")
    assert r.returncode == 2 and "error" in json.loads(r.stdout)
