"""action_plugins/ray_job.py: the control-host half of ray_job. The remote boundary is faked: either a
scripted module result per call, or the real module run in this process against a fake Ray and clock."""

import json
import os
import re
import shutil

import pytest
from ansible.errors import AnsibleUndefinedVariable
from ray_job_harness import SECRET, Templar, action, make_action, make_spec, module_result

OLD_CAP = 180  # polls the playbook loop (job_wait.yml) made at most


def test_follow_shows_a_line_per_poll_and_has_no_cap():
    results = [{"progress": f"j: RUNNING for {20 * i}s", "done": False, "changed": i == 1} for i in range(1, 1000)]
    results.append({"progress": "j: SUCCEEDED", "done": True, "state": "SUCCEEDED"})
    feed, shown = iter(results), []
    last, polls = action.poll_until_final(lambda: next(feed), shown.append)
    assert polls == 1000 and len(shown) == 1000 and shown[-1] == "j: SUCCEEDED"
    assert last["state"] == "SUCCEEDED" and last["changed"] is True  # an earlier poll wrote the record


def test_follow_stops_at_a_failed_poll():
    feed = iter([{"progress": "j: RUNNING", "done": False}, {"failed": True, "msg": "Ray does not know this job"}])
    shown = []
    last, polls = action.poll_until_final(lambda: next(feed), shown.append)
    assert polls == 2 and last["failed"] and shown == ["j: RUNNING"]


def test_a_job_without_max_run_s_is_followed_past_the_old_cap(ray, ray_config, capsys):
    """The real module on a fake clock: each poll follows the job for poll_s seconds of fake time."""
    spec = make_spec(ray_config, timeouts={"max_run_s": None})
    submitted = module_result(capsys, spec=spec, ray_config=ray_config)
    sid = submitted["submission_id"]
    ray.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    polls = OLD_CAP + 20
    calls = []

    def poll():
        calls.append(1)
        if len(calls) == polls:
            ray.logs[sid] = f"step:7 - train/loss:1.0 WANDB_API_KEY={SECRET}\n"
            ray.set(sid, "SUCCEEDED", end_time=int(ray.clock.now * 1000), driver_exit_code=0)
        return module_result(capsys, action="wait", submission_id=sid, ray_config=ray_config, poll_s=20)

    shown = []
    last, count = action.poll_until_final(poll, shown.append)
    assert count == polls and len(shown) == polls
    assert last["done"] and last["state"] == "SUCCEEDED" and ray.stopped == []
    elapsed = [int(m.group(1)) for m in (re.search(r"RUNNING for (\d+)s", line) for line in shown) if m]
    assert len(elapsed) == polls - 1 and elapsed == sorted(elapsed) and elapsed[-1] >= OLD_CAP * 20
    assert shown[-1] == f"{sid}: SUCCEEDED" and not any(SECRET in line for line in shown)


def test_a_job_with_max_run_s_is_stopped_by_its_own_timeout(ray, ray_config, capsys):
    spec = make_spec(ray_config, timeouts={"max_run_s": 100})
    sid = module_result(capsys, spec=spec, ray_config=ray_config)["submission_id"]
    ray.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    shown = []
    last, count = action.poll_until_final(
        lambda: module_result(capsys, action="wait", submission_id=sid, ray_config=ray_config, poll_s=20),
        shown.append)
    assert last["state"] == "FAILED" and last["status"]["reason"] == "DEADLINE_EXCEEDED" and 5 <= count <= 7
    assert shown[-1] == f"{sid}: FAILED (DEADLINE_EXCEEDED)"


# ------------------------------------------------------------------ the action itself


@pytest.fixture
def specs_dir(tmp_path):
    (tmp_path / "smoke.yaml").write_text("workload: smoke\n")
    return str(tmp_path)


@pytest.fixture
def inventory(ray_config):
    return {"ray_config": ray_config, "ray_auth_enabled": True, "ray_auth_token_path": "/etc/ray-verl/ray_token",
            "ray_python": "/opt/ray/bin/python", "jobspec_defaults": {"smoke": {"save_freq": 4}}}


def test_submit_and_wait_through_the_module(ray, ray_config, inventory, specs_dir, capsys, monkeypatch):
    """The action resolves the spec with -e values, submits through the module, and follows it."""
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {
        "spec": "smoke", "wait": "true", "submission_id": "act-1", "timeouts.pending_s": "30", "ray_python": "x"})
    sent, shown = [], []
    monkeypatch.setattr(action.display, "display", shown.append)

    def executor(module_name, module_args, task_vars):
        sent.append((module_args, task_vars["ansible_python_interpreter"]))
        args = {k: v for k, v in module_args.items() if k != "token_path"}  # no token file here
        if module_args["action"] == "wait" and len(sent) == 4:
            ray.set("act-1", "SUCCEEDED", start_time=1, end_time=2, driver_exit_code=0)
        elif module_args["action"] == "wait":
            ray.set("act-1", "RUNNING", start_time=int(ray.clock.now * 1000))
        return module_result(capsys, **args)

    plugin = make_action({"extra_vars": True, "wait": True, "poll_s": 5, "specs_dir": specs_dir},
                         inventory, executor)
    result = plugin.run(task_vars={"inventory_hostname": "head"})
    assert result["state"] == "SUCCEEDED" and result["done"] and result["changed"] and not result["existed"]
    first = sent[0][0]
    assert first["action"] == "submit" and first["token_path"] == "/etc/ray-verl/ray_token"
    assert first["spec"]["submission_id"] == "act-1" and first["spec"]["save_freq"] == 4
    assert first["spec"]["timeouts"]["pending_s"] == 30 and first["ray_config"] == ray_config
    assert {interpreter for _, interpreter in sent} == {"/opt/ray/bin/python"}
    assert [args["action"] for args, _ in sent] == ["submit", "wait", "wait", "wait"]
    assert len(shown) == 4 and shown[0] == "head | act-1 submitted" and shown[-1] == "head | act-1: SUCCEEDED"


def test_bad_input_fails_before_the_module_runs(inventory, specs_dir, monkeypatch):
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {"spec": "smoke", "save_freq": "0"})
    plugin = make_action({"extra_vars": True, "specs_dir": specs_dir}, inventory,
                         lambda **kw: pytest.fail("the module must not run"))
    result = plugin.run(task_vars={})
    assert result["failed"] and result["msg"].startswith("jobspec field 'save_freq'")


def test_no_spec_named(inventory, specs_dir, monkeypatch):
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {})
    result = make_action({"extra_vars": True, "specs_dir": specs_dir}, inventory, None).run(task_vars={})
    assert result["failed"] and "-e spec=NAME" in result["msg"]


def test_check_mode_shows_exactly_what_is_submitted(ray, ray_config, inventory, specs_dir, capsys,
                                                     monkeypatch):
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {
        "spec": "smoke", "submission_id": "chk-1", "env.WANDB_API_KEY": SECRET})

    def executor(module_name, module_args, task_vars):
        args = {k: v for k, v in module_args.items() if k != "token_path"}
        if plugin._task.check_mode:
            args["_ansible_check_mode"] = True
        return module_result(capsys, **args)

    shown = []
    monkeypatch.setattr(action.display, "display", shown.append)
    plugin = make_action({"extra_vars": True, "specs_dir": specs_dir}, inventory, executor, check_mode=True)
    checked = plugin.run(task_vars={"inventory_hostname": "head"})
    assert ray.submitted == [] and not os.path.exists(os.path.join(ray_config["shared_root"], "jobs", "chk-1"))
    assert SECRET not in "\n".join(shown) and SECRET not in json.dumps(checked)

    plugin._task.check_mode = False
    submitted = plugin.run(task_vars={"inventory_hostname": "head"})
    [call] = ray.submitted
    assert checked["entrypoint"] == submitted["entrypoint"] == call["entrypoint"]
    assert checked["submit_cmd"] == submitted["submit_cmd"]
    assert checked["runtime_env"] == submitted["runtime_env"]
    assert checked["runtime_env"]["env_vars"] == {**call["runtime_env"]["env_vars"], "WANDB_API_KEY": "<redacted>"}
    assert f"head | entrypoint: {call['entrypoint']}" in shown
    with open(os.path.join(ray_config["shared_root"], "jobs", "chk-1", "config", "submit_cmd.txt")) as handle:
        assert handle.read().strip() == checked["submit_cmd"]


def test_connection_comes_from_the_inventory_unless_the_task_sets_it(inventory):
    templar = Templar(inventory)
    args, python = action.ray_action.connection(templar, {}, address="ray_config")
    assert args == {"ray_config": inventory["ray_config"], "token_path": "/etc/ray-verl/ray_token"}
    assert python == "/opt/ray/bin/python"
    args, python = action.ray_action.connection(
        templar, {"token_path": "/t", "python": "/p", "ray_config": {"address": "x"}}, address="ray_config")
    assert args == {"ray_config": {"address": "x"}, "token_path": "/t"} and python == "/p"
    no_auth = Templar({**inventory, "ray_auth_enabled": False, "ray_dashboard_url": "http://h:8265"})
    assert action.ray_action.connection(no_auth, {}, address="dashboard_url")[0] == {"dashboard_url": "http://h:8265"}
    with pytest.raises(AnsibleUndefinedVariable):
        action.ray_action.connection(Templar({}), {}, address="ray_config")


SFT = ("workload: sft\nmodel_path: /models/tiny\ntrain_files: /data/train.parquet\n"
       "resources: {nnodes: 1, n_gpus_per_node: 2}\nretries: {max: 1}\n")


def save_checkpoint(checkpoints, step, world=2):
    folder = os.path.join(checkpoints, f"global_step_{step}")
    os.makedirs(folder, exist_ok=True)
    for rank in range(world):
        for kind in ("model", "optim", "extra_state"):
            open(os.path.join(folder, f"{kind}_world_size_{world}_rank_{rank}.pt"), "wb").close()
    with open(os.path.join(checkpoints, "latest_checkpointed_iteration.txt"), "w") as handle:
        handle.write(str(step))


def retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra, args, first_state="FAILED"):
    (tmp_path / "sft.yaml").write_text(SFT)
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: extra)
    sent, shown = [], []
    monkeypatch.setattr(action.display, "display", shown.append)
    jobs = os.path.join(ray_config["shared_root"], "jobs")

    def executor(module_name, module_args, task_vars):
        sent.append(module_args)
        sid = module_args.get("submission_id")
        if module_args["action"] == "wait" and sid == "tr-1":
            save_checkpoint(os.path.join(jobs, "tr-1", "checkpoints"), 1)
            save_checkpoint(os.path.join(jobs, "tr-1", "checkpoints"), 2)
            ray.set("tr-1", first_state, start_time=1, end_time=2, driver_exit_code=1,
                    message="ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
        elif module_args["action"] == "wait":
            ray.set(sid, "SUCCEEDED", start_time=3, end_time=4, driver_exit_code=0)
        return module_result(capsys, **{k: v for k, v in module_args.items() if k != "token_path"})

    inventory = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python"}
    result = make_action({"preflight": False, "poll_s": 5, "specs_dir": str(tmp_path), **args},
                         inventory, executor).run(task_vars={"inventory_hostname": "head"})
    return result, sent, shown, jobs


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def status_of(jobs, sid):
    return read_json(os.path.join(jobs, sid, "status.json"))


def test_a_job_that_lost_a_node_is_retried_from_its_newest_whole_checkpoint(ray, ray_config, capsys,
                                                                             monkeypatch, tmp_path):
    extra = {"spec": "sft", "submission_id": "tr-1", "env.WANDB_API_KEY": SECRET}
    result, sent, shown, jobs = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra,
                                          {"extra_vars": True, "wait": True})
    assert not result.get("failed"), result.get("msg")
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1"
    # One call to the head decides and submits the attempt (module_utils/jobs/life/chain.py); the spec is built there.
    assert [a["action"] for a in sent] == ["submit", "wait", "next", "wait"]
    assert sent[2]["spec"]["submission_id"] == "tr-1" and sent[2]["secret_env"]["cli"] == {"WANDB_API_KEY": SECRET}
    retry = read_json(os.path.join(jobs, "tr-1-r1", "config", "job_spec.json"))
    assert retry["resume_from"] == "tr-1" and retry["experiment_name"] == "tr-1"
    assert retry["env"]["WANDB_API_KEY"] == "<redacted>" and SECRET not in json.dumps(retry)
    assert ray.submitted[1]["runtime_env"]["env_vars"]["WANDB_API_KEY"] == SECRET
    assert retry["checkpoint_dir"] == os.path.join(jobs, "tr-1-r1", "checkpoints")
    entrypoint = ray.submitted[1]["entrypoint"]
    assert "trainer.resume_mode=resume_path" in entrypoint
    assert f"trainer.resume_from_path={jobs}/tr-1/checkpoints/global_step_2" in entrypoint
    assert status_of(jobs, "tr-1")["attempts"] == ["tr-1-r1"] and status_of(jobs, "tr-1")["state"] == "FAILED"
    attempt = status_of(jobs, "tr-1-r1")
    assert attempt["attempt_of"] == "tr-1" and attempt["attempt"] == 1 and attempt["resumed_from"]["step"] == 2
    assert any("failed (node_died): attempt 1 of 1" in line for line in shown)


def test_do_resume_takes_the_spec_from_the_record_and_asks_for_its_secrets_again(ray, ray_config, capsys,
                                                                                 monkeypatch, tmp_path):
    extra = {"spec": "sft", "submission_id": "tr-1", "env.WANDB_API_KEY": SECRET, "retries.max": "0"}
    result, _, _, jobs = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra,
                                   {"extra_vars": True, "wait": True})
    assert result["state"] == "FAILED" and result["submission_id"] == "tr-1"  # retries.max 0: no attempt
    save_checkpoint(os.path.join(jobs, "tr-1", "checkpoints"), 3)
    os.unlink(os.path.join(jobs, "tr-1", "checkpoints", "global_step_3", "optim_world_size_2_rank_1.pt"))

    result, sent, _, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, {"id": "tr-1", "do": "resume"},
                                   {"action": "resume", "submission_id": "tr-1"})
    assert result["failed"] and result["msg"].startswith("jobspec field 'env.WANDB_API_KEY': is a secret the record")
    assert [a["action"] for a in sent] == ["resume"] and not os.path.exists(os.path.join(jobs, "tr-1-r1"))

    extra = {"id": "tr-1", "do": "resume", "env.WANDB_API_KEY": SECRET}
    result, sent, _, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra,
                                   {"action": "resume", "submission_id": "tr-1"})
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1"
    assert ray.submitted[-1]["runtime_env"]["env_vars"]["WANDB_API_KEY"] == SECRET
    attempt = status_of(jobs, "tr-1-r1")
    assert attempt["resumed_from"]["step"] == 2 and "global_step_3: optim lacks rank(s) 1 of 2" in \
        attempt["resumed_from"]["skipped"]


def test_a_checkpoint_of_another_world_size_is_refused_and_nothing_is_made(ray, ray_config, capsys,
                                                                           monkeypatch, tmp_path):
    extra = {"spec": "sft", "submission_id": "tr-1", "retries.max": "0"}
    _, _, _, jobs = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra, {"extra_vars": True, "wait": True})
    checkpoints = os.path.join(jobs, "tr-1", "checkpoints")
    for name in os.listdir(checkpoints):
        if name.startswith("global_step_"):
            shutil.rmtree(os.path.join(checkpoints, name))
    save_checkpoint(checkpoints, 2, world=4)
    result, sent, _, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, {"id": "tr-1", "do": "resume"},
                                   {"action": "resume", "submission_id": "tr-1"})
    assert result["failed"] and "\n" not in result["msg"] and [a["action"] for a in sent] == ["resume"]
    assert result["msg"].startswith("jobspec field 'resume_from': no checkpoint at world size 2 to resume from "
                                    "(global_step_2: ")
    assert "resume refused" in result["msg"] and not os.path.exists(os.path.join(jobs, "tr-1-r1"))


def test_running_the_retried_command_again_follows_the_attempt_and_starts_none(ray, ray_config, capsys,
                                                                              monkeypatch, tmp_path):
    extra = {"spec": "sft", "submission_id": "tr-1", "env.WANDB_API_KEY": SECRET}
    retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra, {"extra_vars": True, "wait": True})
    result, sent, _, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra,
                                   {"extra_vars": True, "wait": True})
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1"
    assert [a["action"] for a in sent] == ["submit", "wait", "next", "wait"] and len(ray.submitted) == 2


def test_a_job_that_never_saved_is_retried_from_the_start(ray, ray_config, capsys, monkeypatch,
                                                          tmp_path):
    real = save_checkpoint
    monkeypatch.setattr(__import__(__name__), "save_checkpoint", lambda *a, **k: None)  # it dies before saving
    extra = {"spec": "sft", "submission_id": "tr-1", "env.WANDB_API_KEY": SECRET}
    result, _, shown, jobs = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra,
                                       {"extra_vars": True, "wait": True})
    monkeypatch.setattr(__import__(__name__), "save_checkpoint", real)
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1"
    assert "resume_from_path" not in ray.submitted[1]["entrypoint"]
    assert status_of(jobs, "tr-1-r1")["resumed_from"]["path"] is None
    assert any("from the start (it saved no checkpoint)" in line for line in shown)


def test_a_job_with_checkpoints_off_says_at_submission_and_at_its_retry_that_it_starts_from_step_0(
        ray, ray_config, capsys, monkeypatch, tmp_path):
    real = save_checkpoint
    monkeypatch.setattr(__import__(__name__), "save_checkpoint", lambda *a, **k: None)  # save_freq -1: none saved
    extra = {"spec": "sft", "submission_id": "tr-1", "save_freq": "-1"}
    result, _, shown, _ = retry_run(ray, ray_config, capsys, monkeypatch, tmp_path, extra,
                                    {"extra_vars": True, "wait": True})
    monkeypatch.setattr(__import__(__name__), "save_checkpoint", real)
    assert result["state"] == "SUCCEEDED" and result["submission_id"] == "tr-1-r1"
    assert "trainer.save_freq=-1" in ray.submitted[0]["entrypoint"].split()
    assert "head | tr-1 submitted (save_freq -1: no checkpoints, so a retry starts again from step 0)" in shown
    assert "head | tr-1-r1: submitted, resuming tr-1 from step 0 (save_freq -1: checkpoints are off)" in shown
    assert not any("it saved no checkpoint" in line for line in shown)


def failed_last(sid="j"):
    return {"state": "FAILED", "submission_id": sid, "status": {"submission_id": sid, "state": "FAILED", "final": True}}


def chain_plugin(monkeypatch, decisions):
    """The plugin's follower loop (_chain) over a scripted module: `next` answers decisions[sid], a wait ends
    FAILED; returns (plugin, the module calls)."""
    plugin = make_action({}, {}, lambda **kw: pytest.fail("no module call"))
    plugin._host, plugin._names, calls = "head", (), []
    monkeypatch.setattr(plugin, "_secret_env", dict)
    monkeypatch.setattr(plugin, "_follow", lambda module, sid, out, poll: calls.append(("wait", sid))
                        or failed_last(sid))

    def module(**kw):
        calls.append((kw["action"], kw["submission_id"]))
        return decisions[kw["submission_id"]]
    return plugin, module, calls


def test_the_follower_asks_the_head_once_and_stops_where_the_engine_says_not_due(monkeypatch):
    """The follower holds no retry rule: one `next` call, and the job's FAILED stands when the engine says so."""
    plugin, module, calls = chain_plugin(monkeypatch, {"j": {"outcome": "not_due", "follow": None,
                                                             "lines": ["j: FAILED, not retried: it was stopped"]}})
    last = failed_last()
    assert plugin._chain(module, last, None, 5) is last and calls == [("next", "j")]


def test_a_wait_on_a_job_the_watcher_retried_follows_the_newest_attempt(monkeypatch):
    """job.yml -e do=wait on the first job: the engine names its attempt j-r1, which is followed."""
    plugin, module, calls = chain_plugin(monkeypatch, {"j": {"outcome": "follow", "follow": "j-r1"},
                                                       "j-r1": {"outcome": "not_due", "follow": None}})
    result = plugin._chain(module, failed_last(), None, 5)
    assert calls == [("next", "j"), ("wait", "j-r1"), ("next", "j-r1")] and result["submission_id"] == "j-r1"


def test_attempt_links_that_lead_back_are_never_followed_in_a_loop(monkeypatch):
    """Anyone who can write the share can make A's newest attempt B and B's newest A: followed once each, then one
    line."""
    plugin, module, calls = chain_plugin(monkeypatch, {"j": {"follow": "k"}, "k": {"follow": "j"}})
    result = plugin._chain(module, failed_last(), None, 5)
    assert [c for c in calls if c[0] == "wait"] == [("wait", "k")] and result["failed"]
    assert "lead back to j" in result["msg"], result
