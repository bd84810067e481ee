"""The Taskmaster client: producers, operators and the worker protocol."""

from __future__ import annotations

import datetime as _dt
import json
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Union

from . import __version__
from ._http import SAFE, UNSENT, Response, RetryPolicy, Transport, new_id, parse_retry_after
from .errors import NotFound, Problem, TransportError, WaitTimeout
from .types import (
    Attempt,
    Backoff,
    BulkResult,
    ClaimResult,
    CreatedKey,
    Dependency,
    Event,
    HeartbeatResult,
    ItemOutcome,
    Key,
    LeaseRef,
    Limit,
    LimitValues,
    ParentPage,
    PurgeJob,
    PurgeResult,
    QueueDetail,
    QueuePage,
    QueueSettingsResult,
    RateLimit,
    Registration,
    Schedule,
    ScheduleTask,
    Task,
    TaskPage,
    Worker,
    Workflow,
    WorkflowResult,
    Queue,
    decode,
    format_time,
)

DEFAULT_URL = "http://127.0.0.1:8080"
"""Where a local ``taskmaster serve`` listens."""

ENV_URL = "TASKMASTER_URL"
ENV_API_KEY = "TASKMASTER_API_KEY"

MAX_BATCH = 1000
"""The most items one batch call may carry."""
MAX_CLAIM_WAIT = 30.0
"""The longest claim wait (seconds) the server accepts."""
MAX_LEASE_SECONDS = 43200
MAX_WAIT = 60.0
"""The longest one request waits on the server for a task to finish
(``wait_ms``); :meth:`Client.wait` and :meth:`Client.submit_and_wait` chain
such requests."""
MAX_HEARTBEAT_TASKS = 10000
MAX_ERROR_BYTES = 64 << 10
MIN_SNOOZE = 1
MAX_SNOOZE = 30 * 24 * 3600


class _Unset:
    """The absence of an argument, where None means something (clear)."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass
class SubmitParams:
    """A new task: the body of a submission, a batch item, a complete's
    ``enqueue`` item.

    ``delay`` (seconds) sets ``run_at`` to now plus delay by this machine's
    clock; use ``run_at`` for an instant. ``ref`` and ``depends_on`` are for
    lists (:meth:`Client.submit_batch`, a complete's ``enqueue``,
    :meth:`Client.spawn`): ``depends_on`` names earlier items by ref and
    existing tasks by id, as strings or as :class:`Dependency` objects that
    set the edge's failure policy. ``debounce_seconds``,
    ``debounce_max_seconds`` and ``throttle_seconds`` (with ``unique_key``)
    are for :meth:`Client.submit` only: a debounced submission gives the
    PENDING holder of the key its payload and pushes its ``run_at`` again,
    at most ``debounce_max_seconds`` after the first; a throttled one
    returns the key's last holder while it finished less than
    ``throttle_seconds`` ago.
    """

    queue: str
    payload: Any = None
    priority: Optional[int] = None
    max_attempts: Optional[int] = None
    tags: Optional[Sequence[str]] = None
    run_at: Optional[_dt.datetime] = None
    delay: Optional[float] = None
    deadline: Optional[_dt.datetime] = None
    idempotency_key: Optional[str] = None
    unique_key: Optional[str] = None
    retry: Optional[Backoff] = None
    group_key: Optional[str] = None
    timeout_seconds: Optional[int] = None
    metadata: Optional[Mapping[str, str]] = None
    traceparent: Optional[str] = None
    tracestate: Optional[str] = None
    ref: Optional[str] = None
    depends_on: Optional[Sequence[Union[str, Dependency]]] = None
    debounce_seconds: Optional[int] = None
    debounce_max_seconds: Optional[int] = None
    throttle_seconds: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        """The request body."""
        if self.run_at is not None and self.delay is not None:
            raise ValueError("taskmaster: set run_at or delay, not both")
        out: Dict[str, Any] = {"queue": self.queue}
        if self.payload is not None:
            out["payload"] = self.payload
        for k in ("priority", "max_attempts", "idempotency_key", "unique_key", "group_key", "timeout_seconds",
                  "traceparent", "tracestate", "ref", "debounce_seconds", "debounce_max_seconds", "throttle_seconds"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.tags is not None:
            out["tags"] = list(self.tags)
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        if self.depends_on is not None:
            out["depends_on"] = [d.to_json() if isinstance(d, Dependency) else d for d in self.depends_on]
        if self.run_at is not None:
            out["run_at"] = format_time(self.run_at)
        if self.delay is not None:
            out["run_at"] = format_time(_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=self.delay))
        if self.deadline is not None:
            out["deadline"] = format_time(self.deadline)
        if self.retry is not None:
            out["retry"] = self.retry.to_json()
        return out


@dataclass
class PushPatch:
    """Turns a queue's push delivery on (``url`` required) or changes it
    (``Client.update_queue(name, push=PushPatch(...))``); ``None`` (or
    UNSET) keeps a member's value, its default when push is turned on.

    ``headers`` replaces the static headers every delivery carries (secret:
    never shown again, only their names), ``None`` removes them all;
    ``non_retryable_statuses`` replaces the statuses that dead-letter at
    once, ``None`` restores the default (400, 401, 403, 404, 410, 422).
    ``rotate_secret`` makes a new signing secret, shown once in the
    answer; the replaced one keeps signing for ``secret_overlap_seconds``
    (default 86,400; 0: dropped at once).
    """

    url: Optional[str] = None
    timeout_seconds: Optional[int] = None
    """1-900 (default 30)."""
    max_in_flight: Optional[int] = None
    """1-10,000 (default 10), across every instance."""
    headers: Any = UNSET
    non_retryable_statuses: Any = UNSET
    rotate_secret: bool = False
    secret_overlap_seconds: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for k in ("url", "timeout_seconds", "max_in_flight", "secret_overlap_seconds"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.headers is not UNSET:
            out["headers"] = None if self.headers is None else dict(self.headers)
        if self.non_retryable_statuses is not UNSET:
            out["non_retryable_statuses"] = None if self.non_retryable_statuses is None else list(self.non_retryable_statuses)
        if self.rotate_secret:
            out["rotate_secret"] = True
        return out


@dataclass
class SubmitBatchResult:
    """The tasks of a batch in request order; ``created[i]`` is False where
    an idempotency or unique key named an existing task."""

    tasks: List[Task]
    created: List[bool]


@dataclass
class CompleteItem:
    """One task of :meth:`Client.complete_batch` or of a claim's
    ``complete`` (:meth:`Client.claim_reporting`, without ``enqueue``)."""

    id: str
    lease_id: str
    result: Any = None
    enqueue: Optional[Sequence[SubmitParams]] = None


@dataclass
class FailItem:
    """One task of :meth:`Client.fail_batch` or of a claim's ``fail``
    (:meth:`Client.claim_reporting`)."""

    id: str
    lease_id: str
    error: str
    non_retryable: bool = False


@dataclass
class TaskFilter:
    """Selects tasks for a listing or a bulk action; None matches all.
    ``status`` may name several statuses, comma-separated, for bulk actions."""

    queue: Optional[str] = None
    status: Optional[str] = None
    dead_reason: Optional[str] = None
    group_key: Optional[str] = None
    created_after: Optional[_dt.datetime] = None
    created_before: Optional[_dt.datetime] = None
    error_contains: Optional[str] = None
    text: Optional[str] = None
    metadata: Optional[Mapping[str, str]] = None
    """Only tasks whose metadata holds every one of these keys with these values."""
    workflow_id: Optional[str] = None
    """Only the tasks of this run."""

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        for k in ("queue", "status", "dead_reason", "group_key", "error_contains", "text", "workflow_id"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        for k in ("created_after", "created_before"):
            t = getattr(self, k)
            if t is not None:
                out[k] = format_time(t)
        return out


def _rate_limit(v: Any) -> Any:
    """A rate limit as the PATCH takes it (a RateLimit, a dict, or None)."""
    if not isinstance(v, RateLimit):
        return v
    out: Dict[str, Any] = {"per_second": v.per_second}
    if v.burst is not None:
        out["burst"] = v.burst
    return out


def _wait_for(end: Optional[float]) -> float:
    """How long one waiting request may wait: up to MAX_WAIT, and no longer
    than until ``end`` (a time.monotonic() value), less a margin for the
    answer to come back."""
    if end is None:
        return MAX_WAIT
    return min(MAX_WAIT, max(end - time.monotonic() - 0.25, 0.001))


def _millis(seconds: Optional[float]) -> int:
    """Seconds as whole milliseconds, rounded up."""
    return int(-(-(seconds or 0.0) * 1000 // 1))


def encode_enqueue(enqueue: Optional[Sequence[SubmitParams]]) -> Optional[List[Dict[str, Any]]]:
    if enqueue is None:
        return None
    return [p.to_json() for p in enqueue]


def _cut(s: str, n: int = MAX_ERROR_BYTES) -> str:
    """Cuts s to at most n UTF-8 bytes without splitting a character."""
    b = s.encode("utf-8")
    if len(b) <= n:
        return s
    marker = "...(truncated)"
    return b[: n - len(marker)].decode("utf-8", "ignore") + marker


def _path(*parts: str) -> str:
    return "/".join(urllib.parse.quote(p, safe="") if i % 2 else p for i, p in enumerate(parts))


def task_path(task_id: str, action: str = "") -> str:
    p = "/tasks/v1/" + urllib.parse.quote(task_id, safe="")
    return p + "/" + action if action else p


def check_json(v: Any, what: str) -> None:
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"taskmaster: {what} cannot be encoded as JSON: {e}") from e


class Client:
    """Talks to one Taskmaster server; safe for use by many threads.

    >>> c = Client("http://127.0.0.1:8080", api_key=os.environ.get("TASKMASTER_API_KEY"))
    >>> t = c.submit("emails", {"to": "a@example.com"}, max_attempts=5, idempotency_key="welcome-42")

    Errors the server reports are raised as :class:`taskmaster.Problem`
    subclasses (``ValidationError``, ``LeaseLost``, ...); a call that got no
    answer raises :class:`taskmaster.TransportError`. Reads and fenced or
    idempotent writes are retried after transport errors and 5xx
    (``retry``); a submission without an idempotency key only when it surely
    did not reach the server.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: Optional[str] = None,
        timeout: float = 60.0,
        retry: Optional[RetryPolicy] = None,
        user_agent: str = "taskmaster-python/" + __version__,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self._t = Transport(
            url or DEFAULT_URL,
            api_key=api_key,
            timeout=timeout,
            retry=retry or RetryPolicy(),
            user_agent=user_agent,
            ssl_context=ssl_context,
        )

    @property
    def base_url(self) -> str:
        return self._t.base_url

    @property
    def transport(self) -> Transport:
        """The HTTP layer (for the worker)."""
        return self._t

    def close(self) -> None:
        """Closes the connections the client keeps alive."""
        self._t.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Producers.

    def submit(self, queue: Union[str, SubmitParams], payload: Any = None, **options: Any) -> Task:
        """Creates a task, or returns the existing one holding its
        idempotency key (or the unfinished one holding its unique key).

        Takes a queue and payload plus :class:`SubmitParams`' fields as
        keywords, or one SubmitParams.
        """
        p = queue if isinstance(queue, SubmitParams) else SubmitParams(queue=queue, payload=payload, **options)
        if p.ref is not None or p.depends_on is not None:
            raise ValueError("taskmaster: ref and depends_on need a list (submit_batch, enqueue, spawn)")
        body = p.to_json()
        mode = SAFE if p.idempotency_key else UNSENT
        return decode(Task, self._t.call("POST", "/tasks/v1", body=body, mode=mode).data)

    def submit_batch(self, items: Sequence[SubmitParams], *, workflow_id: Optional[str] = None) -> SubmitBatchResult:
        """Creates up to MAX_BATCH tasks in one transaction, all or none
        (a ValidationError names every bad item, ``tasks[i].field``). Items
        may depend on earlier items (``ref``, ``depends_on``) and on
        existing tasks' ids. A batch with dependencies is one run (its
        first task's id); with ``workflow_id`` every item joins that run
        (an existing run's id to add to it, or an id of the caller's
        choosing)."""
        body: Dict[str, Any] = {"tasks": [p.to_json() for p in items]}
        if workflow_id is not None:
            body["workflow_id"] = workflow_id
        mode = SAFE if items and all(p.idempotency_key for p in items) else UNSENT
        return self._created("batch", len(items), self._t.call("POST", "/tasks/v1/batch", body=body, mode=mode).data)

    @staticmethod
    def _created(what: str, n: int, data: Dict[str, Any]) -> SubmitBatchResult:
        out = SubmitBatchResult(tasks=[decode(Task, t) for t in data["tasks"]], created=list(data["created"]))
        if len(out.tasks) != n or len(out.created) != n:
            raise TransportError(f"taskmaster: {what} of {n} answered with {len(out.tasks)} tasks")
        return out

    def submit_and_wait(
        self, queue: Union[str, SubmitParams], payload: Any = None, *, timeout: Optional[float] = None, **options: Any
    ) -> Task:
        """Submits a task (as :meth:`submit`) and returns it once it is
        DONE or DEAD (read ``status``, ``result``, ``last_error``).

        The submission itself waits on the server (``POST /tasks/v1?wait_ms``),
        then :meth:`wait` goes on. With ``timeout`` (seconds) it raises
        :class:`WaitTimeout` when the task is not finished by then; the task
        stays submitted (``WaitTimeout.task`` is it, as last seen). Retried
        like :meth:`submit`.
        """
        p = queue if isinstance(queue, SubmitParams) else SubmitParams(queue=queue, payload=payload, **options)
        if p.ref is not None or p.depends_on is not None:
            raise ValueError("taskmaster: ref and depends_on need submit_batch")
        end = None if timeout is None else time.monotonic() + timeout
        wait = _wait_for(end)
        mode = SAFE if p.idempotency_key else UNSENT
        r = self._t.call("POST", "/tasks/v1", query={"wait_ms": _millis(wait)}, body=p.to_json(), mode=mode, wait=wait)
        t = decode(Task, r.data)
        return t if t.terminal else self._wait(t, end)

    def get(self, task_id: str, *, wait: Optional[float] = None) -> Task:
        """One task (with ``depends_on`` and ``blocked_by``).

        With ``wait`` (seconds, at most MAX_WAIT) the server answers as soon
        as the task is DONE or DEAD, or when the wait ends with the task as
        it is then: read ``status``. A waiting request holds no database
        connection on the server."""
        if wait is not None and not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"taskmaster: wait must be between 0 and {MAX_WAIT} seconds")
        q = {"wait_ms": _millis(wait)} if wait else None
        return decode(Task, self._t.call("GET", task_path(task_id), query=q, wait=wait or 0.0).data)

    def wait(self, task_id: str, timeout: Optional[float] = None) -> Task:
        """The task once it is DONE or DEAD. It waits on the server, which
        answers within milliseconds of the task's end, in requests of up to
        MAX_WAIT (polling nothing). With ``timeout`` (seconds) it raises
        :class:`WaitTimeout` (carrying the task as last seen) when the task
        is not finished by then."""
        end = None if timeout is None else time.monotonic() + timeout
        return self._wait(None, end, task_id)

    def _wait(self, t: Optional[Task], end: Optional[float], task_id: str = "") -> Task:
        tid = t.id if t is not None else task_id
        while True:
            if t is not None and t.terminal:
                return t
            if t is not None and end is not None and time.monotonic() >= end:
                raise WaitTimeout(t)
            t = self.get(tid, wait=_wait_for(end))

    def parents(self, task_id: str) -> List[Task]:
        """The tasks the task depends on, with their results, in its order:
        every page (:meth:`parents_page`), a join over 10,000 children
        included."""
        out: List[Task] = []
        cursor: Optional[str] = None
        while True:
            page = self.parents_page(task_id, cursor=cursor)
            out.extend(page.parents)
            if not page.next_cursor:
                return out
            cursor = page.next_cursor

    def parents_page(self, task_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> ParentPage:
        """A page of the task's parents (``limit`` 1-1000, default 1000;
        ``cursor``: the previous page's ``next_cursor``)."""
        q = {"limit": limit, "cursor": cursor}
        return decode(ParentPage, self._t.call("GET", task_path(task_id, "parents"), query=q).data)

    def attempts(self, task_id: str) -> List[Attempt]:
        """Every attempt of the task, oldest first, the running one last."""
        return [decode(Attempt, a) for a in self._t.call("GET", task_path(task_id, "attempts")).data["attempts"]]

    def list(
        self,
        filter: Optional[TaskFilter] = None,
        *,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        **fields: Any,
    ) -> TaskPage:
        """A page of tasks, newest first. Filter with a TaskFilter or its
        fields as keywords (``queue="emails", status="DEAD"``)."""
        f = filter or TaskFilter(**fields)
        q: Dict[str, Any] = f.to_json()
        for k, v in q.pop("metadata", {}).items():
            q["metadata." + k] = v  # the listing takes metadata.<key>=<value>
        q["limit"] = limit
        q["cursor"] = cursor
        return decode(TaskPage, self._t.call("GET", "/tasks/v1", query=q).data)

    def iter_tasks(self, filter: Optional[TaskFilter] = None, *, page_size: Optional[int] = None, **fields: Any) -> Iterator[Task]:
        """Every task the filter matches, newest first, page after page."""
        f = filter or TaskFilter(**fields)
        cursor: Optional[str] = None
        while True:
            page = self.list(f, limit=page_size, cursor=cursor)
            yield from page.tasks
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # Operators.

    def retry(self, task_id: str) -> Task:
        """Moves a DEAD task back to PENDING (attempts reset); InvalidTransition otherwise."""
        return decode(Task, self._t.call("POST", task_path(task_id, "retry")).data)

    def cancel(self, task_id: str) -> Task:
        """Cancels a PENDING or BLOCKED task (DEAD cancelled); on a RUNNING
        one asks its holder to stop (it learns it from its heartbeat)."""
        return decode(Task, self._t.call("POST", task_path(task_id, "cancel")).data)

    def bulk_retry(self, filter: Optional[TaskFilter] = None, *, dry_run: bool = False, **fields: Any) -> BulkResult:
        """Retries every DEAD task the filter matches (admin); a dry run counts them."""
        return self._bulk("retry", filter or TaskFilter(**fields), dry_run)

    def bulk_cancel(self, filter: Optional[TaskFilter] = None, *, dry_run: bool = False, **fields: Any) -> BulkResult:
        """Cancels every PENDING, BLOCKED or RUNNING task the filter matches (admin)."""
        return self._bulk("cancel", filter or TaskFilter(**fields), dry_run)

    def bulk_replay(self, filter: Optional[TaskFilter] = None, *, dry_run: bool = False, **fields: Any) -> BulkResult:
        """Replays every DONE or DEAD task the filter matches (``status``:
        DONE, DEAD or both, the default), as :meth:`replay` does each,
        skipping those whose unique key an unfinished task holds (admin)."""
        return self._bulk("replay", filter or TaskFilter(**fields), dry_run)

    def replay(
        self,
        task_id: str,
        *,
        payload: Any = UNSET,
        priority: Optional[int] = None,
        max_attempts: Optional[int] = None,
        tags: Optional[Sequence[str]] = None,
        run_at: Optional[_dt.datetime] = None,
        deadline: Optional[_dt.datetime] = None,
        group_key: Optional[str] = None,
        timeout_seconds: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        traceparent: Optional[str] = None,
        tracestate: Optional[str] = None,
    ) -> Task:
        """Creates a new task from a DONE or DEAD one: the same queue,
        payload and settings (the arguments given replace them), linked by
        ``replay_of``, in a run of its own; it keeps ``traceparent`` (the
        original's trace context without one). Another status raises
        InvalidTransition; a unique key an unfinished task holds,
        UniqueKeyTaken. Not idempotent: resent only when it surely did not
        reach the server."""
        body: Dict[str, Any] = {}
        if payload is not UNSET:
            check_json(payload, "the payload")
            body["payload"] = payload
        for k, v in (("priority", priority), ("max_attempts", max_attempts), ("group_key", group_key),
                     ("timeout_seconds", timeout_seconds), ("traceparent", traceparent), ("tracestate", tracestate)):
            if v is not None:
                body[k] = v
        if tags is not None:
            body["tags"] = list(tags)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if run_at is not None:
            body["run_at"] = format_time(run_at)
        if deadline is not None:
            body["deadline"] = format_time(deadline)
        return decode(Task, self._t.call("POST", task_path(task_id, "replay"), body=body, mode=UNSENT).data)

    # Workflows (runs).

    def workflow(self, workflow_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Workflow:
        """A run: its counts and a page of its tasks, oldest first (``limit``
        1-1000, default 100; ``cursor``: the previous page's
        ``next_cursor``). A run is named by its first task's id;
        WorkflowNotFound when no task (that the key may see) belongs to it."""
        q = {"limit": limit, "cursor": cursor}
        return decode(Workflow, self._t.call("GET", _path("/workflows/v1", workflow_id), query=q).data)

    def cancel_workflow(self, workflow_id: str) -> WorkflowResult:
        """Cancels every unfinished task of the run; the holders of its
        RUNNING tasks learn it from their heartbeats (admin)."""
        return self._workflow_action(workflow_id, "cancel")

    def retry_workflow(self, workflow_id: str) -> WorkflowResult:
        """Re-runs what failed in the run and what failed with it: its DEAD
        tasks PENDING again, or BLOCKED behind their parents; DONE tasks
        are left alone (admin)."""
        return self._workflow_action(workflow_id, "retry")

    def _workflow_action(self, workflow_id: str, action: str) -> WorkflowResult:
        r = self._t.call("POST", _path("/workflows/v1", workflow_id) + "/" + action, mode=UNSENT)
        return decode(WorkflowResult, r.data)

    def _bulk(self, action: str, f: TaskFilter, dry_run: bool) -> BulkResult:
        body = f.to_json()
        if dry_run:
            body["dry_run"] = True
        r = self._t.call("POST", "/tasks/v1/bulk/" + action, body=body, mode=SAFE if dry_run else UNSENT)
        return decode(BulkResult, r.data)

    def purge_queue(self, queue: str, *, status: Optional[str] = None, dry_run: bool = False) -> PurgeResult:
        """Removes the queue's PENDING (default) or DEAD tasks (admin). A
        large purge answers with a job: poll :meth:`purge_progress`."""
        body: Dict[str, Any] = {}
        if status is not None:
            body["status"] = status
        if dry_run:
            body["dry_run"] = True
        r = self._t.call("POST", _path("/queues/v1", queue) + "/purge", body=body, mode=SAFE if dry_run else UNSENT)
        if r.status == 202:
            return PurgeResult(job=decode(PurgeJob, r.data))
        return PurgeResult(result=decode(BulkResult, r.data))

    def purge_progress(self, queue: str, job_id: str) -> PurgeJob:
        return decode(PurgeJob, self._t.call("GET", _path("/queues/v1", queue) + _path("/purges", job_id)).data)

    def drain(self, worker_id: str) -> Worker:
        """Asks a worker to stop claiming (admin), for rolling deploys."""
        return decode(Worker, self._t.call("POST", _path("/workers/v1", worker_id) + "/drain").data)

    def workers(self) -> List[Worker]:
        return [decode(Worker, w) for w in self._t.call("GET", "/workers/v1").data["workers"]]

    # Queues.

    def list_queues(
        self,
        *,
        prefix: Optional[str] = None,
        pattern: Optional[str] = None,
        min_pending: Optional[int] = None,
        paused: Optional[bool] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> QueuePage:
        """A page of queues (those holding tasks or having settings), by name."""
        q = {"prefix": prefix, "pattern": pattern, "min_pending": min_pending, "paused": paused, "limit": limit, "cursor": cursor}
        return decode(QueuePage, self._t.call("GET", "/queues/v1", query=q).data)

    def queues(self, **filters: Any) -> List[Queue]:
        """Every queue, reading every page."""
        out: List[Queue] = []
        cursor: Optional[str] = None
        while True:
            page = self.list_queues(limit=1000, cursor=cursor, **filters)
            out.extend(page.queues)
            if not page.next_cursor:
                return out
            cursor = page.next_cursor

    def queue(self, name: str) -> QueueDetail:
        """One queue's detail (QueueNotFound for a queue without tasks or settings)."""
        return decode(QueueDetail, self._t.call("GET", _path("/queues/v1", name)).data)

    def update_queue(
        self,
        name: str,
        *,
        paused: Any = UNSET,
        max_running: Any = UNSET,
        rate_limit: Any = UNSET,
        max_running_per_group: Any = UNSET,
        default_timeout_seconds: Any = UNSET,
        rate_limit_per_group: Any = UNSET,
        limits: Any = UNSET,
        push: Any = UNSET,
    ) -> QueueSettingsResult:
        """Changes some of a queue's settings (admin): an argument left out
        keeps its setting, None clears it.

        ``rate_limit`` and ``rate_limit_per_group`` (a bucket per
        ``group_key``) take a :class:`RateLimit`; ``limits`` the names of
        the named limits the queue draws on (:meth:`put_limit`), replacing
        them; ``push`` a :class:`PushPatch` that makes the queue a push
        queue or changes its delivery (None turns push off). The answer of
        the change that created or rotated a push queue's signing secret
        shows it, once: ``result.push.secret``. A change of push settings is
        not sent again after a lost answer (the repeat would show no secret
        the first one created): rotate the secret instead."""
        body: Dict[str, Any] = {}
        if paused is not UNSET:
            body["paused"] = paused
        if max_running is not UNSET:
            body["max_running"] = max_running
        if rate_limit is not UNSET:
            body["rate_limit"] = _rate_limit(rate_limit)
        if max_running_per_group is not UNSET:
            body["max_running_per_group"] = max_running_per_group
        if default_timeout_seconds is not UNSET:
            body["default_timeout_seconds"] = default_timeout_seconds
        if rate_limit_per_group is not UNSET:
            body["rate_limit_per_group"] = _rate_limit(rate_limit_per_group)
        if limits is not UNSET:
            body["limits"] = None if limits is None else list(limits)
        mode = SAFE
        if push is not UNSET:
            body["push"] = push.to_json() if isinstance(push, PushPatch) else push
            if push is not None:
                mode = UNSENT  # a secret is in the first answer only
        return decode(QueueSettingsResult, self._t.call("PATCH", _path("/queues/v1", name), body=body, mode=mode).data)

    def pause_queue(self, name: str) -> QueueSettingsResult:
        return self.update_queue(name, paused=True)

    def resume_queue(self, name: str) -> QueueSettingsResult:
        return self.update_queue(name, paused=False)

    # Named limits.

    def put_limit(
        self, name: str, *, per_second: Optional[float] = None, burst: Optional[int] = None, max_running: Optional[int] = None
    ) -> Limit:
        """Creates or replaces a named limit (admin): a token bucket
        (``per_second``, ``burst``: default one second's tokens) and a cap on
        RUNNING tasks (``max_running``) shared by the queues that name it
        (``update_queue(q, limits=[name])``); at least one of per_second and
        max_running. An argument left out is none. ``created`` is True for a
        new limit."""
        body: Dict[str, Any] = {}
        for k, v in (("per_second", per_second), ("burst", burst), ("max_running", max_running)):
            if v is not None:
                body[k] = v
        r = self._t.call("PUT", _path("/limits/v1", name), body=body)
        out = decode(Limit, r.data)
        out.created = r.status == 201
        return out

    def limit(self, name: str) -> Limit:
        """One named limit (LimitNotFound when none has the name)."""
        return decode(Limit, self._t.call("GET", _path("/limits/v1", name)).data)

    def limits(self) -> List[Limit]:
        """Every named limit, by name."""
        return [decode(Limit, x) for x in self._t.call("GET", "/limits/v1").data["limits"]]

    def delete_limit(self, name: str) -> LimitValues:
        """Deletes a named limit no queue names (admin; LimitInUse
        otherwise) and returns its values as they were."""
        return decode(LimitValues, self._t.call("DELETE", _path("/limits/v1", name)).data)

    # Schedules.

    def create_schedule(
        self,
        name: str,
        cron: str,
        task: ScheduleTask,
        *,
        timezone: Optional[str] = None,
        overlap: Optional[str] = None,
        paused: bool = False,
    ) -> Schedule:
        """Makes a recurring schedule (admin); ScheduleExists if the name is taken."""
        body: Dict[str, Any] = {"name": name, "cron": cron, "task": task.to_json()}
        if timezone is not None:
            body["timezone"] = timezone
        if overlap is not None:
            body["overlap"] = overlap
        if paused:
            body["paused"] = True
        return decode(Schedule, self._t.call("POST", "/schedules/v1", body=body).data)

    def schedules(self) -> List[Schedule]:
        return [decode(Schedule, s) for s in self._t.call("GET", "/schedules/v1").data["schedules"]]

    def schedule(self, name: str) -> Schedule:
        return decode(Schedule, self._t.call("GET", _path("/schedules/v1", name)).data)

    def update_schedule(
        self,
        name: str,
        *,
        cron: Optional[str] = None,
        timezone: Optional[str] = None,
        task: Optional[ScheduleTask] = None,
        overlap: Optional[str] = None,
        paused: Optional[bool] = None,
    ) -> Schedule:
        """Changes a schedule (admin); arguments left out stay as they are."""
        body: Dict[str, Any] = {}
        for k, v in (("cron", cron), ("timezone", timezone), ("overlap", overlap), ("paused", paused)):
            if v is not None:
                body[k] = v
        if task is not None:
            body["task"] = task.to_json()
        return decode(Schedule, self._t.call("PATCH", _path("/schedules/v1", name), body=body).data)

    def pause_schedule(self, name: str) -> Schedule:
        return self.update_schedule(name, paused=True)

    def resume_schedule(self, name: str) -> Schedule:
        return self.update_schedule(name, paused=False)

    def delete_schedule(self, name: str) -> Schedule:
        return decode(Schedule, self._t.call("DELETE", _path("/schedules/v1", name)).data)

    # API keys.

    def create_key(
        self,
        name: str,
        scopes: Sequence[str],
        *,
        queues: Optional[Sequence[str]] = None,
        worker_prefix: Optional[str] = None,
        expires_in: Optional[float] = None,
        expires_at: Optional[_dt.datetime] = None,
    ) -> CreatedKey:
        """Makes an API key (admin). The token (``key``) is shown only now."""
        body: Dict[str, Any] = {"name": name, "scopes": list(scopes)}
        if queues is not None:
            body["queues"] = list(queues)
        if worker_prefix is not None:
            body["worker_prefix"] = worker_prefix
        if expires_in is not None:
            body["expires_in_seconds"] = int(-(-expires_in // 1))
        if expires_at is not None:
            body["expires_at"] = format_time(expires_at)
        return decode(CreatedKey, self._t.call("POST", "/admin/v1/keys", body=body, mode=UNSENT).data)

    def keys(self) -> List[Key]:
        return [decode(Key, k) for k in self._t.call("GET", "/admin/v1/keys").data["keys"]]

    def revoke_key(self, key_id: str) -> Key:
        return decode(Key, self._t.call("DELETE", _path("/admin/v1/keys", key_id)).data)

    # Events.

    def events(
        self,
        *,
        queues: Optional[Sequence[str]] = None,
        types: Optional[Sequence[str]] = None,
        task_ids: Optional[Sequence[str]] = None,
        workflows: Optional[Sequence[str]] = None,
        last_event_id: Optional[str] = None,
        reconnect: bool = True,
        read_timeout: Optional[float] = 60.0,
    ) -> Generator[Event, None, None]:
        """Follows the lifecycle event stream (``GET /events/v1``).

        Yields every event in commit order, of the ``queues``, ``types``
        (``task.*`` is a prefix), ``task_ids`` (at most 100: follow chosen
        tasks) and ``workflows`` (runs, at most 100) given. With
        ``reconnect``, a stream
        that ends or breaks is opened again after the server's ``retry:``
        delay, resuming after the last event seen (the server says
        ``stream.events_lost`` if it no longer has them). ``read_timeout``
        should exceed the server's heartbeat (15 s). Close the generator to
        stop.
        """
        q = {
            "queue": list(queues) if queues else None,
            "type": list(types) if types else None,
            "task_id": list(task_ids) if task_ids else None,
            "workflow_id": list(workflows) if workflows else None,
        }
        last = last_event_id
        delay = 2.0
        while True:
            extra = {"Last-Event-ID": last} if last else {}
            try:
                conn, resp = self._t.stream("/events/v1", q, extra, read_timeout)
            except (TransportError, Problem) as e:
                if not reconnect or (isinstance(e, Problem) and e.status < 500):
                    raise
                time.sleep(max(delay, getattr(e, "retry_after", None) or 0.0))
                continue
            try:
                ev_id: Optional[str] = None
                data_lines: List[str] = []
                while True:
                    raw = resp.readline()
                    if not raw:
                        break
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line == "":
                        if data_lines:
                            ev = Event(id=ev_id, data=json.loads("\n".join(data_lines)))
                            if ev_id:
                                last = ev_id
                            yield ev
                        elif ev_id:
                            last = ev_id  # a position the filter skipped to
                        ev_id, data_lines = None, []
                        continue
                    if line.startswith(":"):
                        continue
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "id":
                        ev_id = value
                    elif name == "data":
                        data_lines.append(value)
                    elif name == "retry":
                        try:
                            delay = int(value) / 1000
                        except ValueError:
                            pass
            except (OSError, socket.timeout, ValueError):
                if not reconnect:
                    raise
            finally:
                conn.close()
            if not reconnect:
                return
            time.sleep(delay)

    # The worker protocol.

    def register(
        self, worker_id: Optional[str] = None, *, queues: Optional[Sequence[str]] = None, tags: Optional[Sequence[str]] = None
    ) -> Registration:
        """Registers (or re-registers, reviving a DEAD) worker."""
        body: Dict[str, Any] = {}
        if worker_id:
            body["id"] = worker_id
        if queues:
            body["queues"] = list(queues)
        if tags:
            body["tags"] = list(tags)
        r = self._t.call("POST", "/workers/v1/register", body=body)
        reg = decode(Registration, r.data)
        reg.created = r.status == 201
        return reg

    def heartbeat(
        self,
        worker_id: str,
        tasks: Optional[Sequence[LeaseRef]] = None,
        *,
        claims_in_flight: Optional[Sequence[str]] = None,
        timeout: Optional[float] = None,
    ) -> HeartbeatResult:
        """A worker's sign of life. With ``tasks`` (every task it holds,
        under its lease; ``[]`` for none) it renews their leases and lets
        the server take back what it holds unlisted; the answer names the
        tasks it lost, those to cancel, and whether to drain. Without, it
        renews nothing. ``timeout`` bounds the call, retries included.

        With ``tasks``, ``claims_in_flight`` names the request ids of the
        worker's claims sent and not yet answered: the tasks they made RUNNING are not
        taken back as orphaned, however late their answer. Name a claim
        from its sending until its tasks are in ``tasks`` (take both at the
        same moment), or until the worker gives up on it."""
        kw: Dict[str, Any] = {}
        if tasks is not None:
            body: Dict[str, Any] = {"tasks": [t.to_json() for t in tasks]}
            if claims_in_flight:
                body["claims_in_flight"] = list(claims_in_flight)
            kw["body"] = body
        if timeout is not None:
            kw["deadline"] = time.monotonic() + timeout
            kw["timeout"] = timeout
        r = self._t.call("POST", _path("/workers/v1", worker_id) + "/heartbeat", **kw)
        return decode(HeartbeatResult, r.data)

    def claim(
        self,
        worker_id: str,
        *,
        queue: Optional[str] = None,
        limit: Optional[int] = None,
        wait: float = 0.0,
        lease_seconds: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> List[Task]:
        """Claims up to ``limit`` tasks (RUNNING under fresh leases). With
        ``wait`` (seconds, at most MAX_CLAIM_WAIT) an empty claim waits on
        the server for a task. Retried with the same ``request_id`` (a fresh
        one when None): a retry after a lost answer gets the same tasks."""
        return self.claim_reporting(
            worker_id, queue=queue, limit=limit, wait=wait, lease_seconds=lease_seconds, request_id=request_id
        ).tasks

    def claim_reporting(
        self,
        worker_id: str,
        *,
        complete: Sequence[CompleteItem] = (),
        fail: Sequence[FailItem] = (),
        queue: Optional[str] = None,
        limit: Optional[int] = None,
        wait: float = 0.0,
        lease_seconds: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> ClaimResult:
        """Reports the tasks the worker finished (``complete``, ``fail``:
        at most MAX_BATCH items together, each task once, no ``enqueue``)
        and claims its next ones with one request, as :meth:`claim` does:
        the server applies the reports as :meth:`complete_batch` and
        :meth:`fail_batch` do, each item fenced on its own, in the
        transaction of the claim's first try and before it. A worker that
        takes one task at a time spends one request per task instead of
        two. The answer's ``completed`` and ``failed`` hold the reports'
        outcomes in request order.

        All or nothing until the claim's first try: an error (a Problem, a
        TransportError) means no report was saved, unless a try was
        committed and its answer lost. Retried as :meth:`claim` is, with
        the same reports and ``request_id``: an item a lost try saved comes
        back ``error`` with an InvalidTransition whose ``current_status`` is
        its new status (DONE for a completion, PENDING or DEAD for a
        failure), and the claim answers with the tasks the lost try
        claimed. Once saved, the answer carries the outcomes whatever the
        wait brings (an error while waiting ends it with no tasks)."""
        body: Dict[str, Any] = {"worker_id": worker_id, "request_id": request_id or new_id()}
        if queue is not None:
            body["queue"] = queue
        if limit is not None:
            body["limit"] = limit
        if wait > 0:
            body["wait_ms"] = _millis(wait)
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        for i, it in enumerate(complete):
            if it.enqueue is not None:
                raise ValueError(f"taskmaster: complete[{i}]: a claim's completions enqueue nothing (use complete_batch)")
        if complete:
            body["complete"] = _complete_items(complete, "complete")
        if fail:
            body["fail"] = _fail_items(fail)
        r = self._t.call("POST", "/tasks/v1/claim", body=body, wait=max(wait, 0.0))
        out = decode(ClaimResult, r.data)
        if len(out.completed) != len(complete) or len(out.failed) != len(fail):
            raise TransportError(
                f"taskmaster: a claim reporting {len(complete)} completions and {len(fail)} failures"
                f" answered with {len(out.completed)} and {len(out.failed)} outcomes"
            )
        return out

    def complete(
        self,
        task_id: str,
        *,
        worker_id: str,
        lease_id: str,
        result: Any = None,
        enqueue: Optional[Sequence[SubmitParams]] = None,
        **call: Any,
    ) -> Task:
        """Reports a held task done. ``enqueue`` creates tasks in the same
        transaction, in the task's run (their answer in ``Task.enqueued``);
        their ``ref`` and ``depends_on`` name earlier items and existing
        tasks (a join over a spawn's children). LeaseLost or
        InvalidTransition: the task is no longer this worker's; drop it."""
        body: Dict[str, Any] = {"worker_id": worker_id, "lease_id": lease_id}
        if result is not None:
            check_json(result, "the result")
            body["result"] = result
        enq = encode_enqueue(enqueue)
        if enq is not None:
            body["enqueue"] = enq
        return decode(Task, self._t.call("POST", task_path(task_id, "complete"), body=body, **call).data)

    def spawn(self, task_id: str, items: Sequence[SubmitParams], *, worker_id: str, lease_id: str) -> SubmitBatchResult:
        """Creates tasks on behalf of a held task, which stays RUNNING: the
        children a task discovers, and a join that depends on them (or a
        complete's ``enqueue`` with the join). Like :meth:`submit_batch`
        (``ref`` and ``depends_on`` name earlier items and existing tasks,
        the spawning one included), all or none, in the task's run. Fenced
        like complete (LeaseLost, InvalidTransition: the task is no longer
        this worker's); CancelRequested once an operator asked to cancel
        the task. Resent after a failure that may have reached the server
        only when every item has an idempotency key."""
        body = {"worker_id": worker_id, "lease_id": lease_id, "tasks": [p.to_json() for p in items]}
        mode = SAFE if items and all(p.idempotency_key for p in items) else UNSENT
        return self._created("spawn", len(items), self._t.call("POST", task_path(task_id, "spawn"), body=body, mode=mode).data)

    def fail(self, task_id: str, *, worker_id: str, lease_id: str, error: str, non_retryable: bool = False, **call: Any) -> Task:
        """Reports a held task failed: retried after backoff while attempts
        remain, unless ``non_retryable`` (DEAD at once)."""
        body = {"worker_id": worker_id, "lease_id": lease_id, "error": _cut(error), "retryable": not non_retryable}
        return decode(Task, self._t.call("POST", task_path(task_id, "fail"), body=body, **call).data)

    def snooze(self, task_id: str, *, worker_id: str, lease_id: str, delay: float, **call: Any) -> Task:
        """Puts a held task back, claimable ``delay`` seconds from now
        (rounded up, MIN_SNOOZE to MAX_SNOOZE), without spending an attempt."""
        body = {"worker_id": worker_id, "lease_id": lease_id, "delay_seconds": int(-(-delay // 1))}
        return decode(Task, self._t.call("POST", task_path(task_id, "snooze"), body=body, **call).data)

    def release(self, task_id: str, *, worker_id: str, lease_id: str, **call: Any) -> Task:
        """Hands a held task back, PENDING at once, without spending an
        attempt (a stopping worker's call; fenced like complete)."""
        body = {"worker_id": worker_id, "lease_id": lease_id}
        return decode(Task, self._t.call("POST", task_path(task_id, "release"), body=body, **call).data)

    def progress(
        self,
        task_id: str,
        *,
        worker_id: str,
        lease_id: str,
        percent: float,
        message: Optional[str] = None,
        details: Any = None,
        **call: Any,
    ) -> Task:
        """Reports how far a held task got (``percent``, 0 to 100; a
        ``message`` of at most 1 KiB; ``details``, any JSON value of at most
        16 KiB). Fenced like complete (LeaseLost or InvalidTransition: the
        task is no longer this worker's) and a sign of life of the worker.
        The server keeps the last report as the task's ``progress`` and
        announces it with a ``task.progress`` event, at most one a second."""
        body: Dict[str, Any] = {"worker_id": worker_id, "lease_id": lease_id, "percent": percent}
        if message:
            body["message"] = message
        if details is not None:
            check_json(details, "the details")
            body["details"] = details
        return decode(Task, self._t.call("POST", task_path(task_id, "progress"), body=body, **call).data)

    def extend(self, task_id: str, *, worker_id: str, lease_id: str, lease_seconds: Optional[int] = None) -> Task:
        """Sets a held task's lease to run out ``lease_seconds`` from now
        (the task's current length when None)."""
        body: Dict[str, Any] = {"worker_id": worker_id, "lease_id": lease_id}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return decode(Task, self._t.call("POST", task_path(task_id, "extend"), body=body).data)

    def complete_batch(self, worker_id: str, items: Sequence[CompleteItem]) -> List[ItemOutcome]:
        """Reports up to MAX_BATCH held tasks done, each fenced on its own."""
        return self._report_batch("/tasks/v1/complete", worker_id, _complete_items(items, "items"))

    def fail_batch(self, worker_id: str, items: Sequence[FailItem]) -> List[ItemOutcome]:
        """Reports up to MAX_BATCH held tasks failed, each fenced on its own."""
        return self._report_batch("/tasks/v1/fail", worker_id, _fail_items(items))

    def release_batch(self, worker_id: str, refs: Sequence[LeaseRef]) -> List[ItemOutcome]:
        """Hands up to MAX_BATCH held tasks back without spending their
        attempts (a stopping worker's call), each fenced on its own:
        ``requeued``, ``dead`` (an operator had asked to cancel it) or
        ``error``."""
        return self._report_batch("/tasks/v1/release", worker_id, [r.to_json() for r in refs])

    def _report_batch(self, path: str, worker_id: str, items: List[Dict[str, Any]]) -> List[ItemOutcome]:
        data = self._t.call("POST", path, body={"worker_id": worker_id, "items": items}).data
        out = [decode(ItemOutcome, o) for o in data["items"]]
        if len(out) != len(items):
            raise TransportError(f"taskmaster: batch of {len(items)} answered with {len(out)} outcomes")
        return out


def _complete_items(items: Sequence[CompleteItem], name: str) -> List[Dict[str, Any]]:
    """The items of a batch complete (``name``: "items") or of a claim's
    ``complete``, as the request carries them."""
    out = []
    for i, it in enumerate(items):
        r: Dict[str, Any] = {"id": it.id, "lease_id": it.lease_id}
        if it.result is not None:
            check_json(it.result, f"{name}[{i}].result")
            r["result"] = it.result
        enq = encode_enqueue(it.enqueue)
        if enq is not None:
            r["enqueue"] = enq
        out.append(r)
    return out


def _fail_items(items: Sequence[FailItem]) -> List[Dict[str, Any]]:
    """The items of a batch fail or of a claim's ``fail``."""
    return [{"id": it.id, "lease_id": it.lease_id, "error": _cut(it.error), "retryable": not it.non_retryable} for it in items]


def is_route_missing(err: BaseException) -> bool:
    """Whether err says the server has no such route (an older server)."""
    return isinstance(err, Problem) and (err.slug in ("not-found", "method-not-allowed") or (err.status in (404, 405) and not err.slug))


__all__ = [
    "Client", "PushPatch", "SubmitParams", "SubmitBatchResult", "CompleteItem", "FailItem", "TaskFilter", "UNSET",
    "DEFAULT_URL", "ENV_URL", "ENV_API_KEY", "MAX_BATCH", "MAX_CLAIM_WAIT", "MAX_LEASE_SECONDS", "MAX_WAIT",
    "MAX_HEARTBEAT_TASKS", "MAX_ERROR_BYTES", "MIN_SNOOZE", "MAX_SNOOZE", "is_route_missing",
]
