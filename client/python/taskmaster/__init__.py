"""Taskmaster's Python SDK: a client for producers and operators, and a
Worker that turns a handler into a worker speaking the lease protocol.

Standard library only. See docs/sdks.md for the reference and guarantees.

    import taskmaster
    c = taskmaster.Client("http://127.0.0.1:8080", api_key=os.environ.get("TASKMASTER_API_KEY"))
    c.submit("emails", {"to": "a@example.com"}, max_attempts=5)

    def handle(ctx: taskmaster.TaskContext) -> object:
        return {"sent_to": ctx.payload["to"]}

    taskmaster.Worker(c, handle, queues=["emails"], concurrency=8).run()
"""

__version__ = "1.0.0"
API_VERSION = "1.0.0"
"""The version of the API (docs/openapi.yaml info.version) this SDK speaks."""

from ._http import RetryPolicy  # noqa: E402
from .client import (  # noqa: E402
    DEFAULT_URL,
    ENV_API_KEY,
    ENV_URL,
    MAX_BATCH,
    MAX_CLAIM_WAIT,
    MAX_ERROR_BYTES,
    MAX_HEARTBEAT_TASKS,
    MAX_LEASE_SECONDS,
    MAX_SNOOZE,
    MIN_SNOOZE,
    UNSET,
    Client,
    CompleteItem,
    FailItem,
    SubmitBatchResult,
    SubmitParams,
    TaskFilter,
)
from .errors import (  # noqa: E402
    PROBLEM_TYPE_PREFIX,
    BodyTooLarge,
    CancelRequested,
    Conflict,
    CrossOrigin,
    FieldError,
    Forbidden,
    HostNotAllowed,
    InvalidTransition,
    KeyNotFound,
    LeaseLost,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    Problem,
    QueueNotFound,
    RateLimited,
    ScheduleExists,
    ScheduleNotFound,
    ServerError,
    TaskmasterError,
    TaskNotFound,
    TransportError,
    Unauthorized,
    Unavailable,
    UniqueKeyTaken,
    UnsupportedMediaType,
    ValidationError,
    WorkerDead,
    WorkerNotFound,
    WorkflowNotFound,
)
from .types import (  # noqa: E402
    BLOCKED,
    DEAD,
    DONE,
    ON_FAILURE_FAIL,
    ON_FAILURE_IGNORE,
    ON_FAILURE_SKIP,
    PENDING,
    RUNNING,
    Dependency,
    ParentPage,
    Progress,
    Attempt,
    Backoff,
    BulkResult,
    CreatedKey,
    Event,
    HeartbeatResult,
    ItemOutcome,
    Key,
    LeasedTask,
    LeaseRef,
    PurgeJob,
    PurgeResult,
    Queue,
    QueueDetail,
    QueuePage,
    QueueRate,
    QueueSettings,
    QueueSettingsResult,
    QueueTotals,
    RateLimit,
    Registration,
    Schedule,
    ScheduleTask,
    Task,
    TaskPage,
    Trace,
    Worker as WorkerInfo,
    Workflow,
    WorkflowResult,
)
from .worker import (  # noqa: E402
    Handler,
    Next,
    NonRetryable,
    Shutdown,
    Snooze,
    Stopped,
    TaskCancelled,
    TaskContext,
    TaskLost,
    TaskTimeout,
    Worker,
    WorkerError,
    default_worker_id,
)

__all__ = [
    "__version__", "API_VERSION", "RetryPolicy",
    "DEFAULT_URL", "ENV_API_KEY", "ENV_URL", "MAX_BATCH", "MAX_CLAIM_WAIT", "MAX_ERROR_BYTES",
    "MAX_HEARTBEAT_TASKS", "MAX_LEASE_SECONDS", "MAX_SNOOZE", "MIN_SNOOZE", "UNSET",
    "Client", "CompleteItem", "FailItem", "SubmitBatchResult", "SubmitParams", "TaskFilter",
    "PROBLEM_TYPE_PREFIX", "BodyTooLarge", "CancelRequested", "Conflict", "CrossOrigin", "FieldError", "Forbidden", "HostNotAllowed",
    "InvalidTransition", "UnsupportedMediaType",
    "KeyNotFound", "LeaseLost", "MalformedRequest", "MethodNotAllowed", "NotFound", "Problem", "QueueNotFound", "RateLimited",
    "ScheduleExists", "ScheduleNotFound", "ServerError", "TaskmasterError", "TaskNotFound", "TransportError",
    "Unauthorized", "Unavailable", "UniqueKeyTaken", "ValidationError", "WorkerDead", "WorkerNotFound",
    "WorkflowNotFound",
    "BLOCKED", "DEAD", "DONE", "PENDING", "RUNNING", "ON_FAILURE_FAIL", "ON_FAILURE_IGNORE", "ON_FAILURE_SKIP",
    "Dependency", "ParentPage", "Workflow", "WorkflowResult",
    "Attempt", "Backoff", "BulkResult", "CreatedKey", "Event", "HeartbeatResult", "ItemOutcome", "Key",
    "LeasedTask", "LeaseRef", "PurgeJob", "PurgeResult", "Queue", "QueueDetail", "QueuePage", "QueueRate",
    "QueueSettings", "QueueSettingsResult", "QueueTotals", "RateLimit", "Registration", "Schedule",
    "ScheduleTask", "Task", "TaskPage", "WorkerInfo", "Progress", "Trace",
    "Handler", "Next", "NonRetryable", "Shutdown", "Snooze", "Stopped", "TaskCancelled", "TaskContext",
    "TaskLost", "TaskTimeout", "Worker", "WorkerError", "default_worker_id",
]
