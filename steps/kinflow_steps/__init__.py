"""kinflow's GPU step programs: real embedding artefacts from the field's model libraries.

One program, ``python -m kinflow_steps --step KEY``, serves every active step key
(kinflow_steps.steps.STEPS) with the resident protocol of docs/gpu-host.md, or one batch with
``--manifest FILE``. See steps/README.md.
"""

import os as _os

__version__ = "0.1.0"


def _inductor_cache_per_install() -> None:
    """Point torch.compile's kernel cache (KINFLOW_STEPS_COMPILE) at a folder of this
    PyTorch installation's own, unless TORCHINDUCTOR_CACHE_DIR is set. Its default,
    /tmp/torchinductor_<user>, is shared by every install of one user, and a CPU kernel
    built under one venv's torch failed to load under another venv's torch of the same
    version (undefined symbol Sleef_expf16_u10: a fresh clone's CI run beside the
    checkout). Set at import, before anything in torch can fill in its default (torch's
    cache_dir() writes the default into the environment on first use); torch is only
    located here, not imported."""
    if _os.environ.get("TORCHINDUCTOR_CACHE_DIR", "").strip():
        return
    import getpass
    import hashlib
    import importlib.metadata
    import importlib.util
    import tempfile

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        user = str(_os.getuid())
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    where = hashlib.sha256(_os.path.realpath(spec.origin).encode()).hexdigest()[:12]
    _os.environ["TORCHINDUCTOR_CACHE_DIR"] = _os.path.join(
        tempfile.gettempdir(), f"torchinductor_{user}_{version}_{where}"
    )


_inductor_cache_per_install()
