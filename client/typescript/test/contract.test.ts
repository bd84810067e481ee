/**
 * The SDK's types against the API's contract (docs/openapi.yaml): every
 * interface of src/types.ts that mirrors a schema has exactly its members,
 * optional exactly where the schema does not require them. A member the
 * server adds or drops fails here until the SDK follows. tests/sdks hands
 * the description over as JSON (TASKMASTER_OPENAPI_JSON).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { API_VERSION, PROBLEM_CLASSES, PROBLEM_STATUS_CLASSES, PROBLEM_TYPE_PREFIX, Problem, ServerError, VERSION, problemFrom } from "../src/index.js";

interface Schema {
  $ref?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  allOf?: Schema[];
  items?: Schema;
  "x-problem-types"?: Array<{ slug: string; status: number }>;
}
interface Doc {
  info: { version: string };
  components: { schemas: Record<string, Schema> };
}

const specPath = process.env["TASKMASTER_OPENAPI_JSON"];
const skip = specPath ? false : "TASKMASTER_OPENAPI_JSON is not set: run through tests/sdks";
const here = dirname(fileURLToPath(import.meta.url));
// build/test -> the package's src/types.ts
const typesFile = join(here, "..", "..", "src", "types.ts");

/** SDK interface -> schema it mirrors (a path into the description for inline ones: "X.member[]" is an array member's items). */
const MIRRORS: Record<string, string> = {
  Task: "Task",
  Attempt: "Attempt",
  TaskPage: "TaskPage",
  LeaseRef: "LeaseRef",
  Worker: "Worker",
  Registration: "Registration",
  HeartbeatResult: "HeartbeatResponse",
  ItemOutcome: "ItemOutcome",
  BulkResult: "BulkResult",
  PurgeJob: "PurgeJob",
  RateLimit: "RateLimit",
  QueueSettings: "QueueSettings",
  QueueRate: "QueueRate",
  QueueTotals: "QueueTotals",
  Queue: "Queue",
  QueueDetail: "QueueDetail",
  LeasedTask: "QueueDetail.leased_sample[]",
  QueueAverages: "QueueAverages",
  QueueSettingsResult: "QueueSettingsResult",
  PushSettings: "PushSettings",
  PushSettingsResult: "PushSettingsResult",
  Deliveries: "Deliveries",
  Limit: "Limit",
  LimitValues: "LimitValues",
  PutLimitRequest: "PutLimitRequest",
  PushRequest: "PushRequest",
  ScheduleTask: "ScheduleTask",
  Schedule: "Schedule",
  Key: "Key",
  CreatedKey: "CreatedKey",
  LifecycleEvent: "LifecycleEvent",
  FieldError: "FieldError",
  Trace: "Trace",
  Progress: "Progress",
  ProblemDocument: "Problem",
  RetryPolicy: "RetryPolicy",
  RetryRequest: "RetryRequest",
  SubmitRequest: "SubmitRequest",
  BatchSubmitItem: "BatchSubmitItem",
  ClaimRequest: "ClaimRequest",
  ClaimResponse: "ClaimResponse",
  ClaimCompletion: "ClaimRequest.complete[]",
  ClaimFailure: "ClaimRequest.fail[]",
  CompleteRequest: "CompleteRequest",
  FailRequest: "FailRequest",
  SnoozeRequest: "SnoozeRequest",
  ExtendRequest: "ExtendRequest",
  ProgressRequest: "ProgressRequest",
  ReleaseRequest: "ReleaseRequest",
  ReleaseBatchRequest: "ReleaseBatchRequest",
  RegisterRequest: "RegisterRequest",
  HeartbeatRequest: "HeartbeatRequest",
  HeartbeatTask: "HeartbeatTask",
  CompleteBatchRequest: "CompleteBatchRequest",
  FailBatchRequest: "FailBatchRequest",
  BulkRequest: "BulkRequest",
  PurgeRequest: "PurgeRequest",
  CreateScheduleRequest: "CreateScheduleRequest",
  UpdateScheduleRequest: "UpdateScheduleRequest",
  UpdateQueueSettingsRequest: "UpdateQueueSettingsRequest",
  CreateKeyRequest: "CreateKeyRequest",
  ParentPage: "ParentList",
  Workflow: "Workflow",
  WorkflowResult: "WorkflowResult",
  SpawnRequest: "SpawnRequest",
  ReplayRequest: "ReplayRequest",
};

/** Each interface's members (with those it extends): name -> optional. */
function interfaces(): Map<string, Map<string, boolean>> {
  const src = ts.createSourceFile(typesFile, readFileSync(typesFile, "utf8"), ts.ScriptTarget.ES2022, true);
  const own = new Map<string, { members: Map<string, boolean>; bases: string[] }>();
  src.forEachChild((node) => {
    if (!ts.isInterfaceDeclaration(node)) return;
    const members = new Map<string, boolean>();
    for (const m of node.members) {
      if (ts.isPropertySignature(m) && m.name) members.set(m.name.getText(src).replace(/"/g, ""), m.questionToken !== undefined);
    }
    const bases = (node.heritageClauses ?? []).flatMap((h) => h.types.map((t) => t.expression.getText(src)));
    own.set(node.name.text, { members, bases });
  });
  const resolve = (name: string): Map<string, boolean> => {
    const i = own.get(name);
    assert.ok(i, `src/types.ts declares interface ${name}`);
    const out = new Map<string, boolean>();
    for (const b of i.bases) for (const [k, v] of resolve(b)) out.set(k, v);
    for (const [k, v] of i.members) out.set(k, v);
    return out;
  };
  return new Map([...own.keys()].map((n) => [n, resolve(n)]));
}

function schemaAt(doc: Doc, path: string): Schema {
  const [name, ...rest] = path.split(".");
  let s = deref(doc, doc.components.schemas[name!]!);
  for (const part of rest) {
    const prop = part.replace(/\[\]$/, "");
    s = deref(doc, s.properties![prop]!);
    if (part.endsWith("[]")) s = deref(doc, s.items!);
  }
  if (path.endsWith("[]") && rest.length === 0) s = deref(doc, s.items!);
  return s;
}

function deref(doc: Doc, s: Schema): Schema {
  return s.$ref ? deref(doc, doc.components.schemas[s.$ref.split("/").pop()!]!) : s;
}

/** A schema's members: name -> optional. */
function members(doc: Doc, s: Schema): Map<string, boolean> {
  const out = new Map<string, boolean>();
  for (const part of s.allOf ?? []) for (const [k, v] of members(doc, deref(doc, part))) out.set(k, v);
  const required = new Set(s.required ?? []);
  for (const k of Object.keys(s.properties ?? {})) out.set(k, !required.has(k));
  for (const k of s.required ?? []) if (out.has(k)) out.set(k, false);
  return out;
}

test("the wire types mirror docs/openapi.yaml", { skip }, () => {
  const doc = JSON.parse(readFileSync(specPath!, "utf8")) as Doc;
  const ifaces = interfaces();
  for (const [iface, path] of Object.entries(MIRRORS)) {
    const want = members(doc, schemaAt(doc, path));
    const got = ifaces.get(iface);
    assert.ok(got, `src/types.ts declares ${iface}`);
    assert.deepEqual([...got.keys()].sort(), [...want.keys()].sort(), `${iface} has the members of ${path}`);
    for (const [k, optional] of want) assert.equal(got.get(k), optional, `${iface}.${k} is ${optional ? "optional" : "required"} as in ${path}`);
  }
});

test("every problem type the server uses has its class", { skip }, () => {
  const doc = JSON.parse(readFileSync(specPath!, "utf8")) as Doc;
  for (const kind of doc.components.schemas["Problem"]!["x-problem-types"]!) {
    assert.ok(PROBLEM_CLASSES[kind.slug], kind.slug);
    const p = problemFrom({ type: PROBLEM_TYPE_PREFIX + kind.slug, title: "t", status: kind.status });
    assert.ok(p instanceof Problem);
    if (kind.status >= 500) assert.ok(p instanceof ServerError, kind.slug);
    else if (PROBLEM_STATUS_CLASSES[kind.status]) assert.ok(p instanceof PROBLEM_STATUS_CLASSES[kind.status]!, `${kind.slug} is a subclass of its status's class`);
  }
});

test("the SDK's version follows the API's", { skip }, () => {
  const doc = JSON.parse(readFileSync(specPath!, "utf8")) as Doc;
  assert.equal(API_VERSION, doc.info.version);
  assert.deepEqual(VERSION.split(".").slice(0, 2), API_VERSION.split(".").slice(0, 2));
  const pkg = JSON.parse(readFileSync(join(here, "..", "..", "package.json"), "utf8")) as { version: string };
  assert.equal(pkg.version, VERSION);
});
