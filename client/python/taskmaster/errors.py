"""Errors of the Taskmaster SDK.

Every answer of the server that is not a success is raised as a
:class:`Problem` (RFC 9457 problem details), or one of its subclasses chosen
by the problem's type: branch on the class (``except LeaseLost``) or on
:attr:`Problem.slug`, never on the title or detail. A request that got no
answer at all raises :class:`TransportError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Type

PROBLEM_TYPE_PREFIX = "urn:problem-type:taskmaster:"


class TaskmasterError(Exception):
    """Base class of every error the SDK raises."""


class TransportError(TaskmasterError):
    """No answer came: the connection failed, was cut, or timed out.

    ``sent`` is False only when the request surely did not reach the server
    (the connection could not be made).
    """

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


@dataclass(frozen=True)
class FieldError:
    """One offending field of a validation problem."""

    field: str
    """The field as sent (snake_case) or a path such as ``tasks[3].queue``."""
    message: str


class Problem(TaskmasterError):
    """An error the server reported: an RFC 9457 problem.

    Answers that are not problem documents (a proxy's HTML 502, say) become
    a Problem with type ``about:blank`` and the start of the body as detail.
    """

    def __init__(
        self,
        *,
        type: str,
        title: str,
        status: int,
        detail: str = "",
        instance: str = "",
        correlation_id: str = "",
        errors: Optional[List[FieldError]] = None,
        current_status: Optional[str] = None,
        required_scopes: Optional[List[str]] = None,
        queue: Optional[str] = None,
        worker_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        extra: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.type = type
        self.title = title
        self.status = status
        self.detail = detail
        self.instance = instance
        self.correlation_id = correlation_id
        self.errors: List[FieldError] = list(errors or [])
        self.current_status = current_status
        self.required_scopes: List[str] = list(required_scopes or [])
        self.queue = queue
        self.worker_id = worker_id
        self.retry_after = retry_after
        """Seconds the server asked to wait (``Retry-After``), if it did."""
        self.extra: Dict[str, Any] = dict(extra or {})
        """Members of the problem this SDK does not know."""
        super().__init__(self._message())

    @property
    def slug(self) -> str:
        """The short name of the type (``lease-lost``), or "" for a type
        that is not one of the server's."""
        if self.type.startswith(PROBLEM_TYPE_PREFIX):
            return self.type[len(PROBLEM_TYPE_PREFIX):]
        return ""

    def _message(self) -> str:
        parts = [f"taskmaster: {self.status}"]
        if self.slug:
            parts.append(f" {self.slug}")
        if self.detail:
            parts.append(f": {self.detail}")
        elif self.title:
            parts.append(f": {self.title}")
        for f in self.errors:
            parts.append(f"; {f.field} {f.message}")
        if self.correlation_id:
            parts.append(f" (correlation id {self.correlation_id})")
        return "".join(parts)

    def to_dict(self) -> Dict[str, Any]:
        """The problem as the server sent it (known members)."""
        out: Dict[str, Any] = dict(self.extra)
        out.update({"type": self.type, "title": self.title, "status": self.status})
        for k in ("detail", "instance", "correlation_id"):
            v = getattr(self, k)
            if v:
                out[k] = v
        if self.errors:
            out["errors"] = [{"field": f.field, "message": f.message} for f in self.errors]
        for k in ("current_status", "queue", "worker_id"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.required_scopes:
            out["required_scopes"] = list(self.required_scopes)
        return out


# The problem types, by slug. The classes below sort them by what a caller
# does about them.


class MalformedRequest(Problem):
    """400: malformed JSON, an unknown field, a wrong type."""


class Unauthorized(Problem):
    """401: no API key, or one unknown, revoked or expired."""


class Forbidden(Problem):
    """403: the key lacks a scope (``required_scopes``), may not use a queue
    (``queue``) or may not act as a worker (``worker_id``)."""


class NotFound(Problem):
    """404: any problem of a missing thing (task, worker, route, ...)."""


class TaskNotFound(NotFound):
    """404 task-not-found."""


class WorkerNotFound(NotFound):
    """404 worker-not-found: register first."""


class QueueNotFound(NotFound):
    """404 queue-not-found: the queue holds no task and has no settings."""


class ScheduleNotFound(NotFound):
    """404 schedule-not-found."""


class KeyNotFound(NotFound):
    """404 key-not-found."""


class WorkflowNotFound(NotFound):
    """404 workflow-not-found: no task (that the key may see) belongs to the run."""


class MethodNotAllowed(Problem):
    """405: the route does not answer this method."""


class Conflict(Problem):
    """409: any conflict with the state of the thing."""


class LeaseLost(Conflict):
    """409 lease-lost: another worker or a newer lease holds the task. Drop
    the task; never repeat the report."""


class InvalidTransition(Conflict):
    """409 invalid-transition: the task's status (``current_status``) does
    not allow the change."""


class WorkerDead(Conflict):
    """409 worker-dead: the worker was declared dead; register again."""


class ScheduleExists(Conflict):
    """409 schedule-exists."""


class UniqueKeyTaken(Conflict):
    """409 unique-key-taken: another unfinished task holds the unique key."""


class CancelRequested(Conflict):
    """409 cancel-requested: an operator asked to cancel the task, which may
    no longer spawn; stop it and fail it."""


class HostNotAllowed(Forbidden):
    """403 host-not-allowed: with authentication off the server answers only
    requests to a loopback name."""


class CrossOrigin(Forbidden):
    """403 cross-origin: with authentication off the server refuses requests
    a page of another origin sent."""


class UnsupportedMediaType(Problem):
    """415: a body (or a Content-Type) that is not application/json."""


class BodyTooLarge(Problem):
    """413: the request body is over the server's limit."""


class ValidationError(Problem):
    """422: well-formed but invalid input; ``errors`` lists every field."""


class RateLimited(Problem):
    """429: the key's rate limit is exhausted (``retry_after``)."""


class ServerError(Problem):
    """5xx: the server failed (500) or is unavailable (503)."""


class Unavailable(ServerError):
    """503 unavailable, overloaded or too-many-streams: try again after
    ``retry_after``."""


_BY_SLUG: Dict[str, Type[Problem]] = {
    "malformed-request": MalformedRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not-found": NotFound,
    "task-not-found": TaskNotFound,
    "worker-not-found": WorkerNotFound,
    "queue-not-found": QueueNotFound,
    "schedule-not-found": ScheduleNotFound,
    "key-not-found": KeyNotFound,
    "purge-job-not-found": NotFound,
    "workflow-not-found": WorkflowNotFound,
    "method-not-allowed": MethodNotAllowed,
    "lease-lost": LeaseLost,
    "invalid-transition": InvalidTransition,
    "worker-dead": WorkerDead,
    "schedule-exists": ScheduleExists,
    "unique-key-taken": UniqueKeyTaken,
    "cancel-requested": CancelRequested,
    "body-too-large": BodyTooLarge,
    "unsupported-media-type": UnsupportedMediaType,
    "host-not-allowed": HostNotAllowed,
    "cross-origin": CrossOrigin,
    "validation-error": ValidationError,
    "rate-limited": RateLimited,
    "unavailable": Unavailable,
    "overloaded": Unavailable,
    "too-many-streams": Unavailable,
    "internal-error": ServerError,
}

_BY_STATUS: Dict[int, Type[Problem]] = {
    400: MalformedRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: BodyTooLarge,
    415: UnsupportedMediaType,
    422: ValidationError,
    429: RateLimited,
    503: Unavailable,
}


def problem_class(type_uri: str, status: int) -> Type[Problem]:
    """The class a problem of this type and status is raised as."""
    if type_uri.startswith(PROBLEM_TYPE_PREFIX):
        cls = _BY_SLUG.get(type_uri[len(PROBLEM_TYPE_PREFIX):])
        if cls is not None:
            return cls
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    return ServerError if status >= 500 else Problem


def problem_from_dict(
    doc: Mapping[str, Any], *, status: int = 0, instance: str = "", retry_after: Optional[float] = None
) -> Problem:
    """A Problem from a decoded problem document (a batch item's, say)."""
    known = {
        "type", "title", "status", "detail", "instance", "correlation_id",
        "errors", "current_status", "required_scopes", "queue", "worker_id",
    }
    st = doc.get("status")
    status = st if isinstance(st, int) and st > 0 else status
    type_uri = str(doc.get("type") or "about:blank")
    errors = [
        FieldError(field=str(e.get("field", "")), message=str(e.get("message", "")))
        for e in (doc.get("errors") or [])
        if isinstance(e, dict)
    ]
    scopes = doc.get("required_scopes")
    cls = problem_class(type_uri, status)
    return cls(
        type=type_uri,
        title=str(doc.get("title") or ""),
        status=status,
        detail=str(doc.get("detail") or ""),
        instance=str(doc.get("instance") or instance),
        correlation_id=str(doc.get("correlation_id") or ""),
        errors=errors,
        current_status=_opt_str(doc.get("current_status")),
        required_scopes=[str(s) for s in scopes] if isinstance(scopes, list) else None,
        queue=_opt_str(doc.get("queue")),
        worker_id=_opt_str(doc.get("worker_id")),
        retry_after=retry_after,
        extra={k: v for k, v in doc.items() if k not in known},
    )


def problem_from_response(
    status: int, content_type: str, body: bytes, *, instance: str, correlation_id: str, retry_after: Optional[float]
) -> Problem:
    """A Problem from a non-2xx answer."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in ("application/problem+json", "application/json"):
        try:
            doc = json.loads(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            doc = None
        if isinstance(doc, dict) and doc.get("type"):
            p = problem_from_dict(doc, status=status, instance=instance, retry_after=retry_after)
            if not p.correlation_id and correlation_id:
                p.correlation_id = correlation_id
                p.args = (p._message(),)
            return p
    detail = body.decode("utf-8", "replace").strip()
    if len(detail) > 512:
        detail = detail[:512] + "..."
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else Problem)
    return cls(
        type="about:blank",
        title=_REASONS.get(status, "HTTP error"),
        status=status,
        detail=detail,
        instance=instance,
        correlation_id=correlation_id,
        retry_after=retry_after,
    )


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


_REASONS = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
    413: "Payload Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Entity",
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
}


def is_held_elsewhere(err: BaseException) -> bool:
    """Whether a report's error says this worker no longer holds the task:
    another worker or lease has it, it is not RUNNING any more, or it is
    gone. Such a task is dropped; its report is never repeated."""
    return isinstance(err, (LeaseLost, InvalidTransition, TaskNotFound))
