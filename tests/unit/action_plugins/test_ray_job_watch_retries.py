"""Issue 38 §4: a watcher pass that finalises several records retries each on its own: one record's error (a spec of
a foreign shape, say) is one line and the pass goes on, and a retry that was due but not submitted is taken up by a
later pass (the module's retry index), until it is submitted, refused for a person to decide, or spent. Issue 40: the
pass retries inside its one `watch` call to the head (module_utils/jobs/life/chain.py)."""

import json
import os

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.record import open_index
from ansible.module_utils.jobs.submission import attempts
from ray_job_harness import HEAD, WORKER, action, make_action, module_result
from test_ray_job_action import SFT, status_of

WORKER2 = {**WORKER, "node_id": "n-w2", "node_ip": "10.0.0.12", "node_name": "w2"}
DIED = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."


@pytest.fixture
def plugin_run(ray, ray_config, capsys, monkeypatch, tmp_path):
    (tmp_path / "sft.yaml").write_text(SFT)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [HEAD, WORKER, WORKER2])
    shown, sent = [], []
    monkeypatch.setattr(action.display, "display", shown.append)

    def go(args, extra=None):
        monkeypatch.setattr(action, "load_extra_vars", lambda loader: extra or {})

        def executor(module_name, module_args, task_vars):
            sent.append(module_args)
            return module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})

        inventory = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python"}
        return make_action({"preflight": False, "poll_s": 5, "specs_dir": str(tmp_path), **args}, inventory,
                           executor).run(task_vars={"inventory_hostname": "head"})

    go.shown, go.sent = shown, sent
    go.jobs = os.path.join(ray_config["shared_root"], "jobs")
    return go


def test_one_records_error_is_one_line_and_its_retry_is_taken_up_by_a_later_pass(ray, plugin_run, monkeypatch):
    for sid in ("tr-1", "tr-2"):
        assert not plugin_run({"extra_vars": True}, {"spec": "sft", "submission_id": sid}).get("failed")
        ray.set(sid, "FAILED", start_time=1, end_time=2, driver_exit_code=1, message=DIED)
    real = attempts.spec_of_next
    broken = {"tr-1"}

    def spec_of_next(job, *args):
        if job.sid in broken:  # as a job_spec.json of a foreign shape made it raise out of the engine
            raise AttributeError("'str' object has no attribute 'get'")
        return real(job, *args)

    monkeypatch.setattr(attempts, "spec_of_next", spec_of_next)
    del plugin_run.sent[:]
    first = plugin_run({"action": "watch"})
    assert sorted(first["finalized"]) == ["tr-1", "tr-2"] and first["attempts"] == ["tr-2-r1"]
    assert [a["action"] for a in plugin_run.sent] == ["watch"]  # the pass and its retry: one call to the head
    [line] = [s.split(" | ", 1)[1] for s in plugin_run.shown if "| tr-1: not retried" in s]
    assert line == ("tr-1: not retried in this pass (AttributeError reading its record); a later pass tries again: "
                    "job.yml -e id=tr-1 -e do=status") and "'str'" not in line
    assert open_index.listed(plugin_run.jobs, open_index.RETRY) == ["tr-1"]  # tr-2's is decided: submitted

    broken.clear()
    second = plugin_run({"action": "watch"})
    assert second["retry"] == ["tr-1"] and second["attempts"] == ["tr-1-r1"]
    assert status_of(plugin_run.jobs, "tr-1")["attempts"] == ["tr-1-r1"]
    assert open_index.listed(plugin_run.jobs, open_index.RETRY) == []

    third = plugin_run({"action": "watch"})  # both attempts are open now; nothing left to retry
    assert third["retry"] == [] and "attempts" not in third


def test_a_pending_retry_no_longer_due_leaves_the_index(ray, ray_config, plugin_run, capsys):
    assert not plugin_run({"extra_vars": True}, {"spec": "sft", "submission_id": "tr-1"}).get("failed")
    ray.set("tr-1", "FAILED", start_time=1, end_time=2, driver_exit_code=1, message=DIED)
    code = module_result(capsys, action="wait", submission_id="tr-1", ray_config=ray_config)
    assert code["state"] == "FAILED" and open_index.listed(plugin_run.jobs, open_index.RETRY) == ["tr-1"]
    # A pass in check mode says it is due and changes nothing.
    checked = module_result(capsys, action="watch", ray_config=ray_config, _ansible_check_mode=True)
    assert checked["retry"] == ["tr-1"] and checked["outcomes"] == {"tr-1": "submitted"} and "attempts" not in checked
    assert open_index.listed(plugin_run.jobs, open_index.RETRY) == ["tr-1"] and len(ray.submitted) == 1
    # Its retries spent meanwhile (a person edited nothing else): a real pass takes it out of the index, submits none.
    path = os.path.join(plugin_run.jobs, "tr-1", "status.json")
    with open(path, encoding="utf-8") as handle:
        status = json.load(handle)
    status["retries"]["max"] = 0
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(status, handle)
    passed = module_result(capsys, action="watch", ray_config=ray_config)
    assert passed["outcomes"] == {"tr-1": "not_due"} and passed["retry"] == [] and len(ray.submitted) == 1
    assert open_index.listed(plugin_run.jobs, open_index.RETRY) == []
