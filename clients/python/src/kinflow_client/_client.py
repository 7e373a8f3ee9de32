"""Client and Job: the public API of kinflow_client."""

from __future__ import annotations

import json
import os
import string
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import httpx
import pandas as pd

from . import _constants as C
from ._errors import InvalidInput, JobFailed, SyntheticResultWarning, WaitTimeout
from ._http import Transport
from ._models import JobStatus, JobSummary, MethodInfo, Quota, ValidationReport
from ._progress import ProgressBar
from ._results import InputData, input_csv, result_frame
from ._version import __version__

Target = Literal["kcat", "Km", "kcat/Km"]


# The API's job-id slug (WIRE §1.0): anything else never names a job.
_JOB_ID_CHARS = frozenset(string.ascii_letters + string.digits + "-_")


def _flag(v: bool) -> str:
    return "true" if v else "false"


def _job_path(kind: str, job_id: str) -> str:
    if not job_id or any(ch not in _JOB_ID_CHARS for ch in job_id):
        raise ValueError(f"invalid job id {job_id!r}: job ids are letters, digits, '-' and '_'")
    return f"/api/v1/{kind}/{job_id}/"


class Client:
    """A client of one kinflow API.

    ``base_url`` defaults to ``$KINFLOW_URL``, else ``http://127.0.0.1:8000``;
    ``api_key`` to ``$KINFLOW_API_KEY``. Reads are retried with back-off on
    connection errors and 429/502/503/504, honouring ``Retry-After`` and
    ``X-RateLimit-Reset``; submits are retried only where that cannot charge
    twice (see :meth:`submit`). ``transport`` replaces httpx's transport
    (tests, proxies).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = C.DEFAULT_TIMEOUT,
        max_retries: int = C.DEFAULT_MAX_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        url = (base_url or os.environ.get(C.ENV_URL) or C.DEFAULT_BASE_URL).strip().rstrip("/")
        if url.endswith("/api/v1"):
            url = url[: -len("/api/v1")]
        key = (api_key if api_key is not None else os.environ.get(C.ENV_API_KEY, "")).strip() or None
        self.base_url = url
        self._t = Transport(
            url,
            key,
            timeout=timeout,
            max_retries=max_retries,
            transport=transport,
            user_agent=f"kinflow-client/{__version__} (python; httpx {httpx.__version__})",
        )

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._t.close()

    # -- service --------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """GET /api/v1/health/: ``{"status": "ok"|"unavailable", "checks": {...}, ...}``.

        A 503 (a dependency down) is returned as its body, not raised.
        """
        out: dict[str, Any] = self._t.get("/api/v1/health/", auth=False, ok=(200, 503)).json()
        return out

    def methods(self) -> list[MethodInfo]:
        """The method catalogue, one entry per (target, method)."""
        body = self._t.get("/api/v1/methods/", auth=False).json()
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
                    )
                )
        return out

    def quota(self) -> Quota:
        """Today's quota of the key."""
        return Quota.from_json(self._t.get("/api/v1/quota/").json())

    def generate_key(self) -> str:
        """Generate the API key of this machine's address (POST /api/api-key/generate/).

        The key is shown only once: keep it (e.g. in ``KINFLOW_API_KEY``). This
        client uses it from now on. An address with an active key gets Conflict (409).
        """
        resp = self._t.post_unauthenticated("/api/api-key/generate/")
        key = str(resp.json()["key"])
        self._t.api_key = key
        return key

    # -- jobs -----------------------------------------------------------------

    def validate(self, data: InputData, *, run_similarity: bool = False) -> ValidationReport:
        """Check input rows without submitting them (no quota used).

        ``data`` is a DataFrame, a CSV path or a list of dicts, as for submit.
        ``report.ok`` is False when rows would be skipped; ``report.to_frame()``
        lists them.
        """
        name, body = input_csv(data)
        form = {"runSimilarity": "true"} if run_similarity else None
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
        ``methods`` is a mapping. Options left at None keep the API's defaults
        (truncate long sequences, no experimental values, similarity columns,
        canonicalised substrates, GPU precompute, the prediction cache).

        ``validate_first`` runs :meth:`validate` and raises :class:`InvalidInput`
        with the report instead of submitting when a row is flagged.

        The submit carries an ``Idempotency-Key`` (``idempotency_key``, else a
        fresh uuid4) sent unchanged on every retry: against a server that
        honours it, an answer lost in transit is retried and returns the same
        job without a second charge. Pass your own key (and store it) to make
        a submit safe to repeat after a crash of your own process.
        """
        tlist, mmap = _selection(targets, methods)
        if validate_first:
            report = self.validate(data)
            if not report.ok:
                raise InvalidInput(
                    f"{report.problems} row problem(s); nothing was submitted:\n{report.summary()}",
                    report=report,
                )
        name, body = input_csv(data)
        form: dict[str, str] = {"targets": json.dumps(tlist), "methods": json.dumps(mmap)}
        if handle_long_sequences is not None:
            if handle_long_sequences not in ("truncate", "skip"):
                raise ValueError("handle_long_sequences must be 'truncate' or 'skip'")
            form["handleLongSequences"] = handle_long_sequences
        for field, value in (
            ("useExperimental", use_experimental),
            ("includeSimilarityColumns", include_similarity_columns),
            ("canonicalizeSubstrates", canonicalize_substrates),
            ("disableGpuPrecompute", disable_gpu_precompute),
            ("usePredictionCache", use_prediction_cache),
        ):
            if value is not None:
                form[field] = _flag(value)
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
        """Re-attach to a job from its id (e.g. stored before a crash). Raises NotFound."""
        job = Job(self, job_id)
        job.status()
        return job

    def iter_jobs(self, *, status: str | None = None, page_size: int = C.JOBS_PAGE_SIZE) -> Iterator[JobSummary]:
        """The key's own jobs, newest first, following the API's cursor page by page.

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
            body = self._t.get("/api/v1/jobs/", params=params).json()
            items = body if isinstance(body, list) else body.get("jobs", [])
            for it in items:
                if isinstance(it, dict):
                    yield JobSummary.from_json(it)
            nxt = body.get("nextCursor") if isinstance(body, dict) else None
            if not isinstance(nxt, str) or not nxt or not items:
                return
            cursor = nxt

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


class Job:
    """A submitted job. Keep ``job.id``: ``Client.job(id)`` re-attaches to it later."""

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
    ) -> JobStatus:
        """Wait until the job is Completed and return its last status.

        Polls at a growing interval (``poll_interval`` times 1.5 per poll, up to
        ``max_poll_interval``). With ``progress`` a tqdm bar (``file``, default
        stderr; a widget in Jupyter) shows the stage, the embedding files and
        the predictions. Raises :class:`JobFailed` when the job fails and
        :class:`WaitTimeout` after ``timeout`` seconds (the job keeps running).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = poll_interval
        bar = ProgressBar(self.id, file) if progress else None
        try:
            while True:
                st = self.status()
                if bar is not None:
                    bar.update(st)
                if st.status == "Completed":
                    return st
                if st.status == "Failed":
                    raise JobFailed(self.id, st.error or "unknown error", st)
                delay = interval
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WaitTimeout(self.id, float(timeout or 0), st)
                    delay = min(delay, left)
                time.sleep(delay)
                interval = min(interval * C.POLL_GROWTH, max_poll_interval)
        finally:
            if bar is not None:
                bar.close()

    def result(self) -> pd.DataFrame:
        """The Completed job's result as a DataFrame (raises Conflict before then).

        Prediction columns are floats with NaN for blank cells; ``Source …`` and
        ``Extra Info …`` are strings. ``df.attrs`` holds the rest of the answer:
        ``job_id``, ``columns``, ``rowCount``, ``synthetic`` and any provenance
        the server adds. A synthetic result also raises a SyntheticResultWarning.
        """
        payload = self.client._result_json(self.id)
        frame = result_frame(payload, base_url=self.client.base_url)
        if frame.attrs.get("synthetic"):
            warnings.warn(
                f"job {self.id}: this result comes from kinflow's synthetic backends; "
                "its numbers are stand-ins, not predictions",
                SyntheticResultWarning,
                stacklevel=2,
            )
        return frame

    def result_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write the result CSV, byte for byte as the API serves it, to ``path`` (atomically)."""
        data = self.client._result_csv(self.id)
        if C.SYNTHETIC_MARKER in data:
            warnings.warn(
                f"job {self.id}: this result comes from kinflow's synthetic backends; "
                "its numbers are stand-ins, not predictions (see the Source columns)",
                SyntheticResultWarning,
                stacklevel=2,
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
