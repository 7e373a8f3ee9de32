"""Cache writes (docs/embedding.md, "Writing artefacts") and the binding-site table.

Every artefact is written to a hidden temp file ``.<sid>.<random><suffix>`` in its
final folder, fsynced, then renamed into place, so no reader or planner ever sees a
partial file and a watcher sees one moved-to event. Before the rename, the folder's
``manifest.json`` is merged under the same lock file kinflow's Go writers take
(``.manifest.lock``, flock), so kinflow writers never lose each other's entries; each
entry records the file's size, modification time (``mtime_ns``), inode change time
(``ctime_ns``), inode number (``ino``) and SHA-256, which kinflow's planner compares
before a model reads the file (internal/embedding's integrity check). Recording first
means a file is never visible without its record (kinflow sets an unrecorded file
aside). The rename moves the inode change time, so ``record_renamed`` records the
final one afterwards; without it the planner hashes the file once and records it.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import io
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

MANIFEST_NAME = "manifest.json"

#: Test knob: KINFLOW_STEPS_TEST_KILL_AT=N makes the process SIGKILL itself at the N-th
#: point of the write protocol (``point``), counted over all threads, so that a test can
#: kill a step server at every point in turn (steps/tests/test_pipeline.py).
_KILL_AT = int(os.environ.get("KINFLOW_STEPS_TEST_KILL_AT", "0").strip() or 0)
_points = 0
_points_lock = threading.Lock()


def point(what: str) -> None:
    """A point of the write protocol (a file staged, a manifest merged, a file
    published): nothing happens unless the test knob KINFLOW_STEPS_TEST_KILL_AT names
    it."""
    global _points
    if not _KILL_AT:
        return
    with _points_lock:
        _points += 1
        if _points == _KILL_AT:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)


#: The media root's identity marker, at its top (internal/mediaroot.MarkerName).
MEDIA_MARKER = ".kinflow-media-root"

#: The identity the GPU host found at its start (the marker's id), in the step
#: programs' environment; unset (a test, a scratch root) checks nothing.
MEDIA_ROOT_ID_ENV = "KINFLOW_MEDIA_ROOT_ID"

_media_root = ""


class MediaRootUnavailable(OSError):
    """The media root is not there with its identity marker: renamed away, unmounted,
    another root at its path. The text is kinflow's (internal/mediaroot)."""


def use_media_root(root: str) -> None:
    """Name the media root the batches write under (their manifests' ``media_root``):
    ``ensure_folder`` creates folders below it only while it holds its marker."""
    global _media_root
    _media_root = os.path.abspath(root) if root else ""


def _media_root_id(root: str) -> str:
    try:
        with open(os.path.join(root, MEDIA_MARKER), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return ""
    return str(doc.get("id", "")) if isinstance(doc, dict) else ""


def ensure_folder(folder: str) -> None:
    """Create folder for a writer. Under the media root (``use_media_root``), when the
    GPU host passed its identity (KINFLOW_MEDIA_ROOT_ID), only while the root holds a
    marker with that id, one level at a time below it and never the root itself, as
    kinflow's Go writers do (internal/mediaroot): a root renamed away or unmounted
    during a batch fails the write instead of growing a new tree at its old path that
    the real root later hides. Elsewhere: os.makedirs."""
    if os.path.isdir(folder):
        return
    root = _media_root
    want = os.environ.get(MEDIA_ROOT_ID_ENV, "")
    target = os.path.abspath(folder)
    if not want or not root or not (target == root or target.startswith(root + os.sep)):
        os.makedirs(folder, exist_ok=True)
        return
    if _media_root_id(root) != want:
        raise MediaRootUnavailable("media root unavailable: it is not there with its identity marker")
    current = root
    for part in os.path.relpath(target, root).split(os.sep) if target != root else []:
        current = os.path.join(current, part)
        try:
            os.mkdir(current)
        except FileExistsError:
            pass
        except FileNotFoundError as exc:
            raise MediaRootUnavailable("media root unavailable: it went away during the write") from exc


MANIFEST_LOCK = ".manifest.lock"
BINDING_SITE_HEADER = "PDB\tPred_BS_Scores"
BINDING_SITE_TABLE = "binding_sites_all.tsv"


def valid_seq_id(sid: str) -> bool:
    """Report whether sid is safe as a file name: internal/embedding.ValidSeqID's rule
    (1 to 128 bytes, no '/', '\\', '..', blank or control character, no leading '.';
    legacy ids such as ``P0A7B8.2`` pass) plus the GPU host's CheckSeqID (no ',', no
    leading '-')."""
    b = sid.encode("utf-8", "surrogatepass")
    if not 1 <= len(b) <= 128 or sid.startswith((".", "-")) or ".." in sid:
        return False
    return not any(c in "/\\," or ord(c) <= 0x20 or ord(c) == 0x7F for c in sid)


@contextmanager
def flocked(path: str):
    """Hold an exclusive flock on path (created if absent) for the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _write_temp(path: str, data: bytes, protocol_point: bool) -> tuple[str, os.stat_result]:
    """Write data to a hidden temp file ``.<stem>.<random><suffix>`` beside path, mode
    0644, fsynced; return its name and stat. Nothing is left behind on failure. With
    protocol_point, the write is the protocol's ``written`` point (the test kill knob
    counts it; a manifest rewrite is no point of its own)."""
    folder, name = os.path.split(path)
    stem, suffix = os.path.splitext(name)
    ensure_folder(folder)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=suffix, dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), 0o644)
            if protocol_point:
                point("written")
            os.fsync(f.fileno())
            st = os.fstat(f.fileno())
    except BaseException:
        _remove(tmp)
        raise
    return tmp, st


def write_bytes_atomic(path: str, data: bytes) -> int:
    """Write data to path through a hidden temp file + fsync + rename; return its size."""
    tmp, _ = _write_temp(path, data, protocol_point=False)
    try:
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise
    return len(data)


@dataclass
class Staged:
    """A file written and fsynced under its hidden temp name, not yet visible."""

    tmp: str
    path: str
    nbytes: int
    mtime_ns: int
    sha256: str
    ctime_ns: int = 0
    ino: int = 0

    def publish(self) -> None:
        """Rename the temp file into place (its modification time is kept)."""
        os.replace(self.tmp, self.path)
        point("published")

    def discard(self) -> None:
        _remove(self.tmp)


def stage_bytes(path: str, data: bytes) -> Staged:
    """Write data to a hidden, fsynced temp file beside path (not renamed yet) and
    return its integrity record."""
    tmp, st = _write_temp(path, data, protocol_point=True)
    staged = Staged(tmp, path, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest(), st.st_ctime_ns, st.st_ino)
    point("staged")
    return staged


def npy_bytes(arr: np.ndarray) -> bytes:
    """Encode arr as NPY (format 1.0), C order."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def pt_bytes(tensor) -> bytes:
    """Encode a CPU tensor with torch.save (zip format). The tensor is cloned so a view
    does not drag its whole storage into the file."""
    import torch

    buf = io.BytesIO()
    torch.save(tensor.detach().to("cpu").contiguous().clone(), buf)
    return buf.getvalue()


@dataclass
class Commit:
    """One artefact written, for the manifest merge: its size and, when known, its
    modification time and SHA-256 (the integrity record). ``synthetic`` keeps the
    flag for a stand-in's files; a real model's files carry none."""

    seq_id: str
    filename: str
    nbytes: int
    sha256: str = ""
    mtime_ns: int = 0
    synthetic: bool = False
    ctime_ns: int = 0
    ino: int = 0


def merge_manifest(folder: str, commits: Iterable[Commit]) -> None:
    """Add commits to folder/manifest.json: compact JSON, sorted keys,
    atomically replaced; fields other writers put there are kept."""
    commits = list(commits)
    if not commits:
        return
    ensure_folder(folder)
    with flocked(os.path.join(folder, MANIFEST_LOCK)):
        path = os.path.join(folder, MANIFEST_NAME)
        doc, entries = _read_manifest(path)
        now = time.time()
        for c in commits:
            e = entries.get(c.seq_id)
            if not isinstance(e, dict):
                e = {}
            e.update(bytes=c.nbytes, filename=c.filename, ready=True, updated_at=now)
            if c.synthetic:
                e["synthetic"] = True
            else:
                e.pop("synthetic", None)
            if c.sha256:
                e.update(sha256=c.sha256, mtime_ns=c.mtime_ns)
                # A code left from the old record would make the new one
                # look forged; with the host's record key the new record
                # carries its own (record_mac), so a job that plans on the
                # file before the host records it after the batch believes it.
                e.pop("mac", None)
                if c.ctime_ns or c.ino:
                    e.update(ctime_ns=c.ctime_ns, ino=c.ino)
                    mac = record_mac(folder, c.seq_id, c.nbytes, c.mtime_ns, c.ctime_ns, c.ino, c.sha256, c.synthetic)
                    if mac:
                        e["mac"] = mac
                else:
                    e.pop("ctime_ns", None)
                    e.pop("ino", None)
            else:
                # A stale record would make the planner set the new file aside.
                for k in RECORD_KEYS:
                    e.pop(k, None)
            entries[c.seq_id] = e
        _write_manifest(path, doc, entries, now)
    point("recorded")


RECORD_KEYS = ("sha256", "mtime_ns", "ctime_ns", "ino", "mac")

# The record key's file, named by the GPU host (internal/embedding,
# recordkey.go): the same key, and the same code, as kinflow's Go writers.
ENV_RECORD_KEY_FILE = "KINFLOW_CACHE_RECORD_KEY_FILE"
_MIN_RECORD_KEY_BYTES = 16


def _record_key() -> bytes | None:
    path = os.environ.get(ENV_RECORD_KEY_FILE, "")
    if not path:
        return None
    with open(path, "rb") as f:
        key = f.read().rstrip(b" \t\r\n")
    if len(key) < _MIN_RECORD_KEY_BYTES:
        raise ValueError(f"cache record key {path}: {len(key)} bytes, want at least {_MIN_RECORD_KEY_BYTES}")
    return key


def _record_scope(folder: str) -> str:
    d = os.path.normpath(folder).replace(os.sep, "/")
    i = d.rfind("/sequence_info/")
    if i >= 0:
        return d[i + len("/sequence_info/") :]
    return os.path.basename(d)


def record_mac(
    folder: str, seq_id: str, nbytes: int, mtime_ns: int, ctime_ns: int, ino: int, sha256: str, synthetic: bool
) -> str:
    """The record's authentication code under the host's record key ("" without one):
    HMAC-SHA256 over length-prefixed strings and big-endian 64-bit numbers, as
    internal/embedding's recordMAC makes it."""
    key = _record_key()
    if key is None:
        return ""
    m = hmac.new(key, digestmod=hashlib.sha256)

    def text(v: str) -> None:
        b = v.encode()
        m.update(len(b).to_bytes(8, "big"))
        m.update(b)

    def num(v: int) -> None:
        m.update((v & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big"))

    text("kinflow cache record v1")
    text(_record_scope(folder))
    text(seq_id)
    num(nbytes)
    num(mtime_ns)
    num(ctime_ns)
    num(ino)
    text(sha256.lower())
    num(1 if synthetic else 0)
    return m.hexdigest()


def _read_manifest(path: str) -> tuple[dict, dict]:
    doc: dict = {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict):
            doc = {}
    except FileNotFoundError:
        pass
    except ValueError:
        doc = {}
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        entries = {}
    return doc, entries


def _write_manifest(path: str, doc: dict, entries: dict, now: float) -> None:
    doc.update(count=len(entries), entries=entries, updated_at=now, version=1)
    write_bytes_atomic(path, json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


def record_renamed(folder: str, commits: Iterable[Commit]) -> None:
    """Record the final inode change time of files just renamed into place (the rename
    moves it): internal/embedding.RecordRenamed's rule. Only an entry that still holds
    the commit's hash, of a file whose size, modification time and inode are the
    recorded ones, is updated; any other is hashed by kinflow's next check."""
    updates = []
    for c in commits:
        if not c.sha256:
            continue
        try:
            st = os.lstat(os.path.join(folder, c.filename))
        except OSError:
            continue
        if (st.st_size, st.st_mtime_ns, st.st_ino) != (c.nbytes, c.mtime_ns, c.ino) or st.st_ctime_ns == c.ctime_ns:
            continue
        updates.append((c, st.st_ctime_ns))
    if not updates:
        return
    with flocked(os.path.join(folder, MANIFEST_LOCK)):
        path = os.path.join(folder, MANIFEST_NAME)
        doc, entries = _read_manifest(path)
        changed = False
        for c, ctime_ns in updates:
            e = entries.get(c.seq_id)
            if isinstance(e, dict) and e.get("sha256") == c.sha256 and e.get("ino") == c.ino:
                e["ctime_ns"] = ctime_ns
                # The code covers the change time: made again for the new one.
                mac = record_mac(
                    folder, c.seq_id, c.nbytes, c.mtime_ns, ctime_ns, c.ino, c.sha256, bool(e.get("synthetic"))
                )
                if mac:
                    e["mac"] = mac
                else:
                    e.pop("mac", None)
                changed = True
        if changed:
            _write_manifest(path, doc, entries, time.time())


def read_binding_sites(path: str, want: set[str]) -> dict[str, np.ndarray]:
    """Per-residue binding-site probabilities of the wanted ids (float64; the last row
    of a repeated id wins). The id column is ``PDB``, else the first column; a line
    without a final newline is a write in progress and is skipped; a missing file is
    empty (as in internal/embedding/bindingsite.go)."""
    out: dict[str, np.ndarray] = {}
    try:
        f = open(path, encoding="utf-8", errors="replace", newline="")
    except FileNotFoundError:
        return out
    id_col, score_col = -1, -1
    with f:
        # Streamed: the table grows with every sequence ever embedded, and only
        # the wanted rows are split and parsed.
        for i, raw in enumerate(f):
            if not raw.endswith("\n"):
                break  # a write in progress
            line = raw.rstrip("\r\n")
            if i == 0:
                names = [c.strip() for c in line.split("\t")]
                if "PDB" in names:
                    id_col = names.index("PDB")
                    score_col = names.index("Pred_BS_Scores") if "Pred_BS_Scores" in names else -1
                    continue
                id_col, score_col = 0, 1
            cols = line.split("\t", max(id_col, score_col) + 1)
            if id_col >= len(cols) or cols[id_col] not in want:
                continue
            scores = cols[score_col] if 0 <= score_col < len(cols) else ""
            vals = [float(p) for p in scores.strip().split(",") if p.strip()]
            out[cols[id_col]] = np.asarray(vals, dtype=np.float64)
    return out


def score_text(v: float) -> str:
    """A binding-site probability at its full float32 precision: the shortest decimal
    that reads back to the same float32 (the reference weights with the predictor's raw
    float32 values; a 6-decimal row would change them). NaN is written ``nan``."""
    return np.format_float_positional(np.float32(v), unique=True, trim="-")


def append_binding_sites(path: str, rows: dict[str, Iterable[float]]) -> list[str]:
    """Append rows to the table under ``<path>.lock`` (the Go writer's lock), header
    first for a new file, skipping ids that already have a row and cutting a torn last
    line; one fsynced write; scores at full float32 precision (score_text). Returns the
    ids written."""
    if not rows:
        return []
    for sid in rows:
        if not valid_seq_id(sid):
            raise ValueError(f"binding sites: invalid seq id {sid!r}")
    ensure_folder(os.path.dirname(path))
    with flocked(path + ".lock"):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(fd, "r+b") as f:
            data = f.read()
            end = data.rfind(b"\n") + 1
            if end != len(data):
                f.truncate(end)
                data = data[:end]
            have = set()
            text = data.decode("utf-8", errors="replace")
            lines = text.split("\n")[:-1]
            id_col = 0
            if lines:
                names = [c.strip() for c in lines[0].rstrip("\r").split("\t")]
                if "PDB" in names:
                    id_col = names.index("PDB")
                    lines = lines[1:]
            for line in lines:
                cols = line.rstrip("\r").split("\t")
                if id_col < len(cols):
                    have.add(cols[id_col])
            out = []
            if end == 0:
                out.append(BINDING_SITE_HEADER + "\n")
            written = []
            for sid, scores in rows.items():
                if sid in have:
                    continue
                have.add(sid)
                out.append(sid + "\t" + ",".join(score_text(v) for v in scores) + "\n")
                written.append(sid)
            if not written:
                return []
            f.seek(end)
            f.write("".join(out).encode())
            f.flush()
            os.fsync(f.fileno())
    return written
