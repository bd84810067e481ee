import type { FieldError, ProblemDocument, TaskStatus } from "./types.js";

/** Every problem type the server uses starts with this. */
export const PROBLEM_TYPE_PREFIX = "urn:problem-type:taskmaster:";

/** Base class of every error the SDK throws. */
export class TaskmasterError extends Error {
  override name = "TaskmasterError";
}

/**
 * No answer came: the connection failed, was cut, or timed out. `sent` is
 * false only when the request surely did not reach the server.
 */
export class TransportError extends TaskmasterError {
  override name = "TransportError";
  readonly sent: boolean;
  constructor(message: string, options: { sent: boolean; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.sent = options.sent;
  }
}

/**
 * An error the server reported: an RFC 9457 problem. Thrown as the subclass
 * of its type (`LeaseLost`, `ValidationProblem`, ...): branch with
 * `instanceof` or on `slug`, never on `title` or `detail`. Answers that are
 * not problem documents (a proxy's HTML 502) become a Problem of type
 * `about:blank` with the start of the body as `detail`.
 */
export class Problem extends TaskmasterError {
  override name = "Problem";
  readonly type: string;
  readonly title: string;
  readonly status: number;
  readonly detail: string;
  readonly instance: string;
  correlationId: string;
  /** Every offending field of a validation problem. */
  readonly errors: FieldError[];
  /** The task's status, on lease-lost and invalid-transition. */
  readonly currentStatus: TaskStatus | undefined;
  /** On a 403: the scopes the key lacks (it needs one of them). */
  readonly requiredScopes: string[];
  /** On a 403: the queue the key may not use. */
  readonly queue: string | undefined;
  /** On a 403: the worker the key may not act as. */
  readonly workerId: string | undefined;
  /** Seconds the server asked to wait (Retry-After), if it did. */
  readonly retryAfter: number | undefined;
  /** The problem document as the server sent it. */
  readonly document: ProblemDocument;

  constructor(doc: ProblemDocument, retryAfter?: number) {
    super(problemMessage(doc));
    this.document = doc;
    this.type = doc.type;
    this.title = doc.title;
    this.status = doc.status;
    this.detail = doc.detail ?? "";
    this.instance = doc.instance ?? "";
    this.correlationId = doc.correlation_id ?? "";
    this.errors = doc.errors ?? [];
    this.currentStatus = doc.current_status;
    this.requiredScopes = doc.required_scopes ?? [];
    this.queue = doc.queue;
    this.workerId = doc.worker_id;
    this.retryAfter = retryAfter;
  }

  /** The short name of the type (`lease-lost`), or "" for a foreign type. */
  get slug(): string {
    return this.type.startsWith(PROBLEM_TYPE_PREFIX) ? this.type.slice(PROBLEM_TYPE_PREFIX.length) : "";
  }
}

function problemMessage(doc: ProblemDocument): string {
  let m = `taskmaster: ${doc.status}`;
  if (doc.type.startsWith(PROBLEM_TYPE_PREFIX)) m += " " + doc.type.slice(PROBLEM_TYPE_PREFIX.length);
  if (doc.detail) m += ": " + doc.detail;
  else if (doc.title) m += ": " + doc.title;
  for (const f of doc.errors ?? []) m += `; ${f.field} ${f.message}`;
  if (doc.correlation_id) m += ` (correlation id ${doc.correlation_id})`;
  return m;
}

/** 400: malformed JSON, an unknown field, a wrong type. */
export class MalformedRequest extends Problem { override name = "MalformedRequest"; }
/** 401: no API key, or one unknown, revoked or expired. */
export class Unauthorized extends Problem { override name = "Unauthorized"; }
/** 403: the key may not do this (`requiredScopes`, `queue`, `workerId`). */
export class Forbidden extends Problem { override name = "Forbidden"; }
/** 404: a missing thing (task, worker, route, ...). */
export class NotFound extends Problem { override name = "NotFound"; }
/** 404 task-not-found. */
export class TaskNotFound extends NotFound { override name = "TaskNotFound"; }
/** 404 worker-not-found: register first. */
export class WorkerNotFound extends NotFound { override name = "WorkerNotFound"; }
/** 404 queue-not-found. */
export class QueueNotFound extends NotFound { override name = "QueueNotFound"; }
/** 404 schedule-not-found. */
export class ScheduleNotFound extends NotFound { override name = "ScheduleNotFound"; }
/** 404 key-not-found. */
export class KeyNotFound extends NotFound { override name = "KeyNotFound"; }
/** 404 workflow-not-found: no task (that the key may see) belongs to the run. */
export class WorkflowNotFound extends NotFound { override name = "WorkflowNotFound"; }
/** 405: the route does not answer this method. */
export class MethodNotAllowed extends Problem { override name = "MethodNotAllowed"; }
/** 409: a conflict with the state of the thing. */
export class Conflict extends Problem { override name = "Conflict"; }
/** 409 lease-lost: another worker or lease holds the task; drop it, never repeat the report. */
export class LeaseLost extends Conflict { override name = "LeaseLost"; }
/** 409 invalid-transition: the task's status (`currentStatus`) does not allow it. */
export class InvalidTransition extends Conflict { override name = "InvalidTransition"; }
/** 409 worker-dead: register again. */
export class WorkerDead extends Conflict { override name = "WorkerDead"; }
/** 409 schedule-exists. */
export class ScheduleExists extends Conflict { override name = "ScheduleExists"; }
/** 409 unique-key-taken. */
export class UniqueKeyTaken extends Conflict { override name = "UniqueKeyTaken"; }
/** 409 cancel-requested: an operator asked to cancel the task, which may no longer spawn; stop it and fail it. */
export class CancelRequested extends Conflict { override name = "CancelRequested"; }
/** 403 host-not-allowed: with authentication off the server answers only requests to a loopback name. */
export class HostNotAllowed extends Forbidden { override name = "HostNotAllowed"; }
/** 403 cross-origin: with authentication off the server refuses requests a page of another origin sent. */
export class CrossOrigin extends Forbidden { override name = "CrossOrigin"; }
/** 415: a body (or a Content-Type) that is not application/json. */
export class UnsupportedMediaType extends Problem { override name = "UnsupportedMediaType"; }
/** 413: the body is over the server's limit. */
export class BodyTooLarge extends Problem { override name = "BodyTooLarge"; }
/** 422: invalid input; `errors` names every field. */
export class ValidationProblem extends Problem { override name = "ValidationProblem"; }
/** 429: the key's rate limit is exhausted (`retryAfter`). */
export class RateLimited extends Problem { override name = "RateLimited"; }
/** 5xx: the server failed or is unavailable. */
export class ServerError extends Problem { override name = "ServerError"; }
/** 503 unavailable, overloaded, too-many-streams: try again after `retryAfter`. */
export class Unavailable extends ServerError { override name = "Unavailable"; }

export type ProblemClass = new (doc: ProblemDocument, retryAfter?: number) => Problem;

/** The class of each problem type the server uses, by slug. */
export const PROBLEM_CLASSES: Readonly<Record<string, ProblemClass>> = {
  "malformed-request": MalformedRequest,
  unauthorized: Unauthorized,
  forbidden: Forbidden,
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
  "validation-error": ValidationProblem,
  "rate-limited": RateLimited,
  unavailable: Unavailable,
  overloaded: Unavailable,
  "too-many-streams": Unavailable,
  "internal-error": ServerError,
};

/** The class of a problem whose type is not one of the server's, by status. */
export const PROBLEM_STATUS_CLASSES: Readonly<Record<number, ProblemClass>> = {
  400: MalformedRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  405: MethodNotAllowed,
  409: Conflict,
  413: BodyTooLarge,
  415: UnsupportedMediaType,
  422: ValidationProblem,
  429: RateLimited,
  503: Unavailable,
};

/** The problem a document describes, as its class. */
export function problemFrom(doc: ProblemDocument, retryAfter?: number): Problem {
  const cls =
    (doc.type.startsWith(PROBLEM_TYPE_PREFIX) ? PROBLEM_CLASSES[doc.type.slice(PROBLEM_TYPE_PREFIX.length)] : undefined) ??
    PROBLEM_STATUS_CLASSES[doc.status] ??
    (doc.status >= 500 ? ServerError : Problem);
  return new cls(doc, retryAfter);
}

/** Whether a report's error says this worker no longer holds the task. */
export function isHeldElsewhere(err: unknown): boolean {
  return err instanceof LeaseLost || err instanceof InvalidTransition || err instanceof TaskNotFound;
}

/** Whether err says the server has no such route (an older server). */
export function isRouteMissing(err: unknown): boolean {
  return err instanceof Problem && (err.slug === "not-found" || err.slug === "method-not-allowed" || (!err.slug && (err.status === 404 || err.status === 405)));
}
