"""The job progress bar (tqdm.auto: a text bar in a terminal, a widget in Jupyter)."""

from __future__ import annotations

import importlib.util
import sys
from typing import IO, Any

from tqdm.std import tqdm

from ._models import JobStatus


def _in_jupyter() -> bool:
    """Whether this runs in a Jupyter kernel (a notebook, JupyterLab, nbclient)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except AttributeError:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def bar_class(file: IO[str] | None) -> type[tqdm]:  # type: ignore[type-arg]
    """The notebook widget bar in Jupyter when ipywidgets is installed (the ``notebook``
    extra), else the text bar; chosen here rather than by ``tqdm.auto``, which warns at
    import in a notebook without ipywidgets."""
    if file is None and _in_jupyter() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm
    return tqdm


def _clock(seconds: int) -> str:
    """m:ss (h:mm:ss from an hour), as the web page and the CLI write times."""
    h, rest = divmod(max(0, seconds), 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def progress_view(st: JobStatus) -> tuple[float, str]:
    """What the bar shows for one status: the whole job's percentage and the text beside it.

    Both come from the status's ``overall`` (the job as one percentage, the
    same sentence the CLI and the web page show), so the bar runs once from
    0 to 100 % over every stage instead of restarting per stage. The
    sentence's own leading percentage is left to the bar; its ETA ("about
    40 s left") is the server's, given only once it is meaningful, and is
    repeated as "ETA m:ss". A server without ``overall`` gets 0 % until the
    job is done.
    """
    o = st.overall
    post: list[str] = []
    if o is None:
        pct = 100.0 if st.status == "Completed" else 0.0
        post.append(st.status)
    else:
        pct = 100.0 if st.status == "Completed" else min(100.0, max(0.0, o.percent))
        text = o.text
        head = text.split(" · ", 1)
        if len(head) == 2 and head[0].endswith("%"):
            text = head[1]
        post.append(text.rstrip("."))
        if o.eta_seconds and st.status not in ("Completed", "Failed"):
            post.append(f"ETA {_clock(o.eta_seconds)}")
    if st.synthetic:
        post.append("synthetic")
    return pct, " · ".join(post)


# The job as one bar from 0 to 100 %. No tqdm rate or ETA: the server's ETA
# (in the postfix) knows the job's stages, tqdm's would not.
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| [{elapsed}{postfix}]"


class ProgressBar:
    """One tqdm bar for the whole job, fed by job statuses (their ``overall``)."""

    def __init__(self, job_id: str, file: IO[str] | None = None) -> None:
        kw: dict[str, Any] = {"file": file} if file is not None else {}
        self._bar = bar_class(file)(
            total=100, desc=f"job {job_id}", unit="%", leave=True, dynamic_ncols=True, bar_format=BAR_FORMAT, **kw
        )

    def note(self, text: str) -> None:
        """Show a passing remark (the server is unreachable) in place of the details."""
        self._bar.set_postfix_str(text, refresh=True)

    def update(self, st: JobStatus) -> None:
        pct, post = progress_view(st)
        bar = self._bar
        bar.n = pct
        bar.set_postfix_str(post, refresh=False)
        bar.refresh()

    def close(self) -> None:
        self._bar.close()
