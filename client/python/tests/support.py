"""What the SDK's tests share: the server they run against, the fault
proxy in front of it, and polling with a deadline.

The tests talk to TASKMASTER_URL: the fault-injecting proxy
(tests/faultproxy) that tests/sdks (Go) starts in front of a real server on
a throwaway PostgreSQL, and arm its faults at TASKMASTER_FAULTS_URL. Without it they are skipped (`make test` runs them through
tests/sdks).
"""

from __future__ import annotations

import json
import os
import time
import unittest
import urllib.request
import uuid
from typing import Any, Callable, Dict, List, Optional, TypeVar

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


def proxy_log() -> Dict[str, List[Dict[str, Any]]]:
    with urllib.request.urlopen(FAULTS + "/log", timeout=10) as resp:
        out: Dict[str, List[Dict[str, Any]]] = json.loads(resp.read())
        return out


def server_has_release() -> bool:
    return os.environ.get("TASKMASTER_SERVER_HAS_RELEASE") == "1"
