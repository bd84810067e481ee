/** The Client against a real server (through the fault proxy of tests/sdks): every call of the API, and problems as typed errors. */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer, type AddressInfo } from "node:net";
import { beforeEach, describe, test } from "node:test";
import {
  Client,
  InvalidTransition,
  KeyNotFound,
  LeaseLost,
  NotFound,
  QueueNotFound,
  ScheduleExists,
  ScheduleNotFound,
  ServerError,
  TaskNotFound,
  TransportError,
  ValidationProblem,
  WaitTimeout,
  WorkerNotFound,
  isHeldElsewhere,
  problemFrom,
  type JsonValue,
  type StreamEvent,
  type Task,
} from "../src/index.js";
import { problemFromAnswer } from "../src/http.js";
import { arm, client, eventually, firstEvent, needsServer, sleepMs, unique } from "./support.js";

describe("client", { skip: needsServer }, () => {
  let c: Client;
  let q: string;
  beforeEach(async () => {
    await arm("reset", {});
    c = client();
    q = unique("ts-client");
  });

  test("submit with every field, get, list and iterate", async () => {
    const soon = new Date(Date.now() + 3600_000);
    const t = await c.submit({
      queue: q, payload: { to: "a@example.com" }, priority: 5, max_attempts: 4, tags: ["eu"], run_at: soon,
      deadline: new Date(soon.getTime() + 86_400_000), idempotency_key: "k-1", unique_key: "u-1",
      retry: { base_seconds: 0.5, max_seconds: 60, jitter: "full" }, group_key: "tenant-7",
      metadata: { tenant: "acme" }, timeout_seconds: 30,
    });
    assert.deepEqual([t.status, t.priority, t.max_attempts, t.tags], ["PENDING", 5, 4, ["eu"]]);
    assert.deepEqual([t.idempotency_key, t.unique_key, t.group_key], ["k-1", "u-1", "tenant-7"]);
    assert.deepEqual(t.retry, { base_seconds: 0.5, max_seconds: 60, jitter: "full" });
    assert.deepEqual([t.metadata, t.timeout_seconds], [{ tenant: "acme" }, 30]);
    assert.deepEqual((await c.list({ queue: q, metadata: { tenant: "acme" } })).tasks.map((x) => x.id), [t.id]);
    assert.equal(Date.parse(t.run_at), soon.getTime());
    assert.equal((await c.submit({ queue: q, payload: { other: true }, idempotency_key: "k-1" })).id, t.id);
    const got = await c.get(t.id);
    assert.deepEqual([got.payload, got.depends_on, got.blocked_by], [{ to: "a@example.com" }, [], []]);

    const more = await c.submitBatch(Array.from({ length: 5 }, (_, i) => ({ queue: q, payload: { i } })));
    assert.deepEqual(more.created, [true, true, true, true, true]);
    const page = await c.list({ queue: q, limit: 2 });
    assert.equal(page.tasks.length, 2);
    assert.ok(page.next_cursor);
    const every: Task[] = [];
    for await (const x of c.iterTasks({ queue: q, limit: 2 })) every.push(x);
    assert.equal(every.length, 6);
    assert.equal(new Set(every.map((x) => x.id)).size, 6, "no task twice across pages");
    assert.equal(every[0]!.id, more.tasks.at(-1)!.id, "newest first");
    assert.equal((await c.list({ queue: q, status: "PENDING", limit: 100 })).tasks.length, 6);
  });

  test("problems are typed", async () => {
    await assert.rejects(c.submitBatch([{ queue: q }, { queue: "bad queue", max_attempts: 0 }]), (e: unknown) => {
      assert.ok(e instanceof ValidationProblem);
      assert.deepEqual(new Set(e.errors.map((f) => f.field)), new Set(["tasks[1].queue", "tasks[1].max_attempts"]));
      assert.equal(e.status, 422);
      assert.equal(e.slug, "validation-error");
      assert.ok(e.correlationId);
      return true;
    });
    await assert.rejects(c.get(randomUUID()), (e: unknown) => e instanceof TaskNotFound && e instanceof NotFound);
    const t = await c.submit({ queue: q });
    await assert.rejects(c.retry(t.id), (e: unknown) => e instanceof InvalidTransition && e.currentStatus === "PENDING");
    await assert.rejects(c.queue(unique("nothing")), QueueNotFound);
    const worker = unique("ts-hand");
    await c.register({ id: worker, queues: [q] });
    const [claimed] = await c.claim(worker, { limit: 1 });
    await assert.rejects(c.complete(claimed!.id, { worker_id: worker, lease_id: randomUUID() }), (e: unknown) => e instanceof LeaseLost && e.currentStatus === "RUNNING");
    await assert.rejects(c.heartbeat(unique("ghost"), []), WorkerNotFound);
  });

  test("the worker protocol by hand", async () => {
    const worker = unique("ts-hand");
    const reg = await c.register({ id: worker, queues: [q], tags: ["gpu"] });
    assert.equal(reg.created, true);
    assert.ok(reg.heartbeat_interval_seconds > 0);
    assert.equal((await c.register({ id: worker, queues: [q], tags: ["gpu"] })).created, false);
    assert.deepEqual(await c.claim(worker, { limit: 5 }), []);

    const waiting = c.claim(worker, { waitMs: 10_000, lease_seconds: 60 });
    const b = await c.submitBatch([
      { queue: q, payload: { step: "a" }, ref: "a" },
      { queue: q, payload: { step: "b" }, ref: "b", depends_on: ["a"] },
    ]);
    const got = await waiting;
    assert.deepEqual(got.map((t) => t.id), [b.tasks[0]!.id], "a waiting claim wakes when a task arrives");
    const a = got[0]!;
    assert.equal((await c.get(b.tasks[1]!.id)).status, "BLOCKED");
    const hb = await c.heartbeat(worker, [{ id: a.id, lease_id: a.lease_id! }]);
    assert.deepEqual([hb.lost, hb.cancel, hb.drain], [[], [], false]);
    assert.ok((await c.extend(a.id, { worker_id: worker, lease_id: a.lease_id!, lease_seconds: 120 })).lease_expires_at);
    const done = await c.complete(a.id, { worker_id: worker, lease_id: a.lease_id!, result: { ok: 1 }, enqueue: [{ queue: q, payload: { step: "c" } }] });
    assert.equal(done.status, "DONE");
    assert.equal(done.enqueued?.length, 1);

    const tasks = await c.claim(worker, { limit: 10 });
    assert.deepEqual(new Set(tasks.map((t) => t.id)), new Set([b.tasks[1]!.id, done.enqueued![0]!.id]));
    assert.deepEqual((await c.parents(b.tasks[1]!.id)).map((p) => p.payload), [{ step: "a" }]);
    const bt = tasks.find((t) => t.id === b.tasks[1]!.id)!;
    const ct = tasks.find((t) => t.id !== b.tasks[1]!.id)!;
    const outcomes = await c.completeBatch(worker, [
      { id: bt.id, lease_id: bt.lease_id!, result: { n: 2 } },
      { id: ct.id, lease_id: randomUUID() },
    ]);
    assert.deepEqual(outcomes.map((o) => o.outcome), ["done", "error"]);
    assert.equal(outcomes[1]!.problem?.type, "urn:problem-type:taskmaster:lease-lost");
    const snoozed = await c.snooze(ct.id, { worker_id: worker, lease_id: ct.lease_id!, delaySeconds: 1 });
    assert.deepEqual([snoozed.status, snoozed.snoozes], ["PENDING", 1]);
    const again = await eventually(async () => {
      const x = await c.claim(worker, { limit: 1 });
      return x.length ? x : undefined;
    }, "the snoozed task comes back");
    const failed = await c.failBatch(worker, [{ id: again[0]!.id, lease_id: again[0]!.lease_id!, error: "x".repeat(70_000), nonRetryable: true }]);
    assert.deepEqual(failed.map((o) => o.outcome), ["dead"]);
    assert.ok(failed[0]!.task?.last_error?.endsWith("...(truncated)"));
    assert.deepEqual((await c.attempts(again[0]!.id)).map((x) => x.outcome), ["snoozed", "failed"]);
    assert.ok((await c.workers()).some((w) => w.id === worker));
    assert.equal((await c.drain(worker)).draining, true);
    assert.equal((await c.heartbeat(worker, [])).drain, true);
  });

  test("a claim carries the worker's reports", async () => {
    const worker = unique("ts-hand");
    await c.register({ id: worker, queues: [q] });
    const b = await c.submitBatch([0, 1, 2].map((i) => ({ queue: q, payload: { i } })));
    const [x, y] = await c.claim(worker, { limit: 2 });
    const reports = {
      complete: [{ id: x!.id, lease_id: x!.lease_id!, result: { n: 1 } }],
      fail: [{ id: y!.id, lease_id: y!.lease_id!, error: "boom", nonRetryable: true }],
    };
    const requestId = randomUUID();
    const got = await c.claimReporting(worker, { ...reports, limit: 5, request_id: requestId });
    assert.deepEqual(got.completed.map((o) => [o.id, o.outcome, o.task?.status, o.task?.result]), [[x!.id, "done", "DONE", { n: 1 }]]);
    assert.deepEqual(got.failed.map((o) => [o.id, o.outcome, o.task?.status, o.task?.dead_reason, o.task?.last_error]), [[y!.id, "dead", "DEAD", "non_retryable", "boom"]]);
    const third = b.tasks.find((t) => t.id !== x!.id && t.id !== y!.id)!;
    assert.deepEqual([got.tasks.map((t) => t.id), got.truncated], [[third.id], false], "then it claims");

    // The same request again, as after a lost answer: the reports were
    // delivered (invalid-transition, with the status they made), and the
    // claim answers with the same task under the same lease.
    const again = await c.claimReporting(worker, { ...reports, limit: 5, request_id: requestId });
    assert.deepEqual(again.completed.map((o) => [o.id, o.outcome]), [[x!.id, "error"]]);
    const p = problemFrom(again.completed[0]!.problem!);
    assert.ok(p instanceof InvalidTransition, p.message);
    assert.equal(p.currentStatus, "DONE");
    const f = problemFrom(again.failed[0]!.problem!);
    assert.deepEqual([again.failed[0]!.outcome, f instanceof InvalidTransition, f.currentStatus], ["error", true, "DEAD"]);
    assert.deepEqual(again.tasks.map((t) => [t.id, t.lease_id]), got.tasks.map((t) => [t.id, t.lease_id]));
    assert.deepEqual((await c.attempts(x!.id)).map((a) => a.outcome), ["completed"], "completed once");
    assert.deepEqual((await c.get(x!.id)).result, { n: 1 });

    // Without failures, `failed` is empty; a task not held is the item's own error.
    const t = got.tasks[0]!;
    const last = await c.claimReporting(worker, { complete: [{ id: t.id, lease_id: t.lease_id! }, { id: y!.id, lease_id: randomUUID() }] });
    assert.deepEqual([last.tasks, last.failed, last.completed.map((o) => o.outcome)], [[], [], ["done", "error"]]);
    assert.ok(isHeldElsewhere(problemFrom(last.completed[1]!.problem!)));
    assert.equal((await c.get(t.id)).status, "DONE");
  });

  test("waiting for results", async () => {
    const worker = unique("ts-hand");
    await c.register({ id: worker, queues: [q] });
    const work = async (result: JsonValue) => {
      const [t] = await c.claim(worker, { limit: 1, waitMs: 10_000 });
      await c.complete(t!.id, { worker_id: worker, lease_id: t!.lease_id!, result });
    };
    const working = work({ sum: 3 });
    const done = await c.submitAndWait({ queue: q, payload: { a: 1, b: 2 } }, { timeoutMs: 60_000 });
    await working;
    assert.deepEqual([done.status, done.result], ["DONE", { sum: 3 }]);

    const pending = await c.submit({ queue: q });
    const started = Date.now();
    assert.equal((await c.get(pending.id, { waitMs: 300 })).status, "PENDING", "the wait ends with the task as it is");
    assert.ok(Date.now() - started >= 300);
    await assert.rejects(c.wait(pending.id, { timeoutMs: 500 }), (e: unknown) => e instanceof WaitTimeout && e.task.id === pending.id && e.task.status === "PENDING");
    const late = work("late");
    const finished = await c.wait(pending.id, { timeoutMs: 60_000 });
    await late;
    assert.deepEqual([finished.status, finished.result], ["DONE", "late"]);
    assert.throws(() => c.get(pending.id, { waitMs: 61_000 }), RangeError);
  });

  test("progress and the events of chosen tasks", async () => {
    const worker = unique("ts-hand");
    await c.register({ id: worker, queues: [q] });
    const chosen = (await c.submit({ queue: q, payload: { i: 0 } })).id;
    const other = (await c.submit({ queue: q, payload: { i: 1 } })).id;
    const held = new Map((await c.claim(worker, { limit: 2 })).map((t) => [t.id, t]));
    assert.deepEqual(new Set(held.keys()), new Set([chosen, other]));
    await assert.rejects(c.progress(chosen, { worker_id: worker, lease_id: randomUUID(), percent: 10 }), LeaseLost);

    const ctl = new AbortController();
    const seen: StreamEvent[] = [];
    const reading = (async () => {
      for await (const ev of c.events({ taskIds: [chosen], signal: ctl.signal })) {
        seen.push(ev);
        if (ev.data.type === "task.progress") return;
      }
    })();
    let readingDone = false;
    void reading.finally(() => (readingDone = true));
    // The stream starts at the end of the outbox: report until it sees one
    // (task.progress events: at most one a second per task).
    let n = 0;
    const deadline = Date.now() + 60_000;
    while (!readingDone && Date.now() < deadline) {
      n++;
      for (const id of [other, chosen]) await c.progress(id, { worker_id: worker, lease_id: held.get(id)!.lease_id!, percent: n, message: `step ${n}`, details: { n } });
      await sleepMs(1100);
    }
    await reading;
    ctl.abort();
    assert.deepEqual(new Set(seen.map((ev) => (ev.data as { task_id?: string }).task_id)), new Set([chosen]), "only the chosen task's events");
    assert.equal(seen.at(-1)!.data.type, "task.progress");
    const p = (await c.get(chosen)).progress!;
    assert.deepEqual([p.percent, p.message, p.details], [n, `step ${n}`, { n }]);
    assert.ok(p.updated_at);
  });

  test("operators", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await c.submit({ queue: q, payload: { i }, group_key: "g1" })).id);
    assert.equal((await c.cancel(ids[0]!)).status, "DEAD");
    assert.equal((await c.retry(ids[0]!)).status, "PENDING");
    const dry = await c.bulkCancel({ queue: q, group_key: "g1" }, true);
    assert.deepEqual([dry.matched, dry.dry_run, dry.changed], [3, true, undefined]);
    const real = await c.bulkCancel({ queue: q });
    assert.deepEqual([real.matched, real.changed], [3, 3]);
    assert.equal((await c.bulkRetry({ queue: q, status: "DEAD", dead_reason: "cancelled" }, true)).matched, 3);
    assert.equal((await c.bulkRetry({ queue: q })).changed, 3);
    assert.equal((await c.purgeQueue(q, { dry_run: true })).result?.matched, 3);
    assert.equal((await c.purgeQueue(q, { status: "PENDING" })).result?.removed, 3);
    await c.submit({ queue: q, metadata: { tenant: "acme", region: "eu" } });
    await c.submit({ queue: q, metadata: { tenant: "acme", region: "us" } });
    assert.equal((await c.bulkCancel({ queue: q, metadata: { tenant: "acme", region: "eu" } }, true)).matched, 1, "every pair must hold");
    assert.equal((await c.bulkCancel({ queue: q, metadata: { tenant: "acme" } })).changed, 2);

    const s = await c.updateQueue(q, { max_running: 5, rate_limit: { per_second: 10, burst: 20 }, max_running_per_group: 2 });
    assert.deepEqual([s.max_running, s.rate_limit, s.max_running_per_group], [5, { per_second: 10, burst: 20 }, 2]);
    assert.equal((await c.pauseQueue(q)).paused, true);
    assert.equal((await c.resumeQueue(q)).paused, false);
    const cleared = await c.updateQueue(q, { max_running: null, rate_limit: null });
    assert.deepEqual([cleared.max_running, cleared.rate_limit, cleared.max_running_per_group], [null, null, 2]);
    const detail = await c.queue(q);
    assert.deepEqual([detail.queue, detail.settings.max_running_per_group], [q, 2]);
    assert.ok((await c.queues({ prefix: "ts-client-" })).some((x) => x.queue === q));
    assert.deepEqual((await c.listQueues({ pattern: q, limit: 1 })).queues.map((x) => x.queue), [q]);
    await assert.rejects(c.updateQueue(q, {}), ValidationProblem);
  });

  test("schedules", async () => {
    const name = unique("ts-sched");
    const s = await c.createSchedule({ name, cron: "@every 1h", timezone: "Europe/Paris", overlap: "allow", task: { queue: q, payload: { full: true }, max_attempts: 2 } });
    assert.deepEqual([s.name, s.timezone, s.overlap, s.task.max_attempts], [name, "Europe/Paris", "allow", 2]);
    await assert.rejects(c.createSchedule({ name, cron: "@daily", task: { queue: q } }), ScheduleExists);
    assert.ok((await c.schedules()).some((x) => x.name === name));
    assert.equal((await c.pauseSchedule(name)).next_run_at, null);
    assert.ok((await c.resumeSchedule(name)).next_run_at);
    assert.equal((await c.updateSchedule(name, { cron: "@daily" })).cron, "@daily");
    assert.equal((await c.deleteSchedule(name)).name, name);
    await assert.rejects(c.schedule(name), ScheduleNotFound);
  });

  test("keys", async () => {
    const k = await c.createKey({ name: unique("ts-key"), scopes: ["produce", "read"], queues: ["emails-*"], expires_in_seconds: 3600 });
    assert.ok(k.key.startsWith("tmk_"));
    assert.ok(k.expires_at);
    assert.ok((await c.keys()).some((x) => x.id === k.id));
    assert.ok((await c.revokeKey(k.id)).revoked_at);
    await assert.rejects(c.revokeKey(randomUUID()), KeyNotFound);
  });

  test("events", async () => {
    const ev = await firstEvent((signal) => c.events({ queues: [q], types: ["task.*"], signal }), () => c.submit({ queue: q }));
    assert.equal(ev.data.type, "task.submitted");
    assert.equal((ev.data as { queue?: string }).queue, q);
    assert.ok(ev.id);
  });
});

describe("without a server", () => {
  test("a refused connection is not sent", async () => {
    // A port nothing listens on: one the system just gave and took back.
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    const { port } = srv.address() as AddressInfo;
    await new Promise((r) => srv.close(r));
    const c = new Client(`http://127.0.0.1:${port}`, { retry: { maxAttempts: 2, baseDelayMs: 10, maxDelayMs: 10 } });
    await assert.rejects(c.submit({ queue: "q" }), (e: unknown) => e instanceof TransportError && e.sent === false);
  });

  test("a foreign answer becomes a problem", () => {
    const p = problemFromAnswer(502, new Headers({ "content-type": "text/html" }), "<h1>bad gateway</h1>", "/tasks/v1", "c");
    assert.ok(p instanceof ServerError);
    assert.deepEqual([p.type, p.status, p.detail], ["about:blank", 502, "<h1>bad gateway</h1>"]);
  });

  test("a claim's completions enqueue nothing: refused before sending", async () => {
    let sent = 0;
    const c = new Client("http://127.0.0.1:9", {
      fetch: () => {
        sent++;
        return Promise.reject(new Error("not sent"));
      },
    });
    const item = { id: randomUUID(), lease_id: randomUUID(), enqueue: [{ queue: "next" }] };
    await assert.rejects(c.claimReporting("w1", { complete: [item] }), (e: unknown) => e instanceof TypeError && /complete\[0\].*enqueue/.test(e.message));
    assert.equal(sent, 0);
  });

  test("bad base URLs are refused", () => {
    assert.throws(() => new Client("ftp://x"), TypeError);
  });
});
