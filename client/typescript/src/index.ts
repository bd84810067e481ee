/**
 * Taskmaster's TypeScript SDK for Node.js 18+: a Client for producers and
 * operators, and a Worker that turns an async handler into a worker
 * speaking the lease protocol. No runtime dependency beyond the platform.
 * See docs/sdks.md for the reference and guarantees.
 */
export * from "./types.js";
export * from "./errors.js";
export { DEFAULT_RETRY_POLICY, type RetryPolicy } from "./http.js";
export * from "./push.js";
export {
  Client,
  VERSION,
  API_VERSION,
  DEFAULT_URL,
  MAX_BATCH,
  MAX_CLAIM_WAIT_MS,
  MAX_LEASE_SECONDS,
  MAX_HEARTBEAT_TASKS,
  MAX_ERROR_BYTES,
  MAX_WAIT_MS,
  type ClientOptions,
  type RequestOptions,
  type ListParams,
  type ListQueuesParams,
  type ClaimParams,
  type ClaimReportingParams,
  type ClaimResult,
  type HeartbeatOptions,
  type CompleteItem,
  type FailItem,
  type PurgeResult,
  type StreamEvent,
  type WaitOptions,
  type EventsParams,
} from "./client.js";
export {
  Worker,
  Next,
  NonRetryable,
  Snooze,
  Stopped,
  Shutdown,
  TaskLost,
  TaskCancelled,
  TaskTimeout,
  TaskTimeLimit,
  WorkerError,
  defaultWorkerId,
  type TaskContext,
  type Handler,
  type HandlerContext,
  type WorkerOptions,
} from "./worker.js";
