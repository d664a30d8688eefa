# A Python batch handler for the tests: each job's JSON payload says how it
# ends, as handlers/batcher (Rust) does: {"fail_first": N} retries its first N
# attempts, {"fail": "why"} fails it for good, {"trap": true} raises, failing
# every job of its call.
import hourglass


@hourglass.batch_handler
def handle(jobs):
    hourglass.info(f"a batch of {len(jobs)} job(s)")
    plans = []
    for job in jobs:
        try:
            plans.append(job.json())
        except ValueError:
            plans.append({})
    if any(p.get("trap") for p in plans):
        raise RuntimeError("a job of this batch asked for a trap")
    out = []
    for job, plan in zip(jobs, plans):
        if plan.get("fail"):
            out.append(hourglass.fail(plan["fail"]))
        elif job.attempt <= plan.get("fail_first", 0):
            out.append(hourglass.retry(f"job {job.id} failing on attempt {job.attempt}"))
        else:
            out.append(None)
    return out
