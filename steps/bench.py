"""Throughput of the resident step servers on random-weight models built from config.

    .venv-steps/bin/python steps/bench.py --model esm2 --size full --n 10000
    .venv-steps/bin/python steps/bench.py --model t5 --size full --n 10000

writes a random-weight ESM-2 650M (fair-esm ``ESM2``, 33 x 1280, 20 heads) or
ProtT5-XL encoder (transformers ``T5EncoderModel``, 24 x 1024, d_ff 16384, 32 heads)
in its library's on-disk format, starts ``python -m kinflow_steps`` on it (methodh /
prot_t5_mean: one mean vector per sequence), packs N random sequences into batches as
the GPU host does (longest first, (longest + 2) x count <= --toks-per-batch), sends
them as manifest lines and reports residues per second and the share of the roofline
(2 x parameters FLOPs per token; --peak-tflops, default 990 for an H100's dense bf16).
``--size tiny`` uses the tests' shapes, for a CPU smoke run; ``--size eq`` the
equivalence tests' ESM-2 (33 layers, head size 64, 2 heads). ``--lengths lognormal``
draws enzyme-like lengths (around 400, 30 to 1,500; steps/tests/test_packing.py);
``--naive-batch N`` sends batches of N in arrival order instead of packing them, to
measure the padding work packing removes (tokens computed ÷ residues in the output).

``--ahead K`` keeps up to K manifests outstanding (the server answers in order), so the
pipelined server (kinflow_steps.pipeline) overlaps one batch's forward pass with the
copy and the file writes of the ones before. ``--pipeline-compare`` runs the same
batches with the pipeline off (KINFLOW_STEPS_PIPELINE_DEPTH=1, one manifest at a
time: the serial server) and on (the default depth, ``--ahead`` 3 unless given),
alternately ``--repeat`` times each (the fastest of each counts), and reports both wall
times and the share of the host work hidden behind the forward
passes: (wall off − wall on) ÷ the serial run's host work (copies, encoding, writes,
fsyncs, hashes, manifest records, renames: the server's own stage timings).
``--esm2-step g`` writes method G's residue tensors instead of method H's means (more
host work per token: what the CPU benchmark of ``make bench`` uses).

    .venv-steps/bin/python steps/bench.py --model esm2 --size tiny --esm2-step g --n 300 \
        --min-len 30 --max-len 150 --toks-per-batch 2048 --set KINFLOW_STEPS_DEVICE=cpu --pipeline-compare
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from argparse import Namespace

HERE = os.path.dirname(os.path.abspath(__file__))
#: --esm2-step: method H (one [D] mean per sequence) or G (the [L, D] residue tensor).
ESM2_STEPS = {"h": ("methodh_esm2_last_mean", "esm2_layer_last_mean"), "g": ("methodg_esm2", "methodg_esm2")}
AMINO = "ACDEFGHIKLMNPQRSTVWY"


def write_esm2(out: str, size: str) -> tuple[str, int]:
    import esm
    import torch

    layers, dim, heads = {"full": (33, 1280, 20), "tiny": (33, 32, 2), "eq": (33, 128, 2)}[size]
    torch.manual_seed(0)
    model = esm.model.esm2.ESM2(layers, dim, heads, esm.Alphabet.from_architecture("ESM-1b"))
    if size == "full":
        model = model.half()  # halves the file; the step casts to its own precision
    cfg = Namespace(encoder_layers=layers, encoder_embed_dim=dim, encoder_attention_heads=heads, token_dropout=True)
    path = os.path.join(out, "esm2_bench.pt")
    torch.save({"cfg": {"model": cfg}, "model": model.state_dict()}, path)
    reg = {k: v for k, v in model.state_dict().items() if k.startswith("contact_head.regression")}
    torch.save({"model": reg}, os.path.join(out, "esm2_bench-contact-regression.pt"))
    return path, sum(p.numel() for p in model.parameters())


def write_t5(out: str, full: bool) -> tuple[str, int]:
    import torch

    sys.path.insert(0, os.path.join(HERE, "tests"))
    import make_tiny_models
    from transformers import T5Config, T5EncoderModel

    folder = make_tiny_models.write_prot_t5(out)  # the tokenizer (and tiny weights)
    if full:
        cfg = T5Config(
            vocab_size=128,
            d_model=1024,
            d_kv=128,
            d_ff=16384,
            num_layers=24,
            num_heads=32,
            feed_forward_proj="relu",
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        )
        torch.manual_seed(0)
        model = T5EncoderModel(cfg).half()
        model.save_pretrained(folder)
    else:
        model = T5EncoderModel.from_pretrained(folder)
    return folder, sum(p.numel() for p in model.parameters())


def write_batch(proc: subprocess.Popen, step: str, fam: str, media: str, batch: int, seqs: list[tuple[str, str]]):
    """One manifest line to the step server (every file missing)."""
    items = []
    for sid, seq in seqs:
        p = os.path.join(media, "sequence_info", fam, sid + (".pt" if fam == "methodg_esm2" else ".npy"))
        items.append(
            {
                "seq_id": sid,
                "sequence": seq,
                "original_length": len(seq),
                "truncated": False,
                "outputs": [p],
                "missing_outputs": [p],
            }
        )
    doc = {"version": 1, "job_id": "bench", "step_key": step, "batch": batch, "media_root": media, "seqs": items}
    proc.stdin.write(json.dumps(doc) + "\n")
    proc.stdin.flush()


def send_batch(proc: subprocess.Popen, step: str, fam: str, media: str, batch: int, seqs: list[tuple[str, str]]):
    """One manifest line to the step server (every file missing); its answer."""
    write_batch(proc, step, fam, media, batch, seqs)
    return json.loads(proc.stdout.readline())


def stage_times(stderr: str) -> dict[str, float]:
    """The server's last ``pipeline depth ...: forward Fs, host Hs, commit Cs`` line."""
    import re

    out: dict[str, float] = {}
    for line in stderr.splitlines():
        m = re.search(r"pipeline depth (\d+).*forward ([\d.]+)s, host ([\d.]+)s, commit ([\d.]+)s, most passes "
                      r"in flight (\d+)", line)  # fmt: skip
        if m:
            out = {"depth": int(m[1]), "forward_s": float(m[2]), "host_s": float(m[3]), "commit_s": float(m[4]),
                   "most_in_flight": int(m[5])}  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["esm2", "t5"], required=True)
    ap.add_argument("--size", choices=["full", "tiny", "eq"], default="full")
    ap.add_argument("--lengths", choices=["uniform", "lognormal"], default="uniform")
    ap.add_argument("--naive-batch", type=int, default=0)
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--min-len", type=int, default=50)
    ap.add_argument("--max-len", type=int, default=1000)
    ap.add_argument("--toks-per-batch", type=int, default=4096)
    ap.add_argument("--peak-tflops", type=float, default=990.0)
    ap.add_argument("--workdir", default="")
    ap.add_argument(
        "--model-path", default="", help="an ESM-2 checkpoint (fair-esm format) to use instead of writing one"
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="environment of the step server")
    ap.add_argument("--esm2-step", choices=sorted(ESM2_STEPS), default="h", help="method H's means or G's residues")
    ap.add_argument("--ahead", type=int, default=0, help="manifests outstanding at once (default 1)")
    ap.add_argument("--pipeline-compare", action="store_true", help="the same batches with the pipeline off, then on")
    ap.add_argument("--repeat", type=int, default=3, help="--pipeline-compare: runs of each, the fastest counts")
    ap.add_argument(
        "--allow-unproven",
        default="",
        metavar="PRECISION",
        help="benchmark only: let the server run this precision for the model's family on its device before "
        "kinflow_steps.precision.PROVEN lists it (name it with --set KINFLOW_STEPS_PRECISION_ESM2=...)",
    )
    a = ap.parse_args()

    work = a.workdir or tempfile.mkdtemp(prefix="kinflow-bench-")
    models, media = os.path.join(work, "models"), os.path.join(work, "media")
    os.makedirs(models, exist_ok=True)
    t = time.monotonic()
    full = a.size == "full"
    if a.model == "esm2" and a.model_path:
        import esm
        import torch

        path = a.model_path
        layers, dim, heads = {"full": (33, 1280, 20), "tiny": (33, 32, 2), "eq": (33, 128, 2)}[a.size]
        with torch.device("meta"):  # the count only: no weights allocated
            shape = esm.model.esm2.ESM2(layers, dim, heads, esm.Alphabet.from_architecture("ESM-1b"))
        params = sum(p.numel() for p in shape.parameters())
        env, step, fam = {"KINFLOW_ESM2_650M_PATH": path}, *ESM2_STEPS[a.esm2_step]
    elif a.model == "esm2":
        path, params = write_esm2(models, a.size)
        env, step, fam = {"KINFLOW_ESM2_650M_PATH": path}, *ESM2_STEPS[a.esm2_step]
    else:
        path, params = write_t5(models, full)
        env, step, fam = {"KINFLOW_PROT_T5_PATH": path}, "prot_t5_mean", "prot_t5_last/mean_vecs"
    print(f"bench: wrote {a.model} ({params / 1e6:.0f}M parameters) in {time.monotonic() - t:.0f}s", file=sys.stderr)

    rng = random.Random(0)
    if a.lengths == "lognormal":
        sys.path.insert(0, os.path.join(HERE, "tests"))
        from test_packing import lengths

        lens = lengths(a.n)
    else:
        lens = [rng.randint(a.min_len, a.max_len) for _ in range(a.n)]
    seqs = {f"b{i:06d}": "".join(rng.choice(AMINO) for _ in range(n)) for i, n in enumerate(lens)}
    if a.naive_batch:
        ids = list(seqs)
        batches = [ids[i : i + a.naive_batch] for i in range(0, len(ids), a.naive_batch)]
    else:
        from kinflow_steps.steps import Seq, pack  # the step programs' own packing

        batches = [[x.seq_id for x in g] for g in pack([Seq(k, v, [], []) for k, v in seqs.items()], a.toks_per_batch)]
    computed = sum((max(len(seqs[k]) for k in b) + 2) * len(b) for b in batches)
    full_env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH", "")])), **env
    )
    full_env.update(kv.split("=", 1) for kv in a.set)
    residues = sum(len(s) for s in seqs.values())
    tokens = residues + (2 if a.model == "esm2" else 1) * len(seqs)
    runs = [("", a.ahead or 1, {})]
    if a.pipeline_compare:
        # Off and on alternate, a.repeat times each, and the fastest of each counts: on a
        # shared machine the load of others swings a run's wall time by several times.
        runs = [("off", 1, {"KINFLOW_STEPS_PIPELINE_DEPTH": "1"}), ("on", a.ahead or 3, {})] * a.repeat
    results: dict[str, dict] = {}
    for k, (name, ahead, extra) in enumerate(runs):
        run_media = os.path.join(media, f"{name}{k}") if name else media
        r = serve(dict(full_env, **extra), step, fam, run_media, seqs, batches, ahead, rng, a.allow_unproven)
        if r is None:
            return 1
        ready, load_s, wall, stages = r
        tps = tokens / wall
        row = {
            "model": a.model,
            "size": a.size,
            "params": params,
            "device": ready.get("device"),
            "sequences": a.n,
            "batches": len(batches),
            "tokens": tokens,
            "tokens_computed_per_residue": round(computed / residues, 4),
            "load_s": round(load_s, 1),
            "wall_s": round(wall, 2),
            "tokens_per_s": round(tps, 1),
            "roofline_share": round(tps * 2 * params / (a.peak_tflops * 1e12), 4),
            "peak_tflops": a.peak_tflops,
            "ahead": ahead,
            **stages,
        }
        if name:
            row["pipeline"] = name
            if name not in results or wall < results[name]["wall_s"]:
                results[name] = row
        print(json.dumps(row), flush=True)
    if a.pipeline_compare:
        off, on = results["off"], results["on"]
        # The serial run's host work is all exposed; what the pipelined run saves of it
        # is the share hidden behind the forward passes.
        host_off = off.get("host_s", 0) + off.get("commit_s", 0)
        print(
            json.dumps(
                {
                    "pipeline_compare": True,
                    "runs_each": a.repeat,
                    "wall_off_s": off["wall_s"],
                    "wall_on_s": on["wall_s"],
                    "speedup": round(off["wall_s"] / on["wall_s"], 3),
                    "forward_off_s": off.get("forward_s"),
                    "host_work_off_s": round(host_off, 2),
                    "host_hidden_share": round((off["wall_s"] - on["wall_s"]) / host_off, 3) if host_off else None,
                }
            )
        )
    return 0


def server_cmd(step: str, unproven: str) -> list[str]:
    """python -m kinflow_steps --step STEP; with unproven, the same server with that
    precision appended to every family's proven list (a benchmark of a path whose proof
    is still to be recorded: never how kinflow runs it)."""
    if not unproven:
        return [sys.executable, "-m", "kinflow_steps", "--step", step]
    code = (
        "import runpy\nfrom kinflow_steps import precision as p\n"
        "for t in p.PROVEN.values():\n"
        "    for d in t:\n"
        f"        t[d] += ({unproven!r},)\n"
        "runpy.run_module('kinflow_steps', run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", code, "--step", step]


def serve(env: dict, step: str, fam: str, media: str, seqs: dict, batches: list, ahead: int, rng, unproven: str = ""):
    """Start the server, send the warm-up batch, then every batch with up to ahead
    outstanding; (ready line, load seconds, wall seconds, the server's stage timings)."""
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        server_cmd(step, unproven),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
    )
    t = time.monotonic()
    ready = json.loads(proc.stdout.readline() or "{}")
    load_s = time.monotonic() - t
    # One untimed batch first: CUDA kernels load (and compile, with KINFLOW_STEPS_COMPILE).
    warm = [
        ("w0", "".join(rng.choice(AMINO) for _ in range(300))),
        ("w1", "".join(rng.choice(AMINO) for _ in range(90))),
    ]
    ans = send_batch(proc, step, fam, media, 0, warm) if ready.get("ready") else {"ready": ready}
    if ans.get("status") != "done":
        err.seek(0)
        print(f"bench: warm-up batch: {ans}\n{err.read()[-2000:]}", file=sys.stderr)
        return None
    t = time.monotonic()
    sent = 0
    for i in range(1, len(batches) + 1):
        while sent < len(batches) and sent < i - 1 + ahead:
            sent += 1
            write_batch(proc, step, fam, media, sent, [(sid, seqs[sid]) for sid in batches[sent - 1]])
        ans = json.loads(proc.stdout.readline() or "{}")
        if ans.get("status") != "done" or ans.get("batch") != i:
            print(f"bench: batch {i}: {ans}", file=sys.stderr)
            return None
    wall = time.monotonic() - t
    proc.stdin.close()
    proc.wait()
    err.seek(0)
    return ready, load_s, wall, stage_times(err.read())


if __name__ == "__main__":
    sys.exit(main())
