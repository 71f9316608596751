"""Fair share over a recent window, from the records' own times, and the queue's order."""

from ansible.module_utils.queue import model, share
from queue_helpers import entry


def use(who, ranks, start, end=None):
    return model.usage_of({"submitter": who, "ranks": ranks, "start_s": start, "end_s": end})


def test_gpu_seconds_count_within_the_window_and_a_running_job_up_to_now():
    uses = [use("alice", 2, 0, 100),  # before the window: 50..100 counts, 2 ranks
            use("alice", 1, 900, None),  # running: 900..1000
            use("bob", 8, 0, 40),  # all before the window
            use("carol", 4, None, None),  # never ran
            use("dave", 1, 990, 2000)]  # ends in the future (a record's clock ahead): counted up to now
    assert share.gpu_seconds(uses, now=1000, window_s=950) == {"alice": 2 * 50 + 100, "dave": 10}


def test_order_is_class_then_fair_share_then_age_then_id():
    entries = [entry("n-old-heavy", who="alice", enqueued=1), entry("n-new-light", who="bob", enqueued=5),
               entry("h-late", who="alice", priority="high", enqueued=9), entry("l-first", priority="low", enqueued=0),
               entry("n-b", who="carol", enqueued=5), entry("n-a", who="carol", enqueued=5)]
    used = {"alice": 1000, "bob": 5, "carol": 10}  # bob used least: first of the normal class
    assert [e.id for e in share.order(entries, used)] == [
        "h-late", "n-new-light", "n-a", "n-b", "n-old-heavy", "l-first"]
    # nobody used anything: age decides within a class
    assert [e.id for e in share.order(entries, {})][1:4] == ["n-old-heavy", "n-a", "n-b"]
