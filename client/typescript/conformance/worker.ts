/**
 * The TypeScript SDK's side of the SDK conformance scenario (tests/sdks): a
 * Worker over the scenario's queue whose handler does what each task's
 * payload says, logging every start and success to the file the scenario
 * reads. Run as a process: `node build/conformance/worker.js`.
 *
 * Environment: TASKMASTER_URL, TASKMASTER_CONFORMANCE_QUEUE,
 * TASKMASTER_CONFORMANCE_LOG, TASKMASTER_CONFORMANCE_WORKER.
 */
import { appendFileSync } from "node:fs";
import { Client, Next, NonRetryable, Snooze, Worker, type Task } from "../src/index.js";

const env = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const queue = env("TASKMASTER_CONFORMANCE_QUEUE");
const logPath = env("TASKMASTER_CONFORMANCE_LOG");
const record = (what: string, t: Task, ...extra: string[]) => appendFileSync(logPath, [what, t.id, String(t.attempts), ...extra].join(" ") + "\n");

const quiet = { info: () => {}, warn: console.warn, error: console.error };

const worker = new Worker(
  new Client(env("TASKMASTER_URL")),
  async (ctx) => {
    const t = ctx.task;
    record("start", t);
    const { kind, i } = t.payload as { kind: string; i: number };
    const result = { i };
    switch (kind) {
      case "ok":
        await new Promise((r) => setTimeout(r, 20));
        break;
      case "retry":
        if (ctx.attempt === 1) throw new Error("transient failure");
        break;
      case "dead":
        throw new NonRetryable("permanent failure");
      case "snooze":
        if (t.snoozes === 0) throw new Snooze(1);
        break;
      case "next":
        record("done", t);
        return new Next(result, [{ queue, payload: { kind: "child", i: 1000 } }]);
      case "child":
        break;
      case "cancel": {
        const stopped = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), 60_000);
          ctx.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve(true);
          });
        });
        if (stopped) {
          record("stopped", t, ctx.cause?.name ?? "");
          throw new Error(`stopped: ${ctx.cause?.message}`);
        }
        break;
      }
      default:
        throw new NonRetryable(`unknown kind ${kind}`);
    }
    record("done", t);
    return result;
  },
  {
    workerId: env("TASKMASTER_CONFORMANCE_WORKER"),
    queues: [queue],
    concurrency: 4,
    claimWaitMs: 1000,
    drainTimeoutMs: 10_000,
    leaseSeconds: 30,
    heartbeatIntervalMs: 1000, // faster than the server asks (tests/sdks): a cancel is seen within a second
    logger: quiet,
  },
);

await worker.run();
