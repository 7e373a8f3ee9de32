"""ESM C's step (methoda_esmc_layers) on EvolutionaryScale's real ``esm`` package
(.venv-esmc: `make test` runs these with ``-m esmc``): a random-weight ESM C built with
the package's own classes at ESM C 600M's depth (36 layers) and head size (64), its
state dict loaded by the step program from a ``.pth`` as the 600M weights are. The
program in production configuration (resident server, batch padded) against the
reference's own call path for each sequence alone (``ESMC.encode`` + ``ESMC.logits``
with ``return_hidden_states``), reduced here in float64, within the equivalence bound,
up to 1,500 residues (Pseq2Sites' limit for method A)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import Server, _require, manifest, out_path
from test_equivalence import REPORT, check, ref_weighted, table_weights, write_table
from test_fair_esm import rand_seq

pytestmark = pytest.mark.esmc

#: d_model, n_heads, n_layers: 600M's depth and head size (1152 / 18 = 64), 2 heads.
SHAPE = (128, 2, 36)


@pytest.fixture(scope="module")
def esmc_path(tmp_path_factory) -> str:
    _require("torch", "numpy", "esm.models.esmc", "esm.tokenization")
    import make_tiny_models

    path = make_tiny_models.write_esmc(str(tmp_path_factory.mktemp("esmc")), SHAPE, name="esmc_eq", qk_ln_scale=2.0)
    yield path
    report = os.environ.get("KINFLOW_EQUIV_REPORT_ESMC", "").strip()
    if report:
        import json

        with open(report, "w", encoding="utf-8") as f:
            json.dump(REPORT, f, indent=1)


_MODEL: dict = {}


def reference_hidden(path: str, seq: str, layer: int) -> np.ndarray:
    """Residue rows of hidden_states[layer] for one sequence through the reference's
    call path (ESMC.encode + ESMC.logits), fp32 on the CPU as the reference runs there."""
    import torch
    from esm.models.esmc import ESMC
    from esm.sdk.api import ESMProtein, LogitsConfig
    from esm.tokenization import get_esmc_model_tokenizers

    if path not in _MODEL:
        d, h, n = SHAPE
        m = ESMC(d_model=d, n_heads=h, n_layers=n, tokenizer=get_esmc_model_tokenizers(), use_flash_attn=False)
        m.load_state_dict(torch.load(path, weights_only=True))
        _MODEL[path] = m.eval()
    m = _MODEL[path]
    out = m.logits(m.encode(ESMProtein(sequence=seq)), LogitsConfig(sequence=True, return_hidden_states=True))
    return out.hidden_states[layer][0].to(torch.float32).numpy()[1:-1]


def esmc_env(path):
    """The step program's environment for the tiny ESM C at path, on the CPU at the
    default precision."""
    return {
        "KINFLOW_ESMC_600M_PATH": path,
        "KINFLOW_ESMC_SHAPE": ",".join(str(x) for x in SHAPE),
        "KINFLOW_STEPS_DEVICE": "cpu",
        "KINFLOW_STEPS_PRECISION": "",
    }


def test_methoda_esmc_layers(esmc_path, media, tmp_path):
    seqs = {"c1500": rand_seq(1500, 201), "c600": rand_seq(600, 202), "c30": rand_seq(30, 203)}
    weights = table_weights(seqs)
    write_table(media, weights)
    fams = [(f"esmc_layer_{n}/{k}", ".npy") for n in (24, 32) for k in ("mean_vecs", "weighted_vecs")]
    s = Server("methoda_esmc_layers", esmc_env(esmc_path), str(tmp_path))
    try:
        assert s.ready.get("ready") is True, s.stderr()
        assert s.send(manifest("methoda_esmc_layers", media, seqs, fams))["status"] == "done", s.stderr()
    finally:
        assert s.close() == 0, s.stderr()
    for sid, seq in seqs.items():
        for n in (24, 32):
            res = reference_hidden(esmc_path, seq, n)
            assert res.shape == (len(seq), SHAPE[0])
            mean, wv = f"esmc_layer_{n}/mean_vecs", f"esmc_layer_{n}/weighted_vecs"
            got = np.load(out_path(media, mean, sid))
            assert got.dtype == np.float32 and got.shape == (SHAPE[0],)
            check("methoda_esmc_layers", mean, sid, got, res.astype(np.float64).mean(0))
            check("methoda_esmc_layers", wv, sid, np.load(out_path(media, wv, sid)), ref_weighted(res, weights[sid]))
    assert not np.allclose(
        np.load(out_path(media, "esmc_layer_24/mean_vecs", "c600")),
        np.load(out_path(media, "esmc_layer_32/mean_vecs", "c600")),
    )


def test_one_residue_is_not_padded_into_a_long_pass(esmc_path, media, tmp_path):
    """ESM C's length buckets (kinflow_steps.steps.LENGTH_SPREAD): a 1-residue sequence
    sent with a 1,500-residue one runs in a pass of its own, and its pooled files match
    the reference alone to fp32 rounding."""
    seqs = {"c1500": rand_seq(1500, 211), "c1": rand_seq(1, 212)}
    weights = table_weights(seqs)
    write_table(media, weights)
    fams = [(f"esmc_layer_{n}/{k}", ".npy") for n in (24, 32) for k in ("mean_vecs", "weighted_vecs")]
    from kinflow_steps.steps import STEPS, parse_manifest

    os.environ["KINFLOW_STEPS_DEVICE"] = "cpu"
    try:
        groups, _ = STEPS["methoda_esmc_layers"]().plan(
            parse_manifest(manifest("methoda_esmc_layers", media, seqs, fams))
        )
    finally:
        os.environ.pop("KINFLOW_STEPS_DEVICE")
    assert [[s.seq_id for s, _ in g] for g in groups] == [["c1500"], ["c1"]]
    s = Server("methoda_esmc_layers", esmc_env(esmc_path), str(tmp_path))
    try:
        assert s.ready.get("ready") is True, s.stderr()
        assert s.send(manifest("methoda_esmc_layers", media, seqs, fams))["status"] == "done", s.stderr()
    finally:
        assert s.close() == 0, s.stderr()
    for n in (24, 32):
        res = reference_hidden(esmc_path, seqs["c1"], n).astype(np.float64)
        got = np.load(out_path(media, f"esmc_layer_{n}/mean_vecs", "c1"))
        np.testing.assert_allclose(got, res.mean(0), rtol=1e-5, atol=1e-5 * np.abs(res).max())
        wv = np.load(out_path(media, f"esmc_layer_{n}/weighted_vecs", "c1"))
        np.testing.assert_allclose(wv, ref_weighted(res, weights["c1"]), rtol=1e-5, atol=1e-5 * np.abs(res).max())


def test_fair_esm_is_not_here():
    """This venv's `esm` is EvolutionaryScale's: fair-esm's steps run in .venv-steps."""
    import esm

    assert not hasattr(esm, "pretrained") or not hasattr(esm.pretrained, "load_model_and_alphabet_local")
