"""Precision per model family, with proof.

The yardstick of each family is the reference deployment's own numerics
(Toepfer-Lab/webKinPred): fp32 for ESM-2, ESM-1b and ESM-1v (fair-esm models are never
cast there); ProtT5-XL's encoder in half precision on CUDA and fp32 on the CPU
(``T5EncoderModel.from_pretrained(..., torch_dtype=float16 if cuda else float32)``);
ESM C in bf16 under bf16 autocast on CUDA (``ESMC.from_pretrained`` casts to bf16 off
the CPU, ``ESMC.logits`` autocasts) and fp32 on the CPU; CatPred (method E) fp32.

A precision runs only where an equivalence test shows it within the bound of
kinflow_steps.equivalence against that yardstick: ``PROVEN`` lists them per family and
device type, the first being the default. Everything else — ``KINFLOW_STEPS_PRECISION``
set to an unproven value, such as bf16 for ESM-2 on CUDA (worst residue cosine 0.967 at
full size), or fp16 for fair-esm's ESM-1b/1v, whose plain ``model.to(float16)`` puts the
whole residual stream in fp16 — is refused at start with one line.

The proofs: steps/tests/test_equivalence.py on the CPU (``make test``). The CUDA rows
are the reference's own numerics (the yardstick itself) unless a faster CUDA mode was
proven by an equivalence run on a GPU (docs/BENCHMARKS.md lists what ran).

``tf32`` is fp32 weights and activations with CUDA's TF32 matrix products
(``torch.backends.cuda.matmul.allow_tf32``): 2.5x the padded ESM-2 server's rate on an
H200. The fingerprint's precision says it (``float32, tf32 matrix products``), so its
files never mix with strict fp32 ones. Its proof is ``steps/gpu_suite.py`` part ``tf32``
at full width against fair-esm fp32 with TF32 off (docs/BENCHMARKS.md, "TF32 rows",
H200, three random seeds of ESM-2 and ESM-1b, probes of 1 to 1,500 residues):
ESM-2 padded and unpadded hold the bound with room (worst residue cosine 0.99937,
pooled 0.99995), so TF32 is ESM-2's CUDA default and ``fp32`` names strict fp32;
ESM-1b holds it barely (pooled 0.999903 at worst, 3e-6 above the bound) while ESM-1v,
the same architecture with other weights, misses it (pooled 0.999887 on a 50-residue
probe), so TF32 is an opt-in for ESM-1b and refused for ESM-1v.
"""

from __future__ import annotations

import os

import torch

from kinflow_steps.errors import ConfigError

FP32, TF32, FP16, BF16 = "fp32", "tf32", "fp16", "bf16"
DTYPES = {FP32: torch.float32, TF32: torch.float32, FP16: torch.float16, BF16: torch.bfloat16}

#: family -> device type -> proven precisions (the first is the default).
PROVEN: dict[str, dict[str, tuple[str, ...]]] = {
    # fp16 on CUDA is UnpaddedESM2 (fp16 products, fp32 residual stream, norms and
    # rotation; varlen flash attention), proven on an H100 at full size: bf16 is not.
    # TF32 (fp32 with TF32 matrix products) first: ESM-2's CUDA default, proven on an H200.
    "esm2": {"cpu": (FP32,), "cuda": (TF32, FP32, FP16)},
    "esm1b": {"cpu": (FP32,), "cuda": (FP32, TF32)},
    "esm1v": {"cpu": (FP32,), "cuda": (FP32,)},
    "prot_t5": {"cpu": (FP32,), "cuda": (FP16,)},
    "esmc": {"cpu": (FP32,), "cuda": (BF16,)},
    "catpred": {"cpu": (FP32,), "cuda": (FP32,)},
}


def precision_for(family: str, device: torch.device) -> str:
    """The precision the family runs at on device: KINFLOW_STEPS_PRECISION_<FAMILY>
    (KINFLOW_STEPS_PRECISION_ESM2=fp16, say) or else KINFLOW_STEPS_PRECISION when it is
    proven there, the family's default when neither is set; ConfigError (one line)
    otherwise. The per-family name lets one host's environment choose a precision for
    one model family without refusing the steps of the others."""
    table = PROVEN[family]
    proven = table.get(device.type, table["cpu"])
    name = f"KINFLOW_STEPS_PRECISION_{family.upper()}"
    want = os.environ.get(name, "").strip().lower()
    if not want:
        name = "KINFLOW_STEPS_PRECISION"
        want = os.environ.get(name, "").strip().lower()
    if not want:
        return proven[0]
    if want not in DTYPES:
        raise ConfigError(f"{name}={want!r}: want fp32, tf32, fp16 or bf16")
    if want not in proven:
        raise ConfigError(
            f"{name}={want} has no equivalence proof for {family} on {device.type} "
            f"(proven: {', '.join(proven)}; steps/kinflow_steps/precision.py)"
        )
    return want


def dtype_of(precision: str) -> torch.dtype:
    return DTYPES[precision]


def apply(precision: str) -> str:
    """Set what a precision needs beyond its dtype, for the whole process (a step server
    runs one step): TF32 matrix products on for ``tf32``, off otherwise (PyTorch's
    default). Returns what the fingerprint's precision adds to the dtype."""
    on = precision == TF32
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return ", tf32 matrix products" if on else ""
