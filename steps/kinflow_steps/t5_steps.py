"""The ProtT5-XL steps (transformers): methods B/C, I and method A's ProtT5 part with
its binding-site predictor."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np

from kinflow_steps import cache_io
from kinflow_steps.base import PooledStep, binding_site_table
from kinflow_steps.batch import Batch, Seq
from kinflow_steps.errors import BatchError, NonFiniteError
from kinflow_steps.models import LAST, ProtT5, require_path
from kinflow_steps.writer import HostPart, Writer

# The binding-site predictor refuses longer sequences (it does in the reference too).
PSEQ2SITES_MAX = 1499


T5_PATH = ("KINFLOW_PROT_T5_PATH", "METHODA_T5_MODEL_PATH")
T5_WHAT = "the ProtT5-XL folder (Rostlab/prot_t5_xl_uniref50: config, weights, spiece.model)"


class T5Step(PooledStep):
    family = "prot_t5"

    def load(self) -> dict[str, str]:
        path = require_path(*T5_PATH, what=T5_WHAT, is_dir=True)
        self.model = ProtT5(path, self.device, self.dtype)
        return {"model": os.path.basename(os.path.normpath(path))}


class ProtT5Mean(T5Step):
    """Methods B and C: the last-layer mean of ProtT5-XL, EOS excluded."""

    key = "prot_t5_mean"
    spec = {"prot_t5_last/mean_vecs": (LAST, "mean")}


class MethodIProtT5Residues(T5Step):
    """Method I: the last-layer per-residue matrix [L, 1024], EOS excluded."""

    key = "methodi_prot_t5_residues"
    spec = {"methodi_prot_t5_residues": (LAST, "residue_npy")}


class MethodAT5Full(T5Step):
    """Method A's ProtT5 part: layers 19 and last, mean and binding-site-weighted; the
    binding-site rows missing from the table come from the predictor command
    KINFLOW_PSEQ2SITES_CMD (without one, such a sequence fails the batch with a
    clear message after its mean files are written)."""

    key = "methoda_t5_full"
    spec = {
        "prot_t5_layer_19/mean_vecs": (19, "mean"),
        "prot_t5_layer_19/weighted_vecs": (19, "weighted"),
        "prot_t5_last/mean_vecs": (LAST, "mean"),
        "prot_t5_last/weighted_vecs": (LAST, "weighted"),
    }

    def pending(self, b: Batch) -> list[tuple[Seq, dict[str, str]]]:
        todo = super().pending(b)
        have = {s.seq_id for s, _ in todo}
        rest = [s for s in b.seqs if s.seq_id not in have]
        if rest:
            # Files all there but maybe no binding-site row: the step owes the row too.
            table = cache_io.read_binding_sites(binding_site_table(b.media_root), {s.seq_id for s in rest})
            for s in rest:
                if s.seq_id not in table:
                    todo.append((s, {}))
        return todo

    def weights_for(self, b: Batch, ids: set[str]) -> dict[str, np.ndarray]:
        return self._weights

    def forward(self, b: Batch, group: list[tuple[Seq, dict[str, str]]]) -> HostPart:
        ids = {s.seq_id for s, _ in group}
        path = binding_site_table(b.media_root)
        table = cache_io.read_binding_sites(path, ids)
        lacking = [s for s, _ in group if s.seq_id not in table]
        problems = []
        if lacking:
            got, problems = run_predictor(lacking)
            if got:
                cache_io.append_binding_sites(path, got)
                table.update({k: np.asarray(v, dtype=np.float64) for k, v in got.items()})
        self._weights = table
        inner: HostPart | None = None
        todo = [(s, want) for s, want in group if want]
        if todo:
            try:
                inner = super().forward(b, todo)
            except NonFiniteError:
                raise
            except BatchError as exc:
                problems.append(str(exc))

        def host(w: Writer) -> None:
            msgs = list(problems)
            if inner is not None:
                try:
                    inner(w)
                except NonFiniteError:
                    raise
                except BatchError as exc:
                    msgs.append(str(exc))
            if msgs:
                raise BatchError("; ".join(msgs))

        return host


def run_predictor(seqs: list[Seq]) -> tuple[dict[str, list[float]], list[str]]:
    """Run the binding-site predictor command for seqs: KINFLOW_PSEQ2SITES_CMD, a
    template split like a shell would (no shell runs) with ``{input}`` (JSON
    ``{seq_id: sequence}``) and ``{output}`` (the TSV it must write, header
    ``PDB<TAB>Pred_BS_Scores``, one row per sequence, one probability per residue).
    Returns the rows and the problems (one per sequence without a usable row)."""
    problems = []
    ok = []
    for s in seqs:
        if len(s.sequence) > PSEQ2SITES_MAX:
            problems.append(
                f"seq {s.seq_id}: no binding-site row and {len(s.sequence)} residues is over the predictor's "
                f"{PSEQ2SITES_MAX}"
            )
        else:
            ok.append(s)
    tmpl = os.environ.get("KINFLOW_PSEQ2SITES_CMD", "").strip()
    if not ok:
        return {}, problems
    if not tmpl:
        for s in ok:
            problems.append(
                f"seq {s.seq_id}: no row in the binding-site table and no predictor configured (KINFLOW_PSEQ2SITES_CMD)"
            )
        return {}, problems
    with tempfile.TemporaryDirectory(prefix="kinflow-bs-") as tmp:
        inp = os.path.join(tmp, "input.json")
        outp = os.path.join(tmp, "output.tsv")
        with open(inp, "w", encoding="utf-8") as f:
            json.dump({s.seq_id: s.sequence for s in ok}, f)
        argv = [a.replace("{input}", inp).replace("{output}", outp) for a in shlex.split(tmpl)]
        print(f"BINDING_SITES $ {shlex.join(argv)}", file=sys.stderr, flush=True)
        proc = subprocess.run(argv, stdout=sys.stderr, stderr=sys.stderr, check=False)
        if proc.returncode != 0:
            problems.append(f"binding-site predictor exited {proc.returncode} for {len(ok)} sequence(s)")
            return {}, problems
        rows = cache_io.read_binding_sites(outp, {s.seq_id for s in ok})
    got = {}
    for s in ok:
        r = rows.get(s.seq_id)
        if r is None:
            problems.append(f"seq {s.seq_id}: the binding-site predictor wrote no row")
        elif len(r) != len(s.sequence):
            problems.append(f"seq {s.seq_id}: the predictor wrote {len(r)} scores for {len(s.sequence)} residues")
        else:
            got[s.seq_id] = r.tolist()
    return got, problems
