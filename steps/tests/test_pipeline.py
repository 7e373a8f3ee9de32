"""The pipelined step server (kinflow_steps.pipeline) and the device reductions
(kinflow_steps.device) on the CPU backend: the reduced vectors against the host-mean
path and fair-esm / transformers themselves, the answers' order when the host sends
ahead, the bound on forward passes in flight, the overlap itself, and a SIGKILL at every
point of the write protocol leaving no file a later job would use."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import HERE, STEPS_ROOT, TIMEOUT_S, hidden_files, manifest, out_path
from test_fair_esm import rand_seq

FAM_H = [("esm2_layer_last_mean", ".npy")]
FAMS_A = [(f"esm2_layer_{n}/{k}_vecs", ".npy") for n in (26, 29) for k in ("mean", "weighted")]


def use_tiny(tiny: dict, monkeypatch, **extra: str) -> None:
    for k, v in {**tiny, **extra}.items():
        monkeypatch.setenv(k, v)


def make_step(key: str, tiny: dict, monkeypatch, **extra: str):
    from kinflow_steps.steps import STEPS

    use_tiny(tiny, monkeypatch, KINFLOW_STEPS_DEVICE="cpu", **extra)
    step = STEPS[key]()
    step.load()
    return step


def parse(doc: dict):
    from kinflow_steps.steps import parse_manifest

    return parse_manifest(doc)


def seqs_of(n: int, seed: int = 0) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {f"p{i:02d}": rand_seq(int(rng.integers(1, 90)), seed * 100 + i) for i in range(n)}


def weights_table(media: str, seqs: dict[str, str]) -> None:
    from kinflow_steps.cache_io import append_binding_sites

    rng = np.random.default_rng(7)
    rows = {sid: rng.random(len(s)).astype(np.float32).tolist() for sid, s in seqs.items()}
    first = next(iter(rows))
    rows[first] = [0.0] * len(seqs[first])  # sums to 0: the plain mean
    append_binding_sites(os.path.join(media, "pseq2sites", "binding_sites_all.tsv"), rows)


@pytest.mark.parametrize("unpadded", ["", "1"])
def test_device_means_match_the_host_mean_and_fair_esm(tiny, media, monkeypatch, unpadded):
    """Method A's files (layers 26 and 29, mean and weighted) reduced on the device
    against the float64 host mean of the same forward pass and against fair-esm's own
    model on each sequence alone: within 1e-6 relative of the former, within the
    equivalence bound of the latter."""
    from test_unpadded import fair_alone

    from kinflow_steps.equivalence import compare
    from kinflow_steps.steps import weighted_vec

    seqs = seqs_of(9, 1)
    weights_table(media, seqs)
    step = make_step("methoda_esm2_layers", tiny, monkeypatch, KINFLOW_STEPS_UNPADDED=unpadded)
    assert (step.model.unpadded is not None) is bool(unpadded)
    assert step.run(parse(manifest("methoda_esm2_layers", media, seqs, FAMS_A))) == 4 * len(seqs)
    host = step.model.embed(list(seqs.values()), [26, 29])
    from kinflow_steps.cache_io import read_binding_sites

    table = read_binding_sites(os.path.join(media, "pseq2sites", "binding_sites_all.tsv"), set(seqs))
    for row, (sid, seq) in enumerate(seqs.items()):
        alone = fair_alone(tiny["KINFLOW_ESM2_650M_PATH"], seq, [26, 29])
        for layer in (26, 29):
            res = host[layer][row]
            mean = np.load(out_path(media, f"esm2_layer_{layer}/mean_vecs", sid))
            wmean = np.load(out_path(media, f"esm2_layer_{layer}/weighted_vecs", sid))
            assert mean.dtype == np.float32 and wmean.dtype == np.float32
            want = res.astype(np.float64).mean(axis=0)
            np.testing.assert_allclose(mean, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
            wwant = weighted_vec(res, table[sid]).astype(np.float64)
            np.testing.assert_allclose(wmean, wwant, rtol=1e-6, atol=1e-6 * np.abs(wwant).max())
            ref = alone[layer][1 : len(seq) + 1]
            assert compare(mean, ref.astype(np.float64).mean(axis=0)).ok, (sid, layer)
    assert hidden_files(media) == []


def test_residue_and_cls_blocks_are_the_host_paths(tiny, media, monkeypatch):
    """Method G's residue tensors cross as one block and are cut per sequence: the same
    numbers as the host path; method D's CLS rows likewise; ProtT5's residues and mean
    against transformers' own model."""
    import torch

    seqs = seqs_of(6, 2)
    g = make_step("methodg_esm2", tiny, monkeypatch)
    assert g.run(parse(manifest("methodg_esm2", media, seqs, [("methodg_esm2", ".pt")]))) == len(seqs)
    host = g.model.embed(list(seqs.values()), ["last"], max_tokens=1024)["last"]
    for row, sid in enumerate(seqs):
        got = torch.load(out_path(media, "methodg_esm2", sid, ".pt"))
        np.testing.assert_array_equal(got.numpy(), host[row])
    d = make_step("methodd_esm1b", tiny, monkeypatch)
    assert d.run(parse(manifest("methodd_esm1b", media, seqs, [("esm1b_methodd", ".npy")]))) == len(seqs)
    cls = d.model.embed([d.fit(s) for s in seqs.values()], ["last"], cls=True)["last"]
    for row, sid in enumerate(seqs):
        np.testing.assert_array_equal(np.load(out_path(media, "esm1b_methodd", sid)), cls[row])
    t5 = make_step("methodi_prot_t5_residues", tiny, monkeypatch)
    fam = [("methodi_prot_t5_residues", ".npy")]
    assert t5.run(parse(manifest("methodi_prot_t5_residues", media, seqs, fam))) == len(seqs)
    m = make_step("prot_t5_mean", tiny, monkeypatch)
    assert m.run(parse(manifest("prot_t5_mean", media, seqs, [("prot_t5_last/mean_vecs", ".npy")]))) == len(seqs)
    from transformers import T5EncoderModel, T5Tokenizer

    from kinflow_steps.models import prot_t5_text

    path = tiny["KINFLOW_PROT_T5_PATH"]
    tok = T5Tokenizer.from_pretrained(path, do_lower_case=False)
    model = T5EncoderModel.from_pretrained(path).eval()
    for sid, seq in seqs.items():
        enc = tok([prot_t5_text(seq)], return_tensors="pt")
        with torch.no_grad():
            ref = model(**enc).last_hidden_state[0, : len(seq)].numpy()
        np.testing.assert_allclose(np.load(out_path(media, "methodi_prot_t5_residues", sid)), ref, atol=2e-5)
        np.testing.assert_allclose(
            np.load(out_path(media, "prot_t5_last/mean_vecs", sid)), ref.astype(np.float64).mean(0), atol=2e-5
        )


def test_pipeline_bounds_and_overlaps_passes(tiny, media, monkeypatch):
    """The writers hold each pass until the compute thread has filled every slot (or
    has no pass left): it runs ahead of them by exactly the depth's passes, never more;
    depth 1 is the serial server. Both write the same bytes."""
    from kinflow_steps import cache_io
    from kinflow_steps.pipeline import Pipeline

    seqs = seqs_of(12, 3)
    step = make_step("methodh_esm2_last_mean", tiny, monkeypatch, KINFLOW_STEPS_TOKS_PER_BATCH="100")
    real_stage, real_forward = cache_io.stage_bytes, step.forward
    state = {"p": None, "forwards": 0, "groups": 0}

    def forward(b, group):
        host = real_forward(b, group)
        state["forwards"] += 1
        return host

    def gated(path, data):
        p, deadline = state["p"], time.monotonic() + TIMEOUT_S
        while p.in_flight < p.depth and state["forwards"] < state["groups"] and time.monotonic() < deadline:
            time.sleep(0.002)
        return real_stage(path, data)

    monkeypatch.setattr(cache_io, "stage_bytes", gated)
    monkeypatch.setattr(step, "forward", forward)
    outs = {}
    for depth in (1, 3):
        m = os.path.join(media, f"d{depth}")
        b = parse(manifest("methodh_esm2_last_mean", m, seqs, FAM_H))
        groups, _ = step.plan(b)
        assert len(groups) >= 6
        p = Pipeline(step, depth=depth, writers=2)
        state.update(p=p, forwards=0, groups=len(groups))
        assert p.run(b) == len(seqs)
        p.close()
        assert p.in_flight == 0 and p.max_in_flight == depth
        outs[depth] = {sid: open(out_path(m, FAM_H[0][0], sid), "rb").read() for sid in seqs}
    assert outs[1] == outs[3]


def test_nonfinite_pass_discards_the_whole_batch(tiny, media, monkeypatch, tmp_path):
    """A NaN in one forward pass of a batch split into several: nothing of the batch is
    written, not even the passes already staged, and no temp file stays."""
    from test_protocol import nan_esm2

    nan = nan_esm2(tiny, str(tmp_path))
    step = make_step(
        "methodh_esm2_last_mean", tiny, monkeypatch, KINFLOW_ESM2_650M_PATH=nan, KINFLOW_STEPS_TOKS_PER_BATCH="60"
    )
    seqs = {"long1": "MKVLAAGIVQ" * 4, "long2": "MKVLAAGIVA" * 4, "bad": "MKVWLAAG", "fine": "MKVLA"}
    from kinflow_steps.errors import NonFiniteError

    b = parse(manifest("methodh_esm2_last_mean", media, seqs, FAM_H))
    assert len(step.plan(b)[0]) >= 3
    with pytest.raises(NonFiniteError, match="bad"):
        step.run(b)
    assert [f for _, _, fs in os.walk(media) for f in fs if not f.startswith(".")] == []
    assert hidden_files(media) == []


def test_answers_in_order_when_the_host_sends_ahead(server, media):
    """Four manifests written at once (done, error, oom, done): four answers, in order,
    and the done batches' files in place."""
    s = server("methodh_esm2_last_mean", KINFLOW_STEPS_FAKE_OOM_ABOVE="2", KINFLOW_STEPS_TOKS_PER_BATCH="100")
    one = manifest("methodh_esm2_last_mean", media, {"a1": rand_seq(40, 1), "a2": rand_seq(30, 2)}, FAM_H, batch=1)
    bad = manifest("methodh_esm2_last_mean", media, {"b1": "MKV"}, FAM_H, batch=2)
    bad["seqs"][0]["missing_outputs"] = ["/etc/b1.npy"]
    oom = manifest("methodh_esm2_last_mean", media, {f"o{i}": "MKVL" for i in range(3)}, FAM_H, batch=3)
    four = manifest("methodh_esm2_last_mean", media, {"d1": rand_seq(20, 4)}, FAM_H, batch=4)
    s.proc.stdin.write("".join(json.dumps(m) + "\n" for m in (one, bad, oom, four)))
    s.proc.stdin.flush()
    # Plain readline: answers that arrive together sit in the pipe's reader buffer,
    # where conftest's select() would not see them.
    got: list[dict] = []

    def read() -> None:
        for _ in range(4):
            got.append(json.loads(s.proc.stdout.readline()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(TIMEOUT_S)
    assert len(got) == 4, s.stderr()
    assert [a["batch"] for a in got] == [1, 2, 3, 4]
    assert [a["status"] for a in got] == ["done", "error", "oom", "done"]
    for sid in ("a1", "a2", "d1"):
        assert os.path.exists(out_path(media, "esm2_layer_last_mean", sid))
    assert not os.path.exists(out_path(media, "esm2_layer_last_mean", "o0"))
    assert hidden_files(media) == []


def usable_files(media: str) -> dict[str, str]:
    """The visible artefacts a later job would read, each checked against its folder's
    manifest record (size, mtime_ns, SHA-256, as kinflow's planner checks): every one
    must match; returns {path relative to media: sha256}."""
    root = os.path.join(media, "sequence_info")
    out = {}
    for dirpath, _, files in os.walk(root):
        names = [f for f in files if not f.startswith(".") and f != "manifest.json"]
        if not names:
            continue
        entries = json.load(open(os.path.join(dirpath, "manifest.json")))["entries"]
        for f in names:
            p = os.path.join(dirpath, f)
            sid = f.rsplit(".", 1)[0]
            e = entries.get(sid)
            assert e is not None, f"{p} visible without a record"
            st = os.stat(p)
            data = open(p, "rb").read()
            assert e["bytes"] == st.st_size and e["mtime_ns"] == st.st_mtime_ns, (p, e)
            assert e["sha256"] == hashlib.sha256(data).hexdigest(), p
            out[os.path.relpath(p, media)] = e["sha256"]
    return out


def test_kill_at_every_point_of_the_write_protocol(tiny, tmp_path):
    """The pipelined server (depth 3, two writers, batches sent ahead, each batch two
    forward passes) SIGKILLed at each point of the write protocol in turn (a temp file
    written, fsynced and hashed, a manifest merged, a file renamed): every visible file
    has its matching record; a server started afterwards (after every third point)
    completes the job, and its
    files hold the numbers of a run never killed (to the rounding of a different
    padding: the files already there are not computed again)."""
    seqs = {f"k{i}": rand_seq(10 + 7 * i, 40 + i) for i in range(4)}
    batches = [dict(seqs.items() - {("k2", seqs["k2"]), ("k3", seqs["k3"])}), {k: seqs[k] for k in ("k2", "k3")}]
    env = dict(os.environ, **tiny, KINFLOW_STEPS_TOKS_PER_BATCH="40", KINFLOW_STEPS_PIPELINE_DEPTH="3")
    env["PYTHONPATH"] = os.pathsep.join([STEPS_ROOT, HERE])

    def run(media: str, kill_at: int) -> int:
        lines = "".join(
            json.dumps(manifest("methodh_esm2_last_mean", media, b, FAM_H, batch=i + 1)) + "\n"
            for i, b in enumerate(batches)
        )
        r = subprocess.run(
            [sys.executable, "-m", "kinflow_steps", "--step", "methodh_esm2_last_mean"],
            input=lines,
            capture_output=True,
            text=True,
            env=dict(env, KINFLOW_STEPS_TEST_KILL_AT=str(kill_at)),
            timeout=TIMEOUT_S,
        )
        return r.returncode

    clean = str(tmp_path / "clean")
    assert run(clean, 0) == 0
    want = usable_files(clean)
    assert len(want) == len(seqs)
    kills = 0
    for n in range(1, 200):
        media = str(tmp_path / f"kill{n}")
        rc = run(media, n)
        if rc == 0:
            break
        assert rc == -9, (n, rc)
        kills += 1
        usable_files(media)
        if n % 3 != 1:
            continue  # a restart at every third point: each costs a model load
        assert run(media, 0) == 0
        assert usable_files(media).keys() == want.keys()
        for p in want:
            np.testing.assert_allclose(np.load(os.path.join(media, p)), np.load(os.path.join(clean, p)), atol=1e-5)
    # 4 files x (written, staged, published) + a manifest per batch.
    assert kills == 4 * 3 + 2


def test_tf32_where_its_cuda_rows_hold(tiny, monkeypatch):
    """tf32 runs where gpu_suite's CUDA rows held the bound: ESM-2's CUDA default,
    ESM-1b's opt-in; refused for ESM-1v (its rows missed) and on the CPU. The
    fingerprint's precision names it, so its files never pass for strict fp32 ones, and
    TF32 products are switched on; strict fp32 switches them off again."""
    import torch

    from kinflow_steps import precision
    from kinflow_steps.errors import ConfigError
    from kinflow_steps.fingerprint import fingerprint
    from kinflow_steps.steps import STEPS

    use_tiny(tiny, monkeypatch, KINFLOW_STEPS_DEVICE="cpu")
    cuda = torch.device("cuda")
    assert precision.precision_for("esm2", cuda) == precision.TF32
    for fam, ok in (("esm2", True), ("esm1b", True), ("esm1v", False)):
        monkeypatch.setenv(f"KINFLOW_STEPS_PRECISION_{fam.upper()}", "tf32")
        if ok:
            assert precision.precision_for(fam, cuda) == precision.TF32
        else:
            with pytest.raises(ConfigError, match="tf32 has no equivalence proof for esm1v on cuda"):
                precision.precision_for(fam, cuda)
    with pytest.raises(ConfigError, match="tf32 has no equivalence proof for esm2 on cpu"):
        STEPS["methodh_esm2_last_mean"]()
    monkeypatch.delenv("KINFLOW_STEPS_PRECISION_ESM1B")
    strict = fingerprint(STEPS["methodd_esm1b"]())["precision"]
    assert strict == "float32" and torch.backends.cuda.matmul.allow_tf32 is False
    monkeypatch.setitem(precision.PROVEN, "esm2", {"cpu": (precision.TF32, precision.FP32), "cuda": (precision.FP32,)})
    monkeypatch.delenv("KINFLOW_STEPS_PRECISION_ESM2")
    try:
        fp = fingerprint(STEPS["methodh_esm2_last_mean"]())  # as on CUDA: tf32 the default
        assert fp["precision"] == "float32, tf32 matrix products"
        assert torch.backends.cuda.matmul.allow_tf32 is True
        monkeypatch.setenv("KINFLOW_STEPS_PRECISION_ESM2", "fp32")
        assert fingerprint(STEPS["methodh_esm2_last_mean"]())["precision"] == "float32"
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        precision.apply(precision.FP32)


def test_bench_runs_an_unproven_precision_only_when_told(tmp_path):
    """steps/bench.py's --allow-unproven (gpu_suite's TF32 server row before its proof):
    the server refuses the unproven precision without it and runs it with it; kinflow's
    own servers are never started that way."""
    cmd = [sys.executable, os.path.join(STEPS_ROOT, "bench.py"), "--model", "esm2", "--size", "tiny", "--n", "6",
           "--min-len", "5", "--max-len", "20", "--workdir", str(tmp_path), "--set", "KINFLOW_STEPS_DEVICE=cpu",
           "--set", "KINFLOW_STEPS_PRECISION_ESM2=tf32"]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert refused.returncode == 1 and "tf32 has no equivalence proof for esm2 on cpu" in refused.stderr
    ran = subprocess.run(cmd + ["--allow-unproven", "tf32"], capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert ran.returncode == 0, ran.stderr[-800:]
    row = json.loads(ran.stdout.strip().splitlines()[-1])
    assert row["sequences"] == 6 and row["tokens_per_s"] > 0
