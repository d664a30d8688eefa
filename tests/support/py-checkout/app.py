"""The checkout saga in Python, in the four versions of the tests' upgrade
story (docs: "Changing durable code"). The test support's build script
builds it once per version, with `VERSION = <n>` put before this text:

1. charge, reserve, sleep, email: each call to the shop a step;
2. a log line before the sleep and a `receipt` step after the email
   (jobs asleep on 1 can move to it);
3. the recorded step `reserve` renamed `reserve-stock` (they cannot);
4. that rename guarded by `hourglass.patched` (they can again).

    {"order": 1042, "shop": "http://127.0.0.1:8080", "sleep_ms": 3600000,
     "approval_ms": 86400000}
"""

import hourglass
from hourglass import http


def call(order, what, body=""):
    """POST <shop>/<what>?order=<order>: the answer's text (2xx), else retried."""
    res = http.post(f"{order['shop']}/{what}?order={order['order']}", body)
    if not res.ok:
        raise hourglass.Retry(f"{what}: the shop answered {res.status}")
    return res.body.decode()


@hourglass.handler
def checkout(job):
    order = job.json()
    charge = hourglass.step("charge", lambda: call(order, "charge"))
    if VERSION == 3 or (VERSION >= 4 and hourglass.patched("reserve-stock")):  # noqa: F821
        hourglass.step("reserve-stock", lambda: call(order, "reserve-stock", charge))
    else:
        hourglass.step("reserve", lambda: call(order, "reserve", charge))
    if VERSION >= 2:  # noqa: F821
        hourglass.info(f"order {order['order']}: charged {charge} and reserved; waiting")
    if order.get("sleep_ms"):
        hourglass.sleep(order["sleep_ms"] / 1000)
    if order.get("approval_ms"):
        by = hourglass.wait_for_signal("approved", order["approval_ms"] / 1000)
        if by is None:
            return hourglass.fail("not approved in time")
        hourglass.step("approved", lambda: call(order, "approved", by.decode()))
    hourglass.step("email", lambda: call(order, "email", charge))
    if VERSION >= 2:  # noqa: F821
        hourglass.step("receipt", lambda: call(order, "receipt", charge))
