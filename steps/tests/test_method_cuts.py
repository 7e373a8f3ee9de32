"""The methods' own length cuts, from a table written from each method's code
(docs/method-cuts.md cites file and line), independent of kinflow_steps: for every
rule the reference computation is done here, from the table alone, with fair-esm on
the tiny random-weight models, at lengths 1, the limit, limit + 1 and far past it."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import manifest, out_path

TOL = dict(rtol=1e-4, atol=1e-5)

# step: (model path key, family, suffix, output, rule, limit)
#   rule "seq": the sequence string is cut to its first `limit` residues, then
#               tokenised with BOS and EOS (TurNup: seq[:1022]).
#   rule "tokens": the token matrix [BOS, residues, EOS] is cut to its first `limit`
#               columns (OmniESI / RealKcat workers: batch_tokens[:, :1024]).
#   output "cls": the BOS row; "rows": residue rows 1..; "mean": their mean.
RULES = {
    "methodd_esm1b": ("KINFLOW_ESM1B_PATH", "esm1b_methodd", ".npy", "cls", "seq", 1022),
    "methodg_esm2": ("KINFLOW_ESM2_650M_PATH", "methodg_esm2", ".pt", "rows", "tokens", 1024),
    "methodh_esm2_last_mean": ("KINFLOW_ESM2_650M_PATH", "esm2_layer_last_mean", ".npy", "mean", "tokens", 1024),
}


def rand_seq(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(n))


def reference(path: str, seq: str, output: str, rule: str, limit: int, state: dict | None = None) -> np.ndarray:
    import argparse

    import esm
    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        model, alphabet = esm.pretrained.load_model_and_alphabet_local(path)
    if state is not None:
        model.load_state_dict(state)
    model.eval()
    if rule == "seq":
        seq = seq[:limit]
    toks = [alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]
    if rule == "tokens":
        toks = toks[:limit]
    with torch.no_grad():
        rep = model(torch.tensor([toks]), repr_layers=[model.num_layers])["representations"][model.num_layers][0]
    rep = rep.numpy()
    residues = rep[1 : 1 + min(len(seq), len(toks) - 1)]
    return {"cls": rep[0], "rows": residues, "mean": residues.mean(0)}[output]


def lengths(rule: str, limit: int) -> list[int]:
    last = limit if rule == "seq" else limit - 1  # the most residues kept
    return [1, last, last + 1, last + 2, 1500]


@pytest.mark.parametrize("step", sorted(RULES))
def test_method_cut_equals_the_methods_code(server, tiny, media, step):
    import torch

    key, family, suffix, output, rule, limit = RULES[step]
    seqs = {f"c{n}": rand_seq(n, n) for n in lengths(rule, limit)}
    s = server(step)
    assert s.send(manifest(step, media, seqs, [(family, suffix)]))["status"] == "done"
    state = None
    if step == "methodd_esm1b":
        raw = torch.load(tiny["KINFLOW_METHODD_CHECKPOINT"])
        state = {k[len("module.model.") :]: v for k, v in raw.items() if k.startswith("module.model.")}
    for sid, seq in seqs.items():
        p = out_path(media, family, sid, suffix)
        got = torch.load(p).numpy() if suffix == ".pt" else np.load(p)
        want = reference(tiny[key], seq, output, rule, limit, state)
        assert got.shape == want.shape, (step, len(seq), got.shape, want.shape)
        np.testing.assert_allclose(got, want, **TOL)


def reference_weighted(res: np.ndarray, w: np.ndarray) -> np.ndarray:
    """KinForm's weighted mean (sequence_features.py _weighted_mean): NaN and ±inf
    weights become 0; a sum that is not finite and positive gives the plain mean."""
    w = np.array(w, dtype=float)
    w[~np.isfinite(w)] = 0.0
    denom = float(w.sum())
    if not np.isfinite(denom) or denom <= 0.0:
        return res.mean(axis=0)
    return (res * (w / denom)[:, None]).sum(axis=0)


@pytest.mark.parametrize(
    "w",
    [
        [0.2, 0.5, 0.3, 0.9],
        [np.inf, 0.5, 0.3, 0.9],
        [0.2, -np.inf, 0.3, 0.9],
        [np.nan, 0.5, np.inf, 0.9],
        [np.inf, np.inf, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
    ],
)
def test_weighted_mean_edge_weights_equal_the_methods_code(w):
    from kinflow_steps.steps import weighted_vec

    res = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(weighted_vec(res, np.array(w)), reference_weighted(res.astype(np.float64), w), **TOL)
