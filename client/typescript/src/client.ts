import { Problem, TransportError } from "./errors.js";
import { DEFAULT_RETRY_POLICY, Transport, newId, problemFromAnswer, sleep, type CallOptions, type RetryPolicy } from "./http.js";
import type {
  Attempt,
  BatchSubmitItem,
  BulkResult,
  CreateKeyRequest,
  CreateScheduleRequest,
  CreatedKey,
  HeartbeatResult,
  ItemOutcome,
  JsonValue,
  Key,
  LeaseRef,
  LifecycleEvent,
  ParentPage,
  PurgeJob,
  PurgeRequest,
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

export interface EventsParams {
  queues?: string[];
  types?: string[];
  /** Only the events of these runs. */
  workflows?: string[];
  lastEventId?: string;
  /** Open the stream again after it ends or breaks, resuming after the last event (default true). */
  reconnect?: boolean;
  signal?: AbortSignal;
}

const enc = encodeURIComponent;

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

  /** One task (with `depends_on` and `blocked_by`). */
  get(id: string, o: RequestOptions = {}): Promise<Task> {
    return this.data<Task>("GET", taskPath(id), o);
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

  /** Changes some of a queue's settings (admin): absent members stay, null clears a limit. */
  updateQueue(name: string, patch: UpdateQueueSettingsRequest, o: RequestOptions = {}): Promise<QueueSettingsResult> {
    return this.data<QueueSettingsResult>("PATCH", "/queues/v1/" + enc(name), { ...o, body: patch });
  }

  pauseQueue(name: string, o: RequestOptions = {}): Promise<QueueSettingsResult> {
    return this.updateQueue(name, { paused: true }, o);
  }

  resumeQueue(name: string, o: RequestOptions = {}): Promise<QueueSettingsResult> {
    return this.updateQueue(name, { paused: false }, o);
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
    const query = { queue: p.queues, type: p.types, workflow_id: p.workflows };
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
  heartbeat(workerId: string, tasks?: LeaseRef[], o: RequestOptions & { deadline?: number; timeoutMs?: number } = {}): Promise<HeartbeatResult> {
    const call: CallOptions = { ...o };
    if (tasks !== undefined) call.body = { tasks };
    return this.data<HeartbeatResult>("POST", "/workers/v1/" + enc(workerId) + "/heartbeat", call);
  }

  /**
   * Claims up to `limit` tasks, RUNNING under fresh leases. With `waitMs`
   * an empty claim waits on the server. Retried with the same request id (a
   * fresh one when absent): a retry after a lost answer gets the same tasks.
   */
  async claim(workerId: string, p: ClaimParams = {}, o: RequestOptions = {}): Promise<Task[]> {
    const { waitMs, ...rest } = p;
    const body: Record<string, unknown> = { worker_id: workerId, ...rest, request_id: p.request_id ?? newId() };
    if (waitMs && waitMs > 0) body["wait_ms"] = Math.ceil(waitMs);
    const out = await this.data<{ tasks: Task[] }>("POST", "/tasks/v1/claim", { ...o, body, waitMs: Math.max(waitMs ?? 0, 0) });
    return out.tasks;
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
    const reqs = items.map((it) => ({ id: it.id, lease_id: it.lease_id, error: cutUtf8(it.error), retryable: !it.nonRetryable }));
    return this.reportBatch("/tasks/v1/fail", workerId, reqs, o);
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
