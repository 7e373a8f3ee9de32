"""Job.wait() against a real stack: it rides the long poll, and polls against a server without it."""

from __future__ import annotations

import asyncio

import httpx
import pandas as pd
from conftest import Stack, input_rows

from kinflow_client import AsyncClient, Client


class Recording(httpx.HTTPTransport):
    """Records the status reads; with ``strip`` it plays a server without ETags (the reference)."""

    def __init__(self, strip: bool = False) -> None:
        super().__init__()
        self.strip = strip
        self.reads: list[tuple[str | None, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        status = "/api/v1/status/" in request.url.path
        if status and self.strip:
            request.headers.pop("If-None-Match", None)
            request.url = request.url.copy_remove_param("waitSeconds")
        resp = super().handle_request(request)
        if status:
            self.reads.append((request.headers.get("If-None-Match"), resp.status_code))
            if self.strip:
                resp.headers.pop("ETag", None)
        return resp


class AsyncRecording(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str | None, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await super().handle_async_request(request)
        if "/api/v1/status/" in request.url.path:
            self.reads.append((request.headers.get("If-None-Match"), resp.status_code))
        return resp


def test_wait_rides_the_long_poll(stack: Stack) -> None:
    rec = Recording()
    with Client(stack.url, stack.key, transport=rec) as c:
        job = c.submit(pd.DataFrame(input_rows(3, seed=35)), methods={"kcat": "B"})
        st = job.wait(progress=False, timeout=180)
    assert st.status == "Completed"
    # The first read has nothing to compare; every later one waits on the server for a change.
    assert rec.reads[0][0] is None and len(rec.reads) >= 2
    assert all(inm for inm, _ in rec.reads[1:]), rec.reads
    assert {code for _, code in rec.reads} <= {200, 304}
    # About one read per change: far fewer than polling would make over the job's life.
    assert len(rec.reads) <= 30, rec.reads


def test_async_wait_rides_the_long_poll(stack: Stack) -> None:
    async def run() -> tuple[str, list[tuple[str | None, int]]]:
        rec = AsyncRecording()
        async with AsyncClient(stack.url, stack.key, transport=rec) as c:
            job = await c.submit(pd.DataFrame(input_rows(3, seed=36)), methods={"kcat": "B"})
            st = await job.wait(progress=False, timeout=180)
        return st.status, rec.reads

    status, reads = asyncio.run(run())
    assert status == "Completed"
    assert reads[0][0] is None and all(inm for inm, _ in reads[1:]), reads


def test_wait_polls_a_server_without_etags(stack: Stack) -> None:
    rec = Recording(strip=True)
    with Client(stack.url, stack.key, transport=rec) as c:
        job = c.submit(pd.DataFrame(input_rows(3, seed=37)), methods={"kcat": "B"})
        st = job.wait(progress=False, timeout=180, poll_interval=0.2, max_poll_interval=0.2)
    assert st.status == "Completed"
    assert all(inm is None and code == 200 for inm, code in rec.reads), rec.reads
