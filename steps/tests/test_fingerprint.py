"""The step's fingerprint: the ready line and ``--fingerprint`` agree, sums are
remembered by path, size and mtime, and one changed weights byte changes it."""

from __future__ import annotations

import hashlib
import json
import os

from test_protocol import run_program

from kinflow_steps.fingerprint import HashCache


def test_ready_line_and_one_shot_agree(server, tiny, tmp_path):
    env = {"KINFLOW_HASH_CACHE": str(tmp_path / "sha256.json")}
    s = server("methodh_esm2_last_mean", **env)
    fp = s.ready["fingerprint"]
    path = tiny["KINFLOW_ESM2_650M_PATH"]
    with open(path, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    assert fp["weights"][os.path.basename(path)] == want
    assert fp["libraries"]["torch"] and fp["program_version"] and fp["precision"]
    r = run_program(["--step", "methodh_esm2_last_mean", "--fingerprint"], dict(tiny, **env))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["fingerprint"] == fp
    r = run_program(["--step", "methodh_esm2_last_mean"], dict(tiny, KINFLOW_FINGERPRINT_ONLY="1", **env))
    assert r.returncode == 0 and json.loads(r.stdout)["fingerprint"] == fp, r.stderr


def test_hash_cache_remembers_and_notices_a_change(tmp_path):
    w = tmp_path / "w.pt"
    w.write_bytes(b"weights-1")
    c = HashCache(str(tmp_path / "c.json"))
    s1 = c.sum(str(w))
    c.save()
    st = os.stat(w)
    w.write_bytes(b"weights-2")  # same size
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert HashCache(str(tmp_path / "c.json")).sum(str(w)) == s1  # remembered, not reread
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert HashCache(str(tmp_path / "c.json")).sum(str(w)) != s1
