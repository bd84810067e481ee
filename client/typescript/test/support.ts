/**
 * What the SDK's tests share: the server they run against, the fault proxy
 * in front of it, and polling with a deadline. The tests talk to
 * TASKMASTER_URL: the fault-injecting proxy (tests/faultproxy) that
 * tests/sdks (Go) starts in front of a real server on a throwaway
 * PostgreSQL, and arm its faults at TASKMASTER_FAULTS_URL. Without it they are
 * skipped (`make test` runs them through tests/sdks).
 */
import { randomBytes } from "node:crypto";
import { Client, type ClientOptions } from "../src/index.js";

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

export async function proxyLog(): Promise<{ claims: ClaimRecord[]; reports: ReportRecord[] }> {
  const resp = await fetch(`${FAULTS}/log`);
  return (await resp.json()) as { claims: ClaimRecord[]; reports: ReportRecord[] };
}

export function serverHasRelease(): boolean {
  return process.env["TASKMASTER_SERVER_HAS_RELEASE"] === "1";
}

export const sleepMs = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
