"""ProtT5 steps against an independent computation: token ids built here from the
SentencePiece model (one piece per residue, U/Z/O/B as X, then EOS), each sequence
run alone through transformers' T5EncoderModel."""

from __future__ import annotations

import os
import sys
import textwrap

import numpy as np
from conftest import hidden_files, manifest, out_path
from test_fair_esm import rand_seq, write_table

TOL = dict(rtol=1e-4, atol=1e-5)
_CACHE: dict = {}


def t5_hidden(folder: str, seq: str):
    """(layer-19 residues, last-layer residues) of one sequence alone, EOS excluded."""
    import sentencepiece as spm
    import torch
    from transformers import T5EncoderModel

    if folder not in _CACHE:
        _CACHE[folder] = (
            T5EncoderModel.from_pretrained(folder).eval(),
            spm.SentencePieceProcessor(model_file=os.path.join(folder, "spiece.model")),
        )
    model, sp = _CACHE[folder]
    clean = "".join("X" if a in "UZOB" else a for a in seq)
    ids = [sp.piece_to_id("\u2581" + a) for a in clean] + [sp.eos_id()]
    assert sp.unk_id() not in ids
    t = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=t, attention_mask=torch.ones_like(t), output_hidden_states=True)
    n = len(seq)
    return out.hidden_states[20][0, :n].numpy(), out.last_hidden_state[0, :n].numpy()


def test_prot_t5_mean(server, tiny, media):
    seqs = {"t1": rand_seq(33, 1), "t2": "MKTAYUZOBQ", "t3": rand_seq(7, 2)}
    s = server("prot_t5_mean")
    assert s.send(manifest("prot_t5_mean", media, seqs, [("prot_t5_last/mean_vecs", ".npy")]))["status"] == "done"
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "prot_t5_last/mean_vecs", sid))
        assert got.dtype == np.float32 and got.shape == (16,)
        _, last = t5_hidden(tiny["KINFLOW_PROT_T5_PATH"], seq)
        np.testing.assert_allclose(got, last.mean(0), **TOL)
    assert hidden_files(media) == []


def test_methodi_residues(server, tiny, media):
    seqs = {"i1": rand_seq(41, 3), "i2": rand_seq(5, 4)}
    s = server("methodi_prot_t5_residues")
    assert (
        s.send(manifest("methodi_prot_t5_residues", media, seqs, [("methodi_prot_t5_residues", ".npy")]))["status"]
        == "done"
    )
    for sid, seq in seqs.items():
        got = np.load(out_path(media, "methodi_prot_t5_residues", sid))
        assert got.dtype == np.float32 and got.shape == (len(seq), 16)
        np.testing.assert_allclose(got, t5_hidden(tiny["KINFLOW_PROT_T5_PATH"], seq)[1], **TOL)


T5_FULL = [
    (f"{root}/{k}", ".npy") for root in ("prot_t5_layer_19", "prot_t5_last") for k in ("mean_vecs", "weighted_vecs")
]


def check_t5_full(tiny, media, sid, seq, w):
    l19, last = t5_hidden(tiny["KINFLOW_PROT_T5_PATH"], seq)
    wn = np.asarray(w, dtype=np.float64) / np.sum(w)
    for root, res in (("prot_t5_layer_19", l19), ("prot_t5_last", last)):
        mean = np.load(out_path(media, f"{root}/mean_vecs", sid))
        wv = np.load(out_path(media, f"{root}/weighted_vecs", sid))
        assert mean.dtype == wv.dtype == np.float32 and mean.shape == wv.shape == (16,)
        np.testing.assert_allclose(mean, res.mean(0), **TOL)
        np.testing.assert_allclose(wv, (res * wn[:, None]).sum(0), **TOL)
        assert not np.allclose(mean, wv, **TOL)
    assert not np.allclose(l19.mean(0), last.mean(0), **TOL)


def test_methoda_t5_full_with_table(server, tiny, media):
    seqs = {"w1": rand_seq(19, 5), "w2": rand_seq(8, 6)}
    rng = np.random.default_rng(1)
    weights = {sid: np.round(rng.random(len(seq)), 6) for sid, seq in seqs.items()}
    write_table(media, weights)
    s = server("methoda_t5_full")
    assert s.send(manifest("methoda_t5_full", media, seqs, T5_FULL))["status"] == "done"
    for sid, seq in seqs.items():
        check_t5_full(tiny, media, sid, seq, weights[sid])


def test_methoda_t5_full_without_predictor_fails_clearly(server, media):
    seqs = {"n1": rand_seq(12, 7)}
    s = server("methoda_t5_full", KINFLOW_PSEQ2SITES_CMD="")
    ans = s.send(manifest("methoda_t5_full", media, seqs, T5_FULL))
    assert ans["status"] == "error"
    assert "n1" in ans["message"] and "KINFLOW_PSEQ2SITES_CMD" in ans["message"]
    assert os.path.exists(out_path(media, "prot_t5_last/mean_vecs", "n1"))
    assert not os.path.exists(out_path(media, "prot_t5_last/weighted_vecs", "n1"))


PREDICTOR = textwrap.dedent("""
    import json, sys
    seqs = json.load(open(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        f.write("PDB\\tPred_BS_Scores\\n")
        for sid, seq in seqs.items():
            f.write(sid + "\\t" + ",".join("%.6f" % ((i % 7) / 7 + 0.05) for i in range(len(seq))) + "\\n")
""")


def test_methoda_t5_full_runs_predictor_and_appends_table(server, tiny, media, tmp_path):
    script = tmp_path / "predict.py"
    script.write_text(PREDICTOR)
    seqs = {"p1": rand_seq(14, 8), "p2": rand_seq(6, 9)}
    write_table(media, {"other": np.array([0.1, 0.2])})
    s = server("methoda_t5_full", KINFLOW_PSEQ2SITES_CMD=f"{sys.executable} {script} {{input}} {{output}}")
    assert s.send(manifest("methoda_t5_full", media, seqs, T5_FULL))["status"] == "done"
    table = open(os.path.join(media, "pseq2sites", "binding_sites_all.tsv")).read().splitlines()
    assert table[0] == "PDB\tPred_BS_Scores" and table[1].startswith("other\t")
    assert sorted(line.split("\t")[0] for line in table[2:]) == ["p1", "p2"]
    for sid, seq in seqs.items():
        w = [round((i % 7) / 7 + 0.05, 6) for i in range(len(seq))]
        check_t5_full(tiny, media, sid, seq, w)
    # A sequence whose files all exist but whose row is missing still gets its row.
    os.remove(os.path.join(media, "pseq2sites", "binding_sites_all.tsv"))
    m = manifest("methoda_t5_full", media, {"p1": seqs["p1"]}, T5_FULL, batch=2)
    m["seqs"][0]["missing_outputs"] = []
    assert s.send(m)["status"] == "done"
    assert "p1\t" in open(os.path.join(media, "pseq2sites", "binding_sites_all.tsv")).read()


def test_methoda_t5_full_nonfinite_weighted_vector_writes_nothing(server, media):
    """Finite representations whose table weights cancel ([1e300, -1e300, 1e-300]:
    normalised, they overflow) give a non-finite weighted vector: the batch fails and
    nothing is cached, not even the other sequence's files."""
    seqs = {"ok1": rand_seq(9, 8), "cw": "MKV"}
    folder = os.path.join(media, "pseq2sites")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "binding_sites_all.tsv"), "w") as f:
        f.write("PDB\tPred_BS_Scores\n")
        f.write("ok1\t" + ",".join(["0.5"] * 9) + "\n")
        f.write("cw\t1e300,-1e300,1e-300\n")
    s = server("methoda_t5_full", KINFLOW_PSEQ2SITES_CMD="")
    ans = s.send(manifest("methoda_t5_full", media, seqs, T5_FULL))
    assert ans["status"] == "error" and "non-finite" in ans["message"] and "cw" in ans["message"], ans
    for fam, _ in T5_FULL:
        for sid in seqs:
            assert not os.path.exists(out_path(media, fam, sid)), (fam, sid)
    assert hidden_files(media) == []
