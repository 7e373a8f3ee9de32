"""ESM-2's unpadded forward pass (kinflow_steps.models.UnpaddedESM2) against fair-esm
itself, each sequence alone: the same numbers at fp32 on the CPU, where its arithmetic is
fair-esm's without the padding. The fp16 fast path it serves on CUDA is proven on a GPU
(steps/gpu_suite.py; docs/BENCHMARKS.md, "Step programs on a GPU"); here its logic is: the
token layout, the per-sequence rotary positions, the cut, the CLS row, the last layer's
norm, the representations of inner layers, and the compiled variant."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import manifest, out_path
from test_fair_esm import fair_model, rand_seq

from kinflow_steps.equivalence import compare

EQ_DIM, EQ_HEADS = 128, 2


@pytest.fixture(scope="module")
def eq_esm2(tmp_path_factory) -> str:
    """The equivalence tests' ESM-2: 33 layers, head size 64, attention sharpened."""
    import make_tiny_models

    folder = str(tmp_path_factory.mktemp("unpadded"))
    return make_tiny_models.write_esm2(folder, EQ_DIM, EQ_HEADS, make_tiny_models.EQ_QK_SCALE, name="esm2_t33_unp")


def fair_alone(path: str, seq: str, layers: list[int], cut: int | None = None) -> dict[int, np.ndarray]:
    """[tokens, D] representations of seq alone through fair-esm (BOS, residues, EOS; cut),
    its model loaded once per file (test_fair_esm.fair_model)."""
    import torch

    model, alphabet = fair_model(path, False)
    toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])
    if cut:
        toks = toks[:, :cut]
    with torch.no_grad():
        reps = model(toks, repr_layers=layers)["representations"]
    return {k: v[0].numpy() for k, v in reps.items()}


def unpadded(path: str, monkeypatch, compiled: bool = False):
    import torch

    from kinflow_steps.models import FairESM

    monkeypatch.setenv("KINFLOW_STEPS_UNPADDED", "1")
    monkeypatch.setenv("KINFLOW_STEPS_COMPILE", "1" if compiled else "")
    fm = FairESM(path, torch.device("cpu"), torch.float32)
    assert fm.unpadded is not None and fm.unpadded.compiled is compiled
    return fm


# Lengths 1, the limit (1,022 residues: 1,024 tokens), limit + 1, far past it.
LENGTHS = [1, 5, 300, 1022, 1023, 1500]


def test_unpadded_equals_fair_esm_per_residue(eq_esm2, monkeypatch):
    fm = unpadded(eq_esm2, monkeypatch)
    seqs = [rand_seq(n, 500 + n) for n in LENGTHS]
    got = fm.embed(seqs, [0, 26, "last"])
    for i, s in enumerate(seqs):
        want = fair_alone(eq_esm2, s, [0, 26, 33])
        for layer, key in ((0, 0), (26, 26), (33, "last")):
            w = want[layer][1:-1]
            assert got[key][i].shape == w.shape == (len(s), EQ_DIM)
            r = compare(got[key][i], w)
            assert r.ok and r.min_cosine > 1 - 1e-6, (len(s), layer, r)


def test_unpadded_keeps_the_methods_cut_and_cls(eq_esm2, monkeypatch):
    """G and H's 1,024-token cut (BOS and 1,023 residues, no EOS) per sequence, whatever
    else is in the batch; method D's CLS row."""
    fm = unpadded(eq_esm2, monkeypatch)
    seqs = [rand_seq(1030, 7), rand_seq(700, 8), rand_seq(1022, 9)]
    got = fm.embed(seqs, ["last"], max_tokens=1024)["last"]
    cls = fm.embed(seqs, ["last"], cls=True)["last"]
    for i, s in enumerate(seqs):
        want = fair_alone(eq_esm2, s, [33], cut=1024)[33]
        rows = min(len(s), 1023)
        assert got[i].shape == (rows, EQ_DIM)
        assert compare(got[i], want[1 : rows + 1]).ok
        assert compare(cls[i], fair_alone(eq_esm2, s, [33])[33][0], "pooled").ok


def test_unpadded_compiled_equals_fair_esm(eq_esm2, monkeypatch):
    fm = unpadded(eq_esm2, monkeypatch, compiled=True)
    seqs = [rand_seq(40, 11), rand_seq(90, 12)]
    got = fm.embed(seqs, [29, "last"])
    for i, s in enumerate(seqs):
        want = fair_alone(eq_esm2, s, [29, 33])
        assert compare(got[29][i], want[29][1:-1]).ok
        assert compare(got["last"][i], want[33][1:-1]).ok


def test_unpadded_server_writes_what_fair_esm_computes(server, tiny, media):
    """The resident program of method H with KINFLOW_STEPS_UNPADDED=1: the files, and a
    fingerprint that names the path (the cache keeps its numbers apart)."""
    seqs = {"u1": rand_seq(37, 1), "u2": rand_seq(3, 2), "u3": rand_seq(120, 3)}
    s = server("methodh_esm2_last_mean", KINFLOW_STEPS_UNPADDED="1")
    assert "unpadded" in s.ready["fingerprint"]["precision"]
    ans = s.send(manifest("methodh_esm2_last_mean", media, seqs, [("esm2_layer_last_mean", ".npy")]))
    assert ans == {"batch": 1, "status": "done"}, json.dumps(ans)
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "esm2_layer_last_mean", sid))
        want = fair_alone(tiny["KINFLOW_ESM2_650M_PATH"], seq, [33])[33][1:-1].astype(np.float64).mean(0)
        assert compare(got, want).ok


def test_precision_per_family(monkeypatch):
    """fp16 is proven for ESM-2 on CUDA (the unpadded path), bf16 is not; the per-family
    name wins over KINFLOW_STEPS_PRECISION, so one host can ask fp16 of ESM-2 alone."""
    import torch

    from kinflow_steps.errors import ConfigError
    from kinflow_steps.precision import precision_for

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.delenv("KINFLOW_STEPS_PRECISION", raising=False)
    assert precision_for("esm2", cuda) == "tf32"  # proven on an H200: the default
    assert precision_for("esm1b", cuda) == precision_for("esm1v", cuda) == "fp32"
    monkeypatch.setenv("KINFLOW_STEPS_PRECISION_ESM2", "fp32")
    assert precision_for("esm2", cuda) == "fp32"  # strict fp32 still named
    monkeypatch.setenv("KINFLOW_STEPS_PRECISION_ESM2", "fp16")
    assert precision_for("esm2", cuda) == "fp16"
    assert precision_for("esmc", cuda) == "bf16"
    with pytest.raises(ConfigError, match="KINFLOW_STEPS_PRECISION_ESM2=fp16 has no equivalence proof for esm2 on cpu"):
        precision_for("esm2", cpu)
    monkeypatch.setenv("KINFLOW_STEPS_PRECISION_ESM2", "bf16")
    with pytest.raises(ConfigError, match="no equivalence proof"):
        precision_for("esm2", cuda)
    monkeypatch.delenv("KINFLOW_STEPS_PRECISION_ESM2")
    monkeypatch.setenv("KINFLOW_STEPS_PRECISION", "fp16")
    with pytest.raises(ConfigError, match="KINFLOW_STEPS_PRECISION=fp16 has no equivalence proof for esm1b"):
        precision_for("esm1b", cuda)


def test_fingerprint_names_the_esm2_path(monkeypatch):
    import torch

    from kinflow_steps.models import esm2_path

    monkeypatch.delenv("KINFLOW_STEPS_UNPADDED", raising=False)
    monkeypatch.delenv("KINFLOW_STEPS_COMPILE", raising=False)
    assert esm2_path(torch.float32) == ""
    assert esm2_path(torch.float16) == ", unpadded (fp32 residual stream, norms and rotation)"
    monkeypatch.setenv("KINFLOW_STEPS_COMPILE", "1")
    assert esm2_path(torch.float16).endswith(", compiled")
    monkeypatch.setenv("KINFLOW_STEPS_UNPADDED", "1")
    assert esm2_path(torch.float32) == ", unpadded, compiled"
