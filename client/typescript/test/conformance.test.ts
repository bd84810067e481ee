/**
 * The SDK conformance scenario (tests/sdks/sdks_test.go describes it), run
 * with the TypeScript SDK: this test is the producer, conformance/worker.ts
 * the worker process.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import type { BatchSubmitItem, Task } from "../src/index.js";
import { arm, client, eventually, needsServer, proxyLog, unique } from "./support.js";

const TASKS = 200;
const KINDS = ["retry", "dead", "snooze", "next", "cancel"];
const workerScript = join(dirname(fileURLToPath(import.meta.url)), "..", "conformance", "worker.js");

test("conformance scenario", { skip: needsServer, timeout: 600_000 }, async (t) => {
  const c = client();
  const queue = process.env["TASKMASTER_CONFORMANCE_QUEUE"] || unique("conformance-ts");
  const dir = mkdtempSync(join(tmpdir(), "taskmaster-conformance-"));
  const logPath = join(dir, "conformance.log");
  const procs: ChildProcess[] = [];
  t.after(() => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  });
  const startWorker = (name: string) => {
    const p = spawn(process.execPath, [workerScript], {
      env: { ...process.env, TASKMASTER_CONFORMANCE_QUEUE: queue, TASKMASTER_CONFORMANCE_LOG: logPath, TASKMASTER_CONFORMANCE_WORKER: name },
      stdio: ["ignore", "inherit", "inherit"],
    });
    procs.push(p);
    return p;
  };
  const stopWorker = async (p: ChildProcess) => {
    const exited = new Promise<number | null>((resolve) => p.once("exit", (code) => resolve(code)));
    p.kill("SIGTERM");
    const code = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r("timeout"), 30_000))]);
    assert.equal(code, 0, "the worker exits 0 after SIGTERM");
  };
  const lines = () => {
    const out = new Map<string, number>();
    if (!existsSync(logPath)) return out;
    for (const line of readFileSync(logPath, "utf8").split("\n")) {
      const f = line.split(" ");
      if (f.length < 2) continue;
      for (const k of [f[0] + " " + f[1], f[0]!]) out.set(k, (out.get(k) ?? 0) + 1);
    }
    return out;
  };

  const items: BatchSubmitItem[] = Array.from({ length: TASKS }, (_, i) => ({
    queue,
    payload: { kind: KINDS[i] ?? "ok", i },
    retry: { base_seconds: 0.1 },
  }));
  const { tasks } = await c.submitBatch(items);
  await arm("lose-claim-answers", { count: 1 });

  const a = startWorker(`conformance-ts-a-${process.pid}`);
  const cancel = tasks[4]!.id;
  await eventually(async () => (await c.get(cancel)).status === "RUNNING", "the cancel task runs");
  await c.cancel(cancel);
  await eventually(async () => (await c.get(cancel)).status === "DEAD", "the cancelled task is DEAD");

  await eventually(() => (lines().get("done") ?? 0) >= 60, "60 tasks done");
  await stopWorker(a);
  assert.deepEqual((await c.list({ queue, status: "RUNNING" })).tasks, [], "a drained worker leaves no task RUNNING");

  const b = startWorker(`conformance-ts-b-${process.pid}`);
  const all = async () => {
    const out: Task[] = [];
    for await (const tk of c.iterTasks({ queue, limit: 1000 })) out.push(tk);
    return out;
  };
  await eventually(async () => {
    const got = await all();
    return got.length === TASKS + 1 && got.every((tk) => tk.status === "DONE" || tk.status === "DEAD");
  }, "every task finished");
  await stopWorker(b);

  const byId = new Map((await all()).map((tk) => [tk.id, tk]));
  const seen = lines();
  for (const tk of tasks.slice(5)) {
    const got = byId.get(tk.id)!;
    assert.deepEqual([got.status, got.attempts], ["DONE", 1], tk.id);
    assert.equal(seen.get("start " + tk.id), 1, `task ${tk.id} started once`);
    assert.equal(seen.get("done " + tk.id), 1, `task ${tk.id} done once`);
  }
  const [retry, dead, snooze, next, cancelled] = tasks.slice(0, 5).map((tk) => byId.get(tk.id)!);
  assert.deepEqual([retry!.status, retry!.attempts, retry!.result], ["DONE", 2, { i: 0 }]);
  assert.deepEqual([dead!.status, dead!.dead_reason, dead!.attempts], ["DEAD", "non_retryable", 1]);
  assert.deepEqual([snooze!.status, snooze!.snoozes, snooze!.attempts], ["DONE", 1, 1]);
  assert.equal(next!.status, "DONE");
  const children = [...byId.values()].filter((tk) => (tk.payload as { kind?: string } | null)?.kind === "child");
  assert.equal(children.length, 1);
  assert.equal(children[0]!.status, "DONE");
  assert.deepEqual([cancelled!.status, cancelled!.dead_reason], ["DEAD", "cancelled"]);
  assert.deepEqual((await c.attempts(cancelled!.id)).map((x) => x.outcome), ["cancelled"]);

  const { claims } = await proxyLog();
  const lost = claims.filter((x) => x.lost && x.worker_id.startsWith("conformance"));
  assert.equal(lost.length, 1, "exactly one claim answer was lost");
  const same = (x: string[], y: string[]) => JSON.stringify([...x].sort()) === JSON.stringify([...y].sort());
  assert.ok(
    claims.some((x) => !x.lost && x.request_id === lost[0]!.request_id && same(x.task_ids, lost[0]!.task_ids)),
    "the claim whose answer was lost was sent again with its request id and got the same tasks",
  );
});
