"""up.yml, status.yml and down.yml on the lab (issue: cluster lifecycle)."""

import json
import urllib.error
import urllib.request

import pytest
from conftest import DASHBOARD, HEAD, IPS, TOKEN, WORKER1, WORKER2, alive_by_ip, nodes, playbook, ssh, wait_for

pytestmark = pytest.mark.usefixtures("lab")


def test_up_brings_three_nodes_with_expected_resources():
    run = playbook("up.yml")
    assert run.rc == 0, run
    alive = alive_by_ip()
    assert set(alive) == set(IPS.values())
    head = alive[IPS[HEAD]]
    assert head["is_head_node"]
    assert head["resources_total"].get("CPU", 0) == 0 and head["resources_total"].get("GPU", 0) == 0
    for worker in (WORKER1, WORKER2):
        res = alive[IPS[worker]]["resources_total"]
        assert res["worker_node"] == 1 and res["GPU"] == 4 and res["CPU"] > 0


def test_second_up_changes_nothing_and_keeps_node_ids():
    before = {ip: n["node_id"] for ip, n in alive_by_ip().items()}
    run = playbook("up.yml")
    assert run.rc == 0, run
    assert {host: run.changed(host) for host in IPS} == {host: 0 for host in IPS}
    assert {ip: n["node_id"] for ip, n in alive_by_ip().items()} == before


def test_check_mode_changes_nothing():
    before = {ip: n["node_id"] for ip, n in alive_by_ip().items()}
    run = playbook("up.yml", "--check")
    assert run.rc == 0, run
    assert {ip: n["node_id"] for ip, n in alive_by_ip().items()} == before


def test_status_summarises_nodes_jobs_and_shared_root():
    run = playbook("status.yml")
    assert run.rc == 0, run
    assert "nodes: 3 alive" in run.out and DASHBOARD in run.out and "ray: 2.60.0" in run.out
    for host in IPS:
        assert f"{host}: /dev/" in run.out or f"{host}: " in run.out
    assert "NOT MOUNTED" not in run.out


def _post_job(headers):
    body = json.dumps({"entrypoint": "echo should-not-run"}).encode()
    request = urllib.request.Request(DASHBOARD + "/api/jobs/", data=body, method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_job_submission_needs_the_token():
    assert _post_job({}) == 401
    assert _post_job({"Authorization": "Bearer " + "0" * 64}) == 403
    with open(TOKEN) as handle:
        token = handle.read().strip()
    assert len(token) == 64
    # The token file on the control host is private.
    import os
    import stat
    assert stat.S_IMODE(os.stat(TOKEN).st_mode) == 0o600
    assert token not in playbook("up.yml").out


def test_killed_worker_raylet_is_rejoined():
    old_id = alive_by_ip()[IPS[WORKER1]]["node_id"]
    head_id = alive_by_ip()[IPS[HEAD]]["node_id"]
    ssh(WORKER1, "kill -9 $(pgrep -x raylet)")
    wait_for(lambda: IPS[WORKER1] not in alive_by_ip(), 60, "worker1 to be seen DEAD")
    run = playbook("up.yml")
    assert run.rc == 0, run
    alive = alive_by_ip()
    assert alive[IPS[WORKER1]]["node_id"] != old_id
    assert alive[IPS[HEAD]]["node_id"] == head_id
    assert run.changed(HEAD) == 0 and run.changed(WORKER2) == 0 and run.changed(WORKER1) >= 1


def test_worker_without_shared_root_fails_naming_it():
    ssh(WORKER2, "umount /private")
    try:
        run = playbook("up.yml", "-e", "shared_root_mode=none")
        assert run.rc != 0
        assert "lab-worker2: /private is not the shared root" in run.out
        assert "lab-worker1: /private is not the shared root" not in run.out
    finally:
        healed = playbook("up.yml")
    assert healed.rc == 0, healed
    assert healed.changed(WORKER2) >= 1
    assert "/private" in ssh(WORKER2, "findmnt --noheadings --output TARGET --mountpoint /private")


def test_drift_restarts_workers_but_not_the_head():
    before = alive_by_ip()
    run = playbook("up.yml", "-e", "ray_worker_num_gpus=2")
    assert run.rc == 0, run
    after = alive_by_ip()
    assert after[IPS[HEAD]]["node_id"] == before[IPS[HEAD]]["node_id"]
    for worker in (WORKER1, WORKER2):
        assert after[IPS[worker]]["node_id"] != before[IPS[worker]]["node_id"]
        assert after[IPS[worker]]["resources_total"]["GPU"] == 2
    back = playbook("up.yml")
    assert back.rc == 0, back
    assert alive_by_ip()[IPS[WORKER1]]["resources_total"]["GPU"] == 4


def test_ray_started_elsewhere_is_replaced_only_when_allowed():
    ssh(WORKER2, "rm -f /run/ray-verl/node.json")
    run = playbook("up.yml")
    assert run.rc != 0
    assert "not started by this project" in run.out and "lab-worker2" in run.out
    run = playbook("up.yml", "-e", "ray_cleanup_legacy=true")
    assert run.rc == 0, run
    assert run.changed(WORKER2) >= 1 and run.changed(WORKER1) == 0


def test_down_leaves_no_ray_process_and_keeps_shared_data():
    ssh(HEAD, "echo keep > /private/datasets/down-marker")
    run = playbook("down.yml")
    assert run.rc == 0, run
    for host in IPS:
        procs = ssh(host, "ps -eo comm= | sort -u")
        assert not {"raylet", "gcs_server"} & set(procs.split()), (host, procs)
        assert "ray::" not in ssh(host, "ps -eo args=")
    assert ssh(WORKER1, "cat /private/datasets/down-marker").strip() == "keep"
    again = playbook("down.yml")
    assert again.rc == 0 and all(again.changed(h) == 0 for h in IPS), again
    assert nodes is not None
