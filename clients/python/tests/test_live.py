"""The client's whole surface against a live hourglass runner with a real
redis-server. Run by the Rust test `producers::python_client` (which starts
them), or by hand with HOURGLASS_URL and HOURGLASS_TOKEN pointing at a runner
whose queues.toml has the topics below (probe.wasm from handlers/probe):

  work    results = {}; max_attempts = 1     (jobs run: ack, result, progress, fail)
  parked  a topic paused before the tests    (jobs wait: get, cancel, replace)
  and a [[schedule]] "nightly" on parked: cron "0 3 * * *" in UTC
"""

import asyncio
import datetime as dt
import json
import time
import unittest
import uuid

from hourglass_client import (
    AsyncClient, BadRequest, Client, Conflict, Job, NotFound, Unauthorized, Unavailable,
)

WORK, PARKED = "work", "parked"


def fresh(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class Sync(unittest.TestCase):
    def setUp(self):
        self.hg = Client(timeout=20)

    def test_enqueue_runs_and_waits_for_its_result(self):
        id = fresh("r")
        got = self.hg.enqueue(WORK, {"result": {"total": 42}}, id=id)
        self.assertEqual((got.id, got.status), (id, "new"))
        end = self.hg.wait(WORK, id, timeout=20)
        self.assertEqual(end.state, "acked")
        self.assertEqual(end.json(), {"total": 42})

    def test_result_long_poll_answers_none_while_it_lives(self):
        id = fresh("slow")
        self.hg.enqueue(WORK, {"sleep_ms": 1500}, id=id)
        self.assertIsNone(self.hg.result(WORK, id, wait=0.2))
        self.assertEqual(self.hg.result(WORK, id, wait=10).state, "acked")

    def test_every_job_option_reaches_the_job(self):
        id = fresh("opts")
        self.hg.enqueue(PARKED, "text as is", id=id, delay=dt.timedelta(hours=1),
                        max_attempts=7, account="acme", key="customer-7", unique_for="1h",
                        expires_in=dt.timedelta(hours=2), priority=4)
        job = self.hg.get_job(PARKED, id)
        self.assertEqual(job["priority"], 4)
        self.assertGreater(job["expires_at_ms"], job["at_ms"])
        self.assertEqual(job["payload"], "text as is")
        self.assertEqual(self.hg.enqueue(PARKED, "again", id=id).status, "duplicate")
        self.assertEqual(job["max_attempts"], 7)
        self.assertEqual(job["key"], "customer-7")
        due = job["at_ms"]
        at = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
        self.assertEqual(self.hg.enqueue(PARKED, {"v": 2}, id=id, at=at, replace=True).status, "replaced")
        job = self.hg.get_job(PARKED, id)
        self.assertEqual(job["at_ms"], int(at.timestamp() * 1000))
        self.assertNotEqual(job["at_ms"], due)
        self.assertEqual(json.loads(job["payload"]), {"v": 2})
        self.assertEqual(self.hg.cancel(PARKED, id), "waiting")
        with self.assertRaises(NotFound):
            self.hg.get_job(PARKED, id)

    def test_enqueue_many_answers_per_job_and_a_bad_one_names_its_index(self):
        a, b = fresh("m"), fresh("m")
        batch = self.hg.enqueue_many(PARKED, [Job({"n": 1}, id=a), {"payload": "x", "id": a}, Job(b"bytes", id=b)])
        self.assertEqual((batch.new, batch.duplicate), (2, 1))
        self.assertEqual([j.status for j in batch.jobs], ["new", "duplicate", "new"])
        with self.assertRaises(BadRequest) as bad:
            self.hg.enqueue_many(PARKED, [Job("ok"), Job("late", delay="soon")])
        self.assertEqual(bad.exception.field, "[1].delay")

    def test_bad_input_names_the_field_and_unknowns_are_not_found(self):
        with self.assertRaises(BadRequest) as bad:
            self.hg.enqueue(WORK, "x", delay="soon")
        self.assertEqual(bad.exception.field, "delay")
        self.assertEqual(bad.exception.status, 400)
        with self.assertRaises(BadRequest) as bad:
            self.hg.enqueue(WORK, "x", key="no spaces")
        self.assertEqual(bad.exception.field, "key")
        with self.assertRaises(BadRequest) as bad:
            self.hg.enqueue(WORK, "x", priority=10)
        self.assertEqual(bad.exception.field, "priority")
        with self.assertRaises(BadRequest) as bad:
            self.hg.enqueue(WORK, "x", expires_at="2001-01-01T00:00:00Z")
        self.assertEqual(bad.exception.field, "expires_at")
        with self.assertRaises(NotFound):
            self.hg.enqueue("no_such_topic", "x")
        with self.assertRaises(NotFound):
            self.hg.get_job(WORK, "no-such-job")
        with self.assertRaises(ValueError):
            self.hg.enqueue(WORK, b"\xff\xfe")
        with self.assertRaises(ValueError):
            self.hg.enqueue(WORK, "x", at=dt.datetime(2031, 1, 1))

    def test_a_wrong_token_and_no_server_are_their_own_errors(self):
        with self.assertRaises(Unauthorized):
            Client(token="wrong").stats()
        with self.assertRaises(Unavailable) as down:
            Client("http://127.0.0.1:9", timeout=2).stats()
        self.assertEqual(down.exception.status, 0)

    def test_events_stream_progress_then_the_end(self):
        id = fresh("ev")
        self.hg.enqueue(WORK, {"progress": [{"percent": 10, "sleep_ms": 400}, {"percent": 90, "sleep_ms": 400}],
                               "result": "done"}, id=id)
        kinds = []
        for event in self.hg.events(WORK, id):
            kinds.append(event.kind)
            if event.kind == "end":
                self.assertEqual(event.end.state, "acked")
        self.assertIn("progress", kinds)
        self.assertEqual(kinds[-1], "end")

    def test_dead_letters_list_retry_and_purge(self):
        id = fresh("d")
        self.hg.enqueue(WORK, {"then": "fail"}, id=id)
        self.assertEqual(self.hg.wait(WORK, id, timeout=20).state, "dead")
        page = self.hg.dead(WORK, limit=500)
        self.assertIn(id, [letter["id"] for letter in page.letters])
        self.assertGreaterEqual(page.total, 1)
        requeued = self.hg.retry_dead(WORK, id)
        self.assertEqual((type(requeued), requeued), (int, 1))
        self.assertEqual(self.hg.wait(WORK, id, timeout=20).state, "dead")
        self.assertGreaterEqual(self.hg.purge_dead(WORK), 1)
        self.assertNotIn(id, [letter["id"] for letter in self.hg.dead(WORK).letters])
        with self.assertRaises(BadRequest) as bad:
            self.hg.dead(WORK, limit=0)
        self.assertEqual(bad.exception.field, "limit")

    def test_upgrade_checks_on_a_kept_version_and_names_a_bad_one(self):
        version = next(t["handler"] for t in self.hg.topics() if t["name"] == WORK)
        report = self.hg.upgrade(WORK, version, all=True, dry_run=True)
        self.assertEqual((report["to"], report["dry_run"]), (version, True))
        self.assertIsInstance(report["moved"], list)
        with self.assertRaises(BadRequest) as bad:
            self.hg.upgrade(WORK, "not-a-version", all=True)
        self.assertEqual(bad.exception.field, "to")
        with self.assertRaises(BadRequest) as bad:
            self.hg.upgrade(WORK, version)
        self.assertEqual(bad.exception.field, "ids")
        with self.assertRaises(Conflict) as kept:
            self.hg.upgrade(WORK, "0123456789abcdef", ["x"])
        self.assertEqual(kept.exception.field, "to")

    def test_pause_and_resume_say_whether_they_changed_it(self):
        self.hg.pause(PARKED)
        self.assertFalse(self.hg.pause(PARKED))
        self.assertTrue(self.hg.resume(PARKED))
        self.assertTrue(self.hg.pause(PARKED))
        names = [t["name"] for t in self.hg.topics()]
        self.assertIn(WORK, names)

    def test_scale_reads_every_topic_and_one(self):
        self.hg.pause(PARKED)
        self.hg.enqueue(PARKED, "x", id=fresh("sc"))
        view = self.hg.scale()
        self.assertIsInstance(view["suggested_runners"], int)
        self.assertIn(WORK, [t["topic"] for t in view["topics"]])
        parked = self.hg.scale(PARKED)
        self.assertEqual((parked["topic"], parked["paused"]), (PARKED, True))
        self.assertGreaterEqual(parked["ready"], 1)
        with self.assertRaises(NotFound):
            self.hg.scale("no-such-topic")

    def test_the_consoles_reads_logs_history_flows_schedules_and_a_bulk_retry(self):
        failed = [fresh("cd") for _ in range(3)]
        for id in failed:
            self.hg.enqueue(WORK, {"log": {"lines": 2, "bytes": 20}, "then": "fail"}, id=id)
        for id in failed:
            self.assertEqual(self.hg.wait(WORK, id, timeout=20).state, "dead")
        logs = self.hg.logs(WORK, failed[0])
        self.assertEqual([line["text"].split(" line ")[0] for line in logs["lines"]], ["attempt 1"] * 2)
        self.assertEqual(logs["dropped_bytes"], 0)
        page = self.hg.jobs(WORK, "dead", prefix="cd-", limit=500)
        self.assertTrue(set(failed) <= {j["id"] for j in page["jobs"]}, page)
        one = self.hg.jobs(WORK, "dead", prefix=failed[0])
        self.assertEqual([j["id"] for j in one["jobs"]], [failed[0]])
        with self.assertRaises(BadRequest) as bad:
            self.hg.jobs(WORK, "nowhere")
        self.assertEqual(bad.exception.field, "state")
        done = self.hg.bulk(WORK, "retry", [failed[1], "cd-none"])
        self.assertEqual((done["done"], done["missed"]), ([failed[1]], ["cd-none"]))
        self.assertEqual(self.hg.wait(WORK, failed[1], timeout=20).state, "dead")
        self.assertEqual(self.hg.bulk(WORK, "purge", failed)["done"], failed)
        # the runners write their minutes with their heartbeats
        for _ in range(100):
            history = self.hg.history([WORK], since="1h")
            if sum(m["dead"] for m in history["topics"][WORK]) >= 3:
                break
            time.sleep(0.2)
        self.assertGreaterEqual(sum(m["dead"] for m in history["topics"][WORK]), 3, history)
        with self.assertRaises(BadRequest) as bad:
            self.hg.history(since="2d")
        self.assertEqual(bad.exception.field, "since")
        self.assertIsInstance(self.hg.flows()["flows"], list)
        (nightly,) = self.hg.schedules(next=2)
        self.assertEqual((nightly["name"], nightly["topic"], nightly["timezone"]), ("nightly", PARKED, "UTC"))
        self.assertEqual([dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).hour for t in nightly["next_ms"]], [3, 3])
        with self.assertRaises(BadRequest) as bad:
            self.hg.schedules(next=51)
        self.assertEqual(bad.exception.field, "next")


class Async(unittest.IsolatedAsyncioTestCase):
    async def test_the_same_surface_with_await(self):
        hg = AsyncClient(timeout=20)
        ids = [fresh("a") for _ in range(3)]
        got = await asyncio.gather(*(hg.enqueue(WORK, {"result": i}, id=id) for i, id in enumerate(ids)))
        self.assertEqual([g.status for g in got], ["new"] * 3)
        ends = await asyncio.gather(*(hg.wait(WORK, id, timeout=20) for id in ids))
        self.assertEqual([e.json() for e in ends], [0, 1, 2])
        batch = await hg.enqueue_many(PARKED, [Job("x", id=fresh("am"))])
        self.assertEqual(batch.new, 1)
        with self.assertRaises(BadRequest) as bad:
            await hg.enqueue(WORK, "x", max_attempts=0)
        self.assertEqual(bad.exception.field, "max_attempts")
        id = fresh("aev")
        await hg.enqueue(WORK, {"progress": [{"percent": 50, "sleep_ms": 300}]}, id=id)
        kinds = [e.kind async for e in hg.events(WORK, id)]
        self.assertEqual(kinds[-1], "end")
        self.assertIn(WORK, [t["topic"] for t in (await hg.scale())["topics"]])
        self.assertEqual([s["name"] for s in await hg.schedules()], ["nightly"])
        self.assertEqual((await hg.jobs(PARKED, "ready", prefix="no-such-"))["jobs"], [])


class TraceContext(unittest.TestCase):
    def test_the_active_span_goes_with_the_enqueue_when_opentelemetry_is_installed(self):
        try:
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
        except ImportError:
            self.fail("opentelemetry-sdk is not installed: the test runner installs it")
        trace.set_tracer_provider(TracerProvider())
        hg = Client(timeout=20)
        id = fresh("t")
        with trace.get_tracer("test").start_as_current_span("produce") as span:
            hg.enqueue(PARKED, "x", id=id)
            trace_id = format(span.get_span_context().trace_id, "032x")
        job = hg.get_job(PARKED, id)
        self.assertIn(trace_id, json.dumps(job), "the job carries the producer's trace id")


if __name__ == "__main__":
    unittest.main()
