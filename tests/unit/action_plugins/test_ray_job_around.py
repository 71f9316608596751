"""A retry goes around the workers its failed attempt blames (jobs/life/around.py), through the action plugin
and the real module on a fake Ray: the blamed worker is cordoned (a file, by retry) and held, and the attempt runs
on the others; too few healthy workers, or a blamed worker Ray cannot hold yet, leave the job FAILED in one line."""

import json
import os

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.evidence import blame
from ansible.module_utils.jobs.life import around
from ray_job_harness import HEAD, WORKER
from test_ray_job_action import retry_run, status_of

WORKER2 = {**WORKER, "node_id": "n-w2", "node_ip": "10.0.0.12", "node_name": "w2"}
SMALL = {**WORKER2, "resources_total": {"CPU": 8.0, "worker_node": 1.0}}  # a worker without the job's GPUs
BLAMED = {"node_ip": "10.0.0.11", "host": "w1", "why": "node died",
          "evidence": {"file": "debug/ray_nodes_post.json", "line": "10.0.0.11 DEAD"}}


@pytest.fixture
def blamed(monkeypatch):
    monkeypatch.setattr(blame, "find", lambda *args, **kwargs: [dict(BLAMED)])
    monkeypatch.setattr(around, "HOLD_WAIT_S", 0)


def run(ray, ray_config, capsys, monkeypatch, tmp_path, nodes, **extra):
    monkeypatch.setattr(rc, "list_nodes", lambda url: nodes)
    ray.nodes = list(nodes)  # the queue's view of the workers too
    return retry_run(ray, ray_config, capsys, monkeypatch, tmp_path,
                     {"spec": "sft", "submission_id": "tr-1", "retries.max": 1, **extra},
                     {"extra_vars": True, "wait": True})


def cordon_file(ray_config, ip="10.0.0.11"):
    path = os.path.join(ray_config["shared_root"], "cordons", f"{ip}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def test_the_blamed_worker_is_cordoned_and_the_attempt_runs_on_the_others(ray, ray_config, capsys, monkeypatch,
                                                                          tmp_path, blamed):
    result, _, shown, jobs = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER, WORKER2])
    assert not result.get("failed"), result.get("msg")
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1"
    cordon = cordon_file(ray_config)
    assert cordon["by"] == "retry" and cordon["job"] == "tr-1" and "node died" in cordon["why"]
    assert [g["name"] for g in ray.groups] == ["ray-verl-cordon-10.0.0.11-n-w1"]
    assert any("cordoned 10.0.0.11 (blamed) before its next attempt, which may run on 10.0.0.12" in line
               for line in shown)
    assert status_of(jobs, "tr-1")["blame"][0]["node_ip"] == "10.0.0.11"


def test_too_few_healthy_workers_leave_the_job_failed_with_its_blame(ray, ray_config, capsys, monkeypatch, tmp_path,
                                                                     blamed):
    result, sent, _, jobs = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER, SMALL])
    assert result["failed"] and "\n" not in result["msg"]
    assert result["msg"].startswith("tr-1: not retried: 0 healthy worker(s) (none) for its 1 node(s) of 2 GPU(s), "
                                    "with 10.0.0.11 cordoned for its blame; it stays FAILED")
    assert [a["action"] for a in sent] == ["submit", "wait", "next"]
    assert not os.path.exists(os.path.join(jobs, "tr-1-r1")) and len(ray.submitted) == 1
    tr1 = status_of(jobs, "tr-1")
    assert tr1["state"] == "FAILED" and tr1["blame"][0]["node_ip"] == "10.0.0.11" and tr1["attempts"] == []


def test_a_blamed_worker_ray_cannot_hold_yet_is_not_retried_onto(ray, ray_config, capsys, monkeypatch, tmp_path,
                                                                 blamed):
    ray.busy_ips.add("10.0.0.11")  # the stopped attempt's processes still keep its GPUs
    result, _, _, jobs = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER, WORKER2])
    assert result["failed"] and "Ray does not hold the cordoned 10.0.0.11 after 0 s" in result["msg"]
    assert not os.path.exists(os.path.join(jobs, "tr-1-r1")) and cordon_file(ray_config)["job"] == "tr-1"


def test_retries_cordon_false_retries_onto_the_same_workers(ray, ray_config, capsys, monkeypatch, tmp_path, blamed):
    result, _, shown, _ = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER],
                              **{"retries.cordon": False})
    assert not result.get("failed"), result.get("msg")
    assert result["submission_id"] == "tr-1-r1" and cordon_file(ray_config) is None and ray.groups == []
    assert not any("cordoned" in line for line in shown)


def test_a_blamed_node_that_is_no_worker_is_not_cordoned(ray, ray_config, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(blame, "find", lambda *args, **kwargs: [{**BLAMED, "node_ip": "10.0.0.10", "host": "head"}])
    result, _, _, _ = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER])
    assert not result.get("failed"), result.get("msg")
    assert result["submission_id"] == "tr-1-r1" and cordon_file(ray_config, "10.0.0.10") is None and ray.groups == []


def test_a_worker_given_back_is_not_cordoned_again_by_the_resume(ray, ray_config, capsys, monkeypatch, tmp_path,
                                                                  blamed):
    result, _, _, jobs = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER, SMALL])
    assert result["failed"] and "not retried: 0 healthy worker(s)" in result["msg"]
    assert status_of(jobs, "tr-1")["cordoned"] == ["10.0.0.11"]
    from ansible.module_utils.cordons import cordons

    assert cordons.remove(ray_config["shared_root"], "10.0.0.11")  # a person gives it back (cordon.yml state=absent)
    ray.groups.clear()
    result, _, _, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, {"id": "tr-1", "do": "resume"},
                                   {"action": "resume", "submission_id": "tr-1"})
    assert not result.get("failed"), result.get("msg")
    assert result["submission_id"] == "tr-1-r1" and cordon_file(ray_config) is None and ray.groups == []


def test_a_job_a_person_stopped_is_resumed_and_cordons_nothing(ray, ray_config, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER])
    retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, {"spec": "sft", "submission_id": "tr-1"},
              {"extra_vars": True, "wait": True}, first_state="STOPPED")
    result, sent, _, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, {"id": "tr-1", "do": "resume"},
                                   {"action": "resume", "submission_id": "tr-1"})
    assert not result.get("failed"), result.get("msg")
    assert [a["action"] for a in sent][:2] == ["resume", "wait"] and cordon_file(ray_config) is None


def test_a_blamed_address_ray_does_not_list_as_a_worker_is_never_cordoned(ray, ray_config, capsys, monkeypatch,
                                                                          tmp_path):
    """Issue 38: an address outside the cluster (Ray lists no node there) is no lever: no file, no hold."""
    monkeypatch.setattr(blame, "find", lambda *args, **kwargs: [{**BLAMED, "node_ip": "10.9.9.9"}])
    result, _, shown, _ = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER])
    assert not result.get("failed"), result.get("msg")
    assert result["submission_id"] == "tr-1-r1"
    assert not os.path.exists(os.path.join(ray_config["shared_root"], "cordons")) and ray.groups == []
    assert not any("cordoned" in line for line in shown), shown


def test_a_retry_never_cordons_half_the_workers_or_more(ray, ray_config, capsys, monkeypatch, tmp_path, blamed):
    result, _, _, jobs = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER])
    assert result["failed"] and "\n" not in result["msg"]
    assert result["msg"] == ("tr-1: not retried: cordoning 10.0.0.11 would leave 0 of 1 workers uncordoned (at least "
                             "half stay); it stays FAILED, blamed: 10.0.0.11 (node died). A person decides: cordon.yml "
                             "-e host=... for each, then job.yml -e id=tr-1 -e do=resume")
    assert cordon_file(ray_config) is None and ray.groups == [] and status_of(jobs, "tr-1")["cordoned"] == []


def test_a_chain_cordons_at_most_a_few_workers(ray, ray_config, capsys, monkeypatch, tmp_path):
    many = [{**WORKER, "node_id": f"n-w{i}", "node_ip": f"10.0.0.{i}", "node_name": f"w{i}"} for i in range(11, 18)]
    blames = [{**BLAMED, "node_ip": f"10.0.0.{i}", "host": None} for i in (11, 12, 13)]
    monkeypatch.setattr(blame, "find", lambda *args, **kwargs: [dict(b) for b in blames])
    result, _, _, _ = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, *many])
    assert result["failed"] and "its chain would have 3 automatic cordons (at most 2: none so far)" in result["msg"]
    assert not os.path.exists(os.path.join(ray_config["shared_root"], "cordons")) and ray.groups == []


def test_a_cordons_folder_that_cannot_be_listed_whole_changes_nothing(ray, ray_config, capsys, monkeypatch, tmp_path,
                                                                     blamed):
    from ansible.module_utils.cordons import cordons

    folder = os.path.join(ray_config["shared_root"], "cordons")
    os.makedirs(folder)
    for i in range(cordons.MAX_FILES + 1):
        open(os.path.join(folder, f"note-{i}.txt"), "w").close()
    result, _, _, _ = run(ray, ray_config, capsys, monkeypatch, tmp_path, [HEAD, WORKER, WORKER2])
    assert result["failed"] and "\n" not in result["msg"]
    assert f"{folder}: more than {cordons.MAX_FILES} files" in result["msg"] and "no hold is changed" in result["msg"]
    assert cordon_file(ray_config) is None and ray.groups == []
