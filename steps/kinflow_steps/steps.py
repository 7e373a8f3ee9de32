"""The step keys: which model, layer and reduction writes each file.

A step owns a set of artefact families (folders under ``MEDIA/sequence_info``); the
manifest lists, per sequence, the absolute paths it owes. The step maps each path's
folder to a producer, runs the model over the sequences that miss anything, and writes
the missing files atomically.
"""

from __future__ import annotations

import json
import os
import shlex
import string
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kinflow_steps import cache_io
from kinflow_steps.errors import BatchError, ConfigError, NonFiniteError
from kinflow_steps.models import (
    ESMC,
    FINAL,
    LAST,
    FairESM,
    ProtT5,
    esm2_path,
    pick_device,
    require_path,
)
from kinflow_steps.precision import apply, dtype_of, precision_for

SEQUENCE_INFO = "sequence_info"
#: What a manifest's sequence may hold: letters of either case. Case is kept and each
#: step treats its letters as its method's own code does (docs/method-cuts.md,
#: "Lower case and non-standard residues"); kinflow's GPU host sends only the 20
#: standard upper-case residues, so anything else comes from an operator's manifest.
LETTERS = frozenset(string.ascii_letters)

# ESM windows: 1,024 tokens with BOS/EOS, so 1,022 residues.
ESM_WINDOW = 1022
#: The token-matrix width the reference's method G and H workers cut to.
ESM_TOKENS = 1024
# Method F's rule for longer sequences (the reference's ESM-1v worker): first 500 + last 500.
ESM1V_HALF = 500
# The binding-site predictor refuses longer sequences (it does in the reference too).
PSEQ2SITES_MAX = 1499


@dataclass
class Seq:
    """One sequence of a batch manifest."""

    seq_id: str
    sequence: str
    outputs: list[str]
    missing: list[str]
    original_length: int = 0
    truncated: bool = False


@dataclass
class Batch:
    """One batch manifest (docs/gpu-host.md "Manifest in")."""

    batch: int
    step_key: str
    media_root: str
    seqs: list[Seq] = field(default_factory=list)
    #: output folder (relative to sequence_info) -> family name: the host's folder
    #: naming (KINFLOW_CACHE_FOLDERS). A folder it does not list is its own family.
    folders: dict[str, str] = field(default_factory=dict)


def parse_manifest(doc: Any) -> Batch:
    """Validate a manifest object; BatchError names what is wrong."""
    if not isinstance(doc, dict):
        raise BatchError("manifest is not a JSON object")
    try:
        b = Batch(
            batch=int(doc.get("batch", 0)), step_key=str(doc.get("step_key", "")), media_root=str(doc["media_root"])
        )
        b.folders = {str(k): str(v) for k, v in (doc.get("folders") or {}).items()}
        for s in doc.get("seqs") or []:
            outputs = [str(p) for p in s.get("outputs") or []]
            missing = s.get("missing_outputs")
            b.seqs.append(
                Seq(
                    seq_id=str(s["seq_id"]),
                    sequence=str(s["sequence"]).strip(),
                    outputs=outputs,
                    missing=[str(p) for p in missing] if missing is not None else list(outputs),
                    original_length=int(s.get("original_length") or 0),
                    truncated=bool(s.get("truncated", False)),
                )
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise BatchError(f"malformed manifest: {exc!r}") from exc
    for s in b.seqs:
        if not cache_io.valid_seq_id(s.seq_id):
            raise BatchError(f"invalid seq id {s.seq_id!r}")
        bad = set(s.sequence) - LETTERS
        if not s.sequence or bad:
            raise BatchError(f"seq {s.seq_id}: bad sequence (characters {''.join(sorted(bad)) or 'none'})")
    # The batch's writes create folders below this root only while it is there.
    cache_io.use_media_root(b.media_root)
    return b


def family_of(path: str, media_root: str, seq_id: str) -> tuple[str, str]:
    """(family folder relative to sequence_info, suffix) of an output path; BatchError
    when the path is not ``MEDIA/sequence_info/<family>/<seq_id><suffix>``."""
    root = os.path.join(os.path.abspath(media_root), SEQUENCE_INFO)
    p = os.path.abspath(path)
    rel = os.path.relpath(p, root)
    folder, name = os.path.split(rel)
    stem, suffix = os.path.splitext(name)
    if rel.startswith("..") or os.path.isabs(rel) or stem != seq_id or suffix not in (".npy", ".pt") or not folder:
        raise BatchError(f"seq {seq_id}: output {path} is not a cache artefact of this sequence")
    return folder.replace(os.sep, "/"), suffix


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


def pack(seqs: list[Seq], budget: int, spread: float = 0.0) -> list[list[Seq]]:
    """Split a host batch into forward passes of at most budget tokens, longest first,
    (longest + 2) x count per pass, as fair-esm's toks_per_batch; 0: one pass. With
    spread > 0 a pass also ends before a sequence whose tokens (length + 2) are fewer
    than the pass's longest's ÷ spread: length buckets, so that a short sequence is
    never padded to many times its own length."""
    if budget <= 0 and spread <= 0:
        return [seqs] if seqs else []
    out: list[list[Seq]] = []
    cur: list[Seq] = []
    longest = 0
    for s in sorted(seqs, key=lambda s: len(s.sequence), reverse=True):
        n = max(longest, len(s.sequence)) + 2
        full = budget > 0 and n * (len(cur) + 1) > budget
        apart = spread > 0 and longest + 2 > spread * (len(s.sequence) + 2)
        if cur and (full or apart):
            out.append(cur)
            cur, longest = [], 0
        cur.append(s)
        longest = max(longest, len(s.sequence))
    if cur:
        out.append(cur)
    return out


def tokens_computed(groups: list[list[int]]) -> int:
    """Token positions a padded forward pass computes for these groups of sequence
    lengths: each group is padded to its longest + BOS/EOS."""
    return sum((max(g) + 2) * len(g) for g in groups if g)


def padding_report(lengths: list[int], budget: int, naive_batch: int = 8) -> dict[str, float]:
    """Tokens computed ÷ residues for the same sequences (a) in arrival order, padded
    batches of naive_batch, (b) packed as pack() does (longest first, (longest + 2) x
    count <= budget), (c) unpadded (each sequence its own length + 2: the floor a
    variable-length attention kernel reaches)."""
    residues = sum(lengths)
    naive = [lengths[i : i + naive_batch] for i in range(0, len(lengths), naive_batch)]
    seqs = [Seq(str(i), "A" * n, [], []) for i, n in enumerate(lengths)]
    packed = [[len(s.sequence) for s in g] for g in pack(seqs, budget)]
    return {
        "sequences": len(lengths),
        "residues": residues,
        "naive_ratio": tokens_computed(naive) / residues,
        "packed_ratio": tokens_computed(packed) / residues,
        "packed_passes": len(packed),
        "unpadded_ratio": sum(n + 2 for n in lengths) / residues,
    }


class Writer:
    """Collects a batch's files and writes them atomically at ``commit``: every file to
    its fsynced temp name, then each folder's manifest.json with the files' integrity
    records, then the renames (a file is never visible before its record). A batch that
    turns out to hold a non-finite value is ``discard``-ed and writes nothing.

    With ``stage_at_put`` (the pipeline's writer pool) each ``put`` writes, fsyncs and
    hashes its temp file at once, and ``absorb`` gathers the staged files of a batch's
    forward passes into the one writer that records and publishes them."""

    def __init__(self, stage_at_put: bool = False) -> None:
        self.pending: list[tuple[str, str, bytes]] = []
        self.staged: list[tuple[str, cache_io.Staged]] = []
        self.stage_at_put = stage_at_put
        self.written = 0

    def put(self, path: str, seq_id: str, data: bytes) -> None:
        if self.stage_at_put:
            self.staged.append((seq_id, cache_io.stage_bytes(path, data)))
        else:
            self.pending.append((path, seq_id, data))

    def absorb(self, other: Writer) -> None:
        self.staged.extend(other.staged)
        other.staged = []

    def discard(self) -> None:
        self.pending.clear()
        for _, st in self.staged:
            st.discard()
        self.staged.clear()

    def commit(self) -> None:
        try:
            for path, seq_id, data in self.pending:
                self.staged.append((seq_id, cache_io.stage_bytes(path, data)))
            self.pending.clear()
            commits: dict[str, list[cache_io.Commit]] = {}
            for seq_id, st in self.staged:
                commits.setdefault(os.path.dirname(st.path), []).append(
                    cache_io.Commit(
                        seq_id,
                        os.path.basename(st.path),
                        st.nbytes,
                        st.sha256,
                        st.mtime_ns,
                        ctime_ns=st.ctime_ns,
                        ino=st.ino,
                    )
                )
            for folder, cs in commits.items():
                cache_io.merge_manifest(folder, cs)
            while self.staged:
                self.staged[0][1].publish()
                self.staged.pop(0)
                self.written += 1
            for folder, cs in commits.items():
                try:
                    cache_io.record_renamed(folder, cs)
                except OSError:
                    pass  # only saves kinflow's check a hash of these files
        finally:
            self.discard()


#: A forward pass's host part: given the writer of its batch's pool, it waits for the
#: pass's results to reach the host and puts its files (BatchError after the files it
#: could write; NonFiniteError for a batch that must write nothing).
HostPart = Callable[[Writer], None]


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
        from kinflow_steps.pipeline import Pipeline

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


# --- ESM-2 650M (fair-esm) -------------------------------------------------------

ESM2_PATH = ("KINFLOW_ESM2_650M_PATH",)


class ESM2Step(PooledStep):
    family = "esm2"
    what = "the ESM-2 650M checkpoint esm2_t33_650M_UR50D.pt (fair-esm format, contact-regression file beside it)"

    def load(self) -> dict[str, str]:
        path = require_path(*ESM2_PATH, what=self.what)
        self.model = FairESM(path, self.device, self.dtype)
        return {"model": os.path.basename(path)}

    def precision_note(self) -> str:
        return esm2_path(self.dtype)


class MethodHESM2LastMean(ESM2Step):
    """Method H: layer-33 (last) mean of ESM-2 650M over the residues the method's own
    worker keeps: its token matrix cut to 1,024 columns (BOS and the first 1,023
    residues, no EOS, for a longer sequence; docs/method-cuts.md)."""

    key = "methodh_esm2_last_mean"
    spec = {"esm2_layer_last_mean": (LAST, "mean")}
    max_tokens = ESM_TOKENS


class MethodGESM2(ESM2Step):
    """Method G: the layer-33 per-residue tensor [L, 1280] as torch.save float32, the
    token matrix cut to 1,024 columns as the method's own worker does: at most 1,023
    rows, no EOS for a longer sequence (kinflow's Family.Rows; docs/method-cuts.md)."""

    key = "methodg_esm2"
    spec = {"methodg_esm2": (LAST, "residue_pt")}
    max_tokens = ESM_TOKENS


class MethodAESM2Layers(ESM2Step):
    """Method A: layers 26 and 29, mean and binding-site-weighted (no truncation, as
    the reference)."""

    key = "methoda_esm2_layers"
    spec = {
        "esm2_layer_26/mean_vecs": (26, "mean"),
        "esm2_layer_26/weighted_vecs": (26, "weighted"),
        "esm2_layer_29/mean_vecs": (29, "mean"),
        "esm2_layer_29/weighted_vecs": (29, "weighted"),
    }


# --- ESM-1v / ESM-1b (fair-esm) --------------------------------------------------


class MethodFESM1v(PooledStep):
    """Method F: ESM-1v layer-33 per-residue matrix, BOS/EOS removed; a sequence over
    1,022 residues becomes its first 500 + last 500 (the host normally did that)."""

    key = "methodf_esm1v"
    family = "esm1v"
    spec = {"esm1v": (LAST, "residue_npy")}

    def fit(self, seq: str) -> str:
        return seq if len(seq) <= ESM_WINDOW else seq[:ESM1V_HALF] + seq[-ESM1V_HALF:]

    def load(self) -> dict[str, str]:
        path = require_path(
            "KINFLOW_ESM1V_PATH", "METHODF_MODEL_PATH", what="the ESM-1v checkpoint esm1v_t33_650M_UR90S_1.pt"
        )
        self.model = FairESM(path, self.device, self.dtype)
        return {"model": os.path.basename(path)}


class MethodDESM1b(Step):
    """Method D (TurNup): ESM-1b with the method's fine-tuned weights loaded over it
    (keys lose their ``model.`` prefix; the ``fc1..fc3`` head is dropped), the layer-33
    BOS/CLS vector [1280], sequence cut to its first 1,022 residues."""

    key = "methodd_esm1b"
    families = ("esm1b_methodd",)
    family = "esm1b"

    def load(self) -> dict[str, str]:
        import torch

        base = require_path("KINFLOW_ESM1B_PATH", what="the ESM-1b checkpoint esm1b_t33_650M_UR50S.pt")
        tuned = require_path(
            "KINFLOW_METHODD_CHECKPOINT",
            what="method D's fine-tuned ESM-1b weights (model_ESM_binary_A100_epoch_1_new_split.pkl)",
        )
        raw = torch.load(tuned, map_location="cpu")
        if isinstance(raw, dict) and "model" in raw and isinstance(raw["model"], dict):
            raw = raw["model"]
        state = {k.split("model.")[-1]: v for k, v in raw.items()}
        for k in [
            k for k in state if k.startswith(("module.fc1.", "module.fc2.", "module.fc3.", "fc1.", "fc2.", "fc3."))
        ]:
            del state[k]
        self.model = FairESM(base, self.device, self.dtype, state_dict=state)
        return {"model": os.path.basename(base) + "+" + os.path.basename(tuned)}

    def fit(self, seq: str) -> str:
        return seq[:ESM_WINDOW]

    def forward(self, b: Batch, group: list[tuple[Seq, dict[str, str]]]) -> HostPart:
        """The BOS/CLS rows alone cross to the host ([B, 1280] per pass)."""
        import torch

        from kinflow_steps.device import Transfer

        reps = self.model.embed_device([self.fit(s.sequence) for s, _ in group], [LAST])
        with torch.inference_mode():
            copy = Transfer({"cls": reps.cls_rows(LAST).contiguous()})
        del reps

        def host(w: Writer) -> None:
            cls = copy.wait()["cls"]
            nonfinite_error([s.seq_id for i, (s, _) in enumerate(group) if not np.isfinite(cls[i]).all()], self.key)
            for row, (s, want) in enumerate(group):
                w.put(want["esm1b_methodd"], s.seq_id, cache_io.npy_bytes(cls[row]))

        return host


# --- ESMC 600M --------------------------------------------------------------------


class ESMCStep(PooledStep):
    """A step over ESM C 600M (KINFLOW_ESMC_600M_PATH), padded batches at the family's
    precision and length spread (LENGTH_SPREAD)."""

    family = "esmc"

    def load(self) -> dict[str, str]:
        path = require_path("KINFLOW_ESMC_600M_PATH", what="the ESMC 600M weights esmc_600m_2024_12_v0.pth")
        self.model = ESMC(path, self.device, self.dtype)
        return {"model": os.path.basename(path)}


class MethodAESMCLayers(ESMCStep):
    """Method A: ESMC 600M layers 24 and 32, mean and binding-site-weighted."""

    key = "methoda_esmc_layers"
    spec = {
        "esmc_layer_24/mean_vecs": (24, "mean"),
        "esmc_layer_24/weighted_vecs": (24, "weighted"),
        "esmc_layer_32/mean_vecs": (32, "mean"),
        "esmc_layer_32/weighted_vecs": (32, "weighted"),
    }


class MethodKESMCMean(ESMCStep):
    """Method K: the mean over residues (BOS/EOS excluded) of ESM C 600M's final trunk
    embeddings (``ESMCOutput.embeddings``, after the final layer norm; not a hidden
    state), [1152] per sequence. The method's worker upper-cases the sequence before
    ``ESMProtein(sequence=...)``, so the model sees it upper-cased here too (methoda's
    ESM C step keeps case, as method A's code does)."""

    key = "methodk_esmc_mean"
    spec = {"methodk_esmc": (FINAL, "mean")}

    def fit(self, seq: str) -> str:
        return seq.upper()


# --- ProtT5-XL --------------------------------------------------------------------

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


# --- Method E (CatPred) -----------------------------------------------------------


class MethodEEmbed(Step):
    """Method E: per checkpoint, CatPred's sequence encoder and attentive pooling over
    its ESM-2 features -> methode_esm2/<parameter>/<grandparent>__<parent>/<sid>.pt.
    Needs the method's own package (``catpred``: ``catpred.utils.load_checkpoint``,
    ``catpred.data.esm_utils.get_single_esm_repr``) from KINFLOW_CATPRED_ROOT and the
    checkpoints under METHODE_CHECKPOINT_ROOT/<parameter>/.

    Offline: CatPred's ``init_esm`` fetches ESM-2 650M through the torch hub; here the
    model comes from KINFLOW_ESM2_650M_PATH (fair-esm's local loader, fp32 as CatPred
    runs it) and is handed to ``esm_utils`` before its first use. CatPred refuses to
    unpickle checkpoints outside CATPRED_TRUSTED_DESERIALIZATION_ROOTS; the step adds
    METHODE_CHECKPOINT_ROOT to it, as the reference deployment sets it."""

    parameter = ""
    family = "catpred"

    def owns(self, fam: str) -> bool:
        parts = fam.split("/")
        return len(parts) == 3 and parts[0] == "methode_esm2" and parts[1] == self.parameter

    def load(self) -> dict[str, str]:
        import importlib

        import torch

        src = require_path(
            "KINFLOW_CATPRED_ROOT", what="method E's source tree (the folder holding catpred/)", is_dir=True
        )
        root = require_path("METHODE_CHECKPOINT_ROOT", what="method E's checkpoints", is_dir=True)
        esm2 = require_path(*ESM2_PATH, what="ESM-2 650M for method E's features (" + ESM2Step.what + ")")
        trusted_roots_add(root)
        if self.device.type == "cpu":
            os.environ["PROTEIN_EMBED_USE_CPU"] = "1"  # read by esm_utils at import
        if src not in sys.path:
            sys.path.insert(0, src)
        try:
            self.utils = importlib.import_module("catpred.utils")
            self.esm_utils = importlib.import_module("catpred.data.esm_utils")
        except ImportError as exc:
            raise ConfigError(f"method E's package catpred cannot be imported from {src}: {exc}") from exc
        offline_esm(self.esm_utils, FairESM(esm2, self.device, torch.float32, unpadded=False))
        self.torch = torch
        self.checkpoints: dict[str, str] = {}
        base = os.path.join(root, self.parameter)
        for dirpath, _, files in sorted(os.walk(base)):
            if "model.pt" in files:
                parent = os.path.basename(dirpath)
                key = f"{os.path.basename(os.path.dirname(dirpath))}__{parent}"
                if key in self.checkpoints:
                    raise ConfigError(f"duplicate method E checkpoint key {key} under {base}")
                self.checkpoints[key] = os.path.join(dirpath, "model.pt")
        if not self.checkpoints:
            raise ConfigError(f"no model.pt under {base} (METHODE_CHECKPOINT_ROOT)")
        self.models: dict[str, Any] = {}
        for key, path in sorted(self.checkpoints.items()):
            m = self.utils.load_checkpoint(path, device=self.device)
            m.eval()
            self.models[key] = m
        return {"model": f"catpred {self.parameter} x{len(self.models)}"}

    def refuse(self, seq: str) -> str | None:
        """CatPred indexes residues with its 20-letter table (``_AA_TO_INDEX``) after
        fair-esm's encoder: any other letter (lower case, X, B, U, Z, O, J) fails the
        method's own code, so such a sequence gets no file."""
        bad = sorted(set(seq) - set(CATPRED_AA))
        if bad:
            return f"residue(s) {''.join(bad)} outside CatPred's 20-letter index, on which the method's own code fails"
        return None

    def produce(self, b: Batch, group: list[tuple[Seq, dict[str, str]]], w: Writer) -> None:
        torch = self.torch
        for s, want in group:
            feats = self.esm_utils.get_single_esm_repr(s.sequence).float().cpu()
            if not torch.isfinite(feats).all():
                raise NonFiniteError(f"non-finite values in method E's ESM-2 features of seq {s.seq_id}")
            for fam, path in sorted(want.items()):
                key = fam.split("/")[2]
                model = self.models.get(key)
                if model is None:
                    raise BatchError(f"seq {s.seq_id}: no method E checkpoint {key} on this host")
                with torch.no_grad():
                    pooled = catpred_pool(model, s.sequence, s.seq_id, feats, self.device)
                if not torch.isfinite(pooled).all():
                    raise NonFiniteError(f"non-finite values in {self.key} ({key}) of seq {s.seq_id}")
                w.put(path, s.seq_id, cache_io.pt_bytes(pooled))


def trusted_roots_add(root: str) -> None:
    """Add root to CATPRED_TRUSTED_DESERIALIZATION_ROOTS (os.pathsep-separated), the
    folders CatPred unpickles checkpoints from (catpred/security/deserialization.py)."""
    name = "CATPRED_TRUSTED_DESERIALIZATION_ROOTS"
    have = [p for p in os.environ.get(name, "").split(os.pathsep) if p.strip()]
    if os.path.abspath(root) not in {os.path.abspath(p) for p in have}:
        have.append(os.path.abspath(root))
    os.environ[name] = os.pathsep.join(have)


def offline_esm(esm_utils: Any, model: FairESM) -> None:
    """Give CatPred's esm_utils the locally loaded ESM-2 (its ``GLOBAL_VARIABLES['model']``
    = (model, batch converter), what ``init_esm`` stores) and make ``init_esm`` a no-op,
    so ``get_single_esm_repr`` never reaches the torch hub."""
    esm_utils.GLOBAL_VARIABLES["model"] = (model.model, model.converter)
    esm_utils.init_esm = lambda: None


# CatPred's residue index (catpred_embed_gpu.py).
CATPRED_AA = {a: i for i, a in enumerate("ARNDCQEGHILKMFPSTWYV")}


def catpred_pool(model: Any, sequence: str, seq_id: str, esm_feature: Any, device: Any) -> Any:
    """CatPred's pooled sequence representation, the steps its GPU script documents:
    seq_embedder -> rotary queries/keys -> multi-head attention -> optional ESM
    concatenation -> attentive pooling (or mean) -> optional EGNN features."""
    import torch

    try:
        idx = [CATPRED_AA[a] for a in sequence]
    except KeyError as exc:
        raise BatchError(f"seq {seq_id}: residue {exc.args[0]} has no CatPred index") from exc
    seq_arr = torch.as_tensor(idx, device=device, dtype=torch.long).unsqueeze(0)
    feats = esm_feature.to(device).unsqueeze(0)
    n = min(seq_arr.shape[1], feats.shape[1])
    seq_arr, feats = seq_arr[:, :n], feats[:, :n]
    outs = model.seq_embedder(seq_arr)
    q = k = model.rotary_embedder.rotate_queries_or_keys(outs, seq_dim=1)
    outs, _ = model.multihead_attn(q, k, outs)
    if model.args.add_esm_feats:
        outs = torch.cat([feats, outs], dim=-1)
    if not model.args.skip_attentive_pooling:
        pooled, _ = model.attentive_pooler(outs)
    else:
        pooled = outs.mean(dim=1)
    if getattr(model.args, "add_pretrained_egnn_feats", False):
        table = model.pretrained_egnn_feats_dict
        extra = table[seq_id] if seq_id in table else model.pretrained_egnn_feats_avg
        pooled = torch.cat([pooled, extra.to(device).unsqueeze(0)], dim=-1)
    return pooled.squeeze(0).detach().cpu()


class MethodEEmbedKcat(MethodEEmbed):
    key = "methode_embed_kcat"
    parameter = "kcat"


class MethodEEmbedKm(MethodEEmbed):
    key = "methode_embed_km"
    parameter = "km"


STEPS: dict[str, Callable[[], Step]] = {
    c.key: c
    for c in (
        ProtT5Mean,
        MethodAT5Full,
        MethodAESM2Layers,
        MethodAESMCLayers,
        MethodKESMCMean,
        MethodDESM1b,
        MethodFESM1v,
        MethodEEmbedKcat,
        MethodEEmbedKm,
        MethodGESM2,
        MethodHESM2LastMean,
        MethodIProtT5Residues,
    )
}
# Deprecated keys kinflow maps to methoda_t5_full, which covers binding sites and ProtT5.
STEPS["methoda_bindsites"] = MethodAT5Full
STEPS["methoda_prott5_layers"] = MethodAT5Full
