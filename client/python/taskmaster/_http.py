"""The HTTP exchange with the server: one request, its retries, and the
translation of every answer that is not a success into a Problem."""

from __future__ import annotations

import http.client
import json
import random
import secrets
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import Problem, TransportError, problem_from_response

CORRELATION_HEADER = "X-Correlation-Id"

QueryValue = Union[str, int, float, bool, Sequence[str], None]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds the retries of one call. Transport errors and 5xx answers are
    retried with jittered exponential backoff (writes that could be
    duplicated only when they surely did not reach the server); 429 after
    the server's Retry-After; other 4xx answers never (a 409 lease-lost in
    particular is final)."""

    max_attempts: int = 5
    """The most tries of one call, the first included (1: no retries)."""
    base_delay: float = 0.1
    """Seconds before the first retry; doubled per retry."""
    max_delay: float = 5.0
    """Caps one delay (and a Retry-After the server asks for)."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")
        if not 0 <= self.base_delay <= self.max_delay:
            raise ValueError("RetryPolicy: need 0 <= base_delay <= max_delay")

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (from 1): min(base x
        2^(retry-1), max), jittered uniformly into [d/2, d]."""
        d = self.max_delay
        if retry - 1 < 64:
            d = min(d, self.base_delay * (2 ** (retry - 1)))
        return d / 2 + random.random() * d / 2 if d > 0 else 0.0


# When a call may be sent again.
SAFE = "safe"
"""Repeating the call cannot do harm (reads, fenced or idempotent writes)."""
UNSENT = "unsent"
"""Repeating could duplicate work: retried only when the request surely did
not reach the server (no connection) or the server said 503 or 429."""

_NO_BODY = object()


@dataclass
class Response:
    status: int
    data: Any
    headers: Mapping[str, str]


def new_id(prefix: str = "tmc-") -> str:
    """A fresh random id (correlation and claim request ids)."""
    return prefix + secrets.token_hex(16)


def parse_retry_after(v: Optional[str]) -> Optional[float]:
    if not v:
        return None
    try:
        n = float(v.strip())
    except ValueError:
        return None
    return n if n > 0 else None


class Transport:
    """Sends requests to one server; safe for use by many threads (each
    thread keeps its own connection)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: Optional[str],
        timeout: float,
        retry: RetryPolicy,
        user_agent: str,
        ssl_context: Optional[ssl.SSLContext],
    ) -> None:
        u = urllib.parse.urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"taskmaster: base URL {base_url!r} must be http(s)://host[:port][/prefix]")
        self.base_url = base_url.rstrip("/")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry
        self.user_agent = user_agent
        self._ssl = ssl_context
        self._lock = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []

    # Connections: a pool of kept-alive connections shared by every thread.

    _MAX_IDLE = 32

    def _new_conn(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _checkout(self, fresh: bool, timeout: float) -> http.client.HTTPConnection:
        """A connected connection: a kept one, unless ``fresh`` asks for a
        new one (a request that must not go out on a connection the server
        may have closed meanwhile)."""
        conn: Optional[http.client.HTTPConnection] = None
        if not fresh:
            with self._lock:
                if self._idle:
                    conn = self._idle.pop()
        if conn is None:
            conn = self._new_conn(timeout)
        conn.timeout = timeout
        if conn.sock is None:
            try:
                conn.connect()
            except OSError as e:
                conn.close()
                raise TransportError(f"taskmaster: connect to {self.base_url}: {e}", sent=False) from e
        else:
            conn.sock.settimeout(timeout)
        return conn

    def _checkin(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the kept connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # Requests.

    def target(self, path: str, query: Optional[Mapping[str, QueryValue]] = None) -> str:
        t = self._prefix + path
        if query:
            pairs: List[Tuple[str, str]] = []
            for k, v in query.items():
                if v is None or v == "":
                    continue
                if isinstance(v, bool):
                    pairs.append((k, "true" if v else "false"))
                elif isinstance(v, (list, tuple)):
                    pairs.extend((k, str(x)) for x in v)
                else:
                    pairs.append((k, str(v)))
            if pairs:
                t += "?" + urllib.parse.urlencode(pairs)
        return t

    def headers(self, correlation_id: str, has_body: bool) -> Dict[str, str]:
        h = {
            "Accept": "application/json, application/problem+json",
            "User-Agent": self.user_agent,
            CORRELATION_HEADER: correlation_id,
        }
        if has_body:
            h["Content-Type"] = "application/json"
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        return h

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        body: Any = _NO_BODY,
        mode: str = SAFE,
        wait: float = 0.0,
        retry: Optional[RetryPolicy] = None,
        deadline: Optional[float] = None,
        stop: Optional[Callable[[], bool]] = None,
        correlation_id: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Response:
        """Sends one call with retries and returns its 2xx answer, or raises
        the last Problem or TransportError.

        ``wait`` is how long the server may hold the answer back (a long
        poll): each try may take it plus the timeout. ``deadline`` (a
        time.monotonic() value) and ``stop`` end the retries early;
        ``timeout`` replaces the client's timeout for each try.
        """
        policy = retry or self.retry
        data = None if body is _NO_BODY else json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
        target = self.target(path, query)
        cid = correlation_id or new_id()
        headers = self.headers(cid, data is not None)
        attempt = 0
        while True:
            attempt += 1
            retry_after: Optional[float] = None
            try:
                return self._once(method, target, path, data, headers, mode, wait, cid, timeout)
            except Problem as p:
                err: Exception = p
                retry_after = p.retry_after
                again = p.status == 429 or (p.status == 503 if mode == UNSENT else (p.status >= 500 or p.status == 408))
            except TransportError as t:
                err = t
                again = mode == SAFE or not t.sent
            if not again or attempt >= policy.max_attempts or (stop is not None and stop()):
                raise err
            pause = max(policy.delay(attempt), min(retry_after or 0.0, policy.max_delay))
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise err
                pause = min(pause, left)
            if not _sleep(pause, stop):
                raise err

    def _once(
        self, method: str, target: str, path: str, data: Optional[bytes], headers: Dict[str, str],
        mode: str, wait: float, cid: str, try_timeout: Optional[float],
    ) -> Response:
        timeout = (self.timeout if try_timeout is None else try_timeout) + max(wait, 0.0)
        conn = self._checkout(mode == UNSENT, timeout)
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"taskmaster: {method} {path}: {type(e).__name__}: {e}") from e
        if resp.will_close:
            conn.close()
        else:
            self._checkin(conn)
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        if 200 <= resp.status < 300:
            if not raw:
                return Response(resp.status, None, hdrs)
            try:
                return Response(resp.status, json.loads(raw.decode("utf-8")), hdrs)
            except (ValueError, UnicodeDecodeError) as e:
                # A cut-off body is a transport failure: retried like one.
                raise TransportError(f"taskmaster: {method} {path}: decode response: {e}") from e
        raise problem_from_response(
            resp.status,
            hdrs.get("content-type", ""),
            raw,
            instance=path,
            correlation_id=hdrs.get(CORRELATION_HEADER.lower(), cid),
            retry_after=parse_retry_after(hdrs.get("retry-after")),
        )

    def stream(
        self, path: str, query: Optional[Mapping[str, QueryValue]], extra: Mapping[str, str], read_timeout: Optional[float]
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Opens a streaming GET on a connection of its own (the caller
        closes it). A non-2xx answer raises its Problem."""
        conn = self._new_conn(self.timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise TransportError(f"taskmaster: connect to {self.base_url}: {e}", sent=False) from e
        cid = new_id()
        headers = self.headers(cid, False)
        headers["Accept"] = "text/event-stream, application/problem+json"
        headers.update(extra)
        try:
            conn.request("GET", self.target(path, query), headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"taskmaster: GET {path}: {type(e).__name__}: {e}") from e
        if not 200 <= resp.status < 300:
            raw = resp.read()
            conn.close()
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            raise problem_from_response(
                resp.status, hdrs.get("content-type", ""), raw, instance=path,
                correlation_id=hdrs.get(CORRELATION_HEADER.lower(), cid),
                retry_after=parse_retry_after(hdrs.get("retry-after")),
            )
        if conn.sock is not None:
            conn.sock.settimeout(read_timeout)
        return conn, resp


def _sleep(seconds: float, stop: Optional[Callable[[], bool]]) -> bool:
    """Sleeps, waking early when stop() turns true; reports whether it slept
    the whole time."""
    end = time.monotonic() + seconds
    while True:
        if stop is not None and stop():
            return False
        left = end - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(left, 0.05) if stop is not None else left)
