"""doctor.store_check: the GCS store answers the head, keeps its data, and the head's Ray really uses it."""

import copy

import pytest
from ansible.module_utils.node import doctor

STORE = {"address": "10.0.0.9:6380", "namespace": "ray-verl-10-0-0-10-6379", "reconnect_s": 600,
         "check": {"reachable": True, "version": "7.0.15", "aof_enabled": True, "persistence_ok": True,
                   "cluster_data": True}}


@pytest.fixture
def with_store(facts):
    found = copy.deepcopy(facts)
    found["head"]["raylet_env"].update(RAY_REDIS_ADDRESS="10.0.0.9:6380",
                                       RAY_external_storage_namespace="ray-verl-10-0-0-10-6379")
    for host in ("w1", "w2"):
        found[host]["raylet_env"]["RAY_gcs_rpc_server_reconnect_timeout_s"] = "600"
    return found


def test_a_store_in_use_is_one_line_and_no_problem(with_store):
    line, problems = doctor.store_check(STORE, with_store, "head")
    assert problems == [] and line.startswith("GCS store 10.0.0.9:6380: Redis 7.0.15") and "in use by the head" in line


def test_no_store_is_said_not_blamed(facts):
    line, problems = doctor.store_check(None, facts, "head")
    assert problems == [] and line.startswith("GCS store: none")


@pytest.mark.parametrize("change, expected", [
    ({"check": {"failed": True, "msg": "Redis at 10.0.0.9:6380: refused the password for user default"}},
     ("head: store: Redis at 10.0.0.9:6380: refused the password for user default "
      "(the store runs with another password")),
    ({"check": {"failed": False, "reachable": False,  # as doctor.yml registers it (failed_when false)
                "msg": "Redis at 10.0.0.9:6380: cannot connect (Connection refused)"}},
     "(start it with up.yml"),
    ({"check": {"failed": True, "reachable": True, "version": "7.0.15",  # the facts it had when cut short
                "msg": "Redis at 10.0.0.9:6380: the check did not finish within its deadline of 30s; found so far: "
                       "Redis 7.0.15, append-only file on, persistence ok, no Ray tables of namespace x in 9 SCAN "
                       "calls (cluster_data unknown)"}},
     "(cluster_data unknown) (it answers too slowly, or what listens on its port is not the store"),
    ({"check": dict(STORE["check"], persistence_ok=False)}, "does not keep its data on disk"),
    ({"check": dict(STORE["check"], cluster_data=False)}, "holds no tables of namespace"),
])
def test_each_store_problem_names_the_head_and_a_fix(with_store, change, expected):
    _, problems = doctor.store_check({**STORE, **change}, with_store, "head")
    assert len(problems) == 1 and expected in problems[0], problems


def test_a_head_started_without_the_store_and_a_worker_without_the_window_are_named(with_store):
    with_store["head"]["raylet_env"].pop("RAY_REDIS_ADDRESS")
    with_store["w2"]["raylet_env"].pop("RAY_gcs_rpc_server_reconnect_timeout_s")
    _, problems = doctor.store_check(STORE, with_store, "head")
    assert [p.split(":")[0] for p in problems] == ["head", "w2"]
    assert "was not started with the store" in problems[0] and "the default 60 s" in problems[1]
