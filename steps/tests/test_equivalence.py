"""Equivalence per step key: each step program in its production
configuration (a resident server, default precision, batches padded as the host sends
them) against an independent computation at the reference's precision (each sequence
alone through the model's own library in fp32, reduced here in float64), on
random-weight models of the full architectures' depth and head sizes
(make_tiny_models.make_equivalence), at lengths up to each family's limit. The bound
is kinflow_steps.equivalence's: cosine >= 0.9999 pooled, >= 0.999 per residue, no
non-finite value. ESM C's step: test_esmc.py (.venv-esmc).

Set KINFLOW_EQUIV_REPORT=FILE to write every figure as JSON (docs/BENCHMARKS.md)."""

from __future__ import annotations

import copy
import json
import os
import sys

import numpy as np
import pytest
from conftest import HERE, Server, _require, manifest, out_path
from test_fair_esm import fair_load, rand_seq
from test_prot_t5 import t5_hidden

from kinflow_steps.equivalence import POOLED_MIN_COSINE, RESIDUE_MIN_COSINE, compare

REPORT: list[dict] = []


@pytest.fixture(scope="module")
def eq(tmp_path_factory) -> dict[str, str]:
    _require("torch", "numpy", "esm", "transformers", "sentencepiece")
    import make_tiny_models

    env = make_tiny_models.make_equivalence(str(tmp_path_factory.mktemp("eq")))
    yield env
    path = os.environ.get("KINFLOW_EQUIV_REPORT", "").strip()
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(REPORT, f, indent=1)


@pytest.fixture
def serve(eq, tmp_path):
    """A step server in production configuration on the equivalence models."""
    started: list[Server] = []

    def start(step: str, **extra: str) -> Server:
        env = dict(eq, KINFLOW_STEPS_DEVICE="cpu", KINFLOW_STEPS_PRECISION="")
        env.update(extra)
        s = Server(step, env, str(tmp_path))
        started.append(s)
        assert s.ready.get("ready") is True, s.stderr()
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            assert s.close() == 0, s.stderr()


def check(step: str, artefact: str, sid: str, got, want) -> None:
    """Compare, record the figures, assert the bound."""
    rep = compare(got, want)
    REPORT.append({"step": step, "artefact": artefact, "seq": sid, **rep.as_dict()})
    assert rep.ok, f"{step} {artefact} {sid}: {rep.reason} ({rep.as_dict()})"


_REPS: dict = {}


def fair_reps(
    path: str, seq: str, layers: list[int], state: dict | None = None, token_cut: int | None = None
) -> dict[int, np.ndarray]:
    """[len+2, D] fp32 token representations per layer of one sequence alone (with
    token_cut, of its first token_cut tokens: methods G and H, docs/method-cuts.md)."""
    import torch

    key = (path, seq, tuple(layers), state is not None, token_cut)
    if key not in _REPS:
        model, alphabet = fair_load(path)
        if state is not None:
            model.load_state_dict(state)
        toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])
        if token_cut is not None:
            toks = toks[:, :token_cut]
        with torch.no_grad():
            out = model.eval()(toks, repr_layers=layers)["representations"]
        _REPS[key] = {i: out[i][0].numpy() for i in layers}
    return _REPS[key]


def ref_weighted(res: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The reference's rule, written out: NaN and infinite weights count 0; weights
    summing to 0 or less give the plain mean; else the float64 weighted mean with weights
    normalised (docs/method-cuts.md)."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if w.sum() <= 0:
        return res.astype(np.float64).mean(0)
    return (res.astype(np.float64) * (w / w.sum())[:, None]).sum(0)


def write_table(media: str, rows: dict[str, np.ndarray]) -> None:
    """The binding-site table at full float32 precision (repr of each value)."""
    folder = os.path.join(media, "pseq2sites")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "binding_sites_all.tsv"), "w") as f:
        f.write("PDB\tPred_BS_Scores\n")
        for sid, w in rows.items():
            f.write(sid + "\t" + ",".join(repr(float(v)) for v in np.asarray(w, dtype=np.float32)) + "\n")


def table_weights(seqs: dict[str, str]) -> dict[str, np.ndarray]:
    """Full-precision float32 weights; the second sequence has NaN weights, the third
    only zeros (the reference's edge rules)."""
    rng = np.random.default_rng(11)
    out = {}
    for i, (sid, seq) in enumerate(seqs.items()):
        w = rng.random(len(seq)).astype(np.float32)
        if i == 1:
            w[::7] = np.nan
        if i == 2:
            w[:] = 0
        out[sid] = w
    return out


# --- ESM-2 (methods A, G, H) ------------------------------------------------------

ESM2_A = {"a1500": rand_seq(1500, 101), "a700": rand_seq(700, 102), "a37": rand_seq(37, 103)}


def test_methoda_esm2_layers(serve, eq, media):
    """Method A's ESM-2 at 1,500 residues (no truncation): the rotary case."""
    weights = table_weights(ESM2_A)
    write_table(media, weights)
    fams = [(f"esm2_layer_{n}/{k}", ".npy") for n in (26, 29) for k in ("mean_vecs", "weighted_vecs")]
    step = "methoda_esm2_layers"
    s = serve(step)
    assert s.send(manifest(step, media, ESM2_A, fams))["status"] == "done"
    for sid, seq in ESM2_A.items():
        reps = fair_reps(eq["KINFLOW_ESM2_650M_PATH"], seq, [26, 29])
        for n in (26, 29):
            res = reps[n][1:-1]
            mean, wv = f"esm2_layer_{n}/mean_vecs", f"esm2_layer_{n}/weighted_vecs"
            check(step, mean, sid, np.load(out_path(media, mean, sid)), res.astype(np.float64).mean(0))
            check(step, wv, sid, np.load(out_path(media, wv, sid)), ref_weighted(res, weights[sid]))
    # All-zero weights gave the plain mean (bit for bit: the same reduction).
    np.testing.assert_array_equal(
        np.load(out_path(media, "esm2_layer_26/weighted_vecs", "a37")),
        np.load(out_path(media, "esm2_layer_26/mean_vecs", "a37")),
    )


ESM2_CUT = {"c1030": rand_seq(1030, 104), "c300": rand_seq(300, 105)}


def test_methodh_esm2_last_mean(serve, eq, media):
    s = serve("methodh_esm2_last_mean")
    assert (
        s.send(manifest("methodh_esm2_last_mean", media, ESM2_CUT, [("esm2_layer_last_mean", ".npy")]))["status"]
        == "done"
    )
    for sid, seq in ESM2_CUT.items():
        res = fair_reps(eq["KINFLOW_ESM2_650M_PATH"], seq, [33], token_cut=1024)[33][1 : 1 + min(len(seq), 1023)]
        check("methodh_esm2_last_mean", "esm2_layer_last_mean", sid,
              np.load(out_path(media, "esm2_layer_last_mean", sid)), res.astype(np.float64).mean(0))  # fmt: skip


def test_methodg_esm2(serve, eq, media):
    import torch

    s = serve("methodg_esm2")
    assert s.send(manifest("methodg_esm2", media, ESM2_CUT, [("methodg_esm2", ".pt")]))["status"] == "done"
    for sid, seq in ESM2_CUT.items():
        res = fair_reps(eq["KINFLOW_ESM2_650M_PATH"], seq, [33], token_cut=1024)[33][1 : 1 + min(len(seq), 1023)]
        got = torch.load(out_path(media, "methodg_esm2", sid, ".pt"), weights_only=True)
        check("methodg_esm2", "methodg_esm2", sid, got.numpy(), res)


def test_old_fp16_cast_breaks_the_bound(eq):
    """What the programs did before on CUDA — ``model.to(float16)``, which also casts
    ESM-2's rotary ``inv_freq`` so fair-esm builds its position table in fp16 — fails
    the bound at 1,500 residues; so does the fp16 position table alone in an fp32
    model. pin_rotary_fp32 restores the table (fp32 positions) after any cast."""
    import torch

    from kinflow_steps.models import pin_rotary_fp32

    seq = ESM2_A["a1500"]
    want = fair_reps(eq["KINFLOW_ESM2_650M_PATH"], seq, [33])[33][1:-1]
    model, alphabet = fair_load(eq["KINFLOW_ESM2_650M_PATH"])
    toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])

    def run(m):
        with torch.no_grad():
            return m(toks, repr_layers=[33])["representations"][33][0, 1:-1].float().numpy()

    old = copy.deepcopy(model).eval().to(torch.float16)  # the old code path
    got = run(old)
    res, pooled = compare(got, want), compare(got.mean(0), want.mean(0))
    REPORT.append({"step": "old fp16 cast (model.to(float16))", "artefact": "layer 33", "seq": "a1500",
                   **res.as_dict(), "pooled_cosine": pooled.min_cosine})  # fmt: skip
    assert not res.ok and not pooled.ok, (res, pooled)

    positions = copy.deepcopy(model).eval()
    for m in positions.modules():
        if type(m).__name__ == "RotaryEmbedding":
            m.inv_freq = m.inv_freq.half()  # what model.to(float16) does to it
    got = run(positions)
    res, pooled = compare(got, want), compare(got.mean(0), want.mean(0))
    REPORT.append({"step": "fp32 model, fp16 position table", "artefact": "layer 33", "seq": "a1500",
                   **res.as_dict(), "pooled_cosine": pooled.min_cosine})  # fmt: skip
    assert not res.ok, res

    pinned = copy.deepcopy(model).eval().to(torch.float16)
    assert pin_rotary_fp32(pinned) == 33
    rot = pinned.layers[0].self_attn.rot_emb
    q = torch.zeros(1, 1502, 64, dtype=torch.float16)
    q[..., 0] = 1  # rotate a unit vector: its first component is cos(position * inv_freq[0])
    got_q, _ = rot(q, q)
    angles = torch.arange(1502, dtype=torch.float64)[:, None] * (
        1.0 / 10000 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    )
    err = (got_q[0, :, 0].double() - angles[:, 0].cos()).abs().max().item()
    assert err < 1e-3, err  # fp16 rounding of the result only, not of the angle


# --- ESM-1v (method F), ESM-1b (method D) --------------------------------------------


def test_methodf_esm1v(serve, eq, media):
    seqs = {"f1100": rand_seq(1100, 106), "f300": rand_seq(300, 107)}
    s = serve("methodf_esm1v")
    assert s.send(manifest("methodf_esm1v", media, seqs, [("esm1v", ".npy")]))["status"] == "done"
    for sid, seq in seqs.items():
        fit = seq if len(seq) <= 1022 else seq[:500] + seq[-500:]
        res = fair_reps(eq["KINFLOW_ESM1V_PATH"], fit, [33])[33][1:-1]
        check("methodf_esm1v", "esm1v", sid, np.load(out_path(media, "esm1v", sid)), res)


def test_methodd_esm1b(serve, eq, media):
    import torch

    seqs = {"d1050": rand_seq(1050, 108), "d300": rand_seq(300, 109)}
    s = serve("methodd_esm1b")
    assert s.send(manifest("methodd_esm1b", media, seqs, [("esm1b_methodd", ".npy")]))["status"] == "done"
    raw = torch.load(eq["KINFLOW_METHODD_CHECKPOINT"], weights_only=True)
    state = {k[len("module.model.") :]: v for k, v in raw.items() if k.startswith("module.model.")}
    for sid, seq in seqs.items():
        cls = fair_reps(eq["KINFLOW_ESM1B_PATH"], seq[:1022], [33], state=state)[33][0]
        check("methodd_esm1b", "esm1b_methodd", sid, np.load(out_path(media, "esm1b_methodd", sid)), cls)


# --- ProtT5-XL (methods A, B/C, I) ----------------------------------------------------

T5_SEQS = {"t1499": rand_seq(1499, 110), "t600": rand_seq(600, 111), "t25": rand_seq(25, 112)}


def test_prot_t5_mean_and_methodi(serve, eq, media):
    seqs = {"t1499": T5_SEQS["t1499"], "t600": T5_SEQS["t600"]}
    s = serve("prot_t5_mean")
    assert s.send(manifest("prot_t5_mean", media, seqs, [("prot_t5_last/mean_vecs", ".npy")]))["status"] == "done"
    r = serve("methodi_prot_t5_residues")
    assert (
        r.send(manifest("methodi_prot_t5_residues", media, seqs, [("methodi_prot_t5_residues", ".npy")]))["status"]
        == "done"
    )
    for sid, seq in seqs.items():
        _, last = t5_hidden(eq["KINFLOW_PROT_T5_PATH"], seq)
        check("prot_t5_mean", "prot_t5_last/mean_vecs", sid,
              np.load(out_path(media, "prot_t5_last/mean_vecs", sid)), last.astype(np.float64).mean(0))  # fmt: skip
        check("methodi_prot_t5_residues", "methodi_prot_t5_residues", sid,
              np.load(out_path(media, "methodi_prot_t5_residues", sid)), last)  # fmt: skip


def test_methoda_t5_full(serve, eq, media):
    weights = table_weights(T5_SEQS)
    write_table(media, weights)
    fams = [(f"{r}/{k}", ".npy") for r in ("prot_t5_layer_19", "prot_t5_last") for k in ("mean_vecs", "weighted_vecs")]
    s = serve("methoda_t5_full")
    assert s.send(manifest("methoda_t5_full", media, T5_SEQS, fams))["status"] == "done"
    for sid, seq in T5_SEQS.items():
        l19, last = t5_hidden(eq["KINFLOW_PROT_T5_PATH"], seq)
        for root, res in (("prot_t5_layer_19", l19), ("prot_t5_last", last)):
            check("methoda_t5_full", f"{root}/mean_vecs", sid,
                  np.load(out_path(media, f"{root}/mean_vecs", sid)), res.astype(np.float64).mean(0))  # fmt: skip
            check("methoda_t5_full", f"{root}/weighted_vecs", sid,
                  np.load(out_path(media, f"{root}/weighted_vecs", sid)), ref_weighted(res, weights[sid]))  # fmt: skip


# --- Method E (CatPred stand-in over the equivalence ESM-2) -------------------------------


@pytest.mark.parametrize("param", ["kcat", "km"])
def test_methode_embed(serve, eq, media, tmp_path, param):
    import torch
    from test_methode import ROOT, expected

    sys.path.insert(0, ROOT)
    from catpred.utils import make_checkpoint

    ckroot = tmp_path / "ckpt"
    d = ckroot / param / "fold_0" / "model_0"
    d.mkdir(parents=True)
    make_checkpoint(str(d / "model.pt"), seed=3, esm_dim=128)  # the equivalence ESM-2's width
    seqs = {"e1500": rand_seq(1500, 113), "e200": rand_seq(200, 114)}
    step = f"methode_embed_{param}"
    fam = f"methode_esm2/{param}/fold_0__model_0"
    s = serve(step, KINFLOW_CATPRED_ROOT=ROOT, METHODE_CHECKPOINT_ROOT=str(ckroot))
    assert s.send(manifest(step, media, seqs, [(fam, ".pt")]))["status"] == "done"
    for sid, seq in seqs.items():
        got = torch.load(os.path.join(media, "sequence_info", fam, sid + ".pt"), weights_only=True)
        want = expected(str(d / "model.pt"), seq, eq["KINFLOW_ESM2_650M_PATH"])
        check(step, fam, sid, got.numpy(), want)


def test_equivalence_bounds_are_the_stated_ones():
    """The bounds every step must meet: pooled cosine 0.9999, per-residue 0.999."""
    assert (POOLED_MIN_COSINE, RESIDUE_MIN_COSINE) == (0.9999, 0.999)
    assert HERE
