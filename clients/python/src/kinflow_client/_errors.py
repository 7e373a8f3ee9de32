"""Typed exceptions. Each API error keeps the server's own message and status."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._models import JobStatus, ValidationReport


def reattach_hint(job_id: str) -> str:
    """The one line that re-attaches to a job, for a shell and for Python."""
    return f"re-attach with `python -m kinflow_client wait {job_id}` or, in Python, `client.job({job_id!r}).wait()`"


class KinflowError(Exception):
    """Base class of every error this client raises."""


class APIConnectionError(KinflowError):
    """The API could not be reached (after the retries), or the answer was cut off."""


class APIError(KinflowError):
    """The API answered with an error status.

    ``message`` is the API's own ``{"error": ...}`` text, ``status`` the HTTP
    status (``None`` for an error found by the client before sending), and
    ``request_id`` the ``X-Request-ID`` to quote to the operator.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        request_id: str | None = None,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.request_id = request_id
        self.headers = headers or {}
        self.body = body

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"{self.message} (HTTP {self.status})"


class InvalidInput(APIError):
    """The input was refused (400, 413, 422), or ``validate`` flagged rows.

    ``report`` is the validation report (row by row) when there is one.
    """

    def __init__(self, message: str, *, report: ValidationReport | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.report = report


class Unauthorized(APIError):
    """No API key, or an unknown or revoked one (401)."""


class Forbidden(APIError):
    """The key's owner is blocked (403)."""


class NotFound(APIError):
    """Unknown job id, or another key's job: the API does not tell them apart (404)."""


class Conflict(APIError):
    """The request conflicts with the job's state, e.g. a result asked before Completed (409)."""


class QuotaExceeded(APIError):
    """The daily quota does not cover the request (429).

    ``limit`` and ``remaining`` come from the ``X-RateLimit-*`` headers when
    present; ``reset_at`` is when the quota resets (00:00 UTC for kinflow),
    from ``Retry-After`` or ``X-RateLimit-Reset``.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: int | None = None,
        remaining: int | None = None,
        resets_in_seconds: float | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.limit = limit
        self.remaining = remaining
        self.resets_in_seconds = resets_in_seconds
        self.reset_at: datetime | None = None
        if resets_in_seconds is not None:
            from ._models import reset_time

            self.reset_at = reset_time(resets_in_seconds)

    def __str__(self) -> str:
        s = super().__str__()
        if self.reset_at is not None:
            s += f"; the quota resets at {self.reset_at:%Y-%m-%d %H:%M:%S} UTC"
        return s


class ServerError(APIError):
    """The API failed (5xx). Its message names a request id, never internals."""


class JobFailed(KinflowError):
    """The job ended in Failed. ``message`` is the job's error; ``status`` the last status."""

    def __init__(self, job_id: str, message: str, status: JobStatus | None = None) -> None:
        super().__init__(f"job {job_id} failed: {message}")
        self.job_id = job_id
        self.message = message
        self.status = status


class WaitTimeout(KinflowError, TimeoutError):
    """``Job.wait(timeout=...)`` ran out; the job keeps running on the server."""

    def __init__(self, job_id: str, timeout: float, status: JobStatus | None = None) -> None:
        last = f" (last status: {status.status})" if status is not None else ""
        super().__init__(
            f"job {job_id} did not finish within {timeout:g} s{last}; it keeps running: {reattach_hint(job_id)}"
        )
        self.job_id = job_id
        self.timeout = timeout
        self.status = status


class ConnectionLost(APIConnectionError):
    """``Job.wait()`` could not reach the API for longer than it was told to wait.

    The job keeps running on the server; ``job_id`` names it and the message
    gives the line that re-attaches. ``outage`` is how long the API was
    unreachable, in seconds.
    """

    def __init__(self, job_id: str, outage: float, cause: BaseException) -> None:
        super().__init__(
            f"job {job_id}: kinflow could not be reached for {outage:.0f} s ({cause}); "
            f"the job keeps running on the server: {reattach_hint(job_id)}"
        )
        self.job_id = job_id
        self.outage = outage


class SyntheticResultWarning(UserWarning):
    """The result comes from kinflow's synthetic backends: stand-in numbers, not predictions."""
