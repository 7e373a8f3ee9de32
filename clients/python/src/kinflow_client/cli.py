"""The command line: ``python -m kinflow_client submit input.csv --target kcat --method B -o out.csv``.

Exit status: 0 on success, 1 when the API refuses, a job fails or a row is
flagged by ``validate``, 2 on a usage error, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from ._client import Client, Job
from ._errors import KinflowError, SyntheticResultWarning


def _print_json(v: Any) -> None:
    print(json.dumps(v, indent=2, ensure_ascii=False))


def _selection(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    targets: list[str] = args.target or []
    methods: list[str] = args.method or []
    if len(targets) != len(methods):
        raise SystemExit(
            f"error: {len(targets)} --target but {len(methods)} --method: give them in pairs (--target kcat --method B)"
        )
    sel = dict(zip(targets, methods, strict=True))
    order = list(targets)
    if args.methods:
        for part in args.methods.split(","):
            t, sep, m = part.partition("=")
            if not sep or not t.strip() or not m.strip():
                raise SystemExit(f"error: --methods {args.methods!r}: want target=method pairs such as kcat=B,Km=C")
            sel[t.strip()] = m.strip()
            order.append(t.strip())
    if not order:
        raise SystemExit("error: choose what to predict: --target kcat --method B, or --methods kcat=B,Km=C")
    return order, sel


def _wait_and_write(job: Job, args: argparse.Namespace) -> int:
    try:
        job.wait(progress=not args.quiet)
    except KeyboardInterrupt:
        # wait() has printed the job and the line that re-attaches.
        return 130
    if args.output:
        path = job.result_csv(args.output)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kinflow_client",
        description="The kinflow API from the command line. URL and key: --url/--key, else "
        "$KINFLOW_URL and $KINFLOW_API_KEY.",
    )
    p.add_argument("--url", help="API base URL (default $KINFLOW_URL, else http://127.0.0.1:8000)")
    p.add_argument("--key", help="API key (default $KINFLOW_API_KEY)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("health", help="service health (JSON)")
    sub.add_parser("methods", help="the methods per target")
    sub.add_parser("quota", help="today's quota of the key")

    v = sub.add_parser("validate", help="check a CSV without submitting it (exit 1 when rows are flagged)")
    v.add_argument("file")
    v.add_argument("--target", action="append", help="report only this target's method (paired with --method)")
    v.add_argument("--method", action="append", help="method id for the --target at the same position")
    v.add_argument("--methods", help="targets and methods at once: kcat=B,Km=C")
    v.add_argument("--similarity", action="store_true", help="also run the similarity analysis")
    v.add_argument("--json", action="store_true", help="print the API's report as JSON")

    s = sub.add_parser("submit", help="submit a CSV; prints the job id; with -o or --wait waits for it")
    s.add_argument("file")
    s.add_argument("--target", action="append", help="kcat, Km or kcat/Km (repeatable, paired with --method)")
    s.add_argument("--method", action="append", help="method id for the --target at the same position")
    s.add_argument("--methods", help="targets and methods at once: kcat=B,Km=C")
    s.add_argument("-o", "--output", help="wait, then write the result CSV here")
    s.add_argument("--wait", action="store_true", help="wait for the job (exit 1 when it fails)")
    s.add_argument("--long", choices=["truncate", "skip"], help="sequences over a method's limit (default truncate)")
    s.add_argument("--experimental", action="store_true", help="use experimental values where known (useExperimental)")
    s.add_argument("--no-similarity-columns", action="store_true", help="leave out the similarity columns")
    s.add_argument("--no-canonicalize", action="store_true", help="do not canonicalize substrates")
    s.add_argument("--no-gpu", action="store_true", help="skip the GPU precompute (disableGpuPrecompute)")
    s.add_argument("--no-cache", action="store_true", help="do not reuse cached predictions (usePredictionCache)")
    s.add_argument("--validate-first", action="store_true", help="validate first; submit nothing when rows are flagged")
    s.add_argument("--idempotency-key", help="reuse this key (repeat a submit safely); default a fresh uuid4")

    st = sub.add_parser("status", help="a job's status")
    st.add_argument("job")
    st.add_argument("--json", action="store_true", help="print the API's status payload")

    w = sub.add_parser("wait", help="wait for a job (re-attach), optionally writing its result")
    w.add_argument("job")
    w.add_argument("-o", "--output", help="write the result CSV here")

    r = sub.add_parser("result", help="a Completed job's result CSV (stdout, or -o FILE)")
    r.add_argument("job")
    r.add_argument("-o", "--output", help="write to this file (atomically)")

    j = sub.add_parser("jobs", help="the key's jobs, newest first")
    j.add_argument("--status", choices=["Pending", "Processing", "Completed", "Failed"])
    j.add_argument("--limit", type=int, default=50)
    return p


def run(args: argparse.Namespace) -> int:
    c = Client(args.url, args.key)
    cmd = args.command
    if cmd == "health":
        _print_json(c.health())
        return 0
    if cmd == "methods":
        for m in c.methods():
            limit = f"max {m.max_seq_len} residues" if m.max_seq_len else "no length limit"
            print(f"{m.target:8} {m.id:5} {m.display_name:24} columns: {', '.join(m.required_columns)}; {limit}")
        return 0
    if cmd == "quota":
        q = c.quota()
        print(f"used {q.used} of {q.limit} today, {q.remaining} remaining; resets at {q.reset_at:%Y-%m-%d %H:%M} UTC")
        return 0
    if cmd == "validate":
        chosen = bool(args.target or args.method or args.methods)
        targets, methods = _selection(args) if chosen else (None, None)
        rep = c.validate(args.file, targets, methods, run_similarity=args.similarity)
        if args.json:
            _print_json(rep.raw)
        else:
            print(rep.summary())
        return 0 if rep.ok else 1
    if cmd == "submit":
        targets, methods = _selection(args)
        job = c.submit(
            args.file,
            targets,
            methods,
            handle_long_sequences=args.long,
            use_experimental=True if args.experimental else None,
            include_similarity_columns=False if args.no_similarity_columns else None,
            canonicalize_substrates=False if args.no_canonicalize else None,
            disable_gpu_precompute=True if args.no_gpu else None,
            use_prediction_cache=False if args.no_cache else None,
            validate_first=args.validate_first,
            idempotency_key=args.idempotency_key,
        )
        print(job.id, flush=True)
        if args.wait or args.output:
            return _wait_and_write(job, args)
        return 0
    if cmd == "status":
        s = c.job(args.job).status()
        if args.json:
            _print_json(s.raw)
            return 0
        print(f"job {s.job_id}: {s.status} ({s.elapsed_seconds}s){' synthetic' if s.synthetic else ''}")
        if s.overall is not None and s.overall.text:
            # The whole job in one sentence, as the bar and the web page say it.
            print(s.overall.text)
        if s.status == "Pending" and s.queue_position is not None:
            print(f"queue position {s.queue_position}")
        for g in s.stages:
            e = g.embedding
            print(
                f"stage {g.index + 1} {g.target}·{g.method_key}: {g.status}; embeddings {e.done}/{e.total} "
                f"(cached {e.cached_already}, computed {e.computed}, remaining {e.remaining}); "
                f"predictions {g.predictions_made}/{g.predictions_total}"
            )
        if s.rows_refunded is not None:
            n = s.cached_rows_refunded
            cached = f" ({n} served wholly from the prediction cache)" if n else ""
            print(f"charged {s.rows_charged} rows, refunded {s.rows_refunded}{cached}")
        if s.error:
            print(f"error: {s.error}")
        return 0
    if cmd == "wait":
        return _wait_and_write(c.job(args.job), args)
    if cmd == "result":
        job = Job(c, args.job)
        if args.output:
            job.result_csv(args.output)
        else:
            sys.stdout.buffer.write(c._result_csv(args.job))
        return 0
    if cmd == "jobs":
        for js in c.jobs(status=args.status, limit=args.limit):
            sel = ", ".join(f"{t}={js.methods.get(t, '?')}" for t in js.targets)
            rows = "" if js.rows is None else f" {js.rows} rows"
            when = f"{js.submitted_at:%Y-%m-%d %H:%M:%S}" if js.submitted_at else "?"
            print(f"{js.job_id}  {js.status:10} {when}  {sel}{rows}")
        return 0
    raise SystemExit(f"error: unknown command {cmd}")  # pragma: no cover (argparse refuses first)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("always", SyntheticResultWarning)
        warnings.showwarning = lambda msg, *a, **k: print(f"note: {msg}", file=sys.stderr)
        try:
            return run(args)
        except KinflowError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except (OSError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
