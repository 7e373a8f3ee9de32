"""The step-program protocol (docs/gpu-host.md).

Resident (default): load the model, print ``{"ready": true, "model", "device",
"fingerprint"}``, then
answer each manifest line on stdin with one line ``{"batch": N, "status": "done" |
"oom" | "error"}``, in order; EOF ends the program (exit 0). One-shot: ``--manifest
FILE`` runs that batch and exits 0, 75 on out of memory, 1 on error. ``--fingerprint``
(or ``KINFLOW_FINGERPRINT_ONLY=1``) prints ``{"fingerprint": {...}}`` without loading
the model and exits 0 (kinflow_steps/fingerprint.py).

Only protocol lines go to stdout; every log line goes to stderr. A configuration
problem (a weights path unset or absent, a package missing) is one clear stderr line
and exit 2, before ``ready``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time

EX_TEMPFAIL = 75  # docs/gpu-host.md: out of GPU memory for this batch
EX_CONFIG = 2


def log(msg: str) -> None:
    print(f"kinflow-steps: {msg}", file=sys.stderr, flush=True)


def answer(out, obj: dict) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")
    out.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kinflow_steps", description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", required=True, help="step key (an active key, or a deprecated one mapped to it)")
    ap.add_argument("--manifest", help="one-shot: run this batch manifest and exit")
    ap.add_argument(
        "--check",
        metavar="SEQUENCE",
        nargs="?",
        const="MKTAYIAKQRQISFVKSHFSRQ",
        help="load the model, embed one sequence in memory, print a report and exit",
    )
    ap.add_argument("--fingerprint", action="store_true", help="print the step's fingerprint and exit")
    args = ap.parse_args(argv)

    # Nothing is downloaded at run time: weights come from local paths only.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    from kinflow_steps.errors import ConfigError
    from kinflow_steps.steps import STEPS

    factory = STEPS.get(args.step)
    if factory is None:
        log(f"unknown step key {args.step!r} (known: {', '.join(sorted(STEPS))})")
        return EX_CONFIG
    proto = sys.stdout
    # Libraries that print to stdout must not break the protocol: everything else
    # printed goes to stderr.
    sys.stdout = sys.stderr
    from kinflow_steps.fingerprint import fingerprint

    if args.fingerprint or os.environ.get("KINFLOW_FINGERPRINT_ONLY", "").strip() == "1":
        try:
            answer(proto, {"fingerprint": fingerprint(factory())})
        except (ConfigError, OSError) as exc:
            log(f"{args.step}: fingerprint: {exc}")
            return EX_CONFIG
        return 0
    t0 = time.monotonic()
    try:
        step = factory()
        info = step.load()
    except ConfigError as exc:
        log(f"{args.step}: {exc}")
        return EX_CONFIG
    except Exception as exc:  # a broken weights file, a library mismatch
        log(f"{args.step}: cannot load the model: {type(exc).__name__}: {exc}")
        return EX_CONFIG
    log(f"{args.step}: loaded {info.get('model')} on {step.device} ({step.dtype}) in {time.monotonic() - t0:.1f}s")

    if args.check is not None:
        return check(step, args.check, proto)

    from kinflow_steps.pipeline import Pipeline

    try:
        pipe = Pipeline(step)
    except ConfigError as exc:
        log(f"{args.step}: {exc}")
        return EX_CONFIG

    srv = _Server(pipe)
    if args.manifest:
        return srv.one_shot(args.manifest)
    answer(
        proto,
        {"ready": True, "model": info.get("model", ""), "device": str(step.device), "fingerprint": fingerprint(step)},
    )
    srv.serve(proto, sys.stdin)
    return 0


class _Server:
    """Answers batch manifests through a Pipeline: ``start`` runs a manifest's compute
    stage (its forward passes), ``finish`` records and publishes its files and gives
    its answer."""

    def __init__(self, pipe) -> None:
        self.pipe = pipe

    def failed(self, batch, exc: BaseException) -> dict:
        from kinflow_steps.errors import BatchError
        from kinflow_steps.models import is_oom

        if isinstance(exc, BatchError):
            log(f"batch {batch}: error: {exc}")
            return {"batch": batch, "status": "error", "message": str(exc)}
        if is_oom(exc):
            log(f"batch {batch}: out of memory: {exc}")
            free_cache()
            return {"batch": batch, "status": "oom"}
        log(f"batch {batch}: error: {type(exc).__name__}: {exc}")
        return {"batch": batch, "status": "error", "message": f"{type(exc).__name__}: {exc}"}

    def start(self, doc) -> tuple:
        """The compute stage of one manifest: its forward passes (kinflow_steps.pipeline);
        what ``finish`` needs to answer it."""
        from kinflow_steps.steps import parse_manifest

        batch = doc.get("batch", 0) if isinstance(doc, dict) else 0
        # The host may send manifests ahead (KINFLOW_STEP_SERVER_AHEAD): this line, before
        # the previous batch's "wrote", shows that it did.
        log(f"batch {batch}: received")
        t = time.monotonic()
        try:
            b = parse_manifest(doc)
            return (batch, b, self.pipe.submit(b), t)
        except Exception as exc:
            return (batch, None, self.failed(batch, exc), t)

    def finish(self, item: tuple) -> dict:
        """Record and publish one manifest's files and give its answer."""
        batch, b, ticket, t = item
        if b is None:
            return ticket
        try:
            n = self.pipe.commit(ticket)
        except Exception as exc:
            return self.failed(batch, exc)
        log(f"batch {batch}: wrote {n} file(s) for {len(b.seqs)} sequence(s) in {time.monotonic() - t:.2f}s")
        return {"batch": batch, "status": "done"}

    def one_shot(self, path: str) -> int:
        """Run the manifest at path and exit (the per-batch compatibility mode)."""
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            log(f"cannot read manifest {path}: {exc}")
            return 1
        res = self.finish(self.start(doc))
        self.pipe.close()
        if res["status"] == "oom":
            print("KINFLOW_OOM", file=sys.stderr, flush=True)
            return EX_TEMPFAIL
        return 0 if res["status"] == "done" else 1

    def serve(self, proto, lines) -> None:
        """The resident server: one manifest per line of lines, one answer per line to
        proto. Manifests the host sends ahead are computed while earlier ones are
        written; the answering thread commits and answers them in the order they came."""
        started: queue.Queue = queue.Queue(maxsize=self.pipe.depth)

        def answering() -> None:
            while True:
                item = started.get()
                if item is None:
                    return
                try:
                    answer(proto, self.finish(item))
                except BaseException as exc:  # the host closed stdout: nobody reads answers
                    log(f"cannot answer: {type(exc).__name__}: {exc}")
                    os._exit(1)

        answerer = threading.Thread(target=answering, name="kinflow-answer")
        answerer.start()
        try:
            for line in lines:
                line = line.strip()
                if not line:
                    continue
                try:
                    doc = json.loads(line)
                except ValueError as exc:
                    log(f"unreadable manifest line: {exc}")
                    msg = {"batch": 0, "status": "error", "message": f"unreadable manifest line: {exc}"}
                    started.put((0, None, msg, time.monotonic()))
                    continue
                started.put(self.start(doc))
        finally:
            started.put(None)
            answerer.join()
            self.pipe.close()
            log(self.pipe.stats())


def free_cache() -> None:
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort after an OOM
        pass


def check(step, sequence: str, out) -> int:
    """Embed one sequence in memory with every layer the step uses (no file is
    written) and print one JSON line; for ``kinflow gpu-worker --check``."""
    t = time.monotonic()
    try:
        model = getattr(step, "model", None)
        if model is None:
            out.write(json.dumps({"step": step.key, "ok": True, "note": "models loaded"}) + "\n")
            return 0
        layers = sorted({v[0] for v in getattr(step, "spec", {}).values()}, key=str) or ["last"]
        reps = model.embed([sequence], layers)
        shapes = {str(k): list(v[0].shape) for k, v in reps.items()}
        out.write(
            json.dumps(
                {
                    "step": step.key,
                    "ok": True,
                    "device": str(step.device),
                    "shapes": shapes,
                    "seconds": round(time.monotonic() - t, 3),
                }
            )
            + "\n"
        )
        out.flush()
        return 0
    except Exception as exc:
        log(f"{step.key}: check failed: {type(exc).__name__}: {exc}")
        return 1
