"""Issue 41: the action plugin says who submits (the control host's login; -e submitter only for the logins the site's
ray_queue_act_for_others lists), passes the site's queue settings down, and prints a QUEUED job's one line."""

import json
import os

import pytest
from ray_job_harness import HEAD, WORKER, action, make_action, module_result


@pytest.fixture
def specs_dir(tmp_path):
    (tmp_path / "smoke.yaml").write_text("workload: smoke\n")
    return str(tmp_path)


def submit(ray_config, specs_dir, capsys, monkeypatch, login, extra, act_for_others=None, **inventory):
    monkeypatch.setattr(action.getpass, "getuser", lambda: login)
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {"spec": "smoke", **extra})
    sent, shown = [], []
    monkeypatch.setattr(action.display, "display", shown.append)

    def executor(module_name, module_args, task_vars):
        sent.append(module_args)
        return module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})

    variables = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python",
                 **({"ray_queue_act_for_others": act_for_others} if act_for_others is not None else {}), **inventory}
    result = make_action({"extra_vars": True, "specs_dir": specs_dir, "preflight": False}, variables,
                         executor).run(task_vars={"inventory_hostname": "head"})
    return result, sent, shown


def recorded(ray_config, sid):
    with open(os.path.join(ray_config["shared_root"], "jobs", sid, "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_the_submitter_is_the_control_hosts_login(ray, ray_config, specs_dir, capsys, monkeypatch):
    result, sent, _ = submit(ray_config, specs_dir, capsys, monkeypatch, "alice", {"submission_id": "s-1"})
    assert not result.get("failed"), result
    assert sent[0]["submitter"] == "alice" and recorded(ray_config, "s-1")["queue"]["submitter"] == "alice"


def test_a_login_the_site_does_not_list_may_not_act_for_others(ray, ray_config, specs_dir, capsys, monkeypatch):
    result, sent, _ = submit(ray_config, specs_dir, capsys, monkeypatch, "alice",
                             {"submission_id": "s-1", "submitter": "bob"}, act_for_others=["root"])
    assert result["failed"] and result["msg"].startswith("submitter: -e submitter is for the logins "
                                                         "ray_queue_act_for_others lists; 'alice' is not one")
    assert sent == [] and not ray.submitted


def test_a_listed_login_acts_for_another(ray, ray_config, specs_dir, capsys, monkeypatch):
    result, sent, _ = submit(ray_config, specs_dir, capsys, monkeypatch, "root",
                             {"submission_id": "s-1", "submitter": "nightly"}, act_for_others=["root"])
    assert not result.get("failed"), result
    assert sent[0]["submitter"] == "nightly" and recorded(ray_config, "s-1")["queue"]["submitter"] == "nightly"


@pytest.mark.parametrize("name", ["bob smith", "-bob", "", "a" * 101, 7])
def test_a_submitter_that_is_not_a_name_is_refused(ray, ray_config, specs_dir, capsys, monkeypatch, name):
    result, sent, _ = submit(ray_config, specs_dir, capsys, monkeypatch, "root",
                             {"submission_id": "s-1", "submitter": name}, act_for_others=["root"])
    assert result["failed"] and result["msg"].startswith("submitter: must be ") and sent == []


def test_a_bad_act_for_others_is_named(ray, ray_config, specs_dir, capsys, monkeypatch):
    result, sent, _ = submit(ray_config, specs_dir, capsys, monkeypatch, "root", {"submission_id": "s-1"},
                             act_for_others="root")
    assert result["failed"] and result["msg"].startswith("ray_queue_act_for_others: must be a list") and sent == []


def test_a_queued_submit_prints_its_place_and_reason_and_the_site_settings_go_down(ray, ray_config, specs_dir,
                                                                                     capsys, monkeypatch):
    ray.nodes = [HEAD, WORKER]
    ray.free["n-w1"] = {**WORKER["resources_total"], "worker_node": 0.0}  # a job runs there, around the queue
    ray.submit_job(submission_id="x-1", entrypoint="sleep 600", runtime_env={}, metadata={},
                   entrypoint_resources={"worker_node": 1})
    ray.set("x-1", "RUNNING", driver_node_id="n-w1", job_id="job-x-1")
    quotas = {"default": {"jobs": 4}}
    result, sent, shown = submit(ray_config, specs_dir, capsys, monkeypatch, "alice", {"submission_id": "s-1"},
                                 ray_queue_quotas=quotas, ray_queue_preempting=["normal", "high"])
    assert result["state"] == "QUEUED" and not result.get("failed")
    assert sent[0]["queue_quotas"] == quotas and sent[0]["queue_preempting"] == ["normal", "high"]
    assert shown == ["head | s-1: QUEUED (position 1, normal, alice): needs a driver of 1 worker_node; none fits"]
