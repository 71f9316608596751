"""The queue's models: strict checks with one line naming the bad field, and their defaults."""

import pytest
from ansible.module_utils.queue import model
from ansible.module_utils.queue.model import QueueError


def good_entry(**changes):
    data = {"id": "job-1", "submitter": "alice", "enqueued_s": 10, "placement": {"nodes": 2, "per_node": {"GPU": 1}}}
    data.update(changes)
    return data


def test_an_entry_takes_its_defaults():
    e = model.entry_of(good_entry())
    assert (e.priority, e.preemptible, e.max_run_s) == ("normal", False, None)
    assert (e.placement.nodes, e.placement.per_node, e.placement.ranks_per_node, e.placement.ranks) == (
        2, {"GPU": 1}, 1, 2)


def test_only_the_lowest_class_is_preemptible_by_default_and_a_job_may_say_otherwise():
    assert model.entry_of(good_entry(priority="low")).preemptible is True
    assert model.entry_of(good_entry(priority="high")).preemptible is False
    assert model.entry_of(good_entry(priority="low", preemptible=False)).preemptible is False
    assert model.entry_of(good_entry(priority="normal", preemptible=True)).preemptible is True


def test_ranks_count_a_cpu_platforms_ranks_as_gpus():
    """On the lab the placement asks CPUs; its trainer's ranks (n_gpus_per_node) are what quotas count."""
    e = model.entry_of(good_entry(placement={"nodes": 2, "per_node": {"CPU": 4}, "ranks_per_node": 1}))
    assert e.placement.ranks == 2
    assert model.entry_of(good_entry(placement={"per_node": {"GPU": 0.5}})).placement.ranks == 1


@pytest.mark.parametrize("changes, field", [
    ({"priority": "urgent"}, "priority"),
    ({"id": "../x"}, "id"),
    ({"submitter": ""}, "submitter"),
    ({"submitter": None}, "submitter"),
    ({"enqueued_s": -1}, "enqueued_s"),
    ({"enqueued_s": float("nan")}, "enqueued_s"),
    ({"enqueued_s": 10 ** 40}, "enqueued_s"),
    ({"max_run_s": 0}, "max_run_s"),
    ({"max_run_s": True}, "max_run_s"),
    ({"preemptible": "yes"}, "preemptible"),
    ({"placement": {"nodes": 0, "per_node": {"GPU": 1}}}, "placement.nodes"),
    ({"placement": {"nodes": 10 ** 6, "per_node": {"GPU": 1}}}, "placement.nodes"),
    ({"placement": {"per_node": {"GPU": -1}}}, "placement.per_node.GPU"),
    ({"placement": {"per_node": {"GPU": "1"}}}, "placement.per_node.GPU"),
    ({"placement": {"per_node": {"bad name": 1}}}, "placement.per_node.bad name"),
    ({"placement": {"per_node": {f"r{i}": 1 for i in range(40)}}}, "placement.per_node"),
    ({"placement": {"per_node": {"GPU": 1}, "gang": 2}}, "placement.gang"),
    ({"placement": []}, "placement"),
    ({"extra": 1}, "extra"),
])
def test_a_bad_entry_is_one_line_naming_the_field(changes, field):
    with pytest.raises(QueueError) as caught:
        model.entry_of(good_entry(**changes))
    text = str(caught.value)
    assert text.startswith(f"queue entry field '{field}'") and "\n" not in text, text


def test_an_entry_must_ask_for_something_and_must_be_a_mapping():
    with pytest.raises(QueueError, match="'placement': must ask for something"):
        model.entry_of(good_entry(placement={"nodes": 1, "per_node": {"GPU": 0}}))
    for bad in (None, [], "x", 3):
        with pytest.raises(QueueError, match="^queue entry field '': must be a mapping"):
            model.entry_of(bad)
    with pytest.raises(QueueError, match="'id': is required"):
        model.entry_of({"submitter": "a", "enqueued_s": 1, "placement": {"per_node": {"GPU": 1}}})


def test_a_worker_and_a_running_job():
    w = model.worker_of({"id": "198.18.0.11", "free": {"GPU": 1, "worker_node": 1}})
    assert (w.cordoned, w.free) == (False, {"GPU": 1, "worker_node": 1})
    r = model.running_of({"id": "r", "submitter": "bob", "started_s": 5, "max_run_s": 10,
                          "holds": {"198.18.0.11": {"GPU": 2}, "198.18.0.12": {"GPU": 1.5}}})
    assert (r.priority, r.preemptible, r.ranks, r.end_s) == ("normal", False, 4, 15)
    assert model.running_of({"id": "r", "submitter": "b", "started_s": 5}).end_s is None
    assert model.worker_of({"id": "fd00::11", "free": {"GPU": 1}}).id == "fd00::11"
    with pytest.raises(QueueError, match="^worker field 'id'"):
        model.worker_of({"id": "../w", "free": {}})
    with pytest.raises(QueueError, match="^worker field 'free.GPU'"):
        model.worker_of({"id": "w", "free": {"GPU": "all"}})
    with pytest.raises(QueueError, match="^running job field 'holds.w.GPU'"):
        model.running_of({"id": "r", "submitter": "b", "started_s": 5, "holds": {"w": {"GPU": -2}}})


def test_quotas_default_and_per_user():
    q = model.quotas_of({"default": {"jobs": 2, "gpus": 8}, "users": {"alice": {"gpus": 16}}})
    assert (q.of("bob").jobs, q.of("bob").gpus) == (2, 8)
    assert (q.of("alice").jobs, q.of("alice").gpus) == (None, 16)  # a named user's own limits, not merged
    assert model.quotas_of(None).of("x") == model.Limit(None, None)


@pytest.mark.parametrize("value, field", [
    ({"default": {"gpus": -1}}, "default.gpus"),
    ({"default": {"gpu": 1}}, "default.gpu"),
    ({"users": {"al ice": {"jobs": 1}}}, "users.al ice"),
    ({"users": {"alice": {"jobs": 1.5}}}, "users.alice.jobs"),
    ({"users": []}, "users"),
    ({"site": {}}, "site"),
])
def test_bad_quotas_are_one_line(value, field):
    with pytest.raises(QueueError) as caught:
        model.quotas_of(value)
    assert str(caught.value).startswith(f"ray_queue_quotas field '{field}'"), str(caught.value)


def test_a_usage_ends_after_it_starts():
    assert model.usage_of({"submitter": "a", "ranks": 2, "start_s": 1, "end_s": None}).end_s is None
    with pytest.raises(QueueError, match="'end_s': must not be before start_s"):
        model.usage_of({"submitter": "a", "ranks": 2, "start_s": 5, "end_s": 1})


def test_every_reason_has_words():
    names = {value for name, value in vars(model).items() if name.isupper() and isinstance(value, str)
             and value in model.REASON_WORDS}
    assert names == set(model.REASON_WORDS)
    assert len(set(model.VERDICTS)) == 3


def test_which_classes_preempt():
    assert model.preempting_of(None) == ("high",)
    assert model.preempting_of(["normal", "high"]) == ("normal", "high")
    assert model.preempting_of([]) == ()
    for bad in ("high", ["urgent"], [None], {"high": 1}):
        with pytest.raises(QueueError, match="^field 'ray_queue_preempting"):
            model.preempting_of(bad)
