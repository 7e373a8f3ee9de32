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


def test_tree_ignores_bytecode_caches(tmp_path):
    """Importing a source tree (method E's KINFLOW_CATPRED_ROOT) writes __pycache__:
    the tree's sums, hence the fingerprint, stay the same."""
    src = tmp_path / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "mod.py").write_text("X = 1\n")
    c = HashCache(str(tmp_path / "c.json"))
    before = c.tree(str(tmp_path / "src"))
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"bytecode")
    (src / "stray.pyc").write_bytes(b"bytecode")
    assert c.tree(str(tmp_path / "src")) == before == {"pkg/mod.py": c.sum(str(src / "mod.py"))}


def test_method_e_fingerprint_names_its_esm2_weights(tmp_path, monkeypatch):
    """Method E's files are computed from ESM-2 650M features: other ESM-2 weights
    change the fingerprint."""
    from kinflow_steps.fingerprint import weights_of

    ck = tmp_path / "ckpt" / "kcat" / "a" / "b"
    ck.mkdir(parents=True)
    (ck / "model.pt").write_bytes(b"checkpoint")
    src = tmp_path / "catpred_src"
    src.mkdir()
    (src / "x.py").write_text("")
    esm2 = tmp_path / "esm2_t33_650M_UR50D.pt"
    esm2.write_bytes(b"esm2 weights")
    monkeypatch.setenv("METHODE_CHECKPOINT_ROOT", str(tmp_path / "ckpt"))
    monkeypatch.setenv("KINFLOW_CATPRED_ROOT", str(src))
    monkeypatch.setenv("KINFLOW_ESM2_650M_PATH", str(esm2))
    c = HashCache(str(tmp_path / "c.json"))
    _, w1 = weights_of("methode_embed_kcat", c)
    assert w1["esm2_t33_650M_UR50D.pt"] == hashlib.sha256(b"esm2 weights").hexdigest()
    esm2.write_bytes(b"other weights")
    os.utime(esm2, ns=(0, os.stat(esm2).st_mtime_ns + 1_000_000_000))
    assert weights_of("methode_embed_kcat", c)[1] != w1
