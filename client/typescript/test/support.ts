/**
 * What the SDK's tests share: the server they run against, the fault proxy
 * in front of it, and polling with a deadline. The tests talk to
 * TASKMASTER_URL: the fault-injecting proxy (tests/faultproxy) that
 * tests/sdks (Go) starts in front of a real server on a throwaway
 * PostgreSQL, and arm its faults at TASKMASTER_FAULTS_URL. Without it they are
 * skipped (`make test` runs them through tests/sdks).
 */
import { randomBytes } from "node:crypto";
import { Client, type ClientOptions, type StreamEvent } from "../src/index.js";

export const URL = process.env["TASKMASTER_URL"] ?? "";
export const FAULTS = process.env["TASKMASTER_FAULTS_URL"] ?? "";
export const WAIT_MS = 120_000;

/** The skip option of node:test for tests that need a server. */
export const needsServer = URL && FAULTS ? false : "TASKMASTER_URL is not set: run through tests/sdks (go test ./tests/sdks -run TestTypeScriptSDK)";

export function client(o: ClientOptions = {}): Client {
  return new Client(URL, o);
}

export function unique(prefix: string): string {
  return `${prefix}-${randomBytes(6).toString("hex")}`;
}

export async function eventually<T>(cond: () => Promise<T> | T, what: string, timeoutMs = WAIT_MS): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * The first event of an event stream, calling `act` every half second
 * until it comes (a stream starts at the end of the outbox, so what
 * happened before it connected is not in it); then stops the stream.
 */
export async function firstEvent(events: (signal: AbortSignal) => AsyncGenerator<StreamEvent>, act: () => Promise<unknown>): Promise<StreamEvent> {
  const ctl = new AbortController();
  const stream = events(ctl.signal);
  const first = stream.next();
  let seen: IteratorResult<StreamEvent> | undefined;
  void first.then((r) => (seen = r));
  const deadline = Date.now() + 60_000;
  while (!seen && Date.now() < deadline) {
    await act();
    await new Promise((r) => setTimeout(r, 500));
  }
  const ev = await first;
  ctl.abort();
  await stream.return(undefined);
  if (ev.done) throw new Error("the event stream ended without an event");
  return ev.value;
}

/** Arms a fault of the proxy (tests/sdks/faults_test.go). */
export async function arm(fault: string, body: Record<string, unknown>): Promise<void> {
  const resp = await fetch(`${FAULTS}/${fault}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  if (resp.status !== 204) throw new Error(`arm ${fault}: ${resp.status}`);
}

export interface ClaimRecord {
  request_id: string;
  worker_id: string;
  status: number;
  task_ids: string[];
  lost: boolean;
}

export interface ReportRecord {
  task_id: string;
  action: string;
  lease_id: string;
  status: number;
  faulted: boolean;
}

/** What went through the proxy: claims and reports, and the proxy's actions counted by route name and action ("claim delay_answer"). */
export interface ProxyLog {
  claims: ClaimRecord[];
  reports: ReportRecord[];
  actions: Record<string, number>;
}

export async function proxyLog(): Promise<ProxyLog> {
  const resp = await fetch(`${FAULTS}/log`);
  return (await resp.json()) as ProxyLog;
}

export function serverHasRelease(): boolean {
  return process.env["TASKMASTER_SERVER_HAS_RELEASE"] === "1";
}

export const sleepMs = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
