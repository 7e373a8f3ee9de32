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


def progress_view(st: JobStatus) -> tuple[str, int, int | None, str, str]:
    """What the bar shows for one status: description, done, total, unit, postfix.

    While the running stage still has embedding files to compute, the bar
    counts files (cached + computed of total); otherwise it counts the
    stage's predictions. A finished job shows its bar full.
    """
    stage = st.active_stage
    if stage is None and st.stages and st.done:
        stage = st.stages[-1]
    desc = st.status
    if stage is not None:
        n = max(st.total_stage_count, len(st.stages))
        desc = f"{st.status} stage {stage.index + 1}/{n} {stage.target}·{stage.method_key}"
    emb = stage.embedding if stage is not None else st.embedding
    post: list[str] = []
    if st.status == "Pending" and st.queue_position is not None:
        post.append(f"queue position {st.queue_position}")
    if emb is not None and emb.total > 0:
        post.append(f"embeddings {emb.done}/{emb.total} ({emb.computed} computed, {emb.remaining} remaining)")
    if stage is not None and stage.predictions_cached > 0:
        post.append(f"{stage.predictions_cached} predictions from the cache")
    if st.synthetic:
        post.append("synthetic")
    if emb is not None and emb.total > 0 and emb.remaining > 0 and st.status != "Completed":
        return desc, emb.done, emb.total, "files", ", ".join(post)
    done = stage.predictions_made if stage is not None else st.predictions_made
    total = stage.predictions_total if stage is not None else st.predictions_total
    if st.status == "Completed" and total:
        done = total
    return desc, done, (total or None), "rows", ", ".join(post)


# No rate and no ETA: the count jumps between stages and between files and
# rows, so a rate computed by tqdm would be meaningless.
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"


class ProgressBar:
    """A tqdm bar fed by job statuses."""

    def __init__(self, job_id: str, file: IO[str] | None = None) -> None:
        kw: dict[str, Any] = {"file": file} if file is not None else {}
        self._bar = bar_class(file)(
            total=None, desc=f"job {job_id}", unit="rows", leave=True, dynamic_ncols=True, bar_format=BAR_FORMAT, **kw
        )

    def note(self, text: str) -> None:
        """Show a passing remark (the server is unreachable) in place of the details."""
        self._bar.set_postfix_str(text, refresh=True)

    def update(self, st: JobStatus) -> None:
        desc, done, total, unit, post = progress_view(st)
        bar = self._bar
        bar.unit = unit
        bar.total = total
        bar.n = done
        bar.set_description_str(desc, refresh=False)
        bar.set_postfix_str(post, refresh=False)
        bar.refresh()

    def close(self) -> None:
        self._bar.close()
