"""Fixtures the unit tests share: a fake Ray cluster (the ray_job module and action tests), a shared root, and real
redis-servers and fake peers on 127.0.0.1 (the redis_store and ray_store_info tests; the servers listen on a free port
and are killed by PID at teardown)."""

import os

import pytest
from ansible.module_utils.base import conventions
from ray_job_harness import fake_ray
from redis_harness import REDIS_SERVER, FakePeer, RedisServer


@pytest.fixture
def ray(monkeypatch):
    return fake_ray(monkeypatch)


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
