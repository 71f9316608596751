"""doctor.yml on the lab (issue: doctor, diagnosis, retries)."""

import json

import pytest
from conftest import playbook, ssh

pytestmark = pytest.mark.usefixtures("cluster")


def test_a_healthy_lab_passes_with_a_row_per_node():
    run = playbook("doctor.yml")
    assert run.rc == 0, run
    header = next(line for line in run.out.splitlines() if "node" in line and "python" in line and "verl" in line)
    for column in ("ray", "torch", "snapshots", "gpus", "shared root", "free", "clock", "iface"):
        assert column in header
    for host in ("lab-head", "lab-worker1", "lab-worker2"):
        assert any(line.strip().strip('",').startswith(host + " ") for line in run.out.splitlines()), host
    assert "sees all" in run.out and "!!" not in run.out


def test_a_drifted_worker_is_named_with_the_check_and_the_fix():
    # Ray's workers on lab-worker2 see another verl version: a dist-info first on the raylet's PYTHONPATH.
    ssh("lab-worker2", "mkdir -p /tmp/drift/verl-9.9.9.dist-info && "
        "printf 'Metadata-Version: 2.1\\nName: verl\\nVersion: 9.9.9\\n' > /tmp/drift/verl-9.9.9.dist-info/METADATA")
    env = {"ray_node_env": {"RAY_USAGE_STATS_ENABLED": "0", "RAY_JOB_START_TIMEOUT_SECONDS": "120",
                            "PYTHONPATH": "/tmp/drift"}}
    drift = playbook("up.yml", "-l", "lab-worker2", "-e", json.dumps(env))
    assert drift.rc == 0, drift
    try:
        run = playbook("doctor.yml")
        assert run.rc != 0
        assert "lab-worker2: verl: 9.9.9 (the head has verl 0.9.1: install the same version on every node)" in run.out
        assert "lab-worker1: verl" not in run.out
    finally:
        healed = playbook("up.yml")
        assert healed.rc == 0, healed
    assert playbook("doctor.yml").rc == 0
