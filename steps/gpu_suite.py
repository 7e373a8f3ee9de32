"""The step programs' CUDA rows and throughput at full model size, random weights: one
script for one lease of a GPU machine (docs/BENCHMARKS.md, "Step programs on a GPU").

    python3 steps/gpu_suite.py --out DIR [--work DIR] [--size full|eq] [--budget-s N]

Parts, each in its own process with its own time limit, results as JSON lines in
DIR/gpu_suite.jsonl and a table at the end:

* ``env``: the card, its bf16 and fp32 matrix rates (8192³ products) and copy bandwidth;
* ``esm2``: ESM-2 650M (fair-esm, attention sharpened as in the equivalence tests, and
  PyTorch's default init): the production fp32 padded batch, methods G and H's 1,024-token
  cut, and the unpadded path (kinflow_steps.models.UnpaddedESM2) at fp32, bf16 and fp16,
  each against every sequence alone through fair-esm in fp32; then tokens/s over 10,000
  enzyme-like lengths for the padded fp32 path and the unpadded bf16/fp16 path;
* ``t5``: ProtT5-XL's encoder (transformers) in fp16, the reference's CUDA precision: a
  padded batch against each sequence alone in fp16 and in fp32; tokens/s;
* ``esmc``: ESM C 600M (EvolutionaryScale's esm, from ``--esmc-site``) in bf16 under
  autocast: a padded batch against each sequence alone through the library's own
  ``ESMC.logits`` (bf16 autocast) and in fp32, for method A's hidden states (layers 24,
  32) and method K's final normed embeddings (``methodk_esmc_mean``, also the step's
  file: the length-bucketed passes' device mean against the worker's own vector);
  tokens/s;
* ``tf32``: TF32 matrix products on the fp32 paths at full width — ESM-2
  padded and unpadded, ESM-1b and ESM-1v padded (both written here, sharpened) — against
  each sequence alone through fair-esm in fp32 with TF32 off (``--tf32-seeds 2,3``: ESM-2
  and ESM-1b with more random weights too); the padded ESM-2 rate.
  kinflow_steps.precision lists ``tf32`` only where these rows held the bound;
* ``reduce``: the device reductions (kinflow_steps.device: float64 sums on
  the device, [D] vectors to the host) against the float64 host mean of the same
  forward pass, for fp32 padded and fp16 unpadded ESM-2;
* ``bench-pipeline``: steps/bench.py's resident server over 10,000
  enzyme-like lengths with the pipeline off and on (``--pipeline-compare``), on the
  fp16 unpadded compiled path (also with 8 writer threads), strict fp32 padded and the
  production default (fp32 padded with TF32 products on CUDA); ``--repeat`` runs of each;
* ``fwd``: the fp16 unpadded forward pass alone, eager and compiled, on one
  16,384-token batch (esm2fast's "forward only" rows without its equivalence rows): the
  rate the resident server's share is taken of.

``--only a,b`` runs just those parts (models written in parallel while ``env`` runs).

Throughput runs stop at their time cap and report the rate over the batches done (batch
order shuffled, so the rate is not that of the longest sequences). The roofline is 2 ×
parameters FLOPs per token against the measured and the datasheet dense bf16 rate.
``--size eq`` runs everything on small models on the CPU, to check the script itself.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tests"))

AMINO = "ACDEFGHIKLMNPQRSTVWY"
DATASHEET_BF16_TFLOPS = 989.4  # H100 SXM dense bf16
SHAPES = {
    "full": {"esm2": (1280, 20), "t5": (1024, 128, 16384, 24, 32), "esmc": (1152, 18, 36)},
    "eq": {"esm2": (128, 2), "t5": (64, 16, 128, 24, 4), "esmc": (64, 4, 36)},
}


def rand_seq(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(AMINO) for _ in range(n))


def emit(out: str, row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)
    with open(os.path.join(out, "gpu_suite.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def cmp_vec(got, want) -> dict[str, Any]:
    """Figures of one pooled vector against another (kinflow_steps.equivalence's pooled
    bound)."""
    from kinflow_steps.equivalence import compare

    p = compare(got, want)
    return {"pooled_cos": p.min_cosine, "max_abs_diff": p.max_abs_diff, "ok": bool(p.ok), "why": p.reason}


def cmp_rows(got, want) -> dict[str, Any]:
    """Per-residue and pooled figures of one sequence (kinflow_steps.equivalence)."""
    import numpy as np

    from kinflow_steps.equivalence import compare

    r = compare(got, want)
    p = compare(np.asarray(got, dtype=np.float64).mean(0), np.asarray(want, dtype=np.float64).mean(0))
    return {
        "rows": int(np.asarray(got).shape[0]),
        "residue_min_cos": r.min_cosine,
        "residue_mean_cos": r.mean_cosine,
        "pooled_cos": p.min_cosine,
        "max_abs_diff": r.max_abs_diff,
        "ok": bool(r.ok and p.ok),
        "why": r.reason or p.reason,
    }


def throughput(embed, seqs: list[str], budget: int, cap_s: float, extra_tokens: int):
    """Pack seqs as the step programs do (kinflow_steps.steps.pack: longest first,
    (longest + 2) × count <= budget), run the batches in a shuffled order through embed
    until cap_s, and return the rate."""
    from kinflow_steps.steps import Seq, pack

    batches = [[int(x.seq_id) for x in g] for g in pack([Seq(str(i), s, [], []) for i, s in enumerate(seqs)], budget)]
    random.Random(1).shuffle(batches)
    embed([seqs[i] for i in batches[0]])  # warm-up (kernels, allocator)
    sync()
    done_seqs = done_tokens = computed = 0
    t = time.monotonic()
    for b in batches:
        group = [seqs[i] for i in b]
        embed(group)
        done_seqs += len(group)
        done_tokens += sum(len(s) + extra_tokens for s in group)
        computed += (max(len(s) for s in group) + extra_tokens) * len(group)
        if time.monotonic() - t > cap_s:
            break
    sync()
    wall = time.monotonic() - t
    return {
        "sequences": done_seqs,
        "of": len(seqs),
        "batches": len(batches),
        "tokens": done_tokens,
        "padded_tokens_per_token": round(computed / max(done_tokens, 1), 4),
        "wall_s": round(wall, 2),
        "tokens_per_s": round(done_tokens / wall, 1),
    }


def roofline(row: dict[str, Any], params: int, peak_tflops: float) -> dict[str, Any]:
    flops = row["tokens_per_s"] * 2 * params
    row["achieved_tflops"] = round(flops / 1e12, 1)
    row["share_of_measured_bf16_peak"] = round(flops / (peak_tflops * 1e12), 4) if peak_tflops else None
    row["share_of_datasheet_bf16_peak"] = round(flops / (DATASHEET_BF16_TFLOPS * 1e12), 4)
    return row


def first_batch(seqs: list[str], budget: int = 16384) -> tuple[list[str], int]:
    """The leading sequences that fit budget tokens (BOS and EOS counted)."""
    group, total = [], 0
    for s in seqs:
        if total + len(s) + 2 > budget:
            break
        group.append(s)
        total += len(s) + 2
    return group, total


def forward_only(part: str, name: str, fm: Any, group: list[str], total: int, params: int, peak: float) -> dict:
    """The unpadded forward pass alone over one batch (no host copies): median of 5 after
    one warm-up, as a roofline row."""
    toks = [fm.converter([("0", s)])[2][0] for s in group]
    times = []
    for _ in range(6):
        sync()
        t = time.monotonic()
        fm.unpadded(toks, [33])
        sync()
        times.append(time.monotonic() - t)
    med = sorted(times[1:])[2]
    row = {"part": part, "case": f"throughput {name}, forward only (one {total:,}-token batch)", "params": params,
           "sequences": len(group), "of": len(group), "batches": 1, "tokens": total, "wall_s": round(med, 4),
           "tokens_per_s": round(total / med, 1)}  # fmt: skip
    return roofline(row, params, peak)


def fair_tokens(alphabet, seq: str, cut: int | None = None):
    """[1, n] fair-esm tokens of seq alone (BOS, residues, EOS), cut to its first cut."""
    import torch

    toks = torch.tensor([[alphabet.cls_idx] + [alphabet.get_idx(c) for c in seq] + [alphabet.eos_idx]])
    return toks[:, :cut] if cut else toks


def enzyme_lengths(n: int) -> list[str]:
    from test_packing import lengths

    return [rand_seq(m, 1000 + i) for i, m in enumerate(lengths(n))]


# --- parts ---------------------------------------------------------------------------


def part_env(a) -> None:
    import torch

    row: dict[str, Any] = {"part": "env", "torch": torch.__version__, "cuda": torch.version.cuda}
    if not torch.cuda.is_available():
        emit(a.out, {**row, "device": "cpu"})
        return
    p = torch.cuda.get_device_properties(0)
    row.update(device=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1))
    for name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32), ("tf32", torch.float32)):
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        n = 8192
        x, y = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
        for _ in range(3):
            x @ y
        times = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            x @ y
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        times.sort()
        row[f"{name}_matmul_tflops"] = round(2 * n**3 / times[len(times) // 2] / 1e12, 1)
    torch.backends.cuda.matmul.allow_tf32 = False
    buf = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(buf)
    dst.copy_(buf)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        dst.copy_(buf)
    torch.cuda.synchronize()
    row["copy_tb_s"] = round(2 * 10 * buf.numel() / (time.perf_counter() - t) / 1e12, 2)
    emit(a.out, row)


def part_write(a) -> None:
    import make_tiny_models as mtm

    kind = a.part.split("-", 1)[1]
    t = time.monotonic()
    if kind == "esm2":
        dim, heads = SHAPES[a.size]["esm2"]
        path = mtm.write_esm2(a.work, dim, heads, mtm.EQ_QK_SCALE, name="esm2_t33_suite")
    elif kind == "t5":
        import torch
        from transformers import T5Config, T5EncoderModel

        d, dkv, dff, layers, heads = SHAPES[a.size]["t5"]
        path = mtm.write_prot_t5(a.work, name="t5")  # the tokenizer; the weights replaced below
        cfg = T5Config(vocab_size=128, d_model=d, d_kv=dkv, d_ff=dff, num_layers=layers, num_heads=heads,
                       feed_forward_proj="relu", pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)  # fmt: skip
        torch.manual_seed(0)
        model = T5EncoderModel(cfg)
        mtm.sharpen(model, mtm.EQ_QK_SCALE)
        model.half().save_pretrained(path)  # as Rostlab ships ProtT5-XL's encoder: half the bytes
    elif kind.startswith("esm2s"):  # another seed of ESM-2 (part tf32, --tf32-seeds)
        dim, heads = SHAPES[a.size]["esm2"]
        seed = int(kind[5:])
        path = mtm.write_esm2(a.work, dim, heads, mtm.EQ_QK_SCALE, name=f"esm2_t33_suite_s{seed}", seed=seed)
    elif kind.startswith("esm1bs"):
        dim, heads = SHAPES[a.size]["esm2"]
        seed = int(kind[6:])
        path = mtm.write_esm1(a.work, f"esm1b_t33_suite_s{seed}.pt", 100 + seed, True, dim, heads, mtm.EQ_QK_SCALE)
    elif kind in ("esm1b", "esm1v"):
        dim, heads = SHAPES[a.size]["esm2"]
        seed, regression = (5, True) if kind == "esm1b" else (6, False)
        path = mtm.write_esm1(a.work, f"{kind}_t33_suite.pt", seed, regression, dim, heads, mtm.EQ_QK_SCALE)
    else:
        path = mtm.write_esmc(a.work, SHAPES[a.size]["esmc"], name="esmc_suite", qk_ln_scale=2.0)
    emit(a.out, {"part": a.part, "path": path, "seconds": round(time.monotonic() - t, 1)})


def part_esm2(a) -> None:
    import torch
    from test_fair_esm import fair_load

    from kinflow_steps import models

    dev = device()
    path = os.path.join(a.work, "esm2_t33_suite.pt")
    base, alphabet = fair_load(path)
    base.eval()
    params = sum(p.numel() for p in base.parameters())
    default_init = copy.deepcopy(base.state_dict())
    for k in default_init:
        if k.endswith(("q_proj.weight", "k_proj.weight")):
            default_init[k] = default_init[k] / 3.0  # undo make_tiny_models.sharpen (EQ_QK_SCALE)
    models.fair_esm_load = lambda _p: (copy.deepcopy(base), alphabet)  # one read of the file
    ref_model = copy.deepcopy(base).to(dev)

    def ref(seq: str, layers: list[int], cut: int | None = None) -> dict[int, Any]:
        toks = fair_tokens(alphabet, seq, cut)
        with torch.no_grad():
            reps = ref_model(toks.to(dev), repr_layers=layers)["representations"]
        n = min(len(seq), toks.shape[1] - 1)
        return {k: v[0, 1 : n + 1].float().cpu().numpy() for k, v in reps.items()}

    def check(name: str, fm: Any, seqs: list[str], layers: list[int], cut: int | None = None, **kw) -> None:
        try:
            check1(name, fm, seqs, layers, cut, **kw)
        except Exception as exc:  # noqa: BLE001 - reported, and the next case runs
            emit(a.out, {"part": "esm2", "case": name, "error": f"{type(exc).__name__}: {exc}"[:800]})

    def check1(name: str, fm: Any, seqs: list[str], layers: list[int], cut: int | None = None, **kw) -> None:
        t = time.monotonic()
        got = fm.embed(seqs, layers, max_tokens=cut) if cut else fm.embed(seqs, layers)
        sync()
        secs = time.monotonic() - t
        for i, s in enumerate(seqs):
            want = ref(s, layers, cut)
            for layer in layers:
                emit(a.out, {"part": "esm2", "case": name, "len": len(s), "layer": layer, **kw,
                             **cmp_rows(got[layer][i], want[layer])})  # fmt: skip
        emit(a.out, {"part": "esm2", "case": name, "batch_s": round(secs, 3)})

    layers = [26, 29, 33]
    prod = models.FairESM(path, dev, torch.float32)
    check("production fp32, padded batch", prod, [rand_seq(1500, 101), rand_seq(700, 102)], layers)
    check("G/H cut at 1,024 tokens, fp32 padded", prod, [rand_seq(1030, 103), rand_seq(700, 104)], [33], cut=1024)
    del prod
    lens = [1, 50, 700, 1022, 1023, 1500]
    probe = [rand_seq(n, 200 + n) for n in lens]
    fast: dict[str, Any] = {}
    for prec, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        os.environ["KINFLOW_STEPS_UNPADDED"] = "1"
        fm = models.FairESM(path, dev, dt)
        os.environ.pop("KINFLOW_STEPS_UNPADDED")
        attn = "varlen flash" if fm.unpadded.flash is not None else "SDPA per sequence"
        check(f"unpadded {prec} ({attn}), sharpened", fm, probe, [26, 33])
        check(f"unpadded {prec} ({attn}), G/H cut", fm, [rand_seq(1030, 103)], [33], cut=1024)
        fast[prec] = fm
    # PyTorch's default init (attention near-uniform): the same paths, other weights.
    ref_model.load_state_dict(default_init)
    for prec, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        fm = models.FairESM(path, dev, dt, state_dict=default_init)
        check(f"unpadded {prec}, default init", fm, probe, [26, 33])
        del fm
    sync()

    seqs = enzyme_lengths(a.n)
    peak = a.peak_tflops
    runs = [
        ("padded fp32 (production), 4,096-token batches", models.FairESM(path, dev, torch.float32), 4096, a.cap_s / 2),
        ("unpadded bf16, 16,384-token batches", fast["bf16"], 16384, a.cap_s),
        ("unpadded bf16, 65,536-token batches", fast["bf16"], 65536, a.cap_s / 2),
        ("unpadded fp16, 16,384-token batches", fast["fp16"], 16384, a.cap_s / 2),
    ]
    for name, fm, budget, cap in runs:
        try:
            rate = throughput(lambda g, fm=fm: fm.embed(g, ["last"]), seqs, budget, cap, 2)
            emit(
                a.out, roofline({"part": "esm2", "case": "throughput " + name, "params": params, **rate}, params, peak)
            )
        except Exception as exc:  # noqa: BLE001
            emit(a.out, {"part": "esm2", "case": "throughput " + name, "error": f"{type(exc).__name__}: {exc}"[:800]})
        fm = None
    # The unpadded forward alone (no host copies): one 16,384-token batch of enzyme-like
    # sequences, median of 5, per precision.
    group, total = first_batch(seqs)
    for prec, fm in fast.items():
        try:
            emit(a.out, forward_only("esm2", f"unpadded {prec}", fm, group, total, params, peak))
        except Exception as exc:  # noqa: BLE001
            emit(a.out, {"part": "esm2", "case": f"forward only {prec}", "error": f"{type(exc).__name__}: {exc}"[:800]})
    del fast


def part_esm2fast(a) -> None:
    """The unpadded path after the first GPU run: fp16 and bf16, eager and compiled
    (KINFLOW_STEPS_COMPILE), against fair-esm fp32 alone; forward-only and embed rates."""
    import torch
    from test_fair_esm import fair_load

    from kinflow_steps import models

    dev = device()
    path = os.path.join(a.work, "esm2_t33_suite.pt")
    base, alphabet = fair_load(path)
    base.eval()
    params = sum(p.numel() for p in base.parameters())
    models.fair_esm_load = lambda _p: (copy.deepcopy(base), alphabet)
    ref_model = copy.deepcopy(base).to(dev)
    lens = [1, 50, 700, 1022, 1023, 1500]
    probe = [rand_seq(n, 200 + n) for n in lens]
    layers = [26, 29, 33]
    wants = []
    for s in probe:
        toks = fair_tokens(alphabet, s)
        with torch.no_grad():
            reps = ref_model(toks.to(dev), repr_layers=layers)["representations"]
        wants.append({k: v[0, 1:-1].float().cpu().numpy() for k, v in reps.items()})
    cut_seq = rand_seq(1030, 103)
    toks = fair_tokens(alphabet, cut_seq, 1024)
    with torch.no_grad():
        cut_want = ref_model(toks.to(dev), repr_layers=[33])["representations"][33][0, 1:].float().cpu().numpy()
    del ref_model
    seqs = enzyme_lengths(a.n)
    group, total = first_batch(seqs)
    for prec, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for compiled in (False, True):
            name = f"unpadded {prec}{' compiled' if compiled else ''}"
            try:
                os.environ["KINFLOW_STEPS_COMPILE"] = "1" if compiled else ""
                fm = models.FairESM(path, dev, dt)
                t = time.monotonic()
                got = fm.embed(probe, layers)
                sync()
                first_s = time.monotonic() - t
                for i, s in enumerate(probe):
                    for layer in layers:
                        emit(a.out, {"part": "esm2fast", "case": name + ", sharpened", "len": len(s), "layer": layer,
                                     **cmp_rows(got[layer][i], wants[i][layer])})  # fmt: skip
                got = fm.embed([cut_seq], [33], max_tokens=1024)
                emit(a.out, {"part": "esm2fast", "case": name + ", G/H cut", "len": 1030, "layer": 33,
                             **cmp_rows(got[33][0], cut_want)})  # fmt: skip
                emit(a.out, {"part": "esm2fast", "case": name, "first_call_s": round(first_s, 2)})
                emit(a.out, forward_only("esm2fast", name, fm, group, total, params, a.peak_tflops))
                if prec == "fp16":
                    cap = a.cap_s if compiled else a.cap_s / 2
                    rate = throughput(lambda g, fm=fm: fm.embed(g, ["last"]), seqs, 16384, cap, 2)
                    row = {"part": "esm2fast", "case": f"throughput {name}, embed, 16,384-token batches", **rate}
                    emit(a.out, roofline(row, params, a.peak_tflops))
                del fm
            except Exception as exc:  # noqa: BLE001
                emit(a.out, {"part": "esm2fast", "case": name, "error": f"{type(exc).__name__}: {exc}"[:800]})
    os.environ["KINFLOW_STEPS_COMPILE"] = ""


def part_fwd(a) -> None:
    """The forward pass alone, fp16 unpadded, eager and compiled (the compiled rate is the
    one the resident server's share is taken of), without esm2fast's equivalence rows:
    one 16,384-token batch."""
    import torch
    from test_fair_esm import fair_load

    from kinflow_steps import models

    path = os.path.join(a.work, "esm2_t33_suite.pt")
    base, alphabet = fair_load(path)
    base.eval()
    params = sum(p.numel() for p in base.parameters())
    models.fair_esm_load = lambda _p: (copy.deepcopy(base), alphabet)
    group, total = first_batch(enzyme_lengths(a.n))
    for compiled in (False, True):
        name = f"unpadded fp16{' compiled' if compiled else ''}"
        os.environ["KINFLOW_STEPS_COMPILE"] = "1" if compiled else ""
        try:
            fm = models.FairESM(path, device(), torch.float16)
            emit(a.out, forward_only("fwd", name, fm, group, total, params, a.peak_tflops))
            del fm
        except Exception as exc:  # noqa: BLE001
            emit(a.out, {"part": "fwd", "case": name, "error": f"{type(exc).__name__}: {exc}"[:800]})
    os.environ["KINFLOW_STEPS_COMPILE"] = ""


def part_bench_esm2(a) -> None:
    """steps/bench.py: the resident server (python -m kinflow_steps) of method H on the
    fp16 unpadded path, compiled, over 10,000 enzyme-like lengths, files written."""
    path = os.path.join(a.work, "esm2_t33_suite.pt")
    cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--model", "esm2", "--model-path", path, "--n", str(a.n),
           "--lengths", "lognormal", "--toks-per-batch", "16384", "--peak-tflops", str(a.peak_tflops or 776),
           "--workdir", os.path.join(a.work, "bench"), "--set", "KINFLOW_STEPS_PRECISION_ESM2=fp16",
           "--set", "KINFLOW_STEPS_COMPILE=1", "--set", "KINFLOW_STEPS_TOKS_PER_BATCH=16384"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=max(a.cap_s * 4, 60))
    last = (out.stdout.strip().splitlines() or ["{}"])[-1]
    try:
        row = json.loads(last)
    except ValueError:
        row = {"error": out.stdout[-400:] + out.stderr[-800:]}
    if out.returncode != 0:
        row = {"error": f"rc {out.returncode}: " + out.stderr[-800:]}
    emit(a.out, {"part": "bench-esm2", "case": "resident server, method H, fp16 unpadded compiled", **row})


def part_t5(a) -> None:
    import torch
    from transformers import T5EncoderModel

    from kinflow_steps.models import LAST, ProtT5, prot_t5_text

    dev = device()
    folder = os.path.join(a.work, "t5")
    prod_dt = torch.float16 if dev.type == "cuda" else torch.float32
    fm = ProtT5(folder, dev, prod_dt)
    params = sum(p.numel() for p in fm.model.parameters())
    refs = {}
    for name, dt in (("fp16", torch.float16), ("fp32", torch.float32)):
        if dev.type != "cuda" and dt == torch.float16:
            continue
        try:
            refs[name] = T5EncoderModel.from_pretrained(folder, local_files_only=True, dtype=dt).to(dev).eval()
        except TypeError:
            refs[name] = T5EncoderModel.from_pretrained(folder, local_files_only=True, torch_dtype=dt).to(dev).eval()
    seqs = [rand_seq(1499, 301), rand_seq(600, 302), rand_seq(1, 303)]
    t = time.monotonic()
    got = fm.embed(seqs, [LAST])[LAST]
    sync()
    emit(
        a.out,
        {
            "part": "t5",
            "case": "kinflow padded batch",
            "precision": str(prod_dt),
            "batch_s": round(time.monotonic() - t, 3),
        },
    )
    for i, s in enumerate(seqs):
        enc = fm.tokenizer([prot_t5_text(s)], return_tensors="pt", add_special_tokens=True)
        for name, model in refs.items():
            with torch.no_grad():
                h = model(input_ids=enc["input_ids"].to(dev)).last_hidden_state[0, : len(s)].float().cpu().numpy()
            emit(
                a.out, {"part": "t5", "case": f"padded {prod_dt} vs alone {name}", "len": len(s), **cmp_rows(got[i], h)}
            )
    del refs
    seqs = enzyme_lengths(a.n)
    rate = throughput(lambda g: fm.embed(g, [LAST]), seqs, 4096, a.cap_s, 1)
    emit(
        a.out,
        roofline(
            {"part": "t5", "case": f"throughput padded {prod_dt}, 4,096-token batches", "params": params, **rate},
            params,
            a.peak_tflops,
        ),
    )


def part_esmc(a) -> None:
    import torch
    from esm.models.esmc import ESMC as LibESMC
    from esm.sdk.api import ESMProteinTensor, LogitsConfig
    from esm.tokenization import get_esmc_model_tokenizers

    from kinflow_steps.device import reduce_means
    from kinflow_steps.models import ESMC, FINAL

    dev = device()
    path = os.path.join(a.work, "esmc_suite.pth")
    d, h, n = SHAPES[a.size]["esmc"]
    os.environ["KINFLOW_ESMC_SHAPE"] = f"{d},{h},{n}"
    prod_dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    fm = ESMC(path, dev, prod_dt)
    params = sum(p.numel() for p in fm.model.parameters())
    state = torch.load(path, map_location="cpu")

    def lib(dt):
        m = LibESMC(d_model=d, n_heads=h, n_layers=n, tokenizer=get_esmc_model_tokenizers(), use_flash_attn=False)
        m.load_state_dict(state)
        return m.eval().to(dev).to(dt)

    layers = [24, 32]
    # Method K's final normed embeddings (methodk_esmc_mean) come from the same passes.
    both = [*layers, FINAL]
    seqs = [rand_seq(1500, 401), rand_seq(700, 402), rand_seq(1, 403)]
    t = time.monotonic()
    got = fm.embed(seqs, both)
    sync()
    emit(
        a.out,
        {
            "part": "esmc",
            "case": "kinflow padded batch",
            "precision": str(prod_dt),
            "batch_s": round(time.monotonic() - t, 3),
        },
    )
    # The step's length buckets (kinflow_steps.steps.LENGTH_SPREAD) keep the
    # 1-residue sequence out of the 1,502-token pass.
    from kinflow_steps.steps import LENGTH_SPREAD, Seq, pack

    bucketed: list[Any] = [None] * len(seqs)
    k_file: list[Any] = [None] * len(seqs)
    for g in pack([Seq(str(i), s, [], []) for i, s in enumerate(seqs)], 0, LENGTH_SPREAD["esmc"]):
        out = fm.embed([x.sequence for x in g], both)
        for j, x in enumerate(g):
            bucketed[int(x.seq_id)] = {layer: out[layer][j] for layer in both}
        # methodk_esmc_mean's file as PooledStep.forward computes it: upper-cased (its
        # fit), the float64 mean over the residue rows on the device.
        reps = fm.embed_device([x.sequence.upper() for x in g], [FINAL])
        vecs = reduce_means(reps.residues(FINAL), reps.seg, reps.rows, None).float().cpu().numpy()
        for j, x in enumerate(g):
            k_file[int(x.seq_id)] = vecs[j]
        del reps
    for name, dt in (("library bf16 (ESMC.logits)", torch.bfloat16), ("fp32", torch.float32)):
        if dev.type != "cuda" and dt == torch.bfloat16:
            continue
        m = lib(dt)
        for i, s in enumerate(seqs):
            # The tokens of ESMC.encode(ESMProtein(sequence=s.upper())), the methods' call
            # (s is upper case).
            toks = m._tokenize([s]).to(dev)
            if dt == torch.bfloat16:
                cfg = LogitsConfig(return_hidden_states=True, return_embeddings=True)
                res = m.logits(ESMProteinTensor(sequence=toks[0]), cfg)
            else:
                with torch.no_grad():
                    res = m(sequence_tokens=toks)
            hs = res.hidden_states
            emb = res.embeddings[0, 1 : len(s) + 1].float()
            # The method K worker's vector: its own mean of the final embeddings.
            k_want = emb.mean(0).cpu().numpy()
            emb = emb.cpu().numpy()
            k = "methodk_esmc_mean (final embeddings)"
            emit(a.out, {"part": "esmc", "case": f"{k}: padded {prod_dt} vs alone {name}", "len": len(s),
                         "layer": FINAL, **cmp_rows(got[FINAL][i], emb)})  # fmt: skip
            emit(a.out, {"part": "esmc", "case": f"{k}: length-bucketed {prod_dt} vs alone {name}", "len": len(s),
                         "layer": FINAL, **cmp_rows(bucketed[i][FINAL], emb)})  # fmt: skip
            emit(a.out, {"part": "esmc", "case": f"{k}: the step's file (device mean, length-bucketed {prod_dt}) vs "
                         f"the worker's vector alone {name}", "len": len(s), **cmp_vec(k_file[i], k_want)})  # fmt: skip
            for layer in layers:
                want = hs[layer][0, 1 : len(s) + 1].float().cpu().numpy()
                emit(a.out, {"part": "esmc", "case": f"padded {prod_dt} vs alone {name}", "len": len(s), "layer": layer,
                             **cmp_rows(got[layer][i], want)})  # fmt: skip
                emit(a.out, {"part": "esmc", "case": f"length-bucketed {prod_dt} vs alone {name}", "len": len(s),
                             "layer": layer, **cmp_rows(bucketed[i][layer], want)})  # fmt: skip
        del m
    seqs = enzyme_lengths(a.n)
    rate = throughput(lambda g: fm.embed(g, [32]), seqs, 4096, a.cap_s, 2)
    emit(
        a.out,
        roofline(
            {"part": "esmc", "case": f"throughput padded {prod_dt}, 4,096-token batches", "params": params, **rate},
            params,
            a.peak_tflops,
        ),
    )


def part_tf32(a) -> None:
    import make_tiny_models as mtm
    import torch
    from test_fair_esm import fair_load

    from kinflow_steps import models

    dev = device()
    dim, heads = SHAPES[a.size]["esm2"]
    lens = [1, 20, 50, 100, 300, 700, 1022, 1500]
    probe = [rand_seq(n, 500 + n) for n in lens]
    paths = {"esm2": os.path.join(a.work, "esm2_t33_suite.pt")}
    for name, seed, reg in (("esm1b", 5, True), ("esm1v", 6, False)):
        p = os.path.join(a.work, f"{name}_t33_suite.pt")
        if not os.path.exists(p):
            mtm.write_esm1(a.work, os.path.basename(p), seed, reg, dim, heads, mtm.EQ_QK_SCALE)
        paths[name] = p
    for seed in tf32_seeds(a):  # the same families with other random weights
        paths[f"esm2 seed {seed}"] = os.path.join(a.work, f"esm2_t33_suite_s{seed}.pt")
        paths[f"esm1b seed {seed}"] = os.path.join(a.work, f"esm1b_t33_suite_s{seed}.pt")
    for label, path in paths.items():
        fam = label.split()[0]
        base, alphabet = fair_load(path)
        base.eval()
        models.fair_esm_load = lambda _p, base=base, alphabet=alphabet: (copy.deepcopy(base), alphabet)
        torch.backends.cuda.matmul.allow_tf32 = False
        ref_model = copy.deepcopy(base).to(dev)
        layers = [26, 33] if fam == "esm2" else [33]
        wants = []
        for s in probe:
            cut = s[:1022]
            with torch.no_grad():
                reps = ref_model(fair_tokens(alphabet, cut).to(dev), repr_layers=layers)["representations"]
            wants.append({k: v[0, 1 : len(cut) + 1].float().cpu().numpy() for k, v in reps.items()})
        del ref_model
        cases = [("padded", "")] + ([("unpadded", "1")] if fam == "esm2" else [])
        for case, unp in cases:
            name = f"{label} fp32 + TF32 products, {case}"
            try:
                os.environ["KINFLOW_STEPS_UNPADDED"] = unp
                fm = models.FairESM(path, dev, torch.float32)
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
                got = fm.embed([s[:1022] for s in probe], layers)
                for i, s in enumerate(probe):
                    for layer in layers:
                        emit(a.out, {"part": "tf32", "case": name, "len": len(s), "layer": layer,
                                     **cmp_rows(got[layer][i], wants[i][layer])})  # fmt: skip
                if label == "esm2" and case == "padded" and a.cap_s > 0:
                    params = sum(p.numel() for p in base.parameters())
                    rate = throughput(lambda g, fm=fm: fm.embed(g, ["last"]), enzyme_lengths(a.n), 4096, a.cap_s, 2)
                    row = {"part": "tf32", "case": f"throughput {name}, 4,096-token batches", "params": params, **rate}
                    emit(a.out, roofline(row, params, a.peak_tflops))
                del fm
            except Exception as exc:  # noqa: BLE001
                emit(a.out, {"part": "tf32", "case": name, "error": f"{type(exc).__name__}: {exc}"[:800]})
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                os.environ["KINFLOW_STEPS_UNPADDED"] = ""


def tf32_seeds(a) -> list[int]:
    return [int(x) for x in a.tf32_seeds.split(",") if x]


def part_reduce(a) -> None:
    import numpy as np
    import torch
    from test_fair_esm import fair_load

    from kinflow_steps import models
    from kinflow_steps.device import reduce_means
    from kinflow_steps.equivalence import compare

    dev = device()
    path = os.path.join(a.work, "esm2_t33_suite.pt")
    base, alphabet = fair_load(path)
    models.fair_esm_load = lambda _p: (copy.deepcopy(base), alphabet)
    seqs = [rand_seq(n, 600 + n) for n in (1, 50, 700, 1022, 1500)]
    for name, dt in (("fp32 padded", torch.float32), ("fp16 unpadded", torch.float16)):
        try:
            fm = models.FairESM(path, dev, dt)
            host = fm.embed(seqs, [33])[33]
            reps = fm.embed_device(seqs, [33])
            dev_mean = reduce_means(reps.residues(33), reps.seg, reps.rows, None).float().cpu().numpy()
            for i, s in enumerate(seqs):
                want = host[i].astype(np.float64).mean(axis=0)
                rel = float(np.abs(dev_mean[i] - want).max() / max(np.abs(want).max(), 1e-30))
                c = compare(dev_mean[i], want)
                ok = bool(c.ok and rel < 1e-6)
                emit(a.out, {"part": "reduce", "case": f"device mean, {name}", "len": len(s),
                             "pooled_cos": c.min_cosine, "max_rel_diff": rel, "ok": ok})  # fmt: skip
            del fm
        except Exception as exc:  # noqa: BLE001
            emit(a.out, {"part": "reduce", "case": name, "error": f"{type(exc).__name__}: {exc}"[:800]})


def part_bench_pipeline(a) -> None:
    """steps/bench.py --pipeline-compare: the resident server with the pipeline off and
    on: fp16 unpadded compiled, strict fp32 padded (the default before TF32's proof),
    the production default (fp32 padded with TF32 products on CUDA), and the fp16 path
    with 8 writer threads instead of 2 (fsyncs of small files in parallel)."""
    path = os.path.join(a.work, "esm2_t33_suite.pt")
    for i, (name, sets, budget) in enumerate(
        (
            ("fp16 unpadded compiled", ["KINFLOW_STEPS_PRECISION_ESM2=fp16", "KINFLOW_STEPS_COMPILE=1"], 16384),
            ("strict fp32 padded", ["KINFLOW_STEPS_PRECISION_ESM2=fp32"], 4096),
            ("production default (TF32 products on CUDA)", [], 4096),
            (
                "fp16 unpadded compiled, 8 writers",
                ["KINFLOW_STEPS_PRECISION_ESM2=fp16", "KINFLOW_STEPS_COMPILE=1", "KINFLOW_STEPS_WRITERS=8"],
                16384,
            ),
        )
    ):
        if a.pipeline_cases and str(i) not in a.pipeline_cases.split(","):
            continue
        work = os.path.join(a.work, f"bench-pipe{i}")
        cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--model", "esm2", "--model-path", path, "--n",
               str(a.n), "--lengths", "lognormal", "--toks-per-batch", str(budget), "--peak-tflops",
               str(a.peak_tflops or 776), "--workdir", work, "--pipeline-compare",
               "--repeat", str(a.repeat)]  # fmt: skip
        for kv in sets:
            cmd += ["--set", kv]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=max(a.cap_s * 8, 120))
        for line in out.stdout.strip().splitlines():
            try:
                emit(a.out, {"part": "bench-pipeline", "case": name, **json.loads(line)})
            except ValueError:
                pass
        if out.returncode != 0:
            emit(a.out, {"part": "bench-pipeline", "case": name, "error": f"rc {out.returncode}: " + out.stderr[-800:]})


# --- driver --------------------------------------------------------------------------


def run_part(a, part: str, limit: float, env: dict[str, str] | None = None, wait: bool = True):
    cmd = [sys.executable, os.path.abspath(__file__), "--part", part, "--out", a.out, "--work", a.work,
           "--size", a.size, "--n", str(a.n), "--cap-s", str(a.cap_s), "--peak-tflops", str(a.peak_tflops),
           "--repeat", str(a.repeat), "--tf32-seeds", a.tf32_seeds, "--pipeline-cases", a.pipeline_cases]  # fmt: skip
    full_env = dict(os.environ, **(env or {}))
    log = open(os.path.join(a.out, f"{part}.log"), "w")
    proc = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    if not wait:
        return proc, limit
    return finish(a, part, proc, limit)


def finish(a, part: str, proc, limit: float) -> int:
    try:
        rc = proc.wait(timeout=max(limit, 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = -9
    if rc != 0:
        tail = open(os.path.join(a.out, f"{part}.log"), errors="replace").read()[-1500:]
        emit(a.out, {"part": part, "failed": rc, "log_tail": tail})
    return rc


def summary(out: str) -> None:
    rows = [json.loads(line) for line in open(os.path.join(out, "gpu_suite.jsonl"))]
    print("\n== summary ==")
    for r in rows:
        if r.get("part") == "env":
            print("env", {k: v for k, v in r.items() if k != "part"})
        elif "error" in r:
            print(f"{r['part']}: {r.get('case')}: ERROR {r['error'][:300]}")
        elif r.get("pipeline_compare"):
            print(f"{r['part']}: {r['case']}: pipeline off {r['wall_off_s']} s, on {r['wall_on_s']} s "
                  f"(speedup {r['speedup']}, host work hidden {r['host_hidden_share']})")  # fmt: skip
        elif "max_rel_diff" in r:
            print(f"{r['part']}: {r['case']}, {r['len']} residues: max relative difference {r['max_rel_diff']:.2e}, "
                  f"pooled cos {r['pooled_cos']:.12f}, {'within' if r['ok'] else 'OUTSIDE'}")  # fmt: skip
        elif "failed" in r:
            print(f"{r['part']}: FAILED rc={r['failed']}: {r['log_tail'][-400:]}")
        elif "tokens_per_s" in r and "achieved_tflops" not in r:
            print(
                f"{r['part']}: {r['case']}: {r['tokens_per_s']:.0f} tok/s, {r.get('roofline_share')} of the peak given"
            )
        elif "tokens_per_s" in r:
            share, done = r["share_of_measured_bf16_peak"], f"{r['sequences']}/{r['of']} seqs, {r['wall_s']} s"
            print(f"{r['part']}: {r['case']}: {r['tokens_per_s']:.0f} tok/s, {r['achieved_tflops']} TFLOP/s, "
                  f"{share} of measured bf16 peak ({done})")  # fmt: skip
    worst: dict[str, list] = {}
    for r in rows:
        # Residue rows (cmp_rows) and pooled vectors alone (cmp_vec); not part reduce's.
        if "pooled_cos" in r and "ok" in r and "max_rel_diff" not in r:
            w = worst.setdefault(f"{r['part']}: {r['case']}", [None, 1.0, True])
            if "residue_min_cos" in r:
                w[0] = min(1.0 if w[0] is None else w[0], r["residue_min_cos"])
            w[1] = min(w[1], r["pooled_cos"])
            w[2] = w[2] and r["ok"]
    for k, (rc, pc, ok) in worst.items():
        res = "—" if rc is None else f"{rc:.7f}"
        print(f"{k}: worst residue cos {res}, pooled {pc:.9f}, {'within' if ok else 'OUTSIDE'} the bound")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="")
    ap.add_argument("--part", default="")
    ap.add_argument("--size", choices=sorted(SHAPES), default="full")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--cap-s", type=float, default=40.0)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--esmc-site", default="", help="a folder with EvolutionaryScale's esm and its packages")
    ap.add_argument("--skip", default="", help="comma-separated parts to leave out")
    ap.add_argument("--only", default="", help="comma-separated parts to run (in the suite's order), the rest left out")
    ap.add_argument("--repeat", type=int, default=3, help="bench-pipeline: runs of each of off and on")
    ap.add_argument(
        "--pipeline-cases", default="", help="bench-pipeline cases to run (0 fp16, 1 fp32, 2 default, 3 fp16 8 writers)"
    )
    ap.add_argument("--tf32-seeds", default="", help="tf32: ESM-2 and ESM-1b also with these seeds (2,3: two more)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    a.work = a.work or tempfile.mkdtemp(prefix="kinflow-gpu-suite-")
    os.makedirs(a.work, exist_ok=True)
    if a.part:
        parts = {"env": part_env, "esm2": part_esm2, "esm2fast": part_esm2fast, "bench-esm2": part_bench_esm2}
        parts.update(t5=part_t5, esmc=part_esmc, tf32=part_tf32, reduce=part_reduce)
        parts.update({"bench-pipeline": part_bench_pipeline, "fwd": part_fwd})
        parts.get(a.part, part_write)(a)
        return 0
    limits = {"esm2": 240, "esm2fast": 250, "fwd": 120, "bench-esm2": 150, "t5": 110, "esmc": 90, "reduce": 60,
              "tf32": 240, "bench-pipeline": 400}  # fmt: skip
    #: the models each part reads (written first, in parallel, while env measures the card)
    needs = {"t5": ["t5"], "esmc": ["esmc"], "tf32": ["esm2", "esm1b", "esm1v"]}
    needs["tf32"] += [f"{m}s{seed}" for seed in tf32_seeds(a) for m in ("esm2", "esm1b")]
    skip = set(filter(None, a.skip.split(",")))
    if a.only:
        skip |= set(limits) - set(a.only.split(","))
    todo = [p for p in limits if p not in skip]
    t0 = time.monotonic()
    esmc_env = {"PYTHONPATH": os.pathsep.join([a.esmc_site, HERE])} if a.esmc_site else {}
    models = sorted({m for p in todo for m in needs.get(p, ["esm2"])})
    writers = {m: run_part(a, f"write-{m}", 0, env=esmc_env if m == "esmc" else None, wait=False) for m in models}
    run_part(a, "env", 60)
    if not a.peak_tflops:
        for line in open(os.path.join(a.out, "gpu_suite.jsonl")):
            r = json.loads(line)
            a.peak_tflops = float(r.get("bf16_matmul_tflops") or 0.0)
    ok = {m: finish(a, f"write-{m}", proc, 240) == 0 for m, (proc, _) in writers.items()}
    print(f"suite: models written at {time.monotonic() - t0:.0f}s", flush=True)
    for part in todo:
        if not all(ok.get(m, False) for m in needs.get(part, ["esm2"])):
            continue
        run_part(a, part, limits[part], env=esmc_env if part == "esmc" else None)
        print(f"suite: {part} done at {time.monotonic() - t0:.0f}s", flush=True)
    summary(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
