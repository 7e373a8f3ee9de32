"""The batch vocabulary: a manifest (docs/gpu-host.md "Manifest in") as a Batch of
Seqs, the cache path of each file a sequence owes, and the split of a host batch into
forward passes (``pack``).
"""

from __future__ import annotations

import os
import string
from dataclasses import dataclass, field
from typing import Any

from kinflow_steps import cache_io
from kinflow_steps.errors import BatchError

SEQUENCE_INFO = "sequence_info"
#: What a manifest's sequence may hold: letters of either case. Case is kept and each
#: step treats its letters as its method's own code does (docs/method-cuts.md,
#: "Lower case and non-standard residues"); kinflow's GPU host sends only the 20
#: standard upper-case residues, so anything else comes from an operator's manifest.
LETTERS = frozenset(string.ascii_letters)


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
