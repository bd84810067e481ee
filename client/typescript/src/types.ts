/**
 * The API's objects and request bodies, as they travel (docs/openapi.yaml).
 *
 * Every interface here mirrors one schema of the API's contract member for
 * member, with the API's snake_case names (test/openapi.test.ts checks them
 * against docs/openapi.yaml): a value read from the server is exactly what
 * the server sent, and user JSON (`payload`, `result`) is never renamed.
 * Times are RFC 3339 strings; where a request takes a time, a `Date` will do
 * (it is sent as its ISO string).
 */

/** Any JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A task's status. */
export type TaskStatus = "PENDING" | "RUNNING" | "DONE" | "DEAD" | "BLOCKED";

/** Why a task is DEAD. */
export type DeadReason =
  | "exhausted"
  | "non_retryable"
  | "worker_dead"
  | "deadline"
  | "cancelled"
  | "lease_expired"
  | "orphaned"
  | "dependency_failed"
  | "dependency_skipped";

/**
 * What a parent ending DEAD means for a task that depends on it (schema
 * OnFailure): `fail` (the default, null) makes it DEAD `dependency_failed`;
 * `ignore` runs it anyway once its other parents allow (it sees the
 * parent's status among its parents); `skip` makes it DEAD
 * `dependency_skipped`.
 */
export type OnFailure = "fail" | "ignore" | "skip" | null;

/**
 * One parent in `depends_on` (schema Dependency): an earlier item's ref,
 * else an existing task's id, as a string (failure policy `fail`), or an
 * object naming it as one of those only, with the edge's failure policy.
 */
export type Dependency = string | { ref: string; on_failure?: OnFailure } | { id: string; on_failure?: OnFailure };

/** A worker's liveness. */
export type WorkerStatus = "ACTIVE" | "STALE" | "DEAD";

/** A time a request takes: an RFC 3339 string or a Date. */
export type TimeInput = string | Date;

/** A task's own retry policy as the server shows it (schema RetryPolicy). */
export interface RetryPolicy {
  base_seconds: number;
  max_seconds: number;
  jitter: "none" | "full";
}

/** A task's own retry policy in a request (schema RetryRequest). */
export interface RetryRequest {
  base_seconds: number;
  max_seconds?: number;
  jitter?: "none" | "full";
}

/** The producer's string data of a task, by key (schema Metadata). */
export type Metadata = Record<string, string>;

/** A W3C trace context a task was submitted under (schema Trace). */
export interface Trace {
  traceparent: string;
  tracestate: string | null;
}

/** A holder's last progress report (schema Progress). */
export interface Progress {
  percent: number;
  message: string;
  details: JsonValue;
  updated_at: string;
}

/** A task (schema Task). */
export interface Task {
  id: string;
  queue: string;
  status: TaskStatus;
  priority: number;
  payload: JsonValue;
  tags: string[];
  attempts: number;
  max_attempts: number;
  worker_id: string | null;
  lease_id: string | null;
  last_error: string | null;
  dead_reason: DeadReason | null;
  result: JsonValue;
  deadline: string | null;
  run_at: string;
  idempotency_key: string | null;
  created_at: string;
  claimed_at: string | null;
  finished_at: string | null;
  updated_at: string;
  lease_expires_at: string | null;
  cancel_requested_at: string | null;
  unique_key: string | null;
  retry: RetryPolicy | null;
  snoozes: number;
  group_key: string | null;
  /** The task's own time limit on each attempt (null: its queue's default, or none). */
  timeout_seconds: number | null;
  /** When the running attempt's time limit is up (null unless RUNNING under one). */
  timeout_at: string | null;
  metadata: Metadata;
  trace: Trace | null;
  progress: Progress | null;
  /** The recurring schedule whose tick made the task. */
  schedule_name: string | null;
  schedule_tick: string | null;
  /**
   * The task's run: its own id when submitted alone; the run of the task
   * whose complete (`enqueue`) or spawn created it; the batch's run in a
   * batch with dependencies or one that names a run.
   */
  workflow_id: string;
  /** The DONE or DEAD task this one was replayed from. */
  replay_of: string | null;
  /** The latest `run_at` debounced submissions may push the task to. */
  debounce_until: string | null;
  /** The tasks it depends on (get only). */
  depends_on?: string[];
  /** Those of them not DONE yet (get only). */
  blocked_by?: string[];
  /** The tasks a complete with `enqueue` created (its answer only). */
  enqueued?: Task[];
}

/** One claim of a task and how it ended (schema Attempt). */
export interface Attempt {
  attempt: number;
  worker_id: string;
  claimed_at: string;
  finished_at: string | null;
  outcome:
    | "completed"
    | "failed"
    | "lease_expired"
    | "orphaned"
    | "worker_dead"
    | "cancelled"
    | "snoozed"
    | "released"
    | "timed_out"
    | null;
  error: string | null;
  /** A push delivery's answer status (null: no push delivery, or no answer). */
  http_status: number | null;
}

/** A page of a task's parents, in the order it named them (schema ParentList). */
export interface ParentPage {
  parents: Task[];
  next_cursor: string | null;
  /** The page stopped before its limit at the server's response byte cap. */
  truncated: boolean;
}

/**
 * A run (schema Workflow): its tasks counted by status and DEAD reason, its
 * times, and a page of its tasks, oldest first.
 */
export interface Workflow {
  id: string;
  total: number;
  status_counts: Record<TaskStatus, number>;
  dead_reasons: Partial<Record<DeadReason, number>>;
  /** No task of the run is PENDING, RUNNING or BLOCKED. */
  finished: boolean;
  first_created_at: string;
  last_updated_at: string;
  last_finished_at: string | null;
  tasks: Task[];
  next_cursor: string | null;
  truncated: boolean;
}

/** What a run's cancel or retry did (schema WorkflowResult). */
export interface WorkflowResult {
  id: string;
  /** The unfinished tasks (cancel), the DEAD ones (retry), when the action began. */
  matched: number;
  /** Cancelled or asked to stop (cancel); moved out of DEAD (retry). */
  changed: number;
  /** Retry: how many of those wait for their parents again. */
  blocked?: number;
  /** Left alone. */
  skipped: number;
}

/** A page of a task listing (schema TaskPage). */
export interface TaskPage {
  tasks: Task[];
  next_cursor: string | null;
  truncated: boolean;
}

/** A task's id and the lease it is held under (schema LeaseRef). */
export interface LeaseRef {
  id: string;
  lease_id: string;
}

/** A worker (schema Worker). */
export interface Worker {
  id: string;
  queues: string[];
  tags: string[];
  status: WorkerStatus;
  registered_at: string;
  last_heartbeat_at: string;
  draining: boolean;
}

/** A registered worker and what the server asks of it (schema Registration). */
export interface Registration extends Worker {
  heartbeat_interval_seconds: number;
  max_heartbeat_tasks: number;
}

/** A heartbeat's answer (schema HeartbeatResponse). */
export interface HeartbeatResult extends Worker {
  lost: LeaseRef[];
  cancel: LeaseRef[];
  drain: boolean;
}

/** One item's outcome in a batch report, or of a report a claim carried (schema ItemOutcome). */
export interface ItemOutcome {
  id: string;
  outcome: "done" | "requeued" | "dead" | "error";
  /** The task after the report (absent or null for an error). */
  task?: Task | null;
  /** Why the item was refused (`error` only). */
  problem?: ProblemDocument | null;
  enqueued?: Task[];
}

/** What a bulk action or a purge did (schema BulkResult). */
export interface BulkResult {
  matched: number;
  dry_run: boolean;
  changed?: number;
  removed?: number;
  skipped?: number;
}

/** A large purge running in the background (schema PurgeJob). */
export interface PurgeJob {
  id: string;
  queue: string;
  status: string;
  state: "running" | "done" | "failed";
  matched: number;
  removed: number;
  started_at: string;
  finished_at: string | null;
  error?: string;
}

/** A queue's claim rate limit (schema RateLimit). */
export interface RateLimit {
  per_second: number;
  burst: number;
}

/** A push queue's delivery; the static headers by name only, the signing secret never (schema PushSettings). */
export interface PushSettings {
  url: string;
  timeout_seconds: number;
  /** Deliveries in flight at once, across every instance. */
  max_in_flight: number;
  header_names: string[];
  /** Answer statuses that dead-letter the task at once. */
  non_retryable_statuses: number[];
  secret_rotated_at: string;
  /** Until when the secret the last rotation replaced still signs deliveries. */
  previous_secret_expires_at: string | null;
}

/** A push queue's delivery in the answer of a change (schema PushSettingsResult). */
export interface PushSettingsResult extends PushSettings {
  /** The new signing secret, in the answer of the change that created or rotated it only: keep it, it is never shown again. */
  secret?: string;
}

/** A push queue's recent deliveries, as the dispatchers reported them within the last minute (schema Deliveries). */
export interface Deliveries {
  in_flight: number;
  recent: number;
  /** Recent deliveries by answer status ("none": no answer). */
  statuses: Record<string, number>;
  last_status: number | null;
  latency_ms: { p50: number; p99: number };
  as_of: string;
}

/** A queue's settings (schema QueueSettings). */
export interface QueueSettings {
  paused: boolean;
  max_running: number | null;
  rate_limit: RateLimit | null;
  max_running_per_group: number | null;
  default_timeout_seconds: number | null;
  /** A token bucket for each group_key of the queue. */
  rate_limit_per_group: RateLimit | null;
  /** The named limits the queue draws on. */
  limits: string[];
  push: PushSettings | null;
}

/** A queue's throughput over one window, per minute (schema QueueRate). */
export interface QueueRate {
  enqueued: number;
  claimed: number;
  completed: number;
  dead_lettered: number;
}

/** A queue's cumulative transition counts (schema QueueTotals). */
export interface QueueTotals {
  submitted: number;
  claimed: number;
  completed: number;
  failed: number;
  dead_lettered: Record<string, number>;
  requeued: Record<string, number>;
  cleaned: number;
}

/** A queue's statistics, eventually consistent (schema Queue). */
export interface Queue {
  queue: string;
  pending: number;
  running: number;
  done: number;
  dead: number;
  blocked: number;
  active_workers: number;
  oldest_pending_age_seconds: number | null;
  rates: Record<string, QueueRate>;
  totals: QueueTotals;
  stats_as_of: string | null;
  paused: boolean;
  settings: QueueSettings;
}

/** One RUNNING task of a queue. */
export interface LeasedTask {
  id: string;
  worker_id: string;
  claimed_at: string;
  lease_expires_at: string;
  progress_percent: number | null;
  progress_message: string | null;
}

/** Average durations over the last 5 and 15 minutes (schema QueueAverages). */
export interface QueueAverages {
  last_5m: number | null;
  last_15m: number | null;
}

/** One queue with its RUNNING tasks and average durations (schema QueueDetail). */
export interface QueueDetail extends Queue {
  leased: number;
  leased_sample: LeasedTask[];
  avg_execution_seconds: QueueAverages;
  avg_queue_wait_seconds: QueueAverages;
  /** A push queue's recent deliveries (null for another queue, or when no dispatcher reported in the last minute). */
  deliveries: Deliveries | null;
}

/** A queue's settings after a change (schema QueueSettingsResult). */
export interface QueueSettingsResult {
  queue: string;
  paused: boolean;
  max_running: number | null;
  rate_limit: RateLimit | null;
  max_running_per_group: number | null;
  default_timeout_seconds: number | null;
  rate_limit_per_group: RateLimit | null;
  limits: string[];
  /** With `secret` when the change created or rotated it. */
  push: PushSettingsResult | null;
  updated_at: string;
}

/** What each tick of a schedule submits, as the server shows it (schema ScheduleTask). */
export interface ScheduleTask {
  queue: string;
  payload: JsonValue;
  priority: number;
  max_attempts: number;
  tags: string[];
  unique_key: string | null;
  retry: RetryPolicy | null;
  timeout_seconds: number | null;
  metadata: Metadata;
}

/** A recurring schedule (schema Schedule). */
export interface Schedule {
  name: string;
  cron: string;
  timezone: string;
  task: ScheduleTask;
  overlap: "skip" | "allow";
  paused: boolean;
  next_run_at: string | null;
  last_tick_at: string | null;
  last_task_id: string | null;
  skipped_ticks: number;
  created_at: string;
  updated_at: string;
}

/** A named limit's values (schema LimitValues; the answer of a delete). */
export interface LimitValues {
  name: string;
  per_second: number | null;
  burst: number | null;
  max_running: number | null;
}

/** A named limit: a token bucket and a cap on RUNNING tasks the queues naming it share (schema Limit). */
export interface Limit extends LimitValues {
  /** The queues naming it. */
  queues: string[];
  /** Their RUNNING tasks now. */
  running: number;
  /** The bucket's level now (null without per_second). */
  tokens: number | null;
  created_at: string;
  updated_at: string;
}

/** A named limit's values; a put replaces them all (schema PutLimitRequest). */
export interface PutLimitRequest {
  per_second?: number;
  /** With per_second; default one second's tokens. */
  burst?: number;
  max_running?: number;
}

/** An API key, never its token (schema Key). */
export interface Key {
  id: string;
  name: string;
  scopes: string[];
  queues: string[];
  worker_prefix: string | null;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
  revoked_at: string | null;
}

/** A new key with its token, shown this once (schema CreatedKey). */
export interface CreatedKey extends Key {
  key: string;
}

/** A lifecycle event (schema LifecycleEvent); audit events carry more. */
export interface LifecycleEvent {
  version: number;
  type: string;
  task_id?: string;
  /** The task's run when it is another task's (absent: its own); the run of `audit.workflow_*`. */
  workflow_id?: string;
  /** The original of a replay. */
  replay_of?: string;
  queue?: string;
  queues?: string[];
  from?: string;
  to?: string;
  reason?: string;
  attempt?: number;
  worker_id?: string;
  occurred_at: string;
  correlation_id?: string;
  key_id?: string;
  target_key_id?: string;
  schedule?: string;
  filter?: Record<string, JsonValue>;
  matched?: number;
  delay_seconds?: number;
  queue_wait_seconds?: number;
  execution_seconds?: number;
  end_to_end_seconds?: number;
  metadata?: Metadata;
  progress?: { percent: number; message: string; details?: JsonValue };
}

/** One offending field of a validation problem (schema FieldError). */
export interface FieldError {
  field: string;
  message: string;
}

/** An RFC 9457 problem document (schema Problem). */
export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  correlation_id?: string;
  errors?: FieldError[];
  current_status?: TaskStatus;
  required_scopes?: string[];
  queue?: string;
  worker_id?: string;
}

// Requests.

/** A submission (schema SubmitRequest). */
export interface SubmitRequest {
  queue: string;
  payload?: JsonValue;
  priority?: number;
  max_attempts?: number;
  tags?: string[];
  deadline?: TimeInput;
  run_at?: TimeInput;
  idempotency_key?: string;
  unique_key?: string;
  retry?: RetryRequest | null;
  group_key?: string;
  /** A time limit on each attempt, 1-86400 s (default: the queue's). */
  timeout_seconds?: number | null;
  metadata?: Metadata;
  /** The W3C trace context to keep with the task. */
  traceparent?: string;
  tracestate?: string;
  /**
   * Debounce on `unique_key` (submit only): the PENDING holder of the key
   * takes this submission's payload and waits this many seconds from now
   * again, never past `debounce_max_seconds` after the first submission.
   */
  debounce_seconds?: number | null;
  debounce_max_seconds?: number | null;
  /**
   * Throttle on `unique_key` (submit only): with no unfinished holder, the
   * key's last holder is returned while it finished less than this many
   * seconds ago.
   */
  throttle_seconds?: number | null;
}

/**
 * An item of a list of submissions (schema BatchSubmitItem): a batch, a
 * complete's `enqueue`, a spawn. `depends_on` names earlier items by `ref`
 * and existing tasks by id.
 */
export interface BatchSubmitItem extends SubmitRequest {
  ref?: string;
  depends_on?: Dependency[];
  /** Submit only. */
  debounce_seconds?: null;
  debounce_max_seconds?: null;
  throttle_seconds?: null;
}

/** Tasks a held task creates, staying RUNNING (schema SpawnRequest). */
export interface SpawnRequest {
  worker_id: string;
  lease_id: string;
  tasks: BatchSubmitItem[];
}

/** A replay's overrides of the original's settings (schema ReplayRequest). */
export interface ReplayRequest {
  payload?: JsonValue;
  priority?: number | null;
  max_attempts?: number | null;
  tags?: string[] | null;
  run_at?: TimeInput | null;
  deadline?: TimeInput | null;
  group_key?: string | null;
  timeout_seconds?: number | null;
  metadata?: Metadata | null;
  /** The replay's own trace context (absent: the original's). */
  traceparent?: string;
  tracestate?: string;
}

/** A claim (schema ClaimRequest). */
export interface ClaimRequest {
  worker_id: string;
  queue?: string;
  limit?: number;
  wait_ms?: number;
  lease_seconds?: number;
  request_id?: string;
  /** Completions to apply before claiming, in the transaction of the claim's first attempt. */
  complete?: ClaimCompletion[];
  /** Failures to apply before claiming, likewise. */
  fail?: ClaimFailure[];
}

/** A completion a claim carries (schema ClaimRequest.complete[]): a batch completion's item without `enqueue`. */
export interface ClaimCompletion {
  id: string;
  lease_id: string;
  result?: JsonValue;
}

/** A failure a claim carries (schema ClaimRequest.fail[]). */
export interface ClaimFailure {
  id: string;
  lease_id: string;
  error?: string;
  retryable?: boolean;
}

/** A claim's answer (schema ClaimResponse). */
export interface ClaimResponse {
  tasks: Task[];
  /** The claim stopped before its limit at the server's response byte cap: more may be claimable at once. */
  truncated: boolean;
  /** The outcomes of the claim's `complete`, in order (absent when it carried none). */
  completed?: ItemOutcome[];
  /** The outcomes of the claim's `fail`, in order (absent when it carried none). */
  failed?: ItemOutcome[];
}

/** A completion (schema CompleteRequest). */
export interface CompleteRequest {
  worker_id: string;
  lease_id: string;
  result?: JsonValue;
  enqueue?: BatchSubmitItem[];
}

/** A failure (schema FailRequest). */
export interface FailRequest {
  worker_id: string;
  lease_id: string;
  error?: string;
  retryable?: boolean;
}

/** A snooze (schema SnoozeRequest). */
export interface SnoozeRequest {
  worker_id: string;
  lease_id: string;
  delay_seconds: number;
}

/** A holder's progress report (schema ProgressRequest). */
export interface ProgressRequest {
  worker_id: string;
  lease_id: string;
  /** 0 to 100. */
  percent: number;
  /** At most 1 KiB. */
  message?: string;
  /** Any JSON value of at most 16 KiB. */
  details?: JsonValue;
}

/** A lease extension (schema ExtendRequest). */
export interface ExtendRequest {
  worker_id: string;
  lease_id: string;
  lease_seconds?: number;
}

/** A hand-back of a held task by a stopping worker (schema ReleaseRequest). */
export interface ReleaseRequest {
  worker_id: string;
  lease_id: string;
}

/** A hand-back of many held tasks (schema ReleaseBatchRequest). */
export interface ReleaseBatchRequest {
  worker_id: string;
  items: LeaseRef[];
}

/** A registration (schema RegisterRequest). */
export interface RegisterRequest {
  id?: string;
  queues?: string[];
  tags?: string[];
}

/** A heartbeat's body (schema HeartbeatRequest). */
export interface HeartbeatRequest {
  tasks?: HeartbeatTask[];
  /** The request ids of the claims sent and not yet answered (see Client.heartbeat). */
  claims_in_flight?: string[];
}

/** A task a heartbeat lists, with its progress if any (schema HeartbeatTask). */
export interface HeartbeatTask {
  id: string;
  lease_id: string;
  /** Required with message or details. */
  percent?: number;
  message?: string;
  details?: JsonValue;
}

/** A batch completion (schema CompleteBatchRequest). */
export interface CompleteBatchRequest {
  worker_id: string;
  items: Array<{ id: string; lease_id: string; result?: JsonValue; enqueue?: BatchSubmitItem[] }>;
}

/** A batch failure (schema FailBatchRequest). */
export interface FailBatchRequest {
  worker_id: string;
  items: Array<{ id: string; lease_id: string; error?: string; retryable?: boolean }>;
}

/** A filter of tasks and a dry run, for bulk actions (schema BulkRequest). */
export interface BulkRequest {
  queue?: string;
  status?: string;
  dead_reason?: string;
  group_key?: string;
  created_after?: TimeInput;
  created_before?: TimeInput;
  error_contains?: string;
  text?: string;
  /** Only tasks whose metadata holds every one of these keys with these values. */
  metadata?: Metadata;
  /** Only the tasks of this run. */
  workflow_id?: string;
  dry_run?: boolean;
}

/** A filter of tasks (a listing's query, a bulk action's body). */
export type TaskFilter = Omit<BulkRequest, "dry_run">;

/** A purge (schema PurgeRequest). */
export interface PurgeRequest {
  status?: "PENDING" | "DEAD";
  dry_run?: boolean;
}

/** What each tick of a new schedule submits. */
export interface ScheduleTaskRequest {
  queue: string;
  payload?: JsonValue;
  priority?: number;
  max_attempts?: number;
  tags?: string[];
  unique_key?: string;
  retry?: RetryRequest | null;
  timeout_seconds?: number | null;
  metadata?: Metadata;
}

/** A new schedule (schema CreateScheduleRequest). */
export interface CreateScheduleRequest {
  name: string;
  cron: string;
  timezone?: string;
  task: ScheduleTaskRequest;
  overlap?: "skip" | "allow";
  paused?: boolean;
}

/** A change of a schedule (schema UpdateScheduleRequest). */
export interface UpdateScheduleRequest {
  name?: string;
  cron?: string;
  timezone?: string;
  task?: ScheduleTaskRequest;
  overlap?: "skip" | "allow";
  paused?: boolean;
}

/** A change of a queue's settings; null clears a limit (schema UpdateQueueSettingsRequest). */
export interface UpdateQueueSettingsRequest {
  paused?: boolean;
  max_running?: number | null;
  rate_limit?: { per_second: number; burst?: number } | null;
  max_running_per_group?: number | null;
  default_timeout_seconds?: number | null;
  /** A token bucket for each group_key. */
  rate_limit_per_group?: { per_second: number; burst?: number } | null;
  /** Replaces the named limits the queue draws on (each must exist). */
  limits?: string[] | null;
  /** Makes the queue a push queue or changes its delivery; null turns push off. */
  push?: PushRequest | null;
}

/**
 * Turns push delivery on (`url` required) or changes it; an absent member
 * keeps its value, its default when push is turned on (schema PushRequest).
 */
export interface PushRequest {
  url?: string;
  /** 1-900 (default 30). */
  timeout_seconds?: number;
  /** 1-10,000 (default 10), across every instance. */
  max_in_flight?: number;
  /** Replaces the static headers (secret: never shown again); null removes them. */
  headers?: Record<string, string> | null;
  /** Replaces the statuses that dead-letter at once; null restores the default [400, 401, 403, 404, 410, 422]. */
  non_retryable_statuses?: number[] | null;
  /** A new signing secret, shown once in the answer. */
  rotate_secret?: boolean;
  /** With rotate_secret: how long the replaced secret keeps signing (default 86400; 0: dropped at once). */
  secret_overlap_seconds?: number;
}

/** A new API key (schema CreateKeyRequest). */
export interface CreateKeyRequest {
  name: string;
  scopes: Array<"admin" | "produce" | "work" | "read">;
  queues?: string[];
  worker_prefix?: string;
  expires_at?: TimeInput;
  expires_in_seconds?: number;
}
