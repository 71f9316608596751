"""Fixtures the unit tests share: a fake Ray cluster (the ray_job module and action tests), a shared root, and real
redis-servers and fake peers on 127.0.0.1 (the redis_store and ray_store_info tests; the servers listen on a free port
and are killed by PID at teardown)."""

import os

import pytest
from ansible.module_utils.base import conventions, cordon_hold
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs import evidence, follow, record, step, submit
from ray_job_harness import HEAD, WORKER, Clock, FakeRay
from redis_harness import REDIS_SERVER, FakePeer, RedisServer


@pytest.fixture
def ray(monkeypatch):
    clock = Clock()
    fake = FakeRay(clock)
    monkeypatch.setattr(rc, "job_client", fake.client)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER])
    monkeypatch.setattr(rc, "cluster_status_text", lambda url, token: "======== Autoscaler status ========")
    monkeypatch.setattr(rc, "list_actor_summaries", lambda url, limit=1000: [])
    monkeypatch.setattr(rc, "list_alive_actor_nodes", lambda url: [])
    monkeypatch.setattr(rc, "job_log_tail", fake.log_tail)
    monkeypatch.setattr(rc, "job_log_chunks", fake.log_chunks)
    monkeypatch.setattr(rc, "node_logs", fake.node_logs)  # the nodes' own logs: never a request from a unit test
    monkeypatch.setattr(rc, "node_log_tail", fake.node_log_tail)
    monkeypatch.setattr(cordon_hold, "list_groups", fake.list_groups)  # the cordons' holds (around.py)
    monkeypatch.setattr(cordon_hold, "apply", fake.hold)
    for module in (evidence, follow, record, step, submit):
        monkeypatch.setattr(module, "time", clock)

    def no_process(self, args, **kwargs):
        raise AssertionError(f"unexpected command {args}")

    monkeypatch.setattr(AnsibleModule, "run_command", no_process)
    # The module clears proxies and RAY_ADDRESS in its own process: give them back afterwards.
    for name in (*rc._STRAY_ENV, "NO_PROXY", "no_proxy", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.setenv(name, "")
    return fake


@pytest.fixture
def ray_config(tmp_path):
    (tmp_path / conventions.SHARED_ROOT_MARK).write_text("0123abcd\n")  # what up.yml's shared_root leaves
    return {"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265", "shared_root": str(tmp_path)}


@pytest.fixture
def redis_servers(tmp_path):
    """start(password=PASSWORD, appendonly=True) -> a running RedisServer; all stopped at teardown."""
    if not os.access(REDIS_SERVER, os.X_OK):
        pytest.skip(f"{REDIS_SERVER} is missing (apt-get install redis-server): these tests need a real Redis")
    started = []

    def start(**options):
        folder = tmp_path / f"redis{len(started)}"
        folder.mkdir()
        started.append(RedisServer(folder, **options))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def redis(redis_servers):
    return redis_servers()


@pytest.fixture
def fake_peer():
    peers = []

    def start(reply, close=False):
        peers.append(FakePeer(reply, close))
        return peers[-1]

    yield start
    for peer in peers:
        peer.close()
