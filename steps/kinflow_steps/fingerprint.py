"""The step program's fingerprint (kinflow's internal/provenance, docs/gpu-host.md).

A fingerprint says what makes a step's files: the model, the SHA-256 of every weights
file, the precision policy, the versions of the libraries that compute the numbers and
this package's own version. The GPU host records it beside each family's files and
refuses to mix files of two models. Sums are remembered by path, size and mtime in a
small JSON file (``KINFLOW_HASH_CACHE``, default ``~/.cache/kinflow/sha256.json``, the
same file kinflow's Go side uses), so a 650M checkpoint is read once, not at every start.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata

from kinflow_steps import __version__

# Weights of each step: groups of env vars, the first set one of a group wins (as in
# models.py's require_path). Folders are hashed file by file.
_T5 = (("KINFLOW_PROT_T5_PATH", "METHODA_T5_MODEL_PATH"),)
_ESM2 = (("KINFLOW_ESM2_650M_PATH",),)
WEIGHTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "prot_t5_mean": _T5,
    "methoda_t5_full": _T5,
    "methodi_prot_t5_residues": _T5,
    "methoda_esm2_layers": _ESM2,
    "methodg_esm2": _ESM2,
    "methodh_esm2_last_mean": _ESM2,
    "methoda_esmc_layers": (("KINFLOW_ESMC_600M_PATH",),),
    "methodk_esmc_mean": (("KINFLOW_ESMC_600M_PATH",),),
    "methodd_esm1b": (("KINFLOW_ESM1B_PATH",), ("KINFLOW_METHODD_CHECKPOINT",)),
    "methodf_esm1v": (("KINFLOW_ESM1V_PATH", "METHODF_MODEL_PATH"),),
    # Method E's features come from ESM-2 650M (catpred_steps.py's MethodEEmbed.load).
    "methode_embed_kcat": (("METHODE_CHECKPOINT_ROOT",), ("KINFLOW_CATPRED_ROOT",)) + _ESM2,
    "methode_embed_km": (("METHODE_CHECKPOINT_ROOT",), ("KINFLOW_CATPRED_ROOT",)) + _ESM2,
}
# Libraries whose versions can change a step's numbers.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "prot_t5": ("torch", "transformers"),
    "esmc": ("torch", "esm"),
    "esm": ("torch", "fair-esm"),
}


def _libraries(step_key: str) -> dict[str, str]:
    if "t5" in step_key:
        names = LIBRARIES["prot_t5"]
    elif "esmc" in step_key:
        names = LIBRARIES["esmc"]
    else:
        names = LIBRARIES["esm"]
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = "absent"
    return out


def _cache_path() -> str:
    p = os.environ.get("KINFLOW_HASH_CACHE", "").strip()
    if p:
        return p
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kinflow", "sha256.json")


class HashCache:
    """SHA-256 sums remembered by absolute path, size and mtime (nanoseconds)."""

    def __init__(self, path: str | None = None):
        self.path = _cache_path() if path is None else path
        self.entries: dict[str, dict] = {}
        self.dirty = False
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            if isinstance(data, dict):
                self.entries = data
        except (OSError, ValueError):
            pass

    def sum(self, path: str) -> str:
        path = os.path.abspath(path)
        st = os.stat(path)
        e = self.entries.get(path)
        if isinstance(e, dict) and e.get("size") == st.st_size and e.get("mtime_ns") == st.st_mtime_ns:
            return str(e.get("sha256", ""))
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = h.hexdigest()
        self.entries[path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
        self.dirty = True
        return digest

    def tree(self, path: str) -> dict[str, str]:
        """{relative name: sum} of every file under path (a file: its base name).
        Python's bytecode caches (``__pycache__``, ``*.pyc``) are left out: importing a
        source tree such as KINFLOW_CATPRED_ROOT writes them, and the fingerprint must
        not change because the program ran."""
        if os.path.isfile(path):
            return {os.path.basename(path): self.sum(path)}
        out = {}
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".pyc"):
                    continue
                p = os.path.join(root, name)
                if os.path.isfile(p):
                    out[os.path.relpath(p, path).replace(os.sep, "/")] = self.sum(p)
        return out

    def save(self) -> None:
        if not self.dirty or not self.path:
            return
        try:
            folder = os.path.dirname(self.path)
            os.makedirs(folder, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sha256-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.entries, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            pass  # only costs a rehash at the next start


def weights_of(step_key: str, cache: HashCache) -> tuple[str, dict[str, str]]:
    """The model name (the configured paths' base names joined by "+") and {name:
    sha256} of the step's configured weights (names are the configured path's base
    name, then the file's path inside a folder)."""
    out = {}
    models = []
    for group in WEIGHTS.get(step_key, ()):
        for name in group:
            value = os.environ.get(name, "").strip()
            if value and os.path.exists(value):
                base = os.path.basename(os.path.normpath(value))
                models.append(base)
                for rel, digest in cache.tree(value).items():
                    out[base if os.path.isfile(value) else f"{base}/{rel}"] = digest
                break
    return "+".join(models), out


def fingerprint(step) -> dict:
    """The fingerprint of a constructed step (its device and dtype picked, the model
    not necessarily loaded), as kinflow's provenance.Fingerprint reads it. It is the
    same before and after loading, so the ready line and ``--fingerprint`` agree."""
    cache = HashCache()
    try:
        model, weights = weights_of(step.key, cache)
    finally:
        cache.save()
    dtype = str(getattr(step, "dtype", "")).replace("torch.", "")
    if dtype and hasattr(step, "precision_note"):
        dtype += getattr(step, "tf32_note", "") + step.precision_note()
    fp = {
        "model": model or step.key,
        "weights": weights,
        "precision": dtype,
        "libraries": _libraries(step.key),
        "program": f"kinflow_steps {step.key}",
        "program_version": __version__,
    }
    return {k: v for k, v in fp.items() if v}
