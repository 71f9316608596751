"""Fair share and the queue's order: by class (high first), then, within a class, the submitter who used the fewest
GPU-seconds over the recent window (from the records' own start and end times; a job still running counts up to
now), then age (the earliest enqueued first), then id, so the order is total and the same on every control host."""

from ansible.module_utils.queue.model import RANK

WINDOW_S = 7 * 24 * 3600  # the fair-share window's default: the last week's use


def gpu_seconds(usages, now, window_s=WINDOW_S):
    """{submitter: GPU-seconds used within [now - window_s, now]} over Usage values (model.usage_of)."""
    since, out = now - window_s, {}
    for u in usages:
        if u.start_s is None or not u.ranks:
            continue
        start = max(u.start_s, since)
        end = min(now if u.end_s is None else u.end_s, now)
        if end > start:
            out[u.submitter] = out.get(u.submitter, 0) + (end - start) * u.ranks
    return out


def order_key(entry, used):
    """The sort key of an entry given {submitter: GPU-seconds}: class, fair share, age, id."""
    return -RANK[entry.priority], used.get(entry.submitter, 0), entry.enqueued_s, entry.id


def order(entries, used):
    """The entries in the queue's order (a new list)."""
    return sorted(entries, key=lambda e: order_key(e, used))
