"""The Worker: turns a handler function into a worker that speaks the lease
protocol, with the guarantees of the Go SDK's Runner (docs/sdks.md)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Set, Tuple

from ._http import RetryPolicy, new_id
from .client import (
    MAX_BATCH,
    MAX_CLAIM_WAIT,
    MAX_HEARTBEAT_TASKS,
    MAX_LEASE_SECONDS,
    Client,
    CompleteItem,
    FailItem,
    SubmitParams,
    check_json,
    encode_enqueue,
    is_route_missing,
)
from .errors import (
    BodyTooLarge,
    Forbidden,
    InvalidTransition,
    MalformedRequest,
    Problem,
    TaskmasterError,
    TransportError,
    Unauthorized,
    ValidationError,
    WorkerDead,
    WorkerNotFound,
    is_held_elsewhere,
)
from .types import DEAD, DONE, ClaimResult, HeartbeatResult, LeaseRef, Task, Trace

log = logging.getLogger("taskmaster.worker")


# What a handler returns or raises.


class NonRetryable(TaskmasterError):
    """Raise it from a handler to fail the task for good: it goes straight
    to DEAD (reason non_retryable). ``NonRetryable("bad input")``, or wrap
    a cause: ``raise NonRetryable(str(e)) from e``."""


class Snooze(TaskmasterError):
    """Raise it from a handler to put the task back, claimable ``seconds``
    from now (rounded up to whole seconds, 1 s to 30 days), without
    spending an attempt. A snooze the server refuses fails the task
    (retryable) instead."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"snooze for {seconds}s")
        self.seconds = seconds


@dataclass
class Next:
    """A handler result that completes the task with ``result`` and creates
    ``enqueue`` in the same transaction, or neither: the step to a
    pipeline's next stage, or the join over the children the handler
    spawned (:meth:`TaskContext.spawn`; ``depends_on`` their ids). An enqueue the server refuses fails the task as
    non-retryable, like a result it refuses."""

    result: Any = None
    enqueue: List[SubmitParams] = field(default_factory=list)


# Why a handler was asked to stop (TaskContext.cause).


class Stopped(TaskmasterError):
    """Base of the causes a handler is asked to stop for."""


class Shutdown(Stopped):
    """The worker is stopping and the drain timeout passed: the task is
    handed back (without spending an attempt) unless the handler still
    succeeds."""


class TaskLost(Stopped):
    """This worker no longer holds the task: the server said so, or the
    lease could not be renewed before it ran out. Whatever the handler
    returns is dropped: the server would refuse it, or another worker may
    have the task already."""


class TaskCancelled(Stopped):
    """An operator cancelled the running task. The task is failed (DEAD
    cancelled) unless the handler still succeeds."""


class TaskTimeout(Stopped):
    """The handler ran past ``task_timeout``. The task is failed (retried
    while attempts remain) unless the handler still succeeds."""


class TaskTimeLimit(Stopped):
    """The task's time limit on its attempt is up (``Task.timeout_at``:
    the task's ``timeout_seconds``, else its queue's default, counted from
    the claim). The server ends the attempt itself (outcome ``timed_out``,
    retried after backoff or DEAD ``exhausted``), so whatever the handler
    returns is dropped, as for a lost task."""


class WorkerError(TaskmasterError):
    """The worker cannot go on: it could not register, or the server
    refused its key (401/403). ``cause`` is the server's answer."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


class TaskContext:
    """What a handler gets: the task, its attempt, its lease, and whether
    it was asked to stop (check ``cancelled`` or :meth:`wait` between steps
    of long work)."""

    def __init__(self, worker: "Worker", job: "_Job") -> None:
        self._worker = worker
        self._job = job

    @property
    def task(self) -> Task:
        return self._job.task

    @property
    def payload(self) -> Any:
        return self._job.task.payload

    @property
    def attempt(self) -> int:
        """The attempt this is (1 for the first claim)."""
        return self._job.task.attempts

    @property
    def worker_id(self) -> str:
        return self._worker.worker_id

    @property
    def client(self) -> Client:
        return self._worker.client

    @property
    def trace(self) -> Optional[Trace]:
        """The W3C trace context the task was submitted under, if any."""
        return self._job.task.trace

    @property
    def traceparent(self) -> Optional[str]:
        t = self._job.task.trace
        return t.traceparent if t is not None else None

    @property
    def tracestate(self) -> Optional[str]:
        t = self._job.task.trace
        return t.tracestate if t is not None else None

    def trace_headers(self) -> Dict[str, str]:
        """The task's trace as W3C headers (``traceparent``, and
        ``tracestate`` when it has one; empty without a trace): the carrier
        a tracing system's propagator extracts from, e.g. OpenTelemetry's
        ``TraceContextTextMapPropagator().extract(ctx.trace_headers())``."""
        t = self._job.task.trace
        if t is None:
            return {}
        out = {"traceparent": t.traceparent}
        if t.tracestate:
            out["tracestate"] = t.tracestate
        return out

    def progress(self, percent: float, message: Optional[str] = None, details: Any = None) -> None:
        """Reports how far the handler got (``percent``, 0 to 100; a
        ``message`` for a human, at most 1 KiB; ``details``, any JSON value
        of at most 16 KiB): the server keeps it on the task (``progress``,
        the dashboard's bar) and announces it with a ``task.progress``
        event, at most one a second. Sent under this worker and the task's
        lease, retried through outages for ``report_timeout``. LeaseLost or
        InvalidTransition: the task is no longer this worker's; stop."""
        w = self._worker
        w.client.progress(
            self._job.task.id, worker_id=w.worker_id, lease_id=self._job.task.lease_id or "",
            percent=percent, message=message, details=details,
            deadline=time.monotonic() + w.report_timeout, stop=self._job.dropped,
        )

    @property
    def lease_deadline(self) -> float:
        """When the lease runs out by this worker's clock (a
        time.monotonic() value), as last renewed; heartbeats renew it."""
        return self._job.lease_deadline

    def lease_remaining(self) -> float:
        """Seconds until the lease runs out, as last renewed."""
        return self._job.lease_deadline - time.monotonic()

    @property
    def cancelled(self) -> bool:
        """Whether the handler was asked to stop (see :attr:`cause`)."""
        return self._job.stop.is_set()

    @property
    def cause(self) -> Optional[Stopped]:
        """Why the handler was asked to stop: Shutdown, TaskLost,
        TaskCancelled, TaskTimeout or TaskTimeLimit; None while it may go
        on."""
        return self._job.cause

    @property
    def stop_event(self) -> threading.Event:
        """Set when the handler is asked to stop."""
        return self._job.stop

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps up to ``timeout`` seconds, waking when the handler is
        asked to stop; returns whether it was."""
        return self._job.stop.wait(timeout)

    def raise_if_cancelled(self) -> None:
        """Raises :attr:`cause` when the handler was asked to stop."""
        c = self._job.cause
        if c is not None:
            raise c

    def spawn(self, *items: SubmitParams) -> List[Task]:
        """Creates tasks on behalf of this task, under this worker and the
        task's lease (:meth:`Client.spawn`); the task stays RUNNING. A
        handler that fans out spawns its children, then returns a
        :class:`Next` whose ``enqueue`` holds the join, which depends on
        them by id. CancelRequested once an operator asked to cancel the
        task."""
        return self._worker.client.spawn(self.task.id, items, worker_id=self.worker_id, lease_id=self._job.ref.lease_id).tasks


Handler = Callable[[TaskContext], Any]
HandlerContext = Callable[[TaskContext], ContextManager[Any]]
"""Makes the context manager each handler runs in, in its thread (see
``Worker(handler_context=...)``)."""


class _Job:
    """One task in flight: listed by heartbeats from its claim's answer
    until its outcome is reported or dropped."""

    def __init__(self, task: Task, lease_len: float, lease_deadline: float, time_limit_at: Optional[float]) -> None:
        self.task = task
        self.ref = task.ref
        self.lease_len = lease_len
        self.lease_deadline = lease_deadline
        self.time_limit_at = time_limit_at
        """When the task's time limit is up by this worker's clock, if it has one."""
        self.ending_by: Optional[float] = None
        """Set when the handler is done with a task whose time limit is up:
        it stays listed until the server says it ended the attempt, or
        until this time."""
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.cause: Optional[Stopped] = None
        self.halted_at = 0.0
        self.handler_done = threading.Event()
        self.lock = threading.Lock()
        self.reporter_taken = False

    def halt(self, cause: Stopped) -> bool:
        """Asks the handler to stop; only the first cause counts."""
        with self.lock:
            if self.cause is not None:
                return False
            self.cause = cause
            self.halted_at = time.monotonic()
        self.stop.set()
        return True

    def lost(self) -> bool:
        return isinstance(self.cause, TaskLost)

    def dropped(self) -> bool:
        """Whether the handler's outcome is not reported: the task was lost,
        or the server ends its attempt (time limit)."""
        return isinstance(self.cause, (TaskLost, TaskTimeLimit))

    def take_reporter(self) -> bool:
        """Claims the right to report the task's outcome: exactly one of
        the handler's thread and the worker (acting on a handler's behalf)
        gets it."""
        with self.lock:
            if self.reporter_taken:
                return False
            self.reporter_taken = True
            return True


@dataclass
class _Carried:
    """A finished task's report handed over to the claim loop, to ride its
    next claim."""

    job: _Job
    kind: str
    """"complete" or "fail"."""
    args: Dict[str, Any]
    """_report's arguments, should the report go on its own after all."""
    item: Any
    """The claim's item: a CompleteItem or a FailItem."""


_MADE = {"complete": (DONE,), "fail": (DEAD,)}


def _applied(kind: str, err: BaseException) -> bool:
    """Whether a report's refusal says it was applied already: an
    invalid-transition whose current status is how the report ended the
    task (DONE for a complete, DEAD for a fail), as a try whose answer was
    lost leaves it. (A repeated fail that requeued its task is answered
    lease-lost: dropped as no longer held.)"""
    return isinstance(err, InvalidTransition) and err.current_status in _MADE.get(kind, ())


def _names_field(p: MalformedRequest, *fields: str) -> bool:
    """Whether a malformed request (400) names one of fields: what a server
    older than them answers a request that sends them (an unknown field)."""
    return any(e.field in fields for e in p.errors)


_ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


def default_worker_id() -> str:
    """``<hostname>-<pid>``: stable for the process, distinct on a host."""
    host = _ID_CHARS.sub("-", socket.gethostname() or "worker")
    pid = f"-{os.getpid()}"
    return host[: 128 - len(pid)] + pid


class Worker:
    """A worker: registers, heartbeats (listing the tasks it holds, which
    renews their leases), claims up to ``concurrency`` tasks with long
    polls, runs ``handler`` on each in a thread of its own, and reports
    every outcome under the task's lease.

    The handler takes a :class:`TaskContext` and returns the task's result
    (any JSON value; a :class:`Next` also enqueues tasks), or raises:
    :class:`NonRetryable` (DEAD at once), :class:`Snooze` (back later
    without spending an attempt), anything else (retried with backoff while
    attempts remain). An ``async def`` handler is run to completion on an
    event loop of its thread. ``handler_context``, when set, makes a
    context manager each handler runs in, in its thread: the hook to start
    it in the caller's tracing system with the task's trace
    (:meth:`TaskContext.trace_headers`), for instance an OpenTelemetry span
    (``lambda ctx: tracer.start_as_current_span(ctx.task.queue,
    context=TraceContextTextMapPropagator().extract(ctx.trace_headers()))``).

    Guarantees (docs/sdks.md says where each stops):

    - a claim whose answer was lost is retried with its request id, so it
      gets the same tasks; until its answer arrives every heartbeat names
      it (``claims_in_flight``), so a late answer does not cost its tasks;
    - a report (complete, fail, snooze, release) that fails with a
      transport error, 5xx, 408 or 429 keeps its task in the heartbeat
      list and is retried (after Retry-After) until accepted, the server
      says the lease is lost, or ``report_timeout`` runs out; only a 400,
      413 or 422 about the result fails the task, and 401/403 stop the
      worker without touching its tasks;
    - a complete (without ``enqueue``) or fail rides the next claim
      (:meth:`Client.claim_reporting`) only when the claim loop is waiting
      for a free slot, so that claim goes out at once: with concurrency 1
      each task costs one request. Otherwise (a claim long-polling, the
      worker stopping or draining) it goes out on its own at once; if the
      claim carrying it fails (its retries spent, or a problem answer) it
      goes through the report path above, holding its slot again. The task stays in the heartbeat
      list until the claim's answer settles it;
    - a lease it cannot renew before it runs out by this worker's clock
      (less ``lease_margin``) stops the handler (cause TaskLost) and its
      result is not reported;
    - a task's time limit (``Task.timeout_at``) stops the handler (cause
      TaskTimeLimit): the server ends the attempt, so its result is not
      reported, and the task stays listed until the server has ended it;
    - never more than ``concurrency`` handlers run at once: a slot is held
      until the handler returns;
    - :meth:`stop` (SIGINT/SIGTERM when :meth:`run` installs its signal
      handlers) drains: no more claims; handlers get ``drain_timeout``,
      then are asked to stop (cause Shutdown) and get ``cancel_grace``;
      the tasks of those still running are handed back without spending
      an attempt. A second signal skips the waiting.
    """

    def __init__(
        self,
        client: Client,
        handler: Handler,
        *,
        queues: Sequence[str] = (),
        tags: Sequence[str] = (),
        concurrency: int = 1,
        worker_id: Optional[str] = None,
        lease_seconds: Optional[int] = None,
        drain_timeout: float = 30.0,
        cancel_grace: float = 5.0,
        claim_wait: float = 5.0,
        poll_interval: float = 0.1,
        max_idle_interval: float = 5.0,
        heartbeat_interval: Optional[float] = None,
        report_timeout: float = 30.0,
        task_timeout: Optional[float] = None,
        lease_margin: Optional[float] = None,
        handler_context: Optional[HandlerContext] = None,
        install_signal_handlers: bool = True,
    ) -> None:
        if not callable(handler):
            raise TypeError("taskmaster: handler must be callable")
        if not 1 <= concurrency <= MAX_HEARTBEAT_TASKS:
            raise ValueError(f"taskmaster: concurrency must be between 1 and {MAX_HEARTBEAT_TASKS}")
        if lease_seconds is not None and not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
            raise ValueError(f"taskmaster: lease_seconds must be between 1 and {MAX_LEASE_SECONDS}")
        if claim_wait > MAX_CLAIM_WAIT:
            raise ValueError(f"taskmaster: claim_wait must be at most {MAX_CLAIM_WAIT}")
        if min(drain_timeout, cancel_grace, report_timeout, poll_interval) < 0 or max_idle_interval < poll_interval:
            raise ValueError("taskmaster: durations must not be negative, and poll_interval <= max_idle_interval")
        wid = worker_id or default_worker_id()
        if not 1 <= len(wid) <= 128 or _ID_CHARS.search(wid):
            raise ValueError("taskmaster: worker_id must be 1-128 characters of [A-Za-z0-9._:-]")
        self.client = client
        self.handler = handler
        self.queues = list(queues)
        self.tags = list(tags)
        self.concurrency = concurrency
        self.worker_id = wid
        self.lease_seconds = lease_seconds
        self.drain_timeout = drain_timeout
        self.cancel_grace = cancel_grace
        self.claim_wait = claim_wait
        self.poll_interval = poll_interval
        self.max_idle_interval = max_idle_interval
        self.heartbeat_interval = heartbeat_interval
        self.report_timeout = report_timeout
        self.task_timeout = task_timeout
        self.lease_margin = lease_margin
        self.handler_context = handler_context
        self.install_signal_handlers = install_signal_handlers
        self.log = _Prefixed(log, {"worker_id": wid})

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._inflight: Dict[LeaseRef, _Job] = {}
        # The request ids of the claims sent and not yet answered (or given
        # up): heartbeats name them, so that the server does not take a
        # task back as orphaned because its claim's answer is late.
        self._claims: Set[str] = set()
        self._running = 0  # handlers running now (slots taken)
        self._capacity = concurrency
        self._interval = 10.0
        self._stopping = threading.Event()
        self._forced = threading.Event()
        self._draining = threading.Event()
        self._fatal: Optional[WorkerError] = None
        self._started = False
        self._no_release = False
        self._plain_beats = False
        self._no_claims_in_flight = False
        self._reports = 0  # reports made on handlers' behalf, still running
        # The runner rule (docs/sdks.md): a finished task's complete or fail
        # rides the next claim only while the claim loop is blocked waiting
        # for a free slot (_slot_waiting), so that the claim carrying it
        # goes out at once; a handler's thread hands it over (_carried),
        # freeing its slot, and the claim loop takes it with the slot.
        self._slot_waiting = False
        self._carried: List[_Carried] = []
        self._no_carry = False  # the server takes no reports on claims

    # Public surface.

    @property
    def draining(self) -> bool:
        """Whether the server asked this worker to drain (no more claims)."""
        return self._draining.is_set()

    def in_flight(self) -> List[Task]:
        """The tasks held now."""
        with self._lock:
            return [j.task for j in self._inflight.values()]

    def stop(self) -> None:
        """Asks :meth:`run` to drain and return; a second call skips the
        drain's waiting (the tasks still running are handed back at once).
        Safe from any thread and from a signal handler."""
        if self._stopping.is_set():
            self._forced.set()
        self._stopping.set()

    def run(self) -> None:
        """Works until :meth:`stop` (or SIGINT/SIGTERM), then drains and
        returns. Raises :class:`WorkerError` when the worker cannot
        register, or after a drain forced by the server refusing its key."""
        with self._lock:
            if self._started:
                raise RuntimeError("taskmaster: Worker.run called twice")
            self._started = True
        restore = self._install_signals()
        try:
            self._run()
        finally:
            restore()

    # Signals.

    def _install_signals(self) -> Callable[[], None]:
        if not self.install_signal_handlers or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {}

        def on_signal(signum: int, frame: Any) -> None:
            self.stop()

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, h in previous.items():
                signal.signal(sig, h)

        return restore

    # The run.

    def _run(self) -> None:
        self._register(first=True)
        if not self._registered:
            return  # stopped before the server could be reached
        self._beats_done = threading.Event()
        loops = [
            threading.Thread(target=self._beat_loop, name=f"taskmaster-heartbeat-{self.worker_id}", daemon=True),
            threading.Thread(target=self._watch_loop, name=f"taskmaster-watch-{self.worker_id}", daemon=True),
        ]
        for th in loops:
            th.start()
        try:
            self._claim_loop()
            self._drain()
        finally:
            self._beats_done.set()
            for th in loops:
                th.join()
        self.log.info("worker stopped")
        if self._fatal is not None:
            raise self._fatal

    _registered = False

    def _register(self, *, first: bool) -> None:
        wait = self.poll_interval
        while True:
            try:
                reg = self.client.register(self.worker_id, queues=self.queues, tags=self.tags)
            except Problem as p:
                if p.status < 500 and p.status != 429:
                    err = WorkerError(f"taskmaster: register {self.worker_id}: {p}", p)
                    if first:
                        raise err from p
                    self.log.error("register again failed: %s", p)
                    return
                e: Exception = p
            except TransportError as t:
                e = t
            else:
                self._registered = True
                self._interval = self.heartbeat_interval or reg.heartbeat_interval_seconds or 10.0
                with self._lock:
                    self._capacity = min(self.concurrency, reg.max_heartbeat_tasks or MAX_HEARTBEAT_TASKS)
                if self._capacity < self.concurrency:
                    self.log.warning(
                        "concurrency %d is more than a heartbeat may list (%d); holding fewer tasks at once",
                        self.concurrency, self._capacity,
                    )
                if first:
                    self.log.info(
                        "worker registered: queues %s, concurrency %d, heartbeat every %.3gs",
                        self.queues, self._capacity, self._interval,
                    )
                return
            if not first:
                self.log.warning("register again failed: %s", e)
                return
            self.log.warning("register failed; retrying in %.3gs: %s", wait, e)
            if self._stopping.wait(wait):
                return
            wait = min(wait * 2, self.max_idle_interval)

    def _fatal_stop(self, what: str, p: Problem) -> None:
        """A 401/403: the key cannot do the worker's job. Stop loudly; the
        tasks held are not touched (the server takes them back)."""
        with self._lock:
            if self._fatal is None:
                self._fatal = WorkerError(f"taskmaster: the server refused this worker's key ({what}): {p}", p)
        self.log.error("the server refused this worker's key (%s); stopping: %s", what, p)
        self._stopping.set()
        self._forced.set()

    # Claims.

    def _claim_wait(self) -> float:
        w = min(self.claim_wait, self.drain_timeout)
        return w if w >= 0.1 else 0.0

    def _claim_loop(self) -> None:
        try:
            self._claim_until_stopped()
        finally:
            # Reports handed over to a claim that will not be sent go out
            # on their own, at once.
            self._report_alone(self._take_carried(), slots=0)

    def _claim_until_stopped(self) -> None:
        idle = 0.0
        wait = self._claim_wait()
        while not self._stopping.is_set():
            if self._draining.is_set():
                self._report_alone(self._take_carried(), slots=0)
                self._stopping.wait(0.5)
                continue
            with self._changed:
                self._slot_waiting = True
                while self._running >= self._capacity and not self._stopping.is_set():
                    self._changed.wait(0.5)
                if self._stopping.is_set():
                    return
                self._slot_waiting = False
                carried, self._carried = self._carried, []
                n = min(self._capacity - self._running, 1000)
                self._running += n  # slots taken for the claim
            # A claim is never cut off: one cut after the server committed
            # it would leave its tasks held by no one. A stopping worker
            # lets its waiting claim run out (claim_wait <= drain_timeout)
            # and handles what it brings within the drain.
            sent = time.monotonic()
            request_id = new_id()
            with self._lock:
                self._claims.add(request_id)
            try:
                res = self.client.claim_reporting(
                    self.worker_id,
                    complete=[c.item for c in carried if isinstance(c.item, CompleteItem)],
                    fail=[c.item for c in carried if isinstance(c.item, FailItem)],
                    limit=n, wait=wait, lease_seconds=self.lease_seconds, request_id=request_id,
                )
            except Problem as p:
                self._unclaim(request_id)  # given up: its tasks, if any, are orphans
                # Each report goes on its own holding the slot it brought
                # (n >= len(carried): each freed one before n was counted),
                # as a report made in its handler's thread does.
                self._free(n - len(carried))
                reports_refused = bool(carried) and self._reports_refused(p)
                if carried:
                    self._report_alone(carried, slots=len(carried))
                if isinstance(p, (WorkerDead, WorkerNotFound)):
                    self._reregister(p)
                    continue
                if isinstance(p, (Unauthorized, Forbidden)):
                    self._fatal_stop("claim", p)
                    return
                if reports_refused:
                    # What was refused is the reports, which now go their
                    # own way: the claim may be sent again at once (once a
                    # slot is free; each report holds its own meanwhile).
                    continue
                self.log.warning("claim failed: %s", p)
                idle = self._next_idle(idle)
                self._stopping.wait(idle)
                continue
            except TransportError as e:
                self._unclaim(request_id)
                self._free(n - len(carried))
                self._report_alone(carried, slots=len(carried))
                self.log.warning("claim failed: %s", e)
                idle = self._next_idle(idle)
                self._stopping.wait(idle)
                continue
            tasks = res.tasks
            refused = self._settle_carried(carried, res)
            # A report the claim did not deliver goes on its own, holding a
            # slot the claim's tasks left, while any is left (else without:
            # its handler returned, so concurrency still bounds handlers).
            kept = min(len(refused), n - len(tasks))
            with self._changed:
                self._running -= n - len(tasks) - kept  # the slots the claim did not fill
                self._changed.notify_all()
                # With no slot left, the loop goes straight back to wait
                # for one: a handler that finishes from now on hands its
                # report over (even before the loop is back waiting).
                self._slot_waiting = self._running >= self._capacity
            self._report_alone(refused, slots=kept)
            for task in tasks:
                self._start(task, sent)
            # Its tasks are in flight (listed) before the claim stops being
            # named: a heartbeat sees them one way or the other.
            self._unclaim(request_id)
            if tasks:
                idle = 0.0
            elif wait > 0 and time.monotonic() - sent >= wait:
                idle = 0.0  # the server waited the whole wait for nothing
            else:
                idle = self._next_idle(idle)
                self._stopping.wait(idle)

    def _reports_refused(self, p: Problem) -> bool:
        """Whether p, the answer to a claim that carried reports, is the
        server refusing them rather than the claim: what they hold (413,
        422), or reports on a claim at all (a server older than them
        answers the field as unknown, 400: claims carry no more reports
        then)."""
        if p.status in (413, 422):
            self.log.warning("the server refused the reports a claim carried; reporting them on their own: %s", p)
            return True
        if isinstance(p, MalformedRequest) and _names_field(p, "complete", "fail"):
            self._no_carry = True
            self.log.warning("the server takes no reports on claims; reporting each outcome on its own: %s", p)
            return True
        return False

    def _unclaim(self, request_id: str) -> None:
        with self._lock:
            self._claims.discard(request_id)

    def _next_idle(self, idle: float) -> float:
        return self.poll_interval if idle == 0 else min(idle * 2, self.max_idle_interval)

    def _free(self, n: int) -> None:
        if n <= 0:
            return
        with self._changed:
            self._running -= n
            self._changed.notify_all()

    # Reports carried by claims.

    def _carry(self, job: _Job, kind: str, args: Dict[str, Any]) -> bool:
        """Hands a complete or fail over to the claim loop when it is
        blocked waiting for a free slot (and not stopping or draining), up
        to MAX_BATCH of them:
        frees the job's slot, so that the claim carrying the report goes
        out at once. The job stays in flight (listed by heartbeats) until
        the claim's answer settles it. False: report on its own."""
        t = job.task
        item: Any
        if self._no_carry:
            return False
        if kind == "complete" and not args["enqueue"]:
            item = CompleteItem(t.id, t.lease_id or "", args["result"])
        elif kind == "fail":
            item = FailItem(t.id, t.lease_id or "", args["error"], non_retryable=bool(args.get("non_retryable")))
        else:
            return False
        with self._changed:
            if not self._slot_waiting or self._stopping.is_set() or self._draining.is_set():
                return False
            if len(self._carried) >= MAX_BATCH:
                # The server takes no more on a claim; and the claim (its
                # limit at most MAX_BATCH) then takes a slot for each.
                return False
            self._carried.append(_Carried(job, kind, args, item))
            self._running -= 1
            self._changed.notify_all()
        self.log.debug("the %s of task %s rides the next claim", kind, t.id)
        return True

    def _settle_carried(self, carried: List["_Carried"], res: ClaimResult) -> List["_Carried"]:
        """Settles the reports a claim carried, by their outcomes: applied
        (or saved by a lost try: an invalid-transition whose status is what
        the report makes), the task is no longer held; refused because the
        worker no longer holds the task, it is dropped. Returns the others,
        to go through the report path."""
        refused = []
        completes = [c for c in carried if isinstance(c.item, CompleteItem)]
        fails = [c for c in carried if isinstance(c.item, FailItem)]
        for c, o in zip(completes + fails, res.completed + res.failed):
            err = o.error() if o.outcome == "error" else None
            if err is None or _applied(c.kind, err):
                self._forget(c.job)
            elif is_held_elsewhere(err):
                self.log.warning("task %s no longer held by this worker; dropping it (%s: %s)", c.job.task.id, c.kind, err)
                self._forget(c.job)
            else:
                self.log.warning("the claim refused the %s of task %s; reporting it on its own: %s", c.kind, c.job.task.id, err)
                refused.append(c)
        return refused

    def _take_carried(self) -> List["_Carried"]:
        """Ends the claim loop's wait for a slot: no report is handed over
        from now on; returns those that were."""
        with self._lock:
            self._slot_waiting = False
            carried, self._carried = self._carried, []
        return carried

    def _report_alone(self, carried: List["_Carried"], *, slots: int) -> None:
        """Sends handed-over reports on their own, each through the report
        path (its retries and outage handling), at once; the first
        ``slots`` of them hold a slot the caller took for them until done,
        so that the tasks held stay within concurrency (and a heartbeat's
        list within its cap) while they retry."""
        for i, c in enumerate(carried):
            self._in_background(self._report_carried, c, i < slots)

    def _report_carried(self, c: "_Carried", slot: bool) -> None:
        try:
            self._report(c.job, c.kind, **c.args)
        finally:
            if slot:
                self._free(1)

    def _reregister(self, cause: Exception) -> None:
        self.log.warning("the server no longer knows this worker as alive; registering again: %s", cause)
        self._register(first=False)

    # Tasks.

    def _start(self, task: Task, sent: float) -> None:
        lease_len = float(self.lease_seconds or 0)
        if task.lease_expires_at is not None and task.claimed_at is not None:
            lease_len = (task.lease_expires_at - task.claimed_at).total_seconds()
        if lease_len <= 0:
            lease_len = 300.0
        # The server's clock ends the attempt at timeout_at; the claim's
        # answer came after claimed_at, so counting the limit from its
        # arrival stops the handler no earlier than the server does.
        time_limit_at = None
        if task.timeout_at is not None and task.claimed_at is not None:
            time_limit_at = time.monotonic() + max((task.timeout_at - task.claimed_at).total_seconds(), 0.0)
        job = _Job(task, lease_len, sent + lease_len, time_limit_at)
        with self._lock:
            self._inflight[job.ref] = job
        threading.Thread(target=self._work, args=(job,), name=f"taskmaster-task-{task.id}", daemon=True).start()

    def _work(self, job: _Job) -> None:
        ctx = TaskContext(self, job)
        result: Any = None
        error: Optional[BaseException] = None
        try:
            with self.handler_context(ctx) if self.handler_context is not None else contextlib.nullcontext():
                result = self.handler(ctx)
                if inspect.isawaitable(result):
                    result = asyncio.run(_await(result))
        except BaseException as e:  # noqa: BLE001 - the handler's failure is the task's
            error = e
            if not isinstance(e, Exception):
                self.log.error("handler of task %s raised %s", job.task.id, type(e).__name__)
        finally:
            job.handler_done.set()
        carried = False
        try:
            if job.take_reporter():
                report = self._settle(job, result, error)
                if report is not None:
                    kind, args = report
                    carried = self._carry(job, kind, args)
                    if not carried:
                        self._report(job, kind, **args)
        except Exception:  # a bug here must not leak the slot
            self.log.exception("settling task %s failed", job.task.id)
            self._forget(job)
        finally:
            if not carried:  # a carried report freed the slot for its claim
                self._free(1)

    def _settle(self, job: _Job, result: Any, error: Optional[BaseException]) -> Optional[Tuple[str, Dict[str, Any]]]:
        """Decides the report of what the handler did (in its thread): its
        kind and arguments (see _report), or None when the outcome is
        dropped."""
        t = job.task
        cause = job.cause
        if isinstance(cause, TaskLost):
            self.log.warning("dropping the outcome of lost task %s", t.id)
            self._forget(job)
            return None
        if isinstance(cause, TaskTimeLimit):
            self.log.warning("dropping the outcome of task %s: its time limit is up and the server ends the attempt", t.id)
            self._await_end(job)
            return None
        if error is None:
            enqueue: List[SubmitParams] = []
            if isinstance(result, Next):
                result, enqueue = result.result, list(result.enqueue)
            try:
                if result is not None:
                    check_json(result, "the handler's result")
                encode_enqueue(enqueue)
            except ValueError as e:
                return "fail", {"error": str(e), "non_retryable": True}
            return "complete", {"result": result, "enqueue": enqueue}
        if isinstance(cause, Shutdown):
            # Stopped by the drain: the task did not fail on its merits.
            return "release", {"error": f"worker shut down: {_describe(error)}"}
        if isinstance(cause, (TaskCancelled, TaskTimeout)):
            return "fail", {"error": f"{cause}: {_describe(error)}"}
        if isinstance(error, Snooze):
            return "snooze", {"delay": error.seconds}
        return "fail", {"error": _describe(error), "non_retryable": isinstance(error, NonRetryable)}

    def _settle_abandoned(self, job: _Job) -> None:
        """Reports on behalf of a handler that did not return within
        cancel_grace of being asked to stop (its slot stays taken until it
        does). Runs in the background (_in_background)."""
        cause = job.cause
        if isinstance(cause, TaskLost):
            self.log.warning("dropping lost task %s; its handler has not returned", job.task.id)
            self._forget(job)
        elif isinstance(cause, Shutdown):
            self.log.warning("handler of task %s did not return in time; handing the task back", job.task.id)
            self._report(job, "release", error="worker shut down before the handler finished")
        else:
            self.log.warning("handler of task %s did not return after it was asked to stop; failing it", job.task.id)
            self._report(job, "fail", error=f"{cause}: the handler did not return")

    def _in_background(self, fn: Callable[..., None], *args: Any) -> None:
        """Runs a report made on a handler's behalf on a thread of its own,
        counted in _reports (the drain waits for them)."""
        with self._lock:
            self._reports += 1

        def run() -> None:
            try:
                fn(*args)
            except Exception:  # a bug here must not hang the drain
                self.log.exception("a report made in the background failed")
            finally:
                with self._changed:
                    self._reports -= 1
                    self._changed.notify_all()

        threading.Thread(target=run, daemon=True).start()

    def _await_end(self, job: _Job) -> None:
        """Keeps listing a task whose time limit is up until the server
        says it ended the attempt (a heartbeat names it lost), so that it is
        not taken back as orphaned first; at most a few heartbeats."""
        job.ending_by = time.monotonic() + max(3 * self._interval, 5.0)

    def _forget(self, job: _Job) -> None:
        with self._changed:
            if self._inflight.get(job.ref) is job:
                del self._inflight[job.ref]
            self._changed.notify_all()

    # Reports.

    def _report(self, job: _Job, kind: str, **args: Any) -> None:
        """Sends one report, retrying transient failures while the task is
        held (heartbeats keep renewing its lease) until it is accepted, the
        server says the lease is lost, or report_timeout runs out."""
        t = job.task
        deadline = time.monotonic() + self.report_timeout
        policy = RetryPolicy(max_attempts=1_000_000, base_delay=0.1, max_delay=5.0)
        call: Dict[str, Any] = {"retry": policy, "deadline": deadline, "stop": job.dropped}
        common: Dict[str, Any] = {"worker_id": self.worker_id, "lease_id": t.lease_id or ""}
        try:
            try:
                if kind == "complete":
                    self.client.complete(t.id, result=args["result"], enqueue=args["enqueue"] or None, **common, **call)
                elif kind == "snooze":
                    try:
                        self.client.snooze(t.id, delay=args["delay"], **common, **call)
                    except ValidationError as e:
                        self.client.fail(t.id, error=f"the server refused the handler's snooze: {e}", **common, **call)
                elif kind == "release":
                    self._release(job, args["error"], common, call)
                else:
                    self.client.fail(t.id, error=args["error"], non_retryable=bool(args.get("non_retryable")), **common, **call)
            except (ValidationError, BodyTooLarge, MalformedRequest) as e:
                if kind != "complete":
                    raise
                # The server refused the result (or enqueue) itself: it
                # would refuse it again, so the task cannot succeed so.
                self.client.fail(t.id, error=f"the server rejected the handler's result: {e}", non_retryable=True, **common, **call)
        except (Unauthorized, Forbidden) as p:
            self._fatal_stop(kind, p)
        except Problem as p:
            if _applied(kind, p):
                # A try whose answer was lost (this report's, or the claim's
                # that carried it) saved it.
                self.log.debug("the %s of task %s was already saved", kind, t.id)
            elif is_held_elsewhere(p):
                self.log.warning("task %s no longer held by this worker; dropping it (%s: %s)", t.id, kind, p)
            else:
                self.log.error("report of task %s failed (%s): %s", t.id, kind, p)
        except TransportError as e:
            if job.dropped():
                self.log.warning("dropping the report of lost task %s (%s)", t.id, kind)
            else:
                self.log.error("report of task %s failed for %.3gs; giving up (%s): %s", t.id, self.report_timeout, kind, e)
        finally:
            self._forget(job)

    def _release(self, job: _Job, why: str, common: Dict[str, Any], call: Dict[str, Any]) -> None:
        t = job.task
        if not self._no_release:
            try:
                self.client.release(t.id, **common, **call)
                return
            except Problem as p:
                if not is_route_missing(p):
                    raise
                self._no_release = True
                self.log.warning("the server has no release call; handing tasks back by a retryable failure (it spends an attempt)")
        self.client.fail(t.id, error=why, **common, **call)

    # Heartbeats, leases and timeouts.

    def _margin(self, lease_len: float) -> float:
        if self.lease_margin is not None:
            return self.lease_margin
        return min(max(lease_len * 0.1, 0.25), 5.0)

    def _watch_loop(self) -> None:
        """Watches the leases, the task timeout and the handlers asked to
        stop, on its own thread: a heartbeat that hangs must not keep a
        lease that runs out from stopping its handler."""
        while not self._beats_done.wait(0.05):
            self._watch(time.monotonic())

    def _beat_loop(self) -> None:
        """Heartbeats every interval, listing the tasks held."""
        warned = False
        while not self._beats_done.wait(self._interval):
            held, claims = self._held()
            if not warned and any(j.lease_len < 3 * self._interval for j in held):
                warned = True
                self.log.warning("leases under three heartbeat intervals: a late heartbeat may let a lease run out")
            sent = time.monotonic()
            try:
                res = self._beat([j.ref for j in held], claims)
            except (WorkerDead, WorkerNotFound) as p:
                self._reregister(p)
                continue
            except (Unauthorized, Forbidden) as p:
                self._fatal_stop("heartbeat", p)
                continue
            except (Problem, TransportError) as e:
                self.log.warning("heartbeat failed: %s", e)
                continue
            self._act(res, held, sent)

    def _beat(self, refs: List[LeaseRef], claims: List[str]) -> HeartbeatResult:
        # A slow answer still renews (from when it was sent): give a loaded
        # server time to give it rather than count the renewal lost.
        timeout = max(2 * self._interval, 5.0)
        if self._plain_beats:
            return self.client.heartbeat(self.worker_id, timeout=timeout)
        if claims and not self._no_claims_in_flight:
            try:
                return self.client.heartbeat(self.worker_id, refs, claims_in_flight=claims, timeout=timeout)
            except MalformedRequest as p:
                if not _names_field(p, "claims_in_flight"):
                    raise
                # A server older than claims_in_flight: list the tasks alone.
                self._no_claims_in_flight = True
                self.log.warning("the server takes no claims in flight in heartbeats; listing tasks alone: %s", p)
        try:
            return self.client.heartbeat(self.worker_id, refs, timeout=timeout)
        except MalformedRequest as p:
            # Only a server that does not know the task list: any other 400
            # (a proxy's, say) must not end the renewal of every lease.
            if not _names_field(p, "tasks"):
                raise
            self._plain_beats = True
            self.log.warning("the server takes no task lists in heartbeats; sending plain ones: %s", p)
            return self.client.heartbeat(self.worker_id, timeout=timeout)

    def _held(self) -> Tuple[List[_Job], List[str]]:
        """The tasks in flight this worker still holds (not those it lost)
        and the claims whose answers it awaits, taken together: a claim
        answered meanwhile is seen one way or the other (its tasks are in
        flight before it stops being named)."""
        with self._lock:
            return [j for j in self._inflight.values() if not j.lost()], list(self._claims)

    def _act(self, res: HeartbeatResult, listed: List[_Job], sent: float) -> None:
        lost = set(res.lost)
        for j in listed:
            if j.ref not in lost and not self._plain_beats:
                j.lease_deadline = max(j.lease_deadline, sent + j.lease_len)
        for ref in res.lost + res.cancel:
            job = self._job(ref)
            if job is not None and job.ending_by is not None:
                self._forget(job)  # the server ended the attempt past its time limit
        # A task both lost and to cancel is one whose attempt the server
        # ended at its time limit: the claim's answer came late enough that
        # the server's clock got there before this worker's.
        timed_out = set(res.cancel)
        for ref in res.lost:
            job = self._job(ref)
            if ref in timed_out:
                if job is not None and job.halt(TaskTimeLimit("the task's time limit is up")) and not job.handler_done.is_set():
                    self.log.warning("task %s: its time limit is up (the server ended its attempt); asking its handler to stop and dropping its outcome", ref.id)
                continue
            if job is not None and job.halt(TaskLost("the server no longer gives this worker the task")):
                if job.handler_done.is_set():
                    # Its report is under way (and may be what finished it):
                    # it stops retrying, if it must.
                    self.log.debug("task %s no longer held; its report is under way", ref.id)
                else:
                    self.log.warning("task %s lost: asking its handler to stop and dropping its outcome", ref.id)
        for ref in res.cancel:
            job = self._job(ref)
            if job is not None and job.halt(TaskCancelled("the task was cancelled by an operator")):
                self.log.info("task %s cancelled by an operator; stopping its handler", ref.id)
        if res.drain and not self._draining.is_set():
            self.log.info("the server asked this worker to drain: claiming no more tasks")
            self._draining.set()

    def _job(self, ref: LeaseRef) -> Optional[_Job]:
        with self._lock:
            return self._inflight.get(ref)

    def _watch(self, now: float) -> None:
        with self._lock:
            jobs = list(self._inflight.values())
        for j in jobs:
            if j.ending_by is not None and now >= j.ending_by:
                self._forget(j)
                continue
            if j.time_limit_at is not None and j.cause is None and now >= j.time_limit_at:
                if j.halt(TaskTimeLimit("the task's time limit is up")):
                    self.log.warning("task %s: its time limit is up; stopping its handler and dropping its outcome", j.task.id)
            if j.cause is None and now >= j.lease_deadline - self._margin(j.lease_len):
                if j.halt(TaskLost("the lease could not be renewed before it ran out")):
                    self.log.warning("task %s: lease not renewed in time; stopping its handler and dropping its outcome", j.task.id)
            if self.task_timeout is not None and j.cause is None and now - j.started >= self.task_timeout:
                if j.halt(TaskTimeout(f"the handler ran past task_timeout ({self.task_timeout}s)")):
                    self.log.warning("task %s ran past task_timeout; stopping its handler", j.task.id)
            if j.cause is not None and not j.handler_done.is_set() and now - j.halted_at >= self.cancel_grace:
                self._abandon(j)

    def _abandon(self, j: _Job) -> None:
        if not j.take_reporter():
            return
        if j.lost():
            self._forget(j)
            return
        if isinstance(j.cause, TaskTimeLimit):
            self._await_end(j)
            return
        self._in_background(self._settle_abandoned, j)

    # The drain.

    def _drain(self) -> None:
        with self._lock:
            n = len(self._inflight)
        if n:
            self.log.info("draining: %d tasks in flight (drain_timeout %.3gs)", n, self.drain_timeout)
        if not self._wait_handlers(self.drain_timeout):
            with self._lock:
                jobs = list(self._inflight.values())
            self.log.warning("drain timeout: asking %d handlers to stop", len(jobs))
            for j in jobs:
                j.halt(Shutdown("the worker is shutting down"))
            if not self._wait_handlers(self.cancel_grace):
                with self._lock:
                    jobs = [j for j in self._inflight.values() if not j.handler_done.is_set()]
                for j in jobs:
                    self._abandon(j)
        # Wait for the reports under way (each bounded by report_timeout).
        end = time.monotonic() + self.report_timeout + 1.0
        with self._changed:
            while (self._inflight or self._reports) and time.monotonic() < end:
                self._changed.wait(0.1)

    def _wait_handlers(self, timeout: float) -> bool:
        """Waits until no handler runs (and their reports are done), up to
        timeout (cut short by a second stop); reports whether none runs."""
        end = time.monotonic() + timeout
        with self._changed:
            while self._running > 0 or self._inflight:
                left = end - time.monotonic()
                if left <= 0 or self._forced.is_set():
                    return False
                self._changed.wait(min(left, 0.1))
        return True


class _Prefixed(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Puts the worker's id before each message."""

    def process(self, msg: Any, kwargs: Any) -> Any:
        return f"worker {self.extra['worker_id'] if self.extra else ''}: {msg}", kwargs


async def _await(aw: Any) -> Any:
    return await aw


def _describe(e: BaseException) -> str:
    msg = str(e)
    name = type(e).__name__
    if isinstance(e, (NonRetryable, Snooze)):
        return msg or name
    tb = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    where = f" (at {tb[0].filename}:{tb[0].lineno})" if tb else ""
    return f"{name}: {msg}{where}" if msg else f"{name}{where}"


__all__ = [
    "Worker", "TaskContext", "Handler", "HandlerContext", "NonRetryable", "Snooze", "Next", "Stopped", "Shutdown",
    "TaskLost", "TaskCancelled", "TaskTimeout", "TaskTimeLimit", "WorkerError", "default_worker_id",
]
