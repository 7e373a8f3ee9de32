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
