"""Issue 22 class 2: what the spec owns, only the spec sets. A job's env may not choose its code (PYTHONPATH, LD_*, ...)
nor set what the renderer sets; an override may not set a key the spec renders, delete a key or call a resolver; and
checkpoint_dir is inside the job's own record. Each refusal is one line naming the field, never the value."""

import datetime
import os
import shlex

import pytest
import yaml
from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.record import record as jr
from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.jobspec import owned, render
from ansible.module_utils.jobspec.fields import TRAINERS
from ansible.module_utils.jobspec.model import JobSpecError

from plugin_utils import PROJECT_ROOT, jobspec_input

RC = {"address": "10.0.0.1:6379", "dashboard_url": "http://10.0.0.1:8265"}
NOW = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)  # noqa: UP017
SID = "job-20250102T030405Z-abc123"
JOB = f"/private/jobs/{SID}"
PPO = {"workload": "ppo", "model_path": "/private/hf/m", "train_files": "/private/datasets/t.parquet"}
SECRET = "s3cr3t-VALUE-42"


def run(spec=None, *, site=None, cli=None, name="job"):
    return jobspec.resolve(spec if spec is not None else PPO, name=name, ray_config=RC, site_defaults=site, cli=cli,
                           now=NOW, token="abc123")


def refused(field, rule, **layers):
    """The refusal of a spec: one line, `jobspec field '<field>': ...<rule>...`, without the secret value."""
    with pytest.raises(JobSpecError) as info:
        run(**layers)
    message = str(info.value)
    assert message.startswith(f"jobspec field '{field}': "), message
    assert rule in message and "\n" not in message
    assert SECRET not in message and "oc.env:HOME" not in message
    return message


# ---------------------------------------------------------------- env


CODE_NAMES = [*owned.CODE_ENV_NAMES, "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES"]


@pytest.mark.parametrize("name", CODE_NAMES)
def test_env_may_not_choose_the_code(name):
    message = refused(f"env.{name}", "changes which code a job runs", spec={**PPO, "env": {name: SECRET}})
    assert "code_id" in message and "user_code" in message


@pytest.mark.parametrize("layer", ["site", "spec", "cli"])
def test_env_is_checked_in_every_layer(layer):
    env = {"env": {"PYTHONPATH": f"/private/user/{SECRET}"}}
    layers = {"spec": {**PPO, **env}} if layer == "spec" else {layer: env}
    refused("env.PYTHONPATH", "changes which code", **layers)


def test_env_from_the_command_line_and_on_the_head():
    cli = jobspec_input.coerce_cli_overrides({"env.LD_PRELOAD": f"/private/user/{SECRET}.so"})
    refused("env.LD_PRELOAD", "changes which code", cli=cli)
    # The head checks the spec again (JobSpec.from_dict) before its preflight imports anything.
    data = run().to_dict()
    data["env"] = {"PYTHONSTARTUP": f"/private/user/{SECRET}.py"}
    with pytest.raises(JobSpecError, match=r"^jobspec field 'env.PYTHONSTARTUP': changes which code"):
        jobspec.JobSpec.from_dict(data)


@pytest.mark.parametrize("name", sorted(set(owned.RENDERED_ENV) - set(owned.CODE_ENV_NAMES)))
def test_env_may_not_set_what_the_renderer_sets(name):
    refused(f"env.{name}", "is set by the spec from", spec={**PPO, "env": {name: SECRET}})


def test_rendered_env_is_what_the_renderer_sets():
    spec = run({**PPO, "workload": "sft", "env": {"A": "1"}}, cli={"debug": {"post_mortem": True}})
    rendered = render.render_runtime_env(spec, RC)["env_vars"]
    assert set(rendered) - {"A"} == set(owned.RENDERED_ENV)


@pytest.mark.parametrize("workload", ["sft", "ppo", "grpo", "smoke", "command"])
def test_verl_loggers_write_into_the_record_of_a_verl_job_only(workload):
    """verl's file and tensorboard loggers write the record's metrics.jsonl and tensorboard/ (record.paths); a job that
    is not verl runs no verl trainer, so gets neither its loggers nor their paths."""
    spec = {**PPO, "workload": workload} if workload in TRAINERS else {"workload": workload}
    if workload == "command":
        spec["entrypoint"] = "echo hi"
    resolved = run({**spec, "env": {"WANDB_API_KEY": "k"}})
    env = render.render_runtime_env(resolved, RC)["env_vars"]
    argv = shlex.split(render.render_entrypoint(resolved, RC))
    if workload in TRAINERS:
        paths = jr.paths(resolved.output_dir)
        assert (env["VERL_FILE_LOGGER_PATH"], env["TENSORBOARD_DIR"]) == (paths["metrics"], paths["tensorboard"])
        assert paths["metrics"] == f"{JOB}/metrics.jsonl" and paths["tensorboard"] == f"{JOB}/tensorboard"
        assert "trainer.logger=['console','file','tensorboard','wandb']" in argv
    else:
        assert not {"VERL_FILE_LOGGER_PATH", "TENSORBOARD_DIR"} & set(env)
        assert not any(a.startswith("trainer.logger") for a in argv)


def test_other_env_names_stay():
    env = {"HF_HOME": "/private/hf", "VERL_USE_EXTERNAL_MODULES": "verl_cpu", "WANDB_API_KEY": SECRET,
           "PYTHONUNBUFFERED": "1", "NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0", "LOAD_X": "1"}
    assert run({**PPO, "env": env}).env == env


def test_the_code_is_the_spec_s_and_the_site_s_plugins():
    spec = run({**PPO, "code_id": "v1"})
    assert render.render_runtime_env(spec, RC)["env_vars"]["PYTHONPATH"] == (
        "/private/common/code/verl/v1:" + conventions.plugins_code_dir("/private"))


# ---------------------------------------------------------------- overrides


OWNED = sorted(owned.OWNED_KEYS)


@pytest.mark.parametrize("key", OWNED)
@pytest.mark.parametrize("prefix", ["", "+", "++"])
def test_an_override_may_not_set_a_key_the_spec_renders(key, prefix):
    message = refused("overrides[1]", f"sets {key} ",
                      spec={**PPO, "overrides": ["data.x=1", f"{prefix}{key}={SECRET}"]})
    assert f"renders from {owned.OWNED_KEYS[key]}" in message


@pytest.mark.parametrize("override", [
    "trainer={default_local_dir:/x}", "data=[]", "reward.custom_reward_function={path:/x}", "critic.model={}",
    "actor_rollout_ref={}", "trainer.logger.0=wandb", "trainer.default_local_dir.x=1", "+x@_global_=y",
    "+x@trainer=y", "+trainer/default_local_dir=x"])
def test_nor_a_key_above_or_below_one(override):
    refused("overrides[0]", "which the spec renders", spec={**PPO, "overrides": [override]})


@pytest.mark.parametrize("override", ["~data.shuffle=True", "~trainer.default_local_dir=x", "~hydra.run.dir=x",
                                      "~hydra=x", "~actor_rollout_ref.rollout.name=vllm"])
def test_an_override_may_not_delete_a_key(override):
    refused("overrides[0]", "deletes a key (~)", spec={**PPO, "overrides": [override]})


@pytest.mark.parametrize("override", ["+x@hydra=y", "+x@hydra.run=y", "+x@_global_.hydra.run=y"])
def test_an_override_may_not_reach_hydra_s_config_through_a_package(override):
    refused("overrides[0]", "hydra's own config", spec={**PPO, "overrides": [override]})


@pytest.mark.parametrize("value", [
    "${oc.env:HOME}", "${oc.env:WANDB_API_KEY,x}", "${oc.decode:${oc.env:X}}", "${eval:'1+1'}", "${my_resolver:1}",
    "${hydra:runtime.cwd}", "a${oc.env:HOME}b", "'${oc.env:HOME}'", "[1,${oc.env:HOME}]", "${ oc.env:HOME}",
    "${a.${b}}", "${oc.select:a.b,x}", "${data.x}${oc.env:HOME}"])
def test_an_override_may_not_call_a_resolver(value):
    refused("overrides[0]", "interpolation resolver", spec={**PPO, "overrides": [f"data.x={value}"]})


def test_every_refused_override_is_named_in_one_line():
    """A launch script pasted as overrides sets many owned keys: one run names each, not one a run."""
    script = ["data.x=1", *(f"{key}={SECRET}" for key in OWNED), "~data.shuffle=True", "data.y=${oc.env:HOME}"]
    message = refused("overrides", f"{len(OWNED) + 2} overrides are refused ({len(OWNED)} set keys the spec renders "
                      "from its fields: set the field named instead): overrides[1] sets ",
                      spec={**PPO, "overrides": script})
    for i, key in enumerate(OWNED, 1):
        assert f"overrides[{i}] sets {key} (the spec's {owned.OWNED_KEYS[key]})" in message
    assert f"overrides[{len(OWNED) + 1}] deletes a key (~)" in message
    assert f"overrides[{len(OWNED) + 2}] calls an interpolation resolver" in message and "overrides[0]" not in message


def test_plain_references_and_ordinary_overrides_stay():
    overrides = ["data.max_length=1024", "+trainer.val_before_train=false", "++a.b=1", "data.y=${data.max_length}",
                 "data.z=${..y}", "data.w=a-${data.y}-b", "data.v=${trainer.default_local_dir}", "data.u=${a.b[0]}",
                 "actor_rollout_ref.model.use_remove_padding=True", "reward.num_workers=1", "trainer.device=cpu",
                 "+actor_rollout_ref.model.override_config.attn_implementation=sdpa", "critic.optim.lr=1e-3",
                 "reward.custom_reward_function.name=score", "data.cost=$5"]
    assert run({**PPO, "overrides": overrides}).overrides == overrides


def test_owned_keys_are_what_the_renderer_renders():
    """Every key rendered for a trainer (all optional fields set, resuming) is owned, and the table has no other."""
    full = {**PPO, "val_files": "/private/datasets/v.parquet", "total_training_steps": 2, "total_epochs": 1,
            "reward_fn_path": "/private/user/code/r.py"}
    seen = set()
    for workload in ("ppo", "grpo", "sft"):
        spec = run({**full, "workload": workload, "overrides": ["data.extra=1"]})
        args = render.compose_command(spec, RC, resume_path=f"{JOB}/checkpoints/global_step_2")
        keys = {a.split("=", 1)[0] for a in args[3:-3]}
        assert keys <= set(owned.OWNED_KEYS), keys
        seen |= keys
    assert seen == {key for key, *_ in owned.SETTINGS}


# ---------------------------------------------------------------- checkpoint_dir


@pytest.mark.parametrize("path", [
    "/private/jobs/other-job/checkpoints", f"/private/jobs/{SECRET}", "/private/jobs", f"{JOB}-r1/checkpoints",
    "/private/common/code/verl/v1/ck", "/private/common/code/plugins/ck", "/private/regression/r1/ck",
    "/private/user/ck", "/private/outputs/ck", "/private/datasets/ck", JOB, f"{JOB}/config", f"{JOB}/logs/ck",
    f"{JOB}/debug/logs", f"{JOB}/status.json", f"{JOB}/preflight.json", f"{JOB}/.submit.lock",
    f"{JOB}/metrics.jsonl", f"{JOB}/tensorboard", f"{JOB}/tensorboard/ck"])  # verl's loggers write these
def test_checkpoint_dir_is_inside_the_job_s_own_record(path):
    refused("checkpoint_dir", "must be inside the job's own record", spec={**PPO, "checkpoint_dir": path})


def test_checkpoint_dirs_in_the_own_record_stay():
    assert run().checkpoint_dir == f"{JOB}/checkpoints"
    for path in (f"{JOB}/checkpoints", f"{JOB}/checkpoints/a", f"{JOB}/ck-2"):
        assert run({**PPO, "checkpoint_dir": path}).checkpoint_dir == path


def test_an_attempt_keeps_its_checkpoints_in_its_own_record():
    custom = run({**PPO, "checkpoint_dir": f"{JOB}/ck-2"})
    name, layer = jobspec.attempt_layer(custom, f"{SID}-r1", SID)
    assert layer["checkpoint_dir"] == f"/private/jobs/{SID}-r1/ck-2"
    assert jobspec.resolve(layer, name=name, ray_config=RC).checkpoint_dir == f"/private/jobs/{SID}-r1/ck-2"
    name, layer = jobspec.attempt_layer(run(), f"{SID}-r1", SID)
    assert jobspec.resolve(layer, name=name, ray_config=RC).checkpoint_dir == f"/private/jobs/{SID}-r1/checkpoints"


def test_an_attempt_of_a_record_from_before_drops_the_plugins_pythonpath():
    old = {**run().to_dict(), "env": {"PYTHONPATH": "/private/common/code/plugins", "VERL_PLATFORM": "cpu"}}
    name, layer = jobspec.attempt_layer(old, f"{SID}-r1", SID)
    assert jobspec.resolve(layer, name=name, ray_config=RC).env == {"VERL_PLATFORM": "cpu"}
    other = {**old, "env": {"PYTHONPATH": "/private/user/code"}}
    name, layer = jobspec.attempt_layer(other, f"{SID}-r1", SID)
    with pytest.raises(JobSpecError, match=r"^jobspec field 'env.PYTHONPATH': "):
        jobspec.resolve(layer, name=name, ray_config=RC)


# ---------------------------------------------------------------- the sites' defaults and the project's files


def site_defaults(site):
    with open(os.path.join(PROJECT_ROOT, "inventory", site, "group_vars", "ray_cluster.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)["jobspec_defaults"]


SPECS = jobspec_input.list_specs(os.path.join(PROJECT_ROOT, "jobspecs"))


@pytest.mark.parametrize("site", ["lab", "example"])
@pytest.mark.parametrize("name", SPECS)
def test_every_spec_file_resolves_with_the_sites_defaults(site, name):
    spec = jobspec_input.resolve_job(name, ray_config=RC, specs_dir=os.path.join(PROJECT_ROOT, "jobspecs"),
                                     site_defaults=site_defaults(site))
    render.render_entrypoint(spec, RC)
    if site == "lab" and spec.workload in ("ppo", "grpo", "sft"):
        # The lab's CPU platform still loads: its plugin from the plugins directory, named by the site's env.
        env = render.render_runtime_env(spec, RC)["env_vars"]
        assert env["PYTHONPATH"] == "/private/common/code/verl/verl-0.9.1:/private/common/code/plugins"
        assert env["VERL_USE_EXTERNAL_MODULES"] == "verl_cpu"


@pytest.mark.parametrize("suite", sorted(f[:-5] for f in os.listdir(os.path.join(PROJECT_ROOT, "suites"))
                                         if f.endswith(".yaml")))
def test_every_suite_entry_resolves_with_the_lab_s_defaults(suite):
    with open(os.path.join(PROJECT_ROOT, "suites", f"{suite}.yaml"), encoding="utf-8") as handle:
        entries = yaml.safe_load(handle)["entries"]
    for entry in entries:
        jobspec_input.resolve_job(entry["spec"], ray_config=RC, specs_dir=os.path.join(PROJECT_ROOT, "jobspecs"),
                                  site_defaults=site_defaults("lab"), overrides=entry.get("overrides"))
