"""Write tiny random-weight models in each library's on-disk format.

    python steps/tests/make_tiny_models.py OUTDIR [--env-file FILE]

writes, under OUTDIR, models the step programs load exactly as they load the real
ones, and prints (or writes to FILE) the GPU-host env lines that point the programs
at them:

* ESM-2 (fair-esm ``ESM2``: 33 layers, 32 wide, 2 heads) as ``esm2_t33_tiny.pt`` +
  ``esm2_t33_tiny-contact-regression.pt`` (fair-esm's checkpoint format, read by
  ``esm.pretrained.load_model_and_alphabet_local``); 33 layers so that methoda's
  layers 26 and 29 exist;
* ESM-1b (fair-esm ``ProteinBertModel``, arch ``roberta_large``) as
  ``esm1b_t33_tiny.pt`` (+ regression) and method D's fine-tuned weights in the
  reference's layout (``module.model.`` keys plus an ``fc1..fc3`` head) as
  ``methodd_tuned.pkl``;
* ESM-1v (the same architecture) as ``esm1v_t33_tiny.pt``;
* ProtT5 (transformers ``T5EncoderModel``, 24 layers, 16 wide, ``save_pretrained``) with
  a SentencePiece model trained here on the amino-acid alphabet as ``spiece.model``;
* (ESM C: ``write_esmc``, with EvolutionaryScale's package, from .venv-esmc only.)

Everything is seeded: the same OUTDIR contents every run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from argparse import Namespace

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
AMINO = "ACDEFGHIKLMNPQRSTVWYX"
ESMC_SHAPE = (32, 2, 36)


def _regression(model) -> dict:
    return {"model": {k: v for k, v in model.state_dict().items() if k.startswith("contact_head.regression")}}


def sharpen(model, qk_scale: float) -> None:
    """Scale every attention's query and key projections by qk_scale. With PyTorch's
    default init, attention over a long sequence is near-uniform (logits of std about
    0.5 for head size 64), so positions barely matter and a wrong position table goes
    unseen; trained protein language models attend sharply. qk_scale 3 gives logits of
    std about 4.5."""
    if qk_scale == 1:
        return
    with torch.no_grad():
        for m in model.modules():
            for name in ("q_proj", "k_proj", "q", "k"):  # fair-esm's, T5's
                lin = getattr(m, name, None)
                if isinstance(lin, torch.nn.Linear):
                    lin.weight.mul_(qk_scale)


def write_esm2(
    out: str, dim: int = 32, heads: int = 2, qk_scale: float = 1, name: str = "esm2_t33_tiny", seed: int = 1
) -> str:
    """ESM-2 (33 layers) in fair-esm's checkpoint format; the name must start with
    ``esm2`` (fair-esm picks the architecture from it)."""
    import esm

    torch.manual_seed(seed)
    alphabet = esm.Alphabet.from_architecture("ESM-1b")
    model = esm.model.esm2.ESM2(num_layers=33, embed_dim=dim, attention_heads=heads, alphabet=alphabet)
    sharpen(model, qk_scale)
    cfg = Namespace(encoder_layers=33, encoder_embed_dim=dim, encoder_attention_heads=heads, token_dropout=True)
    path = os.path.join(out, name + ".pt")
    state = {"encoder." + k: v for k, v in model.state_dict().items()}
    torch.save({"cfg": {"model": cfg}, "model": state}, path)
    torch.save(_regression(model), os.path.join(out, name + "-contact-regression.pt"))
    return path


def _esm1b_model(seed: int, dim: int = 32, heads: int = 2, qk_scale: float = 1):
    import esm

    torch.manual_seed(seed)
    alphabet = esm.Alphabet.from_architecture("roberta_large")
    args = Namespace(
        arch="roberta_large",
        layers=33,
        embed_dim=dim,
        ffn_embed_dim=2 * dim,
        attention_heads=heads,
        max_positions=1024,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        emb_layer_norm_before=True,
    )
    model = esm.model.esm1.ProteinBertModel(args, alphabet)
    sharpen(model, qk_scale)
    return model, args


def write_esm1(
    out: str, name: str, seed: int, regression: bool, dim: int = 32, heads: int = 2, qk_scale: float = 1
) -> str:
    model, args = _esm1b_model(seed, dim, heads, qk_scale)
    path = os.path.join(out, name)
    state = {"encoder.sentence_encoder." + k: v for k, v in model.state_dict().items()}
    torch.save({"args": args, "model": state}, path)
    if regression:
        torch.save(_regression(model), path[:-3] + "-contact-regression.pt")
    return path


def write_methodd_tuned(
    out: str, dim: int = 32, heads: int = 2, qk_scale: float = 1, name: str = "methodd_tuned"
) -> str:
    """Fine-tuned weights as the reference stores them: the ESM-1b model's keys under
    ``module.model.``, plus the classifier head ``module.fc1..fc3`` it drops."""
    model, _ = _esm1b_model(7, dim, heads, qk_scale)
    state = {"module.model." + k: v for k, v in model.state_dict().items()}
    state["module.fc1.weight"] = torch.randn(8, dim)
    state["module.fc1.bias"] = torch.randn(8)
    state["module.fc2.weight"] = torch.randn(4, 8)
    state["module.fc2.bias"] = torch.randn(4)
    state["module.fc3.weight"] = torch.randn(1, 4)
    state["module.fc3.bias"] = torch.randn(1)
    path = os.path.join(out, name + ".pkl")
    torch.save(state, path)
    return path


def write_prot_t5(
    out: str, dim: int = 16, d_kv: int = 8, heads: int = 2, qk_scale: float = 1, name: str = "prot_t5_tiny"
) -> str:
    import sentencepiece as spm
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    # A word-level SentencePiece model: one piece per residue ("▁M"), like ProtT5's.
    import random

    rng = random.Random(3)
    lines = [" ".join(AMINO)] + [" ".join(rng.choice(AMINO) for _ in range(60)) for _ in range(200)]
    prefix = os.path.join(out, name + "_spiece_tmp")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=prefix,
        vocab_size=len(AMINO) + 3,
        model_type="word",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    # The folder holds spiece.model, as Rostlab/prot_t5_xl_uniref50 ships it (no
    # tokenizer.json): the program's T5Tokenizer converts it (transformers 5 needs
    # protobuf for that).
    shutil.move(prefix + ".model", os.path.join(folder, "spiece.model"))
    os.remove(prefix + ".vocab")
    tok = T5Tokenizer.from_pretrained(folder, do_lower_case=False, local_files_only=True)
    torch.manual_seed(2)
    cfg = T5Config(
        vocab_size=len(tok),
        d_model=dim,
        d_kv=d_kv,
        d_ff=2 * dim,
        num_layers=24,
        num_heads=heads,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    model = T5EncoderModel(cfg)
    sharpen(model, qk_scale)
    model.save_pretrained(folder)
    return folder


def write_esmc(
    out: str, shape: tuple[int, int, int] = ESMC_SHAPE, name: str = "esmc_tiny", qk_ln_scale: float = 1
) -> str:
    """ESM C built with EvolutionaryScale's own classes (``esm`` package, .venv-esmc),
    its state dict saved as the 600M ``.pth`` is. ESM C normalises queries and keys
    (``q_ln``, ``k_ln``): qk_ln_scale scales those norms' weights to sharpen attention
    (sharpen())."""
    from esm.models.esmc import ESMC
    from esm.tokenization import get_esmc_model_tokenizers

    torch.manual_seed(4)
    d, h, n = shape
    model = ESMC(d_model=d, n_heads=h, n_layers=n, tokenizer=get_esmc_model_tokenizers(), use_flash_attn=False)
    if qk_ln_scale != 1:
        with torch.no_grad():
            for m in model.modules():
                for ln in (getattr(m, "q_ln", None), getattr(m, "k_ln", None)):
                    if isinstance(ln, torch.nn.LayerNorm):
                        ln.weight.mul_(qk_ln_scale)
    path = os.path.join(out, name + ".pth")
    torch.save(model.state_dict(), path)
    return path


def make_all(out: str) -> dict[str, str]:
    """Write every tiny model under out; return the env entries that select them."""
    os.makedirs(out, exist_ok=True)
    return {
        "KINFLOW_ESM2_650M_PATH": write_esm2(out),
        "KINFLOW_ESM1B_PATH": write_esm1(out, "esm1b_t33_tiny.pt", seed=5, regression=True),
        "KINFLOW_METHODD_CHECKPOINT": write_methodd_tuned(out),
        "KINFLOW_ESM1V_PATH": write_esm1(out, "esm1v_t33_tiny.pt", seed=6, regression=False),
        "KINFLOW_PROT_T5_PATH": write_prot_t5(out),
        "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), HERE]),
    }


#: The equivalence models: the full architectures' depth (33 / 24 layers) and head
#: sizes (64 for ESM-2 / ESM-1b / ESM-1v, 128 for ProtT5-XL's d_kv), narrow (2 heads)
#: so that the CPU runs 1,500 residues in seconds; attention sharpened (sharpen()).
EQ_HEADS = 2
EQ_QK_SCALE = 3.0


def make_equivalence(out: str) -> dict[str, str]:
    """Write the equivalence models under out; return the env entries that select them."""
    os.makedirs(out, exist_ok=True)
    dim = 64 * EQ_HEADS
    return {
        "KINFLOW_ESM2_650M_PATH": write_esm2(out, dim, EQ_HEADS, EQ_QK_SCALE, name="esm2_t33_eq"),
        "KINFLOW_ESM1B_PATH": write_esm1(out, "esm1b_t33_eq.pt", 5, True, dim, EQ_HEADS, EQ_QK_SCALE),
        "KINFLOW_METHODD_CHECKPOINT": write_methodd_tuned(out, dim, EQ_HEADS, EQ_QK_SCALE, name="methodd_eq"),
        "KINFLOW_ESM1V_PATH": write_esm1(out, "esm1v_t33_eq.pt", 6, False, dim, EQ_HEADS, EQ_QK_SCALE),
        "KINFLOW_PROT_T5_PATH": write_prot_t5(out, 128 * EQ_HEADS, 128, EQ_HEADS, 2 * EQ_QK_SCALE, name="prot_t5_eq"),
        "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), HERE]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--env-file", help="also write the env lines to this file")
    a = ap.parse_args()
    env = make_all(os.path.abspath(a.outdir))
    text = "".join(f"{k}={v}\n" for k, v in env.items())
    sys.stdout.write(text)
    if a.env_file:
        with open(a.env_file, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
