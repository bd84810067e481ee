"""What the SDK's tests share: the server they run against, the fault
proxy in front of it, and polling with a deadline.

The tests talk to TASKMASTER_URL: the fault-injecting proxy
(tests/faultproxy) that tests/sdks (Go) starts in front of a real server on
a throwaway PostgreSQL, and arm its faults at TASKMASTER_FAULTS_URL. Without it they are skipped (`make test` runs them through
tests/sdks).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import unittest
import urllib.request
import uuid
from typing import Any, Callable, Dict, Generator, Iterator, List, Optional, TypeVar

import taskmaster

T = TypeVar("T")

URL = os.environ.get("TASKMASTER_URL", "")
FAULTS = os.environ.get("TASKMASTER_FAULTS_URL", "")
WAIT = 120.0


def require_server(case: unittest.TestCase) -> None:
    if not URL or not FAULTS:
        case.skipTest("TASKMASTER_URL is not set: run through tests/sdks (go test ./tests/sdks -run TestPythonSDK)")


def client(**kw: Any) -> taskmaster.Client:
    return taskmaster.Client(URL, **kw)


def unique(prefix: str) -> str:
    """A queue (or worker) name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def eventually(cond: Callable[[], Optional[T]], what: str, timeout: float = WAIT) -> T:
    """Polls cond every 50 ms until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        time.sleep(0.05)


def arm(fault: str, **body: Any) -> None:
    """Arms a fault of the proxy (tests/sdks/faults_test.go)."""
    req = urllib.request.Request(
        FAULTS + "/" + fault, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 204, resp.status


def proxy_log() -> Dict[str, Any]:
    """What went through the proxy: "claims" and "reports" (lists of
    records) and "actions" (counts by route name and what the proxy did:
    ``"claim delay_answer"``)."""
    with urllib.request.urlopen(FAULTS + "/log", timeout=10) as resp:
        out: Dict[str, Any] = json.loads(resp.read())
        return out


def server_has_release() -> bool:
    return os.environ.get("TASKMASTER_SERVER_HAS_RELEASE") == "1"


def read_events(stream: "Generator[taskmaster.Event, None, None]", until: str, act: Callable[[], object], pause: float) -> List[taskmaster.Event]:
    """Reads an event stream, on a thread, up to the first event of type
    ``until``, calling ``act`` every ``pause`` seconds meanwhile: a stream
    starts at the end of the outbox, so what happened before it connected
    is not in it. Closes the stream."""
    box: List[taskmaster.Event] = []

    def read() -> None:
        for ev in stream:
            box.append(ev)
            if ev.type == until:
                return

    th = threading.Thread(target=read, daemon=True)
    th.start()
    deadline = time.monotonic() + 60
    while th.is_alive() and time.monotonic() < deadline:
        act()
        th.join(pause)
    th.join(30)
    stream.close()
    if not box or box[-1].type != until:
        raise AssertionError(f"no {until} event within 60 s")
    return box


@contextlib.contextmanager
def running(test: unittest.TestCase, w: taskmaster.Worker, errors: List[BaseException]) -> Iterator[taskmaster.Worker]:
    """Runs ``w`` on a thread for the ``with`` block, then stops it and
    requires it to stop within 60 s; what its ``run`` raised goes to
    ``errors``."""

    def run() -> None:
        try:
            w.run()
        except BaseException as e:  # noqa: BLE001 - the caller surfaces it
            errors.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    try:
        yield w
    finally:
        w.stop()
        th.join(60)
        test.assertFalse(th.is_alive(), "the worker stops")
