"""Fixtures the tests of library/ share: ray_node's faked host and a head's arguments (test_ray_node_module.py,
test_ray_node_store.py). test_shared_root_module.py fakes a host of its own, under the same name, which wins there."""

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node import ray_node
from ray_node_helpers import PYTHON, Host


@pytest.fixture
def host(monkeypatch):
    fake = Host()
    monkeypatch.setattr(AnsibleModule, "run_command", lambda module, args, **kw: fake.run_command(args, **kw))
    monkeypatch.setattr(ray_node, "find_raylets", lambda: list(fake.raylets))
    monkeypatch.setattr(ray_node, "find_gcs_servers", lambda: [] if fake.gcs_died else list(fake.raylets))
    monkeypatch.setattr(ray_node, "find_job_drivers", lambda: list(fake.drivers))
    monkeypatch.setattr(ray_node, "kill_pids", fake.kill_pids)
    return fake


@pytest.fixture
def head(tmp_path):
    return {"role": "head", "python": PYTHON, "node_ip": "10.0.0.10", "state_file": str(tmp_path / "run" / "node.json"),
            "env": {"RAY_AUTH_MODE": "token"}}
