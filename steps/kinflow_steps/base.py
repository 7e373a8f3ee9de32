"""The step base classes: ``Step`` (validation, file mapping, the forward passes and
the write loop through the pipeline) and ``PooledStep`` (mean, weighted and residue
files of one model's layers, reduced on the device), with the reductions and settings
they share.

A step owns a set of artefact families (folders under ``MEDIA/sequence_info``); the
manifest lists, per sequence, the absolute paths it owes. The step maps each path's
folder to a producer, runs the model over the sequences that miss anything, and writes
the missing files atomically.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from kinflow_steps import cache_io
from kinflow_steps.batch import Batch, Seq, family_of, pack
from kinflow_steps.errors import BatchError, ConfigError, NonFiniteError
from kinflow_steps.models import FairESM, pick_device
from kinflow_steps.pipeline import Pipeline
from kinflow_steps.precision import apply, dtype_of, precision_for
from kinflow_steps.writer import HostPart, Writer


def mean_vec(res: np.ndarray) -> np.ndarray:
    """Mean over residues, float32 (the reference's mean_vecs)."""
    return res.astype(np.float32, copy=False).mean(axis=0).astype(np.float32)


def weighted_vec(res: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Binding-site-weighted average as the reference computes it: the table's weights
    at their full precision, NaN and infinite weights as 0, normalised to sum 1 in float64; weights
    summing to 0 or less (or to infinity) give the plain mean. Stored as float32
    (kinflow's NPY reader takes float32)."""
    w = np.asarray(w, dtype=np.float64)
    # The reference drops NaN and infinite weights alike (nan_to_num to 0).
    w = np.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)
    total = w.sum()
    if not np.isfinite(total) or total <= 0:
        return mean_vec(res)
    return (res.astype(np.float64) * (w / total)[:, None]).sum(axis=0).astype(np.float32)


def nonfinite_error(bad_ids: list[str], what: str) -> None:
    """NonFiniteError naming bad_ids (nothing when there are none)."""
    if bad_ids:
        names = ", ".join(bad_ids)
        raise NonFiniteError(f"non-finite values in the {what} output of seq {names}; nothing written for this batch")


def weight_norm(w: np.ndarray) -> np.ndarray | None:
    """weighted_vec's weights: NaN and infinite weights as 0, normalised to sum 1 in
    float64; None where they sum to 0 or less (or to infinity): the plain mean."""
    w = np.nan_to_num(np.asarray(w, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    total = w.sum()
    if not np.isfinite(total) or total <= 0:
        return None
    return w / total


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        v = float(raw) if raw else default
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc
    if v != 0 and not 1 <= v < float("inf"):
        raise ConfigError(f"{name}={raw!r}: want 0 (off) or a factor of 1 or more")
    return v


#: The length spread of a forward pass (pack's spread) per model family when
#: KINFLOW_STEPS_LENGTH_SPREAD is unset: 4 for the half-precision padded batches. ESM C
#: in bf16 missed the pooled bound by 1.2e-4 on a 1-residue sequence padded to 1,502
#: tokens (docs/BENCHMARKS.md); within 4x its own tokens a sequence is padded no more
#: than a host batch packed longest first pads most of its sequences, and a pass splits
#: only at the short tail of a host batch. fair-esm's fp32 batches are off (0): their
#: padding changes nothing beyond fp32 rounding, so the extra passes would buy nothing.
LENGTH_SPREAD = {"esmc": 4.0, "prot_t5": 4.0}


class Step:
    """Base of every step: validation, file mapping and the write loop."""

    key = ""
    families: tuple[str, ...] = ()
    #: the model family of kinflow_steps.precision.
    family = ""
    #: residues the model takes; longer sequences follow the step's own rule.
    max_residues = 0

    def __init__(self) -> None:
        self.device = pick_device()
        # An unproven KINFLOW_STEPS_PRECISION is refused here, before any model loads.
        self.precision = precision_for(self.family, self.device)
        self.dtype = dtype_of(self.precision)
        self.tf32_note = apply(self.precision)
        self.budget = env_int("KINFLOW_STEPS_TOKS_PER_BATCH", 0)
        self.spread = env_float("KINFLOW_STEPS_LENGTH_SPREAD", LENGTH_SPREAD.get(self.family, 0.0))

    def load(self) -> dict[str, str]:
        """Load the models (ConfigError when something is missing); return what the
        ready line reports."""
        raise NotImplementedError

    def precision_note(self) -> str:
        """What the fingerprint's precision adds to the dtype: how the step computes at
        it, where that differs in rounding from the family's own forward pass."""
        return ""

    def fit(self, seq: str) -> str:
        """The sequence the model sees (the step's long-sequence rule)."""
        return seq

    def refuse(self, seq: str) -> str | None:
        """Why the method's own code computes nothing for seq (None: it does). A
        fair-esm model's alphabet has no lower-case letters and no J: fair-esm's
        ``Alphabet.encode`` raises on them, so such a sequence gets no file. Only the
        residues the model is given count (after the step's own cut, ``fit``: methods D
        and F cut the string before encoding it; G and H cut tokens after)."""
        model = getattr(self, "model", None)
        if isinstance(model, FairESM):
            bad = model.unknown(self.fit(seq))
            if bad:
                return f"character(s) {''.join(bad)} not in fair-esm's alphabet, on which the method's own code fails"
        return None

    def pending(self, b: Batch) -> list[tuple[Seq, dict[str, str]]]:
        """Sequences with missing files, each with {family: path} of what to write."""
        todo = []
        for s in b.seqs:
            want: dict[str, str] = {}
            for p in s.missing:
                folder, _ = family_of(p, b.media_root, s.seq_id)
                fam = b.folders.get(folder, folder)
                if not self.owns(fam):
                    raise BatchError(f"seq {s.seq_id}: step {self.key} does not write {fam}")
                if not os.path.exists(p):
                    want[fam] = p
            if want:
                todo.append((s, want))
        return todo

    def owns(self, fam: str) -> bool:
        return fam in self.families

    def plan(self, b: Batch) -> tuple[list[list[tuple[Seq, dict[str, str]]]], list[str]]:
        """The batch's forward passes (each a group of sequences with the files each
        owes) and the problems known before any runs (sequences the method refuses)."""
        problems: list[str] = []
        todo = []
        for s, want in self.pending(b):
            why = self.refuse(s.sequence)
            if why:
                problems.append(f"seq {s.seq_id}: {why}; nothing written for it")
            else:
                todo.append((s, want))
        by_id = {s.seq_id: want for s, want in todo}
        groups = pack([s for s, _ in todo], self.budget, self.spread)
        return [[(s, by_id[s.seq_id]) for s in g] for g in groups], problems

    def run(self, b: Batch) -> int:
        """Write every missing file of the batch; return how many were written. Files
        are written once every forward pass of the batch is done: a non-finite value
        anywhere fails the batch with nothing written; another BatchError (a missing
        binding-site row) still writes what was computed. Through the step's pipeline
        (kinflow_steps.pipeline), as the resident server runs it."""
        if getattr(self, "_pipeline", None) is None:
            self._pipeline = Pipeline(self)
        return self._pipeline.run(b)

    def forward(self, b: Batch, group: list[tuple[Seq, dict[str, str]]]) -> HostPart:
        """Run group's forward pass and return its host part. This default runs
        ``produce`` here and leaves only the writing to the host part; steps that
        reduce on the device (PooledStep, MethodDESM1b) leave the copy and the
        encoding to it too."""
        w = Writer()
        err: BatchError | None = None
        try:
            self.produce(b, group, w)
        except NonFiniteError:
            raise
        except BatchError as exc:
            err = exc
        items = list(w.pending)

        def host(out: Writer) -> None:
            for item in items:
                out.put(*item)
            if err is not None:
                raise err

        return host

    def produce(self, b: Batch, group: list[tuple[Seq, dict[str, str]]], w: Writer) -> None:
        raise NotImplementedError


class PooledStep(Step):
    """Mean / weighted / residue artefacts of one model's layers. ``spec`` maps a
    family to (layer, reduction) with reduction ``mean``, ``weighted``, ``residue_npy``
    or ``residue_pt``."""

    spec: dict[str, tuple[Any, str]] = {}
    #: The token-matrix cut of the method's own code (FairESM.embed), None for none.
    max_tokens: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.families = tuple(self.spec)
        self.model: Any = None

    def weights_for(self, b: Batch, ids: set[str]) -> dict[str, np.ndarray]:
        return cache_io.read_binding_sites(binding_site_table(b.media_root), ids)

    def forward(self, b: Batch, group: list[tuple[Seq, dict[str, str]]]) -> HostPart:
        """The forward pass and, on the device, every reduction the group's files need
        (kinflow_steps.device): means and weighted means in float64 as [D] vectors,
        residue families as one contiguous block per layer, a non-finite flag per
        sequence; their copy to the host starts here and the host part waits for it."""
        import torch

        from kinflow_steps.device import Transfer, nonfinite_flags, reduce_means, to_device

        seqs = [self.fit(s.sequence) for s, _ in group]
        layers = sorted({self.spec[f][0] for _, want in group for f in want}, key=str)
        need_w = {s.seq_id for s, want in group if any(self.spec[f][1] == "weighted" for f in want)}
        weights = self.weights_for(b, need_w) if need_w else {}
        reps = self.model.embed_device(seqs, layers, max_tokens=self.max_tokens)
        rows = reps.rows
        problems: list[str] = []
        files: list[tuple[int, str, str, str, Any, str]] = []
        wrow: dict[int, np.ndarray] = {}
        for row, (s, want) in enumerate(group):
            for fam, path in sorted(want.items()):
                layer, how = self.spec[fam]
                if how == "weighted":
                    ws = weights.get(s.seq_id)
                    if ws is None:
                        problems.append(f"seq {s.seq_id}: no row in the binding-site table, so no {fam}")
                        continue
                    if len(ws) != rows[row]:
                        problems.append(
                            f"seq {s.seq_id}: {len(ws)} binding-site weights for {rows[row]} residues, so no {fam}"
                        )
                        continue
                    norm = weight_norm(ws)
                    if norm is None:
                        how = "mean"  # weighted_vec's rule: the plain mean
                    else:
                        wrow[row] = norm
                files.append((row, s.seq_id, fam, path, layer, how))
        out: dict[str, Any] = {}
        with torch.inference_mode():
            wall = None
            if wrow:
                wall = to_device(
                    torch.from_numpy(
                        np.concatenate([wrow.get(i, np.zeros(n)) for i, n in enumerate(rows)]).astype(np.float64)
                    ),
                    reps.seg.device,
                )
            for layer in layers:
                res = reps.residues(layer)
                kinds = {f[5] for f in files if f[4] == layer}
                out[f"bad:{layer}"] = nonfinite_flags(res, reps.seg, len(rows))
                if "mean" in kinds:
                    out[f"mean:{layer}"] = reduce_means(res, reps.seg, rows, None).float()
                if "weighted" in kinds:
                    out[f"weighted:{layer}"] = reduce_means(res, reps.seg, rows, wall).float()
                if kinds & {"residue_npy", "residue_pt"}:
                    out[f"res:{layer}"] = res.float().contiguous()
            copy = Transfer(out)
        del reps
        ids = [s.seq_id for s, _ in group]

        def host(w: Writer) -> None:
            got = copy.wait()
            bad = set()
            for layer in layers:
                bad.update(np.flatnonzero(got[f"bad:{layer}"]).tolist())
            nonfinite_error([ids[i] for i in sorted(bad)], self.key)
            offsets = np.cumsum([0, *rows])
            for row, sid, fam, path, layer, how in files:
                if how == "mean":
                    w.put(path, sid, cache_io.npy_bytes(got[f"mean:{layer}"][row]))
                elif how == "weighted":
                    vec = got[f"weighted:{layer}"][row]
                    if not np.isfinite(vec).all():
                        # Finite representations, but the table's weights (an
                        # external predictor's) cancel or overflow: never cached.
                        raise NonFiniteError(
                            f"non-finite values in the {self.key} output of seq {sid} ({fam}: its binding-site "
                            "weights); nothing written for this batch"
                        )
                    w.put(path, sid, cache_io.npy_bytes(vec))
                else:
                    mat = got[f"res:{layer}"][offsets[row] : offsets[row + 1]]
                    if how == "residue_npy":
                        w.put(path, sid, cache_io.npy_bytes(mat))
                    else:
                        w.put(path, sid, cache_io.pt_bytes(torch.from_numpy(mat)))
            if problems:
                raise BatchError("; ".join(problems))

        return host


#: The binding-site table's folder under the media root: the reference deployment's
#: ``media/pseq2sites/`` (internal/embedding.DefaultBindingSiteDir).
DEFAULT_BINDING_SITE_DIR = "pseq2sites"


def binding_site_table(media_root: str) -> str:
    """MEDIA/<KINFLOW_BINDING_SITE_DIR or pseq2sites>/binding_sites_all.tsv."""
    folder = os.environ.get("KINFLOW_BINDING_SITE_DIR", "").strip() or DEFAULT_BINDING_SITE_DIR
    return os.path.join(media_root, folder, cache_io.BINDING_SITE_TABLE)
