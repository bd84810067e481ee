"""The Python SDK's side of the SDK conformance scenario (tests/sdks): a
Worker over the scenario's queue whose handler does what each task's
payload says, logging every start and success to the file the scenario
reads. Run as a process: ``python3 tests/conformance_worker.py``.

Environment: TASKMASTER_URL, TASKMASTER_CONFORMANCE_QUEUE,
TASKMASTER_CONFORMANCE_LOG, TASKMASTER_CONFORMANCE_WORKER.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import taskmaster  # noqa: E402

queue = os.environ["TASKMASTER_CONFORMANCE_QUEUE"]
log_lock = threading.Lock()
log_file = open(os.environ["TASKMASTER_CONFORMANCE_LOG"], "a", buffering=1)


def record(what: str, t: taskmaster.Task, *extra: object) -> None:
    with log_lock:
        log_file.write(" ".join([what, t.id, str(t.attempts), *map(str, extra)]) + "\n")


def handle(ctx: taskmaster.TaskContext) -> Any:
    t = ctx.task
    record("start", t)
    kind, i = t.payload["kind"], t.payload["i"]
    result = {"i": i}
    if kind == "ok":
        time.sleep(0.02)
    elif kind == "retry":
        if ctx.attempt == 1:
            raise RuntimeError("transient failure")
    elif kind == "dead":
        raise taskmaster.NonRetryable("permanent failure")
    elif kind == "snooze":
        if t.snoozes == 0:
            raise taskmaster.Snooze(1)
    elif kind == "next":
        record("done", t)
        return taskmaster.Next(result, [taskmaster.SubmitParams(queue, {"kind": "child", "i": 1000})])
    elif kind == "child":
        pass
    elif kind == "cancel":
        if ctx.wait(60):
            record("stopped", t, type(ctx.cause).__name__)
            raise RuntimeError(f"stopped: {ctx.cause}")
    else:
        raise taskmaster.NonRetryable(f"unknown kind {kind!r}")
    record("done", t)
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    w = taskmaster.Worker(
        taskmaster.Client(os.environ["TASKMASTER_URL"]),
        handle,
        worker_id=os.environ["TASKMASTER_CONFORMANCE_WORKER"],
        queues=[queue],
        concurrency=4,
        claim_wait=1.0,
        drain_timeout=10.0,
        lease_seconds=30,
        heartbeat_interval=1.0,  # faster than the server asks (tests/sdks): a cancel is seen within a second
    )
    w.run()
