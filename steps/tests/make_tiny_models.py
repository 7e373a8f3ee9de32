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
* ESM C stand-in weights ``esmc_tiny.pth`` (36 layers, 32 wide;
  tests/kinflow_esmc_standin).

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


def write_esm2(out: str) -> str:
    import esm

    torch.manual_seed(1)
    alphabet = esm.Alphabet.from_architecture("ESM-1b")
    model = esm.model.esm2.ESM2(num_layers=33, embed_dim=32, attention_heads=2, alphabet=alphabet)
    cfg = Namespace(encoder_layers=33, encoder_embed_dim=32, encoder_attention_heads=2, token_dropout=True)
    path = os.path.join(out, "esm2_t33_tiny.pt")
    state = {"encoder." + k: v for k, v in model.state_dict().items()}
    torch.save({"cfg": {"model": cfg}, "model": state}, path)
    torch.save(_regression(model), os.path.join(out, "esm2_t33_tiny-contact-regression.pt"))
    return path


def _esm1b_model(seed: int):
    import esm

    torch.manual_seed(seed)
    alphabet = esm.Alphabet.from_architecture("roberta_large")
    args = Namespace(
        arch="roberta_large",
        layers=33,
        embed_dim=32,
        ffn_embed_dim=64,
        attention_heads=2,
        max_positions=1024,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        emb_layer_norm_before=True,
    )
    model = esm.model.esm1.ProteinBertModel(args, alphabet)
    return model, args


def write_esm1(out: str, name: str, seed: int, regression: bool) -> str:
    model, args = _esm1b_model(seed)
    path = os.path.join(out, name)
    state = {"encoder.sentence_encoder." + k: v for k, v in model.state_dict().items()}
    torch.save({"args": args, "model": state}, path)
    if regression:
        torch.save(_regression(model), path[:-3] + "-contact-regression.pt")
    return path


def write_methodd_tuned(out: str) -> str:
    """Fine-tuned weights as the reference stores them: the ESM-1b model's keys under
    ``module.model.``, plus the classifier head ``module.fc1..fc3`` it drops."""
    model, _ = _esm1b_model(seed=7)
    state = {"module.model." + k: v for k, v in model.state_dict().items()}
    state["module.fc1.weight"] = torch.randn(8, 32)
    state["module.fc1.bias"] = torch.randn(8)
    state["module.fc2.weight"] = torch.randn(4, 8)
    state["module.fc2.bias"] = torch.randn(4)
    state["module.fc3.weight"] = torch.randn(1, 4)
    state["module.fc3.bias"] = torch.randn(1)
    path = os.path.join(out, "methodd_tuned.pkl")
    torch.save(state, path)
    return path


def write_prot_t5(out: str) -> str:
    import sentencepiece as spm
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    folder = os.path.join(out, "prot_t5_tiny")
    os.makedirs(folder, exist_ok=True)
    # A word-level SentencePiece model: one piece per residue ("▁M"), like ProtT5's.
    import random

    rng = random.Random(3)
    lines = [" ".join(AMINO)] + [" ".join(rng.choice(AMINO) for _ in range(60)) for _ in range(200)]
    prefix = os.path.join(out, "spiece_tmp")
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
        d_model=16,
        d_kv=8,
        d_ff=32,
        num_layers=24,
        num_heads=2,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    T5EncoderModel(cfg).save_pretrained(folder)
    return folder


def write_esmc(out: str) -> str:
    sys.path.insert(0, HERE)
    from kinflow_esmc_standin.models.esmc import ESMC
    from kinflow_esmc_standin.tokenization import get_esmc_model_tokenizers

    torch.manual_seed(4)
    d, h, n = ESMC_SHAPE
    model = ESMC(d_model=d, n_heads=h, n_layers=n, tokenizer=get_esmc_model_tokenizers())
    path = os.path.join(out, "esmc_tiny.pth")
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
        "KINFLOW_ESMC_600M_PATH": write_esmc(out),
        "KINFLOW_ESMC_IMPL": "kinflow_esmc_standin",
        "KINFLOW_ESMC_SHAPE": ",".join(str(x) for x in ESMC_SHAPE),
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
