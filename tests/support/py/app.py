"""A Python handler for the tests, on the SDK. The payload is JSON; each key
asks for one thing, checked in this order:

    {"saga": {"shop": URL, "email_fails": N, "sleep_ms": M, "approval_s": S}}
                                      durable steps: POST URL/charge, /reserve,
                                      (a durable sleep of M ms, a wait of S s for
                                      signal "approved", POSTed to /approved),
                                      /email (failing on the first N attempts);
                                      ack with the charge
    {"plain": {"shop": URL, "fail_first": N}}
                                      no SDK steps: POST URL/charge, /reserve,
                                      read the clock and 16 random bytes (the
                                      stamp); retry with the stamp on the first
                                      N attempts, then ack with {"stamp": ...}
    {"log": MESSAGE}                  an info line, then the rest
    {"print": TEXT}                   a line on stdout, then the rest
    {"sleep_ms": N}                   sleep N ms first, then the rest
    {"raise": MESSAGE}                raise ValueError(MESSAGE)
    {"fail": REASON}                  fail (dead letter) with REASON
    {"retry_in": SECONDS, "reason": R}  retry after SECONDS with R
    {"retry": REASON}                 retry with the topic's backoff
    {"follow_up": {"topic", "payload", "id"?, "delay"?, "unique_for"?, "key"?,
                   "with_result"?, "expires_in"?, "priority"?}}  then ack
    {"fetch": URL}                    GET URL; fail with "fetched STATUS BODY"
    {"post_json": URL, "body": V}     POST V as JSON; fail with "posted STATUS BODY"
    {"progress": [P, ...]}            report each percentage, 300 ms apart
    {"result": V}                     ack with V as the result (JSON)
    {"echo_parent": true}             ack with {"parent": the parent's result}
    {"flow": {"id": ..., "jobs": [...]}} create a flow with the ack, {"flow": id}
    {"echo_deps": true}               ack with {"deps": its flow dependencies,
                                      "batch": its batch (a callback) or None}
    {"served": true}                  ack with {"served": jobs this instance ran}
    {}                                ack
"""

import os
import time

import hourglass
from hourglass import http

# jobs this instance ran: state one job leaves for the next (only where the
# topic reuses instances; a fresh instance always says 1)
SERVED = 0


@hourglass.handler
def handle(job):
    global SERVED
    SERVED += 1
    plan = job.json()
    if "saga" in plan:
        return saga(job, plan["saga"])
    if "plain" in plan:
        return plain(job, plan["plain"])
    if "log" in plan:
        hourglass.info(plan["log"])
    if "print" in plan:
        print(plan["print"])
    if "sleep_ms" in plan:
        time.sleep(plan["sleep_ms"] / 1000)
    if "raise" in plan:
        raise ValueError(plan["raise"])
    if "fail" in plan:
        return hourglass.fail(plan["fail"])
    if "retry_in" in plan:
        return hourglass.retry_in(plan["retry_in"], plan.get("reason", "asked to retry"))
    if "retry" in plan:
        return hourglass.retry(plan["retry"])
    for p in plan.get("progress", []):
        hourglass.progress(p, {"step": p})
        time.sleep(0.3)
    if "follow_up" in plan:
        f = plan["follow_up"]
        hourglass.follow_up(
            f["topic"], f["payload"], id=f.get("id"), delay=f.get("delay"),
            unique_for=f.get("unique_for"), with_result=f.get("with_result", False),
            key=f.get("key"), expires_in=f.get("expires_in"), priority=f.get("priority"),
        )
    if "flow" in plan:
        flow_id = hourglass.flow(plan["flow"]["jobs"], id=plan["flow"].get("id"))
        return hourglass.result({"flow": flow_id})
    if "fetch" in plan:
        res = http.get(plan["fetch"])
        return hourglass.fail(f"fetched {res.status} {res.text()}")
    if "post_json" in plan:
        res = http.post_json(plan["post_json"], plan.get("body"))
        return hourglass.fail(f"posted {res.status} {res.text()}")
    if plan.get("served"):
        return hourglass.result({"served": SERVED})
    if plan.get("echo_parent"):
        return hourglass.result({"parent": job.parent_json()})
    if plan.get("echo_deps"):
        return hourglass.result({"deps": [
            {"name": d.name, "topic": d.topic, "id": d.id, "ended": d.ended,
             "result": d.json(), "reason": d.reason}
            for d in job.dependencies()
        ], "batch": _batch(job.batch())})
    if "result" in plan:
        return hourglass.result(plan["result"])
    return None


def _batch(b):
    if b is None:
        return None
    return {"id": b.id, "jobs": b.jobs, "acked": b.acked, "dead": b.dead,
            "cancelled": b.cancelled, "failed": b.failed}


def plain(job, p):
    for what in ("charge", "reserve"):
        res = http.post(f"{p['shop']}/{what}?order=1", b"")
        if res.status >= 300:
            return hourglass.retry_in(0.05, f"{what}: the shop answered {res.status}")
    stamp = f"{time.time_ns()}-{os.urandom(16).hex()}"
    if job.attempt <= p.get("fail_first", 0):
        return hourglass.retry_in(0.05, f"stamp {stamp}")
    return hourglass.result({"stamp": stamp})


def saga(job, s):
    def call(what):
        res = http.post(f"{s['shop']}/{what}?order=1", b"")
        if res.status >= 300:
            raise hourglass.Retry(f"{what}: the shop answered {res.status}")
        return res.text()

    def email():
        sent = call("email")
        if job.attempt <= s.get("email_fails", 0):
            raise hourglass.Retry(f"the mail server is down (attempt {job.attempt})")
        return sent

    charge = hourglass.step("charge", lambda: call("charge"))
    hourglass.step("reserve", lambda: call("reserve"))
    if s.get("sleep_ms"):
        hourglass.sleep(s["sleep_ms"] / 1000)
    if "approval_s" in s:
        by = hourglass.wait_for_signal("approved", s["approval_s"])
        if by is None:
            return hourglass.fail("not approved in time")
        hourglass.step("approved", lambda: http.post(f"{s['shop']}/approved?order=1", by).status)
    hourglass.step("email", email)
    return hourglass.result({"charge": charge})
