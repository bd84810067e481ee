/**
 * Workflows through the SDK against a real server (tests/sdks): a handler
 * fans out with ctx.spawn and returns a Next whose join depends on the
 * children (and on itself, under ignore); the join reads every parent; the
 * run is read, retried and cancelled; replays, debounce and throttle.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { beforeEach, describe, test } from "node:test";
import {
  CancelRequested,
  Conflict,
  InvalidTransition,
  Next,
  ValidationProblem,
  Worker,
  WorkflowNotFound,
  type Client,
  type Dependency,
  type Handler,
} from "../src/index.js";
import { arm, client, eventually, firstEvent, needsServer, unique } from "./support.js";

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

describe("workflows", { skip: needsServer, concurrency: false }, () => {
  let c: Client;
  let q: string;
  beforeEach(async () => {
    await arm("reset", {});
    c = client();
    q = unique("ts-wf");
  });

  test("the event stream of a run", async () => {
    const run = randomUUID();
    // A task outside the run first: a stream that ignored the filter would stop on it.
    const ev = await firstEvent(
      (signal) => c.events({ workflows: [run], types: ["task.submitted"], signal }),
      async () => {
        await c.submit({ queue: q, payload: { outside: true } });
        await c.submitBatchToWorkflow(run, [{ queue: q, payload: { inside: true } }]);
      },
    );
    assert.equal((ev.data as { workflow_id?: string }).workflow_id, run, "only the run's events");
  });

  test("a handler fans out and its join reads every parent", async () => {
    const kid = q + "-kid";
    const join = q + "-join";
    const sums: number[] = [];
    const handler: Handler = async (ctx) => {
      if (ctx.task.queue === q) {
        const kids = await ctx.spawn(...Array.from({ length: 20 }, (_, i) => ({ queue: kid, payload: i })));
        const deps: Dependency[] = kids.map((k) => k.id);
        deps.push({ id: ctx.task.id, on_failure: "ignore" });
        return new Next("fanned out", [{ queue: join, depends_on: deps }]);
      }
      if (ctx.task.queue === kid) return (ctx.payload as number) * (ctx.payload as number);
      const parents = await ctx.client.parents(ctx.task.id);
      const sum = parents.slice(0, -1).reduce((s, p) => s + (p.result as number), 0);
      sums.push(sum);
      return sum;
    };
    const w = new Worker(c, handler, { queues: [q, kid, join], workerId: unique("ts-wf-w"), concurrency: 4, claimWaitMs: 500,
      heartbeatIntervalMs: 1000, handleSignals: false, logger: quiet });
    const running = w.run();
    const root = await c.submit({ queue: q });
    let run;
    try {
      await eventually(() => sums.length > 0, "the join runs");
      run = await eventually(async () => {
        const r = await c.workflow(root.id, { limit: 5 });
        return r.finished ? r : undefined;
      }, "the run finishes");
    } finally {
      // Stopped before the replays: it would run the replay of the root
      // before it is replayed in turn.
      w.stop();
      await running;
    }
    assert.deepEqual(sums, [2470], "the sum of the squares of 0..19, once");
    assert.deepEqual([run.total, run.status_counts.DONE], [22, 22]);
    assert.equal(run.tasks.length, 5);
    assert.equal(run.tasks[0]!.id, root.id, "oldest first");
    assert.ok(run.next_cursor);
    const more = await c.workflow(root.id, { limit: 5, cursor: run.next_cursor });
    assert.deepEqual([...new Set(more.tasks.map((t) => t.workflow_id))], [root.id]);
    assert.equal((await c.list({ workflow_id: root.id, limit: 100 })).tasks.length, 22);
    const joined = (await c.list({ queue: join })).tasks[0]!;
    const page = await c.parentsPage(joined.id, { limit: 7 });
    assert.equal(page.parents.length, 7);
    assert.ok(page.next_cursor);
    const every = await c.parents(joined.id);
    assert.equal(every.length, 21);
    assert.equal(every[20]!.id, root.id, "in the order the join named them");
    await assert.rejects(c.workflow(randomUUID()), WorkflowNotFound);

    const again = await c.replay(root.id, { payload: "again", metadata: {} });
    assert.deepEqual([again.replay_of, again.payload, again.workflow_id], [root.id, "again", again.id]);
    assert.equal((await c.bulkReplay({ queue: kid }, true)).matched, 20);
    await assert.rejects(c.replay(again.id), InvalidTransition);
  });

  test("a run that fails is retried, then cancelled", async () => {
    const b = await c.submitBatch([
      { queue: q, ref: "a", max_attempts: 1 },
      { queue: q, depends_on: [{ ref: "a", on_failure: "skip" }] },
    ]);
    const [a, dependant] = b.tasks as [typeof b.tasks[0], typeof b.tasks[0]];
    assert.equal(dependant.workflow_id, a.id);
    const worker = unique("ts-wf-hand");
    await c.register({ id: worker, queues: [q] });
    let [held] = await c.claim(worker, { limit: 1 });
    await c.fail(held!.id, { worker_id: worker, lease_id: held!.lease_id!, error: "boom", nonRetryable: true });
    const skipped = await c.get(dependant.id);
    assert.deepEqual([skipped.status, skipped.dead_reason], ["DEAD", "dependency_skipped"]);

    assert.deepEqual(await c.retryWorkflow(a.id), { id: a.id, matched: 2, changed: 2, blocked: 1, skipped: 0 });
    [held] = await c.claim(worker, { limit: 1 });
    const added = await c.submitBatchToWorkflow(a.id, [{ queue: q + "-more" }]);
    assert.equal(added.tasks[0]!.workflow_id, a.id);
    const res = await c.cancelWorkflow(a.id);
    assert.equal(res.changed, 3, "the RUNNING one asked to stop, the BLOCKED and the added one cancelled");
    const refused = await c.spawn(held!.id, { worker_id: worker, lease_id: held!.lease_id!, tasks: [{ queue: q }] }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(refused instanceof CancelRequested, String(refused));
    assert.ok(refused instanceof Conflict);
    const hb = await c.heartbeat(worker, [{ id: held!.id, lease_id: held!.lease_id! }]);
    assert.deepEqual(hb.cancel, [{ id: held!.id, lease_id: held!.lease_id! }], "its holder is told");
  });

  test("debounce and throttle", async () => {
    const first = await c.submit({ queue: q, payload: 1, unique_key: "d", debounce_seconds: 30, debounce_max_seconds: 60 });
    const second = await c.submit({ queue: q, payload: 2, unique_key: "d", debounce_seconds: 2 });
    assert.deepEqual([second.id, second.payload], [first.id, 2]);
    assert.equal(Date.parse(second.debounce_until!), Date.parse(first.created_at) + 60_000);
    const t = await c.submit({ queue: q, unique_key: "t", throttle_seconds: 60 });
    assert.equal(t.workflow_id, t.id);
    await assert.rejects(c.submit({ queue: q, throttle_seconds: 60 }), ValidationProblem); // needs a unique key
    const err = await c.submitBatch([{ queue: q, unique_key: "b", debounce_seconds: 5 as unknown as null }]).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof ValidationProblem, String(err));
    assert.deepEqual(err.errors.map((e) => e.field), ["tasks[0].debounce_seconds"]);
  });
});
