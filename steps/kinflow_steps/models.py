"""Model loading and forward passes, through the field's own libraries.

Each embedder turns a list of sequences into per-residue matrices (BOS/CLS and EOS
removed, padding removed) for the layers asked, as float32 NumPy arrays (``embed``:
the host path, which the tests and gpu_suite compare against), or leaves them on the
device with where each sequence's rows are (``embed_device``, what the steps run: the
reductions happen on the device, kinflow_steps.device, base.PooledStep.forward).

Facts taken from the reference's public workers (Toepfer-Lab/webKinPred):
* fair-esm models: ``alphabet.get_batch_converter()`` tokens (BOS + residues + EOS),
  ``repr_layers``; residues are positions ``1 .. len(seq)``.
* ProtT5-XL: residues separated by spaces, U/Z/O/B replaced by X, the tokenizer adds
  EOS; ``hidden_states[layer + 1]`` is encoder layer ``layer`` (0 is the embedding
  output) and ``hidden_states[-1]`` the last (after the final layer norm); residues are
  the first ``attention_mask.sum() - 1`` positions.
* ESMC: ``hidden_states[layer]`` of the model output (block ``layer``'s output, before
  the final norm), or with ``FINAL`` the output's ``embeddings`` (the last block's
  output after the trunk's final layer norm, what ``LogitsConfig(return_embeddings=True)``
  returns); BOS/EOS removed.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import torch

from kinflow_steps.device import DeviceReps, to_device
from kinflow_steps.errors import ConfigError

LAST = "last"
#: ESM C's final trunk embeddings (``ESMCOutput.embeddings``: the last block's output
#: after the trunk's final layer norm), as a layer value of ``ESMC.embed``. Not a hidden
#: state: ``LAST`` is ``hidden_states[-1]``, the same block's output before that norm.
FINAL = "embeddings"

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


def env_flag(name: str) -> bool:
    """Whether the environment variable name is set to 1, true, yes or on."""
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def pick_device() -> torch.device:
    """KINFLOW_STEPS_DEVICE (cpu, cuda, cuda:N) or CUDA when present. With
    KINFLOW_STEPS_REQUIRE_CUDA=1 a host without CUDA is a start-up error."""
    want = os.environ.get("KINFLOW_STEPS_DEVICE", "").strip()
    require = env_flag("KINFLOW_STEPS_REQUIRE_CUDA")
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


def _varlen_flash() -> Any:
    """PyTorch's variable-length flash attention as f(q, k, v, cu, max_len) over
    [T, H, D] tensors with the softmax scale 1 (q arrives scaled), or None where this
    PyTorch has neither ``torch.nn.attention.varlen.varlen_attn`` (2.10+) nor the
    ``aten._flash_attention_forward`` op it wraps."""
    import inspect

    try:
        from torch.nn.attention.varlen import varlen_attn  # type: ignore[import-not-found]

        if "scale" in inspect.signature(varlen_attn).parameters:

            def public(q, k, v, cu, n):
                return varlen_attn(q, k, v, cu, cu, n, n, scale=1.0)

            return public
    except ImportError:
        pass
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if op is None:
        return None

    def aten(q, k, v, cu, n):
        return op(q, k, v, cu, cu, n, n, 0.0, False, False, scale=1.0)[0]

    return aten


def _rotate(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, scale: float) -> torch.Tensor:
    """fair-esm's ``apply_rotary_pos_emb`` in fp32 on [T, H, D] (t * scale first: fair-esm
    scales q before the rotation); cast back to t's dtype."""
    tf = t.float()
    if scale != 1.0:
        tf = tf * scale
    half = tf.shape[-1] // 2
    rot = torch.cat((-tf[..., half:], tf[..., :half]), dim=-1)
    return (tf * cos + rot * sin).to(t.dtype)


def _attention_in(x, ln_w, ln_b, eps: float, wqkv, bqkv, cos, sin, heads: int, scaling: float):
    """A layer's pre-norm and q/k/v projections with the rotary positions: [T, H, D] each."""
    F = torch.nn.functional
    T, E = x.shape
    h = F.layer_norm(x, (E,), ln_w, ln_b, eps).to(wqkv.dtype)
    qkv = F.linear(h, wqkv, bqkv).view(T, 3, heads, E // heads)
    return _rotate(qkv[:, 0], cos, sin, scaling), _rotate(qkv[:, 1], cos, sin, 1.0), qkv[:, 2].contiguous()


def _attention_out_ffn(x, o, wo, bo, ln_w, ln_b, eps: float, w1, b1, w2, b2):
    """The attention's output projection and residual, then the pre-norm exact-GELU
    feed-forward and its residual; x (the residual stream) stays fp32."""
    F = torch.nn.functional
    T, E = x.shape
    x = x + F.linear(o.reshape(T, E), wo, bo).float()
    h = F.layer_norm(x, (E,), ln_w, ln_b, eps).to(w1.dtype)
    return x + F.linear(F.gelu(F.linear(h, w1, b1)), w2, b2).float()


class UnpaddedESM2:
    """fair-esm's ESM-2 forward pass over a batch's sequences laid end to end: no
    padding is computed, and each sequence attends to itself alone (variable-length
    flash attention on CUDA; one scaled-dot-product attention per sequence elsewhere).

    It reuses the loaded fair-esm model's own weights and follows its ``ESM2.forward``
    and ``TransformerLayer.forward`` step for step: the embedding with token dropout's
    rescaling, per layer pre-norm attention with rotary positions (counted from 0 in
    each sequence, as fair-esm counts them in its padded batch), the exact GELU
    feed-forward, residual additions, and ``emb_layer_norm_after`` on the last layer's
    representation only. With ``dtype`` fp16 or bf16 (the CUDA fast path) the matrix
    products run in that dtype with fp32 accumulation while the residual stream, the
    layer norms, the rotary table and rotation, and the softmax statistics stay fp32;
    with fp32 it is fair-esm's arithmetic without the padding, which the CPU tests
    compare with fair-esm itself. Only kinflow_steps.precision decides where a half
    precision runs (the GPU proof: docs/BENCHMARKS.md, "Step programs on a GPU").

    KINFLOW_STEPS_COMPILE=1 fuses each layer's element-wise work (norms, casts, the
    rotation, GELU, residual additions) with ``torch.compile``; the products and the
    attention are the same kernels."""

    def __init__(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype):
        """model: a fair-esm ESM2 on the CPU. Its linear layers' weights go to device once,
        in dtype (fused q/k/v); the model keeps only what the pass reads besides them
        (embedding, norms, rotary frequencies), moved to device."""
        self.device = device
        self.dtype = dtype
        self.flash = _varlen_flash() if device.type == "cuda" and dtype in (torch.float16, torch.bfloat16) else None
        first = model.layers[0].self_attn
        self.heads, self.scaling = int(first.num_heads), float(first.scaling)
        self.attention_in, self.attention_out_ffn = _attention_in, _attention_out_ffn
        self.compiled = env_flag("KINFLOW_STEPS_COMPILE")
        if self.compiled:
            self.attention_in = torch.compile(_attention_in, dynamic=True)
            self.attention_out_ffn = torch.compile(_attention_out_ffn, dynamic=True)
        products = []
        with torch.no_grad():
            for layer in model.layers:
                a = layer.self_attn
                lins = (a.q_proj, a.k_proj, a.v_proj, a.out_proj, layer.fc1, layer.fc2)
                qkv_w = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
                qkv_b = torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
                rest = [t for lin in lins[3:] for t in (lin.weight, lin.bias)]
                products.append([t.to(device, dtype).contiguous() for t in (qkv_w, qkv_b, *rest)])
                for lin in lins:  # the pass reads the copies only
                    lin.weight = None  # type: ignore[assignment]
                    lin.bias = None  # type: ignore[assignment]
        self.model = model.to(device)
        self.weights = []
        for layer, w in zip(self.model.layers, products, strict=True):
            n1, n2 = layer.self_attn_layer_norm, layer.final_layer_norm
            self.weights.append(
                ((n1.weight, n1.bias, float(n1.eps)), *w[:4], (n2.weight, n2.bias, float(n2.eps)), *w[4:])
            )
        self.inv_freq = first.rot_emb.inv_freq.detach().float().to(device)

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: list[int], cu: torch.Tensor):
        """Attention of each sequence to itself over [T, H, D] tensors (q scaled)."""
        if self.flash is not None:
            return self.flash(q, k, v, cu, max(lens))
        out = torch.empty_like(q)
        start = 0
        for n in lens:
            qs, ks, vs = (t[start : start + n].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
            o = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, scale=1.0)
            out[start : start + n] = o.squeeze(0).transpose(0, 1)
            start += n
        return out

    def __call__(self, tokens: list[torch.Tensor], repr_layers: list[int]) -> dict[int, torch.Tensor]:
        """tokens: one 1-D token tensor per sequence (BOS, residues, EOS, as fair-esm's
        batch converter gives them, cut where the method cuts); returns, per layer
        asked, the fp32 [sum of n_tokens, D] representations, sequences end to end."""
        m, dev = self.model, self.device
        lens = [int(t.numel()) for t in tokens]
        # Every input crosses through pinned memory without waiting (device.to_device): a
        # copy from pageable memory would hold this thread until the pass queued before is
        # done, so the next pass could not be queued behind it.
        flat = to_device(torch.cat(tokens), dev)
        cu = to_device(torch.tensor([0, *np.cumsum(lens).tolist()], dtype=torch.int32), dev)
        pos = to_device(torch.cat([torch.arange(n, dtype=torch.float32) for n in lens]), dev)
        n_tok = to_device(torch.tensor(lens), dev)

        x = m.embed_scale * m.embed_tokens(flat)
        if m.token_dropout:
            masked = flat == m.mask_idx
            x.masked_fill_(masked.unsqueeze(-1), 0.0)
            mask_ratio_train = 0.15 * 0.8
            seg = torch.repeat_interleave(torch.arange(len(lens), device=dev), n_tok, output_size=len(flat))
            counts = torch.zeros(len(lens), device=dev).index_add_(0, seg, masked.float())
            observed = (counts / n_tok.float()).to(x.dtype)
            x = x * (1 - mask_ratio_train) / (1 - observed)[seg][:, None]
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

        want = set(repr_layers)
        reps: dict[int, torch.Tensor] = {}
        if 0 in want:
            reps[0] = x
        n_layers = len(m.layers)
        for i, (n1, wqkv, bqkv, wo, bo, n2, w1, b1, w2, b2) in enumerate(self.weights):
            q, k, v = self.attention_in(x, *n1, wqkv, bqkv, cos, sin, self.heads, self.scaling)
            o = self.attention(q, k, v, lens, cu)
            x = self.attention_out_ffn(x, o, wo, bo, *n2, w1, b1, w2, b2)
            if i + 1 in want and i + 1 != n_layers:
                reps[i + 1] = x
        if n_layers in want:
            reps[n_layers] = m.emb_layer_norm_after(x)
        return reps


def unpadded_esm2(dtype: Any) -> bool:
    """Whether FairESM runs an ESM-2 checkpoint through UnpaddedESM2 at dtype."""
    return dtype not in (None, torch.float32) or env_flag("KINFLOW_STEPS_UNPADDED")


def esm2_path(dtype: Any) -> str:
    """What an ESM-2 step's precision in its fingerprint adds for the unpadded path
    (empty for fair-esm's own padded forward pass): the numbers differ by rounding, so
    the cache and the provenance keep them apart."""
    if not unpadded_esm2(dtype):
        return ""
    half = dtype is not None and dtype != torch.float32
    note = ", unpadded" + (" (fp32 residual stream, norms and rotation)" if half else "")
    return note + (", compiled" if env_flag("KINFLOW_STEPS_COMPILE") else "")


class FairESM:
    """An ESM-2 / ESM-1b / ESM-1v checkpoint loaded with fair-esm's
    ``load_model_and_alphabet_local`` (the file's name picks the architecture, as in
    fair-esm: ``esm2*`` is ESM-2; a ``-contact-regression.pt`` file must sit beside
    ESM-2 and ESM-1b checkpoints).

    ESM-2 in fp16 (proven on CUDA only, kinflow_steps.precision) runs unpadded
    (UnpaddedESM2); KINFLOW_STEPS_UNPADDED=1 takes that path at fp32 too, as the tests
    and benchmarks do, unless the caller says ``unpadded=False`` (method E: CatPred's
    own ESM-2 features). Every other case is fair-esm's own padded forward pass."""

    def __init__(
        self,
        path: str,
        device: torch.device,
        dtype: torch.dtype,
        state_dict: dict | None = None,
        unpadded: bool | None = None,
    ):
        model, alphabet = fair_esm_load(path)
        if state_dict is not None:
            model.load_state_dict(state_dict)
        model.eval()
        self.unpadded: UnpaddedESM2 | None = None
        if type(model).__name__ == "ESM2" and (unpadded_esm2(dtype) if unpadded is None else unpadded):
            self.unpadded = UnpaddedESM2(model, device, dtype)
            self.model = self.unpadded.model
        elif dtype != torch.float32:
            # Only reached where kinflow_steps.precision proves the dtype: the rotary
            # positions stay float32 in any case.
            model = model.to(dtype)
            pin_rotary_fp32(model)
        if self.unpadded is None:
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
        if self.unpadded is not None:
            return self.embed_unpadded(seqs, layers, cls, max_tokens)
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

    @torch.inference_mode()
    def embed_device(self, seqs: list[str], layers: list[Any], max_tokens: int | None = None) -> DeviceReps:
        """embed()'s forward pass with its representations left on the device
        (kinflow_steps.device): the same tokens, the same cut and the same residue rows
        per sequence, for the step to reduce there."""
        _fake_oom(len(seqs))
        idx = {layer: self.layer_index(layer) for layer in layers}
        if self.unpadded is not None:
            toks = []
            for s in seqs:
                _, _, t = self.converter([("0", s)])
                toks.append(t[0][:max_tokens] if max_tokens is not None else t[0])
            reps = self.unpadded(toks, sorted(set(idx.values())))
            lens = [int(t.numel()) for t in toks]
            starts = np.cumsum([0] + lens).tolist()[:-1]
            rows = [min(len(s), n - 1) for s, n in zip(seqs, lens, strict=True)]
            return DeviceReps.flat({layer: reps[i] for layer, i in idx.items()}, rows, starts)
        _, _, tokens = self.converter([(str(i), s) for i, s in enumerate(seqs)])
        if max_tokens is not None and tokens.shape[1] > max_tokens:
            tokens = tokens[:, :max_tokens]
        keep = tokens.shape[1] - 1
        out = self.model(to_device(tokens, self.device), repr_layers=sorted(set(idx.values())), return_contacts=False)
        reps = out["representations"]
        return DeviceReps.padded({layer: reps[i] for layer, i in idx.items()}, [min(len(s), keep) for s in seqs], 1)

    def embed_unpadded(
        self, seqs: list[str], layers: list[Any], cls: bool, max_tokens: int | None
    ) -> dict[Any, list[np.ndarray]]:
        """embed() through UnpaddedESM2: each sequence's tokens as fair-esm's batch
        converter makes them (BOS, residues, EOS), cut at max_tokens as in embed()."""
        assert self.unpadded is not None
        toks = []
        for s in seqs:
            _, _, t = self.converter([("0", s)])
            t = t[0]
            toks.append(t[:max_tokens] if max_tokens is not None else t)
        idx = {layer: self.layer_index(layer) for layer in layers}
        reps = self.unpadded(toks, sorted(set(idx.values())))
        starts = np.cumsum([0] + [int(t.numel()) for t in toks])
        result: dict[Any, list[np.ndarray]] = {}
        for layer, i in idx.items():
            flat = reps[i].float().cpu().numpy()  # one copy to the host per batch and layer
            if cls:
                result[layer] = [flat[a] for a in starts[:-1]]
            else:
                result[layer] = [
                    flat[a + 1 : a + 1 + min(len(s), int(b - a) - 1)]
                    for a, b, s in zip(starts[:-1], starts[1:], seqs, strict=True)
                ]
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

    @torch.inference_mode()
    def embed_device(self, seqs: list[str], layers: list[Any], max_tokens: int | None = None) -> DeviceReps:
        """embed()'s forward pass with the hidden states left on the device."""
        _fake_oom(len(seqs))
        enc = self.tokenizer(
            [prot_t5_text(s) for s in seqs], return_tensors="pt", padding=True, add_special_tokens=True
        )
        lens = (enc["attention_mask"].sum(dim=1) - 1).tolist()  # the tokenizer's EOS is excluded
        for n, s in zip(lens, seqs, strict=True):
            if int(n) != len(s):
                raise ValueError(f"ProtT5 tokenised a sequence of {len(s)} residues into {int(n)} tokens")
        ids = to_device(enc["input_ids"], self.device)
        mask = to_device(enc["attention_mask"], self.device)
        need_hidden = any(layer != LAST for layer in layers)
        out = self.model(input_ids=ids, attention_mask=mask, output_hidden_states=need_hidden)
        reps = {}
        for layer in layers:
            if layer == LAST:
                reps[layer] = out.last_hidden_state
            else:
                if not 0 <= int(layer) < self.num_layers:
                    raise ConfigError(f"ProtT5 layer {layer} outside 0..{self.num_layers - 1}")
                reps[layer] = out.hidden_states[int(layer) + 1]
        return DeviceReps.padded(reps, [int(n) for n in lens], 0)


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

    def _forward(self, seqs: list[str]) -> Any:
        """ESMC's forward pass over seqs (autocast below fp32)."""
        _fake_oom(len(seqs))
        tokens = self.model._tokenize(seqs).to(self.device)
        if self.dtype == torch.float32:
            return self.model(sequence_tokens=tokens)
        with torch.autocast(device_type=self.device.type, dtype=self.dtype):
            return self.model(sequence_tokens=tokens)

    def _rep(self, out: Any, layer: Any) -> torch.Tensor:
        """The [B, T, D] representation of layer in a forward pass's output: FINAL the
        final normed ``embeddings``, LAST the last block's hidden state, an int that
        block's (``hidden_states[layer]``)."""
        if layer == FINAL:
            return out.embeddings
        i = self.num_layers - 1 if layer == LAST else int(layer)
        if not 0 <= i < self.num_layers:
            raise ConfigError(f"ESM C layer {layer} outside 0..{self.num_layers - 1}")
        return out.hidden_states[i]

    @torch.inference_mode()
    def embed(self, seqs: list[str], layers: list[Any]) -> dict[Any, list[np.ndarray]]:
        out = self._forward(seqs)
        result: dict[Any, list[np.ndarray]] = {}
        for layer in layers:
            h = self._rep(out, layer).float().cpu().numpy()
            result[layer] = [h[row, 1 : len(s) + 1].copy() for row, s in enumerate(seqs)]
        return result

    @torch.inference_mode()
    def embed_device(self, seqs: list[str], layers: list[Any], max_tokens: int | None = None) -> DeviceReps:
        """embed()'s forward pass with the representations left on the device."""
        out = self._forward(seqs)
        reps = {layer: self._rep(out, layer) for layer in layers}
        return DeviceReps.padded(reps, [len(s) for s in seqs], 1)
