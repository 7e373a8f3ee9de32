"""A batch's file writer: every file staged under its hidden temp name, the folders'
manifest records merged, then the renames (cache_io holds the write protocol itself),
and the host part of a forward pass that feeds it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from kinflow_steps import cache_io


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
