"""Fixtures the unit tests share: a fake Ray cluster (the ray_job module and action tests) and a shared root."""

import pytest
from ansible.module_utils import conventions
from ansible.module_utils import ray_cluster as rc
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.jobs import evidence, follow, record, submit
from ray_job_harness import HEAD, WORKER, Clock, FakeRay


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
    for module in (evidence, follow, record, submit):
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
