"""Workflows through the SDK against a real server (tests/sdks): a handler
fans out with TaskContext.spawn and returns a Next whose join depends on
the children (and on itself, under ignore); the join reads every parent;
the run is read, retried and cancelled; replays, debounce and throttle."""

from __future__ import annotations

import contextlib
import datetime as dt
import unittest
import uuid
from typing import Any, Iterator, List

import taskmaster

from . import support


class WorkflowTest(unittest.TestCase):
    def setUp(self) -> None:
        support.require_server(self)
        support.arm("reset")
        self.c = support.client()
        self.addCleanup(self.c.close)
        self.queue = support.unique("py-wf")

    @contextlib.contextmanager
    def worker(self, handler: Any, queues: List[str]) -> Iterator[taskmaster.Worker]:
        w = taskmaster.Worker(self.c, handler, queues=queues, worker_id=support.unique("py-wf-w"), concurrency=4,
                              claim_wait=0.5, heartbeat_interval=1.0, install_signal_handlers=False)
        errors: List[BaseException] = []
        with support.running(self, w, errors):
            yield w
        if errors:
            raise errors[0]

    def test_the_event_stream_of_a_run(self) -> None:
        c, q = self.c, self.queue
        run = str(uuid.uuid4())

        def act() -> None:
            c.submit(q, {"outside": True})  # first: a stream that ignored the filter would stop on it
            c.submit_batch([taskmaster.SubmitParams(q, {"inside": True})], workflow_id=run)

        box = support.read_events(c.events(workflows=[run], read_timeout=30), "task.submitted", act, 0.5)
        self.assertEqual({run}, {ev.data.get("workflow_id") for ev in box}, "only the run's events")

    def test_a_handler_fans_out_and_its_join_reads_every_parent(self) -> None:
        c, q = self.c, self.queue
        kid, join = q + "-kid", q + "-join"
        sums: List[int] = []

        def handle(ctx: taskmaster.TaskContext) -> Any:
            if ctx.task.queue == q:
                kids = ctx.spawn(*[taskmaster.SubmitParams(kid, i) for i in range(20)])
                deps: List[Any] = [k.id for k in kids]
                deps.append(taskmaster.Dependency(id=ctx.task.id, on_failure=taskmaster.ON_FAILURE_IGNORE))
                return taskmaster.Next("fanned out", [taskmaster.SubmitParams(join, depends_on=deps)])
            if ctx.task.queue == kid:
                return ctx.payload * ctx.payload
            parents = ctx.client.parents(ctx.task.id)
            total = sum(p.result for p in parents[:-1])
            sums.append(total)
            return total

        with self.worker(handle, [q, kid, join]):
            root = c.submit(q)
            support.eventually(lambda: sums, "the join runs")
            self.assertEqual([2470], sums, "the sum of the squares of 0..19, once")
            run = support.eventually(lambda: (lambda r: r if r.finished else None)(c.workflow(root.id, limit=5)),
                                     "the run finishes")
        self.assertEqual((22, 22), (run.total, run.status_counts[taskmaster.DONE]))
        self.assertEqual(5, len(run.tasks))
        self.assertEqual(root.id, run.tasks[0].id, "oldest first")
        self.assertIsNotNone(run.next_cursor)
        more = c.workflow(root.id, limit=5, cursor=run.next_cursor)
        self.assertEqual({root.id}, {t.workflow_id for t in more.tasks})
        self.assertEqual(22, len(c.list(workflow_id=root.id, limit=100).tasks))
        joined = c.list(queue=join).tasks[0]
        page = c.parents_page(joined.id, limit=7)
        self.assertEqual(7, len(page.parents))
        self.assertIsNotNone(page.next_cursor)
        every = c.parents(joined.id)
        self.assertEqual(21, len(every))
        self.assertEqual(root.id, every[-1].id, "in the order the join named them")
        with self.assertRaises(taskmaster.WorkflowNotFound):
            c.workflow(str(uuid.uuid4()))

        # Replays, alone and in bulk (the worker stopped: it would run the
        # replay of the root before it is replayed in turn).
        again = c.replay(root.id, payload="again", metadata={})
        self.assertEqual((root.id, "again", again.id), (again.replay_of, again.payload, again.workflow_id))
        self.assertEqual(20, c.bulk_replay(queue=kid, dry_run=True).matched)
        with self.assertRaises(taskmaster.InvalidTransition):
            c.replay(again.id)

    def test_a_run_that_fails_is_retried_then_cancelled(self) -> None:
        c, q = self.c, self.queue
        b = c.submit_batch([
            taskmaster.SubmitParams(q, ref="a", max_attempts=1),
            taskmaster.SubmitParams(q, depends_on=[taskmaster.Dependency(ref="a", on_failure=taskmaster.ON_FAILURE_SKIP)]),
        ])
        a, dependant = b.tasks
        self.assertEqual(a.id, dependant.workflow_id)
        worker = support.unique("py-wf-hand")
        c.register(worker, queues=[q])
        (held,) = c.claim(worker, limit=1)
        c.fail(held.id, worker_id=worker, lease_id=held.lease_id or "", error="boom", non_retryable=True)
        skipped = c.get(dependant.id)
        self.assertEqual((taskmaster.DEAD, "dependency_skipped"), (skipped.status, skipped.dead_reason))

        res = c.retry_workflow(a.id)
        self.assertEqual(taskmaster.WorkflowResult(id=a.id, matched=2, changed=2, blocked=1, skipped=0), res)
        (held,) = c.claim(worker, limit=1)
        added = c.submit_batch([taskmaster.SubmitParams(q + "-more")], workflow_id=a.id)
        self.assertEqual(a.id, added.tasks[0].workflow_id)
        res = c.cancel_workflow(a.id)
        self.assertEqual(3, res.changed, "the RUNNING one asked to stop, the BLOCKED and the added one cancelled")
        with self.assertRaises(taskmaster.CancelRequested) as cr:
            c.spawn(held.id, [taskmaster.SubmitParams(q)], worker_id=worker, lease_id=held.lease_id or "")
        self.assertIsInstance(cr.exception, taskmaster.Conflict)
        self.assertEqual({held.ref}, set(c.heartbeat(worker, [held.ref]).cancel), "its holder is told")

    def test_debounce_and_throttle(self) -> None:
        c, q = self.c, self.queue
        first = c.submit(q, 1, unique_key="d", debounce_seconds=30, debounce_max_seconds=60)
        second = c.submit(q, 2, unique_key="d", debounce_seconds=2)
        self.assertEqual((first.id, 2), (second.id, second.payload))
        assert first.created_at is not None
        self.assertEqual(first.created_at + dt.timedelta(minutes=1), second.debounce_until)
        t = c.submit(q, unique_key="t", throttle_seconds=60)
        self.assertEqual(t.id, t.workflow_id)
        with self.assertRaises(taskmaster.ValidationError):
            c.submit(q, throttle_seconds=60)  # needs a unique key
        with self.assertRaises(taskmaster.ValidationError) as v:
            c.submit_batch([taskmaster.SubmitParams(q, unique_key="b", debounce_seconds=5)])
        self.assertEqual(["tasks[0].debounce_seconds"], [e.field for e in v.exception.errors])
        with self.assertRaises(ValueError):
            c.submit_batch([taskmaster.SubmitParams(q, depends_on=[taskmaster.Dependency(on_failure="skip")])])


if __name__ == "__main__":
    unittest.main()
