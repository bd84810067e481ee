/**
 * Push queues and rate limits by key (issue 27) against a real server
 * (tests/sdks): a queue's push settings with their secret shown once and
 * rotated with an overlap, real deliveries to an endpoint this test runs
 * whose signatures verifySignature checks, attempts' HTTP statuses, the
 * queue's deliveries; named limits and per-group rate limits.
 */
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, beforeEach, describe, test } from "node:test";
import {
  Client,
  Conflict,
  LimitInUse,
  LimitNotFound,
  NotFound,
  SignatureExpired,
  SignatureMalformed,
  SignatureMismatch,
  ValidationProblem,
  verifySignature,
  type Task,
} from "../src/index.js";
import { arm, client, eventually, needsServer, unique } from "./support.js";

interface Delivery {
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A push endpoint on 127.0.0.1 (the server under test allows it): it records every delivery and answers the status the payload's "answer" names (200 with a JSON body by default). */
class Endpoint {
  readonly deliveries: Delivery[] = [];
  private server: Server | undefined;
  url = "";

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const body = Buffer.concat(chunks);
        this.deliveries.push({ headers: req.headers, body });
        const payload = body.length ? (JSON.parse(body.toString("utf8")) as unknown) : null;
        const status = payload && typeof payload === "object" && "answer" in payload ? Number((payload as { answer: number }).answer) : 200;
        res.writeHead(status, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ handled: req.headers["taskmaster-task-id"] }));
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  of(id: string): Delivery[] {
    return this.deliveries.filter((d) => d.headers["taskmaster-task-id"] === id);
  }

  async close(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((r) => this.server?.close(r));
  }
}

const signature = (d: Delivery) => String(d.headers["taskmaster-signature"] ?? "");

describe("push queues and limits", { skip: needsServer, concurrency: false }, () => {
  let c: Client;
  let q: string;
  let endpoint: Endpoint;
  beforeEach(async () => {
    await arm("reset", {});
    c = client();
    q = unique("ts-push");
    endpoint = new Endpoint();
    await endpoint.start();
  });
  afterEach(() => endpoint.close());

  const delivered = (t: Task) => c.wait(t.id, { timeoutMs: 60_000 });

  test("deliveries are signed and the secret rotates with an overlap", async () => {
    const s = await c.updateQueue(q, { push: { url: endpoint.url, timeout_seconds: 5, max_in_flight: 2, headers: { Authorization: "Bearer endpoint-token" } } });
    const secret = s.push!.secret!;
    assert.match(secret, /^tmpush_/);
    assert.deepEqual([s.push!.url, s.push!.timeout_seconds, s.push!.max_in_flight, s.push!.header_names], [endpoint.url, 5, 2, ["Authorization"]]);
    assert.deepEqual(s.push!.non_retryable_statuses, [400, 401, 403, 404, 410, 422]);
    const shown = (await c.queue(q)).settings.push!;
    assert.deepEqual([shown.url, shown.header_names], [endpoint.url, ["Authorization"]]);
    assert.ok(!("secret" in shown), "the secret is shown once, in the change's answer");

    const t = await delivered(await c.submit({ queue: q, payload: { n: 1 } }));
    assert.deepEqual([t.status, t.result], ["DONE", { handled: t.id }], t.last_error ?? "");
    const [d] = endpoint.of(t.id);
    assert.ok(d);
    assert.deepEqual(
      [d.headers["taskmaster-task-id"], d.headers["taskmaster-attempt"], d.headers["taskmaster-queue"], d.headers["authorization"], d.headers["content-type"]],
      [t.id, "1", q, "Bearer endpoint-token", "application/json"],
    );
    assert.deepEqual(JSON.parse(d.body.toString("utf8")), { n: 1 });
    verifySignature(secret, signature(d), d.body); // a real signature the server made
    verifySignature(secret, signature(d), d.body.toString("utf8")); // the same body as a string
    assert.throws(() => verifySignature(secret, signature(d), Buffer.concat([d.body, Buffer.from(" ")])), SignatureMismatch);
    assert.throws(() => verifySignature("tmpush_not-the-secret", signature(d), d.body), SignatureMismatch);
    assert.throws(() => verifySignature(secret, signature(d), d.body, { now: Date.now() + 301_000 }), SignatureExpired);
    verifySignature(secret, signature(d), d.body, { now: Date.now() + 3_000_000, toleranceSeconds: 3600 });
    for (const bad of ["", "t=1", "v1=ab", "t=x,v1=ab", "garbage"]) assert.throws(() => verifySignature(secret, bad, d.body), SignatureMalformed, bad);
    assert.deepEqual((await c.attempts(t.id)).map((a) => a.http_status), [200]);

    const r = await c.updateQueue(q, { push: { rotate_secret: true, secret_overlap_seconds: 600 } });
    const rotated = r.push!.secret!;
    assert.notEqual(rotated, secret);
    assert.ok(r.push!.previous_secret_expires_at);
    assert.equal(r.push!.url, endpoint.url, "members left out keep their values");
    // The dispatchers read the change within TASKMASTER_PUSH_REFRESH_MS:
    // deliver until one is signed with both secrets (the overlap).
    const twice = await eventually(async () => {
      const t2 = await delivered(await c.submit({ queue: q, payload: { n: 2 } }));
      const [d2] = endpoint.of(t2.id);
      return d2 && (signature(d2).match(/v1=/g) ?? []).length === 2 ? d2 : undefined;
    }, "a delivery signed with both secrets", 60_000);
    verifySignature(rotated, signature(twice), twice.body);
    verifySignature(secret, signature(twice), twice.body);
  });

  test("an answer in non_retryable_statuses dead-letters and is recorded", async () => {
    await c.updateQueue(q, { push: { url: endpoint.url, non_retryable_statuses: [404, 410] } });
    const t = await delivered(await c.submit({ queue: q, payload: { answer: 404 }, max_attempts: 5 }));
    assert.deepEqual([t.status, t.dead_reason], ["DEAD", "non_retryable"]);
    assert.match(t.last_error ?? "", /HTTP 404/);
    assert.deepEqual((await c.attempts(t.id)).map((a) => [a.http_status, a.outcome]), [[404, "failed"]]);
    const detail = await eventually(async () => {
      const d = await c.queue(q);
      return d.deliveries?.recent ? d : undefined;
    }, "the dispatcher reports the queue's deliveries");
    assert.deepEqual([detail.deliveries!.statuses["404"], detail.deliveries!.last_status], [1, 404]);
    assert.deepEqual(Object.keys(detail.deliveries!.latency_ms).sort(), ["p50", "p99"]);

    const s = await c.updateQueue(q, { push: { headers: null, non_retryable_statuses: null } });
    assert.equal(s.push!.secret, undefined, "no secret without a creation or a rotation");
    assert.deepEqual([s.push!.header_names, s.push!.non_retryable_statuses], [[], [400, 401, 403, 404, 410, 422]]);
    assert.equal((await c.updateQueue(q, { push: null })).push, null, "push turned off");
    await assert.rejects(c.updateQueue(q, { push: { url: "http://push.example.com/hook" } }), (e: unknown) => e instanceof ValidationProblem && e.errors.some((f) => f.field === "push.url"));
  });

  test("named limits and per-group rate limits", async () => {
    const name = unique("ts-limit");
    const made = await c.putLimit(name, { per_second: 5, burst: 10, max_running: 3 });
    assert.deepEqual([made.created, made.name, made.per_second, made.burst, made.max_running, made.queues], [true, name, 5, 10, 3, []]);
    const again = await c.putLimit(name, { max_running: 4 });
    assert.deepEqual([again.created, again.per_second, again.burst, again.max_running], [false, null, null, 4], "a put replaces every value");
    await c.putLimit(name, { per_second: 2 });

    const s = await c.updateQueue(q, { limits: [name], rate_limit_per_group: { per_second: 1, burst: 2 } });
    assert.deepEqual([s.limits, s.rate_limit_per_group], [[name], { per_second: 1, burst: 2 }]);
    const got = await c.limit(name);
    assert.deepEqual([got.queues, got.per_second, got.burst], [[q], 2, 2]);
    assert.ok((await c.limits()).some((x) => x.name === name));
    const settings = (await c.queue(q)).settings;
    assert.deepEqual([settings.limits, settings.rate_limit_per_group?.per_second], [[name], 1]);

    await assert.rejects(c.deleteLimit(name), (e: unknown) => e instanceof LimitInUse && e instanceof Conflict);
    await assert.rejects(c.updateQueue(q, { limits: [unique("no-such-limit")] }), ValidationProblem);
    const cleared = await c.updateQueue(q, { limits: null, rate_limit_per_group: null });
    assert.deepEqual([cleared.limits, cleared.rate_limit_per_group], [[], null]);
    const gone = await c.deleteLimit(name);
    assert.deepEqual([gone.name, gone.per_second], [name, 2]);
    await assert.rejects(c.limit(name), (e: unknown) => e instanceof LimitNotFound && e instanceof NotFound);
  });
});
