"""Model loading and forward passes, through the field's own libraries.

Each embedder turns a list of sequences into per-residue matrices (BOS/CLS and EOS
removed, padding removed) for the layers asked, as float32 NumPy arrays. The
reductions (mean, weighted mean, CLS vector) live in steps.py.

Facts taken from the reference's public workers (Toepfer-Lab/webKinPred):
* fair-esm models: ``alphabet.get_batch_converter()`` tokens (BOS + residues + EOS),
  ``repr_layers``; residues are positions ``1 .. len(seq)``.
* ProtT5-XL: residues separated by spaces, U/Z/O/B replaced by X, the tokenizer adds
  EOS; ``hidden_states[layer + 1]`` is encoder layer ``layer`` (0 is the embedding
  output) and ``hidden_states[-1]`` the last (after the final layer norm); residues are
  the first ``attention_mask.sum() - 1`` positions.
* ESMC: ``hidden_states[layer]`` of the model output, BOS/EOS removed.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import torch

from kinflow_steps.errors import ConfigError

LAST = "last"

_OOM_TYPES: tuple[type[BaseException], ...] = (
    (torch.cuda.OutOfMemoryError,) if hasattr(torch.cuda, "OutOfMemoryError") else ()
)


def is_oom(exc: BaseException) -> bool:
    """Report whether exc is PyTorch running out of accelerator memory."""
    if _OOM_TYPES and isinstance(exc, _OOM_TYPES):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def _fake_oom(n: int) -> None:
    """Test knob KINFLOW_STEPS_FAKE_OOM_ABOVE=N: a forward pass over more than N
    sequences raises the OOM error PyTorch raises, so tests can drive the oom answer
    without a GPU."""
    raw = os.environ.get("KINFLOW_STEPS_FAKE_OOM_ABOVE", "").strip()
    if raw and n > int(raw):
        exc = _OOM_TYPES[0] if _OOM_TYPES else RuntimeError
        raise exc(f"CUDA out of memory (simulated: {n} sequences > {raw})")


def pick_device() -> torch.device:
    """KINFLOW_STEPS_DEVICE (cpu, cuda, cuda:N) or CUDA when present. With
    KINFLOW_STEPS_REQUIRE_CUDA=1 a host without CUDA is a start-up error."""
    want = os.environ.get("KINFLOW_STEPS_DEVICE", "").strip()
    require = os.environ.get("KINFLOW_STEPS_REQUIRE_CUDA", "").strip().lower() in {"1", "true", "yes", "on"}
    if require and not torch.cuda.is_available():
        raise ConfigError("KINFLOW_STEPS_REQUIRE_CUDA=1 but no CUDA device is available")
    if want:
        return torch.device(want)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _rotary_fp32_forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fair-esm's RotaryEmbedding.forward with the position table built and applied
    in float32 whatever the model's dtype (EvolutionaryScale's rotary does the same);
    the result is cast back to q's dtype."""
    n = k.shape[-2]
    cached = getattr(self, "_kinflow_table", None)
    if cached is None or cached[0] != n or cached[1].device != k.device:
        t = torch.arange(n, device=k.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.to(device=k.device, dtype=torch.float32))
        emb = torch.cat((freqs, freqs), dim=-1)
        cached = (n, emb.cos()[None], emb.sin()[None])
        self._kinflow_table = cached
    _, cos, sin = cached

    def rotate(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)
        c, s = cos[:, : x.shape[-2]], sin[:, : x.shape[-2]]
        return (xf * c + torch.cat((-x2, x1), dim=-1) * s).to(x.dtype)

    return rotate(q), rotate(k)


def pin_rotary_fp32(model: torch.nn.Module) -> int:
    """Keep every fair-esm rotary embedding of model in float32 after a cast: the
    ``inv_freq`` buffer back to float32 and the position table computed in float32
    (a ``model.to(float16)`` casts ``inv_freq`` too, and fair-esm then builds its
    position table in fp16: angles about 0.66 rad off at 1,502 tokens). Returns how
    many were pinned."""
    import types

    n = 0
    for m in model.modules():
        if type(m).__name__ == "RotaryEmbedding" and isinstance(getattr(m, "inv_freq", None), torch.Tensor):
            m.inv_freq = m.inv_freq.float()
            m.forward = types.MethodType(_rotary_fp32_forward, m)
            n += 1
    return n


def nonfinite_rows(seqs: list[str], reps: dict[Any, list[np.ndarray]]) -> list[int]:
    """Indexes of the sequences whose output (any layer) holds a NaN or an infinity."""
    bad = set()
    for rows in reps.values():
        for i, r in enumerate(rows):
            if not np.isfinite(r).all():
                bad.add(i)
    return sorted(bad)


def require_path(*names: str, what: str, is_dir: bool = False) -> str:
    """The first of the env vars names that is set; ConfigError when none is, or
    when its path does not exist."""
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            ok = os.path.isdir(value) if is_dir else os.path.isfile(value)
            if not ok:
                kind = "folder" if is_dir else "file"
                raise ConfigError(f"{name}={value}: no such {kind} ({what})")
            return value
    raise ConfigError(f"{names[0]} is not set: the local path of {what}")


def fair_esm_load(path: str):
    """fair-esm's ``load_model_and_alphabet_local`` on torch >= 2.6, whose ``torch.load``
    defaults to ``weights_only=True``: fair-esm checkpoints carry their config as an
    ``argparse.Namespace``, which is allowed for the load (nothing else is)."""
    import argparse

    import esm

    ctx = getattr(torch.serialization, "safe_globals", None)
    if ctx is None:  # torch < 2.5: weights_only is off by default
        return esm.pretrained.load_model_and_alphabet_local(path)
    with ctx([argparse.Namespace]):
        return esm.pretrained.load_model_and_alphabet_local(path)


class FairESM:
    """An ESM-2 / ESM-1b / ESM-1v checkpoint loaded with fair-esm's
    ``load_model_and_alphabet_local`` (the file's name picks the architecture, as in
    fair-esm: ``esm2*`` is ESM-2; a ``-contact-regression.pt`` file must sit beside
    ESM-2 and ESM-1b checkpoints)."""

    def __init__(self, path: str, device: torch.device, dtype: torch.dtype, state_dict: dict | None = None):
        model, alphabet = fair_esm_load(path)
        if state_dict is not None:
            model.load_state_dict(state_dict)
        model.eval()
        if dtype != torch.float32:
            # Only reached where kinflow_steps.precision proves the dtype: the rotary
            # positions stay float32 in any case.
            model = model.to(dtype)
            pin_rotary_fp32(model)
        self.model = model.to(device)
        self.alphabet = alphabet
        self.converter = alphabet.get_batch_converter()
        self.device = device
        self.num_layers = int(model.num_layers)

    def unknown(self, seq: str) -> list[str]:
        """The characters of seq that fair-esm's ``Alphabet.encode`` raises on (not
        tokens of the model's alphabet: lower case, J, anything but its upper-case
        residues), sorted."""
        return sorted(set(seq) - set(self.alphabet.tok_to_idx))

    def layer_index(self, layer: Any) -> int:
        idx = self.num_layers if layer == LAST else int(layer)
        if not 0 <= idx <= self.num_layers:
            raise ConfigError(f"layer {layer} outside the model's 0..{self.num_layers}")
        return idx

    @torch.inference_mode()
    def embed(
        self, seqs: list[str], layers: list[Any], cls: bool = False, max_tokens: int | None = None
    ) -> dict[Any, list[np.ndarray]]:
        """Per-layer lists of [len(seq), D] float32 residue matrices (or, with cls,
        [D] vectors of the BOS/CLS position). With max_tokens, the batch's token matrix
        (BOS, residues, EOS, padding) is cut to its first max_tokens columns, as the
        reference's method G and H workers do (``batch_tokens[:, :1024]``): a longer
        sequence keeps BOS and its first max_tokens - 1 residues, without EOS, and its
        matrix has that many rows."""
        _fake_oom(len(seqs))
        _, _, tokens = self.converter([(str(i), s) for i, s in enumerate(seqs)])
        if max_tokens is not None and tokens.shape[1] > max_tokens:
            tokens = tokens[:, :max_tokens]
        keep = tokens.shape[1] - 1
        idx = {layer: self.layer_index(layer) for layer in layers}
        out = self.model(tokens.to(self.device), repr_layers=sorted(set(idx.values())), return_contacts=False)
        reps = out["representations"]
        result: dict[Any, list[np.ndarray]] = {}
        for layer, i in idx.items():
            rep = reps[i].float().cpu().numpy()
            if cls:
                result[layer] = [rep[row, 0].copy() for row in range(len(seqs))]
            else:
                result[layer] = [rep[row, 1 : min(len(s), keep) + 1].copy() for row, s in enumerate(seqs)]
        return result


def prot_t5_text(seq: str) -> str:
    """ProtT5's input text: residues separated by spaces, U/Z/O/B as X."""
    return " ".join(re.sub(r"[UZOB]", "X", seq))


class ProtT5:
    """ProtT5-XL's encoder with transformers (``T5EncoderModel``, ``T5Tokenizer``)
    from a local folder."""

    def __init__(self, path: str, device: torch.device, dtype: torch.dtype):
        from transformers import T5EncoderModel, T5Tokenizer

        self.tokenizer = T5Tokenizer.from_pretrained(path, do_lower_case=False, local_files_only=True)
        # The reference's half-precision encoder on CUDA, fp32 on the CPU
        # (kinflow_steps.precision); ``dtype`` is transformers 5's name, ``torch_dtype``
        # the older one.
        try:
            model = T5EncoderModel.from_pretrained(path, local_files_only=True, dtype=dtype)
        except TypeError:
            model = T5EncoderModel.from_pretrained(path, local_files_only=True, torch_dtype=dtype)
        if next(model.parameters()).dtype != dtype:
            model = model.to(dtype)
        model.eval()
        self.model = model.to(device)
        self.device = device
        self.num_layers = int(model.config.num_layers)

    @torch.inference_mode()
    def embed(self, seqs: list[str], layers: list[Any]) -> dict[Any, list[np.ndarray]]:
        _fake_oom(len(seqs))
        enc = self.tokenizer(
            [prot_t5_text(s) for s in seqs], return_tensors="pt", padding=True, add_special_tokens=True
        )
        ids = enc["input_ids"].to(self.device)
        mask = enc["attention_mask"].to(self.device)
        need_hidden = any(layer != LAST for layer in layers)
        out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=need_hidden)
        lens = (mask.sum(dim=1) - 1).cpu().tolist()  # the tokenizer's EOS is excluded
        result: dict[Any, list[np.ndarray]] = {}
        for layer in layers:
            if layer == LAST:
                h = out.last_hidden_state
            else:
                if not 0 <= int(layer) < self.num_layers:
                    raise ConfigError(f"ProtT5 layer {layer} outside 0..{self.num_layers - 1}")
                h = out.hidden_states[int(layer) + 1]
            h = h.float().cpu().numpy()
            rows = []
            for row, s in enumerate(seqs):
                n = int(lens[row])
                if n != len(s):
                    raise ValueError(f"ProtT5 tokenised a sequence of {len(s)} residues into {n} tokens")
                rows.append(h[row, :n].copy())
            result[layer] = rows
        return result


class ESMC:
    """EvolutionaryScale's ESM C from a local weights file (``esm`` package:
    ``esm.models.esmc.ESMC`` built with the 600M shape, ``load_state_dict`` from the
    file). As the reference runs it: on CUDA the weights in bf16 and the forward pass
    under bf16 autocast (``ESMC.from_pretrained`` + ``ESMC.logits``), fp32 on the CPU.
    KINFLOW_ESMC_SHAPE (``d_model,n_heads,n_layers``) is for the tests' small models."""

    # The 600M model's shape (esm.pretrained.ESMC_600M_202412).
    D_MODEL, N_HEADS, N_LAYERS = 1152, 18, 36

    def __init__(self, path: str, device: torch.device, dtype: torch.dtype):
        import importlib

        try:
            esmc_mod = importlib.import_module("esm.models.esmc")
            tok_mod = importlib.import_module("esm.tokenization")
        except ImportError as exc:
            raise ConfigError(f"ESM C needs EvolutionaryScale's esm package (.venv-esmc): {exc}") from exc
        shape = os.environ.get("KINFLOW_ESMC_SHAPE", "").strip()  # d_model,n_heads,n_layers (tests)
        d, h, n = (int(x) for x in shape.split(",")) if shape else (self.D_MODEL, self.N_HEADS, self.N_LAYERS)
        model = esmc_mod.ESMC(
            d_model=d,
            n_heads=h,
            n_layers=n,
            tokenizer=tok_mod.get_esmc_model_tokenizers(),
            use_flash_attn=device.type == "cuda",
        )
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state)
        model.eval()
        if dtype != torch.float32:
            model = model.to(dtype)
        self.model = model.to(device)
        self.device = device
        self.dtype = dtype
        self.num_layers = n

    @torch.inference_mode()
    def embed(self, seqs: list[str], layers: list[Any]) -> dict[Any, list[np.ndarray]]:
        _fake_oom(len(seqs))
        tokens = self.model._tokenize(seqs).to(self.device)
        if self.dtype == torch.float32:
            out = self.model(sequence_tokens=tokens)
        else:
            with torch.autocast(device_type=self.device.type, dtype=self.dtype):
                out = self.model(sequence_tokens=tokens)
        result: dict[Any, list[np.ndarray]] = {}
        for layer in layers:
            i = self.num_layers - 1 if layer == LAST else int(layer)
            h = out.hidden_states[i].float().cpu().numpy()
            result[layer] = [h[row, 1 : len(s) + 1].copy() for row, s in enumerate(seqs)]
        return result
