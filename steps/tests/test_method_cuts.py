"""The methods' own length cuts and their treatment of lower case and non-standard
residues, from tables written from each method's code (docs/method-cuts.md cites file
and line), independent of kinflow_steps: for every rule the reference computation is
done here, from the table alone, with the model's own library (fair-esm, transformers'
T5, EvolutionaryScale's ESM C) on the tiny random-weight models: lengths 1, the limit,
limit + 1 and far past it; lower case, U, Z, O, B, X and J."""

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


# --- Lower case and residues outside the 20 standard ones -------------------------
#
# Each step's rule as the method's own code applies it (docs/method-cuts.md, "Lower
# case and non-standard residues"), computed here with the model's own library from
# this table alone:
#   "t5":       ProtT5 as KinForm's, UniKP's and the mean worker call it: U/Z/O/B (upper
#               case only) become X, residues joined by single spaces,
#               T5Tokenizer(do_lower_case=False); every other letter, lower case
#               included, goes to the tokenizer as it is; rows before the EOS.
#   "t5_words": method I's worker: whitespace removed, U/Z/O/B -> X, the letters as
#               words (is_split_into_words), otherwise as "t5".
#   "fair":     fair-esm's batch converter on the sequence as given: X, B, U, Z, O are
#               tokens of its alphabet; any other letter (lower case, J) makes it raise,
#               so the sequence gets no file.
#   "esmc":     ESM C's own tokenizer through ESMC.encode: X, B, U, Z, O are tokens;
#               any other letter (lower case, J) is <unk>, one token per letter.
#   "catpred":  CatPred's 20-letter residue index after fair-esm: any other letter fails.
# step: (model path key, rule, [(family, suffix, layer, output)], cut); output "mean",
# "weighted", "rows" or "cls"; cut: the method's length cut before or after encoding
# (the first table): ("seq", 1022) the string's first 1,022 residues, ("halves", 1022)
# over 1,022 the first 500 + last 500, ("tokens", 1024) the token matrix after encoding.
RESIDUE_RULES = {
    "prot_t5_mean": ("KINFLOW_PROT_T5_PATH", "t5", [("prot_t5_last/mean_vecs", ".npy", "last", "mean")], None),
    "methoda_t5_full": (
        "KINFLOW_PROT_T5_PATH",
        "t5",
        [
            ("prot_t5_layer_19/mean_vecs", ".npy", 19, "mean"),
            ("prot_t5_layer_19/weighted_vecs", ".npy", 19, "weighted"),
            ("prot_t5_last/mean_vecs", ".npy", "last", "mean"),
        ],
        None,
    ),
    "methodi_prot_t5_residues": (
        "KINFLOW_PROT_T5_PATH",
        "t5_words",
        [("methodi_prot_t5_residues", ".npy", "last", "rows")],
        None,
    ),
    "methoda_esm2_layers": (
        "KINFLOW_ESM2_650M_PATH",
        "fair",
        [("esm2_layer_26/mean_vecs", ".npy", 26, "mean"), ("esm2_layer_29/weighted_vecs", ".npy", 29, "weighted")],
        None,
    ),
    "methodg_esm2": ("KINFLOW_ESM2_650M_PATH", "fair", [("methodg_esm2", ".pt", 33, "rows")], ("tokens", 1024)),
    "methodh_esm2_last_mean": (
        "KINFLOW_ESM2_650M_PATH",
        "fair",
        [("esm2_layer_last_mean", ".npy", 33, "mean")],
        ("tokens", 1024),
    ),
    "methodf_esm1v": ("KINFLOW_ESM1V_PATH", "fair", [("esm1v", ".npy", 33, "rows")], ("halves", 1022)),
    "methodd_esm1b": ("KINFLOW_ESM1B_PATH", "fair", [("esm1b_methodd", ".npy", 33, "cls")], ("seq", 1022)),
}

#: Lower case, the five non-standard letters of the models' alphabets, J (in none),
#: one residue, all lower case, and a standard control.
ODD_SEQS = {
    "std": "MKTAYIAKQRQISFVKSHFSRQ",
    "mixed": "MktayIAKQRqisfvKSHFSRq",
    "lower": "mktayiakqrqisfvkshfsrq",
    "one": "m",
    "nonstd": "MKUAZOBXKQRXXB",
    "withj": "MKTJAYIAK",
    "lowernonstd": "MKuzobxAKq",
}


def with_lower_at(n: int, at: int, seed: int) -> str:
    seq = rand_seq(n, seed)
    return seq[:at] + seq[at].lower() + seq[at + 1 :]


#: For the fair-esm steps, 1,030 residues with one lower-case letter: at 1,025 (past
#: method D's first 1,022, inside F's last 500) and at 510 (inside D's cut, in the middle
#: F drops); G and H encode the whole string before their token cut.
LONG_ODD_SEQS = {"tail": with_lower_at(1030, 1025, 31), "middle": with_lower_at(1030, 510, 32)}


def t5_reference(path: str, seq: str, rule: str) -> dict:
    """{layer: residue rows} of ProtT5 for seq under rule "t5" or "t5_words"."""
    import re

    import torch
    from transformers import T5EncoderModel, T5Tokenizer

    tok = T5Tokenizer.from_pretrained(path, do_lower_case=False, local_files_only=True)
    model = T5EncoderModel.from_pretrained(path, local_files_only=True).eval()
    if rule == "t5":
        enc = tok([re.sub(r"[UZOB]", "X", " ".join(seq))], return_tensors="pt", add_special_tokens=True)
    else:
        words = list(re.sub(r"[UZOB]", "X", "".join(seq.split())))
        enc = tok([words], return_tensors="pt", add_special_tokens=True, is_split_into_words=True)
    with torch.no_grad():
        out = model(**enc, output_hidden_states=True)
    n = int(enc["attention_mask"].sum()) - 1
    return {
        "last": out.last_hidden_state[0, :n].numpy(),
        19: out.hidden_states[20][0, :n].numpy(),
    }


def fair_reference(path: str, seq: str, state: dict | None, cut) -> tuple[dict, int] | None:
    """({layer: token rows incl. BOS}, residues kept) of a fair-esm model for seq as its
    batch converter takes it after the method's cut, or None where fair-esm raises (the
    method's code writes nothing)."""
    import argparse

    import esm
    import torch

    with torch.serialization.safe_globals([argparse.Namespace]):
        model, alphabet = esm.pretrained.load_model_and_alphabet_local(path)
    if state is not None:
        model.load_state_dict(state)
    if cut and cut[0] == "seq":
        seq = seq[: cut[1]]
    if cut and cut[0] == "halves" and len(seq) > cut[1]:
        seq = seq[:500] + seq[-500:]
    try:
        _, _, toks = alphabet.get_batch_converter()([("s", seq)])
    except KeyError:
        return None
    if cut and cut[0] == "tokens":
        toks = toks[:, : cut[1]]
    with torch.no_grad():
        reps = model.eval()(toks, repr_layers=[26, 29, 33])["representations"]
    return {k: v[0].numpy() for k, v in reps.items()}, min(len(seq), toks.shape[1] - 1)


def reduce(rows: np.ndarray, output: str, n: int, w: np.ndarray | None) -> np.ndarray:
    """rows: the model's rows for the residues (no BOS), or with cls the BOS row first."""
    if output == "rows":
        return rows[:n]
    if output == "mean":
        return rows[:n].mean(0)
    return reference_weighted(rows[:n].astype(np.float64), w)


def weights_for(seqs: dict[str, str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {sid: rng.random(len(seq)).astype(np.float32) for sid, seq in seqs.items()}


def write_weights(media: str, weights: dict[str, np.ndarray]) -> None:
    import os

    folder = os.path.join(media, "pseq2sites")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "binding_sites_all.tsv"), "w") as f:
        f.write("PDB\tPred_BS_Scores\n")
        for sid, w in weights.items():
            f.write(sid + "\t" + ",".join(repr(float(v)) for v in w) + "\n")


@pytest.mark.parametrize("step", sorted(RESIDUE_RULES))
def test_lower_case_and_nonstandard_residues_follow_the_methods_code(server, tiny, media, step):
    import os

    import torch

    key, rule, fams, cut = RESIDUE_RULES[step]
    seqs = {**ODD_SEQS, **(LONG_ODD_SEQS if rule == "fair" else {})}
    weights = weights_for(seqs)
    write_weights(media, weights)
    s = server(step)
    ans = s.send(manifest(step, media, seqs, [(f, suf) for f, suf, _, _ in fams]))
    state = None
    if step == "methodd_esm1b":
        raw = torch.load(tiny["KINFLOW_METHODD_CHECKPOINT"])
        state = {k[len("module.model.") :]: v for k, v in raw.items() if k.startswith("module.model.")}
    refused = []
    for sid, seq in seqs.items():
        n = len(seq)
        if rule.startswith("t5"):
            reps = t5_reference(tiny[key], seq, rule)
            rows = {layer: reps[layer] for layer in reps}
        else:
            got_ref = fair_reference(tiny[key], seq, state, cut)
            if got_ref is None:
                refused.append(sid)
                for fam, suf, _, _ in fams:
                    assert not os.path.exists(out_path(media, fam, sid, suf)), (step, sid, fam)
                continue
            full, n = got_ref
            rows = {layer: full[layer][1:] for layer in full}
            cls = {layer: full[layer][0] for layer in full}
        for fam, suf, layer, output in fams:
            p = out_path(media, fam, sid, suf)
            got = torch.load(p).numpy() if suf == ".pt" else np.load(p)
            want = cls[layer] if output == "cls" else reduce(rows[layer], output, n, weights[sid])
            assert got.shape == want.shape, (step, sid, fam, got.shape, want.shape)
            np.testing.assert_allclose(got, want, err_msg=f"{step} {sid} {fam}", **TOL)
    if refused:
        assert ans["status"] == "error", ans
        for sid in refused:
            assert f"seq {sid}:" in ans["message"], ans
    else:
        assert ans["status"] == "done", ans
    if rule.startswith("t5"):
        # Case is the method's: a lower-case sequence is not its upper-case twin.
        fam, suf, _, _ = fams[0]
        upper = {"upper": ODD_SEQS["mixed"].upper()}
        write_weights(media, {**weights, "upper": weights["mixed"]})
        assert s.send(manifest(step, media, upper, [(f, sf) for f, sf, _, _ in fams], batch=2))["status"] == "done"
        assert not np.allclose(np.load(out_path(media, fam, "mixed", suf)), np.load(out_path(media, fam, "upper", suf)))


def test_a_manifest_sequence_holds_letters_only(server, media):
    """Digits, punctuation, whitespace inside, non-ASCII: no model sees them (the GPU
    host sends only the 20 standard residues); the batch is refused as a whole."""
    s = server("prot_t5_mean")
    for i, bad in enumerate(["MK1A", "MK*A", "MK A", "MK-A", "MKÄA"]):
        ans = s.send(manifest("prot_t5_mean", media, {"b": bad}, [("prot_t5_last/mean_vecs", ".npy")], batch=i + 1))
        assert ans["status"] == "error" and "bad sequence" in ans["message"], (bad, ans)


def test_methode_refuses_what_catpred_cannot_index(server, tiny, media, tmp_path):
    """Method E: CatPred's residue index has the 20 standard upper-case letters only;
    a sequence with any other letter gets no file and is named, the others are written."""
    import os
    import sys

    from test_methode import ROOT, expected

    sys.path.insert(0, ROOT)
    from catpred.utils import make_checkpoint

    d = tmp_path / "ckpt" / "kcat" / "fold_0" / "model_0"
    d.mkdir(parents=True)
    make_checkpoint(str(d / "model.pt"), seed=0)
    fam = "methode_esm2/kcat/fold_0__model_0"
    s = server("methode_embed_kcat", KINFLOW_CATPRED_ROOT=ROOT, METHODE_CHECKPOINT_ROOT=str(tmp_path / "ckpt"))
    ans = s.send(manifest("methode_embed_kcat", media, ODD_SEQS, [(fam, ".pt")]))
    assert ans["status"] == "error", ans
    import torch

    for sid, seq in ODD_SEQS.items():
        p = out_path(media, fam, sid, ".pt")
        if set(seq) <= set("ARNDCQEGHILKMFPSTWYV"):
            np.testing.assert_allclose(
                torch.load(p).numpy(), expected(str(d / "model.pt"), seq, tiny["KINFLOW_ESM2_650M_PATH"]), **TOL
            )
        else:
            assert not os.path.exists(p), sid
            assert f"seq {sid}:" in ans["message"], ans


@pytest.mark.esmc
def test_esmc_lower_case_and_nonstandard_residues_follow_its_tokenizer(tmp_path):
    """ESM C (method A's methoda_esmc_layers) on EvolutionaryScale's package: every
    sequence of ODD_SEQS through ESMC.encode + ESMC.logits here, the program's mean files
    equal to it (lower case and J are <unk>, X/B/U/Z/O their own tokens)."""
    from conftest import Server, _require

    _require("torch", "numpy", "esm.models.esmc", "esm.tokenization")
    import make_tiny_models
    from test_esmc import SHAPE, esmc_env, reference_hidden

    path = make_tiny_models.write_esmc(str(tmp_path), SHAPE, name="esmc_cuts", qk_ln_scale=2.0)
    media = str(tmp_path / "media")
    fams = [("esmc_layer_24/mean_vecs", ".npy"), ("esmc_layer_32/mean_vecs", ".npy")]
    s = Server("methoda_esmc_layers", esmc_env(path), str(tmp_path))
    try:
        assert s.ready.get("ready") is True, s.stderr()
        seqs = {**ODD_SEQS, "upper": ODD_SEQS["mixed"].upper()}
        assert s.send(manifest("methoda_esmc_layers", media, seqs, fams))["status"] == "done", s.stderr()
    finally:
        assert s.close() == 0, s.stderr()
    for sid, seq in seqs.items():
        for layer in (24, 32):
            got = np.load(out_path(media, f"esmc_layer_{layer}/mean_vecs", sid))
            want = reference_hidden(path, seq, layer).astype(np.float64).mean(0)
            np.testing.assert_allclose(got, want, err_msg=f"{sid} layer {layer}", **TOL)
    assert not np.allclose(
        np.load(out_path(media, "esmc_layer_24/mean_vecs", "mixed")),
        np.load(out_path(media, "esmc_layer_24/mean_vecs", "upper")),
    )


@pytest.mark.esmc
def test_methodk_esmc_upper_cases_then_follows_its_tokenizer(tmp_path):
    """ESM C for method K (methodk_esmc_mean): the method's worker upper-cases the
    sequence before ``ESMProtein(sequence=...)``, then ESM C's tokenizer applies (J is
    <unk>; X, B, U, Z, O tokens). Every sequence of ODD_SEQS through the library here on
    seq.upper(), the mean of the final embeddings (BOS/EOS excluded), equal to the
    program's file; a lower-case sequence's file is its upper-case one's."""
    from conftest import Server, _require

    _require("torch", "numpy", "esm.models.esmc", "esm.tokenization")
    import make_tiny_models
    from test_esmc import SHAPE, esmc_env, reference_final_mean

    path = make_tiny_models.write_esmc(str(tmp_path), SHAPE, name="esmc_cuts_k", qk_ln_scale=2.0)
    media = str(tmp_path / "media")
    fams = [("methodk_esmc", ".npy")]
    s = Server("methodk_esmc_mean", esmc_env(path), str(tmp_path))
    try:
        assert s.ready.get("ready") is True, s.stderr()
        seqs = {**ODD_SEQS, "upper": ODD_SEQS["mixed"].upper()}
        assert s.send(manifest("methodk_esmc_mean", media, seqs, fams))["status"] == "done", s.stderr()
    finally:
        assert s.close() == 0, s.stderr()
    for sid, seq in seqs.items():
        want = reference_final_mean(path, seq)[0]
        np.testing.assert_allclose(np.load(out_path(media, "methodk_esmc", sid)), want, err_msg=sid, **TOL)
    for a, b in (("mixed", "upper"), ("lower", "upper")):
        np.testing.assert_allclose(
            np.load(out_path(media, "methodk_esmc", a)), np.load(out_path(media, "methodk_esmc", b)), **TOL
        )
