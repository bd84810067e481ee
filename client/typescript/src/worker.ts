import { hostname } from "node:os";
import { Client, MAX_BATCH, MAX_CLAIM_WAIT_MS, MAX_HEARTBEAT_TASKS, MAX_LEASE_SECONDS, checkEnqueue, checkJson, type ClaimResult, type CompleteItem, type FailItem } from "./client.js";
import {
  BodyTooLarge,
  Forbidden,
  InvalidTransition,
  MalformedRequest,
  Problem,
  TaskmasterError,
  TransportError,
  Unauthorized,
  ValidationProblem,
  WorkerDead,
  WorkerNotFound,
  isHeldElsewhere,
  isRouteMissing,
  problemFrom,
} from "./errors.js";
import { newId, sleep, type RetryPolicy } from "./http.js";
import type { BatchSubmitItem, HeartbeatResult, ItemOutcome, JsonValue, LeaseRef, Task, Trace } from "./types.js";

/** Throw it from a handler to fail the task for good: DEAD at once (reason non_retryable). */
export class NonRetryable extends TaskmasterError {
  override name = "NonRetryable";
}

/**
 * Throw it from a handler to put the task back, claimable `seconds` from now
 * (rounded up; 1 s to 30 days), without spending an attempt. A snooze the
 * server refuses fails the task (retryable) instead.
 */
export class Snooze extends TaskmasterError {
  override name = "Snooze";
  constructor(readonly seconds: number) {
    super(`snooze for ${seconds}s`);
  }
}

/**
 * A handler result that completes the task with `result` and creates
 * `enqueue` in the same transaction, or neither: a pipeline's next stage,
 * or the join over the children the handler spawned (`ctx.spawn`;
 * `depends_on` their ids). An enqueue the server refuses fails the task as
 * non-retryable.
 */
export class Next {
  constructor(
    readonly result: JsonValue | undefined,
    readonly enqueue: BatchSubmitItem[] = [],
  ) {}
}

/** Base of the reasons a handler is asked to stop (its signal's reason). */
export class Stopped extends TaskmasterError {
  override name = "Stopped";
}
/** The worker is stopping and the drain timeout passed: the task is handed back unless the handler still succeeds. */
export class Shutdown extends Stopped {
  override name = "Shutdown";
}
/** This worker no longer holds the task (the server said so, or the lease could not be renewed in time): its outcome is dropped. */
export class TaskLost extends Stopped {
  override name = "TaskLost";
}
/** An operator cancelled the running task: it is failed (DEAD cancelled) unless the handler still succeeds. */
export class TaskCancelled extends Stopped {
  override name = "TaskCancelled";
}
/** The handler ran past `taskTimeoutMs`: the task is failed (retried while attempts remain) unless the handler still succeeds. */
export class TaskTimeout extends Stopped {
  override name = "TaskTimeout";
}

/**
 * The task's time limit on its attempt is up (`Task.timeout_at`: its
 * `timeout_seconds`, else its queue's default, from the claim). The server
 * ends the attempt itself (outcome `timed_out`, retried after backoff or
 * DEAD `exhausted`), so whatever the handler returns is dropped, as for a
 * lost task.
 */
export class TaskTimeLimit extends Stopped {
  override name = "TaskTimeLimit";
}

/** The worker cannot go on: it could not register, or the server refused its key (401/403). */
export class WorkerError extends TaskmasterError {
  override name = "WorkerError";
}

/** What a handler gets. */
export interface TaskContext {
  readonly task: Task;
  readonly payload: JsonValue;
  /** The attempt this is (1 for the first claim). */
  readonly attempt: number;
  readonly workerId: string;
  readonly client: Client;
  /** Aborted when the handler is asked to stop; its reason is the cause (Shutdown, TaskLost, TaskCancelled, TaskTimeout, TaskTimeLimit). */
  readonly signal: AbortSignal;
  /** Whether the handler was asked to stop. */
  readonly cancelled: boolean;
  /** Why the handler was asked to stop, or undefined. */
  readonly cause: Stopped | undefined;
  /** When the lease runs out by this worker's clock, as last renewed (performance.now() ms). */
  readonly leaseDeadline: number;
  /** Milliseconds until the lease runs out, as last renewed. */
  leaseRemainingMs(): number;
  /** The W3C trace context the task was submitted under, or null. */
  readonly trace: Trace | null;
  /**
   * The task's trace as W3C headers (`traceparent`, and `tracestate` when it
   * has one; empty without a trace): the carrier a tracing system's
   * propagator extracts from (OpenTelemetry:
   * `propagation.extract(ROOT_CONTEXT, ctx.traceHeaders())`).
   */
  traceHeaders(): Record<string, string>;
  /**
   * Reports how far the handler got (`percent` 0-100, a `message` for a
   * human of at most 1 KiB, `details` of at most 16 KiB): kept on the task
   * (`progress`, the dashboard's bar) and announced with a `task.progress`
   * event, at most one a second. Sent under this worker and the task's
   * lease, retried through outages for `reportTimeoutMs`. LeaseLost or
   * InvalidTransition: the task is no longer this worker's; stop.
   */
  progress(percent: number, message?: string, details?: JsonValue): Promise<void>;
  /**
   * Creates tasks on behalf of this task, under this worker and the task's
   * lease (Client.spawn); the task stays RUNNING. A handler that fans out
   * spawns its children, then returns a Next whose `enqueue` holds the
   * join, which depends on them by id. CancelRequested once an operator
   * asked to cancel the task.
   */
  spawn(...tasks: BatchSubmitItem[]): Promise<Task[]>;
}

/** A handler: returns the result (any JSON value, or a Next), or throws. */
export type Handler = (ctx: TaskContext) => unknown | Promise<unknown>;

/**
 * Runs each handler (`run`) in a context of the caller's: it must call
 * `run` once and resolve what it resolves (or reject as it rejects). The
 * hook to start handlers in a tracing system with the task's trace, e.g.
 * OpenTelemetry's
 * `(ctx, run) => context.with(propagation.extract(ROOT_CONTEXT, ctx.traceHeaders()), run)`.
 */
export type HandlerContext = (ctx: TaskContext, run: () => Promise<unknown>) => Promise<unknown>;

export interface WorkerOptions {
  /** The queues the worker serves (none: any). */
  queues?: string[];
  tags?: string[];
  /** The most handlers running at once (default 1). */
  concurrency?: number;
  /** Default: `<hostname>-<pid>`. */
  workerId?: string;
  /** The lease each claim asks for (default: the server's). */
  leaseSeconds?: number;
  /** How long a stopping worker waits for handlers before asking them to stop (default 30 s). */
  drainTimeoutMs?: number;
  /** How long a handler asked to stop gets before the worker acts on its behalf (default 5 s). */
  cancelGraceMs?: number;
  /** An empty claim's long poll (default 5 s; cut to drainTimeoutMs). */
  claimWaitMs?: number;
  pollIntervalMs?: number;
  maxIdleIntervalMs?: number;
  /** Overrides the interval the server asks for. */
  heartbeatIntervalMs?: number;
  /** Bounds one report, retries included (default 30 s). */
  reportTimeoutMs?: number;
  /** Bounds each handler. */
  taskTimeoutMs?: number;
  /** How long before the lease runs out (by this worker's clock) a lease not renewed counts as lost (default 10 % of the lease, 250 ms to 5 s). */
  leaseMarginMs?: number;
  /** Runs each handler in a context of the caller's (a tracing system's span, say). */
  handlerContext?: HandlerContext;
  /** Stop on SIGINT/SIGTERM while running (default true); a second signal skips the drain's waiting. */
  handleSignals?: boolean;
  /** Where the worker logs (default console). */
  logger?: Pick<Console, "info" | "warn" | "error">;
}

/** `<hostname>-<pid>`: stable for the process, distinct on a host. */
export function defaultWorkerId(): string {
  const host = (hostname() || "worker").replace(/[^A-Za-z0-9._:-]/g, "-");
  const pid = `-${process.pid}`;
  return host.slice(0, 128 - pid.length) + pid;
}

const now = () => performance.now();

class Job {
  readonly ref: LeaseRef;
  readonly started = now();
  readonly ctl = new AbortController();
  cause: Stopped | undefined;
  haltedAt = 0;
  handlerDone = false;
  reporterTaken = false;
  /**
   * Its slot went to the claim that carried its outcome and settled it
   * (Worker.carry): the tasks that claim brought took it, so the job does
   * not free it.
   */
  slotPassed = false;
  /**
   * Set when the handler is done with a task whose time limit is up: it
   * stays listed until the server says it ended the attempt, or until then.
   */
  endingBy: number | undefined;

  constructor(
    readonly task: Task,
    readonly leaseMs: number,
    public leaseDeadline: number,
    /** When the task's time limit is up by this worker's clock, if it has one. */
    readonly timeLimitAt: number | undefined,
  ) {
    this.ref = { id: task.id, lease_id: task.lease_id ?? "" };
  }

  halt(cause: Stopped): boolean {
    if (this.cause) return false;
    this.cause = cause;
    this.haltedAt = now();
    this.ctl.abort(cause);
    return true;
  }

  lost(): boolean {
    return this.cause instanceof TaskLost;
  }

  /** Whether the handler's outcome is not reported: the task was lost, or the server ends its attempt (time limit). */
  dropped(): boolean {
    return this.cause instanceof TaskLost || this.cause instanceof TaskTimeLimit;
  }

  takeReporter(): boolean {
    if (this.reporterTaken) return false;
    this.reporterTaken = true;
    return true;
  }
}

const key = (r: LeaseRef) => r.id + "\u0000" + r.lease_id;

type CompleteReport = { kind: "complete"; result: JsonValue | undefined; enqueue: BatchSubmitItem[] };
type FailReport = { kind: "fail"; error: string; nonRetryable?: boolean };
type Report = CompleteReport | FailReport | { kind: "snooze"; seconds: number } | { kind: "release"; error: string };

/**
 * A handler's outcome handed to the claim loop, to ride its next claim;
 * `settle` takes the outcome the claim's answer gave it, or undefined when
 * the outcome did not ride a claim that answered (the claim failed, or was
 * not sent): when it does not settle the task, the job takes back the slot
 * it passed and its own report delivers the outcome.
 */
type Carried = { job: Job; settle: (o: ItemOutcome | undefined) => void } & ({ kind: "complete"; item: CompleteItem } | { kind: "fail"; item: FailItem });

/**
 * Whether a report's refusal says the report was already made: an
 * invalid-transition whose current status is how the report ended the task
 * (DONE for a completion, DEAD for a failure), as when a try whose answer
 * was lost saved it. (A repeated failure that requeued its task is answered
 * lease-lost: dropped as no longer held.)
 */
function alreadyMade(kind: Report["kind"], e: unknown): boolean {
  if (!(e instanceof InvalidTransition)) return false;
  if (kind === "complete") return e.currentStatus === "DONE";
  if (kind === "fail") return e.currentStatus === "DEAD";
  return false;
}

/**
 * A worker: registers, heartbeats (listing the tasks it holds, which renews
 * their leases), claims up to `concurrency` tasks with long polls, runs the
 * handler on each, and reports every outcome under the task's lease. The
 * handler returns the result (a {@link Next} also enqueues tasks) or throws
 * {@link NonRetryable} (DEAD at once), {@link Snooze} (back later without
 * spending an attempt) or anything else (retried with backoff while
 * attempts remain). Its context's `signal` aborts when it must stop.
 *
 * Guarantees (docs/sdks.md says where each stops): a claim whose answer was
 * lost is retried with its request id, and until its answer arrives every
 * heartbeat names it (`claims_in_flight`), so a late answer does not cost
 * its tasks; a finished task's completion (without enqueue) or failure
 * rides the next claim when every slot is taken (the claim is then sent
 * at once: with concurrency 1, one request per task), and goes on its own
 * otherwise (a report never waits for a claim) or when that claim fails
 * for good; a report failing with a transport error, 5xx, 408 or 429
 * keeps its task heartbeated and is retried (after Retry-After) until
 * accepted, the lease is lost, or `reportTimeoutMs` runs out (only a
 * 400/413/422 about the result fails the task; 401/403 stop the worker
 * without touching its tasks); a lease it cannot renew before it runs out
 * by its own clock aborts the handler (TaskLost) and its result is not
 * reported, and so does a task's time limit (TaskTimeLimit: the server ends
 * the attempt; the task stays listed until it has); never more than
 * `concurrency` handlers at once (a slot is held until the handler
 * settles); `stop()` (SIGINT/SIGTERM) drains and hands back, without
 * spending an attempt, the tasks whose handlers do not finish. CPU-bound
 * handlers block heartbeats: run them in worker_threads. `handlerContext`
 * runs each handler in a context of the caller's (a tracing system's, with
 * the task's trace: `ctx.traceHeaders()`).
 */
export class Worker {
  readonly workerId: string;
  private readonly o: Required<Omit<WorkerOptions, "leaseSeconds" | "taskTimeoutMs" | "leaseMarginMs" | "heartbeatIntervalMs" | "workerId" | "handlerContext">> &
    Pick<WorkerOptions, "leaseSeconds" | "taskTimeoutMs" | "leaseMarginMs" | "heartbeatIntervalMs" | "handlerContext">;
  private readonly log: Pick<Console, "info" | "warn" | "error">;
  private readonly inflight = new Map<string, Job>();
  /**
   * The request ids of the claims sent and not yet answered (or given up):
   * heartbeats name them, so that the server does not take a task back as
   * orphaned because its claim's answer is late.
   */
  private readonly claims = new Set<string>();
  private running = 0;
  private capacity: number;
  private intervalMs = 10_000;
  private stopping = false;
  private forced = false;
  private drainRequested = false;
  private fatal: WorkerError | undefined;
  private started = false;
  private noRelease = false;
  private plainBeats = false;
  private noClaimsInFlight = false;
  /** The server refused a claim's `complete` or `fail` as unknown fields (older than reports on claims): report on their own. */
  private noCarry = false;
  /** Whether the claim loop waits for a free slot: a finished task's outcome may then ride its next claim. */
  private slotWait = false;
  /** The outcomes for the next claim, each having passed its slot to it. */
  private carried: Carried[] = [];
  private onBehalf = 0;
  private wake: (() => void) | undefined;

  constructor(
    readonly client: Client,
    readonly handler: Handler,
    options: WorkerOptions = {},
  ) {
    if (typeof handler !== "function") throw new TypeError("taskmaster: handler must be a function");
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_HEARTBEAT_TASKS) {
      throw new RangeError(`taskmaster: concurrency must be between 1 and ${MAX_HEARTBEAT_TASKS}`);
    }
    if (options.leaseSeconds !== undefined && !(options.leaseSeconds >= 1 && options.leaseSeconds <= MAX_LEASE_SECONDS)) {
      throw new RangeError(`taskmaster: leaseSeconds must be between 1 and ${MAX_LEASE_SECONDS}`);
    }
    if ((options.claimWaitMs ?? 0) > MAX_CLAIM_WAIT_MS) throw new RangeError(`taskmaster: claimWaitMs must be at most ${MAX_CLAIM_WAIT_MS}`);
    this.workerId = options.workerId ?? defaultWorkerId();
    if (!/^[A-Za-z0-9._:-]{1,128}$/.test(this.workerId)) throw new RangeError("taskmaster: workerId must be 1-128 characters of [A-Za-z0-9._:-]");
    this.o = {
      queues: options.queues ?? [],
      tags: options.tags ?? [],
      concurrency,
      drainTimeoutMs: options.drainTimeoutMs ?? 30_000,
      cancelGraceMs: options.cancelGraceMs ?? 5_000,
      claimWaitMs: options.claimWaitMs ?? 5_000,
      pollIntervalMs: options.pollIntervalMs ?? 100,
      maxIdleIntervalMs: options.maxIdleIntervalMs ?? 5_000,
      reportTimeoutMs: options.reportTimeoutMs ?? 30_000,
      handleSignals: options.handleSignals ?? true,
      logger: options.logger ?? console,
      leaseSeconds: options.leaseSeconds,
      taskTimeoutMs: options.taskTimeoutMs,
      leaseMarginMs: options.leaseMarginMs,
      heartbeatIntervalMs: options.heartbeatIntervalMs,
      handlerContext: options.handlerContext,
    };
    this.capacity = concurrency;
    const prefix = `taskmaster worker ${this.workerId}:`;
    const l = this.o.logger;
    this.log = { info: (...a) => l.info(prefix, ...a), warn: (...a) => l.warn(prefix, ...a), error: (...a) => l.error(prefix, ...a) };
  }

  /** Whether the server asked this worker to drain (no more claims). */
  get draining(): boolean {
    return this.drainRequested;
  }

  /** The tasks held now. */
  inFlight(): Task[] {
    return [...this.inflight.values()].map((j) => j.task);
  }

  /** Asks run() to drain and resolve; a second call skips the drain's waiting. */
  stop(): void {
    if (this.stopping) this.forced = true;
    this.stopping = true;
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** Waits up to ms for a change (a slot freed, a stop); resolves at once when poked. */
  private changed(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        if (this.wake === done) this.wake = undefined;
        resolve();
      }, ms);
      const prev = this.wake;
      const done = () => {
        clearTimeout(t);
        prev?.();
        resolve();
      };
      this.wake = done;
    });
  }

  /** Works until stop() (or SIGINT/SIGTERM), then drains and resolves; rejects with WorkerError when it cannot register or its key is refused. */
  async run(): Promise<void> {
    if (this.started) throw new Error("taskmaster: Worker.run called twice");
    this.started = true;
    const onSignal = () => this.stop();
    if (this.o.handleSignals) {
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
    }
    try {
      if (!(await this.register(true))) return;
      let beatsDone = false;
      const supervisor = this.supervise(() => beatsDone);
      try {
        await this.claimLoop();
        await this.drain();
      } finally {
        beatsDone = true;
        await supervisor;
      }
      this.log.info("worker stopped");
      if (this.fatal) throw this.fatal;
    } finally {
      if (this.o.handleSignals) {
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
    }
  }

  private async register(first: boolean): Promise<boolean> {
    let wait = this.o.pollIntervalMs;
    for (;;) {
      let err: unknown;
      try {
        const reg = await this.client.register({ id: this.workerId, queues: this.o.queues, tags: this.o.tags });
        this.intervalMs = this.o.heartbeatIntervalMs ?? (reg.heartbeat_interval_seconds * 1000 || 10_000);
        this.capacity = Math.min(this.o.concurrency, reg.max_heartbeat_tasks || MAX_HEARTBEAT_TASKS);
        if (this.capacity < this.o.concurrency) this.log.warn(`concurrency ${this.o.concurrency} is more than a heartbeat may list (${this.capacity}); holding fewer tasks`);
        if (first) this.log.info(`worker registered: queues ${JSON.stringify(this.o.queues)}, concurrency ${this.capacity}, heartbeat every ${this.intervalMs} ms`);
        return true;
      } catch (e) {
        err = e;
      }
      if (err instanceof Problem && err.status < 500 && err.status !== 429) {
        const we = new WorkerError(`taskmaster: register ${this.workerId}: ${err.message}`, { cause: err });
        if (first) throw we;
        this.log.error("register again failed:", err.message);
        return false;
      }
      if (!(err instanceof Problem) && !(err instanceof TransportError)) throw err;
      if (!first) {
        this.log.warn("register again failed:", err.message);
        return false;
      }
      this.log.warn(`register failed; retrying in ${wait} ms:`, err.message);
      if (!(await sleep(wait, () => this.stopping))) return false;
      wait = Math.min(wait * 2, this.o.maxIdleIntervalMs);
    }
  }

  private fatalStop(what: string, p: Problem): void {
    if (!this.fatal) this.fatal = new WorkerError(`taskmaster: the server refused this worker's key (${what}): ${p.message}`, { cause: p });
    this.log.error(`the server refused this worker's key (${what}); stopping:`, p.message);
    this.stopping = true;
    this.forced = true;
    this.poke();
  }

  // Claims.

  private async claimLoop(): Promise<void> {
    let idle = 0;
    const w = Math.min(this.o.claimWaitMs, this.o.drainTimeoutMs);
    const wait = w >= 100 ? w : 0;
    const nextIdle = (i: number) => (i === 0 ? this.o.pollIntervalMs : Math.min(i * 2, this.o.maxIdleIntervalMs));
    try {
      while (!this.stopping) {
        if (this.drainRequested || this.running >= this.capacity) {
          this.handBack(); // draining, or a capacity cut below what was carried (registered again)
          // Waiting for a slot: the outcome that frees one rides the claim
          // sent at once when the wait ends (carry).
          this.slotWait = !this.drainRequested && !this.noCarry;
          await this.changed(500);
          this.slotWait = false;
          continue;
        }
        const n = Math.min(this.capacity - this.running, MAX_BATCH);
        this.running += n;
        // Each carried outcome passed its slot: there are at most n.
        const carried = this.carried.splice(0, n);
        this.handBack();
        // Never cut off: a claim cut after the server committed it would
        // leave its tasks held by no one. A stopping worker lets its waiting
        // claim run out (claimWaitMs <= drainTimeoutMs).
        const sent = now();
        const requestId = newId();
        this.claims.add(requestId);
        const completes = carried.flatMap((c) => (c.kind === "complete" ? [c] : []));
        const fails = carried.flatMap((c) => (c.kind === "fail" ? [c] : []));
        let res: ClaimResult;
        try {
          res = await this.client.claimReporting(this.workerId, {
            limit: n,
            waitMs: wait,
            request_id: requestId,
            ...(this.o.leaseSeconds ? { lease_seconds: this.o.leaseSeconds } : {}),
            complete: completes.map((c) => c.item),
            fail: fails.map((c) => c.item),
          });
        } catch (e) {
          this.claims.delete(requestId); // given up: its tasks, if any, are orphans
          this.free(n);
          for (const c of carried) c.settle(undefined); // each takes a slot back, for its own report
          if (e instanceof WorkerDead || e instanceof WorkerNotFound) {
            await this.reregister(e);
            continue;
          }
          if (e instanceof Unauthorized || e instanceof Forbidden) {
            this.fatalStop("claim", e);
            return;
          }
          if (!(e instanceof Problem) && !(e instanceof TransportError)) throw e;
          if (carried.length && this.reportsRefused(e)) {
            // What was refused is the reports, which now go their own way:
            // the claim may be sent again at once (once a slot is free: each
            // report holds its own meanwhile).
            continue;
          }
          this.log.warn("claim failed:", e.message);
          idle = nextIdle(idle);
          await sleep(idle, () => this.stopping);
          continue;
        }
        this.free(n - res.tasks.length);
        // The reports are settled (their tasks no longer listed) before the
        // claim's tasks are in flight.
        completes.forEach((c, i) => c.settle(res.completed[i]));
        fails.forEach((c, i) => c.settle(res.failed[i]));
        for (const t of res.tasks) this.start(t, sent);
        // Its tasks are in flight (listed) before the claim stops being named.
        this.claims.delete(requestId);
        if (res.tasks.length) idle = 0;
        else if (wait > 0 && now() - sent >= wait) idle = 0;
        else {
          idle = nextIdle(idle);
          await sleep(idle, () => this.stopping);
        }
      }
    } finally {
      this.slotWait = false;
      this.handBack();
    }
  }

  /**
   * Hands a finished task's outcome (a completion without enqueue, or a
   * failure) to the claim loop when it waits for a free slot, so that the
   * claim sent at once carries it: one request for both. The job passes
   * its slot to that claim. Resolves whether the claim's answer settled
   * the task (delivered, or no longer this worker's); false, at once when
   * the loop is not waiting for a slot (it is long-polling, stopping or
   * draining: a report never waits for a claim), or when the claim failed
   * or was not sent: report it on its own then.
   */
  private carry(job: Job, r: CompleteReport | FailReport): Promise<boolean> {
    if (!this.slotWait || this.stopping || this.drainRequested || this.noCarry) return Promise.resolve(false);
    if (r.kind === "complete" && r.enqueue.length) return Promise.resolve(false);
    return new Promise((resolve) => {
      const settle = (o: ItemOutcome | undefined) => {
        const done = this.settled(job, r.kind, o);
        // Not settled: its own report holds a slot, as every report does.
        if (done) job.slotPassed = true;
        else this.running++;
        resolve(done);
      };
      const ref = job.ref;
      if (r.kind === "complete") this.carried.push({ job, settle, kind: "complete", item: r.result === undefined ? { ...ref } : { ...ref, result: r.result } });
      else this.carried.push({ job, settle, kind: "fail", item: { ...ref, error: r.error, nonRetryable: r.nonRetryable ?? false } });
      this.running--;
      this.poke();
    });
  }

  /**
   * Whether e, the error of a claim that carried reports, is the server
   * refusing them rather than the claim: what they hold (413, 422), or
   * reports on a claim at all (a server older than them answers the field
   * as unknown, 400: claims carry no more reports then). Any other 400
   * leaves carrying on.
   */
  private reportsRefused(e: Problem | TransportError): boolean {
    if (e instanceof Problem && (e.status === 413 || e.status === 422)) {
      this.log.warn("the server refused the reports a claim carried; reporting them on their own:", e.message);
      return true;
    }
    if (!namesField(e, "complete", "fail")) return false;
    this.noCarry = true;
    this.log.warn("the server takes no reports on claims; reporting on their own:", e.message);
    return true;
  }

  /** Gives the carried outcomes no claim took back to their own reports, with their slots. */
  private handBack(): void {
    for (const c of this.carried.splice(0)) c.settle(undefined);
  }

  /** Whether a carried report's outcome settles its task (then forgotten at once); false: report it on its own. */
  private settled(job: Job, kind: Carried["kind"], o: ItemOutcome | undefined): boolean {
    if (!o) return false;
    if (o.outcome === "error" && !(o.problem && this.refusalEnds(job.task, kind, problemFrom(o.problem)))) return false;
    this.forget(job);
    return true;
  }

  /**
   * Whether a report's refusal ends it: the report was made already (a try
   * whose answer was lost, or the claim that carried it, saved it), or the
   * task is no longer this worker's (logged: it is dropped).
   */
  private refusalEnds(t: Task, kind: Report["kind"], e: unknown): boolean {
    if (alreadyMade(kind, e)) return true;
    if (!isHeldElsewhere(e)) return false;
    this.log.warn(`task ${t.id} no longer held by this worker; dropping it (${kind}):`, (e as Error).message);
    return true;
  }

  private free(n: number): void {
    if (n <= 0) return;
    this.running -= n;
    this.poke();
  }

  private async reregister(cause: Error): Promise<void> {
    this.log.warn("the server no longer knows this worker as alive; registering again:", cause.message);
    await this.register(false);
  }

  // Tasks.

  private start(task: Task, sent: number): void {
    let leaseMs = (this.o.leaseSeconds ?? 0) * 1000;
    if (task.lease_expires_at && task.claimed_at) leaseMs = Date.parse(task.lease_expires_at) - Date.parse(task.claimed_at);
    if (!(leaseMs > 0)) leaseMs = 300_000;
    // The server's clock ends the attempt at timeout_at; the claim's answer
    // came after claimed_at, so counting the limit from its arrival stops
    // the handler no earlier than the server does.
    let timeLimitAt: number | undefined;
    if (task.timeout_at && task.claimed_at) timeLimitAt = now() + Math.max(Date.parse(task.timeout_at) - Date.parse(task.claimed_at), 0);
    const job = new Job(task, leaseMs, sent + leaseMs, timeLimitAt);
    this.inflight.set(key(job.ref), job);
    // The handler starts once the claim loop is through the claim's answer
    // (waiting for a slot, if none is free): the outcome of a handler that
    // returns (or throws) at once may then ride the next claim.
    queueMicrotask(() => void this.work(job));
  }

  private context(job: Job): TaskContext {
    const client = this.client;
    const workerId = this.workerId;
    const reportTimeoutMs = this.o.reportTimeoutMs;
    const trace = job.task.trace;
    return {
      task: job.task,
      payload: job.task.payload,
      attempt: job.task.attempts,
      workerId,
      client,
      signal: job.ctl.signal,
      get cancelled() {
        return job.cause !== undefined;
      },
      get cause() {
        return job.cause;
      },
      get leaseDeadline() {
        return job.leaseDeadline;
      },
      leaseRemainingMs: () => job.leaseDeadline - now(),
      trace,
      traceHeaders: () => {
        const out: Record<string, string> = {};
        if (trace) {
          out["traceparent"] = trace.traceparent;
          if (trace.tracestate) out["tracestate"] = trace.tracestate;
        }
        return out;
      },
      progress: async (percent, message, details) => {
        const req: { worker_id: string; lease_id: string; percent: number; message?: string; details?: JsonValue } = {
          worker_id: workerId,
          lease_id: job.ref.lease_id,
          percent,
        };
        if (message) req.message = message;
        if (details !== undefined) req.details = details;
        await client.progress(job.task.id, req, { deadline: Date.now() + reportTimeoutMs, stop: () => job.dropped() });
      },
      spawn: async (...tasks: BatchSubmitItem[]) =>
        (await client.spawn(job.task.id, { worker_id: workerId, lease_id: job.ref.lease_id, tasks }, { signal: job.ctl.signal })).tasks,
    };
  }

  private async work(job: Job): Promise<void> {
    let result: unknown;
    let error: unknown;
    let failed = false;
    try {
      const ctx = this.context(job);
      const hook = this.o.handlerContext;
      result = hook ? await hook(ctx, async () => this.handler(ctx)) : await this.handler(ctx);
    } catch (e) {
      error = e;
      failed = true;
    } finally {
      job.handlerDone = true;
    }
    try {
      if (job.takeReporter()) await this.settle(job, result, failed ? error : undefined, failed);
    } catch (e) {
      this.log.error(`settling task ${job.task.id} failed:`, e);
      this.forget(job);
    } finally {
      if (!job.slotPassed) this.free(1);
    }
  }

  private async settle(job: Job, result: unknown, error: unknown, failed: boolean): Promise<void> {
    const t = job.task;
    const cause = job.cause;
    if (cause instanceof TaskLost) {
      this.log.warn(`dropping the outcome of lost task ${t.id}`);
      this.forget(job);
      return;
    }
    if (cause instanceof TaskTimeLimit) {
      this.log.warn(`dropping the outcome of task ${t.id}: its time limit is up and the server ends the attempt`);
      this.awaitEnd(job);
      return;
    }
    if (!failed) {
      let enqueue: BatchSubmitItem[] = [];
      if (result instanceof Next) {
        enqueue = result.enqueue;
        result = result.result;
      }
      try {
        if (result !== undefined) checkJson(result, "the handler's result");
        checkEnqueue(enqueue);
      } catch (e) {
        await this.finish(job, { kind: "fail", error: (e as Error).message, nonRetryable: true });
        return;
      }
      await this.finish(job, { kind: "complete", result: result as JsonValue | undefined, enqueue });
      return;
    }
    if (cause instanceof Shutdown) {
      await this.report(job, { kind: "release", error: `worker shut down: ${describe(error)}` });
      return;
    }
    if (cause instanceof TaskCancelled || cause instanceof TaskTimeout) {
      await this.finish(job, { kind: "fail", error: `${cause.message}: ${describe(error)}` });
      return;
    }
    if (error instanceof Snooze) {
      await this.report(job, { kind: "snooze", seconds: error.seconds });
      return;
    }
    await this.finish(job, { kind: "fail", error: describe(error), nonRetryable: error instanceof NonRetryable });
  }

  /** Reports a settled handler's completion or failure: on the next claim when it may ride one (carry), else on its own. */
  private async finish(job: Job, r: CompleteReport | FailReport): Promise<void> {
    if (await this.carry(job, r)) return;
    await this.report(job, r);
  }

  private async settleAbandoned(job: Job): Promise<void> {
    try {
      const cause = job.cause;
      if (cause instanceof Shutdown) {
        this.log.warn(`handler of task ${job.task.id} did not return in time; handing the task back`);
        await this.report(job, { kind: "release", error: "worker shut down before the handler finished" });
      } else {
        this.log.warn(`handler of task ${job.task.id} did not return after it was asked to stop; failing it`);
        await this.report(job, { kind: "fail", error: `${cause?.message ?? "stopped"}: the handler did not return` });
      }
    } finally {
      this.onBehalf--;
      this.poke();
    }
  }

  /**
   * Keeps listing a task whose time limit is up until the server says it
   * ended the attempt (a heartbeat names it lost), so that it is not taken
   * back as orphaned first; at most a few heartbeats.
   */
  private awaitEnd(job: Job): void {
    job.endingBy = now() + Math.max(3 * this.intervalMs, 5000);
  }

  private forget(job: Job): void {
    const k = key(job.ref);
    if (this.inflight.get(k) === job) this.inflight.delete(k);
    this.poke();
  }

  // Reports.

  private async report(job: Job, r: Report): Promise<void> {
    const t = job.task;
    const policy: RetryPolicy = { maxAttempts: Number.MAX_SAFE_INTEGER, baseDelayMs: 100, maxDelayMs: 5000 };
    const call = { retry: policy, deadline: Date.now() + this.o.reportTimeoutMs, stop: () => job.dropped() };
    const who = { worker_id: this.workerId, lease_id: t.lease_id ?? "" };
    try {
      try {
        switch (r.kind) {
          case "complete": {
            const req: { worker_id: string; lease_id: string; result?: JsonValue; enqueue?: BatchSubmitItem[] } = { ...who };
            if (r.result !== undefined) req.result = r.result;
            if (r.enqueue.length) req.enqueue = r.enqueue;
            await this.client.complete(t.id, req, call);
            break;
          }
          case "snooze":
            try {
              await this.client.snooze(t.id, { ...who, delaySeconds: r.seconds }, call);
            } catch (e) {
              if (!(e instanceof ValidationProblem)) throw e;
              await this.client.fail(t.id, { ...who, error: `the server refused the handler's snooze: ${e.message}` }, call);
            }
            break;
          case "release":
            await this.release(t, r.error, who, call);
            break;
          case "fail":
            await this.client.fail(t.id, { ...who, error: r.error, nonRetryable: r.nonRetryable ?? false }, call);
            break;
        }
      } catch (e) {
        if (r.kind !== "complete" || !(e instanceof ValidationProblem || e instanceof BodyTooLarge || e instanceof MalformedRequest)) throw e;
        // The server refused the result (or enqueue) itself: it would again.
        await this.client.fail(t.id, { ...who, error: `the server rejected the handler's result: ${e.message}`, nonRetryable: true }, call);
      }
    } catch (e) {
      if (e instanceof Unauthorized || e instanceof Forbidden) this.fatalStop(r.kind, e);
      else if (this.refusalEnds(t, r.kind, e)) return;
      else if (e instanceof TransportError && job.dropped()) this.log.warn(`dropping the report of lost task ${t.id} (${r.kind})`);
      else if (e instanceof Problem || e instanceof TransportError) this.log.error(`report of task ${t.id} failed (${r.kind}):`, e.message);
      else throw e;
    } finally {
      this.forget(job);
    }
  }

  private async release(t: Task, why: string, who: { worker_id: string; lease_id: string }, call: { retry: RetryPolicy; deadline: number; stop: () => boolean }): Promise<void> {
    if (!this.noRelease) {
      try {
        await this.client.release(t.id, who, call);
        return;
      } catch (e) {
        if (!isRouteMissing(e)) throw e;
        this.noRelease = true;
        this.log.warn("the server has no release call; handing tasks back by a retryable failure (it spends an attempt)");
      }
    }
    await this.client.fail(t.id, { ...who, error: why }, call);
  }

  // Heartbeats, leases and timeouts.

  private margin(leaseMs: number): number {
    return this.o.leaseMarginMs ?? Math.min(Math.max(leaseMs * 0.1, 250), 5000);
  }

  /**
   * Heartbeats every interval, and watches the leases, the task timeout and
   * the handlers asked to stop on a timer of its own: a heartbeat that hangs
   * must not keep a lease that runs out from stopping its handler.
   */
  private async supervise(done: () => boolean): Promise<void> {
    const watcher = setInterval(() => this.watch(now()), 50);
    try {
      await this.beatLoop(done);
    } finally {
      clearInterval(watcher);
    }
  }

  private async beatLoop(done: () => boolean): Promise<void> {
    let nextBeat = now() + this.intervalMs;
    let warned = false;
    while (!done()) {
      await sleep(50);
      const t = now();
      if (t < nextBeat) continue;
      nextBeat = t + this.intervalMs;
      // The tasks held and the claims awaited, taken together (one turn of
      // the event loop): a claim answered meanwhile is seen one way or the
      // other.
      const held = [...this.inflight.values()].filter((j) => !j.lost());
      const claims = [...this.claims];
      if (!warned && held.some((j) => j.leaseMs < 3 * this.intervalMs)) {
        warned = true;
        this.log.warn("leases under three heartbeat intervals: a late heartbeat may let a lease run out");
      }
      const sent = now();
      let res: HeartbeatResult;
      try {
        res = await this.beat(held.map((j) => j.ref), claims);
      } catch (e) {
        if (e instanceof WorkerDead || e instanceof WorkerNotFound) await this.reregister(e);
        else if (e instanceof Unauthorized || e instanceof Forbidden) this.fatalStop("heartbeat", e);
        else if (e instanceof Problem || e instanceof TransportError) this.log.warn("heartbeat failed:", e.message);
        else this.log.error("heartbeat failed:", e);
        continue;
      }
      this.act(res, held, sent);
    }
  }

  private async beat(refs: LeaseRef[], claims: string[]): Promise<HeartbeatResult> {
    // A slow answer still renews (from when it was sent): give a loaded
    // server time to give it rather than count the renewal lost.
    const timeoutMs = Math.max(2 * this.intervalMs, 5000);
    const o = { deadline: Date.now() + timeoutMs, timeoutMs };
    if (this.plainBeats) return this.client.heartbeat(this.workerId, undefined, o);
    if (claims.length && !this.noClaimsInFlight) {
      try {
        return await this.client.heartbeat(this.workerId, refs, { ...o, claimsInFlight: claims });
      } catch (e) {
        if (!namesField(e, "claims_in_flight")) throw e;
        // A server older than claims_in_flight: list the tasks alone.
        this.noClaimsInFlight = true;
        this.log.warn("the server takes no claims in flight in heartbeats; listing tasks alone:", e.message);
      }
    }
    try {
      return await this.client.heartbeat(this.workerId, refs, o);
    } catch (e) {
      // Only a server that does not know the task list: any other 400 (a
      // proxy's, say) must not end the renewal of every lease.
      if (!namesField(e, "tasks")) throw e;
      this.plainBeats = true;
      this.log.warn("the server takes no task lists in heartbeats; sending plain ones:", e.message);
      return this.client.heartbeat(this.workerId, undefined, o);
    }
  }

  private act(res: HeartbeatResult, listed: Job[], sent: number): void {
    for (const ref of [...res.lost, ...res.cancel]) {
      const j = this.inflight.get(key(ref));
      if (j?.endingBy !== undefined) this.forget(j); // the server ended the attempt past its time limit
    }
    const lost = new Set(res.lost.map(key));
    if (!this.plainBeats) {
      for (const j of listed) if (!lost.has(key(j.ref))) j.leaseDeadline = Math.max(j.leaseDeadline, sent + j.leaseMs);
    }
    // A task both lost and to cancel is one whose attempt the server ended
    // at its time limit: the claim's answer came late enough that the
    // server's clock got there before this worker's.
    const timedOut = new Set(res.cancel.map(key));
    for (const ref of res.lost) {
      const j = this.inflight.get(key(ref));
      if (timedOut.has(key(ref))) {
        if (j?.halt(new TaskTimeLimit("the task's time limit is up")) && !j.handlerDone) {
          this.log.warn(`task ${ref.id}: its time limit is up (the server ended its attempt); aborting its handler and dropping its outcome`);
        }
        continue;
      }
      // A job whose handler is done has its report under way (which may be
      // what finished the task): it stops retrying, if it must.
      if (j?.halt(new TaskLost("the server no longer gives this worker the task")) && !j.handlerDone) {
        this.log.warn(`task ${ref.id} lost: aborting its handler and dropping its outcome`);
      }
    }
    for (const ref of res.cancel) {
      const j = this.inflight.get(key(ref));
      if (j?.halt(new TaskCancelled("the task was cancelled by an operator"))) this.log.info(`task ${ref.id} cancelled by an operator; aborting its handler`);
    }
    if (res.drain && !this.drainRequested) {
      this.log.info("the server asked this worker to drain: claiming no more tasks");
      this.drainRequested = true;
    }
  }

  private watch(t: number): void {
    for (const j of [...this.inflight.values()]) {
      if (j.endingBy !== undefined && t >= j.endingBy) {
        this.forget(j);
        continue;
      }
      if (j.timeLimitAt !== undefined && !j.cause && t >= j.timeLimitAt) {
        if (j.halt(new TaskTimeLimit("the task's time limit is up"))) this.log.warn(`task ${j.task.id}: its time limit is up; aborting its handler and dropping its outcome`);
      }
      if (!j.cause && t >= j.leaseDeadline - this.margin(j.leaseMs)) {
        if (j.halt(new TaskLost("the lease could not be renewed before it ran out"))) {
          this.log.warn(`task ${j.task.id}: lease not renewed in time; aborting its handler and dropping its outcome`);
        }
      }
      if (this.o.taskTimeoutMs !== undefined && !j.cause && t - j.started >= this.o.taskTimeoutMs) {
        if (j.halt(new TaskTimeout(`the handler ran past taskTimeoutMs (${this.o.taskTimeoutMs} ms)`))) this.log.warn(`task ${j.task.id} ran past taskTimeoutMs; aborting its handler`);
      }
      if (j.cause && !j.handlerDone && t - j.haltedAt >= this.o.cancelGraceMs) this.abandon(j);
    }
  }

  private abandon(j: Job): void {
    if (!j.takeReporter()) return;
    if (j.lost()) {
      this.log.warn(`dropping lost task ${j.task.id}; its handler has not returned`);
      this.forget(j);
      return;
    }
    if (j.cause instanceof TaskTimeLimit) {
      this.awaitEnd(j);
      return;
    }
    this.onBehalf++;
    void this.settleAbandoned(j);
  }

  // The drain.

  private async drain(): Promise<void> {
    if (this.inflight.size) this.log.info(`draining: ${this.inflight.size} tasks in flight (drainTimeoutMs ${this.o.drainTimeoutMs})`);
    if (!(await this.waitHandlers(this.o.drainTimeoutMs))) {
      const jobs = [...this.inflight.values()];
      this.log.warn(`drain timeout: asking ${jobs.length} handlers to stop`);
      for (const j of jobs) j.halt(new Shutdown("the worker is shutting down"));
      if (!(await this.waitHandlers(this.o.cancelGraceMs))) {
        for (const j of [...this.inflight.values()]) if (!j.handlerDone) this.abandon(j);
      }
    }
    const end = now() + this.o.reportTimeoutMs + 1000;
    while ((this.inflight.size || this.onBehalf) && now() < end) await this.changed(100);
  }

  private async waitHandlers(ms: number): Promise<boolean> {
    const end = now() + ms;
    while (this.running > 0 || this.inflight.size) {
      const left = end - now();
      if (left <= 0 || this.forced) return false;
      await this.changed(Math.min(left, 100));
    }
    return true;
  }
}

function describe(e: unknown): string {
  if (e instanceof NonRetryable || e instanceof Snooze) return e.message || e.name;
  if (e instanceof Error) return e.message ? `${e.name}: ${e.message}` : e.name;
  return String(e);
}

/** Whether e is a malformed request (400) naming one of fields: what a
 * server older than them answers a request that sends them (an unknown
 * field). */
function namesField(e: unknown, ...fields: string[]): e is MalformedRequest {
  return e instanceof MalformedRequest && e.errors.some((f) => fields.includes(f.field));
}
