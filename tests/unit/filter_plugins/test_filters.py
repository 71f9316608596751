"""filter_plugins/: cluster summaries and the project's conventions."""

import os
import posixpath

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.base import conventions
from cluster_filters import ray_expected_workers, ray_status_summary
from conventions_filters import ray_verl_checked_id, ray_verl_paths

from plugin_utils import PROJECT_ROOT

ROOT = PROJECT_ROOT


def test_expected_workers_come_from_the_workers_ray_node_results_and_skip_hosts_that_failed():
    started = {"node_ip": "10.0.0.11", "num_gpus": 4, "resources": {"worker_node": 1}, "started_at_ms": 1700000000000}
    healthy = {"node_ip": "10.0.0.13", "num_gpus": 0, "resources": {"worker_node": 2}, "action": "none"}
    hostvars = {"w1": {"ray_worker_plan": {"skipped": True}, "ray_worker_node": started},
                "w2": {"ansible_host": "10.0.0.12"},
                "w3": {"ray_worker_plan": healthy, "ray_worker_node": {"skipped": True}},
                "w4": {"ray_worker_plan": {"skipped": True}, "ray_worker_node": {"failed": True, "msg": "ray start"}},
                "w5": {"ray_worker_plan": {"failed": True, "msg": "not the shared root"}}}
    assert ray_expected_workers(["w1", "w2", "w3", "w4", "w5"], hostvars) == [
        {"host": "w1", "ip": "10.0.0.11", "num_gpus": 4, "head": False, "worker_node": 1.0,
         "started_after_ms": 1700000000000},
        {"host": "w3", "ip": "10.0.0.13", "num_gpus": 0, "head": False, "worker_node": 2.0, "started_after_ms": 0}]


def test_a_one_box_sites_worker_is_its_head_and_is_read_from_the_heads_start():
    head = {"node_ip": "10.0.0.10", "num_gpus": 8, "resources": {"worker_node": 1}, "action": "none"}
    # The worker play skipped the host (hosts: ray_workers:!ray_head): no worker result at all.
    assert ray_expected_workers(["box"], {"box": {"ray_head_node": head}}) == [
        {"host": "box", "ip": "10.0.0.10", "num_gpus": 8, "head": True, "worker_node": 1.0, "started_after_ms": 0}]


def test_status_summary_lists_nodes_jobs_and_mounts():
    cluster = {"nodes": [{"state": "ALIVE"}, {"state": "DEAD"}], "node_lines": ["head 1 ALIVE []"],
               "ray_version": "2.60.0",
               "jobs": [{"status": "RUNNING", "submission_id": "a"}, {"status": "FAILED", "submission_id": "b"}]}
    lines = ray_status_summary(cluster, "http://h:8265", "/private", {"w1": "/dev/x nfs\n", "w2": ""})
    assert "ray: 2.60.0; nodes: 1 alive, 1 dead" in lines
    assert "  RUNNING a" in lines and "jobs: 1 running or pending, 2 in all" in lines
    assert "  w1: /dev/x nfs" in lines and "  w2: NOT MOUNTED" in lines


def test_status_summary_when_cluster_is_down():
    lines = ray_status_summary({"failed": True, "msg": "refused"}, "http://h:8265", "/private", {})
    assert lines[1] == "cluster: UNREACHABLE (refused)"


def test_checked_id_refuses_anything_but_one_plain_path_component():
    assert ray_verl_checked_id("verl-0.9.1", "code_snapshot_verl_id") == "verl-0.9.1"
    for bad in ("../../etc", "a/b", "x\"; import os", "", ".hidden", "a b", "a\nb", None):
        with pytest.raises(AnsibleFilterError, match=r"^code_snapshot_verl_id: must be 1-128 letters") as err:
            ray_verl_checked_id(bad, "code_snapshot_verl_id")
        assert str(err.value) == "code_snapshot_verl_id: must be " + conventions.ID_RULE[1]  # never the value


def test_the_shared_root_layout_has_one_home():
    """conventions.LAYOUT: the shared_root role's default is the filter's, and it lays out where things live."""
    paths = ray_verl_paths("/private")
    assert paths["layout"] == conventions.LAYOUT and paths["layout"] is not conventions.LAYOUT
    for where in ("jobs", "verl_code", "smoke_code", "plugins_code", "user_code", "regression"):
        rel = posixpath.relpath(paths[where], "/private")
        assert any(rel == d or rel.startswith(d + "/") for d in conventions.LAYOUT), where
    for exact in (conventions.JOBS, conventions.COMMON_CODE, conventions.USER_CODE, conventions.REGRESSION):
        assert exact in conventions.LAYOUT
    with open(os.path.join(ROOT, "roles", "project_defaults", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["shared_root_layout"] == "{{ (shared_root_path | ray_verl_paths).layout }}"


