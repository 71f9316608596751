"""The JobSpec: fields and validation (jobspec), -e and files (jobspec_input), rendering (jobspec/render.py),
redaction and the schema (jobspec_schema)."""

import dataclasses
import datetime
import json
import os
import re
import shlex

import pytest
from ansible.module_utils.base import redaction
from ansible.module_utils.jobspec import fields as jobspec_fields
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.model import JobSpecError, resolve

from plugin_utils import PROJECT_ROOT, jobspec_input, jobspec_schema, schemas

ROOT = PROJECT_ROOT
RC = {"address": "10.0.0.1:6379", "dashboard_url": "http://10.0.0.1:8265"}
NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)  # noqa: UP017
SMOKE = {"workload": "smoke"}
MODEL = "/private/common/models/qwen"
TRAIN = "/private/datasets/train.parquet"
SFT = {"workload": "sft", "model_path": MODEL, "train_files": TRAIN}
PPO = {**SFT, "workload": "ppo"}
GRPO = {**SFT, "workload": "grpo"}


def run(spec, *, rc=RC, cli=None, site=None, name="job"):
    return resolve(spec, name=name, ray_config=rc, site_defaults=site, cli=cli, now=NOW,
                   token="abc123")


def with_rc(**fields):
    return run(SMOKE, rc={**RC, **fields})


def write(tmp_path, text, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def bad(call, field, value, id):
    return pytest.param(call, field, value, id=id)


BAD_INPUTS = [
    # submission ids: they name a directory under shared_root
    bad(lambda t: run({**SMOKE, "submission_id": "../x"}), "submission_id", "../x", "id-dotdot"),
    bad(lambda t: run({**SMOKE, "submission_id": "a/b"}), "submission_id", "a/b", "id-slash"),
    bad(lambda t: run({**SMOKE, "submission_id": ".hidden"}), "submission_id", ".hidden",
        "id-leading-dot"),
    bad(lambda t: run({**SMOKE, "submission_id": "-x"}), "submission_id", "-x", "id-leading-dash"),
    bad(lambda t: run({**SMOKE, "submission_id": "a" * 200}), "submission_id", "a" * 200,
        "id-too-long"),
    bad(lambda t: run({**SMOKE, "submission_id": ""}), "submission_id", "", "id-empty"),
    bad(lambda t: run({**SMOKE, "submission_id": None}), "submission_id", None, "id-null"),
    # workload and unknown fields
    bad(lambda t: run({"workload": "dpo"}), "workload", "dpo", "unknown-workload"),
    bad(lambda t: run({}), "workload", None, "missing-workload"),
    bad(lambda t: run({**SMOKE, "save_frq": 5}), "save_frq", 5, "unknown-top-field"),
    bad(lambda t: run({**SMOKE, "resources": {"nnode": 2}}), "resources.nnode", 2,
        "unknown-nested-field"),
    bad(lambda t: run({**SMOKE, "timeouts": {"pending": 5}}), "timeouts.pending", 5,
        "unknown-timeouts-field"),
    # types; bool is not an int
    bad(lambda t: run({**SMOKE, "resources": {"nnodes": "2"}}), "resources.nnodes", "2",
        "string-nnodes"),
    bad(lambda t: run({**SMOKE, "resources": {"nnodes": 2.0}}), "resources.nnodes", 2.0,
        "float-nnodes"),
    bad(lambda t: run({**SMOKE, "save_freq": True}), "save_freq", True, "bool-save-freq"),
    bad(lambda t: run({**SMOKE, "env": ["A=1"]}), "env", ["A=1"], "list-env"),
    bad(lambda t: run({**SMOKE, "resources": 5}), "resources", 5, "resources-not-mapping"),
    bad(lambda t: run({**SMOKE, "overrides": "a=b"}), "overrides", "a=b", "overrides-string"),
    bad(lambda t: run({**SMOKE, "timeouts": {"max_run_s": "300"}}), "timeouts.max_run_s", "300",
        "string-max-run"),
    # ranges
    bad(lambda t: run({**SMOKE, "save_freq": 0}), "save_freq", 0, "save-freq-zero"),
    bad(lambda t: run({**SMOKE, "save_freq": -2}), "save_freq", -2, "save-freq-negative"),
    bad(lambda t: run({**SMOKE, "resources": {"nnodes": 0}}), "resources.nnodes", 0,
        "nnodes-zero"),
    bad(lambda t: run({**SMOKE, "total_epochs": 0}), "total_epochs", 0, "epochs-zero"),
    bad(lambda t: run({**SMOKE, "timeouts": {"pending_s": 0}}), "timeouts.pending_s", 0,
        "pending-zero"),
    bad(lambda t: run({**SMOKE, "resources": {"entrypoint_num_cpus": -1}}),
        "resources.entrypoint_num_cpus", -1, "negative-cpus"),
    bad(lambda t: run({**SMOKE, "resources": {"entrypoint_resources": {"worker_node": 0}}}),
        "resources.entrypoint_resources.worker_node", 0, "zero-custom-resource"),
    # what trainers need
    bad(lambda t: run({**SFT, "model_path": None}), "model_path", None, "sft-no-model"),
    bad(lambda t: run({"workload": "sft", "model_path": MODEL}), "train_files", None,
        "sft-no-train-files"),
    bad(lambda t: run({"workload": "ppo", "train_files": TRAIN}), "model_path", None,
        "ppo-no-model"),
    bad(lambda t: run({"workload": "ppo", "model_path": MODEL}), "train_files", None,
        "ppo-no-train-files"),
    bad(lambda t: run({"workload": "grpo", "train_files": TRAIN}), "model_path", None,
        "grpo-no-model"),
    bad(lambda t: run({**SFT, "train_files": []}), "train_files", [], "empty-train-files"),
    # paths
    bad(lambda t: run({**SFT, "model_path": "models/qwen"}), "model_path", "models/qwen",
        "relative-model-path"),
    bad(lambda t: run({**SFT, "train_files": [TRAIN, "data/b.parquet"]}), "train_files[1]",
        "data/b.parquet", "relative-train-file-in-list"),
    bad(lambda t: run({**GRPO, "reward_fn_path": "reward.py"}), "reward_fn_path", "reward.py",
        "relative-reward-fn"),
    bad(lambda t: run({**SMOKE, "code_path": "/a:b"}), "code_path", "/a:b", "colon-in-path"),
    bad(lambda t: run({**SMOKE, "code_id": "v1", "code_path": "/private/code"}), "code_path",
        "/private/code", "code-id-and-code-path"),
    bad(lambda t: run({**SMOKE, "output_dir": "/tmp/out"}), "output_dir", "/tmp/out",
        "output-outside-shared-root"),
    bad(lambda t: run({**SMOKE, "output_dir": "/private/jobs/../../etc"}), "output_dir", "/etc",
        "output-escapes-with-dotdot"),
    bad(lambda t: run({**SMOKE, "output_dir": "/private"}), "output_dir", "/private",
        "output-is-shared-root"),
    # entrypoint
    bad(lambda t: run({**SMOKE, "entrypoint": "python x.py"}), "entrypoint", "python x.py",
        "entrypoint-on-smoke"),
    bad(lambda t: run({"workload": "command"}), "entrypoint", None, "command-without-entrypoint"),
    bad(lambda t: run({"workload": "command", "entrypoint": "  "}), "entrypoint", "  ",
        "blank-entrypoint"),
    # env, overrides, names
    bad(lambda t: run({**SMOKE, "env": {"DEBUG": True}}), "env.DEBUG", True,
        "non-string-env-value"),
    bad(lambda t: run({**SMOKE, "env": {"1BAD": "x"}}), "env.1BAD", "1BAD", "bad-env-name"),
    bad(lambda t: run({**SMOKE, "env": {"A-B": "x"}}), "env.A-B", "A-B", "dash-in-env-name"),
    bad(lambda t: run({**SMOKE, "overrides": ["trainer.device"]}), "overrides[0]",
        "trainer.device", "override-without-equals"),
    bad(lambda t: run({**SMOKE, "overrides": ["=cpu"]}), "overrides[0]", "=cpu",
        "override-empty-key"),
    bad(lambda t: run({**SMOKE, "project_name": "my project"}), "project_name", "my project",
        "space-in-project-name"),
    bad(lambda t: run({**SMOKE, "metadata": {"n": 1}}), "metadata.n", 1, "non-string-metadata"),
    # spec names, files and layers
    bad(lambda t: jobspec_input.find_spec_file("a/b", str(t)), "spec", "a/b", "spec-name-with-slash"),
    bad(lambda t: jobspec_input.find_spec_file("..", str(t)), "spec", "..", "spec-name-dotdot"),
    bad(lambda t: jobspec_input.find_spec_file("nope", os.path.join(ROOT, "jobspecs")), "spec", "nope",
        "spec-file-missing"),
    bad(lambda t: jobspec_input.load_spec_file(write(t, "workload: smoke\nsave_freq: [1\n")), "spec",
        lambda t: str(t / "bad.yaml"), "yaml-syntax-error"),
    bad(lambda t: jobspec_input.load_spec_file(write(t, "workload: smoke\nworkload: sft\n")), "spec",
        lambda t: str(t / "bad.yaml"), "yaml-duplicate-key"),
    bad(lambda t: jobspec_input.load_spec_file(write(t, "- workload: smoke\n")), "spec",
        [{"workload": "smoke"}], "top-level-list"),
    bad(lambda t: jobspec_input.load_spec_file(write(t, "")), "spec", None, "empty-file"),
    bad(lambda t: jobspec_input.load_spec_file(str(t / "missing.yaml")), "spec",
        lambda t: str(t / "missing.yaml"), "unreadable-file"),
    bad(lambda t: run(["workload", "smoke"]), "spec", ["workload", "smoke"], "spec-not-mapping"),
    bad(lambda t: run(SMOKE, name="a/b"), "name", "a/b", "resolve-name-with-slash"),
    bad(lambda t: run({**SMOKE, "name": "other"}), "name", "other", "name-inside-spec"),
    bad(lambda t: run(SMOKE, site={"save_freq": 0}), "save_freq", 0, "bad-site-default"),
    # -e coercion
    bad(lambda t: jobspec_input.coerce_cli_overrides({"save_freq": "abc"}), "save_freq", "abc",
        "cli-save-freq-abc"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"resources.nnodes": "two"}), "resources.nnodes",
        "two", "cli-nested-int"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"save_frq": "5"}), "save_frq", "5",
        "cli-unknown-key"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"resources.gpus": "1"}), "resources.gpus", "1",
        "cli-unknown-nested-key"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"save_freq.x": "1"}), "save_freq.x", "1",
        "cli-dotted-scalar"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"env": "A=1"}), "env", "A=1", "cli-env-not-json"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"train_files": "[/a"}), "train_files", "[/a",
        "cli-broken-json-list"),
    bad(lambda t: jobspec_input.coerce_cli_overrides({"resources.entrypoint_num_cpus": "lots"}),
        "resources.entrypoint_num_cpus", "lots", "cli-bad-number"),
    # ray_config
    bad(lambda t: with_rc(address="head-only"), "ray_config.address", "head-only", "rc-address"),
    bad(lambda t: with_rc(dashboard_url="ftp://h:1"), "ray_config.dashboard_url", "ftp://h:1",
        "rc-dashboard-url"),
    bad(lambda t: run(SMOKE, rc={"dashboard_url": RC["dashboard_url"]}), "ray_config.address",
        None, "rc-missing-address"),
    bad(lambda t: with_rc(shared_root="private"), "ray_config.shared_root", "private",
        "rc-relative-shared-root"),
    bad(lambda t: with_rc(adress="h:1"), "ray_config.adress", "h:1", "rc-unknown-field"),
    bad(lambda t: with_rc(runtime_env={"working_dir": "."}), "ray_config.runtime_env.working_dir",
        ".", "rc-working-dir"),
    bad(lambda t: with_rc(runtime_env={"env_vars": {"N": 1}}), "ray_config.runtime_env.env_vars.N",
        1, "rc-env-var-not-string"),
    bad(lambda t: with_rc(secret_env_names="HF_TOKEN"), "ray_config.secret_env_names", "HF_TOKEN",
        "rc-secret-names-not-list"),
    bad(lambda t: with_rc(python=""), "ray_config.python", "", "rc-empty-python"),
    bad(lambda t: with_rc(tensorboard_url="javascript:alert(1)"), "ray_config.tensorboard_url",
        "javascript:alert(1)", "rc-tensorboard-url-scheme"),
    bad(lambda t: with_rc(tensorboard_url="http://h:6006/x) [y](http://evil"), "ray_config.tensorboard_url",
        "http://h:6006/x) [y](http://evil", "rc-tensorboard-url-markdown"),
    bad(lambda t: run(SMOKE, rc="10.0.0.1:6379"), "ray_config", "10.0.0.1:6379", "rc-not-mapping"),
    # resolved dicts coming back to the module
    bad(lambda t: jobspec.JobSpec.from_dict(
        {k: v for k, v in run(SMOKE).to_dict().items() if k != "save_freq"}),
        "save_freq", None, "from-dict-missing-field"),
    bad(lambda t: jobspec.JobSpec.from_dict({**run(SMOKE).to_dict(), "workload": "x"}),
        "workload", "x", "from-dict-bad-value"),
]


@pytest.mark.parametrize("call, field, value", BAD_INPUTS)
def test_bad_input_names_field_never_value(call, field, value, tmp_path):
    value = value(tmp_path) if callable(value) else value
    with pytest.raises(JobSpecError) as info:
        call(tmp_path)
    error = info.value
    message = str(error)
    assert error.field == field and (error.value is jobspec_fields.ABSENT or error.value == value)
    assert "\n" not in message
    assert message.startswith(f"jobspec field '{field}': ")
    # Issue 22 §1: the value is never shown (it may be a secret in the wrong place), only its kind.
    if isinstance(value, str) and len(value) > 1:
        assert repr(value) not in message and f'"{value}"' not in message


def test_bad_input_count():
    assert len(BAD_INPUTS) >= 30


def test_unknown_field_hints_and_missing_spec_lists_names(tmp_path):
    with pytest.raises(JobSpecError, match=r"did you mean 'save_freq'\?"):
        run({**SMOKE, "save_frq": 5})
    with pytest.raises(JobSpecError, match=r"did you mean 'nnodes'\?"):
        jobspec_input.coerce_cli_overrides({"resources.nnode": "2"})
    (tmp_path / "alpha.yaml").write_text("workload: smoke\n")
    (tmp_path / "beta.yaml").write_text("workload: smoke\n")
    with pytest.raises(JobSpecError, match=r"available: alpha, beta"):
        jobspec_input.find_spec_file("gamma", str(tmp_path))
    assert jobspec_input.find_spec_file("beta", str(tmp_path)) == str(tmp_path / "beta.yaml")


def test_yaml_error_names_line(tmp_path):
    with pytest.raises(JobSpecError, match=r"line 3"):
        jobspec_input.load_spec_file(write(tmp_path, "workload: smoke\nenv:\n\tA: '1'\n"))


def test_defaults():
    spec = run(SMOKE)
    sid = "job-20250102T030405Z-abc123"
    assert spec.to_dict() == {
        "name": "job", "submission_id": sid, "workload": "smoke", "entrypoint": None,
        "resources": {"nnodes": 1, "n_gpus_per_node": 0, "entrypoint_num_cpus": 0,
                      "entrypoint_num_gpus": 0, "entrypoint_memory": 0,
                      "entrypoint_resources": {"worker_node": 1}},
        "shared_root": "/private", "code_id": None, "code_path": "/private/common/code/smoke",
        "user_code": False, "model_path": None, "train_files": None, "val_files": None,
        "output_dir": f"/private/jobs/{sid}", "checkpoint_dir": f"/private/jobs/{sid}/checkpoints",
        "save_freq": 10, "total_training_steps": None, "total_epochs": None,
        "timeouts": {"pending_s": 600, "max_run_s": None, "stall_s": None, "on_stall": "report", "queue_s": None},
        "queue": {"priority": "normal", "preemptible": None},
        "retries": {"max": 0, "on": ["node_died", "head_restarted", "nccl_gloo"], "cordon": True},
        "resume_from": None,
        "debug": {"breakpoints": False, "post_mortem": False},
        "env": {}, "overrides": [],
        "reward_fn_path": None, "project_name": "verl-ray", "experiment_name": sid, "metadata": {}}


def test_ray_config_defaults_and_derived_values():
    rc = jobspec.RayConfig.from_dict(RC)
    assert (rc.shared_root, rc.entrypoint_resources, rc.runtime_env, rc.python) == (
        "/private", {"worker_node": 1}, {}, "python")
    assert "HF_TOKEN" in rc.secret_env_names
    spec = run({**SFT, "code_id": "v1"},
               rc={**RC, "shared_root": "/data", "entrypoint_resources": {"gpu_host": 0.5}})
    assert spec.code_path == "/data/common/code/verl/v1"
    assert spec.output_dir.startswith("/data/jobs/")
    assert spec.resources.entrypoint_resources == {"gpu_host": 0.5}


def test_precedence_site_then_spec_then_cli():
    site = {"save_freq": 1, "total_epochs": 3, "resources": {"n_gpus_per_node": 4},
            "env": {"A": "site", "B": "site"}, "overrides": ["trainer.device=cpu"]}
    spec = {**SFT, "save_freq": 2, "resources": {"nnodes": 2}, "env": {"B": "spec"},
            "overrides": ["data.num_workers=0"]}
    cli = jobspec_input.coerce_cli_overrides({"save_freq": "3", "env.C": "cli",
                                        "overrides": "trainer.device=cuda"})
    resolved = run(spec, site=site, cli=cli)
    assert resolved.save_freq == 3
    assert resolved.total_epochs == 3
    assert (resolved.resources.nnodes, resolved.resources.n_gpus_per_node) == (2, 4)
    assert resolved.env == {"A": "site", "B": "spec", "C": "cli"}
    assert resolved.overrides == ["trainer.device=cpu", "data.num_workers=0", "trainer.device=cuda"]
    assert run({**SFT, "total_epochs": None}, site=site).total_epochs is None


def test_cli_coercion_and_dotted_keys():
    raw = {"save_freq": "5", "resources.nnodes": "2", "resources.entrypoint_num_cpus": "0.5",
           "resources.entrypoint_resources.worker_node": "1", "timeouts.pending_s": "30",
           "timeouts.max_run_s": "null", "env.HF_HOME": "/private/hf", "metadata.team.name": "x",
           "train_files": '["/private/a.parquet", "/private/b.parquet"]',
           "val_files": "/private/v.parquet", "overrides": '["a=1", "b=2"]',
           "code_id": "v2", "total_epochs": 4}
    assert jobspec_input.coerce_cli_overrides(raw) == {
        "save_freq": 5,
        "resources": {"nnodes": 2, "entrypoint_num_cpus": 0.5,
                      "entrypoint_resources": {"worker_node": 1}},
        "timeouts": {"pending_s": 30, "max_run_s": None},
        "env": {"HF_HOME": "/private/hf"}, "metadata": {"team.name": "x"},
        "train_files": ["/private/a.parquet", "/private/b.parquet"],
        "val_files": "/private/v.parquet", "overrides": ["a=1", "b=2"], "code_id": "v2",
        "total_epochs": 4}
    cli = jobspec_input.coerce_cli_overrides({"resources.nnodes": "2", "timeouts.pending_s": "30"})
    spec = run({**SMOKE, "resources": {"n_gpus_per_node": 1}}, cli=cli)
    assert (spec.resources.nnodes, spec.resources.n_gpus_per_node, spec.timeouts.pending_s) == (
        2, 1, 30)


def test_default_submission_id_is_deterministic_with_now_and_token():
    later = datetime.datetime(2025, 1, 2, 12, 4, 5,
                              tzinfo=datetime.timezone(datetime.timedelta(hours=9)))
    ids = [resolve(SMOKE, name="smoke", ray_config=RC, now=now, token="0a1b2c").submission_id
           for now in (NOW, NOW.replace(tzinfo=None), later)]
    assert ids == ["smoke-20250102T030405Z-0a1b2c"] * 3
    fresh = resolve(SMOKE, name="smoke", ray_config=RC).submission_id
    assert re.fullmatch(r"smoke-\d{8}T\d{6}Z-[0-9a-f]{6}", fresh)
    longest = resolve(SMOKE, name="n" * 100, ray_config=RC).submission_id
    assert len(longest) <= 128


@pytest.mark.parametrize("spec", [SMOKE, SFT, PPO, {**GRPO, "val_files": [TRAIN, TRAIN]},
                                  {"workload": "command", "entrypoint": "echo hi"}])
def test_to_dict_round_trip(spec):
    resolved = run({**spec, "env": {"A": "1"}, "metadata": {"k": "v"}})
    data = json.loads(json.dumps(resolved.to_dict()))
    assert jobspec.JobSpec.from_dict(data) == resolved
    assert jobspec.JobSpec.from_dict(data).to_dict() == data


def test_dataclasses_match_the_field_table():
    """The table is the single source: the model's fields must be exactly the table's."""
    names = [f.name for f in dataclasses.fields(jobspec.JobSpec)]
    assert names == ["name"] + [f.name for f in jobspec_fields.SPEC_FIELDS]
    nested = {f.name: f for f in jobspec_fields.SPEC_FIELDS if f.kind == "object"}
    for name, model in (("resources", jobspec.Resources), ("timeouts", jobspec.Timeouts), ("retries", jobspec.Retries),
                        ("debug", jobspec.Debug), ("queue", jobspec.Queue)):
        assert [f.name for f in dataclasses.fields(model)] == [f.name for f in nested[name].fields]
    assert [f.name for f in dataclasses.fields(jobspec.RayConfig)] == [
        f.name for f in jobspec_fields.RAY_CONFIG_FIELDS]


def argv(spec, rc=RC):
    return shlex.split(render.render_entrypoint(spec, rc))


def test_smoke_entrypoint():
    spec = run(SMOKE)
    assert argv(spec) == ["python", "-m", "smoke_probe", "--checkpoint-dir", spec.checkpoint_dir,
                          "--submission-id", spec.submission_id]
    assert argv(spec, {**RC, "python": "/opt/ray-verl/venv/bin/python"})[0] == (
        "/opt/ray-verl/venv/bin/python")


def test_command_entrypoint_is_verbatim():
    command = "cd /private/user/code && python train.py --x 'a b' | tee out.log"
    assert render.render_entrypoint(run({"workload": "command", "entrypoint": command}), RC) == (
        command)


def trainer_common(spec):
    return [f"data.train_files={TRAIN}", f"trainer.default_local_dir={spec.checkpoint_dir}",
            "trainer.save_freq=10", "trainer.nnodes=1", "trainer.n_gpus_per_node=0",
            "trainer.project_name=verl-ray", f"trainer.experiment_name={spec.submission_id}",
            "trainer.logger=['console','file','tensorboard']"]


def test_ppo_entrypoint():
    spec = run({**PPO, "overrides": ["actor_rollout_ref.rollout.name=vllm",
                                     "trainer.val_before_train=False"]})
    args = argv(spec)
    assert args[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    for expected in ["algorithm.adv_estimator=gae", f"actor_rollout_ref.model.path={MODEL}",
                     f"critic.model.path={MODEL}", *trainer_common(spec)]:
        assert expected in args
    assert args[-2:] == ["actor_rollout_ref.rollout.name=vllm", "trainer.val_before_train=False"]
    assert not any(a.startswith(("data.val_files=", "trainer.total_", "reward.custom_reward_function"))
                   for a in args)


def test_grpo_entrypoint():
    spec = run({**GRPO, "val_files": [TRAIN, "/private/datasets/val.parquet"], "save_freq": 5,
                "total_training_steps": 29, "total_epochs": 1,
                "reward_fn_path": "/private/user/code/reward.py", "env": {"WANDB_API_KEY": "k"},
                "resources": {"nnodes": 2, "n_gpus_per_node": 4}})
    args = argv(spec)
    assert args[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    for expected in ["algorithm.adv_estimator=grpo", f"actor_rollout_ref.model.path={MODEL}",
                     f"data.val_files=['{TRAIN}','/private/datasets/val.parquet']",
                     "trainer.save_freq=5", "trainer.nnodes=2", "trainer.n_gpus_per_node=4",
                     "trainer.total_training_steps=29", "trainer.total_epochs=1",
                     "reward.custom_reward_function.path=/private/user/code/reward.py",
                     "trainer.logger=['console','file','tensorboard','wandb']"]:
        assert expected in args
    assert not any(a.startswith("critic.") for a in args)


def test_sft_entrypoint_and_runtime_env():
    spec = run({**SFT, "overrides": ["trainer.device=cpu"]})
    args = argv(spec)
    assert args[:3] == ["python", "-m", "verl.trainer.sft_trainer_ray"]
    for expected in [f"model.path={MODEL}", *trainer_common(spec)]:
        assert expected in args
    assert args[-1] == "trainer.device=cpu"
    assert not any(a.startswith(("algorithm.", "actor_rollout_ref.", "critic.")) for a in args)
    assert render.render_runtime_env(spec, RC)["env_vars"]["RAY_ADDRESS"] == "auto"
    for other in (run(PPO), run(SMOKE)):
        assert "RAY_ADDRESS" not in render.render_runtime_env(other, RC)["env_vars"]
    assert not any("trainer.device" in a for a in argv(run(SFT)))


def test_runtime_env_pythonpath_and_env_precedence():
    rc = {**RC, "runtime_env": {"env_vars": {"HF_HUB_OFFLINE": "1", "A": "site"},
                                "config": {"setup_timeout_seconds": 60}}}
    spec = run({**PPO, "code_id": "v1", "env": {"A": "job"}, "user_code": True}, rc=rc)
    runtime_env = render.render_runtime_env(spec, rc)
    assert runtime_env == {
        "config": {"setup_timeout_seconds": 60},
        "env_vars": {"HF_HUB_OFFLINE": "1", "A": "job", "RAY_DEBUG": "0",
                     "VERL_FILE_LOGGER_PATH": f"{spec.output_dir}/metrics.jsonl",
                     "TENSORBOARD_DIR": f"{spec.output_dir}/tensorboard",
                     "PYTHONPATH": "/private/common/code/verl/v1:/private/common/code/plugins:/private/user/code"}}
    # The site's own ray_config.runtime_env may add a path (last); a spec's env may not (test_jobspec_owned).
    site = {**RC, "runtime_env": {"env_vars": {"PYTHONPATH": "/opt/site"}}}
    no_code = render.render_runtime_env(run(PPO, cli={"user_code": True}, rc=site), site)
    assert no_code["env_vars"]["PYTHONPATH"] == "/private/common/code/plugins:/private/user/code:/opt/site"
    assert "working_dir" not in runtime_env
    assert rc["runtime_env"]["env_vars"] == {"HF_HUB_OFFLINE": "1", "A": "site"}


def test_entrypoint_options_omit_zeros():
    assert render.entrypoint_options(run(SMOKE)) == {"entrypoint_resources": {"worker_node": 1}}
    spec = run({**SMOKE, "resources": {"entrypoint_num_cpus": 1, "entrypoint_memory": 2**30,
                                       "entrypoint_resources": {}}}, rc={**RC, "entrypoint_resources": {}})
    assert render.entrypoint_options(spec.to_dict()) == {"entrypoint_num_cpus": 1,
                                                          "entrypoint_memory": 2**30}


def test_submit_command_is_pasteable():
    spec = run({**SMOKE, "resources": {"entrypoint_num_cpus": 1}})
    runtime_env = render.render_runtime_env(spec, RC)
    words = shlex.split(render.submit_command(spec, RC, runtime_env))
    cut = words.index("--")
    assert words[:7] == ["ray", "job", "submit", "--address", RC["dashboard_url"],
                         "--submission-id", spec.submission_id]
    assert json.loads(words[words.index("--entrypoint-resources") + 1]) == {"worker_node": 1}
    assert json.loads(words[words.index("--runtime-env-json") + 1]) == runtime_env
    assert words[words.index("--entrypoint-num-cpus") + 1] == "1"
    assert words[cut - 1] == "--no-wait"
    # ray job submit shlex.joins the words after "--": that must give back the entrypoint.
    assert shlex.join(words[cut + 1:]) == render.render_entrypoint(spec, RC)


def test_submit_command_wraps_shell_syntax():
    command = "echo $HOME && ls | wc -l"
    spec = run({"workload": "command", "entrypoint": command})
    words = shlex.split(render.submit_command(spec, RC, {}))
    assert words[words.index("--") + 1:] == ["bash", "-c", command]


def test_redact_names_patterns_and_embedded_values():
    secret, password = "hf_abcdefgh123", "pa55word!"
    runtime_env = {"env_vars": {"HF_TOKEN": secret, "DB_PASSWORD": password,
                                "MY_SERVICE_API_KEY": "k3y-value", "PLAIN": "visible",
                                "CUSTOM": "custom-secret-value", "SHORT_TOKEN": "ab"}}
    record = {"runtime_env": runtime_env,
              "submit_cmd": f"ray job submit --runtime-env-json '{json.dumps(runtime_env)}'",
              "notes": [f"token was {secret}", ("tuple", password)],
              "extra": "the ray token is tok-12345", "count": 3}
    out = redaction.redact(record, ["CUSTOM"], extra_values=["tok-12345"])
    assert out["runtime_env"]["env_vars"] == {
        "HF_TOKEN": "<redacted>", "DB_PASSWORD": "<redacted>", "MY_SERVICE_API_KEY": "<redacted>",
        "PLAIN": "visible", "CUSTOM": "<redacted>", "SHORT_TOKEN": "<redacted>"}
    text = json.dumps(out)
    for value in (secret, password, "k3y-value", "custom-secret-value", "tok-12345"):
        assert value not in text
    assert out["notes"] == ["token was <redacted>", ("tuple", "<redacted>")]
    assert out["count"] == 3 and "visible" in out["submit_cmd"]
    assert record["runtime_env"]["env_vars"]["HF_TOKEN"] == secret  # input untouched


def test_redact_json_escaped_value():
    value = 'quo"te\\slash'
    command = "--runtime-env-json " + json.dumps({"env_vars": {"X": value}})
    out = redaction.redact({"env": {"WANDB_API_KEY": value}, "cmd": command}, [])
    assert "quo" not in out["cmd"]


def test_schema_file_matches_and_is_closed():
    with open(os.path.join(ROOT, "jobspec.schema.json"), encoding="utf-8") as handle:
        assert json.load(handle) == jobspec_schema.json_schema()
    assert schemas.schema_text("jobspec.schema.json") == json.dumps(jobspec_schema.json_schema(), indent=2) + "\n"

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node["additionalProperties"] is False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(jobspec_schema.json_schema())


def test_schema_agrees_with_validator():
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(jobspec_schema.json_schema())
    jsonschema.Draft202012Validator.check_schema(jobspec_schema.json_schema())
    good = [SMOKE, SFT, {**GRPO, "val_files": [TRAIN], "timeouts": {"max_run_s": None}}, {**SFT, "save_freq": -1},
            {"workload": "command", "entrypoint": "echo hi", "env": {"A": "1"}}]
    bad = [{"workload": "dpo"}, {**SMOKE, "save_frq": 1}, {**SMOKE, "resources": {"nnode": 1}},
           {**SMOKE, "save_freq": True}, {**SMOKE, "submission_id": "../x"},
           {"workload": "sft", "model_path": MODEL}, {**SMOKE, "entrypoint": "x"},
           {"workload": "command"}, {**SMOKE, "code_id": "a", "code_path": "/b"},
           {**SMOKE, "env": {"1BAD": "x"}}, {**SMOKE, "overrides": ["nokey"]},
           {**SMOKE, "model_path": "rel/path"}, {**SMOKE, "save_freq": 0}, {**SMOKE, "save_freq": -2}]
    for spec in good:
        run(spec)
        assert validator.is_valid(spec), spec
    for spec in bad:
        with pytest.raises(JobSpecError):
            run(spec)
        assert not validator.is_valid(spec), spec


def test_save_freq_minus_one_turns_checkpoints_off_and_is_rendered_as_verl_s_own():
    for workload in (SFT, PPO, GRPO):
        spec = run({**workload, "save_freq": -1})
        assert spec.save_freq == -1 and "trainer.save_freq=-1" in argv(spec)
        assert jobspec.checkpoints_off(spec) and jobspec.restart_note(spec) is None  # retries.max 0: nothing to say
    assert run(SFT, cli=jobspec_input.coerce_cli_overrides({"save_freq": "-1"})).save_freq == -1
    retried = run({**GRPO, "save_freq": -1, "retries": {"max": 2}})
    assert jobspec.restart_note(retried) == "save_freq -1: no checkpoints, so a retry starts again from step 0"
    assert jobspec.restart_note({**retried.to_dict(), "save_freq": 5}) is None
    assert not jobspec.checkpoints_off(run({**SMOKE, "save_freq": -1}))  # the smoke probe is no verl trainer
    # A record's job_spec is data of any shape.
    for data in ({"workload": "ppo", "save_freq": True}, {"workload": ["ppo"], "save_freq": -1}, "x", None, []):
        assert not jobspec.checkpoints_off(data)
    assert jobspec.checkpoints_off({"workload": "sft", "save_freq": -1})


@pytest.mark.parametrize(("value", "got"), [(0, "an integer below 1"), (-2, "an integer below 1"),
                                            (True, "true or false"), ("often", "a string"), (2.5, "a number")])
def test_save_freq_refused_says_what_is_allowed_and_what_it_got(value, got):
    with pytest.raises(JobSpecError) as exc:
        run({**SFT, "save_freq": value})
    assert str(exc.value) == (f"jobspec field 'save_freq': must be a positive integer, or -1 for no checkpoints "
                              f"(got {got})")
    assert exc.value.value is value


def test_smoke_spec_file():
    path = jobspec_input.find_spec_file("smoke", os.path.join(ROOT, "jobspecs"))
    with open(path, encoding="utf-8") as handle:
        assert handle.readline() == "# yaml-language-server: $schema=../jobspec.schema.json\n"
    spec = run(jobspec_input.load_spec_file(path), name="smoke")
    assert spec.workload == "smoke"
    assert (spec.timeouts.pending_s, spec.timeouts.max_run_s) == (120, 300)


def test_user_code_is_opt_in_for_the_job_and_its_preflight():
    """Issue 10 §4: the share's user/code is writable by its users; only a job that asks imports from it."""
    default = run({**PPO, "code_id": "v1"})
    assert default.user_code is False
    env = render.render_runtime_env(default, RC)["env_vars"]
    assert env["PYTHONPATH"] == "/private/common/code/verl/v1:/private/common/code/plugins"
    smoke_env = render.render_runtime_env(run(SMOKE), RC)["env_vars"]
    assert "/private/user/code" not in smoke_env["PYTHONPATH"]
    asked = run({**PPO, "code_id": "v1"}, cli={"user_code": True})
    assert render.render_runtime_env(asked, RC)["env_vars"]["PYTHONPATH"] == (
        "/private/common/code/verl/v1:/private/common/code/plugins:/private/user/code")
    for bad in ("yes", 1, "true"):
        with pytest.raises(JobSpecError, match=r"^jobspec field 'user_code': must be true or false"):
            run({**SMOKE, "user_code": bad})


def test_the_debugger_only_for_a_job_that_asks():
    quiet = render.render_runtime_env(run(SMOKE), RC)["env_vars"]
    assert quiet["RAY_DEBUG"] == "0" and "RAY_DEBUG_POST_MORTEM" not in quiet  # a stray breakpoint() holds nothing
    debug = render.render_runtime_env(run(SMOKE, cli={"debug": {"post_mortem": True}}), RC)["env_vars"]
    assert debug["RAY_DEBUG"] == "1" and debug["RAY_DEBUG_POST_MORTEM"] == "1"
    stops = render.render_runtime_env(run(SMOKE, cli={"debug": {"breakpoints": True}}), RC)["env_vars"]
    assert stops["RAY_DEBUG"] == "1" and "RAY_DEBUG_POST_MORTEM" not in stops
    with pytest.raises(jobspec.JobSpecError, match="jobspec field 'debug.post_mortem': must be true or false"):
        run(SMOKE, cli={"debug": {"post_mortem": "yes"}})
