"""Refunds a cancelled order: parse the JSON payload, decide, tell the
customer through a follow-up job to the `notify` topic (a JavaScript
handler) once the refund is done, and answer with the refund's id (the
job's result, for `hourglass enqueue refund ... --wait`).

    {"order_id": 1042, "customer": "ada", "amount_cents": 1999}
"""

import hourglass

# Refunds above this need a person: they fail (dead letter) for review.
LIMIT_CENTS = 50_000


@hourglass.handler
def refund(job):
    order = job.json()  # not JSON: dead letter
    order_id = order.get("order_id")
    amount = order.get("amount_cents")
    customer = order.get("customer")
    if not isinstance(order_id, int) or not isinstance(amount, int):
        return hourglass.fail("the payload needs an integer order_id and amount_cents")
    if amount <= 0:
        return hourglass.fail(f"order {order_id}: nothing to refund")
    if amount > LIMIT_CENTS:
        return hourglass.fail(f"order {order_id}: {amount / 100:.2f} is over the limit; a person decides")
    if not customer:
        # the customer record may not be written yet: try again soon
        return hourglass.retry_in(2, f"order {order_id}: no customer yet")
    hourglass.info(f"refunded {amount / 100:.2f} for order {order_id} to {customer}")
    hourglass.follow_up(
        "notify",
        {"customer": customer, "message": f"your refund of {amount / 100:.2f} is on its way"},
        id=f"refund-{order_id}",
    )
    return hourglass.result({"refund_id": f"rf-{order_id}", "amount_cents": amount})
