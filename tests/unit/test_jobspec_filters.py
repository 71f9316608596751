"""filter_plugins/jobspec_filters.py: -e values to a resolved JobSpec, and what would be submitted."""

import json

import jobspec_filters as jf
import pytest
from ansible import context
from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import ImmutableDict
from ansible.utils.vars import load_extra_vars

RC = {"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265", "shared_root": "/private"}
SECRET = "wandb-0123456789abcdef"


@pytest.fixture
def specs_dir(tmp_path):
    (tmp_path / "smoke.yaml").write_text("workload: smoke\ntimeouts:\n  pending_s: 120\n")
    (tmp_path / "other.yaml").write_text("workload: command\nentrypoint: echo hi\n")
    return str(tmp_path)


def resolve(specs_dir, extra_vars, **kwargs):
    return jf.jobspec_resolve("smoke", RC, specs_dir, extra_vars=extra_vars, **kwargs)


def test_resolve_ignores_playbook_knobs_and_inventory_names(specs_dir):
    spec = resolve(specs_dir, {"spec": "smoke", "wait": "true", "force": True, "id": "x", "do": "logs",
                               "tail_lines": "5", "ansible_python_interpreter": "/usr/bin/python3",
                               "ray_python": "/opt/ray/bin/python", "ray_cleanup_legacy": "true"})
    assert spec["workload"] == "smoke" and spec["name"] == "smoke"
    assert spec["timeouts"]["pending_s"] == 120
    assert spec["output_dir"] == "/private/jobs/" + spec["submission_id"]
    assert spec["resources"]["entrypoint_resources"] == {"worker_node": 1}


def test_resolve_applies_field_overrides_with_types(specs_dir):
    spec = resolve(specs_dir, {"spec": "smoke", "save_freq": "5", "timeouts.max_run_s": "60",
                               "submission_id": "smoke-1"})
    assert spec["save_freq"] == 5  # "5" became an int
    assert spec["timeouts"] == {"pending_s": 120, "max_run_s": 60}  # the file's pending_s is kept
    assert spec["output_dir"] == "/private/jobs/smoke-1"


def test_unknown_extra_var_is_named(specs_dir):
    with pytest.raises(AnsibleFilterError, match="'save_frq'.*did you mean 'save_freq'"):
        resolve(specs_dir, {"spec": "smoke", "save_frq": "5"})


def test_bad_value_is_one_line_naming_field(specs_dir):
    with pytest.raises(AnsibleFilterError) as err:
        resolve(specs_dir, {"save_freq": "often"})
    assert "'save_freq'" in str(err.value) and "'often'" in str(err.value) and "\n" not in str(err.value)


def test_unquoted_value_with_spaces_asks_for_quotes(specs_dir):
    # What Ansible makes of `-e entrypoint=echo hi`.
    with pytest.raises(AnsibleFilterError) as err:
        jf.jobspec_resolve("other", RC, specs_dir, extra_vars={"entrypoint": "echo", "_raw_params": "hi"})
    message = str(err.value)
    assert "\n" not in message
    assert "quote" in message and "'hi'" in message


def test_missing_spec_lists_available_names(specs_dir):
    with pytest.raises(AnsibleFilterError, match=r"no such spec .*\(available: other, smoke\)"):
        jf.jobspec_resolve("smokey", RC, specs_dir, extra_vars={})


def test_bad_ray_config_is_a_filter_error(specs_dir):
    with pytest.raises(AnsibleFilterError, match="ray_config.dashboard_url"):
        jf.jobspec_resolve("smoke", {**RC, "dashboard_url": "10.0.0.10"}, specs_dir, extra_vars={})


def test_render_redacts_secrets_everywhere(specs_dir):
    spec = resolve(specs_dir, {"env.WANDB_API_KEY": SECRET, "env.HF_HOME": "/private/hf"})
    rendered = jf.jobspec_render(spec, RC)
    assert SECRET not in json.dumps(rendered)
    assert rendered["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "<redacted>"
    assert rendered["runtime_env"]["env_vars"]["HF_HOME"] == "/private/hf"
    assert "<redacted>" in rendered["submit_cmd"] and "/private/hf" in rendered["submit_cmd"]
    assert rendered["submit_cmd"].startswith("ray job submit --address http://10.0.0.10:8265")
    assert rendered["entrypoint_options"] == {"entrypoint_resources": {"worker_node": 1}}
    assert rendered["entrypoint"].startswith("python -m smoke_probe")


def test_filters_are_registered():
    assert set(jf.FilterModule().filters()) == {"jobspec_resolve", "jobspec_render"}


@pytest.fixture
def cliargs(monkeypatch):
    """Set this run's -e values as ansible-playbook would; monkeypatch restores everything."""

    def set_extra_vars(*values):
        monkeypatch.setattr(context, "CLIARGS", ImmutableDict(extra_vars=values))
        # load_extra_vars caches its answer on itself for the whole run.
        monkeypatch.setattr(load_extra_vars, "extra_vars", None, raising=False)

    return set_extra_vars


def test_cli_extra_vars_parses_key_value_and_json(cliargs):
    cliargs("spec=smoke", '{"save_freq": 5}')
    assert jf.cli_extra_vars() == {"spec": "smoke", "save_freq": 5}


def test_cli_extra_vars_without_any(cliargs):
    cliargs()
    assert jf.cli_extra_vars() == {}


def test_resolve_reads_the_command_line_when_extra_vars_is_not_given(cliargs, specs_dir):
    cliargs("spec=smoke wait=true", '{"save_freq": 5, "timeouts": {"max_run_s": 30}}')
    spec = jf.jobspec_resolve("smoke", RC, specs_dir)
    assert spec["save_freq"] == 5
    assert spec["timeouts"] == {"pending_s": 120, "max_run_s": 30}


def test_resolve_reports_an_unquoted_command_line_value(cliargs, specs_dir):
    cliargs("entrypoint=echo hi")
    with pytest.raises(AnsibleFilterError, match="quote"):
        jf.jobspec_resolve("other", RC, specs_dir)
