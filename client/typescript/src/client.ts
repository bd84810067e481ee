import { Problem, TransportError, WaitTimeout } from "./errors.js";
import { DEFAULT_RETRY_POLICY, Transport, newId, problemFromAnswer, sleep, type CallOptions, type RetryPolicy } from "./http.js";
import type {
  Attempt,
  BatchSubmitItem,
  BulkResult,
  ClaimCompletion,
  ClaimFailure,
  ClaimRequest,
  ClaimResponse,
  CreateKeyRequest,
  CreateScheduleRequest,
  CreatedKey,
  HeartbeatRequest,
  HeartbeatResult,
  HeartbeatTask,
  ItemOutcome,
  JsonValue,
  Key,
  LeaseRef,
  Limit,
  LimitValues,
  LifecycleEvent,
  ParentPage,
  ProgressRequest,
  PurgeJob,
  PurgeRequest,
  PutLimitRequest,
  Queue,
  QueueDetail,
  QueueSettingsResult,
  Registration,
  RegisterRequest,
  ReplayRequest,
  Schedule,
  SubmitRequest,
  Task,
  TaskFilter,
  TaskPage,
  UpdateQueueSettingsRequest,
  UpdateScheduleRequest,
  Worker,
  Workflow,
  WorkflowResult,
} from "./types.js";

export const VERSION = "1.0.0";
/** The version of the API (docs/openapi.yaml info.version) this SDK speaks. */
export const API_VERSION = "1.0.0";
/** Where a local `taskmaster serve` listens. */
export const DEFAULT_URL = "http://127.0.0.1:8080";
/** The most items one batch call may carry. */
export const MAX_BATCH = 1000;
/** The longest claim wait the server accepts, in ms. */
export const MAX_CLAIM_WAIT_MS = 30_000;
export const MAX_LEASE_SECONDS = 43_200;
export const MAX_HEARTBEAT_TASKS = 10_000;
export const MAX_ERROR_BYTES = 64 << 10;
/** The longest one request waits on the server for a task to finish (`wait_ms`); `wait` and `submitAndWait` chain such requests. */
export const MAX_WAIT_MS = 60_000;

export interface ClientOptions {
  /** Sent as `Authorization: Bearer <key>`. */
  apiKey?: string;
  /** Bounds one try of a call, in ms (a long poll gets its wait on top); default 60 s. */
  timeoutMs?: number;
  /** The retries of a call (default DEFAULT_RETRY_POLICY). */
  retry?: RetryPolicy;
  userAgent?: string;
  /** The fetch to use (default the platform's). */
  fetch?: typeof fetch;
}

/** Options every call takes. */
export interface RequestOptions {
  /** Aborts the call (and its retries). */
  signal?: AbortSignal;
}

/** Report options the Worker uses: its own retry loop. */
export type ReportOptions = RequestOptions & Pick<CallOptions, "retry" | "deadline" | "stop">;

/** A listing's filter and page. */
export interface ListParams extends TaskFilter {
  limit?: number;
  cursor?: string;
}

/** A queue listing's filter and page. */
export interface ListQueuesParams {
  prefix?: string;
  pattern?: string;
  min_pending?: number;
  paused?: boolean;
  limit?: number;
  cursor?: string;
}

/** A heartbeat's options. */
export interface HeartbeatOptions extends RequestOptions {
  /**
   * With `tasks`: the request ids of the worker's claims sent and not yet
   * answered. The tasks they made RUNNING are not taken back as orphaned,
   * however late their answer: name a claim from its sending until its
   * tasks are in `tasks` (take both at the same moment), or until the
   * worker gives up on it.
   */
  claimsInFlight?: string[];
  /** Ends the retries: an epoch in ms (Date.now()). */
  deadline?: number;
  /** Replaces the client's timeout for each try, in ms. */
  timeoutMs?: number;
}

/** A claim's parameters (`waitMs` becomes `wait_ms`). */
export interface ClaimParams {
  queue?: string;
  limit?: number;
  /** An empty claim waits on the server up to this long for a task (at most MAX_CLAIM_WAIT_MS). */
  waitMs?: number;
  lease_seconds?: number;
  /** Names the claim: a retry with the same id gets the same tasks (fresh when absent). */
  request_id?: string;
}

/** A claim's parameters with the worker's reports of the tasks it finished (`claimReporting`). */
export interface ClaimReportingParams extends ClaimParams {
  /** Tasks to report done: items as completeBatch's, without `enqueue`. */
  complete?: CompleteItem[];
  /** Tasks to report failed: items as failBatch's. */
  fail?: FailItem[];
}

/** A claim's answer with the outcomes of the reports it carried (`claimReporting`). */
export interface ClaimResult {
  /** The claimed tasks, possibly none. */
  tasks: Task[];
  /** The claim stopped before its limit at the server's response byte cap: more may be claimable at once. */
  truncated: boolean;
  /** The outcomes of `complete`, in its order ([] when it carried none). */
  completed: ItemOutcome[];
  /** The outcomes of `fail`, in its order ([] when it carried none). */
  failed: ItemOutcome[];
}

/** A task of a batch completion. */
export interface CompleteItem {
  id: string;
  lease_id: string;
  result?: JsonValue;
  enqueue?: BatchSubmitItem[];
}

/** A task of a batch failure. */
export interface FailItem {
  id: string;
  lease_id: string;
  error: string;
  nonRetryable?: boolean;
}

/** A purge's answer: what it did (`result`), or the job that does it (`job`). */
export interface PurgeResult {
  result?: BulkResult;
  job?: PurgeJob;
}

/** One message of the event stream: `id` is its position (null for the stream's own notices). */
export interface StreamEvent {
  id: string | null;
  data: LifecycleEvent | { type: string; [key: string]: unknown };
}

/** How long `wait` and `submitAndWait` wait, at most. */
export interface WaitOptions extends RequestOptions {
  /** Reject with WaitTimeout when the task is not DONE or DEAD by then (default: wait until it is). */
  timeoutMs?: number;
}

export interface EventsParams {
  queues?: string[];
  /** Event types; one ending in `*` is a prefix (`task.*`). */
  types?: string[];
  /** Only the events of these tasks (at most 100). */
  taskIds?: string[];
  /** Only the events of these runs (at most 100). */
  workflows?: string[];
  lastEventId?: string;
  /** Open the stream again after it ends or breaks, resuming after the last event (default true). */
  reconnect?: boolean;
  signal?: AbortSignal;
}

const enc = encodeURIComponent;

/** How long one waiting request may wait: up to MAX_WAIT_MS, and no longer than until `end` (epoch ms), less a margin for the answer. */
function waitFor(end: number | undefined): number {
  if (end === undefined) return MAX_WAIT_MS;
  return Math.min(MAX_WAIT_MS, Math.max(end - Date.now() - 250, 1));
}

export function taskPath(id: string, action = ""): string {
  return "/tasks/v1/" + enc(id) + (action ? "/" + action : "");
}

/** Cuts s to at most n UTF-8 bytes without splitting a character. */
export function cutUtf8(s: string, n = MAX_ERROR_BYTES): string {
  const b = Buffer.from(s, "utf8");
  if (b.length <= n) return s;
  const marker = "...(truncated)";
  return b.subarray(0, n - marker.length).toString("utf8").replace(/\uFFFD+$/, "") + marker;
}

/** Checks that v survives JSON: throws a TypeError naming what otherwise. */
export function checkJson(v: unknown, what: string): void {
  let s: string | undefined;
  try {
    s = JSON.stringify(v);
  } catch (e) {
    throw new TypeError(`taskmaster: ${what} cannot be encoded as JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (s === undefined) throw new TypeError(`taskmaster: ${what} cannot be encoded as JSON`);
}

export function checkEnqueue(enqueue: BatchSubmitItem[] | undefined): void {
  (enqueue ?? []).forEach((p, j) => checkJson(p, `enqueue[${j}]`));
}

/** The retry mode of a list of submissions: resent after any failure only when every item has an idempotency key. */
function listMode(items: BatchSubmitItem[]): "safe" | "unsent" {
  return items.length > 0 && items.every((p) => p.idempotency_key) ? "safe" : "unsent";
}

/** A failure's item as the wire has it (the error cut to MAX_ERROR_BYTES). */
function failWire(it: FailItem): ClaimFailure {
  return { id: it.id, lease_id: it.lease_id, error: cutUtf8(it.error), retryable: !it.nonRetryable };
}

function checkCreated(what: string, n: number, out: { tasks: Task[]; created: boolean[] }): { tasks: Task[]; created: boolean[] } {
  if (out.tasks.length !== n || out.created.length !== n) {
    throw new TransportError(`taskmaster: ${what} of ${n} answered with ${out.tasks.length} tasks`, { sent: true });
  }
  return out;
}

/**
 * Talks to one Taskmaster server.
 *
 * ```ts
 * const c = new Client("http://127.0.0.1:8080", { apiKey: process.env.TASKMASTER_API_KEY });
 * const t = await c.submit({ queue: "emails", payload: { to: "a@example.com" }, max_attempts: 5 });
 * ```
 *
 * Errors the server reports reject with a {@link Problem} subclass
 * (`ValidationProblem`, `LeaseLost`, ...); a call that got no answer with a
 * {@link TransportError}. Reads and fenced or idempotent writes are retried
 * after transport errors and 5xx; a submission without an idempotency key
 * only when it surely did not reach the server.
 */
export class Client {
  readonly transport: Transport;

  constructor(url: string = DEFAULT_URL, options: ClientOptions = {}) {
    this.transport = new Transport(url || DEFAULT_URL, {
      timeoutMs: options.timeoutMs ?? 60_000,
      retry: options.retry ?? DEFAULT_RETRY_POLICY,
      userAgent: options.userAgent ?? `taskmaster-typescript/${VERSION}`,
      fetch: options.fetch ?? globalThis.fetch.bind(globalThis),
      ...(options.apiKey ? { apiKey: options.apiKey } : {}),
    });
  }

  get baseUrl(): string {
    return this.transport.baseUrl;
  }

  private async data<T>(method: string, path: string, o: CallOptions = {}): Promise<T> {
    return (await this.transport.call(method, path, o)).data as T;
  }

  // Producers.

  /** Creates a task, or returns the one holding its idempotency key (or the unfinished one holding its unique key). */
  submit(req: SubmitRequest, o: RequestOptions = {}): Promise<Task> {
    const item = req as BatchSubmitItem;
    if (item.ref !== undefined || item.depends_on !== undefined) throw new TypeError("taskmaster: ref and depends_on need a list (submitBatch, enqueue, spawn)");
    return this.data<Task>("POST", "/tasks/v1", { ...o, body: req, mode: req.idempotency_key ? "safe" : "unsent" });
  }

  /**
   * Creates up to MAX_BATCH tasks in one transaction, all or none (a
   * ValidationProblem names every bad item, `tasks[i].field`). `created[i]`
   * is false where a key named an existing task. Items may depend on
   * earlier items (`ref`, `depends_on`) and on existing tasks' ids; a batch
   * with dependencies is one run (its first task's id).
   */
  async submitBatch(items: BatchSubmitItem[], o: RequestOptions = {}): Promise<{ tasks: Task[]; created: boolean[] }> {
    const out = await this.data<{ tasks: Task[]; created: boolean[] }>("POST", "/tasks/v1/batch", { ...o, body: { tasks: items }, mode: listMode(items) });
    return checkCreated("batch", items.length, out);
  }

  /** submitBatch whose tasks all join the run `workflowId` (an existing run's id to add to it, or one of the caller's choosing). */
  async submitBatchToWorkflow(workflowId: string, items: BatchSubmitItem[], o: RequestOptions = {}): Promise<{ tasks: Task[]; created: boolean[] }> {
    const body = { workflow_id: workflowId, tasks: items };
    const out = await this.data<{ tasks: Task[]; created: boolean[] }>("POST", "/tasks/v1/batch", { ...o, body, mode: listMode(items) });
    return checkCreated("batch", items.length, out);
  }

  /**
   * Submits a task (as `submit`) and resolves it once it is DONE or DEAD
   * (read `status`, `result`, `last_error`). The submission itself waits on
   * the server (`POST /tasks/v1?wait_ms`), then `wait` goes on. With
   * `timeoutMs` it rejects with WaitTimeout when the task is not finished by
   * then (the task stays submitted). Retried like `submit`.
   */
  async submitAndWait(req: SubmitRequest, o: WaitOptions = {}): Promise<Task> {
    const item = req as BatchSubmitItem;
    if (item.ref !== undefined || item.depends_on !== undefined) throw new TypeError("taskmaster: ref and depends_on need submitBatch");
    const end = o.timeoutMs === undefined ? undefined : Date.now() + o.timeoutMs;
    const waitMs = waitFor(end);
    const t = await this.data<Task>("POST", "/tasks/v1", {
      query: { wait_ms: Math.ceil(waitMs) },
      body: req,
      mode: req.idempotency_key ? "safe" : "unsent",
      waitMs,
      ...(o.signal ? { signal: o.signal } : {}),
    });
    return this.waitFrom(t.id, t, end, o.signal);
  }

  /**
   * One task (with `depends_on` and `blocked_by`). With `waitMs` (at most
   * MAX_WAIT_MS) the server answers as soon as the task is DONE or DEAD, or
   * when the wait ends with the task as it is then: read `status`.
   */
  get(id: string, o: RequestOptions & { waitMs?: number } = {}): Promise<Task> {
    const { waitMs, ...rest } = o;
    if (waitMs === undefined || waitMs <= 0) return this.data<Task>("GET", taskPath(id), rest);
    if (waitMs > MAX_WAIT_MS) throw new RangeError(`taskmaster: waitMs must be at most ${MAX_WAIT_MS}`);
    return this.data<Task>("GET", taskPath(id), { ...rest, query: { wait_ms: Math.ceil(waitMs) }, waitMs });
  }

  /**
   * Resolves the task once it is DONE or DEAD. It waits on the server, which
   * answers within milliseconds of the task's end, in requests of up to
   * MAX_WAIT_MS (polling nothing). With `timeoutMs` it rejects with
   * WaitTimeout (carrying the task as last seen) when the task is not
   * finished by then.
   */
  wait(id: string, o: WaitOptions = {}): Promise<Task> {
    return this.waitFrom(id, undefined, o.timeoutMs === undefined ? undefined : Date.now() + o.timeoutMs, o.signal);
  }

  private async waitFrom(id: string, t: Task | undefined, end: number | undefined, signal: AbortSignal | undefined): Promise<Task> {
    for (;;) {
      if (t && (t.status === "DONE" || t.status === "DEAD")) return t;
      if (t && end !== undefined && Date.now() >= end) throw new WaitTimeout(t);
      t = await this.get(id, { waitMs: waitFor(end), ...(signal ? { signal } : {}) });
    }
  }

  /** The tasks it depends on, with their results, in its order: every page, a join over 10,000 children included. */
  async parents(id: string, o: RequestOptions = {}): Promise<Task[]> {
    const out: Task[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await this.parentsPage(id, cursor ? { cursor } : {}, o);
      out.push(...page.parents);
      if (!page.next_cursor) return out;
      cursor = page.next_cursor;
    }
  }

  /** A page of its parents (`limit` 1-1000, default 1000; `cursor`: the previous page's `next_cursor`). */
  parentsPage(id: string, p: { limit?: number; cursor?: string } = {}, o: RequestOptions = {}): Promise<ParentPage> {
    return this.data<ParentPage>("GET", taskPath(id, "parents"), { ...o, query: { ...p } });
  }

  /** Every attempt, oldest first, the running one last. */
  async attempts(id: string, o: RequestOptions = {}): Promise<Attempt[]> {
    return (await this.data<{ attempts: Attempt[] }>("GET", taskPath(id, "attempts"), o)).attempts;
  }

  /** A page of tasks, newest first. */
  list(p: ListParams = {}, o: RequestOptions = {}): Promise<TaskPage> {
    const query: Record<string, string | number | undefined> = {};
    for (const [k, v] of Object.entries(p)) {
      if (k === "metadata") {
        // The listing takes metadata.<key>=<value>.
        for (const [mk, mv] of Object.entries((v ?? {}) as Record<string, string>)) query["metadata." + mk] = mv;
      } else {
        query[k] = v instanceof Date ? v.toISOString() : (v as string | number | undefined);
      }
    }
    return this.data<TaskPage>("GET", "/tasks/v1", { ...o, query });
  }

  /** Every task the filter matches, newest first, page after page. */
  async *iterTasks(p: ListParams = {}, o: RequestOptions = {}): AsyncGenerator<Task, void, undefined> {
    let cursor = p.cursor;
    for (;;) {
      const page = await this.list({ ...p, ...(cursor ? { cursor } : {}) }, o);
      yield* page.tasks;
      if (!page.next_cursor) return;
      cursor = page.next_cursor;
    }
  }

  // Operators.

  /** Moves a DEAD task back to PENDING, attempts reset (admin). */
  retry(id: string, o: RequestOptions = {}): Promise<Task> {
    return this.data<Task>("POST", taskPath(id, "retry"), o);
  }

  /** Cancels a PENDING or BLOCKED task; on a RUNNING one asks the holder to stop (admin). */
  cancel(id: string, o: RequestOptions = {}): Promise<Task> {
    return this.data<Task>("POST", taskPath(id, "cancel"), o);
  }

  /** Retries every DEAD task the filter matches (admin); `dryRun` only counts. */
  bulkRetry(filter: TaskFilter, dryRun = false, o: RequestOptions = {}): Promise<BulkResult> {
    return this.bulk("retry", filter, dryRun, o);
  }

  /** Cancels every PENDING, BLOCKED or RUNNING task the filter matches (admin). */
  bulkCancel(filter: TaskFilter, dryRun = false, o: RequestOptions = {}): Promise<BulkResult> {
    return this.bulk("cancel", filter, dryRun, o);
  }

  /**
   * Replays every DONE or DEAD task the filter matches (`status`: DONE,
   * DEAD or both, the default), as replay does each, skipping those whose
   * unique key an unfinished task holds (admin).
   */
  bulkReplay(filter: TaskFilter, dryRun = false, o: RequestOptions = {}): Promise<BulkResult> {
    return this.bulk("replay", filter, dryRun, o);
  }

  /**
   * Creates a new task from a DONE or DEAD one: the same queue, payload and
   * settings (`req`'s members replace them), linked by `replay_of`, in a
   * run of its own; it keeps `req.traceparent` (the original's trace
   * context without one). Another status rejects with InvalidTransition; a
   * unique key an unfinished task holds, with UniqueKeyTaken. Not
   * idempotent: resent only when it surely did not reach the server.
   */
  replay(id: string, req: ReplayRequest = {}, o: RequestOptions = {}): Promise<Task> {
    if (req.payload !== undefined) checkJson(req.payload, "the payload");
    return this.data<Task>("POST", taskPath(id, "replay"), { ...o, body: req, mode: "unsent" });
  }

  // Workflows (runs).

  /**
   * A run: its counts and a page of its tasks, oldest first (`limit`
   * 1-1000, default 100; `cursor`: the previous page's `next_cursor`). A run
   * is named by its first task's id; WorkflowNotFound when no task (that
   * the key may see) belongs to it.
   */
  workflow(id: string, p: { limit?: number; cursor?: string } = {}, o: RequestOptions = {}): Promise<Workflow> {
    return this.data<Workflow>("GET", "/workflows/v1/" + enc(id), { ...o, query: { ...p } });
  }

  /** Cancels every unfinished task of the run; the holders of its RUNNING tasks learn it from their heartbeats (admin). */
  cancelWorkflow(id: string, o: RequestOptions = {}): Promise<WorkflowResult> {
    return this.data<WorkflowResult>("POST", "/workflows/v1/" + enc(id) + "/cancel", { ...o, mode: "unsent" });
  }

  /** Re-runs what failed in the run and what failed with it: DEAD tasks PENDING again, or BLOCKED behind their parents; DONE ones stay (admin). */
  retryWorkflow(id: string, o: RequestOptions = {}): Promise<WorkflowResult> {
    return this.data<WorkflowResult>("POST", "/workflows/v1/" + enc(id) + "/retry", { ...o, mode: "unsent" });
  }

  private bulk(action: string, filter: TaskFilter, dryRun: boolean, o: RequestOptions): Promise<BulkResult> {
    const body = dryRun ? { ...filter, dry_run: true } : { ...filter };
    return this.data<BulkResult>("POST", "/tasks/v1/bulk/" + action, { ...o, body, mode: dryRun ? "safe" : "unsent" });
  }

  /** Removes a queue's PENDING (default) or DEAD tasks (admin); a large purge answers with a job. */
  async purgeQueue(queue: string, p: PurgeRequest = {}, o: RequestOptions = {}): Promise<PurgeResult> {
    const a = await this.transport.call("POST", "/queues/v1/" + enc(queue) + "/purge", { ...o, body: p, mode: p.dry_run ? "safe" : "unsent" });
    return a.status === 202 ? { job: a.data as PurgeJob } : { result: a.data as BulkResult };
  }

  purgeProgress(queue: string, jobId: string, o: RequestOptions = {}): Promise<PurgeJob> {
    return this.data<PurgeJob>("GET", "/queues/v1/" + enc(queue) + "/purges/" + enc(jobId), o);
  }

  /** Asks a worker to stop claiming (admin), for rolling deploys. */
  drain(workerId: string, o: RequestOptions = {}): Promise<Worker> {
    return this.data<Worker>("POST", "/workers/v1/" + enc(workerId) + "/drain", o);
  }

  async workers(o: RequestOptions = {}): Promise<Worker[]> {
    return (await this.data<{ workers: Worker[] }>("GET", "/workers/v1", o)).workers;
  }

  // Queues.

  /** A page of queues, by name. */
  listQueues(p: ListQueuesParams = {}, o: RequestOptions = {}): Promise<{ queues: Queue[]; next_cursor: string | null }> {
    return this.data("GET", "/queues/v1", { ...o, query: { ...p } });
  }

  /** Every queue, reading every page. */
  async queues(p: Omit<ListQueuesParams, "cursor" | "limit"> = {}, o: RequestOptions = {}): Promise<Queue[]> {
    const out: Queue[] = [];
    let cursor: string | undefined;
    for (;;) {
      const page = await this.listQueues({ ...p, limit: 1000, ...(cursor ? { cursor } : {}) }, o);
      out.push(...page.queues);
      if (!page.next_cursor) return out;
      cursor = page.next_cursor;
    }
  }

  /** One queue's detail. */
  queue(name: string, o: RequestOptions = {}): Promise<QueueDetail> {
    return this.data<QueueDetail>("GET", "/queues/v1/" + enc(name), o);
  }

  /**
   * Changes some of a queue's settings (admin): absent members stay, null
   * clears a setting. `push` makes the queue a push queue or changes its
   * delivery (null turns it off); the answer of the change that created or
   * rotated its signing secret shows it, once (`push.secret`). A change of
   * push settings is not sent again after a lost answer (the repeat would
   * show no secret the first one created): rotate the secret instead.
   */
  updateQueue(name: string, patch: UpdateQueueSettingsRequest, o: RequestOptions = {}): Promise<QueueSettingsResult> {
    const mode = patch.push ? "unsent" : "safe"; // a secret is in the first answer only
    return this.data<QueueSettingsResult>("PATCH", "/queues/v1/" + enc(name), { ...o, body: patch, mode });
  }

  pauseQueue(name: string, o: RequestOptions = {}): Promise<QueueSettingsResult> {
    return this.updateQueue(name, { paused: true }, o);
  }

  resumeQueue(name: string, o: RequestOptions = {}): Promise<QueueSettingsResult> {
    return this.updateQueue(name, { paused: false }, o);
  }

  // Named limits.

  /**
   * Creates or replaces a named limit (admin): a token bucket (`per_second`,
   * `burst`) and a cap on RUNNING tasks (`max_running`) that the queues
   * naming it share (`updateQueue(q, { limits: [name] })`); at least one of
   * per_second and max_running, an absent one is none. `created` is true
   * for a new limit.
   */
  async putLimit(name: string, req: PutLimitRequest, o: RequestOptions = {}): Promise<Limit & { created: boolean }> {
    const a = await this.transport.call("PUT", "/limits/v1/" + enc(name), { ...o, body: req });
    return { ...(a.data as Limit), created: a.status === 201 };
  }

  /** One named limit (LimitNotFound when none has the name). */
  limit(name: string, o: RequestOptions = {}): Promise<Limit> {
    return this.data<Limit>("GET", "/limits/v1/" + enc(name), o);
  }

  /** Every named limit, by name. */
  async limits(o: RequestOptions = {}): Promise<Limit[]> {
    return (await this.data<{ limits: Limit[] }>("GET", "/limits/v1", o)).limits;
  }

  /** Deletes a named limit no queue names (admin; LimitInUse otherwise); resolves its values as they were. */
  deleteLimit(name: string, o: RequestOptions = {}): Promise<LimitValues> {
    return this.data<LimitValues>("DELETE", "/limits/v1/" + enc(name), o);
  }

  // Schedules.

  createSchedule(req: CreateScheduleRequest, o: RequestOptions = {}): Promise<Schedule> {
    return this.data<Schedule>("POST", "/schedules/v1", { ...o, body: req });
  }

  async schedules(o: RequestOptions = {}): Promise<Schedule[]> {
    return (await this.data<{ schedules: Schedule[] }>("GET", "/schedules/v1", o)).schedules;
  }

  schedule(name: string, o: RequestOptions = {}): Promise<Schedule> {
    return this.data<Schedule>("GET", "/schedules/v1/" + enc(name), o);
  }

  updateSchedule(name: string, patch: UpdateScheduleRequest, o: RequestOptions = {}): Promise<Schedule> {
    return this.data<Schedule>("PATCH", "/schedules/v1/" + enc(name), { ...o, body: patch });
  }

  pauseSchedule(name: string, o: RequestOptions = {}): Promise<Schedule> {
    return this.updateSchedule(name, { paused: true }, o);
  }

  resumeSchedule(name: string, o: RequestOptions = {}): Promise<Schedule> {
    return this.updateSchedule(name, { paused: false }, o);
  }

  deleteSchedule(name: string, o: RequestOptions = {}): Promise<Schedule> {
    return this.data<Schedule>("DELETE", "/schedules/v1/" + enc(name), o);
  }

  // API keys.

  /** Makes an API key (admin); its token (`key`) is shown only now. */
  createKey(req: CreateKeyRequest, o: RequestOptions = {}): Promise<CreatedKey> {
    return this.data<CreatedKey>("POST", "/admin/v1/keys", { ...o, body: req, mode: "unsent" });
  }

  async keys(o: RequestOptions = {}): Promise<Key[]> {
    return (await this.data<{ keys: Key[] }>("GET", "/admin/v1/keys", o)).keys;
  }

  revokeKey(id: string, o: RequestOptions = {}): Promise<Key> {
    return this.data<Key>("DELETE", "/admin/v1/keys/" + enc(id), o);
  }

  // Events.

  /**
   * Follows the lifecycle event stream. With `reconnect` (default), a
   * stream that ends or breaks is opened again after the server's `retry:`
   * delay, resuming after the last event seen. Abort `signal` (or break out
   * of the loop) to stop.
   */
  async *events(p: EventsParams = {}): AsyncGenerator<StreamEvent, void, undefined> {
    const reconnect = p.reconnect ?? true;
    let last = p.lastEventId;
    let delay = 2000;
    const query = { queue: p.queues, type: p.types, task_id: p.taskIds, workflow_id: p.workflows };
    while (!p.signal?.aborted) {
      const cid = newId();
      const headers = this.transport.headers(cid, false, "text/event-stream, application/problem+json");
      if (last) headers["Last-Event-ID"] = last;
      // The caller's signal aborts the connection while it is made, and
      // cancels the body's reader once it flows: aborting a fetch whose
      // body is not being read would surface as an uncaught error.
      const ctl = new AbortController();
      let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
      const onAbort = () => {
        if (reader) reader.cancel().catch(() => {});
        else ctl.abort();
      };
      p.signal?.addEventListener("abort", onAbort, { once: true });
      try {
        let resp: Response;
        try {
          resp = await this.transport.options.fetch(this.transport.url("/events/v1", query), { headers, signal: ctl.signal });
        } catch (e) {
          if (p.signal?.aborted) return;
          if (!reconnect) throw new TransportError(`taskmaster: GET /events/v1: ${String(e)}`, { sent: true, cause: e });
          await sleep(delay, undefined, p.signal);
          continue;
        }
        if (resp.status < 200 || resp.status >= 300) {
          const err = problemFromAnswer(resp.status, resp.headers, await resp.text(), "/events/v1", cid);
          if (!reconnect || err.status < 500) throw err;
          await sleep(Math.max(delay, (err.retryAfter ?? 0) * 1000), undefined, p.signal);
          continue;
        }
        if (!resp.body) throw new TransportError("taskmaster: GET /events/v1: no body", { sent: true });
        reader = resp.body.getReader();
        let id: string | null = null;
        let data: string[] = [];
        let buf = "";
        const decoder = new TextDecoder();
        try {
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            buf += decoder.decode(value, { stream: true });
            let nl: number;
            while ((nl = buf.indexOf("\n")) >= 0) {
              const line = buf.slice(0, nl).replace(/\r$/, "");
              buf = buf.slice(nl + 1);
              if (line === "") {
                if (data.length) {
                  const ev: StreamEvent = { id, data: JSON.parse(data.join("\n")) as StreamEvent["data"] };
                  if (id) last = id;
                  yield ev;
                } else if (id) {
                  last = id;
                }
                id = null;
                data = [];
                continue;
              }
              if (line.startsWith(":")) continue;
              const colon = line.indexOf(":");
              const name = colon < 0 ? line : line.slice(0, colon);
              let value = colon < 0 ? "" : line.slice(colon + 1);
              if (value.startsWith(" ")) value = value.slice(1);
              if (name === "id") id = value;
              else if (name === "data") data.push(value);
              else if (name === "retry" && /^\d+$/.test(value)) delay = Number(value);
            }
          }
        } catch (e) {
          if (!reconnect || p.signal?.aborted) throw e;
        }
      } finally {
        p.signal?.removeEventListener("abort", onAbort);
        if (reader) await reader.cancel().catch(() => {});
      }
      if (!reconnect || p.signal?.aborted) return;
      await sleep(delay, undefined, p.signal);
    }
  }

  // The worker protocol.

  /** Registers (or re-registers, reviving a DEAD) worker. `created` is true for a new one. */
  async register(req: RegisterRequest = {}, o: RequestOptions = {}): Promise<Registration & { created: boolean }> {
    const a = await this.transport.call("POST", "/workers/v1/register", { ...o, body: req });
    return { ...(a.data as Registration), created: a.status === 201 };
  }

  /**
   * A worker's sign of life. With `tasks` (every task it holds under its
   * lease; [] for none) it renews their leases and lets the server take
   * back what it holds unlisted; the answer names the tasks it lost, those
   * to cancel, and whether to drain. Without, it renews nothing.
   */
  heartbeat(workerId: string, tasks?: HeartbeatTask[], o: HeartbeatOptions = {}): Promise<HeartbeatResult> {
    const { claimsInFlight, ...rest } = o;
    const call: CallOptions = { ...rest };
    if (tasks !== undefined) {
      const body: HeartbeatRequest = { tasks };
      if (claimsInFlight?.length) body.claims_in_flight = claimsInFlight;
      call.body = body;
    }
    return this.data<HeartbeatResult>("POST", "/workers/v1/" + enc(workerId) + "/heartbeat", call);
  }

  /**
   * Claims up to `limit` tasks, RUNNING under fresh leases. With `waitMs`
   * an empty claim waits on the server. Retried with the same request id (a
   * fresh one when absent): a retry after a lost answer gets the same tasks.
   */
  async claim(workerId: string, p: ClaimParams = {}, o: RequestOptions = {}): Promise<Task[]> {
    return (await this.claimCall(workerId, p, {}, o)).tasks;
  }

  /**
   * Reports tasks this worker finished (`complete`, `fail`: at most
   * MAX_BATCH items together, each task once, no `enqueue`) and claims as
   * `claim` does, in one request: the server applies the reports as
   * completeBatch and failBatch do, each item fenced on its own, in the
   * transaction of the claim's first try and before the claim. A worker
   * that takes one task at a time spends one request per task instead of
   * two.
   *
   * All or nothing until that first try: a rejection (Problem,
   * TransportError) means no report was saved, unless a try was committed
   * and its answer lost. The retries `claim` makes are made here too, with
   * the same reports and request id: a report that a lost try saved comes
   * back `error` with an InvalidTransition problem whose `current_status`
   * is its new status (DONE for a completion; PENDING or DEAD for a
   * failure), and the claim answers with the lost try's tasks. Once saved,
   * the answer carries the outcomes whatever the wait brings.
   */
  async claimReporting(workerId: string, p: ClaimReportingParams = {}, o: RequestOptions = {}): Promise<ClaimResult> {
    const { complete = [], fail = [], ...claim } = p;
    const reports: Pick<ClaimRequest, "complete" | "fail"> = {};
    if (complete.length) {
      reports.complete = complete.map((it, i): ClaimCompletion => {
        if (it.enqueue !== undefined) throw new TypeError(`taskmaster: complete[${i}]: a claim's completions enqueue nothing (use completeBatch)`);
        if (it.result === undefined) return { id: it.id, lease_id: it.lease_id };
        checkJson(it.result, `complete[${i}].result`);
        return { id: it.id, lease_id: it.lease_id, result: it.result };
      });
    }
    if (fail.length) reports.fail = fail.map(failWire);
    const out = await this.claimCall(workerId, claim, reports, o);
    const completed = out.completed ?? [];
    const failed = out.failed ?? [];
    if (completed.length !== complete.length || failed.length !== fail.length) {
      throw new TransportError(
        `taskmaster: a claim reporting ${complete.length} completions and ${fail.length} failures answered with ${completed.length} and ${failed.length} outcomes`,
        { sent: true },
      );
    }
    return { tasks: out.tasks, truncated: out.truncated, completed, failed };
  }

  /** A claim with `reports` added to its body, retried with its request id (a fresh one when absent). */
  private claimCall(workerId: string, p: ClaimParams, reports: Pick<ClaimRequest, "complete" | "fail">, o: RequestOptions): Promise<ClaimResponse> {
    const { waitMs, ...rest } = p;
    const body: ClaimRequest = { worker_id: workerId, ...rest, request_id: p.request_id ?? newId(), ...reports };
    if (waitMs && waitMs > 0) body.wait_ms = Math.ceil(waitMs);
    return this.data<ClaimResponse>("POST", "/tasks/v1/claim", { ...o, body, waitMs: Math.max(waitMs ?? 0, 0) });
  }

  /**
   * Reports a held task done; `enqueue` creates tasks in the same
   * transaction, in the task's run (their `ref` and `depends_on` name
   * earlier items and existing tasks: a join over a spawn's children).
   * LeaseLost or InvalidTransition: drop the task.
   */
  complete(taskId: string, req: { worker_id: string; lease_id: string; result?: JsonValue; enqueue?: BatchSubmitItem[] }, o: ReportOptions = {}): Promise<Task> {
    if (req.result !== undefined) checkJson(req.result, "the result");
    checkEnqueue(req.enqueue);
    return this.data<Task>("POST", taskPath(taskId, "complete"), { ...o, body: req });
  }

  /**
   * Creates tasks on behalf of a held task, which stays RUNNING: the
   * children a task discovers, and a join that depends on them (or a
   * complete's `enqueue` with the join). Like submitBatch (`ref` and
   * `depends_on` name earlier items and existing tasks, the spawning one
   * included), all or none, in the task's run. Fenced like complete
   * (LeaseLost, InvalidTransition: the task is no longer this worker's);
   * CancelRequested once an operator asked to cancel the task.
   */
  async spawn(taskId: string, req: { worker_id: string; lease_id: string; tasks: BatchSubmitItem[] }, o: RequestOptions = {}): Promise<{ tasks: Task[]; created: boolean[] }> {
    req.tasks.forEach((p, j) => checkJson(p, `tasks[${j}]`));
    const out = await this.data<{ tasks: Task[]; created: boolean[] }>("POST", taskPath(taskId, "spawn"), { ...o, body: req, mode: listMode(req.tasks) });
    return checkCreated("spawn", req.tasks.length, out);
  }

  /** Reports a held task failed: retried after backoff while attempts remain, unless `nonRetryable`. */
  fail(taskId: string, req: { worker_id: string; lease_id: string; error: string; nonRetryable?: boolean }, o: ReportOptions = {}): Promise<Task> {
    const body = { worker_id: req.worker_id, lease_id: req.lease_id, error: cutUtf8(req.error), retryable: !req.nonRetryable };
    return this.data<Task>("POST", taskPath(taskId, "fail"), { ...o, body });
  }

  /** Puts a held task back, claimable `delaySeconds` from now (rounded up), without spending an attempt. */
  snooze(taskId: string, req: { worker_id: string; lease_id: string; delaySeconds: number }, o: ReportOptions = {}): Promise<Task> {
    const body = { worker_id: req.worker_id, lease_id: req.lease_id, delay_seconds: Math.ceil(req.delaySeconds) };
    return this.data<Task>("POST", taskPath(taskId, "snooze"), { ...o, body });
  }

  /** Hands a held task back, PENDING at once, without spending an attempt (a stopping worker's call). */
  release(taskId: string, req: { worker_id: string; lease_id: string }, o: ReportOptions = {}): Promise<Task> {
    return this.data<Task>("POST", taskPath(taskId, "release"), { ...o, body: req });
  }

  /**
   * Reports how far a held task got (`percent` 0-100, a `message` of at
   * most 1 KiB, `details` of at most 16 KiB). Fenced like complete
   * (LeaseLost or InvalidTransition: the task is no longer this worker's)
   * and a sign of life of the worker; announced with a `task.progress`
   * event, at most one a second.
   */
  progress(taskId: string, req: ProgressRequest, o: ReportOptions = {}): Promise<Task> {
    if (req.details !== undefined) checkJson(req.details, "the details");
    return this.data<Task>("POST", taskPath(taskId, "progress"), { ...o, body: req });
  }

  /** Sets a held task's lease to run out `lease_seconds` from now (its current length when absent). */
  extend(taskId: string, req: { worker_id: string; lease_id: string; lease_seconds?: number }, o: RequestOptions = {}): Promise<Task> {
    return this.data<Task>("POST", taskPath(taskId, "extend"), { ...o, body: req });
  }

  /** Reports up to MAX_BATCH held tasks done, each fenced on its own. */
  async completeBatch(workerId: string, items: CompleteItem[], o: RequestOptions = {}): Promise<ItemOutcome[]> {
    items.forEach((it, i) => {
      if (it.result !== undefined) checkJson(it.result, `items[${i}].result`);
      checkEnqueue(it.enqueue);
    });
    return this.reportBatch("/tasks/v1/complete", workerId, items, o);
  }

  /** Reports up to MAX_BATCH held tasks failed, each fenced on its own. */
  failBatch(workerId: string, items: FailItem[], o: RequestOptions = {}): Promise<ItemOutcome[]> {
    return this.reportBatch("/tasks/v1/fail", workerId, items.map(failWire), o);
  }

  /** Hands up to MAX_BATCH held tasks back without spending their attempts, each fenced on its own. */
  releaseBatch(workerId: string, refs: LeaseRef[], o: RequestOptions = {}): Promise<ItemOutcome[]> {
    return this.reportBatch("/tasks/v1/release", workerId, refs, o);
  }

  private async reportBatch(path: string, workerId: string, items: unknown[], o: RequestOptions): Promise<ItemOutcome[]> {
    const out = await this.data<{ items: ItemOutcome[] }>("POST", path, { ...o, body: { worker_id: workerId, items } });
    if (out.items.length !== items.length) throw new TransportError(`taskmaster: batch of ${items.length} answered with ${out.items.length} outcomes`, { sent: true });
    return out.items;
  }
}

export { Problem };
