"""Push queues and rate limits by key (issue 27) against a real server
(tests/sdks): a queue's push settings with their secret shown once and
rotated with an overlap, real deliveries to an endpoint this test runs
whose signatures verify_signature checks, attempts' HTTP statuses, the
queue's deliveries; named limits and per-group rate limits."""

from __future__ import annotations

import http.server
import json
import threading
import time
import unittest
from typing import Any, Dict, List, Optional

import taskmaster

from . import support


class Delivery:
    """One POST the endpoint received."""

    def __init__(self, headers: Dict[str, str], body: bytes) -> None:
        self.headers = headers
        self.body = body

    @property
    def task_id(self) -> str:
        return self.headers.get("taskmaster-task-id", "")

    @property
    def signature(self) -> str:
        return self.headers.get("taskmaster-signature", "")


class Endpoint:
    """A push endpoint on 127.0.0.1 (the server under test allows it): it
    records every delivery and answers with the status the payload's
    "answer" names (200 with a JSON body by default)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: List[Delivery] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with endpoint.lock:
                    endpoint.deliveries.append(Delivery({k.lower(): v for k, v in self.headers.items()}, body))
                payload = json.loads(body) if body else None
                status = payload.get("answer", 200) if isinstance(payload, dict) else 200
                out = json.dumps({"handled": self.headers.get("Taskmaster-Task-Id")}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def of(self, task_id: str) -> List[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.task_id == task_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PushTest(unittest.TestCase):
    def setUp(self) -> None:
        support.require_server(self)
        support.arm("reset")
        self.c = support.client()
        self.addCleanup(self.c.close)
        self.queue = support.unique("py-push")
        self.endpoint = Endpoint()
        self.addCleanup(self.endpoint.close)

    def delivered(self, task: taskmaster.Task) -> taskmaster.Task:
        return self.c.wait(task.id, timeout=60)

    def test_deliveries_are_signed_and_the_secret_rotates_with_an_overlap(self) -> None:
        c, q = self.c, self.queue
        s = c.update_queue(q, push=taskmaster.PushPatch(url=self.endpoint.url, timeout_seconds=5, max_in_flight=2,
                                                        headers={"Authorization": "Bearer endpoint-token"}))
        assert s.push is not None and s.push.secret is not None
        secret = s.push.secret
        self.assertTrue(secret.startswith("tmpush_"))
        self.assertEqual((self.endpoint.url, 5, 2, ["Authorization"]), (s.push.url, s.push.timeout_seconds, s.push.max_in_flight, s.push.header_names))
        self.assertEqual([400, 401, 403, 404, 410, 422], s.push.non_retryable_statuses)
        shown = c.queue(q).settings.push
        assert shown is not None
        self.assertEqual((self.endpoint.url, ["Authorization"]), (shown.url, shown.header_names))
        self.assertFalse(hasattr(shown, "secret"), "the secret is shown once, in the change's answer")

        t = self.delivered(c.submit(q, {"n": 1}))
        self.assertEqual((taskmaster.DONE, {"handled": t.id}), (t.status, t.result), t.last_error)
        (d,) = self.endpoint.of(t.id)
        self.assertEqual((str(t.id), "1", q, "Bearer endpoint-token", "application/json"),
                         (d.headers["taskmaster-task-id"], d.headers["taskmaster-attempt"], d.headers["taskmaster-queue"],
                          d.headers["authorization"], d.headers["content-type"]))
        self.assertEqual({"n": 1}, json.loads(d.body))
        taskmaster.verify_signature(secret, d.signature, d.body)  # a real signature the server made
        with self.assertRaises(taskmaster.SignatureMismatch):
            taskmaster.verify_signature(secret, d.signature, d.body + b" ")
        with self.assertRaises(taskmaster.SignatureMismatch):
            taskmaster.verify_signature("tmpush_not-the-secret", d.signature, d.body)
        with self.assertRaises(taskmaster.SignatureExpired):
            taskmaster.verify_signature(secret, d.signature, d.body, now=time.time() + 301)
        taskmaster.verify_signature(secret, d.signature, d.body, now=time.time() + 3000, tolerance=3600)
        for bad in ("", "t=1", "v1=ab", "t=x,v1=ab", "garbage"):
            with self.assertRaises(taskmaster.SignatureMalformed, msg=bad):
                taskmaster.verify_signature(secret, bad, d.body)
        self.assertEqual([200], [a.http_status for a in c.attempts(t.id)])

        r = c.update_queue(q, push=taskmaster.PushPatch(rotate_secret=True, secret_overlap_seconds=600))
        assert r.push is not None and r.push.secret is not None
        rotated = r.push.secret
        self.assertNotEqual(secret, rotated)
        self.assertIsNotNone(r.push.previous_secret_expires_at)
        self.assertEqual(self.endpoint.url, r.push.url, "members left out keep their values")

        # The dispatchers read the change within TASKMASTER_PUSH_REFRESH_MS:
        # deliver until one is signed with both secrets (the overlap).
        def signed_twice() -> Optional[Delivery]:
            t = self.delivered(c.submit(q, {"n": 2}))
            (d,) = self.endpoint.of(t.id)
            return d if d.signature.count("v1=") == 2 else None

        d = support.eventually(signed_twice, "a delivery signed with both secrets", timeout=60)
        taskmaster.verify_signature(rotated, d.signature, d.body)
        taskmaster.verify_signature(secret, d.signature, d.body)

    def test_an_answer_in_non_retryable_statuses_dead_letters_and_is_recorded(self) -> None:
        c, q = self.c, self.queue
        c.update_queue(q, push=taskmaster.PushPatch(url=self.endpoint.url, non_retryable_statuses=[404, 410]))
        t = self.delivered(c.submit(q, {"answer": 404}, max_attempts=5))
        self.assertEqual((taskmaster.DEAD, "non_retryable"), (t.status, t.dead_reason))
        self.assertIn("HTTP 404", t.last_error or "")
        self.assertEqual([(404, "failed")], [(a.http_status, a.outcome) for a in c.attempts(t.id)])
        detail = support.eventually(lambda: (lambda d: d if d.deliveries is not None and d.deliveries.recent else None)(c.queue(q)),
                                    "the dispatcher reports the queue's deliveries")
        assert detail.deliveries is not None
        self.assertEqual((1, 404), (detail.deliveries.statuses.get("404"), detail.deliveries.last_status))
        self.assertEqual({"p50", "p99"}, set(detail.deliveries.latency_ms))

        s = c.update_queue(q, push=taskmaster.PushPatch(headers=None, non_retryable_statuses=None))
        assert s.push is not None
        self.assertIsNone(s.push.secret, "no secret without a creation or a rotation")
        self.assertEqual(([], [400, 401, 403, 404, 410, 422]), (s.push.header_names, s.push.non_retryable_statuses))
        self.assertIsNone(c.update_queue(q, push=None).push, "push turned off")
        with self.assertRaises(taskmaster.ValidationError) as v:
            c.update_queue(q, push=taskmaster.PushPatch(url="http://push.example.com/hook"))
        self.assertIn("push.url", [e.field for e in v.exception.errors])

    def test_named_limits_and_per_group_rate_limits(self) -> None:
        c, q = self.c, self.queue
        name = support.unique("py-limit")
        made = c.put_limit(name, per_second=5, burst=10, max_running=3)
        self.assertTrue(made.created)
        self.assertEqual((name, 5.0, 10, 3, []), (made.name, made.per_second, made.burst, made.max_running, made.queues))
        again = c.put_limit(name, max_running=4)
        self.assertFalse(again.created)
        self.assertEqual((None, None, 4), (again.per_second, again.burst, again.max_running), "a put replaces every value")
        c.put_limit(name, per_second=2)

        s = c.update_queue(q, limits=[name], rate_limit_per_group=taskmaster.RateLimit(1, 2))
        self.assertEqual([name], s.limits)
        assert s.rate_limit_per_group is not None
        self.assertEqual((1.0, 2), (s.rate_limit_per_group.per_second, s.rate_limit_per_group.burst))
        got = c.limit(name)
        self.assertEqual(([q], 2.0, 2), (got.queues, got.per_second, got.burst))
        self.assertIn(name, [x.name for x in c.limits()])
        self.assertEqual(([name], 1.0), (c.queue(q).settings.limits, c.queue(q).settings.rate_limit_per_group.per_second))  # type: ignore[union-attr]

        with self.assertRaises(taskmaster.LimitInUse) as used:
            c.delete_limit(name)
        self.assertIsInstance(used.exception, taskmaster.Conflict)
        with self.assertRaises(taskmaster.ValidationError):
            c.update_queue(q, limits=[support.unique("no-such-limit")])
        cleared = c.update_queue(q, limits=None, rate_limit_per_group=None)
        self.assertEqual(([], None), (cleared.limits, cleared.rate_limit_per_group))
        gone = c.delete_limit(name)
        self.assertEqual((name, 2.0), (gone.name, gone.per_second))
        with self.assertRaises(taskmaster.LimitNotFound) as nf:
            c.limit(name)
        self.assertIsInstance(nf.exception, taskmaster.NotFound)


if __name__ == "__main__":
    unittest.main()
