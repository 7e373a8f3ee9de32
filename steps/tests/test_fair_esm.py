"""ESM-2, ESM-1v and ESM-1b steps against an independent computation: each sequence
run alone through fair-esm's own loader, sliced and reduced here."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
from conftest import hidden_files, manifest, out_path

TOL = dict(rtol=1e-4, atol=1e-5)


def rand_seq(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(n))


_MODELS: dict = {}


def fair_load(path: str):
    """fair-esm's own local loader; torch >= 2.6 loads weights only, and fair-esm's
    checkpoints hold an argparse.Namespace (allowed explicitly, as the program does)."""
    import argparse

    import esm
    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        return esm.pretrained.load_model_and_alphabet_local(path)


def fair_model(path: str, tuned: bool):
    """fair-esm's own loader, once per file (and once more with method D's weights)."""
    key = (path, tuned)
    if key not in _MODELS:
        model, alphabet = fair_load(path)
        _MODELS[key] = (model.eval(), alphabet)
    return _MODELS[key]


def fair_reps(path: str, seq: str, layer: int | None = None, state: dict | None = None):
    """[len+2, D] token representations of one sequence alone (BOS, residues, EOS)."""
    import torch

    model, alphabet = fair_model(path, state is not None)
    if state is not None:
        model.load_state_dict(state)
    idx = model.num_layers if layer is None else layer
    toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])
    with torch.no_grad():
        out = model(toks, repr_layers=[idx])
    return out["representations"][idx][0].numpy()


def write_table(media: str, rows: dict[str, np.ndarray]) -> None:
    folder = os.path.join(media, "pseq2sites")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "binding_sites_all.tsv"), "w") as f:
        f.write("PDB\tPred_BS_Scores\n")
        for sid, w in rows.items():
            f.write(sid + "\t" + ",".join(f"{v:.6f}" for v in w) + "\n")


def test_methodh_mean_excludes_bos_eos(server, tiny, media):
    seqs = {"h1": rand_seq(37, 1), "h2": rand_seq(12, 2), "h3": "MKV"}
    s = server("methodh_esm2_last_mean")
    assert s.send(manifest("methodh_esm2_last_mean", media, seqs, [("esm2_layer_last_mean", ".npy")])) == {
        "batch": 1,
        "status": "done",
    }
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "esm2_layer_last_mean", sid))
        assert got.dtype == np.float32 and got.shape == (32,)
        reps = fair_reps(tiny["KINFLOW_ESM2_650M_PATH"], seq)
        np.testing.assert_allclose(got, reps[1:-1].mean(0), **TOL)
        assert not np.allclose(got, reps.mean(0), **TOL)  # BOS/EOS really left out
    assert hidden_files(media) == []
    man = json.load(open(os.path.join(media, "sequence_info", "esm2_layer_last_mean", "manifest.json")))
    assert man["count"] == 3 and man["entries"]["h1"]["ready"] is True and man["entries"]["h1"]["filename"] == "h1.npy"


def test_methodg_residue_tensor_and_token_cut(server, tiny, media):
    """A long sequence keeps the reference's 1,023 rows (tokens cut at 1,024; the values
    are checked in test_method_cuts.py); a short one is BOS/EOS-free residues."""
    import torch

    seqs = {"g1": rand_seq(1030, 3), "g2": rand_seq(20, 4)}
    s = server("methodg_esm2")
    assert s.send(manifest("methodg_esm2", media, seqs, [("methodg_esm2", ".pt")]))["status"] == "done"
    for sid, seq in seqs.items():
        got = torch.load(out_path(media, "methodg_esm2", sid, ".pt"))
        assert got.dtype == torch.float32 and tuple(got.shape) == (min(len(seq), 1023), 32)
    got = torch.load(out_path(media, "methodg_esm2", "g2", ".pt"))
    np.testing.assert_allclose(got.numpy(), fair_reps(tiny["KINFLOW_ESM2_650M_PATH"], seqs["g2"])[1:-1], **TOL)


def test_methoda_esm2_mean_and_weighted(server, tiny, media):
    seqs = {"a1": rand_seq(25, 5), "a2": rand_seq(9, 6)}
    rng = np.random.default_rng(0)
    weights = {sid: np.round(rng.random(len(seq)), 6) for sid, seq in seqs.items()}
    write_table(media, weights)
    fams = [(f"esm2_layer_{n}/{k}", ".npy") for n in (26, 29) for k in ("mean_vecs", "weighted_vecs")]
    s = server("methoda_esm2_layers")
    assert s.send(manifest("methoda_esm2_layers", media, seqs, fams))["status"] == "done"
    for sid, seq in seqs.items():
        for layer in (26, 29):
            res = fair_reps(tiny["KINFLOW_ESM2_650M_PATH"], seq, layer)[1:-1]
            mean = np.load(out_path(media, f"esm2_layer_{layer}/mean_vecs", sid))
            wv = np.load(out_path(media, f"esm2_layer_{layer}/weighted_vecs", sid))
            assert mean.dtype == wv.dtype == np.float32 and mean.shape == wv.shape == (32,)
            np.testing.assert_allclose(mean, res.mean(0), **TOL)
            w = weights[sid] / weights[sid].sum()
            np.testing.assert_allclose(wv, (res * w[:, None]).sum(0), **TOL)
            assert not np.allclose(mean, wv, **TOL)


def test_methoda_esm2_missing_row_fails_batch_keeps_means(server, media):
    seqs = {"m1": rand_seq(15, 7)}
    fams = [(f"esm2_layer_{n}/{k}", ".npy") for n in (26, 29) for k in ("mean_vecs", "weighted_vecs")]
    s = server("methoda_esm2_layers")
    ans = s.send(manifest("methoda_esm2_layers", media, seqs, fams))
    assert ans["status"] == "error" and "m1" in ans["message"] and "binding-site" in ans["message"]
    assert os.path.exists(out_path(media, "esm2_layer_26/mean_vecs", "m1"))
    assert not os.path.exists(out_path(media, "esm2_layer_26/weighted_vecs", "m1"))
    # still serving
    write_table(media, {"m1": np.full(15, 0.5)})
    assert s.send(manifest("methoda_esm2_layers", media, seqs, fams, batch=2)) == {"batch": 2, "status": "done"}


def test_methodf_esm1v_residues_and_long_rule(server, tiny, media):
    long = rand_seq(1100, 8)
    seqs = {"f1": rand_seq(30, 9), "f2": long}
    s = server("methodf_esm1v")
    assert s.send(manifest("methodf_esm1v", media, seqs, [("esm1v", ".npy")]))["status"] == "done"
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "esm1v", sid))
        want_seq = seq if len(seq) <= 1022 else seq[:500] + seq[-500:]
        assert got.dtype == np.float32 and got.shape == (len(want_seq), 32)
        np.testing.assert_allclose(got, fair_reps(tiny["KINFLOW_ESM1V_PATH"], want_seq)[1:-1], **TOL)


def test_methodd_cls_with_tuned_weights(server, tiny, media):
    import torch

    seqs = {"d1": rand_seq(40, 10), "d2": rand_seq(1050, 11)}
    s = server("methodd_esm1b")
    assert s.send(manifest("methodd_esm1b", media, seqs, [("esm1b_methodd", ".npy")]))["status"] == "done"
    raw = torch.load(tiny["KINFLOW_METHODD_CHECKPOINT"])
    state = {k[len("module.model.") :]: v for k, v in raw.items() if k.startswith("module.model.")}
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "esm1b_methodd", sid))
        assert got.dtype == np.float32 and got.shape == (32,)
        tuned = fair_reps(tiny["KINFLOW_ESM1B_PATH"], seq[:1022], state=state)[0]
        np.testing.assert_allclose(got, tuned, **TOL)
        base = fair_reps(tiny["KINFLOW_ESM1B_PATH"], seq[:1022])[0]
        assert not np.allclose(got, base, **TOL)  # the fine-tuned weights were applied


@pytest.mark.parametrize("budget", ["0", "40"])
def test_sub_batches_give_same_files(server, tiny, media, budget):
    seqs = {f"s{i}": rand_seq(5 + 3 * i, 20 + i) for i in range(6)}
    s = server("methodh_esm2_last_mean", KINFLOW_STEPS_TOKS_PER_BATCH=budget)
    assert (
        s.send(manifest("methodh_esm2_last_mean", media, seqs, [("esm2_layer_last_mean", ".npy")]))["status"] == "done"
    )
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "esm2_layer_last_mean", sid))
        np.testing.assert_allclose(got, fair_reps(tiny["KINFLOW_ESM2_650M_PATH"], seq)[1:-1].mean(0), **TOL)
