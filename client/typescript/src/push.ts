/**
 * Push queues: verifying a delivery's signature (docs/api.md "Verifying a
 * delivery"). A push queue's deliveries carry `Taskmaster-Signature:
 * t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` keyed with the
 * queue's secret (during a rotation's overlap, one `v1` per secret). An
 * endpoint checks it over the raw body, before parsing it:
 *
 * ```ts
 * verifySignature(secret, req.headers["taskmaster-signature"], rawBody);
 * ```
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { TaskmasterError } from "./errors.js";

/** The task delivered: the same on every delivery of the task (delivery is at least once: deduplicate on it). */
export const HEADER_TASK_ID = "Taskmaster-Task-Id";
/** The delivery's attempt number (1 for the first). */
export const HEADER_ATTEMPT = "Taskmaster-Attempt";
export const HEADER_QUEUE = "Taskmaster-Queue";
export const HEADER_SIGNATURE = "Taskmaster-Signature";
/** How far (seconds) a signature's time may be from now. */
export const DEFAULT_SIGNATURE_TOLERANCE_SECONDS = 300;

/** A push delivery's signature does not verify: answer it 401 (a non-retryable status by default). */
export class SignatureError extends TaskmasterError {
  override name = "SignatureError";
}
/** The header is not `t=<unix>,v1=<hex>[,v1=...]`. */
export class SignatureMalformed extends SignatureError {
  override name = "SignatureMalformed";
}
/** Its time is further than the tolerance from now: a replay, or clocks apart. */
export class SignatureExpired extends SignatureError {
  override name = "SignatureExpired";
}
/** No `v1` matches the secret and the body. */
export class SignatureMismatch extends SignatureError {
  override name = "SignatureMismatch";
}

export interface VerifyOptions {
  /** Default DEFAULT_SIGNATURE_TOLERANCE_SECONDS. */
  toleranceSeconds?: number;
  /** Now, as an epoch in ms (default Date.now()). */
  now?: number;
}

/**
 * Checks a push delivery's `Taskmaster-Signature` header against the raw
 * request body (exactly as received: the bytes, or a string taken as its
 * UTF-8 bytes) and the queue's secret, or throws a {@link SignatureError}:
 * the header's time must lie within the tolerance of now, and one of its
 * `v1` values must be the hex HMAC-SHA256, keyed with the secret's UTF-8
 * bytes, of `<t>.<body>` (while a rotation's overlap lasts the header
 * carries one per secret: either secret verifies).
 */
export function verifySignature(secret: string, header: string | null | undefined, body: string | Uint8Array, o: VerifyOptions = {}): void {
  let ts = "";
  const sigs: string[] = [];
  for (const part of (header ?? "").split(",")) {
    const p = part.trim();
    const eq = p.indexOf("=");
    if (eq < 0) throw new SignatureMalformed(`taskmaster: malformed ${HEADER_SIGNATURE}`);
    const k = p.slice(0, eq);
    const v = p.slice(eq + 1);
    if (k === "t") ts = v;
    else if (k === "v1") sigs.push(v);
  }
  if (!/^[0-9]+$/.test(ts) || sigs.length === 0) throw new SignatureMalformed(`taskmaster: malformed ${HEADER_SIGNATURE}`);
  const tolerance = o.toleranceSeconds ?? DEFAULT_SIGNATURE_TOLERANCE_SECONDS;
  if (Math.abs((o.now ?? Date.now()) / 1000 - Number(ts)) > tolerance) {
    throw new SignatureExpired(`taskmaster: ${HEADER_SIGNATURE} outside the tolerance (${tolerance}s)`);
  }
  const mac = createHmac("sha256", Buffer.from(secret, "utf8"));
  mac.update(ts + ".");
  mac.update(typeof body === "string" ? Buffer.from(body, "utf8") : body);
  const want = Buffer.from(mac.digest("hex"), "ascii");
  const ok = sigs.some((s) => {
    const got = Buffer.from(s, "utf8");
    return got.length === want.length && timingSafeEqual(got, want);
  });
  if (!ok) throw new SignatureMismatch(`taskmaster: ${HEADER_SIGNATURE} does not match`);
}
