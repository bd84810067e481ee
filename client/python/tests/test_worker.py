"""The Worker's guarantees, through the fault proxy in front of a real
server (tests/sdks): the adversities of issue 29 that every runner is held
to, and the rules of the lease protocol."""

from __future__ import annotations

import contextlib
import contextvars
import json
import threading
import time
import unittest
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import taskmaster
from taskmaster._http import Response, RetryPolicy, Transport
from taskmaster.errors import problem_from_response
from taskmaster.worker import _Job

from . import support


class Recorder:
    """What handlers saw, across their threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: Dict[str, int] = {}
        self.causes: Dict[str, Optional[taskmaster.Stopped]] = {}
        self.running = 0
        self.most = 0

    def enter(self, ctx: taskmaster.TaskContext) -> None:
        with self.lock:
            self.calls[ctx.task.id] = self.calls.get(ctx.task.id, 0) + 1
            self.running += 1
            self.most = max(self.most, self.running)

    def leave(self, ctx: taskmaster.TaskContext) -> None:
        with self.lock:
            self.running -= 1
            self.causes[ctx.task.id] = ctx.cause

    def until_stopped(self, ctx: taskmaster.TaskContext) -> Any:
        """A handler recorded here that runs until asked to stop (at most
        30 s), then returns a result that must not be reported."""
        self.enter(ctx)
        ctx.wait(30)
        self.leave(ctx)
        return "too late"

    def gated(self, result: Any = None) -> Tuple[threading.Event, Callable[[taskmaster.TaskContext], Any]]:
        """A handler recorded here that returns only once the gate is set:
        ``result``, or ``{"id": <the task's id>}`` when None."""
        gate = threading.Event()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            self.enter(ctx)
            gate.wait(30)
            self.leave(ctx)
            return {"id": ctx.task.id} if result is None else result

        return gate, handle


PROBLEM = "urn:problem-type:taskmaster:"


class RefusingTransport(Transport):
    """A client's HTTP layer that answers the claims carrying reports, in
    turn, with the problems of ``refusals`` without sending them (as a
    server refusing them would: nothing is saved), and passes every other
    request on. Notes when each claim went out, and whether it carried
    reports and was refused."""

    def __init__(self, refusals: List[Dict[str, Any]]) -> None:
        super().__init__(support.URL, api_key=None, timeout=60.0, retry=RetryPolicy(), user_agent="taskmaster-python-tests",
                         ssl_context=None)
        self.refusals = list(refusals)
        self.lock = threading.Lock()
        self.claims: List[Tuple[float, bool, bool]] = []
        """(sent at, by time.monotonic(); carried reports; refused)."""

    def _once(
        self, method: str, target: str, path: str, data: Optional[bytes], headers: Dict[str, str],
        mode: str, wait: float, cid: str, try_timeout: Optional[float],
    ) -> Response:
        if path != "/tasks/v1/claim":
            return super()._once(method, target, path, data, headers, mode, wait, cid, try_timeout)
        body = json.loads(data or b"{}")
        carrying = bool(body.get("complete") or body.get("fail"))
        with self.lock:
            refusal = self.refusals.pop(0) if carrying and self.refusals else None
            self.claims.append((time.monotonic(), carrying, refusal is not None))
        if refusal is not None:
            raise problem_from_response(refusal["status"], "application/problem+json", json.dumps(refusal).encode(),
                                        instance=path, correlation_id=cid, retry_after=None)
        return super()._once(method, target, path, data, headers, mode, wait, cid, try_timeout)


class WorkerTest(unittest.TestCase):
    def setUp(self) -> None:
        support.require_server(self)
        support.arm("reset")
        self.c = support.client()
        self.addCleanup(self.c.close)
        self.queue = support.unique("py-worker")

    @contextlib.contextmanager
    def worker(self, handler: Callable[[taskmaster.TaskContext], Any], **kw: Any) -> Iterator[taskmaster.Worker]:
        expect_error = kw.pop("_expect_error", False)
        c = kw.pop("_client", self.c)
        # Heartbeats as the server asks: every 500 ms (tests/sdks).
        options: Dict[str, Any] = dict(queues=[self.queue], worker_id=support.unique("py-w"), claim_wait=0.5,
                                       install_signal_handlers=False)
        options.update(kw)
        w = taskmaster.Worker(c, handler, **options)
        errors: List[BaseException] = []
        with support.running(self, w, errors):
            yield w
        if errors and not expect_error:
            raise errors[0]
        self.worker_errors = errors

    def outcomes(self, task_id: str) -> List[Optional[str]]:
        return [a.outcome for a in self.c.attempts(task_id)]

    def test_completions_survive_a_four_second_outage(self) -> None:
        # Issue 29, 1: every request 503 for 4 s while handlers finish. A
        # spare slot keeps the claim loop long-polling, so the completes go
        # on their own (test_an_outage_during_the_carrying_claim_loses_no_result
        # holds the claims that carry them to the same).
        rec = Recorder()
        gate, handle = rec.gated()

        ids = [self.c.submit(self.queue, {"i": i}).id for i in range(4)]
        with self.worker(handle, concurrency=5, lease_seconds=30):
            support.eventually(lambda: len(rec.calls) == 4, "four handlers run")
            support.arm("answer", status=503, retry_after=1, ms=4000)
            gate.set()
            support.eventually(lambda: all(self.c.get(i).status == taskmaster.DONE for i in ids), "every task DONE")
        for i in ids:
            t = self.c.get(i)
            self.assertEqual(({"id": i}, 1), (t.result, t.attempts))
            self.assertEqual(["completed"], self.outcomes(i))
            self.assertEqual(1, rec.calls[i], "handled once")
        faulted = [r for r in support.proxy_log()["reports"] if r["task_id"] in ids and r["faulted"]]
        self.assertTrue(faulted, "completes were answered 503 during the outage")

    def test_throttled_reports_are_not_a_verdict(self) -> None:
        # Issue 29, 2: a 429 on complete is retried after Retry-After (a
        # spare slot: the completes go on their own).
        rec = Recorder()
        gate, handle = rec.gated("ok")

        ids = [self.c.submit(self.queue, {"i": i}).id for i in range(3)]
        with self.worker(handle, concurrency=4):
            support.eventually(lambda: len(rec.calls) == 3, "three handlers run")
            support.arm("answer", on=["complete"], status=429, retry_after=1, ms=2500)
            gate.set()
            support.eventually(lambda: all(self.c.get(i).terminal for i in ids), "every task finished")
        for i in ids:
            self.assertEqual((taskmaster.DONE, "ok"), (self.c.get(i).status, self.c.get(i).result))
        throttled = [r for r in support.proxy_log()["reports"] if r["task_id"] in ids and r["status"] == 429]
        self.assertTrue(throttled, "completes were answered 429")

    def test_a_lease_lost_in_a_partition_stops_the_handler_and_drops_its_result(self) -> None:
        # Issue 29, 6: a partition longer than the 5 s lease.
        rec = Recorder()
        started = threading.Event()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            try:
                if ctx.attempt == 1:
                    started.set()
                    ctx.wait(20)
                    return {"late": True}  # must never be reported
                return {"attempt": ctx.attempt}
            finally:
                rec.leave(ctx)

        task = self.c.submit(self.queue, {}, max_attempts=3)
        with self.worker(handle, lease_seconds=5):
            self.assertTrue(started.wait(60))
            lease = self.c.get(task.id).lease_id
            support.arm("partition", ms=8000)
            support.eventually(lambda: rec.causes.get(task.id) is not None, "the handler is asked to stop", timeout=30)
            self.assertIsInstance(rec.causes[task.id], taskmaster.TaskLost)
            support.eventually(lambda: self.c.get(task.id).status == taskmaster.DONE, "the task runs again and completes")
        t = self.c.get(task.id)
        self.assertEqual(({"attempt": 2}, 2), (t.result, t.attempts))
        self.assertEqual(["lease_expired", "completed"], self.outcomes(task.id))
        reports = [r for r in support.proxy_log()["reports"] if r["lease_id"] == lease]
        self.assertEqual([], reports, "nothing was reported under the lost lease")

    def test_drain_hands_a_last_attempt_back_without_spending_it(self) -> None:
        # Issue 29, 4: a stopping worker releases what its handlers did not finish.
        if not support.server_has_release():
            self.skipTest("the server has no release call yet (issue 29)")
        rec = Recorder()
        task = self.c.submit(self.queue, {}, max_attempts=1)

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            time.sleep(3)  # ignores the request to stop
            rec.leave(ctx)
            return "too late"

        with self.worker(handle, drain_timeout=0.5, cancel_grace=0.5):
            support.eventually(lambda: task.id in rec.calls, "the handler runs")
        t = self.c.get(task.id)
        self.assertEqual((taskmaster.PENDING, 0), (t.status, t.attempts), "handed back, its attempt given back")
        self.assertEqual(["released"], self.outcomes(task.id))

    def test_concurrency_is_never_exceeded(self) -> None:
        # Issue 29, 7: a slot is held until its handler returns, even past
        # task_timeout and cancel_grace.
        rec = Recorder()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            try:
                if ctx.attempt == 1:
                    time.sleep(1.0)  # ignores the timeout
                return "ok"
            finally:
                rec.leave(ctx)

        ids = [self.c.submit(self.queue, {"i": i}, max_attempts=3, retry=taskmaster.Backoff(0.1)).id for i in range(5)]
        with self.worker(handle, concurrency=2, task_timeout=0.2, cancel_grace=0.1):
            support.eventually(lambda: all(self.c.get(i).status == taskmaster.DONE for i in ids), "every task DONE")
        self.assertLessEqual(rec.most, 2, "never more handlers than concurrency")
        for i in ids:
            self.assertEqual(["failed", "completed"], self.outcomes(i), "timed out once, then completed")

    def test_refused_key_stops_the_worker_without_failing_its_task(self) -> None:
        # Issue 29, 2: 401/403 are no verdict on the result, whether it
        # rides the next claim (concurrency 1) or goes on its own after the
        # claim was refused.
        task = self.c.submit(self.queue, {})
        gate = threading.Event()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            gate.wait(30)
            return "ok"

        with self.worker(handle, _expect_error=True) as w:
            support.eventually(lambda: self.c.get(task.id).status == taskmaster.RUNNING, "the task runs")
            support.arm("answer", on=["claim", "complete"], status=401, ms=3000)
            gate.set()
            support.eventually(lambda: w._stopping.is_set(), "the worker stops")
        self.assertEqual(1, len(self.worker_errors))
        self.assertIsInstance(self.worker_errors[0], taskmaster.WorkerError)
        self.assertIsInstance(self.worker_errors[0].cause, taskmaster.Unauthorized)  # type: ignore[attr-defined]
        t = self.c.get(task.id)
        self.assertEqual(taskmaster.RUNNING, t.status, "the task was not failed: the server takes it back")
        self.assertEqual([None], self.outcomes(task.id))

    def test_snooze_and_next_and_non_retryable(self) -> None:
        def handle(ctx: taskmaster.TaskContext) -> Any:
            kind = ctx.payload["kind"]
            if kind == "snooze" and ctx.task.snoozes == 0:
                raise taskmaster.Snooze(1)
            if kind == "bad":
                raise taskmaster.NonRetryable("bad input")
            if kind == "next":
                return taskmaster.Next({"n": 1}, [taskmaster.SubmitParams(self.queue, {"kind": "child"}, idempotency_key="child-1")])
            if kind == "unencodable":
                return {"set": {1, 2}}
            return kind

        b = self.c.submit_batch([taskmaster.SubmitParams(self.queue, {"kind": k}) for k in ("snooze", "bad", "next", "unencodable")]).tasks
        with self.worker(handle, concurrency=2):
            support.eventually(lambda: all(self.c.get(t.id).terminal for t in b), "every task finished")
            support.eventually(lambda: len(self.c.list(queue=self.queue, status="DONE").tasks) == 3, "the child is done")
        snooze, bad, nxt, unencodable = (self.c.get(t.id) for t in b)
        self.assertEqual((taskmaster.DONE, 1, 1), (snooze.status, snooze.snoozes, snooze.attempts))
        self.assertEqual((taskmaster.DEAD, "non_retryable", "bad input"), (bad.status, bad.dead_reason, bad.last_error))
        self.assertEqual((taskmaster.DONE, {"n": 1}), (nxt.status, nxt.result))
        self.assertEqual((taskmaster.DEAD, "non_retryable"), (unencodable.status, unencodable.dead_reason))
        self.assertIn("cannot be encoded as JSON", unencodable.last_error or "")

    def test_a_late_claim_answer_is_not_a_lost_one(self) -> None:
        # A claim's answer held past the server's heartbeat interval (the
        # grace after which a heartbeat that does not list a task takes it
        # back as orphaned): the heartbeats sent meanwhile name the claim in
        # flight, so the task stays this worker's and runs once.
        interval = self.c.register(support.unique("py-probe")).heartbeat_interval_seconds
        rec = Recorder()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            rec.leave(ctx)
            return "ok"

        task = self.c.submit(self.queue, {})
        held = support.proxy_log()["actions"].get("claim delay_answer", 0)  # by other tests
        support.arm("delay-answers", on=["claim"], ms=int((interval + 1.5) * 1000), count=1)
        with self.worker(handle, heartbeat_interval=0.2):
            support.eventually(lambda: self.c.get(task.id).terminal, "the task finished")
        self.assertEqual(held + 1, support.proxy_log()["actions"].get("claim delay_answer"), "the claim's answer was held")
        self.assertEqual(taskmaster.DONE, self.c.get(task.id).status)
        self.assertEqual(["completed"], self.outcomes(task.id), "one attempt, completed")
        self.assertEqual(1, rec.calls[task.id], "the handler ran once")

    def test_a_handler_gets_its_trace_and_reports_progress(self) -> None:
        traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        current: "contextvars.ContextVar[Optional[str]]" = contextvars.ContextVar("current_trace", default=None)

        @contextlib.contextmanager
        def scope(ctx: taskmaster.TaskContext) -> Iterator[None]:
            # What a tracing system's hook does: make the task's trace the
            # current one while the handler runs.
            token = current.set(ctx.trace_headers().get("traceparent"))
            try:
                yield
            finally:
                current.reset(token)

        def handle(ctx: taskmaster.TaskContext) -> Any:
            ctx.progress(40, "4 of 10", {"done": 4})
            return {"current": current.get(), "trace": ctx.trace_headers()}

        async def handle_async(ctx: taskmaster.TaskContext) -> Any:
            return {"current": current.get()}

        traced = self.c.submit(self.queue, {}, traceparent=traceparent, tracestate="vendor=1")
        with self.worker(handle, handler_context=scope):
            t = self.c.wait(traced.id, timeout=60)
        self.assertEqual(taskmaster.DONE, t.status, t.last_error)
        self.assertEqual({"current": traceparent, "trace": {"traceparent": traceparent, "tracestate": "vendor=1"}}, t.result)
        assert t.progress is not None
        self.assertEqual((40.0, "4 of 10", {"done": 4}), (t.progress.percent, t.progress.message, t.progress.details))

        plain = self.c.submit(self.queue, {})
        with self.worker(handle_async, handler_context=scope):
            t = self.c.wait(plain.id, timeout=60)
        self.assertEqual((taskmaster.DONE, {"current": None}), (t.status, t.result), "no trace, none current; async handlers in the scope too")

    def test_a_time_limit_stops_the_handler_and_drops_its_outcome(self) -> None:
        rec = Recorder()  # its result is never reported: the server ended the attempt
        task = self.c.submit(self.queue, {}, timeout_seconds=1, max_attempts=1)
        with self.worker(rec.until_stopped, heartbeat_interval=0.2):
            support.eventually(lambda: task.id in rec.causes, "the handler is stopped", timeout=30)
            t = self.c.wait(task.id, timeout=60)
        self.assertIsInstance(rec.causes[task.id], taskmaster.TaskTimeLimit)
        self.assertEqual((taskmaster.DEAD, "exhausted"), (t.status, t.dead_reason))
        self.assertEqual(["timed_out"], self.outcomes(task.id), "the server ended the attempt")
        self.assertEqual([], [r for r in support.proxy_log()["reports"] if r["task_id"] == task.id], "nothing was reported")

    def test_a_task_gone_at_its_time_limit_stops_the_handler_for_the_limit_not_as_lost(self) -> None:
        # The claim's answer comes 2.5 s after the server claimed the task:
        # its 1 s attempt ended meanwhile, and the first heartbeat after the
        # answer names it both lost and to cancel (the server's sign of a
        # time limit), well before the worker's own clock, counting from the
        # answer, would.
        rec = Recorder()
        task = self.c.submit(self.queue, {}, timeout_seconds=1, max_attempts=1)
        held = support.proxy_log()["actions"].get("claim delay_answer", 0)  # by other tests
        support.arm("delay-answers", on=["claim"], ms=2500, count=1)
        with self.worker(rec.until_stopped, heartbeat_interval=0.1):
            support.eventually(lambda: task.id in rec.causes, "the handler is stopped", timeout=30)
        self.assertEqual(held + 1, support.proxy_log()["actions"].get("claim delay_answer"), "the claim's answer was held")
        self.assertIsInstance(rec.causes[task.id], taskmaster.TaskTimeLimit)
        self.assertEqual(["timed_out"], self.outcomes(task.id), "the server ended the attempt")
        self.assertEqual([], [r for r in support.proxy_log()["reports"] if r["task_id"] == task.id], "nothing was reported")

    # The runner rule: a report rides the next claim only when the claim
    # loop waits for a free slot.

    def test_one_at_a_time_each_report_rides_the_next_claim(self) -> None:
        rec = Recorder()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            rec.leave(ctx)
            if ctx.payload["i"] == 0:
                raise taskmaster.NonRetryable("bad input")
            return {"i": ctx.payload["i"]}

        n = 5
        ids = [self.c.submit(self.queue, {"i": i}).id for i in range(n)]
        # claim_wait 2 s: the empty claims after the last task are few.
        with self.worker(handle, claim_wait=2) as w:
            support.eventually(lambda: all(self.c.get(i).terminal for i in ids), "every task finished")
            claims = [c for c in support.proxy_log()["claims"] if c["worker_id"] == w.worker_id]
        bad = self.c.get(ids[0])
        self.assertEqual((taskmaster.DEAD, "non_retryable", "bad input"), (bad.status, bad.dead_reason, bad.last_error))
        self.assertEqual(["failed"], self.outcomes(ids[0]))
        for i, tid in enumerate(ids[1:], 1):
            t = self.c.get(tid)
            self.assertEqual((taskmaster.DONE, {"i": i}), (t.status, t.result))
            self.assertEqual(["completed"], self.outcomes(tid))
            self.assertEqual(1, rec.calls[tid])
        reports = [r for r in support.proxy_log()["reports"] if r["task_id"] in ids]
        self.assertEqual([], reports, "no complete or fail on its own: each rode the next claim")
        self.assertEqual([[i] for i in ids], [c["task_ids"] for c in claims if c["task_ids"]], "one task a claim, in order")
        self.assertLessEqual(len(claims), n + 2, "a claim a task, and the empty ones after the last")

    def test_an_outage_during_the_carrying_claim_loses_no_result(self) -> None:
        # The claim carrying the completion is answered 503 until the SDK's
        # retries are spent; the complete then goes on its own, through
        # the rest of the outage, as any report does.
        rec = Recorder()
        gate, handle = rec.gated()

        task = self.c.submit(self.queue, {})
        refused = support.proxy_log()["actions"].get("claim status", 0)
        with self.worker(handle) as w:
            support.eventually(lambda: task.id in rec.calls and w._slot_waiting, "the handler runs, the claim loop waits for its slot")
            support.arm("answer", on=["claim", "complete"], status=503, retry_after=1, ms=8000)
            gate.set()
            support.eventually(lambda: self.c.get(task.id).status == taskmaster.DONE, "the task is DONE")
        t = self.c.get(task.id)
        self.assertEqual(({"id": task.id}, 1), (t.result, t.attempts))
        self.assertEqual(["completed"], self.outcomes(task.id))
        log = support.proxy_log()
        self.assertGreater(log["actions"].get("claim status", 0), refused, "the claim carrying the completion met the outage")
        completes = [r for r in log["reports"] if r["task_id"] == task.id]
        self.assertTrue(completes and all(r["action"] == "complete" for r in completes))
        self.assertTrue(any(r["faulted"] for r in completes), "then the complete went on its own, into the outage")
        self.assertEqual([200], [r["status"] for r in completes if not r["faulted"]], "and was saved once")

    def test_a_claim_refused_for_its_reports_is_sent_again_at_once(self) -> None:
        # Concurrency 1: each handler's completion rides the next claim. The
        # first three such claims are refused for what they carry, as the
        # server refuses them: too large (413), invalid (422), and reports
        # on a claim at all (400 naming "complete": a server older than
        # them). Each time the completion goes on its own and the claim is
        # sent again at once, not after poll_interval (8 s) as after a
        # failed claim.
        refusals: List[Dict[str, Any]] = [
            {"type": PROBLEM + "body-too-large", "title": "Payload Too Large", "status": 413, "detail": "the body is over the limit"},
            {"type": PROBLEM + "validation-error", "title": "Unprocessable Entity", "status": 422, "detail": "invalid request",
             "errors": [{"field": "complete[0].result", "message": "is nested too deep"}]},
            {"type": PROBLEM + "malformed-request", "title": "Bad Request", "status": 400, "detail": 'unknown field "complete"',
             "errors": [{"field": "complete", "message": "is not a known field"}]},
        ]
        net = RefusingTransport(refusals)
        refusing = support.client()
        refusing._t = net
        self.addCleanup(refusing.close)
        rec = Recorder()

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            rec.leave(ctx)
            return {"id": ctx.task.id}

        def past_refusals() -> bool:
            with net.lock:
                refused = [i for i, c in enumerate(net.claims) if c[2]]
                return len(refused) == len(refusals) and len(net.claims) > refused[-1] + 1

        ids = [self.c.submit(self.queue, {"i": i}).id for i in range(3)]
        with self.worker(handle, _client=refusing, poll_interval=8, max_idle_interval=8):
            support.eventually(lambda: all(self.c.get(i).status == taskmaster.DONE for i in ids), "every task DONE", timeout=60)
            support.eventually(past_refusals, "a claim after the last refused one", timeout=30)
        with net.lock:
            claims = list(net.claims)
        refused = [i for i, c in enumerate(claims) if c[2]]
        self.assertEqual(len(refusals), len(refused), "three claims carrying reports were refused")
        for i in refused:
            self.assertTrue(claims[i][1], "a refused claim carried reports")
            self.assertLess(claims[i + 1][0] - claims[i][0], 4.0, f"claim {i + 1} went out at once after the refusal of claim {i}, not after poll_interval")
        for tid in ids:
            t = self.c.get(tid)
            self.assertEqual(({"id": tid}, ["completed"], 1), (t.result, self.outcomes(tid), rec.calls[tid]))
        completes = [(r["task_id"], r["action"], r["status"]) for r in support.proxy_log()["reports"] if r["task_id"] in ids]
        self.assertEqual(sorted((tid, "complete", 200) for tid in ids), sorted(completes), "each completion went on its own, once")

    def test_a_report_the_carrying_claim_gave_back_keeps_its_slot(self) -> None:
        # Concurrency 1: the claim carrying the first task's completion is
        # answered 503 until its retries are spent (~4 s), the complete on
        # its own for longer. Until that complete is saved the worker holds
        # the task, so it claims no other: the second task's handler starts
        # only once the first is DONE (a heartbeat's list stays within
        # concurrency too).
        rec = Recorder()
        gate = threading.Event()
        seen: Dict[str, str] = {}

        first = self.c.submit(self.queue, {}).id

        def handle(ctx: taskmaster.TaskContext) -> Any:
            rec.enter(ctx)
            if ctx.task.id == first:
                gate.wait(30)
            else:
                seen[ctx.task.id] = self.c.get(first).status
            rec.leave(ctx)
            return {"id": ctx.task.id}

        with self.worker(handle) as w:
            support.eventually(lambda: first in rec.calls and w._slot_waiting, "the handler runs, the claim loop waits for its slot")
            second = self.c.submit(self.queue, {}).id
            support.arm("answer", on=["claim"], status=503, retry_after=1, ms=6000)
            support.arm("answer", on=["complete"], status=503, retry_after=1, ms=10000)
            gate.set()
            support.eventually(lambda: all(self.c.get(i).status == taskmaster.DONE for i in (first, second)), "both DONE")
        self.assertEqual({second: taskmaster.DONE}, seen, "the second task was claimed once the first was DONE")
        for tid in (first, second):
            self.assertEqual(({"id": tid}, ["completed"]), (self.c.get(tid).result, self.outcomes(tid)))
        completes = [r for r in support.proxy_log()["reports"] if r["task_id"] == first]
        self.assertTrue(any(r["faulted"] for r in completes), "the first complete went on its own, into the outage")

    def test_one_claim_carries_at_most_max_batch_reports(self) -> None:
        # A claim takes at most MAX_BATCH reports (the server refuses more):
        # a worker of more slots whose claim loop waits for one hands over
        # that many; the next finished handler reports on its own, keeping
        # its slot.
        n = taskmaster.MAX_BATCH + 1
        w = taskmaster.Worker(self.c, lambda ctx: None, concurrency=n, install_signal_handlers=False)
        w._running, w._slot_waiting = n, True
        jobs = [_Job(taskmaster.Task(f"t{i}", self.queue, taskmaster.RUNNING, lease_id=f"l{i}"), 30.0, time.monotonic() + 30, None)
                for i in range(n)]
        handed = [w._carry(j, "complete", {"result": None, "enqueue": []}) for j in jobs]
        self.assertEqual([True] * taskmaster.MAX_BATCH + [False], handed)
        self.assertEqual((taskmaster.MAX_BATCH, 1), (len(w._carried), w._running))

    def test_a_lost_answer_of_the_carrying_claim_loses_no_result(self) -> None:
        # The claim carrying the completion reaches the server, its answer
        # is lost (held past the worker's client's timeout); the SDK's
        # retry (same request id) gets the lost try's task, and the saved
        # completion back as invalid-transition DONE: delivered, not sent
        # again.
        rec = Recorder()
        gate, handle = rec.gated()

        first, second = (self.c.submit(self.queue, {"i": i}).id for i in range(2))
        held = support.proxy_log()["actions"].get("claim delay_answer", 0)
        impatient = support.client(timeout=1.0)
        self.addCleanup(impatient.close)
        with self.worker(handle, _client=impatient) as w:
            support.eventually(lambda: first in rec.calls and w._slot_waiting, "the handler runs, the claim loop waits for its slot")
            support.arm("delay-answers", on=["claim"], ms=3000, count=1)
            gate.set()
            support.eventually(lambda: all(self.c.get(i).status == taskmaster.DONE for i in (first, second)), "both DONE")
        log = support.proxy_log()
        self.assertEqual(held + 1, log["actions"].get("claim delay_answer", 0), "the carrying claim's answer was held")
        lost = [c for c in log["claims"] if c["worker_id"] == w.worker_id and c["lost"]]
        self.assertEqual([[second]], [c["task_ids"] for c in lost])
        again = [c for c in log["claims"] if c["request_id"] == lost[0]["request_id"] and not c["lost"]]
        self.assertEqual([[second]], [c["task_ids"] for c in again], "the retry got the lost try's task")
        for tid in (first, second):
            t = self.c.get(tid)
            self.assertEqual(({"id": tid}, ["completed"], 1), (t.result, self.outcomes(tid), rec.calls[tid]))
        self.assertEqual([], [r for r in log["reports"] if r["task_id"] in (first, second)], "no report on its own")

    def test_a_report_does_not_wait_for_a_long_poll(self) -> None:
        # Concurrency 2 and one task: the claim loop long-polls for the
        # free slot while the handler runs; the handler's report goes out
        # on its own at once, not with the claim after the poll.
        rec = Recorder()
        gate, handle = rec.gated("ok")

        def answered() -> Set[str]:
            return {c["request_id"] for c in support.proxy_log()["claims"]}

        task = self.c.submit(self.queue, {})
        with self.worker(handle, concurrency=2, claim_wait=6) as w:
            support.eventually(lambda: task.id in rec.calls, "the handler runs")
            polling = support.eventually(lambda: set(w._held()[1]) - answered(), "a claim long-polls")
            gate.set()
            support.eventually(lambda: self.c.get(task.id).status == taskmaster.DONE, "the task is DONE")
            self.assertTrue(polling <= set(w._held()[1]) and polling.isdisjoint(answered()), "before the poll ended")
        self.assertEqual(["completed"], self.outcomes(task.id))
        completes = [r for r in support.proxy_log()["reports"] if r["task_id"] == task.id]
        self.assertEqual([("complete", 200)], [(r["action"], r["status"]) for r in completes], "on its own")

    def test_a_400_to_heartbeats_that_names_no_field_does_not_end_lease_renewal(self) -> None:
        # Only a server that does not know heartbeats' task lists (400
        # naming "tasks") turns the worker to plain heartbeats, which renew
        # no lease; the proxy's 400 names no field: the heartbeats after it
        # list the task again and renew its lease past its 5 s.
        rec = Recorder()
        gate, handle = rec.gated()
        task = self.c.submit(self.queue, {}, max_attempts=3)
        with self.worker(handle, lease_seconds=5):
            support.eventually(lambda: rec.calls.get(task.id) == 1, "the handler runs")
            support.arm("answer", on=["heartbeat"], status=400, ms=1200)
            time.sleep(7)  # past the lease: only renewals keep it
            gate.set()
            support.eventually(lambda: self.c.get(task.id).status == taskmaster.DONE, "the task completes")
        self.assertEqual(["completed"], self.outcomes(task.id))
        self.assertEqual(1, rec.calls[task.id])
        self.assertIsNone(rec.causes[task.id], "the handler was not asked to stop")

    def test_options_are_checked(self) -> None:
        with self.assertRaises(ValueError):
            taskmaster.Worker(self.c, lambda ctx: None, concurrency=0)
        with self.assertRaises(ValueError):
            taskmaster.Worker(self.c, lambda ctx: None, worker_id="bad id")
        with self.assertRaises(ValueError):
            taskmaster.Worker(self.c, lambda ctx: None, claim_wait=31)


if __name__ == "__main__":
    unittest.main()
