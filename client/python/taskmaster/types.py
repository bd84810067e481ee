"""The API's objects, as the server sends them.

Every class mirrors a schema of docs/openapi.yaml field for field (the SDK's
tests check them against it); field names are the API's JSON names. Times
are timezone-aware :class:`datetime.datetime` values in UTC; JSON values
(``payload``, ``result``) are what :func:`json.loads` gives. Members a newer
server adds are ignored.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import sys
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Type, TypeVar, Union

T = TypeVar("T")

# Task statuses.
PENDING = "PENDING"
RUNNING = "RUNNING"
DONE = "DONE"
DEAD = "DEAD"
BLOCKED = "BLOCKED"
TERMINAL = frozenset({DONE, DEAD})

# Failure policies of a dependency (Dependency.on_failure): what a parent
# ending DEAD means for the task that depends on it.
ON_FAILURE_FAIL = "fail"
"""The default: the dependant ends DEAD ``dependency_failed``."""
ON_FAILURE_IGNORE = "ignore"
"""The dependant runs anyway once its other parents allow, and sees the
parent's status among its parents."""
ON_FAILURE_SKIP = "skip"
"""The dependant ends DEAD ``dependency_skipped``: skipped, not failed."""


@dataclass(frozen=True)
class Dependency:
    """One parent of a task in ``depends_on`` with the failure policy of its
    edge: ``ref`` names an earlier item of the list, or ``id`` an existing
    task (one of the two). A plain string in ``depends_on`` is a ref, else
    an id, with the policy ``fail``."""

    ref: Optional[str] = None
    id: Optional[str] = None
    on_failure: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        if (self.ref is None) == (self.id is None):
            raise ValueError("taskmaster: a Dependency names a ref or an id, one of the two")
        out: Dict[str, Any] = {"ref": self.ref} if self.ref is not None else {"id": self.id}
        if self.on_failure is not None:
            out["on_failure"] = self.on_failure
        return out


@dataclass
class Backoff:
    """A task's own retry policy (the API's ``retry``): a retryable failure
    with attempts left waits min(2^attempts x base_seconds, max_seconds),
    jittered as asked (``none`` or ``full``). The client's own retrying of
    requests is :class:`taskmaster.RetryPolicy`."""

    base_seconds: float
    max_seconds: Optional[float] = None
    jitter: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"base_seconds": self.base_seconds}
        if self.max_seconds is not None:
            out["max_seconds"] = self.max_seconds
        if self.jitter is not None:
            out["jitter"] = self.jitter
        return out


@dataclass
class Trace:
    """A W3C trace context a task was submitted under (schema Trace)."""

    traceparent: str
    tracestate: Optional[str] = None


@dataclass
class Progress:
    """A holder's last progress report (schema Progress)."""

    percent: float
    message: str = ""
    details: Any = None
    updated_at: Optional[_dt.datetime] = None


@dataclass
class Task:
    """A task (schema Task)."""

    id: str
    queue: str
    status: str
    priority: int = 0
    payload: Any = None
    tags: List[str] = field(default_factory=list)
    attempts: int = 0
    max_attempts: int = 0
    worker_id: Optional[str] = None
    lease_id: Optional[str] = None
    last_error: Optional[str] = None
    dead_reason: Optional[str] = None
    result: Any = None
    deadline: Optional[_dt.datetime] = None
    run_at: Optional[_dt.datetime] = None
    idempotency_key: Optional[str] = None
    created_at: Optional[_dt.datetime] = None
    claimed_at: Optional[_dt.datetime] = None
    finished_at: Optional[_dt.datetime] = None
    updated_at: Optional[_dt.datetime] = None
    lease_expires_at: Optional[_dt.datetime] = None
    cancel_requested_at: Optional[_dt.datetime] = None
    unique_key: Optional[str] = None
    retry: Optional[Backoff] = None
    snoozes: int = 0
    group_key: Optional[str] = None
    timeout_seconds: Optional[int] = None
    """The task's own time limit on each attempt (None: its queue's default, or none)."""
    timeout_at: Optional[_dt.datetime] = None
    """When the running attempt's time limit is up (None unless RUNNING under one)."""
    metadata: Dict[str, str] = field(default_factory=dict)
    trace: Optional[Trace] = None
    progress: Optional[Progress] = None
    schedule_name: Optional[str] = None
    """The recurring schedule whose tick made the task."""
    schedule_tick: Optional[_dt.datetime] = None
    workflow_id: Optional[str] = None
    """The task's run: its own id when submitted alone; the run of the task
    whose complete (``enqueue``) or spawn created it; the batch's run in a
    batch with dependencies or one that names ``workflow_id``."""
    replay_of: Optional[str] = None
    """The DONE or DEAD task this one was replayed from."""
    debounce_until: Optional[_dt.datetime] = None
    """The latest ``run_at`` debounced submissions may push the task to."""
    depends_on: Optional[List[str]] = None
    """The tasks it depends on (``get`` only)."""
    blocked_by: Optional[List[str]] = None
    """Those of them not DONE yet (``get`` only)."""
    enqueued: Optional[List["Task"]] = None
    """The tasks a complete with ``enqueue`` created (its answer only)."""

    @property
    def ref(self) -> "LeaseRef":
        """The task's id and lease."""
        return LeaseRef(id=self.id, lease_id=self.lease_id or "")

    @property
    def terminal(self) -> bool:
        """Whether the task is DONE or DEAD."""
        return self.status in TERMINAL


@dataclass(frozen=True)
class LeaseRef:
    """A task and the lease a worker holds it under."""

    id: str
    lease_id: str

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.id, "lease_id": self.lease_id}


@dataclass
class Attempt:
    """One claim of a task and how it ended (``outcome`` None while it runs)."""

    attempt: int
    worker_id: str
    claimed_at: Optional[_dt.datetime] = None
    finished_at: Optional[_dt.datetime] = None
    outcome: Optional[str] = None
    error: Optional[str] = None
    http_status: Optional[int] = None
    """A push delivery's answer status (None: no push delivery, or no answer)."""


@dataclass
class TaskPage:
    """A page of a task listing, newest first."""

    tasks: List[Task]
    next_cursor: Optional[str] = None
    truncated: bool = False


@dataclass
class ParentPage:
    """A page of a task's parents, in the order it named them (schema
    ParentList); ``truncated``: the page stopped at the server's response
    byte cap (``next_cursor`` goes on)."""

    parents: List[Task]
    next_cursor: Optional[str] = None
    truncated: bool = False


@dataclass
class Workflow:
    """A run (schema Workflow): its tasks counted by status and DEAD
    reason, its times, and a page of its tasks, oldest first. ``finished``:
    no task of the run is PENDING, RUNNING or BLOCKED."""

    id: str
    total: int = 0
    status_counts: Dict[str, int] = field(default_factory=dict)
    dead_reasons: Dict[str, int] = field(default_factory=dict)
    finished: bool = False
    first_created_at: Optional[_dt.datetime] = None
    last_updated_at: Optional[_dt.datetime] = None
    last_finished_at: Optional[_dt.datetime] = None
    tasks: List[Task] = field(default_factory=list)
    next_cursor: Optional[str] = None
    truncated: bool = False


@dataclass
class WorkflowResult:
    """What a run's cancel or retry did (schema WorkflowResult):
    ``matched`` the unfinished (cancel) or DEAD (retry) tasks when it
    began, ``changed`` those cancelled or asked to stop (cancel) or moved
    out of DEAD (retry), ``blocked`` (retry) those of them waiting for
    their parents again, ``skipped`` those left alone."""

    id: str
    matched: int = 0
    changed: int = 0
    blocked: Optional[int] = None
    skipped: int = 0


@dataclass
class Worker:
    """A registered worker."""

    id: str
    queues: List[str] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    status: str = ""
    registered_at: Optional[_dt.datetime] = None
    last_heartbeat_at: Optional[_dt.datetime] = None
    draining: bool = False


@dataclass
class Registration(Worker):
    """A registered worker and what the server asks of it."""

    heartbeat_interval_seconds: float = 10.0
    max_heartbeat_tasks: int = 10000
    created: bool = field(default=False, metadata={"wire": False})
    """True when the worker did not exist before (201)."""


@dataclass
class HeartbeatResult(Worker):
    """The worker after a heartbeat, and what it must act on."""

    lost: List[LeaseRef] = field(default_factory=list)
    cancel: List[LeaseRef] = field(default_factory=list)
    drain: bool = False


@dataclass
class ItemOutcome:
    """One item of a batch report, in request order."""

    id: str
    outcome: str
    """``done``, ``requeued``, ``dead`` or ``error``."""
    task: Optional[Task] = None
    problem: Optional[Dict[str, Any]] = None
    """The refused item's problem document (``error`` only); see :meth:`error`."""
    enqueued: Optional[List[Task]] = None

    def error(self) -> Optional[Exception]:
        """The item's problem as an exception, or None when accepted."""
        if self.problem is None and self.outcome != "error":
            return None
        from .errors import problem_from_dict

        return problem_from_dict(self.problem or {"type": "about:blank", "title": "Item refused"})


@dataclass
class ClaimResult:
    """A claim's answer (schema ClaimResponse): the tasks claimed, possibly
    none, and the outcomes of the reports it carried
    (:meth:`taskmaster.Client.claim_reporting`), in request order."""

    tasks: List[Task] = field(default_factory=list)
    truncated: bool = False
    """The claim stopped before its limit at the server's response byte
    cap: more tasks may be claimable at once."""
    completed: List[ItemOutcome] = field(default_factory=list)
    """The outcomes of ``complete`` (``done`` or ``error``)."""
    failed: List[ItemOutcome] = field(default_factory=list)
    """The outcomes of ``fail`` (``requeued``, ``dead`` or ``error``)."""


@dataclass
class BulkResult:
    """What a bulk action or a purge did."""

    matched: int
    dry_run: bool
    changed: Optional[int] = None
    removed: Optional[int] = None
    skipped: Optional[int] = None


@dataclass
class PurgeJob:
    """A large purge the server runs in the background."""

    id: str
    queue: str
    status: str
    state: str
    matched: int = 0
    removed: int = 0
    started_at: Optional[_dt.datetime] = None
    finished_at: Optional[_dt.datetime] = None
    error: Optional[str] = None

    @property
    def finished(self) -> bool:
        return self.state != "running"


@dataclass
class PurgeResult:
    """A purge's answer: what it did, or the job that does it."""

    result: Optional[BulkResult] = None
    job: Optional[PurgeJob] = None


@dataclass
class RateLimit:
    """A queue's claim rate limit (token bucket)."""

    per_second: float
    burst: Optional[int] = None


@dataclass
class PushSettings:
    """A push queue's delivery (schema PushSettings): the static headers by
    name only, the signing secret never."""

    url: str
    timeout_seconds: int = 30
    max_in_flight: int = 10
    """Deliveries in flight at once, across every instance."""
    header_names: List[str] = field(default_factory=list)
    non_retryable_statuses: List[int] = field(default_factory=list)
    """Answer statuses that dead-letter the task at once."""
    secret_rotated_at: Optional[_dt.datetime] = None
    previous_secret_expires_at: Optional[_dt.datetime] = None
    """Until when the secret the last rotation replaced still signs deliveries."""


@dataclass
class PushSettingsResult(PushSettings):
    """A push queue's delivery in the answer of a change (schema
    PushSettingsResult)."""

    secret: Optional[str] = None
    """The new signing secret, in the answer of the change that created or
    rotated it only: keep it, it is never shown again."""


@dataclass
class Deliveries:
    """A push queue's recent deliveries, as every instance's dispatcher
    reported them within the last minute (schema Deliveries)."""

    in_flight: int = 0
    recent: int = 0
    statuses: Dict[str, int] = field(default_factory=dict)
    """Recent deliveries by answer status (``"none"``: no answer)."""
    last_status: Optional[int] = None
    latency_ms: Dict[str, float] = field(default_factory=dict)
    """The percentiles ``p50`` and ``p99``."""
    as_of: Optional[_dt.datetime] = None


@dataclass
class QueueSettings:
    paused: bool = False
    max_running: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    max_running_per_group: Optional[int] = None
    default_timeout_seconds: Optional[int] = None
    rate_limit_per_group: Optional[RateLimit] = None
    """A token bucket for each group_key of the queue."""
    limits: List[str] = field(default_factory=list)
    """The named limits the queue draws on."""
    push: Optional[PushSettings] = None


@dataclass
class QueueRate:
    enqueued: float = 0.0
    claimed: float = 0.0
    completed: float = 0.0
    dead_lettered: float = 0.0


@dataclass
class QueueTotals:
    submitted: int = 0
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    dead_lettered: Dict[str, int] = field(default_factory=dict)
    requeued: Dict[str, int] = field(default_factory=dict)
    cleaned: int = 0


@dataclass
class Queue:
    """A queue's statistics (eventually consistent: see docs/api.md)."""

    queue: str
    pending: int = 0
    running: int = 0
    done: int = 0
    dead: int = 0
    blocked: int = 0
    active_workers: int = 0
    oldest_pending_age_seconds: Optional[float] = None
    rates: Dict[str, QueueRate] = field(default_factory=dict)
    totals: QueueTotals = field(default_factory=QueueTotals)
    stats_as_of: Optional[_dt.datetime] = None
    paused: bool = False
    settings: QueueSettings = field(default_factory=QueueSettings)


@dataclass
class QueuePage:
    queues: List[Queue]
    next_cursor: Optional[str] = None


@dataclass
class LeasedTask:
    id: str
    worker_id: str
    claimed_at: Optional[_dt.datetime] = None
    lease_expires_at: Optional[_dt.datetime] = None
    progress_percent: Optional[float] = None
    progress_message: Optional[str] = None


@dataclass
class QueueDetail(Queue):
    """One queue's statistics with its RUNNING tasks and average durations."""

    leased: int = 0
    leased_sample: List[LeasedTask] = field(default_factory=list)
    avg_execution_seconds: Dict[str, Optional[float]] = field(default_factory=dict)
    avg_queue_wait_seconds: Dict[str, Optional[float]] = field(default_factory=dict)
    deliveries: Optional[Deliveries] = None
    """A push queue's recent deliveries (None for another queue, or when no
    dispatcher reported in the last minute)."""


@dataclass
class QueueSettingsResult:
    queue: str
    paused: bool = False
    max_running: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    max_running_per_group: Optional[int] = None
    default_timeout_seconds: Optional[int] = None
    rate_limit_per_group: Optional[RateLimit] = None
    limits: List[str] = field(default_factory=list)
    push: Optional[PushSettingsResult] = None
    """With ``secret`` when the change created or rotated it."""
    updated_at: Optional[_dt.datetime] = None


@dataclass
class ScheduleTask:
    """What each tick of a schedule submits."""

    queue: str
    payload: Any = None
    priority: int = 0
    max_attempts: int = 0
    tags: List[str] = field(default_factory=list)
    unique_key: Optional[str] = None
    retry: Optional[Backoff] = None
    timeout_seconds: Optional[int] = None
    metadata: Dict[str, str] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"queue": self.queue}
        if self.payload is not None:
            out["payload"] = self.payload
        if self.priority:
            out["priority"] = self.priority
        if self.max_attempts:
            out["max_attempts"] = self.max_attempts
        if self.tags:
            out["tags"] = list(self.tags)
        if self.unique_key is not None:
            out["unique_key"] = self.unique_key
        if self.retry is not None:
            out["retry"] = self.retry.to_json()
        if self.timeout_seconds is not None:
            out["timeout_seconds"] = self.timeout_seconds
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out


@dataclass
class Schedule:
    """A recurring schedule."""

    name: str
    cron: str
    timezone: str
    task: ScheduleTask
    overlap: str = "skip"
    paused: bool = False
    next_run_at: Optional[_dt.datetime] = None
    last_tick_at: Optional[_dt.datetime] = None
    last_task_id: Optional[str] = None
    skipped_ticks: int = 0
    created_at: Optional[_dt.datetime] = None
    updated_at: Optional[_dt.datetime] = None


@dataclass
class LimitValues:
    """A named limit's values (schema LimitValues; the answer of a delete)."""

    name: str
    per_second: Optional[float] = None
    burst: Optional[int] = None
    max_running: Optional[int] = None


@dataclass
class Limit(LimitValues):
    """A named limit (schema Limit): a token bucket (``per_second``,
    ``burst``) and a cap on RUNNING tasks (``max_running``) that the queues
    naming it share, across every instance."""

    queues: List[str] = field(default_factory=list)
    """The queues naming it."""
    running: int = 0
    """Their RUNNING tasks now."""
    tokens: Optional[float] = None
    """The bucket's level now (None without per_second)."""
    created_at: Optional[_dt.datetime] = None
    updated_at: Optional[_dt.datetime] = None
    created: bool = field(default=False, metadata={"wire": False})
    """True when :meth:`Client.put_limit` created it (201)."""


@dataclass
class Key:
    """An API key as the admin API shows it (never its token)."""

    id: str
    name: str
    scopes: List[str] = field(default_factory=list)
    queues: List[str] = field(default_factory=list)
    worker_prefix: Optional[str] = None
    created_at: Optional[_dt.datetime] = None
    last_used_at: Optional[_dt.datetime] = None
    expires_at: Optional[_dt.datetime] = None
    revoked_at: Optional[_dt.datetime] = None


@dataclass
class CreatedKey(Key):
    """A new key with its token (``key``), shown only once."""

    key: str = ""


@dataclass
class Event:
    """One message of the lifecycle event stream.

    ``id`` is its stream position (resume after it with ``last_event_id``);
    None for the stream's own notices (``stream.events_lost``,
    ``stream.dropped``). ``data`` is the event's JSON (schema
    LifecycleEvent): ``data["type"]``, ``data["task_id"]``, ...
    """

    id: Optional[str]
    data: Dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type", ""))


# Decoding.

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(s: str) -> _dt.datetime:
    """Parses an RFC 3339 time (``Z`` or an offset, up to nanoseconds) into
    an aware datetime in UTC."""
    v = s.strip()
    if v.endswith(("Z", "z")):
        v = v[:-1] + "+00:00"
    m = _FRACTION.search(v)
    if m is not None:  # fromisoformat before 3.11 takes 3 or 6 digits only
        digits = (m.group(1) + "000000")[:6]
        v = v[: m.start()] + "." + digits + v[m.end():]
    t = _dt.datetime.fromisoformat(v)
    if t.tzinfo is None:
        raise ValueError(f"time without a zone: {s!r}")
    return t.astimezone(_dt.timezone.utc)


def format_time(t: _dt.datetime) -> str:
    """Formats an aware datetime as RFC 3339 for the API. A naive datetime
    is refused: it names no instant."""
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError("times sent to Taskmaster must be timezone-aware (e.g. datetime.now(timezone.utc))")
    return t.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        _HINTS[cls] = h
    return h


def decode(cls: Type[T], value: Any) -> T:
    """Decodes a JSON value into cls (a class of this module)."""
    return typing.cast(T, _decode(cls, value))


def _decode(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _decode(args[0], value)
    if value is None:
        return None
    if origin in (list, List):
        (item,) = typing.get_args(tp)
        return [_decode(item, v) for v in value]
    if origin in (dict, Dict):
        _, item = typing.get_args(tp)
        return {str(k): _decode(item, v) for k, v in value.items()}
    if tp is _dt.datetime:
        return parse_time(value)
    if tp is float:
        return float(value)
    if tp in (int, str, bool):
        return value
    if isinstance(tp, str):  # a forward reference left unresolved
        return _decode(globals()[tp], value)
    if dataclasses.is_dataclass(tp) and isinstance(value, Mapping):
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.metadata.get("wire", True) and f.name in value:
                kwargs[f.name] = _decode(hints[f.name], value[f.name])
        return tp(**kwargs)
    raise TypeError(f"cannot decode {value!r} as {tp!r}")


def wire_fields(cls: type) -> List[str]:
    """The JSON members of a class of this module (for the contract check)."""
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("wire", True)]
