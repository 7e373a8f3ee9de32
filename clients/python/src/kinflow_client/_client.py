"""Client and Job: the public API of kinflow_client."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import httpx
import pandas as pd

from . import _constants as C
from . import _core as core
from ._errors import Conflict
from ._http import Transport, settings
from ._models import JobStatus, JobSummary, MethodInfo, Quota, ValidationReport
from ._results import InputData

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Target = Literal["kcat", "Km", "kcat/Km"]


class Client:
    """A connection to one kinflow server.

    ``base_url`` defaults to ``$KINFLOW_URL``, else ``http://127.0.0.1:8000``;
    ``api_key`` to ``$KINFLOW_API_KEY``. ``timeout`` (seconds per request)
    and ``max_retries`` (extra attempts of one request) default to
    ``$KINFLOW_TIMEOUT`` and ``$KINFLOW_MAX_RETRIES``, else 60 s and 5;
    ``wait_outage`` (how long ``Job.wait()`` keeps trying while the server
    cannot be reached) to ``$KINFLOW_WAIT_OUTAGE``, else 10 minutes.
    :meth:`with_options` gives the same client with other values for a few calls.

    Reads are retried with back-off on connection errors and on the answers
    "too many requests" and "service unavailable", waiting as long as the
    server asks; submits are retried only where that cannot charge twice
    (see :meth:`submit`). ``transport`` replaces httpx's transport (tests, proxies).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | None = None,
        max_retries: int | None = None,
        wait_outage: float | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = core._resolve_url(base_url)
        t, n = settings(timeout, max_retries)
        #: How long Job.wait() keeps trying while the server cannot be reached, in seconds.
        self.wait_outage = core._resolve_outage(wait_outage)
        self._t = Transport(
            self.base_url,
            core._resolve_key(api_key),
            timeout=t,
            max_retries=n,
            transport=transport,
            user_agent=core._user_agent(),
        )

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def timeout(self) -> float:
        """Seconds one request may take."""
        return self._t.timeout

    @property
    def max_retries(self) -> int:
        """Extra attempts of one request after a connection error or a retryable answer."""
        return self._t.max_retries

    def with_options(
        self, *, timeout: float | None = None, max_retries: int | None = None, wait_outage: float | None = None
    ) -> Client:
        """The same client (same server, key and connections) with other settings.

        ``client.with_options(timeout=300).submit(big_frame, ...)`` gives one
        call more time; values left at None stay as they are. Closing either
        client closes the connections of both.
        """
        out = copy.copy(self)
        out._t = self._t.copy(timeout=timeout, max_retries=max_retries)
        if wait_outage is not None:
            out.wait_outage = core._resolve_outage(wait_outage)
        return out

    def close(self) -> None:
        """Close the connections."""
        self._t.close()

    # -- service --------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Whether the server and what it depends on are up: ``{"status": "ok"|"unavailable", "checks": {...}}``.

        A server that reports a dependency down answers with that report; it is returned, not raised.
        """
        return self._t.send(core.health_call())

    def methods(self) -> list[MethodInfo]:
        """The prediction methods the server offers, one entry per (target, method)."""
        return self._t.send(core.methods_call())

    def quota(self) -> Quota:
        """How many rows the key may still submit today, and when that resets."""
        return self._t.send(core.quota_call())

    def generate_key(self) -> str:
        """Make the API key of this machine's address and use it from now on.

        The key is shown only once: keep it (for instance in ``KINFLOW_API_KEY``).
        An address that already has a key gets :class:`Conflict`.
        """
        key = self._t.send(core.generate_key_call())
        self._t.api_key = key
        return key

    # -- jobs -----------------------------------------------------------------

    def validate(
        self,
        data: InputData,
        targets: str | Sequence[str] | None = None,
        methods: str | Mapping[str, str] | None = None,
        *,
        run_similarity: bool = False,
    ) -> ValidationReport:
        """Check input rows without submitting them (no quota used).

        ``data`` is a DataFrame, a CSV path or a list of dicts, as for submit.
        With ``targets`` and ``methods`` (as for :meth:`submit`) the report is
        about the chosen methods only; without them, about every method.
        ``report.ok`` is False when rows would be skipped; ``report.to_frame()``
        lists them and ``report.summary()`` says it in sentences.
        """
        return self._t.send(core.validate_call(data, targets, methods, run_similarity))

    def submit(
        self,
        data: InputData,
        targets: str | Sequence[str] | None = None,
        methods: str | Mapping[str, str] | None = None,
        *,
        handle_long_sequences: Literal["truncate", "skip"] | None = None,
        use_experimental: bool | None = None,
        include_similarity_columns: bool | None = None,
        canonicalize_substrates: bool | None = None,
        disable_gpu_precompute: bool | None = None,
        use_prediction_cache: bool | None = None,
        priority: Literal["auto", "bulk"] | None = None,
        validate_first: bool = False,
        idempotency_key: str | None = None,
    ) -> Job:
        """Submit rows for prediction; returns the Job (queued, charged one unit per row).

        ``targets`` is one target or a list (``"kcat"``, ``"Km"``, ``"kcat/Km"``);
        ``methods`` maps each target to a method id (``{"kcat": "B", "Km": "C"}``),
        or is one id for a single target. ``targets`` may be left out when
        ``methods`` is a mapping. Options left at None keep the server's defaults
        (truncate long sequences, no experimental values, similarity columns,
        canonicalised substrates, GPU precompute, the prediction cache).
        Rows whose every prediction comes from the prediction cache, and rows
        that get no prediction, are given back to the quota when the job ends.

        ``priority="bulk"`` has the job served after interactive and normal
        work when the service is busy (``"auto"``, the server's default, lets
        the job's size decide).

        ``validate_first`` runs :meth:`validate` for the chosen methods and
        raises :class:`InvalidInput` with the report instead of submitting
        when a row is flagged.

        The submit carries an ``Idempotency-Key`` (``idempotency_key``, else a
        fresh uuid4) sent unchanged on every retry: against a server that
        honours it, an answer lost in transit is retried and returns the same
        job without a second charge. Pass your own key (and store it) to make
        a submit safe to repeat after a crash of your own process.
        """
        form = core.submit_form(
            targets,
            methods,
            handle_long_sequences,
            use_experimental,
            include_similarity_columns,
            canonicalize_substrates,
            disable_gpu_precompute,
            use_prediction_cache,
            priority,
        )
        if validate_first:
            core.refuse_flagged(self.validate(data, targets, methods))
        call, key = core.submit_call(data, form, idempotency_key)
        out = self._t.send(call)
        return Job(self, str(out["jobId"]), submitted=out, idempotency_key=key)

    def job(self, job_id: str) -> Job:
        """Re-attach to a job from its id (for instance after a crash). Raises NotFound."""
        job = Job(self, job_id)
        job.status()
        return job

    def iter_jobs(self, *, status: str | None = None, page_size: int = C.JOBS_PAGE_SIZE) -> Iterator[JobSummary]:
        """The key's own jobs, newest first, fetched page by page.

        ``status`` keeps only jobs in that status (several: comma-separated,
        ``"Pending,Processing"``). ``page_size`` is 1 to 100.
        """
        cursor: str | None = None
        while True:
            items, cursor = self._t.send(core.jobs_page_call(status, page_size, cursor))
            yield from items
            if cursor is None:
                return

    def jobs(self, *, status: str | None = None, limit: int | None = None) -> list[JobSummary]:
        """The key's own jobs, newest first (all of them, or the first ``limit``)."""
        out: list[JobSummary] = []
        for j in self.iter_jobs(status=status, page_size=core.jobs_page_size(limit)):
            out.append(j)
            if limit is not None and len(out) >= limit:
                break
        return out

    # -- used by Job ------------------------------------------------------------

    def _status(self, job_id: str) -> JobStatus:
        return self._t.send(core.status_call(job_id))

    def _result_json(self, job_id: str) -> dict[str, Any]:
        return self._t.send(core.result_json_call(job_id))

    def _result_csv(self, job_id: str) -> bytes:
        return self._t.send(core.result_csv_call(job_id))


class Job:
    """A submitted job. Keep ``job.id``: ``client.job(id)`` re-attaches to it later."""

    def __init__(
        self,
        client: Client,
        job_id: str,
        *,
        submitted: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.client = client
        self.id = job_id
        #: The submit's answer (jobId, status, quota, ...), when this Job came from submit().
        self.submitted: dict[str, Any] = dict(submitted or {})
        #: The Idempotency-Key its submit carried.
        self.idempotency_key = idempotency_key

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    def status(self) -> JobStatus:
        """The job's current status (Pending, Processing, Completed, Failed) and progress."""
        return self.client._status(self.id)

    def wait(
        self,
        progress: bool = True,
        timeout: float | None = None,
        *,
        file: IO[str] | None = None,
        poll_interval: float = C.POLL_INITIAL_INTERVAL,
        max_poll_interval: float = C.POLL_MAX_INTERVAL,
        outage: float | None = None,
    ) -> JobStatus:
        """Wait until the job is Completed and return its last status.

        Rides the server's long poll: each read waits on the server until the
        job changes, so a wait costs about one request per change. Against a
        server without it, asks at a growing interval (``poll_interval`` times
        1.5 per poll, up to ``max_poll_interval`` seconds). With ``progress`` a bar
        (``file``, default stderr; a widget in Jupyter with the ``notebook``
        extra) shows how far the job is.

        When the server cannot be reached, or answers with a server error,
        the wait keeps trying with growing, randomised pauses for up to
        ``outage`` seconds in a row (default: the client's ``wait_outage``,
        10 minutes), then raises :class:`ConnectionLost`. Raises
        :class:`JobFailed` when the job fails and :class:`WaitTimeout` after
        ``timeout`` seconds in all. Whenever it stops early (those errors, or
        Ctrl-C) the job keeps running on the server, and the message names
        the job and the line that re-attaches to it.
        """
        w = core._Waiter(
            self.id,
            progress=progress,
            timeout=timeout,
            file=file,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            outage=outage,
            default_outage=self.client.wait_outage,
        )
        steps = core.wait_steps(w)
        try:
            step = next(steps)
            while True:
                if isinstance(step, core.Sleep):
                    time.sleep(step.seconds)
                    step = steps.send(None)
                    continue
                try:
                    answer = self.client._t.send(step)
                except core._OUTAGE_ERRORS as e:
                    step = steps.throw(e)
                    continue
                step = steps.send(answer)
        except StopIteration as done:
            final: JobStatus = done.value
            return final
        except KeyboardInterrupt:
            raise KeyboardInterrupt(w.interrupted()) from None
        finally:
            steps.close()
            w.close()

    def result(self) -> pd.DataFrame:
        """The finished job's result as a DataFrame (raises Conflict before then: use :meth:`wait`).

        Prediction columns are floats with NaN for blank cells; ``Source …`` and
        ``Extra Info …`` are strings. ``df.attrs`` holds the rest of the answer:
        ``job_id``, ``columns``, ``rowCount``, ``synthetic``, the provenance,
        the charge and any notes on the columns. A synthetic result also
        raises a SyntheticResultWarning.
        """
        try:
            payload = self.client._result_json(self.id)
        except Conflict as e:
            raise core._not_finished(self.id, e) from None
        return core.frame_of(self.id, payload, self.client.base_url)

    def result_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write the result CSV, byte for byte as the server sends it, to ``path`` (atomically)."""
        try:
            data = self.client._result_csv(self.id)
        except Conflict as e:
            raise core._not_finished(self.id, e) from None
        return core._write_csv(self.id, data, path)

    def plot(self, **kwargs: Any) -> Figure:
        """The distribution of each predicted value of the result (see :func:`kinflow_client.plot_result`)."""
        from ._plot import plot_result

        return plot_result(self.result(), **kwargs)
