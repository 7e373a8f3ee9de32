"""Full-size ESM-2 650M equivalence on the CPU (not part of `make test`: about 6 min and
2.6 GB here).

    .venv-steps/bin/python steps/equiv_full.py [WORKDIR]

writes a random-weight ESM-2 650M (33 x 1280, 20 heads, attention sharpened as in the
equivalence tests) in fair-esm's format, embeds a 1,500- and a 700-residue sequence in
one padded batch through the step programs' model class (kinflow_steps.models.FairESM,
production precision), compares layers 26, 29 and 33 with each sequence alone through
fair-esm in fp32, then methods G and H's cut (a 1,030- and a 700-residue sequence in one
padded batch, token matrix cut at 1,024 columns: BOS and the first 1,023 residues, no EOS,
layer 33's rows and their mean) against fair-esm alone on the cut tokens, then the old
``model.to(float16)`` cast at 1,500 residues; prints the figures as JSON
(docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tests"))


def main() -> int:
    import make_tiny_models
    import numpy as np
    import torch
    from test_fair_esm import fair_load, rand_seq

    from kinflow_steps.equivalence import compare
    from kinflow_steps.models import FairESM

    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kinflow-equiv-full-")
    os.makedirs(work, exist_ok=True)
    t = time.monotonic()
    path = make_tiny_models.write_esm2(work, 1280, 20, make_tiny_models.EQ_QK_SCALE, name="esm2_t33_full")
    print(f"wrote ESM-2 650M in {time.monotonic() - t:.0f}s", file=sys.stderr)
    seqs = [rand_seq(1500, 101), rand_seq(700, 102)]
    layers = [26, 29, 33]
    t = time.monotonic()
    got = FairESM(path, torch.device("cpu"), torch.float32).embed(seqs, layers)
    print(f"production batch in {time.monotonic() - t:.0f}s", file=sys.stderr)
    model, alphabet = fair_load(path)
    model.eval()
    rows = []
    for i, seq in enumerate(seqs):
        toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])
        with torch.no_grad():
            reps = model(toks, repr_layers=layers)["representations"]
        for layer in layers:
            want = reps[layer][0, 1:-1].numpy()
            r = compare(got[layer][i], want)
            p = compare(got[layer][i].mean(0), want.astype(np.float64).mean(0))
            rows.append({"case": "production", "len": len(seq), "layer": layer, "residue_min_cosine": r.min_cosine,
                         "pooled_cosine": p.min_cosine, "ok": r.ok and p.ok})  # fmt: skip
            if i == 0 and layer == 33:
                fp32 = want
    # Methods G and H: the token matrix cut at 1,024 columns, as their workers do.
    cut = [rand_seq(1030, 103), rand_seq(700, 104)]
    t = time.monotonic()
    got = FairESM(path, torch.device("cpu"), torch.float32).embed(cut, [33], max_tokens=1024)
    print(f"G/H batch in {time.monotonic() - t:.0f}s", file=sys.stderr)
    for i, seq in enumerate(cut):
        toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]])[:, :1024]
        with torch.no_grad():
            want = model(toks, repr_layers=[33])["representations"][33][0, 1 : 1 + min(len(seq), 1023)].numpy()
        r = compare(got[33][i], want)
        p = compare(got[33][i].astype(np.float64).mean(0), want.astype(np.float64).mean(0))
        rows.append({"case": "G/H cut at 1,024 tokens", "len": len(seq), "rows": int(got[33][i].shape[0]), "layer": 33,
                     "residue_min_cosine": r.min_cosine, "pooled_cosine": p.min_cosine,
                     "ok": r.ok and p.ok and got[33][i].shape == want.shape})  # fmt: skip
    old = fair_load(path)[0].eval().to(torch.float16)  # the programs' old CUDA cast
    toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(a) for a in seqs[0]] + [alphabet.eos_idx]])
    with torch.no_grad():
        o = old(toks, repr_layers=[33])["representations"][33][0, 1:-1].float().numpy()
    r, p = compare(o, fp32), compare(o.mean(0), fp32.astype(np.float64).mean(0))
    rows.append({"case": "old model.to(float16)", "len": 1500, "layer": 33, "residue_min_cosine": r.min_cosine,
                 "pooled_cosine": p.min_cosine, "ok": r.ok and p.ok})  # fmt: skip
    print(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows[:-1]) and not rows[-1]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
