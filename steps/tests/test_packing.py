"""Packing removes padding work: tokens computed ÷ residues for realistic lengths."""

from __future__ import annotations

import random

from kinflow_steps.steps import padding_report


def lengths(n: int, seed: int = 0) -> list[int]:
    """Enzyme-like lengths: log-normal around 400 residues, 30 to 1,500."""
    rng = random.Random(seed)
    return [min(1500, max(30, int(rng.lognormvariate(5.9, 0.5)))) for _ in range(n)]


def test_packing_cuts_padding():
    rep = padding_report(lengths(10000), budget=4096)
    assert rep["unpadded_ratio"] < 1.01
    assert rep["packed_ratio"] < 1.05 < 1.3 < rep["naive_ratio"], rep


def test_length_buckets_keep_short_sequences_apart(monkeypatch):
    """ESM C's and ProtT5's passes never pad a sequence to more than 4x its tokens (a
    1-residue sequence padded to 1,502 tokens missed the pooled bound in bf16); the
    fair-esm steps keep one pass per host batch; KINFLOW_STEPS_LENGTH_SPREAD sets it."""
    import pytest

    from kinflow_steps.errors import ConfigError
    from kinflow_steps.steps import STEPS, Batch, Seq, pack

    seqs = [Seq(n, "A" * int(n[1:]), [], []) for n in ("s1500", "s700", "s1", "s300", "s2")]
    assert [[s.seq_id for s in g] for g in pack(seqs, 0, 4)] == [["s1500", "s700"], ["s300"], ["s2", "s1"]]
    assert [[s.seq_id for s in g] for g in pack(seqs, 3000, 4)] == [["s1500"], ["s700", "s300"], ["s2", "s1"]]
    assert pack(seqs, 0) == [seqs]
    monkeypatch.delenv("KINFLOW_STEPS_LENGTH_SPREAD", raising=False)
    monkeypatch.setenv("KINFLOW_STEPS_DEVICE", "cpu")
    media = "/nonexistent-media"
    b = Batch(1, "", media)
    for s in seqs:
        out = f"{media}/sequence_info/prot_t5_last/mean_vecs/{s.seq_id}.npy"
        b.seqs.append(Seq(s.seq_id, s.sequence, [out], [out]))
    assert len(STEPS["prot_t5_mean"]().plan(b)[0]) == 3
    assert STEPS["methoda_esmc_layers"]().spread == 4
    assert STEPS["methodk_esmc_mean"]().spread == 4
    assert STEPS["methodh_esm2_last_mean"]().spread == 0
    monkeypatch.setenv("KINFLOW_STEPS_LENGTH_SPREAD", "0")
    assert len(STEPS["prot_t5_mean"]().plan(b)[0]) == 1
    monkeypatch.setenv("KINFLOW_STEPS_LENGTH_SPREAD", "0.5")
    with pytest.raises(ConfigError):
        STEPS["prot_t5_mean"]()
