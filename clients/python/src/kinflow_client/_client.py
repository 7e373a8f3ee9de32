"""Client and Job: the public API of kinflow_client."""

from __future__ import annotations

import copy
import json
import os
import random
import string
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

import httpx
import pandas as pd

from . import _constants as C
from ._errors import (
    APIConnectionError,
    Conflict,
    ConnectionLost,
    InvalidInput,
    JobFailed,
    ServerError,
    SyntheticResultWarning,
    WaitTimeout,
    reattach_hint,
)
from ._http import Transport, env_float, settings
from ._models import JobStatus, JobSummary, MethodInfo, Quota, ValidationReport
from ._progress import ProgressBar
from ._results import InputData, input_csv, result_frame
from ._version import __version__

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Target = Literal["kcat", "Km", "kcat/Km"]


# The API's job ids are letters, digits, '-' and '_': anything else never names a job.
_JOB_ID_CHARS = frozenset(string.ascii_letters + string.digits + "-_")


def _flag(v: bool) -> str:
    return "true" if v else "false"


def _job_path(kind: str, job_id: str) -> str:
    if not job_id or any(ch not in _JOB_ID_CHARS for ch in job_id):
        raise ValueError(f"invalid job id {job_id!r}: job ids are letters, digits, '-' and '_'")
    return f"/api/v1/{kind}/{job_id}/"


def _resolve_url(base_url: str | None) -> str:
    url = (base_url or os.environ.get(C.ENV_URL) or C.DEFAULT_BASE_URL).strip().rstrip("/")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    return url


def _resolve_key(api_key: str | None) -> str | None:
    return (api_key if api_key is not None else os.environ.get(C.ENV_API_KEY, "")).strip() or None


def _resolve_outage(outage: float | None) -> float:
    v = float(outage) if outage is not None else env_float(C.ENV_WAIT_OUTAGE, C.DEFAULT_WAIT_OUTAGE)
    if v < 0 or v != v:
        raise ValueError(f"wait_outage must be 0 seconds or more, not {outage!r}")
    return v


def _user_agent() -> str:
    return f"kinflow-client/{__version__} (python; httpx {httpx.__version__})"


def _methods_from_json(body: Any) -> list[MethodInfo]:
    out: list[MethodInfo] = []
    by_target = body.get("methods") if isinstance(body, dict) else None
    if not isinstance(by_target, dict):
        return out
    for target, entries in by_target.items():
        for m in entries if isinstance(entries, list) else []:
            if not isinstance(m, dict):
                continue
            msl = m.get("maxSeqLen")
            req = m.get("requiredColumns")
            out.append(
                MethodInfo(
                    target=str(target),
                    id=str(m.get("id", "")),
                    display_name=str(m.get("displayName", "")),
                    input_format=str(m.get("inputFormat", "")),
                    max_seq_len=msl if isinstance(msl, int) else None,
                    required_columns=[str(c) for c in req] if isinstance(req, list) else [],
                    raw=m,
                    gives_uncertainty=m.get("uncertainty") is not None and m.get("uncertainty") is not False,
                )
            )
    return out


def _validate_form(
    targets: str | Sequence[str] | None, methods: str | Mapping[str, str] | None, run_similarity: bool
) -> dict[str, str] | None:
    form: dict[str, str] = {}
    if run_similarity:
        form["runSimilarity"] = "true"
    if targets is not None or methods is not None:
        tlist, mmap = _selection(targets, methods)
        form["targets"] = json.dumps(tlist)
        form["methods"] = json.dumps(mmap)
    return form or None


def _submit_form(
    targets: str | Sequence[str] | None,
    methods: str | Mapping[str, str] | None,
    handle_long_sequences: str | None,
    flags: Sequence[tuple[str, bool | None]],
) -> dict[str, str]:
    tlist, mmap = _selection(targets, methods)
    form: dict[str, str] = {"targets": json.dumps(tlist), "methods": json.dumps(mmap)}
    if handle_long_sequences is not None:
        if handle_long_sequences not in ("truncate", "skip"):
            raise ValueError("handle_long_sequences must be 'truncate' or 'skip'")
        form["handleLongSequences"] = handle_long_sequences
    for name, value in flags:
        if value is not None:
            form[name] = _flag(value)
    return form


def _flags(
    use_experimental: bool | None,
    include_similarity_columns: bool | None,
    canonicalize_substrates: bool | None,
    disable_gpu_precompute: bool | None,
    use_prediction_cache: bool | None,
) -> list[tuple[str, bool | None]]:
    return [
        ("useExperimental", use_experimental),
        ("includeSimilarityColumns", include_similarity_columns),
        ("canonicalizeSubstrates", canonicalize_substrates),
        ("disableGpuPrecompute", disable_gpu_precompute),
        ("usePredictionCache", use_prediction_cache),
    ]


def _jobs_page(body: Any) -> tuple[list[JobSummary], str | None]:
    items = body if isinstance(body, list) else body.get("jobs", []) if isinstance(body, dict) else []
    out = [JobSummary.from_json(it) for it in items if isinstance(it, dict)]
    nxt = body.get("nextCursor") if isinstance(body, dict) else None
    return out, (nxt if isinstance(nxt, str) and nxt and items else None)


def _not_finished(job_id: str, e: Conflict) -> Conflict:
    """The 409 of a result asked too early, with advice for this client instead of the API's."""
    return Conflict(
        f"job {job_id} has not finished yet: wait for it with `job.wait()`, then call `job.result()` "
        f"(the server said: {e.message})",
        status=e.status,
        request_id=e.request_id,
        headers=e.headers,
        body=e.body,
    )


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning name the first line outside this package.

    Counted from the function that calls ``warnings.warn`` (level 1): a
    warning raised under ``job.plot()`` or an ``await job.result()`` points at
    the user's line, not at this package's frames in between.
    """
    frame = sys._getframe(1)
    level = 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _warn_synthetic(job_id: str, frame: pd.DataFrame) -> None:
    if frame.attrs.get("synthetic"):
        warnings.warn(
            f"job {job_id}: this result comes from kinflow's synthetic backends; "
            "its numbers are stand-ins, not predictions",
            SyntheticResultWarning,
            stacklevel=_user_stacklevel(),
        )


def _write_csv(job_id: str, data: bytes, path: str | os.PathLike[str]) -> Path:
    if C.SYNTHETIC_MARKER in data:
        warnings.warn(
            f"job {job_id}: this result comes from kinflow's synthetic backends; "
            "its numbers are stand-ins, not predictions (see the Source columns)",
            SyntheticResultWarning,
            stacklevel=_user_stacklevel(),
        )
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


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
        self.base_url = _resolve_url(base_url)
        t, n = settings(timeout, max_retries)
        #: How long Job.wait() keeps trying while the server cannot be reached, in seconds.
        self.wait_outage = _resolve_outage(wait_outage)
        self._t = Transport(
            self.base_url,
            _resolve_key(api_key),
            timeout=t,
            max_retries=n,
            transport=transport,
            user_agent=_user_agent(),
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
            out.wait_outage = _resolve_outage(wait_outage)
        return out

    def close(self) -> None:
        """Close the connections."""
        self._t.close()

    # -- service --------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Whether the server and what it depends on are up: ``{"status": "ok"|"unavailable", "checks": {...}}``.

        A server that reports a dependency down answers with that report; it is returned, not raised.
        """
        out: dict[str, Any] = self._t.get("/api/v1/health/", auth=False, ok=(200, 503)).json()
        return out

    def methods(self) -> list[MethodInfo]:
        """The prediction methods the server offers, one entry per (target, method)."""
        return _methods_from_json(self._t.get("/api/v1/methods/", auth=False).json())

    def quota(self) -> Quota:
        """How many rows the key may still submit today, and when that resets."""
        return Quota.from_json(self._t.get("/api/v1/quota/").json())

    def generate_key(self) -> str:
        """Make the API key of this machine's address and use it from now on.

        The key is shown only once: keep it (for instance in ``KINFLOW_API_KEY``).
        An address that already has a key gets :class:`Conflict`.
        """
        resp = self._t.post_unauthenticated("/api/api-key/generate/")
        key = str(resp.json()["key"])
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
        form = _validate_form(targets, methods, run_similarity)
        name, body = input_csv(data)
        resp = self._t.post("/api/v1/validate/", data=form, files={"file": (name, body, "text/csv")})
        return ValidationReport.from_json(resp.json())

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

        ``validate_first`` runs :meth:`validate` for the chosen methods and
        raises :class:`InvalidInput` with the report instead of submitting
        when a row is flagged.

        The submit carries an ``Idempotency-Key`` (``idempotency_key``, else a
        fresh uuid4) sent unchanged on every retry: against a server that
        honours it, an answer lost in transit is retried and returns the same
        job without a second charge. Pass your own key (and store it) to make
        a submit safe to repeat after a crash of your own process.
        """
        form = _submit_form(
            targets,
            methods,
            handle_long_sequences,
            _flags(
                use_experimental,
                include_similarity_columns,
                canonicalize_substrates,
                disable_gpu_precompute,
                use_prediction_cache,
            ),
        )
        if validate_first:
            report = self.validate(data, targets, methods)
            if not report.ok:
                raise InvalidInput(
                    f"{report.problems} row problem(s); nothing was submitted:\n{report.summary()}",
                    report=report,
                )
        name, body = input_csv(data)
        key = idempotency_key or str(uuid.uuid4())
        resp = self._t.post(
            "/api/v1/submit/",
            data=form,
            files={"file": (name, body, "text/csv")},
            headers={"Idempotency-Key": key},
            idempotent=True,
        )
        out = resp.json()
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
            params: dict[str, str] = {"limit": str(page_size)}
            if status:
                params["status"] = status
            if cursor:
                params["cursor"] = cursor
            items, cursor = _jobs_page(self._t.get("/api/v1/jobs/", params=params).json())
            yield from items
            if cursor is None:
                return

    def jobs(self, *, status: str | None = None, limit: int | None = None) -> list[JobSummary]:
        """The key's own jobs, newest first (all of them, or the first ``limit``)."""
        out: list[JobSummary] = []
        size = C.JOBS_PAGE_SIZE if limit is None else max(1, min(limit, C.JOBS_PAGE_SIZE))
        for j in self.iter_jobs(status=status, page_size=size):
            out.append(j)
            if limit is not None and len(out) >= limit:
                break
        return out

    # -- used by Job ------------------------------------------------------------

    def _status(self, job_id: str) -> JobStatus:
        return JobStatus.from_json(self._t.get(_job_path("status", job_id)).json())

    def _status_change(self, job_id: str, etag: str | None, wait: int) -> tuple[JobStatus | None, str | None]:
        """The status once it differs from ``etag`` (held by the server up to ``wait`` s), and its ETag.

        None for the status when it is still ``etag`` (304); None for the ETag from a server without them.
        """
        params, headers = _long_poll(etag, wait)
        resp = self._t.get(_job_path("status", job_id), params=params, headers=headers, ok=(200, 304), extra_time=wait)
        return _status_answer(resp, etag)

    def _result_json(self, job_id: str) -> dict[str, Any]:
        resp = self._t.get(_job_path("result", job_id), params={"format": "json"})
        # json.loads accepts the reference's bare NaN tokens (as float('nan')).
        out: dict[str, Any] = json.loads(resp.content)
        return out

    def _result_csv(self, job_id: str) -> bytes:
        return self._t.get(_job_path("result", job_id)).content


def _selection(
    targets: str | Sequence[str] | None, methods: str | Mapping[str, str] | None
) -> tuple[list[str], dict[str, str]]:
    if isinstance(targets, str):
        tlist = [targets]
    elif targets is None:
        tlist = list(methods) if isinstance(methods, Mapping) else []
    else:
        tlist = list(targets)
    if not tlist:
        raise ValueError("choose what to predict: targets='kcat', methods='B' (Client.methods() lists them)")
    if isinstance(methods, str):
        if len(tlist) != 1:
            raise ValueError("methods must map each target to a method id when there are several targets")
        mmap = {tlist[0]: methods}
    elif isinstance(methods, Mapping):
        mmap = {str(k): str(v) for k, v in methods.items()}
    else:
        raise ValueError("methods is required: a method id, or a mapping target -> method id")
    missing = [t for t in tlist if t not in mmap]
    if missing:
        raise ValueError(f"no method chosen for target(s) {', '.join(missing)}")
    return tlist, mmap


def _long_poll(etag: str | None, wait: int) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """The query and headers of a status read that waits for a change from ``etag``.
    The first read (no etag yet) carries ``waitSeconds`` too: the server answers it at
    once, and counts it among the waiting reads, whose per-key budget a looping poller
    of the same key cannot exhaust."""
    if not etag:
        return {"waitSeconds": str(wait)}, None
    return {"waitSeconds": str(wait)}, {"If-None-Match": etag}


def _status_answer(resp: httpx.Response, etag: str | None) -> tuple[JobStatus | None, str | None]:
    if resp.status_code == 304:
        return None, resp.headers.get("ETag") or etag
    return JobStatus.from_json(resp.json()), resp.headers.get("ETag")


# What Job.wait() treats as the server being away for a while (a restart, a
# proxy whose upstream is down): it keeps polling through these.
_OUTAGE_ERRORS = (APIConnectionError, ServerError)


class _Waiter:
    """The decisions of Job.wait() and AsyncJob.wait(), apart from how they sleep."""

    def __init__(
        self,
        job_id: str,
        *,
        progress: bool,
        timeout: float | None,
        file: IO[str] | None,
        poll_interval: float,
        max_poll_interval: float,
        outage: float,
    ) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.interval = poll_interval
        self.max_interval = max_poll_interval
        self.outage = outage
        self.file = file
        self.bar = ProgressBar(job_id, file) if progress else None
        self.down_since: float | None = None
        self.down_polls = 0
        self.last: JobStatus | None = None
        #: The last status's ETag: set, the next read waits on the server for a change.
        self.etag: str | None = None

    def hold(self) -> int:
        """Seconds the next read may wait on the server for a change (the wait's deadline permitting)."""
        if self.deadline is None:
            return C.LONG_POLL_WAIT
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(self.job_id, float(self.timeout or 0), self.last)
        return max(1, min(C.LONG_POLL_WAIT, int(left)))

    def unchanged(self) -> float:
        """The server answered 304 after its wait: ask again at once (within the deadline)."""
        self.down_since, self.down_polls = None, 0
        return self._within_deadline(0.0)

    def seen(self, st: JobStatus, etag: str | None = None) -> float | None:
        """A status arrived: None when the job completed, else the seconds until the next poll."""
        self.down_since, self.down_polls, self.last = None, 0, st
        self.etag = etag
        if self.bar is not None:
            self.bar.update(st)
        if st.status == "Completed":
            return None
        if st.status == "Failed":
            raise JobFailed(self.job_id, st.error or "unknown error", st)
        if etag:
            # The server holds the next read until the next change.
            return self._within_deadline(C.LONG_POLL_PACE)
        delay = self._within_deadline(self.interval)
        self.interval = min(self.interval * C.POLL_GROWTH, self.max_interval)
        return delay

    def unreachable(self, e: Exception) -> float:
        """The server could not be asked: the seconds until the next try, or ConnectionLost."""
        now = time.monotonic()
        if self.down_since is None:
            self.down_since = now
        down = now - self.down_since
        if down >= self.outage:
            raise ConnectionLost(self.job_id, down, e) from e
        # Exponential back-off with full jitter, never past the outage budget.
        cap = min(C.OUTAGE_MAX_DELAY, C.OUTAGE_INITIAL_DELAY * 2**self.down_polls)
        self.down_polls += 1
        delay = random.uniform(C.OUTAGE_INITIAL_DELAY / 2, max(cap, C.OUTAGE_INITIAL_DELAY))
        if self.bar is not None:
            self.bar.note(f"server unreachable for {down:.0f} s, still trying (up to {self.outage:.0f} s)")
        return self._within_deadline(min(delay, max(0.0, self.outage - down)))

    def _within_deadline(self, delay: float) -> float:
        if self.deadline is None:
            return delay
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(self.job_id, float(self.timeout or 0), self.last)
        return min(delay, left)

    def interrupted(self) -> str:
        """Ctrl-C: the line that says the job goes on and how to re-attach (also printed)."""
        msg = f"stopped waiting for job {self.job_id}; it keeps running on the server: {reattach_hint(self.job_id)}"
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        print(f"\n{msg}", file=self.file or sys.stderr, flush=True)
        return msg

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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
        w = _Waiter(
            self.id,
            progress=progress,
            timeout=timeout,
            file=file,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            outage=self.client.wait_outage if outage is None else _resolve_outage(outage),
        )
        try:
            while True:
                try:
                    hold = w.hold()
                    st, etag = self.client._status_change(self.id, w.etag, hold)
                except _OUTAGE_ERRORS as e:
                    time.sleep(w.unreachable(e))
                    continue
                if st is None:
                    time.sleep(w.unchanged())
                    continue
                delay = w.seen(st, etag)
                if delay is None:
                    return st
                time.sleep(delay)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(w.interrupted()) from None
        finally:
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
            raise _not_finished(self.id, e) from None
        frame = result_frame(payload, base_url=self.client.base_url)
        _warn_synthetic(self.id, frame)
        return frame

    def result_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write the result CSV, byte for byte as the server sends it, to ``path`` (atomically)."""
        try:
            data = self.client._result_csv(self.id)
        except Conflict as e:
            raise _not_finished(self.id, e) from None
        return _write_csv(self.id, data, path)

    def plot(self, **kwargs: Any) -> Figure:
        """The distribution of each predicted value of the result (see :func:`kinflow_client.plot_result`)."""
        from ._plot import plot_result

        return plot_result(self.result(), **kwargs)
