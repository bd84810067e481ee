import { randomBytes } from "node:crypto";
import { Problem, TransportError, problemFrom } from "./errors.js";
import type { ProblemDocument } from "./types.js";

export const CORRELATION_HEADER = "X-Correlation-Id";

/**
 * Bounds the retries of one call. Transport errors and 5xx answers are
 * retried with jittered exponential backoff (writes that could be
 * duplicated only when they surely did not reach the server); 429 after
 * the server's Retry-After; other 4xx answers never.
 */
export interface RetryPolicy {
  /** The most tries of one call, the first included (1: no retries). */
  maxAttempts: number;
  /** Milliseconds before the first retry; doubled per retry. */
  baseDelayMs: number;
  /** Caps one delay (and a Retry-After the server asks for). */
  maxDelayMs: number;
}

/** 5 tries, 100 ms doubling to at most 5 s, each jittered down to half. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = Object.freeze({ maxAttempts: 5, baseDelayMs: 100, maxDelayMs: 5000 });

/** The wait before retry number n (from 1). */
export function retryDelay(p: RetryPolicy, n: number): number {
  const d = Math.min(p.maxDelayMs, p.baseDelayMs * 2 ** Math.min(n - 1, 60));
  return d / 2 + (Math.random() * d) / 2;
}

/** When a call may be sent again. */
export type RetryMode = "safe" | "unsent";

export interface CallOptions {
  query?: Record<string, string | number | boolean | string[] | undefined | null>;
  body?: unknown;
  /** "safe" (default): repeating cannot harm; "unsent": only if surely not sent, or 503/429. */
  mode?: RetryMode;
  /** How long the server may hold the answer back (a long poll), in ms. */
  waitMs?: number;
  retry?: RetryPolicy;
  /** Ends the retries: an epoch in ms (Date.now()). */
  deadline?: number;
  /** Ends the retries when it returns true. */
  stop?: () => boolean;
  /** Aborts the call. */
  signal?: AbortSignal;
  /** Replaces the client's timeout for each try, in ms. */
  timeoutMs?: number;
}

export interface Answer {
  status: number;
  data: unknown;
  headers: Headers;
}

export function newId(prefix = "tmc-"): string {
  return prefix + randomBytes(16).toString("hex");
}

export function parseRetryAfter(v: string | null): number | undefined {
  if (!v) return undefined;
  const n = Number(v.trim());
  return Number.isFinite(n) && n > 0 ? n : undefined;
}

const UNSENT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT"]);

function errorCode(e: unknown): string | undefined {
  let cur: unknown = e;
  for (let i = 0; i < 5 && cur && typeof cur === "object"; i++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === "string") return c;
    cur = (cur as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Sleeps ms, waking early when stop() turns true or signal aborts; resolves whether it slept the whole time. */
export function sleep(ms: number, stop?: () => boolean, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted || stop?.()) return resolve(false);
    let poll: NodeJS.Timeout | undefined;
    const done = (full: boolean) => {
      clearTimeout(timer);
      if (poll) clearInterval(poll);
      signal?.removeEventListener("abort", onAbort);
      resolve(full);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), Math.max(0, ms));
    if (stop) poll = setInterval(() => stop() && done(false), 50);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** An AbortSignal that aborts when any of signals does (AbortSignal.any is Node 20+). */
export function anySignal(signals: Array<AbortSignal | undefined>): { signal: AbortSignal; dispose: () => void } {
  const ctl = new AbortController();
  const cleanups: Array<() => void> = [];
  for (const s of signals) {
    if (!s) continue;
    if (s.aborted) {
      ctl.abort(s.reason);
      break;
    }
    const on = () => ctl.abort(s.reason);
    s.addEventListener("abort", on, { once: true });
    cleanups.push(() => s.removeEventListener("abort", on));
  }
  return { signal: ctl.signal, dispose: () => cleanups.forEach((c) => c()) };
}

export interface TransportOptions {
  apiKey?: string;
  timeoutMs: number;
  retry: RetryPolicy;
  userAgent: string;
  fetch: typeof fetch;
}

/** Sends requests to one server. */
export class Transport {
  readonly baseUrl: string;
  constructor(
    baseUrl: string,
    readonly options: TransportOptions,
  ) {
    let u: URL;
    try {
      u = new URL(baseUrl);
    } catch {
      throw new TypeError(`taskmaster: base URL ${JSON.stringify(baseUrl)} must be http(s)://host[:port][/prefix]`);
    }
    if ((u.protocol !== "http:" && u.protocol !== "https:") || !u.host) {
      throw new TypeError(`taskmaster: base URL ${JSON.stringify(baseUrl)} must be http(s)://host[:port][/prefix]`);
    }
    this.baseUrl = baseUrl.replace(/\/+$/, "");
  }

  url(path: string, query?: CallOptions["query"]): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === null || v === "") continue;
      if (Array.isArray(v)) v.forEach((x) => params.append(k, x));
      else params.append(k, String(v));
    }
    const qs = params.toString();
    return this.baseUrl + path + (qs ? "?" + qs : "");
  }

  headers(correlationId: string, hasBody: boolean, accept = "application/json, application/problem+json"): Record<string, string> {
    const h: Record<string, string> = {
      Accept: accept,
      "User-Agent": this.options.userAgent,
      [CORRELATION_HEADER]: correlationId,
    };
    if (hasBody) h["Content-Type"] = "application/json";
    if (this.options.apiKey) h["Authorization"] = "Bearer " + this.options.apiKey;
    return h;
  }

  /** Sends one call with retries; resolves its 2xx answer or rejects with the last Problem or TransportError. */
  async call(method: string, path: string, o: CallOptions = {}): Promise<Answer> {
    const policy = o.retry ?? this.options.retry;
    const mode = o.mode ?? "safe";
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const url = this.url(path, o.query);
    const cid = newId();
    const headers = this.headers(cid, body !== undefined);
    for (let attempt = 1; ; attempt++) {
      let err: Problem | TransportError;
      let again: boolean;
      let retryAfter: number | undefined;
      try {
        return await this.once(method, url, path, body, headers, (o.timeoutMs ?? this.options.timeoutMs) + Math.max(o.waitMs ?? 0, 0), cid, o.signal);
      } catch (e) {
        if (e instanceof Problem) {
          err = e;
          retryAfter = e.retryAfter;
          again = e.status === 429 || (mode === "unsent" ? e.status === 503 : e.status >= 500 || e.status === 408);
        } else if (e instanceof TransportError) {
          err = e;
          again = mode === "safe" || !e.sent;
        } else {
          throw e;
        }
      }
      if (!again || attempt >= policy.maxAttempts || o.stop?.() || o.signal?.aborted) throw err;
      let pause = Math.max(retryDelay(policy, attempt), Math.min((retryAfter ?? 0) * 1000, policy.maxDelayMs));
      if (o.deadline !== undefined) {
        const left = o.deadline - Date.now();
        if (left <= 0) throw err;
        pause = Math.min(pause, left);
      }
      if (!(await sleep(pause, o.stop, o.signal))) throw err;
    }
  }

  private async once(
    method: string,
    url: string,
    path: string,
    body: string | undefined,
    headers: Record<string, string>,
    timeoutMs: number,
    cid: string,
    signal?: AbortSignal,
  ): Promise<Answer> {
    const timeout = AbortSignal.timeout(timeoutMs);
    const { signal: both, dispose } = anySignal([timeout, signal]);
    try {
      let resp: Response;
      try {
        const init: RequestInit = { method, headers, signal: both };
        if (body !== undefined) init.body = body;
        resp = await this.options.fetch(url, init);
      } catch (e) {
        const code = errorCode(e);
        const what = code ?? (e instanceof Error ? e.message : String(e));
        throw new TransportError(`taskmaster: ${method} ${path}: ${what}`, { sent: !(code && UNSENT_CODES.has(code)), cause: e });
      }
      let text: string;
      try {
        text = await resp.text();
      } catch (e) {
        throw new TransportError(`taskmaster: ${method} ${path}: reading the answer: ${e instanceof Error ? e.message : String(e)}`, { sent: true, cause: e });
      }
      if (resp.status >= 200 && resp.status < 300) {
        if (!text) return { status: resp.status, data: undefined, headers: resp.headers };
        try {
          return { status: resp.status, data: JSON.parse(text), headers: resp.headers };
        } catch (e) {
          // A cut-off body is a transport failure: retried like one.
          throw new TransportError(`taskmaster: ${method} ${path}: decode answer: ${String(e)}`, { sent: true, cause: e });
        }
      }
      throw problemFromAnswer(resp.status, resp.headers, text, path, cid);
    } finally {
      dispose();
    }
  }
}

const reasons: Record<number, string> = {
  400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
  408: "Request Timeout", 409: "Conflict", 413: "Payload Too Large", 415: "Unsupported Media Type",
  422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
  503: "Service Unavailable", 504: "Gateway Timeout",
};

export function problemFromAnswer(status: number, headers: Headers, text: string, path: string, cid: string): Problem {
  const retryAfter = parseRetryAfter(headers.get("retry-after"));
  const media = (headers.get("content-type") ?? "").split(";")[0]?.trim().toLowerCase();
  const correlation = headers.get(CORRELATION_HEADER) ?? cid;
  if (media === "application/problem+json" || media === "application/json") {
    try {
      const doc = JSON.parse(text) as ProblemDocument;
      if (doc && typeof doc === "object" && typeof doc.type === "string" && doc.type) {
        if (!doc.status) doc.status = status;
        if (!doc.instance) doc.instance = path;
        if (!doc.correlation_id) doc.correlation_id = correlation;
        return problemFrom(doc, retryAfter);
      }
    } catch {
      // not a problem document: described below
    }
  }
  let detail = text.trim();
  if (detail.length > 512) detail = detail.slice(0, 512) + "...";
  return problemFrom({ type: "about:blank", title: reasons[status] ?? "HTTP error", status, detail, instance: path, correlation_id: correlation }, retryAfter);
}
