"""The Client against a real server (through the fault proxy of
tests/sdks): every call of the API, and problems as typed exceptions."""

from __future__ import annotations

import datetime as dt
import threading
import time
import unittest
import uuid
from typing import List

import taskmaster

from . import support


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        support.require_server(self)
        support.arm("reset")
        self.c = support.client()
        self.addCleanup(self.c.close)
        self.queue = support.unique("py-client")

    def test_submit_every_field_get_and_list(self) -> None:
        c, q = self.c, self.queue
        soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        t = c.submit(q, {"to": "a@example.com"}, priority=5, max_attempts=4, tags=["eu"], run_at=soon,
                     deadline=soon + dt.timedelta(days=1), idempotency_key="k-1", unique_key="u-1",
                     retry=taskmaster.Backoff(0.5, 60, "full"), group_key="tenant-7",
                     metadata={"tenant": "acme"}, timeout_seconds=30)
        self.assertEqual((taskmaster.PENDING, 5, 4, ["eu"]), (t.status, t.priority, t.max_attempts, t.tags))
        self.assertEqual(("k-1", "u-1", "tenant-7"), (t.idempotency_key, t.unique_key, t.group_key))
        self.assertEqual(taskmaster.Backoff(0.5, 60, "full"), t.retry)
        self.assertEqual(({"tenant": "acme"}, 30), (t.metadata, t.timeout_seconds))
        self.assertEqual([t.id], [x.id for x in c.list(queue=q, metadata={"tenant": "acme"}).tasks])
        self.assertIsNotNone(t.run_at)
        assert t.run_at is not None
        self.assertLess(abs((t.run_at - soon).total_seconds()), 0.001)
        self.assertEqual(t.id, c.submit(q, {"other": True}, idempotency_key="k-1").id, "the idempotency key names the task")
        got = c.get(t.id)
        self.assertEqual((t.id, {"to": "a@example.com"}, [], []), (got.id, got.payload, got.depends_on, got.blocked_by))
        delayed = c.submit(taskmaster.SubmitParams(q, None, delay=3600))
        assert delayed.run_at is not None
        self.assertGreater(delayed.run_at, dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=59))

        more = c.submit_batch([taskmaster.SubmitParams(q, {"i": i}) for i in range(5)])
        self.assertEqual([True] * 5, more.created)
        page = c.list(queue=q, limit=2)
        self.assertEqual(2, len(page.tasks))
        self.assertIsNotNone(page.next_cursor)
        every = list(c.iter_tasks(queue=q, page_size=2))
        self.assertEqual(7, len(every))
        self.assertEqual(sorted(x.id for x in every), sorted({x.id for x in every}), "no task twice across pages")
        self.assertEqual(every[0].id, more.tasks[-1].id, "newest first")
        self.assertEqual(7, len(c.list(taskmaster.TaskFilter(queue=q, status="PENDING"), limit=100).tasks))
        with self.assertRaises(ValueError):
            c.submit(taskmaster.SubmitParams(q, run_at=dt.datetime(2030, 1, 1)))  # naive: no instant

    def test_problems_are_typed(self) -> None:
        c, q = self.c, self.queue
        with self.assertRaises(taskmaster.ValidationError) as v:
            c.submit_batch([taskmaster.SubmitParams(q), taskmaster.SubmitParams("bad queue", max_attempts=0)])
        fields = {e.field for e in v.exception.errors}
        self.assertEqual({"tasks[1].queue", "tasks[1].max_attempts"}, fields)
        self.assertEqual(422, v.exception.status)
        self.assertTrue(v.exception.correlation_id)
        self.assertEqual("validation-error", v.exception.slug)
        with self.assertRaises(taskmaster.TaskNotFound) as nf:
            c.get(str(uuid.uuid4()))
        self.assertIsInstance(nf.exception, taskmaster.NotFound)
        t = c.submit(q, {})
        with self.assertRaises(taskmaster.InvalidTransition) as it:
            c.retry(t.id)
        self.assertEqual(taskmaster.PENDING, it.exception.current_status)
        with self.assertRaises(taskmaster.QueueNotFound):
            c.queue(support.unique("nothing"))
        worker = support.unique("py-hand")
        c.register(worker, queues=[q])
        (claimed,) = c.claim(worker, limit=1)
        with self.assertRaises(taskmaster.LeaseLost) as ll:
            c.complete(claimed.id, worker_id=worker, lease_id=str(uuid.uuid4()))
        self.assertEqual(taskmaster.RUNNING, ll.exception.current_status)
        with self.assertRaises(taskmaster.WorkerNotFound):
            c.heartbeat(support.unique("ghost"), [])

    def test_the_worker_protocol_by_hand(self) -> None:
        c, q = self.c, self.queue
        worker = support.unique("py-hand")
        reg = c.register(worker, queues=[q], tags=["gpu"])
        self.assertTrue(reg.created)
        self.assertGreater(reg.heartbeat_interval_seconds, 0)
        self.assertFalse(c.register(worker, queues=[q], tags=["gpu"]).created)
        self.assertEqual([], c.claim(worker, limit=5))

        # A waiting claim wakes when a task arrives.
        got: List[taskmaster.Task] = []
        th = threading.Thread(target=lambda: got.extend(c.claim(worker, wait=10, lease_seconds=60)))
        th.start()
        b = c.submit_batch([
            taskmaster.SubmitParams(q, {"step": "a"}, ref="a"),
            taskmaster.SubmitParams(q, {"step": "b"}, ref="b", depends_on=["a"]),
        ])
        th.join(15)
        self.assertEqual([b.tasks[0].id], [t.id for t in got])
        a = got[0]
        assert a.lease_id is not None
        self.assertEqual(taskmaster.BLOCKED, c.get(b.tasks[1].id).status)
        hb = c.heartbeat(worker, [a.ref])
        self.assertEqual(([], [], False), (hb.lost, hb.cancel, hb.drain))
        extended = c.extend(a.id, worker_id=worker, lease_id=a.lease_id, lease_seconds=120)
        self.assertIsNotNone(extended.lease_expires_at)
        done = c.complete(a.id, worker_id=worker, lease_id=a.lease_id, result={"ok": 1},
                          enqueue=[taskmaster.SubmitParams(q, {"step": "c"})])
        self.assertEqual(taskmaster.DONE, done.status)
        assert done.enqueued is not None
        self.assertEqual(1, len(done.enqueued))

        tasks = c.claim(worker, limit=10)
        self.assertEqual({b.tasks[1].id, done.enqueued[0].id}, {t.id for t in tasks})
        self.assertEqual([{"step": "a"}], [p.payload for p in c.parents(b.tasks[1].id)])
        bt, ct = sorted(tasks, key=lambda t: t.id != b.tasks[1].id)
        outcomes = c.complete_batch(worker, [taskmaster.CompleteItem(bt.id, bt.lease_id or "", {"n": 2}),
                                             taskmaster.CompleteItem(ct.id, str(uuid.uuid4()))])
        self.assertEqual(["done", "error"], [o.outcome for o in outcomes])
        self.assertIsInstance(outcomes[1].error(), taskmaster.LeaseLost)
        self.assertIsNone(outcomes[0].error())
        snoozed = c.snooze(ct.id, worker_id=worker, lease_id=ct.lease_id or "", delay=1)
        self.assertEqual((taskmaster.PENDING, 1), (snoozed.status, snoozed.snoozes))
        again = support.eventually(lambda: c.claim(worker, limit=1), "the snoozed task comes back")
        failed = c.fail_batch(worker, [taskmaster.FailItem(again[0].id, again[0].lease_id or "", "x" * 70000, non_retryable=True)])
        self.assertEqual(["dead"], [o.outcome for o in failed])
        assert failed[0].task is not None and failed[0].task.last_error is not None
        self.assertTrue(failed[0].task.last_error.endswith("...(truncated)"))
        self.assertEqual(["snoozed", "failed"], [x.outcome for x in c.attempts(again[0].id)])
        self.assertIn(worker, [w.id for w in c.workers()])
        drained = c.drain(worker)
        self.assertTrue(drained.draining)
        self.assertTrue(c.heartbeat(worker, []).drain)

    def test_a_claim_carries_reports(self) -> None:
        c, q = self.c, self.queue
        worker = support.unique("py-hand")
        c.register(worker, queues=[q])
        ids = [c.submit(q, {"i": i}, max_attempts=3).id for i in range(4)]
        a, b = c.claim(worker, limit=2)
        assert a.lease_id is not None and b.lease_id is not None
        complete = [taskmaster.CompleteItem(a.id, a.lease_id, {"n": 1})]
        fail = [taskmaster.FailItem(b.id, b.lease_id, "boom", non_retryable=True)]

        # The first answer is lost (held past the client's timeout): the
        # SDK sends the claim again with its request id; the reports the
        # lost try saved come back as invalid-transition with their new
        # status, the claim with the lost try's task.
        impatient = support.client(timeout=1.0)
        self.addCleanup(impatient.close)
        support.arm("delay-answers", on=["claim"], ms=3000, count=1)
        lost = impatient.claim_reporting(worker, complete=complete, fail=fail, lease_seconds=60)
        self.assertEqual(1, len([x for x in support.proxy_log()["claims"] if x["worker_id"] == worker and x["lost"]]))
        self.assertEqual(1, len(lost.tasks))
        self.assertIn(lost.tasks[0].id, ids[2:])
        self.assertFalse(lost.truncated)
        (done,), (dead,) = lost.completed, lost.failed
        self.assertEqual(("error", "error"), (done.outcome, dead.outcome))
        self.assertIsInstance(done.error(), taskmaster.InvalidTransition)
        self.assertEqual(taskmaster.DONE, done.error().current_status)  # type: ignore[union-attr]
        self.assertEqual(taskmaster.DEAD, dead.error().current_status)  # type: ignore[union-attr]
        self.assertEqual((taskmaster.DONE, {"n": 1}), (c.get(a.id).status, c.get(a.id).result))
        self.assertEqual((taskmaster.DEAD, "non_retryable", "boom"), (lambda t: (t.status, t.dead_reason, t.last_error))(c.get(b.id)))

        # Without a loss the outcomes are the reports' own; a repeat with
        # the same request id answers with the same task, same lease, and
        # the completion it saved as invalid-transition DONE.
        t = lost.tasks[0]
        assert t.lease_id is not None
        rid = "py-claim-" + uuid.uuid4().hex
        got = c.claim_reporting(worker, complete=[taskmaster.CompleteItem(t.id, t.lease_id, "ok")], request_id=rid)
        (last,) = [i for i in ids[2:] if i != t.id]
        self.assertEqual([last], [x.id for x in got.tasks])
        self.assertEqual([], got.failed, "no fail sent, none answered")
        (ok,) = got.completed
        assert ok.task is not None
        self.assertEqual(("done", taskmaster.DONE, "ok", None), (ok.outcome, ok.task.status, ok.task.result, ok.error()))
        again = c.claim_reporting(worker, complete=[taskmaster.CompleteItem(t.id, t.lease_id, "ok")], request_id=rid)
        self.assertEqual([(last, got.tasks[0].lease_id)], [(x.id, x.lease_id) for x in again.tasks])
        (repeat,) = again.completed
        self.assertEqual("error", repeat.outcome)
        self.assertIsInstance(repeat.error(), taskmaster.InvalidTransition)
        self.assertEqual(taskmaster.DONE, repeat.error().current_status)  # type: ignore[union-attr]
        self.assertEqual(["completed"], [x.outcome for x in c.attempts(t.id)], "completed once")

        # A retryable failure with attempts left is requeued; one under
        # another lease is refused on its own.
        held = got.tasks[0]
        failed = c.claim_reporting(worker, fail=[taskmaster.FailItem(held.id, held.lease_id or "", "again"),
                                                 taskmaster.FailItem(a.id, str(uuid.uuid4()), "not mine")])
        self.assertEqual(["requeued", "error"], [o.outcome for o in failed.failed])
        self.assertIsInstance(failed.failed[1].error(), taskmaster.Conflict)
        requeued = failed.failed[0].task
        assert requeued is not None
        self.assertEqual((taskmaster.PENDING, "again"), (requeued.status, requeued.last_error))

        with self.assertRaises(ValueError):
            c.claim_reporting(worker, complete=[taskmaster.CompleteItem(held.id, "x", enqueue=[taskmaster.SubmitParams(q)])])
        # All or nothing: a refused item refuses the request, which changes nothing.
        before = c.get(held.id)
        lease = before.lease_id or str(uuid.uuid4())
        with self.assertRaises(taskmaster.ValidationError) as v:
            c.claim_reporting(worker, complete=[taskmaster.CompleteItem(held.id, lease)], fail=[taskmaster.FailItem(held.id, lease, "x")])
        self.assertEqual(["fail[0].id"], [e.field for e in v.exception.errors])
        after = c.get(held.id)
        self.assertEqual((before.status, before.lease_id, before.attempts), (after.status, after.lease_id, after.attempts))

    def test_waiting_for_results(self) -> None:
        c, q = self.c, self.queue
        worker = support.unique("py-hand")
        c.register(worker, queues=[q])

        def work(result: object) -> None:
            (t,) = c.claim(worker, limit=1, wait=10)
            c.complete(t.id, worker_id=worker, lease_id=t.lease_id or "", result=result)

        th = threading.Thread(target=work, args=({"sum": 3},))
        th.start()
        done = c.submit_and_wait(q, {"a": 1, "b": 2}, timeout=60)
        th.join(15)
        self.assertEqual((taskmaster.DONE, {"sum": 3}), (done.status, done.result))

        pending = c.submit(q, {})
        started = time.monotonic()
        self.assertEqual(taskmaster.PENDING, c.get(pending.id, wait=0.3).status, "the wait ends with the task as it is")
        self.assertGreaterEqual(time.monotonic() - started, 0.3)
        with self.assertRaises(taskmaster.WaitTimeout) as to:
            c.wait(pending.id, timeout=0.5)
        self.assertEqual((pending.id, taskmaster.PENDING), (to.exception.task.id, to.exception.task.status))
        self.assertIsInstance(to.exception, TimeoutError)

        th = threading.Thread(target=work, args=("late",))
        th.start()
        self.assertEqual((taskmaster.DONE, "late"), (lambda t: (t.status, t.result))(c.wait(pending.id, timeout=60)))
        th.join(15)
        with self.assertRaises(ValueError):
            c.get(pending.id, wait=61)

    def test_progress_and_events_of_chosen_tasks(self) -> None:
        c, q = self.c, self.queue
        worker = support.unique("py-hand")
        c.register(worker, queues=[q])
        chosen, other = (c.submit(q, {"i": i}).id for i in range(2))
        held = {t.id: t for t in c.claim(worker, limit=2)}
        self.assertEqual({chosen, other}, set(held))
        with self.assertRaises(taskmaster.LeaseLost):
            c.progress(chosen, worker_id=worker, lease_id=str(uuid.uuid4()), percent=10)

        n = 0

        def report() -> None:
            nonlocal n
            n += 1
            for tid in (other, chosen):
                c.progress(tid, worker_id=worker, lease_id=held[tid].lease_id or "", percent=n, message=f"step {n}", details={"n": n})

        # task.progress events: at most one a second per task.
        box = support.read_events(c.events(task_ids=[chosen], read_timeout=30), "task.progress", report, 1.1)
        self.assertEqual({chosen}, {ev.data["task_id"] for ev in box}, "only the chosen task's events")
        self.assertEqual("task.progress", box[-1].type)
        self.assertGreaterEqual(box[-1].data["progress"]["percent"], 1)
        p = c.get(chosen).progress
        assert p is not None
        self.assertEqual((float(n), f"step {n}", {"n": n}), (p.percent, p.message, p.details))
        self.assertIsNotNone(p.updated_at)

    def test_operators(self) -> None:
        c, q = self.c, self.queue
        ids = [c.submit(q, {"i": i}, group_key="g1").id for i in range(3)]
        self.assertEqual(taskmaster.DEAD, c.cancel(ids[0]).status)
        self.assertEqual(taskmaster.PENDING, c.retry(ids[0]).status)
        dry = c.bulk_cancel(queue=q, group_key="g1", dry_run=True)
        self.assertEqual((3, True, None), (dry.matched, dry.dry_run, dry.changed))
        real = c.bulk_cancel(taskmaster.TaskFilter(queue=q))
        self.assertEqual((3, 3), (real.matched, real.changed))
        self.assertEqual(3, c.bulk_retry(queue=q, status="DEAD", dead_reason="cancelled", dry_run=True).matched)
        self.assertEqual(3, c.bulk_retry(queue=q).changed)
        purge = c.purge_queue(q, dry_run=True)
        assert purge.result is not None
        self.assertEqual(3, purge.result.matched)
        purged = c.purge_queue(q, status="PENDING")
        assert purged.result is not None
        self.assertEqual(3, purged.result.removed)
        c.submit(q, {}, metadata={"tenant": "acme", "region": "eu"})
        c.submit(q, {}, metadata={"tenant": "acme", "region": "us"})
        self.assertEqual(1, c.bulk_cancel(queue=q, metadata={"tenant": "acme", "region": "eu"}, dry_run=True).matched, "every pair must hold")
        self.assertEqual(2, c.bulk_cancel(taskmaster.TaskFilter(queue=q, metadata={"tenant": "acme"})).changed)

        settings = c.update_queue(q, max_running=5, rate_limit=taskmaster.RateLimit(10, 20), max_running_per_group=2)
        self.assertEqual((5, 2), (settings.max_running, settings.max_running_per_group))
        assert settings.rate_limit is not None
        self.assertEqual((10.0, 20), (settings.rate_limit.per_second, settings.rate_limit.burst))
        self.assertTrue(c.pause_queue(q).paused)
        self.assertFalse(c.resume_queue(q).paused)
        cleared = c.update_queue(q, max_running=None, rate_limit=None)
        self.assertEqual((None, None, 2), (cleared.max_running, cleared.rate_limit, cleared.max_running_per_group))
        detail = c.queue(q)
        self.assertEqual((q, 2), (detail.queue, detail.settings.max_running_per_group))
        self.assertIn(q, [x.queue for x in c.queues(prefix="py-client-")])
        page = c.list_queues(pattern=q, limit=1)
        self.assertEqual([q], [x.queue for x in page.queues])
        with self.assertRaises(taskmaster.ValidationError):
            c.update_queue(q)  # {} changes nothing: a 422

    def test_schedules(self) -> None:
        c = self.c
        name = support.unique("py-sched")
        s = c.create_schedule(name, "@every 1h", taskmaster.ScheduleTask(self.queue, {"full": True}, max_attempts=2),
                              timezone="Europe/Paris", overlap="allow")
        self.assertEqual((name, "Europe/Paris", "allow", 2), (s.name, s.timezone, s.overlap, s.task.max_attempts))
        with self.assertRaises(taskmaster.ScheduleExists):
            c.create_schedule(name, "@daily", taskmaster.ScheduleTask(self.queue))
        self.assertIn(name, [x.name for x in c.schedules()])
        self.assertIsNone(c.pause_schedule(name).next_run_at)
        self.assertIsNotNone(c.resume_schedule(name).next_run_at)
        self.assertEqual("@daily", c.update_schedule(name, cron="@daily").cron)
        self.assertEqual(name, c.delete_schedule(name).name)
        with self.assertRaises(taskmaster.ScheduleNotFound):
            c.schedule(name)

    def test_keys(self) -> None:
        c = self.c
        k = c.create_key(support.unique("py-key"), ["produce", "read"], queues=["emails-*"], expires_in=3600)
        self.assertTrue(k.key.startswith("tmk_"))
        self.assertIsNotNone(k.expires_at)
        self.assertIn(k.id, [x.id for x in c.keys()])
        self.assertIsNotNone(c.revoke_key(k.id).revoked_at)
        with self.assertRaises(taskmaster.KeyNotFound):
            c.revoke_key(str(uuid.uuid4()))

    def test_events(self) -> None:
        c, q = self.c, self.queue
        box = support.read_events(c.events(queues=[q], types=["task.*"], read_timeout=30), "task.submitted", lambda: c.submit(q, {}), 0.5)
        self.assertEqual(q, box[-1].data["queue"])
        self.assertIsNotNone(box[-1].id)


class UnitTest(unittest.TestCase):
    """What needs no server."""

    def test_times(self) -> None:
        t = taskmaster.types.parse_time("2026-01-02T03:04:05.123456789Z")
        self.assertEqual(dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc), t)
        self.assertEqual(dt.datetime(2026, 1, 2, 1, 4, 5, tzinfo=dt.timezone.utc), taskmaster.types.parse_time("2026-01-02T03:04:05+02:00"))
        self.assertEqual("2026-01-02T03:04:05Z", taskmaster.types.format_time(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)))

    def test_problem_of_a_foreign_answer(self) -> None:
        p = taskmaster.errors.problem_from_response(502, "text/html", b"<h1>bad gateway</h1>", instance="/tasks/v1",
                                                    correlation_id="c", retry_after=None)
        self.assertIsInstance(p, taskmaster.ServerError)
        self.assertEqual(("about:blank", 502, "<h1>bad gateway</h1>"), (p.type, p.status, p.detail))

    def test_a_refused_connection_is_not_sent(self) -> None:
        c = taskmaster.Client("http://127.0.0.1:9", retry=taskmaster.RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.01))
        with self.assertRaises(taskmaster.TransportError) as e:
            c.submit("q", {})
        self.assertFalse(e.exception.sent)

    def test_retry_policy(self) -> None:
        p = taskmaster.RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=1.0)
        for n, top in ((1, 0.1), (2, 0.2), (4, 0.8), (9, 1.0)):
            d = p.delay(n)
            self.assertTrue(top / 2 <= d <= top, (n, d))
        with self.assertRaises(ValueError):
            taskmaster.RetryPolicy(max_attempts=0)


if __name__ == "__main__":
    unittest.main()
