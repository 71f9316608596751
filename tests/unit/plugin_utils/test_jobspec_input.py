"""plugin_utils/jobspec_input.py: a spec name, site defaults, overrides and -e values to a JobSpec."""

import json

import pytest
from ansible.module_utils.base import redaction
from ansible.module_utils.jobspec import render
from ansible.module_utils.jobspec.model import JobSpecError

from plugin_utils import jobspec_input as ji

RC = {"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265", "shared_root": "/private"}
SECRET = "wandb-0123456789abcdef"


@pytest.fixture
def specs_dir(tmp_path):
    (tmp_path / "smoke.yaml").write_text("workload: smoke\ntimeouts:\n  pending_s: 120\n")
    (tmp_path / "other.yaml").write_text("workload: command\nentrypoint: echo hi\n")
    return str(tmp_path)


def resolve(specs_dir, extra_vars, name="smoke", **kwargs):
    return ji.resolve_job(name, ray_config=RC, specs_dir=specs_dir, extra_vars=extra_vars, **kwargs).to_dict()


def test_resolve_ignores_playbook_knobs_and_inventory_names(specs_dir):
    spec = resolve(specs_dir, {"spec": "smoke", "wait": "true", "force": True,
                               "poll_s": "5", "ansible_python_interpreter": "/usr/bin/python3",
                               "ray_python": "/opt/ray/bin/python", "ray_cleanup_legacy": "true"})
    assert spec["workload"] == "smoke" and spec["name"] == "smoke"
    assert spec["timeouts"]["pending_s"] == 120
    assert spec["output_dir"] == "/private/jobs/" + spec["submission_id"]
    assert spec["resources"]["entrypoint_resources"] == {"worker_node": 1}


def test_the_queue_fields_come_from_e_as_data(specs_dir):
    spec = resolve(specs_dir, {"spec": "smoke", "queue.priority": "high", "queue.preemptible": "true",
                               "timeouts.queue_s": "600", "submitter": "bob"})  # submitter: the action's, no field
    assert spec["queue"] == {"priority": "high", "preemptible": True} and spec["timeouts"]["queue_s"] == 600
    with pytest.raises(JobSpecError, match=r"^jobspec field 'queue.priority': must be one of low, normal, high"):
        resolve(specs_dir, {"spec": "smoke", "queue.priority": "urgent"})


def test_resolve_applies_field_overrides_with_types(specs_dir):
    spec = resolve(specs_dir, {"spec": "smoke", "save_freq": "5", "timeouts.max_run_s": "60",
                               "submission_id": "smoke-1"})
    assert spec["save_freq"] == 5  # "5" became an int
    assert spec["timeouts"] == {"pending_s": 120, "max_run_s": 60, "stall_s": None,
                                "on_stall": "report", "queue_s": None}  # the file's pending_s is kept
    assert spec["output_dir"] == "/private/jobs/smoke-1"


def test_unknown_extra_var_is_named(specs_dir):
    with pytest.raises(JobSpecError, match="'save_frq'.*did you mean 'save_freq'"):
        resolve(specs_dir, {"spec": "smoke", "save_frq": "5"})


def test_bad_value_is_one_line_naming_field(specs_dir):
    with pytest.raises(JobSpecError) as err:
        resolve(specs_dir, {"save_freq": "often"})
    # The field and what is wrong, never the value (issue 22 §1: it may be a secret in the wrong place).
    assert str(err.value) == "jobspec field 'save_freq': must be a positive integer, or -1 for no checkpoints (got a " \
                             "string)"


def test_unquoted_value_with_spaces_asks_for_quotes(specs_dir):
    # What Ansible makes of `-e entrypoint=echo hi`.
    with pytest.raises(JobSpecError) as err:
        resolve(specs_dir, {"entrypoint": "echo", "_raw_params": "hi"}, name="other")
    message = str(err.value)
    assert "\n" not in message
    assert "quote" in message and "'hi'" not in message


def test_missing_spec_lists_available_names(specs_dir):
    with pytest.raises(JobSpecError, match=r"no such spec .*\(available: other, smoke\)"):
        resolve(specs_dir, {}, name="smokey")


def test_bad_ray_config_names_the_field(specs_dir):
    with pytest.raises(JobSpecError, match="ray_config.dashboard_url"):
        ji.resolve_job("smoke", ray_config={**RC, "dashboard_url": "10.0.0.10"}, specs_dir=specs_dir)


def test_rendering_redacts_secrets_everywhere(specs_dir):
    spec = resolve(specs_dir, {"env.WANDB_API_KEY": SECRET, "env.HF_HOME": "/private/hf"})
    runtime_env = render.render_runtime_env(spec, RC)
    rendered = redaction.redact({"entrypoint": render.render_entrypoint(spec, RC), "runtime_env": runtime_env,
                                 "entrypoint_options": render.entrypoint_options(spec),
                                 "submit_cmd": render.submit_command(spec, RC, runtime_env)},
                                redaction.DEFAULT_SECRET_ENV_NAMES)
    assert SECRET not in json.dumps(rendered)
    assert rendered["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "<redacted>"
    assert rendered["runtime_env"]["env_vars"]["HF_HOME"] == "/private/hf"
    assert "<redacted>" in rendered["submit_cmd"] and "/private/hf" in rendered["submit_cmd"]
    assert rendered["submit_cmd"].startswith("ray job submit --address http://10.0.0.10:8265")
    assert rendered["entrypoint_options"] == {"entrypoint_resources": {"worker_node": 1}}
    assert rendered["entrypoint"].startswith("python -m smoke_probe")


def test_overrides_then_extra_vars_win_over_the_file_and_site_defaults(specs_dir):
    spec = resolve(specs_dir, {"save_freq": "7"}, overrides={"save_freq": 3, "timeouts.max_run_s": 60,
                                                            "overrides": ["a=1"]},
                   site_defaults={"all": {"save_freq": 2, "overrides": ["s=1"]}, "smoke": {"project_name": "site"}})
    assert spec["save_freq"] == 7 and spec["timeouts"]["max_run_s"] == 60 and spec["timeouts"]["pending_s"] == 120
    assert spec["project_name"] == "site" and spec["overrides"] == ["s=1", "a=1"]


def test_bad_site_defaults_name_the_key(specs_dir):
    with pytest.raises(JobSpecError, match="jobspec_defaults.smoke"):
        resolve(specs_dir, {}, site_defaults={"smoke": ["x"]})


@pytest.mark.parametrize(("text", "want"), [("true", True), ("false", False), ("True", True)])
def test_user_code_from_the_command_line(specs_dir, text, want):
    assert resolve(specs_dir, {"spec": "smoke", "user_code": text})["user_code"] is want


def test_user_code_rejects_other_words(specs_dir):
    with pytest.raises(JobSpecError, match=r"^jobspec field 'user_code': must be true or false"):
        resolve(specs_dir, {"spec": "smoke", "user_code": "yes"})
