"""Issue 10 §2: a table of bad inputs across submit, job, regression, suites, snapshot and schedule.

Each is refused with one line naming the field; on the job path nothing is created and nothing is submitted
(the module executor and Ray's client are fakes that fail the test when reached).
"""

import os

import pytest
import ray_job
from ansible.errors import AnsibleFilterError
from ansible.module_utils.base import conventions
from ansible.module_utils.jobspec import model as jobspec
from conventions_filters import ray_verl_checked_id
from ray_job_harness import SECRET, action, make_action, make_spec, module_result

from plugin_utils import jobspec_input, schedule

ROOT = "<root>"  # replaced by the test's shared root


@pytest.fixture
def specs_dir(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "smoke.yaml").write_text("workload: smoke\n")
    (specs / "cmd.yaml").write_text("workload: command\nentrypoint: echo hi\n")
    (specs / "sft.yaml").write_text("workload: sft\nmodel_path: /m\ntrain_files: /t.parquet\n")
    return str(specs)


@pytest.fixture
def inventory(ray_config):
    return {"ray_config": ray_config, "ray_auth_enabled": True, "ray_auth_token_path": "/etc/ray-verl/ray_token",
            "ray_python": "/opt/ray/bin/python"}


SUBMIT_CASES = [
    # (field named, -e values)
    ("shared_root", {"shared_root": "/tmp"}),
    ("shared_root", {"shared_root": "/"}),
    ("output_dir", {"output_dir": f"{ROOT}/jobs"}),
    ("output_dir", {"output_dir": f"{ROOT}/jobs/another-job"}),
    ("output_dir", {"output_dir": f"{ROOT}/jobs/x/../another-job"}),
    ("output_dir", {"output_dir": "/etc"}),
    ("output_dir", {"output_dir": f"{ROOT}"}),
    ("checkpoint_dir", {"checkpoint_dir": "/etc"}),
    ("checkpoint_dir", {"checkpoint_dir": f"{ROOT}/../etc"}),
    ("checkpoint_dir", {"checkpoint_dir": f"{ROOT}"}),
    ("checkpoint_dir", {"checkpoint_dir": "relative/ck"}),
    ("submission_id", {"submission_id": "../x"}),
    ("submission_id", {"submission_id": ".."}),
    ("submission_id", {"submission_id": ".hidden"}),
    ("submission_id", {"submission_id": "a/b"}),
    ("submission_id", {"submission_id": "a" * 129}),
    ("submission_id", {"submission_id": "x\x00y"}),
    ("submission_id", {"submission_id": "a b"}),
    ("submission_id", {"submission_id": "-rf"}),
    ("project_name", {"project_name": ".."}),
    ("project_name", {"project_name": "a/b"}),
    ("experiment_name", {"experiment_name": "../../etc"}),
    ("experiment_name", {"experiment_name": "a b"}),
    ("experiment_name", {"experiment_name": "x,y=z"}),
    ("overrides[0]", {"overrides": "--cfg=job"}),
    ("overrides[0]", {"overrides": "-m"}),
    ("overrides[0]", {"overrides": "--config-dir=/tmp"}),
    ("overrides[0]", {"overrides": "--config-name=evil"}),
    ("overrides[0]", {"overrides": "-cp=/tmp"}),
    ("overrides[0]", {"overrides": "a=b\nc=d"}),
    ("overrides[0]", {"overrides": "a=b\rc"}),
    ("overrides[0]", {"overrides": "a=\x1b[2J"}),
    ("overrides[0]", {"overrides": "a=b\x00"}),
    ("overrides[0]", {"overrides": "hydra.run.dir=/etc"}),
    ("overrides[0]", {"overrides": "+hydra.searchpath=[file:///tmp]"}),
    ("overrides[0]", {"overrides": "key with space=1"}),
    ("overrides[0]", {"overrides": "=value"}),
    ("overrides[0]", {"overrides": "novalue"}),
    ("overrides[0]", {"overrides": "a;b=1"}),
    ("overrides[1]", {"overrides": '["trainer.a=1", "--multirun"]'}),
    ("env.FOO", {"env.FOO": "a\x00b"}),
    ("env.1BAD", {"env.1BAD": "x"}),
    ("metadata.t", {"metadata.t": "\x00"}),
    ("entrypoint", {"spec": "cmd", "entrypoint": "echo a\x00b"}),
    ("id", {"id": "x"}),
    ("run_id", {"run_id": "r1"}),
    ("do", {"do": "logs"}),
    ("resources.entrypoint_resources", {"resources.entrypoint_resources": '{"gpu_host": 1}'}),
    ("resources.entrypoint_resources", {"resources.entrypoint_resources": "{}"}),
    ("resources.entrypoint_resources.worker_node", {"resources.entrypoint_resources.worker_node": "0"}),
    ("foo", {"foo": "1"}),
    ("resources.nnodes", {"resources.nnodes": "0"}),
    ("code_id", {"code_id": "../../etc"}),
    ("code_path", {"code_path": "relative"}),
    ("model_path", {"spec": "sft", "model_path": "/x y"}),
    ("save_freq", {"save_freq": "0"}),
    ("timeouts.pending_s", {"timeouts.pending_s": "-1"}),
    ("spec", {"spec": "../etc/passwd"}),
    ("spec", {"spec": "no-such-spec"}),
    ("workload", {"workload": "evil"}),
    ("name", {"name": "x"}),
    ("retries.on[0]", {"retries.on": '["hydra_config"]'}),  # a user error is never retried
    ("retries.on[0]", {"retries.on": '["import_error"]'}),
    ("retries.max", {"retries.max": "-1"}),
    ("resume_from", {"resume_from": "../other"}),
]


@pytest.mark.parametrize(("field", "extra"), SUBMIT_CASES, ids=[f"{f}:{i}" for i, (f, _) in enumerate(SUBMIT_CASES)])
def test_submit_refuses(field, extra, inventory, specs_dir, ray_config, ray, monkeypatch):
    root = ray_config["shared_root"]
    values = {"spec": "smoke", **{k: v.replace(ROOT, root) for k, v in extra.items()}}
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: values)
    plugin = make_action({"extra_vars": True, "specs_dir": specs_dir}, inventory,
                         lambda **kw: pytest.fail("the module must not run"))
    result = plugin.run(task_vars={})
    assert result["failed"] and result["msg"].startswith(f"jobspec field '{field}': ")
    assert "\n" not in result["msg"]
    assert not os.path.exists(os.path.join(root, "jobs")) and ray.submitted == []


JOB_IDS = ["../x", "..", ".", "a/b", "", "x\x00y", "-rf", "a b", "$(id)", "a" * 129]
# Every id check's one message (conventions.check_id): the field and the rule, never the value (it may be a secret).
ID_REFUSED = "{field}: must be " + conventions.ID_RULE[1]


@pytest.mark.parametrize("sid", JOB_IDS)
def test_job_action_refuses_a_bad_id(sid, inventory, ray_config, ray):
    plugin = make_action({"action": "status", "submission_id": sid}, inventory,
                         lambda **kw: pytest.fail("the module must not run"))
    result = plugin.run(task_vars={})
    assert result["failed"] and result["msg"] == ID_REFUSED.format(field="submission_id")


@pytest.mark.parametrize("sid", ["../jobs/x", "a/../../b"])
def test_job_module_refuses_a_bad_id(sid, ray, ray_config, capsys):
    out = module_result(capsys, action="stop", submission_id=sid, ray_config=ray_config)
    assert out["failed"] and out["msg"].startswith("submission_id: must be ") and ray.stopped == []


def test_job_module_refuses_another_jobs_output_dir(ray, ray_config, capsys):
    os.makedirs(os.path.join(ray_config["shared_root"], "jobs", "other"))
    out = module_result(capsys, action="stop", submission_id="mine", ray_config=ray_config,
                        output_dir=os.path.join(ray_config["shared_root"], "jobs", "other"))
    assert out["failed"] and out["msg"].startswith("output_dir: must be ") and ray.stopped == []


def test_module_refuses_a_checkpoint_dir_that_a_symlink_takes_outside(ray, ray_config, capsys, tmp_path_factory):
    # checkpoint_dir is inside the job's own record (jobspec refuses anywhere else); a symlink there still counts.
    root = ray_config["shared_root"]
    outside = tmp_path_factory.mktemp("outside")
    spec = make_spec(ray_config, checkpoint_dir=os.path.join(root, "jobs", "link-ck", "ck"), submission_id="link-ck")
    os.makedirs(os.path.join(root, "jobs", "link-ck"))
    os.symlink(outside, os.path.join(root, "jobs", "link-ck", "ck"))
    out = module_result(capsys, spec=spec, ray_config=ray_config)
    assert out["failed"] and out["msg"].startswith("jobspec field 'checkpoint_dir': must resolve inside")
    assert SECRET not in out["msg"]
    assert os.listdir(os.path.join(root, "jobs", "link-ck")) == ["ck"] and os.listdir(outside) == []
    assert ray.submitted == []


def test_module_refuses_a_spec_for_another_shared_root(ray, ray_config, capsys, tmp_path_factory):
    other = {**ray_config, "shared_root": str(tmp_path_factory.mktemp("other"))}
    out = module_result(capsys, spec=make_spec(other), ray_config=ray_config)
    assert out["failed"] and out["msg"].startswith("jobspec field 'shared_root': ")
    assert not os.listdir(other["shared_root"]) and ray.submitted == []


@pytest.mark.parametrize("run_id", ["../x", "a b", "", ".x", "a/b", "x\ny"])
def test_regression_run_id_refused(run_id):
    with pytest.raises(AnsibleFilterError, match=r"^run_id: must be ") as err:
        ray_verl_checked_id(run_id, "run_id")
    assert str(err.value) == ID_REFUSED.format(field="run_id")


@pytest.mark.parametrize("snap", ["../../etc", "/abs", "a'b", "x\n"])
def test_snapshot_id_refused(snap):
    with pytest.raises(AnsibleFilterError, match=r"^code_snapshot_verl_id: must be ") as err:
        ray_verl_checked_id(snap, "code_snapshot_verl_id")
    assert str(err.value) == ID_REFUSED.format(field="code_snapshot_verl_id")


@pytest.mark.parametrize("check_id", ["../x", "a b", "", "hf_sekrit-token value", None, 7])
def test_check_id_refused_with_the_field(check_id):
    with pytest.raises(ValueError) as err:
        conventions.check_id("run_id", check_id)
    assert str(err.value) == ID_REFUSED.format(field="run_id")
    assert conventions.check_id("run_id", "nightly-2026.11_23") == "nightly-2026.11_23"


SUITE_ENTRIES = [
    ("spec", "entries: [{name: a, spec: smoke, overrides: {spec: cmd}}]\n"),
    ("wait", "entries: [{name: a, spec: smoke, overrides: {wait: true}}]\n"),
    ("ray_python", "entries: [{name: a, spec: smoke, overrides: {ray_python: /bin/sh}}]\n"),
    ("poll_s", "entries: [{name: a, spec: smoke, overrides: {poll_s: 1}}]\n"),
]


@pytest.mark.parametrize(("key", "text"), SUITE_ENTRIES)
def test_suite_entry_overrides_refused(key, text, tmp_path):
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(jobspec_input.SuiteError, match=f"overrides key '{key}' is not a jobspec field"):
        jobspec_input.load_suite("s", str(tmp_path))


@pytest.mark.parametrize("name", ["../s", "a/b", "", ".s", "s\nx"])
def test_suite_name_refused(name, tmp_path):
    with pytest.raises(jobspec_input.SuiteError, match="a suite name is"):
        jobspec_input.load_suite(name, str(tmp_path))


GOOD_SCHEDULE = {"state": "present", "backend": "cron", "time": "02:30", "suite": "lab",
                 "inventory": "/p/inventory/lab", "keep": 30, "name": "ray-verl-regression", "project_dir": "/p"}
SCHEDULE_CASES = [
    ("regression_schedule_suite", {"suite": "lab\n* * * * * root id"}),
    ("regression_schedule_suite", {"suite": "lab;id"}),
    ("regression_schedule_suite", {"suite": "%h"}),
    ("regression_schedule_name", {"name": "../x"}),
    ("regression_schedule_time", {"time": "25:00"}),
    ("regression_schedule_keep", {"keep": 0}),
    ("regression_schedule_inventory", {"inventory": "rel/inv"}),
    ("regression_schedule_inventory", {"inventory": "/p/../etc"}),
]


@pytest.mark.parametrize(("field", "bad"), SCHEDULE_CASES)
def test_schedule_refuses(field, bad):
    with pytest.raises(schedule.ScheduleError, match=f"^{field}: "):
        schedule.settle(**{**GOOD_SCHEDULE, **bad})


def test_the_table_has_sixty_bad_inputs():
    count = (len(SUBMIT_CASES) + len(JOB_IDS) + 2 + 1 + 2 + 6 + 4 + 3 + len(SUITE_ENTRIES) + 5 + len(SCHEDULE_CASES))
    assert count >= 60


def test_good_hydra_overrides_still_pass(ray_config):
    spec = jobspec.resolve({"workload": "sft", "model_path": "/m", "train_files": "/t"}, name="sft",
                           ray_config=ray_config, cli={"overrides": [
                               "data.max_length=1024", "+trainer.val_before_train=false", "++a.b=1",
                               "actor_rollout_ref.actor.optim.lr=1e-6", "x.y='a b'", "data.n=${data.max_length}"]})
    assert len(spec.overrides) == 6


def test_ray_job_module_is_the_one_under_test():
    assert ray_job.runner.submit.check_paths is not None
