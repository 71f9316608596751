"""doctor.yml on the lab (issue: doctor, diagnosis, retries)."""

import json
import time

import pytest
from conftest import playbook, ssh

pytestmark = pytest.mark.usefixtures("cluster")


def flat(text):
    """The output with every run of whitespace as one space: the callback wraps long lines anywhere."""
    return " ".join(text.split())


def test_a_healthy_lab_passes_with_a_row_per_node():
    run = playbook("doctor.yml")
    assert run.rc == 0, run
    out = flat(run.out)
    assert ("node python ray torch verl vllm sglang transformers snapshots gpus shared root free clock iface"
            in out), run
    for host in ("lab-head", "lab-worker1", "lab-worker2"):
        assert f"- {host} 3.11" in out, host
    assert "sees all" in out and "!!" not in out
    # The lab's GCS store (lab-store): the head reaches it with the password and its Ray writes its tables there.
    assert "GCS store 198.18.0.254:6380: Redis 7." in out and "append-only file on" in out, run
    assert "in use by the head" in out, run


def test_a_service_whose_user_cannot_reach_its_files_is_named_and_up_yml_opens_the_folder():
    # As a head's first token write once left it (issue 30): Prometheus's user can no longer enter /etc/ray-verl.
    ssh("lab-head", "chmod 0700 /etc/ray-verl")
    run = playbook("doctor.yml")
    assert run.rc != 0, run
    assert ("lab-head: Prometheus: its user cannot enter /etc/ray-verl, so it cannot read its files: re-run up.yml"
            in flat(run.out)), run
    assert ssh("lab-head", "stat -c %a /etc/ray-verl").strip() == "700"  # the doctor changes nothing
    assert playbook("up.yml").rc == 0
    assert ssh("lab-head", "stat -c %a /etc/ray-verl").strip() == "701"  # search only: its listing stays root's
    healed = playbook("doctor.yml")
    assert healed.rc == 0 and "services: TensorBoard, Prometheus: their users reach their files" in flat(healed.out)
    assert healed.changed("lab-head") == 0, healed


def test_a_store_that_refuses_the_password_is_named_with_the_fix(tmp_path):
    other = tmp_path / "store_password"
    other.write_text("0" * 64 + "\n")
    run = playbook("doctor.yml", "-e", f"ray_store_control_password_path={other}")
    assert run.rc != 0, run
    out = flat(run.out)
    assert "lab-head: store: Redis at 198.18.0.254:6380: refused the password" in out, run
    assert "the store runs with another password than the control host's" in out
    assert "0" * 64 not in run.out


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
        out = flat(run.out)
        assert "lab-worker2: verl: 9.9.9 (the head has verl 0.9.1: install the same version on every node)" in out
        assert "lab-worker1: verl" not in out
    finally:
        healed = playbook("up.yml")
        assert healed.rc == 0, healed
    # The healed worker was restarted: Ray lists its replaced node ALIVE beside it until its health checks fail (about
    # 30 s), which doctor.yml allows for (the old address's Prometheus target); it must pass within that window.
    deadline = time.monotonic() + 90
    after = playbook("doctor.yml")
    while after.rc != 0 and time.monotonic() < deadline:  # each run takes seconds: no sleep
        after = playbook("doctor.yml")
    assert after.rc == 0, after.out[-4000:]
