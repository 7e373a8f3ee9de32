"""The HTTP layer: one httpx client, typed errors, and the retry policies (tenacity)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import tenacity

from . import _constants as C
from ._errors import (
    APIConnectionError,
    APIError,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    QuotaExceeded,
    ServerError,
    Unauthorized,
)

if TYPE_CHECKING:
    from ._core import Call

log = logging.getLogger("kinflow_client")

_T = TypeVar("_T")

# Connection errors where the request certainly never reached the server:
# retrying them can never create a second job.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class _RetryableStatus(Exception):
    """An answer whose status the current policy retries (internal)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _header_seconds(value: str | None, *, date_ok: bool) -> float | None:
    """Seconds from a Retry-After / X-RateLimit-Reset value (delta seconds, or an HTTP date)."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    if not date_ok:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def advised_wait(response: httpx.Response) -> float | None:
    """The wait the server asks for: Retry-After, else (on a 429) X-RateLimit-Reset."""
    secs = _header_seconds(response.headers.get("Retry-After"), date_ok=True)
    if secs is None and response.status_code == 429:
        secs = _header_seconds(response.headers.get("X-RateLimit-Reset"), date_ok=False)
    return secs


def _int_header(response: httpx.Response, name: str) -> int | None:
    v = response.headers.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def error_from_response(response: httpx.Response) -> APIError:
    """The typed exception for a non-2xx answer, carrying the API's own message."""
    status = response.status_code
    body: Any = None
    message = ""
    try:
        body = json.loads(response.content)
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            message = body["error"]
    except ValueError:
        body = None
    if not message:
        text = response.text.strip()
        if len(text) > 200:
            text = text[:200] + "…"
        message = f"unexpected answer from {response.request.url}: {text or response.reason_phrase}"
    kw: dict[str, Any] = {
        "status": status,
        "request_id": response.headers.get("X-Request-ID"),
        "headers": dict(response.headers),
        "body": body,
    }
    if status == 429:
        return QuotaExceeded(
            message,
            limit=_int_header(response, "X-RateLimit-Limit"),
            remaining=_int_header(response, "X-RateLimit-Remaining"),
            resets_in_seconds=advised_wait(response),
            **kw,
        )
    cls: type[APIError]
    if status in (400, 413, 422):
        cls = InvalidInput
    elif status == 401:
        cls = Unauthorized
    elif status == 403:
        cls = Forbidden
    elif status == 404:
        cls = NotFound
    elif status == 409:
        cls = Conflict
    elif status >= 500:
        cls = ServerError
    else:
        cls = APIError
    return cls(message, **kw)


def settings(timeout: float | None, max_retries: int | None) -> tuple[float, int]:
    """The request timeout and retries: the argument, else the environment, else the default."""
    return (
        float(timeout) if timeout is not None else env_float(C.ENV_TIMEOUT, C.DEFAULT_TIMEOUT),
        int(max_retries) if max_retries is not None else int(env_float(C.ENV_MAX_RETRIES, C.DEFAULT_MAX_RETRIES)),
    )


def env_float(name: str, default: float) -> float:
    """A number from the environment variable ``name``; ``default`` when unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if v < 0 or v != v:
        raise ValueError(f"{name}={raw!r} must be zero or more")
    return v


_P = TypeVar("_P", bound="_Policy")


class _Policy:
    """What both transports share: the key, the settings and the retry policy."""

    def __init__(self, base_url: str, api_key: str | None, *, timeout: float, max_retries: int) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be more than 0 seconds, not {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {max_retries!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self._idempotency: bool | None = None

    def copy(self: _P, *, timeout: float | None = None, max_retries: int | None = None) -> _P:
        """The same transport (one connection pool) with other settings."""
        out = copy.copy(self)
        if timeout is not None:
            if timeout <= 0:
                raise ValueError(f"timeout must be more than 0 seconds, not {timeout!r}")
            out.timeout = float(timeout)
        if max_retries is not None:
            if max_retries < 0:
                raise ValueError(f"max_retries must be 0 or more, not {max_retries!r}")
            out.max_retries = int(max_retries)
        return out

    def _timeout(self, extra_time: float = 0.0) -> httpx.Timeout:
        """The request's timeout; ``extra_time`` lengthens the read of a request the server holds."""
        return httpx.Timeout(self.timeout + max(0.0, extra_time), connect=min(self.timeout, C.DEFAULT_CONNECT_TIMEOUT))

    def _client_options(self, user_agent: str) -> dict[str, Any]:
        """The httpx client's settings, the same for the sync and the async client."""
        return {
            "base_url": self.base_url,
            "timeout": self._timeout(),
            "headers": {"User-Agent": user_agent, "Accept": "application/json"},
            "follow_redirects": True,
        }

    def _headers(self, auth: bool, extra: Mapping[str, str] | None) -> dict[str, str]:
        h: dict[str, str] = dict(extra or {})
        if auth:
            if not self.api_key:
                raise Unauthorized(
                    "no API key: pass Client(api_key=...) or set KINFLOW_API_KEY "
                    "(POST /api/api-key/generate/ or `kinflow key generate` makes one)"
                )
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """Back-off: the server's advised wait when it gives one, else exponential with jitter."""
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _RetryableStatus):
            secs = advised_wait(exc.response)
            if secs is not None:
                return secs
        backoff = tenacity.wait_random_exponential(multiplier=C.INITIAL_RETRY_DELAY, max=C.MAX_RETRY_DELAY)
        return float(backoff(state))

    def _stop(self, state: tenacity.RetryCallState) -> bool:
        if state.attempt_number > self.max_retries:
            return True
        # A server-advised wait longer than we are willing to sleep ends the
        # retries now (the caller gets e.g. QuotaExceeded with its reset time).
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _RetryableStatus):
            secs = advised_wait(exc.response)
            return secs is not None and secs > C.MAX_SERVER_ADVISED_WAIT
        return False

    @staticmethod
    def _before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.info("kinflow: retrying after %s (attempt %d, in %.1f s)", exc, state.attempt_number, wait)

    def _retry(self, retry_exc: Callable[[BaseException], bool]) -> tenacity.retry_base:
        return tenacity.retry_if_exception(lambda e: isinstance(e, _RetryableStatus) or retry_exc(e))

    def _unreachable(self, e: httpx.TransportError) -> APIConnectionError:
        return APIConnectionError(f"cannot reach kinflow at {self.base_url}: {e!r}")

    @staticmethod
    def _check(resp: httpx.Response, ok: tuple[int, ...]) -> httpx.Response:
        if resp.status_code in ok or (not ok and 200 <= resp.status_code < 300):
            return resp
        raise error_from_response(resp)

    @staticmethod
    def _get_retry_status(ok: tuple[int, ...]) -> Callable[[int], bool]:
        return lambda s: s in C.RETRY_GET_STATUSES and s not in ok

    def _post_policies(
        self, idempotent: bool, supports: Callable[[], bool]
    ) -> tuple[Callable[[BaseException], bool], Callable[[int], bool]]:
        def retry_exc(e: BaseException) -> bool:
            if isinstance(e, _NOT_SENT):
                return True
            return isinstance(e, httpx.TransportError) and idempotent and supports()

        def retry_status(s: int) -> bool:
            if s in C.SUBMIT_SAFE_STATUSES:
                return True
            return s in C.SUBMIT_AMBIGUOUS_STATUSES and idempotent and supports()

        return retry_exc, retry_status

    @staticmethod
    def _lost_answer(e: APIConnectionError) -> APIConnectionError:
        return APIConnectionError(
            f"{e}. The request was sent but its answer was lost, and this server does not "
            "honour Idempotency-Key, so the client did not resend it (that could charge twice): "
            "check Client.quota() and your jobs before submitting again"
        )


class Transport(_Policy):
    """Sends requests to one kinflow API with the key, and retries by policy."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        max_retries: int,
        transport: httpx.BaseTransport | None,
        user_agent: str,
    ) -> None:
        super().__init__(base_url, api_key, timeout=timeout, max_retries=max_retries)
        self.http = httpx.Client(transport=transport, **self._client_options(user_agent))
        # Replaced in tests to record the back-off without sleeping.
        self.sleep: Callable[[float], None] = time.sleep

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call[_T]) -> _T:
        """Send one Call of the core with its method's retry policy, and parse the answer."""
        if call.method == "GET":
            resp = self.get(call.path, **call.get_options())
        elif call.method == "POST":
            resp = self.post(call.path, **call.post_options())
        else:
            resp = self.post_unauthenticated(call.path)
        return call.parse(resp)

    def _run(
        self,
        send: Callable[[], httpx.Response],
        retry_exc: Callable[[BaseException], bool],
        retry_status: Callable[[int], bool],
    ) -> httpx.Response:
        retrying = tenacity.Retrying(
            stop=self._stop,
            wait=self._wait,
            retry=self._retry(retry_exc),
            before_sleep=self._before_sleep,
            sleep=lambda s: self.sleep(s),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    resp = send()
                    if retry_status(resp.status_code):
                        raise _RetryableStatus(resp)
                    return resp
        except _RetryableStatus as e:
            return e.response
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        raise AssertionError("unreachable")  # pragma: no cover

    def get(
        self,
        path: str,
        *,
        auth: bool = True,
        params: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (),
        headers: Mapping[str, str] | None = None,
        extra_time: float = 0.0,
    ) -> httpx.Response:
        """GET with retries on connection errors and 429/502/503/504 (honouring Retry-After).

        ``extra_time`` lengthens the read timeout for a request the server holds (a long poll).
        """
        headers = self._headers(auth, headers)
        timeout = self._timeout(extra_time)

        def send() -> httpx.Response:
            return self.http.get(path, headers=headers, params=params, timeout=timeout)

        resp = self._run(
            send, retry_exc=lambda e: isinstance(e, httpx.TransportError), retry_status=self._get_retry_status(ok)
        )
        return self._check(resp, ok)

    def post(
        self,
        path: str,
        *,
        data: Mapping[str, str] | None = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
        json_body: Any = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = False,
    ) -> httpx.Response:
        """POST. Retried only where a repeat cannot act twice.

        Always: connection errors before the request was sent and 503 (kinflow's
        "not queued, nothing charged"). With ``idempotent`` (an Idempotency-Key
        in ``headers``) and a server that honours it, also a lost or cut answer
        and 500/502/504: the server then answers the repeat with the same job.
        """
        hdrs = self._headers(True, headers)
        timeout = self._timeout()

        def send() -> httpx.Response:
            return self.http.post(path, headers=hdrs, data=data, files=files, json=json_body, timeout=timeout)

        retry_exc, retry_status = self._post_policies(idempotent, self.supports_idempotency)
        try:
            resp = self._run(send, retry_exc, retry_status)
        except APIConnectionError as e:
            cause = e.__cause__
            if idempotent and not isinstance(cause, _NOT_SENT) and not self.supports_idempotency():
                raise self._lost_answer(e) from cause
            raise
        return self._check(resp, ())

    def post_unauthenticated(self, path: str) -> httpx.Response:
        """A POST without the key (the key routes), retried only when it was never sent."""
        timeout = self._timeout()
        resp = self._run(
            lambda: self.http.post(path, timeout=timeout),
            retry_exc=lambda e: isinstance(e, _NOT_SENT),
            retry_status=lambda s: False,
        )
        return self._check(resp, ())

    def supports_idempotency(self) -> bool:
        """Whether the server documents the Idempotency-Key header on submit (its OpenAPI).

        Asked once, lazily (only after a submit's answer was lost). A server
        without the document (the reference deployment) counts as not supporting it.
        """
        if self._idempotency is None:
            self._idempotency = False
            try:
                resp = self.get("/api/v1/openapi.json", auth=False)
                self._idempotency = _documents_idempotency(resp.json())
            except (APIError, APIConnectionError, ValueError) as e:
                log.info("kinflow: cannot read the server's OpenAPI document (%s): no idempotent retries", e)
        return self._idempotency


class AsyncTransport(_Policy):
    """Transport's twin over httpx.AsyncClient: the same policies, awaited."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        max_retries: int,
        transport: httpx.AsyncBaseTransport | None,
        user_agent: str,
    ) -> None:
        super().__init__(base_url, api_key, timeout=timeout, max_retries=max_retries)
        self.http = httpx.AsyncClient(transport=transport, **self._client_options(user_agent))
        # Replaced in tests to record the back-off without sleeping.
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def close(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call[_T]) -> _T:
        """Send one Call of the core as Transport.send does, awaited."""
        if call.method == "GET":
            resp = await self.get(call.path, **call.get_options())
        elif call.method == "POST":
            resp = await self.post(call.path, **call.post_options())
        else:
            resp = await self.post_unauthenticated(call.path)
        return call.parse(resp)

    async def _run(
        self,
        send: Callable[[], Awaitable[httpx.Response]],
        retry_exc: Callable[[BaseException], bool],
        retry_status: Callable[[int], bool],
    ) -> httpx.Response:
        async def sleep(s: float) -> None:
            await self.sleep(s)

        retrying = tenacity.AsyncRetrying(
            stop=self._stop,
            wait=self._wait,
            retry=self._retry(retry_exc),
            before_sleep=self._before_sleep,
            sleep=sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    resp = await send()
                    if retry_status(resp.status_code):
                        raise _RetryableStatus(resp)
                    return resp
        except _RetryableStatus as e:
            return e.response
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(
        self,
        path: str,
        *,
        auth: bool = True,
        params: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (),
        headers: Mapping[str, str] | None = None,
        extra_time: float = 0.0,
    ) -> httpx.Response:
        """GET with retries on connection errors and 429/502/503/504 (honouring Retry-After).

        ``extra_time`` lengthens the read timeout for a request the server holds (a long poll).
        """
        headers = self._headers(auth, headers)
        timeout = self._timeout(extra_time)

        async def send() -> httpx.Response:
            return await self.http.get(path, headers=headers, params=params, timeout=timeout)

        resp = await self._run(
            send, retry_exc=lambda e: isinstance(e, httpx.TransportError), retry_status=self._get_retry_status(ok)
        )
        return self._check(resp, ok)

    async def post(
        self,
        path: str,
        *,
        data: Mapping[str, str] | None = None,
        files: Mapping[str, tuple[str, bytes, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = False,
    ) -> httpx.Response:
        """POST, retried as Transport.post is."""
        hdrs = self._headers(True, headers)
        timeout = self._timeout()
        # Asked before sending (not lazily inside the retry predicate, which
        # cannot await) and only for an idempotent submit.
        supports = await self.supports_idempotency() if idempotent else False

        async def send() -> httpx.Response:
            return await self.http.post(path, headers=hdrs, data=data, files=files, timeout=timeout)

        retry_exc, retry_status = self._post_policies(idempotent, lambda: supports)
        try:
            resp = await self._run(send, retry_exc, retry_status)
        except APIConnectionError as e:
            cause = e.__cause__
            if idempotent and not isinstance(cause, _NOT_SENT) and not supports:
                raise self._lost_answer(e) from cause
            raise
        return self._check(resp, ())

    async def post_unauthenticated(self, path: str) -> httpx.Response:
        """A POST without the key (the key routes), retried only when it was never sent."""
        timeout = self._timeout()

        async def send() -> httpx.Response:
            return await self.http.post(path, timeout=timeout)

        resp = await self._run(send, retry_exc=lambda e: isinstance(e, _NOT_SENT), retry_status=lambda s: False)
        return self._check(resp, ())

    async def supports_idempotency(self) -> bool:
        """Whether the server documents Idempotency-Key on submit (asked once)."""
        if self._idempotency is None:
            self._idempotency = False
            try:
                resp = await self.get("/api/v1/openapi.json", auth=False)
                self._idempotency = _documents_idempotency(resp.json())
            except (APIError, APIConnectionError, ValueError) as e:
                log.info("kinflow: cannot read the server's OpenAPI document (%s): no idempotent retries", e)
        return self._idempotency


def _documents_idempotency(doc: Any) -> bool:
    """Whether an OpenAPI document says POST /api/v1/submit/ honours Idempotency-Key.

    A header parameter of that name (inline or by $ref) counts, and so does the
    name in the operation's own text (a server that describes it there).
    """
    if not isinstance(doc, dict):
        return False
    paths = doc.get("paths")
    item: Any = None
    if isinstance(paths, dict):
        item = paths.get("/api/v1/submit/") or paths.get("/api/v1/submit")
    op: Any = item.get("post") if isinstance(item, dict) else None
    if not isinstance(op, dict):
        return False
    params = list(op.get("parameters") or []) + list(item.get("parameters") or [])
    for p in params:
        if isinstance(p, dict) and "$ref" in p:
            p = _resolve(doc, p["$ref"])
        if isinstance(p, dict) and p.get("in") == "header" and str(p.get("name", "")).lower() == "idempotency-key":
            return True
    return "idempotency-key" in json.dumps(op).lower()


def _resolve(doc: dict[str, Any], ref: Any) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    node: Any = doc
    for part in ref[2:].split("/"):
        if not isinstance(node, dict):
            return None
        node = node.get(part.replace("~1", "/").replace("~0", "~"))
    return node
