"""The SDK's types against the API's contract (docs/openapi.yaml): a member
the server adds or drops fails here until the SDK follows. tests/sdks hands
the description over as JSON (TASKMASTER_OPENAPI_JSON)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import unittest
from typing import Any, Callable, Dict, Set, Tuple

import taskmaster
from taskmaster import errors as errs
from taskmaster.types import wire_fields

# SDK class -> schema of docs/openapi.yaml it mirrors.
RESPONSES = {
    taskmaster.Task: "Task",
    taskmaster.Attempt: "Attempt",
    taskmaster.TaskPage: "TaskPage",
    taskmaster.WorkerInfo: "Worker",
    taskmaster.Registration: "Registration",
    taskmaster.HeartbeatResult: "HeartbeatResponse",
    taskmaster.LeaseRef: "LeaseRef",
    taskmaster.BulkResult: "BulkResult",
    taskmaster.PurgeJob: "PurgeJob",
    taskmaster.Queue: "Queue",
    taskmaster.QueueDetail: "QueueDetail",
    taskmaster.QueueSettings: "QueueSettings",
    taskmaster.RateLimit: "RateLimit",
    taskmaster.QueueRate: "QueueRate",
    taskmaster.QueueTotals: "QueueTotals",
    taskmaster.QueueSettingsResult: "QueueSettingsResult",
    taskmaster.Schedule: "Schedule",
    taskmaster.ScheduleTask: "ScheduleTask",
    taskmaster.Key: "Key",
    taskmaster.CreatedKey: "CreatedKey",
    taskmaster.Backoff: "RetryPolicy",
    taskmaster.FieldError: "FieldError",
    taskmaster.Trace: "Trace",
    taskmaster.Progress: "Progress",
    taskmaster.Limit: "Limit",
    taskmaster.LimitValues: "LimitValues",
    taskmaster.PushSettings: "PushSettings",
    taskmaster.PushSettingsResult: "PushSettingsResult",
    taskmaster.Deliveries: "Deliveries",
    taskmaster.ParentPage: "ParentList",
    taskmaster.Workflow: "Workflow",
    taskmaster.WorkflowResult: "WorkflowResult",
    taskmaster.ClaimResult: "ClaimResponse",
}


class ContractTest(unittest.TestCase):
    doc: Dict[str, Any]

    def setUp(self) -> None:
        path = os.environ.get("TASKMASTER_OPENAPI_JSON")
        if not path:
            self.skipTest("TASKMASTER_OPENAPI_JSON is not set: run through tests/sdks")
        with open(path) as f:
            self.doc = json.load(f)

    def schema(self, name: str) -> Dict[str, Any]:
        s: Dict[str, Any] = self.doc["components"]["schemas"][name]
        return s

    def props(self, s: Dict[str, Any]) -> Set[str]:
        if "$ref" in s:
            s = self.schema(s["$ref"].rsplit("/", 1)[1])
        out = set(s.get("properties", {}))
        for part in s.get("allOf", []):
            out |= self.props(part)
        return out

    def test_responses_mirror_their_schemas(self) -> None:
        for cls, name in RESPONSES.items():
            with self.subTest(cls=cls.__name__, schema=name):
                self.assertEqual(self.props(self.schema(name)), set(wire_fields(cls)))

    def test_batch_outcome_item(self) -> None:
        item = self.schema("BatchOutcomes")["properties"]["items"]["items"]
        self.assertEqual(self.props(item), set(wire_fields(taskmaster.ItemOutcome)))

    def test_requests_mirror_their_schemas(self) -> None:
        submit = {f.name for f in dataclasses.fields(taskmaster.SubmitParams)} - {"delay"}  # delay: run_at by this clock
        self.assertEqual(self.props(self.schema("BatchSubmitItem")), submit)
        self.assertEqual(self.props(self.schema("SubmitRequest")), submit - {"ref", "depends_on"})
        filt = {f.name for f in dataclasses.fields(taskmaster.TaskFilter)}
        self.assertEqual(self.props(self.schema("BulkRequest")), filt | {"dry_run"})
        sched = {f.name for f in dataclasses.fields(taskmaster.ScheduleTask)}
        self.assertEqual(self.props(self.schema("ScheduleTask")), sched)
        push = {f.name for f in dataclasses.fields(taskmaster.PushPatch)}
        self.assertEqual(self.props(self.schema("PushRequest")), push)
        replay = set(inspect.signature(taskmaster.Client.replay).parameters) - {"self", "task_id"}
        self.assertEqual(self.props(self.schema("ReplayRequest")), replay)
        spawn = set(inspect.signature(taskmaster.Client.spawn).parameters) - {"self", "task_id", "items"}
        self.assertEqual(self.props(self.schema("SpawnRequest")), spawn | {"tasks"})
        dep: Set[str] = set()
        for form in self.schema("Dependency")["oneOf"]:
            dep |= set(form.get("properties", {}))
        self.assertEqual(dep, {f.name for f in dataclasses.fields(taskmaster.Dependency)})
        self.assertEqual(set(self.schema("OnFailure")["enum"]) - {None},
                         {taskmaster.ON_FAILURE_FAIL, taskmaster.ON_FAILURE_IGNORE, taskmaster.ON_FAILURE_SKIP})

    def test_calls_take_their_request_members(self) -> None:
        # Calls whose keyword arguments are a request's members, one for one.
        calls: Dict[str, Tuple[Callable[..., Any], Set[str]]] = {
            "UpdateQueueSettingsRequest": (taskmaster.Client.update_queue, {"name"}),
            "PutLimitRequest": (taskmaster.Client.put_limit, {"name"}),
            "HeartbeatRequest": (taskmaster.Client.heartbeat, {"worker_id", "timeout"}),
            "ProgressRequest": (taskmaster.Client.progress, {"task_id", "call"}),
        }
        for schema, (fn, own) in calls.items():
            with self.subTest(schema=schema):
                params = set(inspect.signature(fn).parameters) - {"self"} - own
                self.assertEqual(self.props(self.schema(schema)), params)

    def test_claim_takes_its_request_members(self) -> None:
        # claim_reporting: every member of a claim (wait in seconds for
        # wait_ms), its reports' items as CompleteItem and FailItem carry
        # them (a claim's completions enqueue nothing; non_retryable is the
        # negation of retryable).
        req = self.schema("ClaimRequest")
        params = set(inspect.signature(taskmaster.Client.claim_reporting).parameters) - {"self", "wait"}
        self.assertEqual(self.props(req), params | {"wait_ms"})
        claim = set(inspect.signature(taskmaster.Client.claim).parameters) - {"self", "wait"}
        self.assertEqual(self.props(req) - {"complete", "fail"}, claim | {"wait_ms"})
        complete = {f.name for f in dataclasses.fields(taskmaster.CompleteItem)} - {"enqueue"}
        self.assertEqual(self.props(req["properties"]["complete"]["items"]), complete)
        fail = {f.name for f in dataclasses.fields(taskmaster.FailItem)} - {"non_retryable"}
        self.assertEqual(self.props(req["properties"]["fail"]["items"]), fail | {"retryable"})
        self.assertEqual(self.props(self.schema("ItemOutcome")), set(wire_fields(taskmaster.ItemOutcome)))

    def test_problem_members_and_types(self) -> None:
        p = errs.Problem(type="about:blank", title="t", status=400)
        for member in self.props(self.schema("Problem")):
            self.assertTrue(hasattr(p, member), member)
        for kind in self.schema("Problem")["x-problem-types"]:
            with self.subTest(slug=kind["slug"]):
                cls = errs.problem_class(errs.PROBLEM_TYPE_PREFIX + kind["slug"], kind["status"])
                self.assertIn(kind["slug"], errs._BY_SLUG, "every problem type the server uses has its class")
                self.assertTrue(issubclass(cls, errs.Problem))
                if kind["status"] >= 500:
                    self.assertTrue(issubclass(cls, errs.ServerError))
                elif kind["status"] in errs._BY_STATUS:
                    self.assertTrue(issubclass(cls, errs._BY_STATUS[kind["status"]]), "a subclass of its status's class")

    def test_api_version(self) -> None:
        self.assertEqual(self.doc["info"]["version"], taskmaster.API_VERSION)
        self.assertEqual(taskmaster.API_VERSION.split(".")[:2], taskmaster.__version__.split(".")[:2],
                         "the SDK's major.minor follow the API's (docs/sdks.md)")


if __name__ == "__main__":
    unittest.main()
