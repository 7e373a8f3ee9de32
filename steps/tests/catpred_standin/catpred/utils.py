"""Stand-in CatPred model and checkpoint loader. Like CatPred's
(catpred/security/deserialization.py), the loader refuses a checkpoint outside
CATPRED_TRUSTED_DESERIALIZATION_ROOTS (default: the working folder and its parent)."""

import os
from argparse import Namespace
from pathlib import Path

import torch
from torch import nn

DIM = 8
ESM_DIM = 32  # the tiny ESM-2 of make_tiny_models.py


class Rotary(nn.Module):
    def rotate_queries_or_keys(self, x, seq_dim=1):
        pos = torch.arange(x.shape[seq_dim], dtype=x.dtype, device=x.device)[None, :, None]
        return x * torch.cos(pos / 10.0) + torch.roll(x, 1, dims=-1) * torch.sin(pos / 10.0)


class AttentivePooler(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.score = nn.Linear(dim, 1)

    def forward(self, x):
        w = torch.softmax(self.score(x), dim=1)
        return (x * w).sum(dim=1), w


class StandInCatPred(nn.Module):
    def __init__(self, esm_dim=ESM_DIM):
        super().__init__()
        self.args = Namespace(add_esm_feats=True, skip_attentive_pooling=False, add_pretrained_egnn_feats=False)
        self.seq_embedder = nn.Embedding(20, DIM)
        self.rotary_embedder = Rotary()
        self.multihead_attn = nn.MultiheadAttention(DIM, 2, batch_first=True)
        self.attentive_pooler = AttentivePooler(DIM + esm_dim)


def make_checkpoint(path, seed, esm_dim=ESM_DIM):
    torch.manual_seed(seed)
    torch.save(StandInCatPred(esm_dim).state_dict(), path)


def _trusted(path):
    raw = os.environ.get("CATPRED_TRUSTED_DESERIALIZATION_ROOTS")
    roots = [Path(p) for p in raw.split(os.pathsep) if p.strip()] if raw else [Path.cwd(), Path.cwd().parent]
    p = Path(path).resolve()
    return any(p.is_relative_to(r.resolve()) for r in roots)


def load_checkpoint(path, device=None):
    if not _trusted(path):
        raise RuntimeError(f"Refusing to load untrusted checkpoint from {path}")
    state = torch.load(path, map_location="cpu", weights_only=True)
    m = StandInCatPred(state["attentive_pooler.score.weight"].shape[1] - DIM)
    m.load_state_dict(state)
    return m.to(device or "cpu")
