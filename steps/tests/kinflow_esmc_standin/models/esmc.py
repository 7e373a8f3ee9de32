"""Stand-in ESM C model (see the package docstring)."""

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ESMCOutput:
    sequence_logits: torch.Tensor
    embeddings: torch.Tensor
    hidden_states: torch.Tensor


class ESMC(nn.Module):
    def __init__(self, d_model, n_heads, n_layers, tokenizer, use_flash_attn=True):
        super().__init__()
        self.tokenizer = tokenizer
        self.embed = nn.Embedding(len(tokenizer), d_model)
        self.pos = nn.Embedding(4096, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.0, batch_first=True)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, len(tokenizer))

    def _tokenize(self, sequences):
        rows = [self.tokenizer.encode(s) for s in sequences]
        n = max(len(r) for r in rows)
        out = torch.full((len(rows), n), self.tokenizer.pad_token_id, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r)
        return out

    def forward(self, sequence_tokens=None, sequence_id=None):
        pad = sequence_tokens == self.tokenizer.pad_token_id
        pos = torch.arange(sequence_tokens.shape[1], device=sequence_tokens.device)
        x = self.embed(sequence_tokens) + self.pos(pos)[None]
        hiddens = []
        for block in self.blocks:
            x = block(x, src_key_padding_mask=pad)
            hiddens.append(x)
        x = self.norm(x)
        return ESMCOutput(self.head(x), x, torch.stack(hiddens, dim=0))
