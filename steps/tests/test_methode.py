"""Method E on a stand-in of CatPred's package: files per checkpoint key, shape,
values against the pipeline run step by step here (ESM-2 features from fair-esm's own
loader, not through the step), distinct checkpoints; offline (the stand-in's
``init_esm`` fails like a torch-hub fetch without network) and with the checkpoint
root trusted for deserialization."""

from __future__ import annotations

import os

import numpy as np
from conftest import HERE, manifest

ROOT = os.path.join(HERE, "catpred_standin")
TOL = dict(rtol=1e-4, atol=1e-5)


def esm2_layer33(path: str, seq: str):
    import torch
    from test_fair_esm import fair_load

    model, alphabet = fair_load(path)
    toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])
    with torch.no_grad():
        return model.eval()(toks, repr_layers=[33])["representations"][33][0, 1:-1]


def expected(ckpt: str, seq: str, esm2: str):
    import os
    import sys

    import torch

    sys.path.insert(0, ROOT)
    from catpred.utils import load_checkpoint

    old = os.environ.get("CATPRED_TRUSTED_DESERIALIZATION_ROOTS")
    os.environ["CATPRED_TRUSTED_DESERIALIZATION_ROOTS"] = os.path.dirname(ckpt)
    try:
        m = load_checkpoint(ckpt).eval()
    finally:
        if old is None:
            del os.environ["CATPRED_TRUSTED_DESERIALIZATION_ROOTS"]
        else:
            os.environ["CATPRED_TRUSTED_DESERIALIZATION_ROOTS"] = old
    idx = torch.tensor([["ARNDCQEGHILKMFPSTWYV".index(a) for a in seq]])
    with torch.no_grad():
        x = m.seq_embedder(idx)
        q = m.rotary_embedder.rotate_queries_or_keys(x, seq_dim=1)
        x, _ = m.multihead_attn(q, q, x)
        x = torch.cat([esm2_layer33(esm2, seq)[None], x], dim=-1)
        pooled, _ = m.attentive_pooler(x)
    return pooled[0].numpy()


def test_methode_kcat_per_checkpoint(server, tiny, media, tmp_path):
    import sys

    import torch

    sys.path.insert(0, ROOT)
    from catpred.utils import make_checkpoint

    ckroot = tmp_path / "ckpt"
    keys = ["fold_0__model_0", "fold_0__model_1"]
    for i, k in enumerate(keys):
        d = ckroot / "kcat" / k.split("__")[0] / k.split("__")[1]
        d.mkdir(parents=True)
        make_checkpoint(str(d / "model.pt"), seed=i)
    seqs = {"e1": "MKVLAAGIVQWHE", "e2": "ACDEFGHIK"}
    fams = [(f"methode_esm2/kcat/{k}", ".pt") for k in keys]
    s = server("methode_embed_kcat", KINFLOW_CATPRED_ROOT=ROOT, METHODE_CHECKPOINT_ROOT=str(ckroot))
    assert s.send(manifest("methode_embed_kcat", media, seqs, fams))["status"] == "done"
    vals = {}
    for sid, seq in seqs.items():
        for k in keys:
            got = torch.load(os.path.join(media, "sequence_info", "methode_esm2", "kcat", k, sid + ".pt"))
            assert got.dtype == torch.float32 and tuple(got.shape) == (40,)
            ckpt = str(ckroot / "kcat" / k.split("__")[0] / k.split("__")[1] / "model.pt")
            want = expected(ckpt, seq, tiny["KINFLOW_ESM2_650M_PATH"])
            np.testing.assert_allclose(got.numpy(), want, **TOL)
            vals[(sid, k)] = got.numpy()
    assert not np.allclose(vals[("e1", keys[0])], vals[("e1", keys[1])], **TOL)
    # A km file is not this step's: error answer, server up.
    bad = manifest("methode_embed_kcat", media, {"e3": "MKV"}, [("methode_esm2/km/fold_0__model_0", ".pt")], batch=2)
    assert s.send(bad)["status"] == "error"
