"""The client's sans-I/O core: everything Client and AsyncClient share that does no network I/O.

Each API call is described here as a :class:`Call` (method, path, query, headers,
body, idempotency, and how to parse the answer into the models); the wait loop
of Job.wait() and AsyncJob.wait() is :func:`wait_steps`, a generator that yields
the next read or pause and is told what came back. The sync and async classes
(``_client.py``, ``_async.py``) only send the Calls and sleep the pauses, with
the transports of ``_http.py`` (which share the retry and back-off decisions in
``_http._Policy``).
"""

from __future__ import annotations

import json
import os
import random
import string
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeVar

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
from ._http import env_float
from ._models import JobStatus, JobSummary, MethodInfo, Quota, ValidationReport
from ._progress import ProgressBar
from ._results import InputData, input_csv, result_frame
from ._version import __version__

T = TypeVar("T")

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
            ranges = m.get("rangeClasses")
            rc = ranges.get(target) if isinstance(ranges, dict) else None
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
                    range_classes=rc if isinstance(rc, dict) else None,
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
    once, and counts it among the waiting reads (once per job in 10 s), whose per-key
    budget a looping poller of the same key cannot exhaust."""
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
        outage: float | None,
        default_outage: float,
    ) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.interval = poll_interval
        self.max_interval = max_poll_interval
        #: Seconds in a row the server may stay unreachable: ``outage``, else the client's wait_outage.
        self.outage = default_outage if outage is None else _resolve_outage(outage)
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


# -- the calls: each request and how its answer is read ----------------------------


@dataclass(frozen=True)
class Call(Generic[T]):
    """One API request as data, and how its answer becomes the result (no I/O).

    ``method`` is ``"GET"``, ``"POST"`` (with the key, retried as a submit) or
    ``"POST_UNAUTHENTICATED"`` (the key routes). The transports send it with
    their retry policy and hand the answer to ``parse``.
    """

    method: Literal["GET", "POST", "POST_UNAUTHENTICATED"]
    path: str
    parse: Callable[[httpx.Response], T]
    auth: bool = True
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] | None = None
    ok: tuple[int, ...] = ()
    extra_time: float = 0.0
    data: Mapping[str, str] | None = None
    files: Mapping[str, tuple[str, bytes, str]] | None = None
    idempotent: bool = False

    def get_options(self) -> dict[str, Any]:
        """The keyword arguments of the transports' ``get`` for this Call."""
        return {
            "auth": self.auth,
            "params": self.params,
            "ok": self.ok,
            "headers": self.headers,
            "extra_time": self.extra_time,
        }

    def post_options(self) -> dict[str, Any]:
        """The keyword arguments of the transports' ``post`` for this Call."""
        return {"data": self.data, "files": self.files, "headers": self.headers, "idempotent": self.idempotent}


def _json_dict(resp: httpx.Response) -> dict[str, Any]:
    out: dict[str, Any] = resp.json()
    return out


def health_call() -> Call[dict[str, Any]]:
    return Call("GET", "/api/v1/health/", _json_dict, auth=False, ok=(200, 503))


def methods_call() -> Call[list[MethodInfo]]:
    return Call("GET", "/api/v1/methods/", lambda r: _methods_from_json(r.json()), auth=False)


def quota_call() -> Call[Quota]:
    return Call("GET", "/api/v1/quota/", lambda r: Quota.from_json(r.json()))


def generate_key_call() -> Call[str]:
    return Call("POST_UNAUTHENTICATED", "/api/api-key/generate/", lambda r: str(r.json()["key"]))


def validate_call(
    data: InputData,
    targets: str | Sequence[str] | None,
    methods: str | Mapping[str, str] | None,
    run_similarity: bool,
) -> Call[ValidationReport]:
    form = _validate_form(targets, methods, run_similarity)
    name, body = input_csv(data)
    return Call(
        "POST",
        "/api/v1/validate/",
        lambda r: ValidationReport.from_json(r.json()),
        data=form,
        files={"file": (name, body, "text/csv")},
    )


def submit_form(
    targets: str | Sequence[str] | None,
    methods: str | Mapping[str, str] | None,
    handle_long_sequences: str | None,
    use_experimental: bool | None,
    include_similarity_columns: bool | None,
    canonicalize_substrates: bool | None,
    disable_gpu_precompute: bool | None,
    use_prediction_cache: bool | None,
    priority: str | None = None,
) -> dict[str, str]:
    """The submit's form fields (checked before anything is sent)."""
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
    if priority is not None:
        if priority not in ("auto", "bulk"):
            raise ValueError("priority must be 'auto' or 'bulk'")
        form["priority"] = priority
    return form


def refuse_flagged(report: ValidationReport) -> None:
    """``validate_first``: raise InvalidInput with the report when a row is flagged."""
    if not report.ok:
        raise InvalidInput(
            f"{report.problems} row problem(s); nothing was submitted:\n{report.summary()}",
            report=report,
        )


def submit_call(
    data: InputData, form: Mapping[str, str], idempotency_key: str | None
) -> tuple[Call[dict[str, Any]], str]:
    """The submit (the answer: jobId, status, quota, ...) and the Idempotency-Key it carries."""
    name, body = input_csv(data)
    key = idempotency_key or str(uuid.uuid4())
    call: Call[dict[str, Any]] = Call(
        "POST",
        "/api/v1/submit/",
        _json_dict,
        data=form,
        files={"file": (name, body, "text/csv")},
        headers={"Idempotency-Key": key},
        idempotent=True,
    )
    return call, key


def jobs_page_call(status: str | None, page_size: int, cursor: str | None) -> Call[tuple[list[JobSummary], str | None]]:
    """One page of the key's jobs: its items and the next page's cursor (None at the end)."""
    params: dict[str, str] = {"limit": str(page_size)}
    if status:
        params["status"] = status
    if cursor:
        params["cursor"] = cursor
    return Call("GET", "/api/v1/jobs/", lambda r: _jobs_page(r.json()), params=params)


def jobs_page_size(limit: int | None) -> int:
    return C.JOBS_PAGE_SIZE if limit is None else max(1, min(limit, C.JOBS_PAGE_SIZE))


def status_call(job_id: str) -> Call[JobStatus]:
    return Call("GET", _job_path("status", job_id), lambda r: JobStatus.from_json(r.json()))


def status_change_call(job_id: str, etag: str | None, wait: int) -> Call[tuple[JobStatus | None, str | None]]:
    """The status once it differs from ``etag`` (held by the server up to ``wait`` s), and its ETag.

    None for the status when it is still ``etag`` (304); None for the ETag from a server without them.
    """
    params, headers = _long_poll(etag, wait)
    return Call(
        "GET",
        _job_path("status", job_id),
        lambda r: _status_answer(r, etag),
        params=params,
        headers=headers,
        ok=(200, 304),
        extra_time=wait,
    )


def result_json_call(job_id: str) -> Call[dict[str, Any]]:
    # json.loads accepts the reference's bare NaN tokens (as float('nan')).
    return Call("GET", _job_path("result", job_id), lambda r: _loads_dict(r.content), params={"format": "json"})


def _loads_dict(content: bytes) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(content)
    return out


def result_csv_call(job_id: str) -> Call[bytes]:
    return Call("GET", _job_path("result", job_id), lambda r: r.content)


# -- the wait loop's decisions ------------------------------------------------------


@dataclass(frozen=True)
class Sleep:
    """A pause of the wait loop, in seconds (the runner sleeps it, then sends None)."""

    seconds: float


WaitStep = Call[tuple[JobStatus | None, str | None]] | Sleep


def wait_steps(w: _Waiter) -> Generator[WaitStep, Any, JobStatus]:
    """Job.wait()'s loop as a protocol: yields the next status read or pause; returns the final status.

    The runner sends each read's answer back (a ``(status, etag)`` pair), or
    throws the read's outage error (APIConnectionError, ServerError) into it,
    and sends None after each pause.
    """
    while True:
        try:
            hold = w.hold()
            answer: tuple[JobStatus | None, str | None] = yield status_change_call(w.job_id, w.etag, hold)
            st, etag = answer
        except _OUTAGE_ERRORS as e:
            yield Sleep(w.unreachable(e))
            continue
        if st is None:
            yield Sleep(w.unchanged())
            continue
        delay = w.seen(st, etag)
        if delay is None:
            return st
        yield Sleep(delay)


def frame_of(job_id: str, payload: dict[str, Any], base_url: str) -> pd.DataFrame:
    """The result's DataFrame, warning when it is synthetic."""
    frame = result_frame(payload, base_url=base_url)
    _warn_synthetic(job_id, frame)
    return frame
