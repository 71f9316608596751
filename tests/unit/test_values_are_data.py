"""Issue 10 §1: values from -e, spec files and suites are data, never Jinja templates.

Ansible's own load_extra_vars parses the command line here (as in a real run); the action resolves the spec and
the real module renders it on a fake Ray. What --check shows and what is submitted must be the same bytes.
"""

import json
import os

import pytest
from ansible import context
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.utils.vars import load_extra_vars
from ray_job_harness import action, make_action, module_result

from plugin_utils import jobspec_input

AWK = "awk '{ print $1 }' /etc/hostname && echo '{{ not a template }}' '{% raw %}' \"${HOME}\""


@pytest.fixture
def specs_dir(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "smoke.yaml").write_text("workload: smoke\n")
    (specs / "cmd.yaml").write_text("workload: command\nentrypoint: " + json.dumps(AWK) + "\n")
    return str(specs)


def command_line(monkeypatch, *pairs):
    """Make Ansible's load_extra_vars read these -e arguments, as ansible-playbook would hand them over."""
    monkeypatch.setattr(context, "CLIARGS", ImmutableDict(extra_vars=tuple(pairs)))
    monkeypatch.setattr(load_extra_vars, "extra_vars", None, raising=False)  # Ansible keeps the first parse
    monkeypatch.setattr(action, "load_extra_vars", load_extra_vars)
    monkeypatch.setattr(action.display, "display", lambda line: None)  # --check's lines; the results carry them


def run_action(ray_config, specs_dir, check_mode, capsys):
    sent = []

    def executor(module_name, module_args, task_vars):
        sent.append(module_args)
        args = {k: v for k, v in module_args.items() if k != "token_path"}
        if check_mode:
            args["_ansible_check_mode"] = True
        return module_result(capsys, **args)

    inventory = {"ray_config": ray_config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python"}
    plugin = make_action({"extra_vars": True, "specs_dir": specs_dir}, inventory, executor, check_mode=check_mode)
    plugin._loader = DataLoader()  # reads -e @file as ansible-playbook does (trusted as a template there)
    return plugin.run(task_vars={}), sent


def test_a_lookup_in_an_env_value_stays_a_string(ray, ray_config, specs_dir, capsys, monkeypatch):
    command_line(monkeypatch, "spec=smoke", "submission_id=data-1", 'env.FOO={{ lookup("pipe","id") }}')
    result, sent = run_action(ray_config, specs_dir, False, capsys)
    assert not result.get("failed"), result.get("msg")
    assert sent[0]["spec"]["env"]["FOO"] == '{{ lookup("pipe","id") }}'
    [call] = ray.submitted
    assert call["runtime_env"]["env_vars"]["FOO"] == '{{ lookup("pipe","id") }}'
    assert "uid=" not in json.dumps(call)


def test_arithmetic_in_metadata_stays_a_string(ray, ray_config, specs_dir, capsys, monkeypatch):
    command_line(monkeypatch, "spec=smoke", "submission_id=data-2", "metadata.t={{ 6*7 }}")
    result, sent = run_action(ray_config, specs_dir, False, capsys)
    assert not result.get("failed"), result.get("msg")
    assert sent[0]["spec"]["metadata"] == {"t": "{{ 6*7 }}"}
    assert ray.submitted[0]["metadata"] == {"t": "{{ 6*7 }}"}


@pytest.mark.parametrize("source", ["spec file", "-e"])
def test_an_entrypoint_with_braces_is_submitted_as_checked(source, ray, ray_config, specs_dir, capsys,
                                                           monkeypatch):
    pairs = ["spec=cmd", "submission_id=awk-1"]
    if source == "-e":
        pairs.append("entrypoint=" + json.dumps(AWK))  # -e 'entrypoint="..."', the way a value with spaces is given
    command_line(monkeypatch, *pairs)
    checked, _ = run_action(ray_config, specs_dir, True, capsys)
    assert not checked.get("failed"), checked.get("msg")
    assert ray.submitted == [] and not os.path.exists(os.path.join(ray_config["shared_root"], "jobs", "awk-1"))
    submitted, _ = run_action(ray_config, specs_dir, False, capsys)
    [call] = ray.submitted
    assert call["entrypoint"] == AWK
    assert checked["entrypoint"].encode() == submitted["entrypoint"].encode() == AWK.encode()
    assert checked["submit_cmd"] == submitted["submit_cmd"]
    with open(os.path.join(ray_config["shared_root"], "jobs", "awk-1", "config", "submit_cmd.txt"), "rb") as handle:
        assert handle.read().rstrip(b"\n") == checked["submit_cmd"].encode()


def test_a_suite_override_with_braces_stays_literal(specs_dir, ray_config):
    spec = jobspec_input.resolve_job("smoke", ray_config=ray_config, specs_dir=specs_dir,
                                     overrides={"env.X": "{{ 1 + 1 }}", "metadata.y": "{% if 1 %}x{% endif %}"})
    assert spec.env == {"X": "{{ 1 + 1 }}"} and spec.metadata == {"y": "{% if 1 %}x{% endif %}"}


def test_a_vars_file_given_with_at_stays_literal(ray, ray_config, specs_dir, capsys, monkeypatch, tmp_path):
    """-e @file is loaded trusted as a template by Ansible; the action's JSON round trip makes it data again."""
    vars_file = tmp_path / "vars.yml"
    vars_file.write_text("spec: smoke\nsubmission_id: data-3\nenv.FOO: \"{{ lookup('pipe', 'id') }}\"\n"
                         "metadata.t: \"{{ 6*7 }}\"\n")
    command_line(monkeypatch, f"@{vars_file}")
    result, sent = run_action(ray_config, specs_dir, False, capsys)
    assert not result.get("failed"), result.get("msg")
    assert sent[0]["spec"]["env"]["FOO"] == "{{ lookup('pipe', 'id') }}"
    assert sent[0]["spec"]["metadata"]["t"] == "{{ 6*7 }}"
    assert ray.submitted[0]["runtime_env"]["env_vars"]["FOO"] == "{{ lookup('pipe', 'id') }}"
