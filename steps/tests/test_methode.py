"""Method E on a stand-in of CatPred's package: files per checkpoint key, shape,
values against the pipeline run step by step here, distinct checkpoints."""

from __future__ import annotations

import os

import numpy as np
from conftest import HERE, manifest

ROOT = os.path.join(HERE, "catpred_standin")
TOL = dict(rtol=1e-4, atol=1e-5)


def expected(ckpt: str, seq: str):
    import sys

    import torch

    sys.path.insert(0, ROOT)
    from catpred.data.esm_utils import get_single_esm_repr
    from catpred.utils import load_checkpoint

    m = load_checkpoint(ckpt).eval()
    idx = torch.tensor([["ARNDCQEGHILKMFPSTWYV".index(a) for a in seq]])
    with torch.no_grad():
        x = m.seq_embedder(idx)
        q = m.rotary_embedder.rotate_queries_or_keys(x, seq_dim=1)
        x, _ = m.multihead_attn(q, q, x)
        x = torch.cat([get_single_esm_repr(seq)[None], x], dim=-1)
        pooled, _ = m.attentive_pooler(x)
    return pooled[0].numpy()


def test_methode_kcat_per_checkpoint(server, media, tmp_path):
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
            assert got.dtype == torch.float32 and tuple(got.shape) == (12,)
            want = expected(str(ckroot / "kcat" / k.split("__")[0] / k.split("__")[1] / "model.pt"), seq)
            np.testing.assert_allclose(got.numpy(), want, **TOL)
            vals[(sid, k)] = got.numpy()
    assert not np.allclose(vals[("e1", keys[0])], vals[("e1", keys[1])], **TOL)
    # A km file is not this step's: error answer, server up.
    bad = manifest("methode_embed_kcat", media, {"e3": "MKV"}, [("methode_esm2/km/fold_0__model_0", ".pt")], batch=2)
    assert s.send(bad)["status"] == "error"
