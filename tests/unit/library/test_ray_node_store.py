"""library/ray_node.py with a GCS store (issue 20): the head gets the store's password, which no file, result or
error shows; a new password restarts the head like a new token."""

import json
import os

import pytest
from ray_node_helpers import RAY, read_state, read_text, run

PASSWORD = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
OTHER = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
STORE_ENV = {"RAY_AUTH_MODE": "token", "RAY_REDIS_ADDRESS": "10.0.0.9:6380",
             "RAY_external_storage_namespace": "ray-verl-10-0-0-10-6379"}


@pytest.fixture
def store_head(head, monkeypatch):
    # No test reaches a store: Ray's cleanup is faked (a test that wants its calls patches it again).
    monkeypatch.setattr("ray._private.gcs_utils.cleanup_redis_storage", lambda *args: True)
    return {**head, "env": STORE_ENV, "redis_password": PASSWORD}


def test_the_head_starts_with_the_store_and_its_password_is_shown_nowhere(host, store_head, capsys):
    code, out = run(capsys, store_head)
    assert code == 0 and out["action"] == "start"
    [argv] = host.commands[1:]
    assert argv[:2] == [RAY, "start"] and f"--redis-password={PASSWORD}" in argv
    assert host.environs[1]["RAY_REDIS_ADDRESS"] == "10.0.0.9:6380"
    state = read_text(store_head["state_file"])
    assert PASSWORD not in state and PASSWORD not in json.dumps(out)
    shown = [a for a in read_state(store_head)["argv"] if a.startswith("--redis-password=")]
    assert shown == out["argv"][-1:] and shown[0].startswith("--redis-password=sha256:")


def test_a_new_password_restarts_the_head_and_the_change_names_no_password(host, store_head, capsys):
    run(capsys, store_head)
    code, out = run(capsys, {**store_head, "redis_password": OTHER, "force": True})
    assert code == 0 and out["action"] == "restart" and out["reason"] == "configuration changed", out
    assert out["store_cleared"] == STORE_ENV["RAY_external_storage_namespace"]  # a restarted head: a new cluster
    assert all(PASSWORD not in c and OTHER not in c for c in out["changes"])
    assert any(c.startswith("+--redis-password=sha256:") for c in out["changes"])


def test_a_failed_start_does_not_quote_the_password(host, store_head, capsys):
    host.start = (1, f"ray start --redis-password={PASSWORD}\n", "ConnectionError: store refused\n")
    code, out = run(capsys, store_head)
    assert code == 1 and PASSWORD not in out["msg"] and "store refused" in out["msg"]
    assert not os.path.exists(store_head["state_file"])


def test_a_worker_gets_no_password_argument(host, store_head, capsys):
    code, _ = run(capsys, {**store_head, "role": "worker", "head_ip": "10.0.0.10"})
    assert code == 0 and not any(a.startswith("--redis-password") for a in host.commands[1])


def test_stopping_the_head_clears_its_tables_from_the_store(host, store_head, capsys, monkeypatch):
    run(capsys, store_head)
    cleared = []
    monkeypatch.setattr("ray._private.gcs_utils.cleanup_redis_storage",
                        lambda *args: cleared.append(args) or True)
    code, out = run(capsys, {**store_head, "state": "stopped"})
    assert code == 0 and out["action"] == "stop" and out["store_cleared"] == STORE_ENV["RAY_external_storage_namespace"]
    assert cleared == [("10.0.0.9", 6380, PASSWORD, False, "ray-verl-10-0-0-10-6379")]


def test_a_store_that_cannot_be_cleared_is_one_line_without_the_password(host, store_head, capsys,
                                                                         monkeypatch):
    run(capsys, store_head)

    def refused(*args):
        raise ConnectionError(f"Redis at 10.0.0.9:6380 refused AUTH {PASSWORD}")

    monkeypatch.setattr("ray._private.gcs_utils.cleanup_redis_storage", refused)
    code, out = run(capsys, {**store_head, "state": "stopped"})
    assert code == 1 and out["msg"].startswith("Ray stopped, but its tables stay in the GCS store")
    assert PASSWORD not in json.dumps(out)


def test_a_head_whose_gcs_server_died_is_started_again_keeping_the_stores_tables(host, store_head, capsys,
                                                                                 monkeypatch):
    # Ray's GCS server exits when its store goes away (a store restarted); the head's raylet lives on a while.
    run(capsys, store_head)
    host.gcs_died = True
    cleared = []
    monkeypatch.setattr("ray._private.gcs_utils.cleanup_redis_storage", lambda *args: cleared.append(args) or True)
    code, out = run(capsys, store_head)
    assert code == 0 and out["action"] == "start" and "GCS server died" in out["reason"]
    assert [c[1] for c in host.commands[-2:]] == ["stop", "start"] and cleared == []


# The head's check of the store happens in its own ray_node call (option store), against a real redis-server.
def checked_head(store_head, server, password):
    return {**store_head, "redis_password": password,
            "store": {"host": "127.0.0.1", "port": server.port, "namespace": "ray-verl-10-0-0-10-6379"}}


def test_the_store_is_checked_before_the_head_starts_and_says_whether_it_holds_the_cluster(host, store_head, redis,
                                                                                         capsys):
    from redis_harness import PASSWORD as STORE_PASSWORD

    code, out = run(capsys, checked_head(store_head, redis, STORE_PASSWORD))
    assert code == 0 and out["action"] == "start"
    assert out["store"]["reachable"] and out["store"]["persistence_ok"] and out["store"]["cluster_data"] is False
    with redis.client() as client:  # the head's tables, as Ray's GCS writes them
        client.command("SET", "RAYray-verl-10-0-0-10-6379@NODE", "x")
    code, out = run(capsys, checked_head(store_head, redis, STORE_PASSWORD))
    assert code == 0 and out["store"]["cluster_data"] is True


def test_a_store_refusing_the_password_fails_in_one_line_and_the_head_does_not_start(host, store_head, redis, capsys):
    code, out = run(capsys, checked_head(store_head, redis, PASSWORD))
    assert code == 1 and out["msg"] == f"Redis at 127.0.0.1:{redis.port}: refused the password for user default"
    assert PASSWORD not in json.dumps(out) and not [c for c in host.commands if c[1:2] == ["start"]]


def test_a_store_that_does_not_persist_fails_naming_why(host, store_head, redis_servers, capsys):
    from redis_harness import PASSWORD as STORE_PASSWORD

    server = redis_servers(appendonly=False)
    code, out = run(capsys, checked_head(store_head, server, STORE_PASSWORD))
    assert code == 1 and "does not persist Ray's tables: appendonly is off" in out["msg"]
    assert "\n" not in out["msg"] and not [c for c in host.commands if c[1:2] == ["start"]]


def test_an_unreachable_store_fails_in_one_line(host, store_head, capsys):
    from redis_harness import free_port

    port = free_port()
    code, out = run(capsys, {**store_head, "store": {"host": "127.0.0.1", "port": port, "namespace": "ns"}})
    assert code == 1 and out["msg"].startswith(f"Redis at 127.0.0.1:{port}: ") and "\n" not in out["msg"]
    assert out["store"] == {"reachable": False}
