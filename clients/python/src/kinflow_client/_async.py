"""AsyncClient and AsyncJob: the same surface as Client and Job, for asyncio code (httpx's async client)."""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import httpx
import pandas as pd

from . import _constants as C
from . import _core as core
from ._errors import Conflict
from ._http import AsyncTransport, settings
from ._models import JobStatus, JobSummary, MethodInfo, Quota, ValidationReport
from ._results import InputData


class AsyncClient:
    """A connection to one kinflow server for asyncio code; every call of :class:`Client`, awaited.

    The arguments, environment variables and defaults are Client's. Use it
    as ``async with AsyncClient() as client: ...`` or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float | None = None,
        max_retries: int | None = None,
        wait_outage: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = core._resolve_url(base_url)
        t, n = settings(timeout, max_retries)
        #: How long AsyncJob.wait() keeps trying while the server cannot be reached, in seconds.
        self.wait_outage = core._resolve_outage(wait_outage)
        self._t = AsyncTransport(
            self.base_url,
            core._resolve_key(api_key),
            timeout=t,
            max_retries=n,
            transport=transport,
            user_agent=core._user_agent(),
        )

    def __repr__(self) -> str:
        return f"AsyncClient(base_url={self.base_url!r})"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
    ) -> AsyncClient:
        """The same client (same server, key and connections) with other settings; see Client.with_options."""
        out = copy.copy(self)
        out._t = self._t.copy(timeout=timeout, max_retries=max_retries)
        if wait_outage is not None:
            out.wait_outage = core._resolve_outage(wait_outage)
        return out

    async def close(self) -> None:
        """Close the connections."""
        await self._t.close()

    async def health(self) -> dict[str, Any]:
        """Whether the server and what it depends on are up (see Client.health)."""
        return await self._t.send(core.health_call())

    async def methods(self) -> list[MethodInfo]:
        """The prediction methods the server offers, one entry per (target, method)."""
        return await self._t.send(core.methods_call())

    async def quota(self) -> Quota:
        """How many rows the key may still submit today, and when that resets."""
        return await self._t.send(core.quota_call())

    async def generate_key(self) -> str:
        """Make the API key of this machine's address and use it from now on (see Client.generate_key)."""
        key = await self._t.send(core.generate_key_call())
        self._t.api_key = key
        return key

    async def validate(
        self,
        data: InputData,
        targets: str | Sequence[str] | None = None,
        methods: str | Mapping[str, str] | None = None,
        *,
        run_similarity: bool = False,
    ) -> ValidationReport:
        """Check input rows without submitting them (see Client.validate)."""
        return await self._t.send(core.validate_call(data, targets, methods, run_similarity))

    async def submit(
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
    ) -> AsyncJob:
        """Submit rows for prediction; returns the AsyncJob (see Client.submit)."""
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
            core.refuse_flagged(await self.validate(data, targets, methods))
        call, key = core.submit_call(data, form, idempotency_key)
        out = await self._t.send(call)
        return AsyncJob(self, str(out["jobId"]), submitted=out, idempotency_key=key)

    async def job(self, job_id: str) -> AsyncJob:
        """Re-attach to a job from its id. Raises NotFound."""
        job = AsyncJob(self, job_id)
        await job.status()
        return job

    async def iter_jobs(
        self, *, status: str | None = None, page_size: int = C.JOBS_PAGE_SIZE
    ) -> AsyncIterator[JobSummary]:
        """The key's own jobs, newest first, fetched page by page (``async for``)."""
        cursor: str | None = None
        while True:
            items, cursor = await self._t.send(core.jobs_page_call(status, page_size, cursor))
            for it in items:
                yield it
            if cursor is None:
                return

    async def jobs(self, *, status: str | None = None, limit: int | None = None) -> list[JobSummary]:
        """The key's own jobs, newest first (all of them, or the first ``limit``)."""
        out: list[JobSummary] = []
        async for j in self.iter_jobs(status=status, page_size=core.jobs_page_size(limit)):
            out.append(j)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def _status(self, job_id: str) -> JobStatus:
        return await self._t.send(core.status_call(job_id))

    async def _result_json(self, job_id: str) -> dict[str, Any]:
        return await self._t.send(core.result_json_call(job_id))

    async def _result_csv(self, job_id: str) -> bytes:
        return await self._t.send(core.result_csv_call(job_id))


class AsyncJob:
    """A submitted job of an AsyncClient. Keep ``job.id``: ``await client.job(id)`` re-attaches to it."""

    def __init__(
        self,
        client: AsyncClient,
        job_id: str,
        *,
        submitted: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.client = client
        self.id = job_id
        #: The submit's answer (jobId, status, quota, ...), when this job came from submit().
        self.submitted: dict[str, Any] = dict(submitted or {})
        #: The Idempotency-Key its submit carried.
        self.idempotency_key = idempotency_key

    def __repr__(self) -> str:
        return f"AsyncJob({self.id!r})"

    async def status(self) -> JobStatus:
        """The job's current status and progress."""
        return await self.client._status(self.id)

    async def wait(
        self,
        progress: bool = True,
        timeout: float | None = None,
        *,
        file: IO[str] | None = None,
        poll_interval: float = C.POLL_INITIAL_INTERVAL,
        max_poll_interval: float = C.POLL_MAX_INTERVAL,
        outage: float | None = None,
    ) -> JobStatus:
        """Wait until the job is Completed, riding out outages; see Job.wait.

        A cancelled wait (the task cancelled, or Ctrl-C) prints the line that
        re-attaches; the job keeps running on the server.
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
                    await asyncio.sleep(step.seconds)
                    step = steps.send(None)
                    continue
                try:
                    answer = await self.client._t.send(step)
                except core._OUTAGE_ERRORS as e:
                    step = steps.throw(e)
                    continue
                step = steps.send(answer)
        except StopIteration as done:
            final: JobStatus = done.value
            return final
        except KeyboardInterrupt:
            raise KeyboardInterrupt(w.interrupted()) from None
        except asyncio.CancelledError:
            w.interrupted()
            raise
        finally:
            steps.close()
            w.close()

    async def result(self) -> pd.DataFrame:
        """The finished job's result as a DataFrame (see Job.result)."""
        try:
            payload = await self.client._result_json(self.id)
        except Conflict as e:
            raise core._not_finished(self.id, e) from None
        return core.frame_of(self.id, payload, self.client.base_url)

    async def result_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write the result CSV, byte for byte as the server sends it, to ``path`` (atomically)."""
        try:
            data = await self.client._result_csv(self.id)
        except Conflict as e:
            raise core._not_finished(self.id, e) from None
        return core._write_csv(self.id, data, path)
