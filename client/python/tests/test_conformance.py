"""The SDK conformance scenario (tests/sdks/sdks_test.go describes it), run
with the Python SDK: this test is the producer, conformance_worker.py the
worker process."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import tempfile
import unittest
from typing import Counter, List

import taskmaster

from . import support

TASKS = 200
KINDS = ["retry", "dead", "snooze", "next", "cancel"]


class ConformanceTest(unittest.TestCase):
    def setUp(self) -> None:
        support.require_server(self)
        self.queue = os.environ.get("TASKMASTER_CONFORMANCE_QUEUE") or support.unique("conformance-py")
        self.c = support.client()
        self.addCleanup(self.c.close)
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.log_path = os.path.join(self.tmp.name, "conformance.log")
        self.procs: List["subprocess.Popen[bytes]"] = []
        self.addCleanup(self._kill)

    def _kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def start_worker(self, name: str) -> "subprocess.Popen[bytes]":
        env = dict(os.environ, TASKMASTER_CONFORMANCE_QUEUE=self.queue, TASKMASTER_CONFORMANCE_LOG=self.log_path,
                   TASKMASTER_CONFORMANCE_WORKER=name)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance_worker.py")
        p = subprocess.Popen([sys.executable, script], env=env)
        self.procs.append(p)
        return p

    def stop_worker(self, p: "subprocess.Popen[bytes]") -> None:
        p.send_signal(signal.SIGTERM)
        self.assertEqual(0, p.wait(timeout=30), "the worker exits 0 after SIGTERM")

    def lines(self) -> Counter[str]:
        out: Counter[str] = collections.Counter()
        if not os.path.exists(self.log_path):
            return out
        with open(self.log_path) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 2:
                    out[fields[0] + " " + fields[1]] += 1
                    out[fields[0]] += 1
        return out

    def test_scenario(self) -> None:
        c, q = self.c, self.queue
        items = [
            taskmaster.SubmitParams(q, {"kind": KINDS[i] if i < len(KINDS) else "ok", "i": i}, retry=taskmaster.Backoff(0.1))
            for i in range(TASKS)
        ]
        tasks = c.submit_batch(items).tasks
        support.arm("lose-claim-answers", count=1)

        a = self.start_worker(f"conformance-py-a-{os.getpid()}")
        cancel = tasks[4].id
        support.eventually(lambda: c.get(cancel).status == taskmaster.RUNNING, "the cancel task runs")
        c.cancel(cancel)
        support.eventually(lambda: c.get(cancel).status == taskmaster.DEAD, "the cancelled task is DEAD")

        support.eventually(lambda: self.lines()["done"] >= 60, "60 tasks done")
        self.stop_worker(a)
        self.assertEqual([], c.list(queue=q, status=taskmaster.RUNNING).tasks, "a drained worker leaves no task RUNNING")

        b = self.start_worker(f"conformance-py-b-{os.getpid()}")

        def finished() -> bool:
            all_tasks = list(c.iter_tasks(queue=q, page_size=1000))
            return len(all_tasks) == TASKS + 1 and all(t.terminal for t in all_tasks)

        support.eventually(finished, "every task finished")
        self.stop_worker(b)

        by_id = {t.id: t for t in c.iter_tasks(queue=q, page_size=1000)}
        lines = self.lines()
        for t in tasks[5:]:
            got = by_id[t.id]
            self.assertEqual((taskmaster.DONE, 1), (got.status, got.attempts), t.id)
            self.assertEqual(1, lines["start " + t.id], f"task {t.id} started once")
            self.assertEqual(1, lines["done " + t.id], f"task {t.id} done once")
        retry, dead, snooze, nxt, cancelled = (by_id[t.id] for t in tasks[:5])
        self.assertEqual((taskmaster.DONE, 2, {"i": 0}), (retry.status, retry.attempts, retry.result))
        self.assertEqual((taskmaster.DEAD, "non_retryable", 1), (dead.status, dead.dead_reason, dead.attempts))
        self.assertEqual((taskmaster.DONE, 1, 1), (snooze.status, snooze.snoozes, snooze.attempts))
        self.assertEqual(taskmaster.DONE, nxt.status)
        children = [t for t in by_id.values() if isinstance(t.payload, dict) and t.payload.get("kind") == "child"]
        self.assertEqual(1, len(children))
        self.assertEqual(taskmaster.DONE, children[0].status)
        self.assertEqual((taskmaster.DEAD, "cancelled"), (cancelled.status, cancelled.dead_reason))
        self.assertEqual(["cancelled"], [a.outcome for a in c.attempts(cancelled.id)])

        claims = support.proxy_log()["claims"]
        lost = [x for x in claims if x["lost"] and x["worker_id"].startswith("conformance")]
        self.assertEqual(1, len(lost), "exactly one claim answer was lost")
        self.assertTrue(
            any(not x["lost"] and x["request_id"] == lost[0]["request_id"] and sorted(x["task_ids"]) == sorted(lost[0]["task_ids"]) for x in claims),
            "the claim whose answer was lost was sent again with its request id and got the same tasks",
        )


if __name__ == "__main__":
    unittest.main()
