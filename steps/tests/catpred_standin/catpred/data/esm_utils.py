"""Stand-in ESM features: deterministic [L, 4] per sequence."""

import torch


def get_single_esm_repr(sequence):
    g = torch.Generator().manual_seed(len(sequence))
    base = torch.randn(len(sequence), 4, generator=g)
    idx = torch.tensor([ord(a) for a in sequence], dtype=torch.float32)[:, None]
    return base + idx / 100.0
