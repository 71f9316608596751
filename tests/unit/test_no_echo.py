"""Issue 22 §1: errors and reports never echo a value that may be secret; one broader rule for secret env names.

A message names the field and says what is wrong with it (a misspelled NAME still gets its "did you mean"); the value
is never repeated: it may be a secret put in the wrong place, and the message ends in task output, report.json,
summary.md, junit.xml and the runner's artifacts.
"""

import json
import os

import pytest
import ray_regression_report
from ansible.module_utils.base import redaction
from ansible.module_utils.jobspec.fields import JobSpecError
from ansible.module_utils.regression import gates as regression_gates
from ansible.module_utils.testing import patch_module_args
from ray_job_harness import action, make_action

from plugin_utils import jobspec_input

SECRET = "sk-live-0123456789abcdef"


@pytest.fixture
def specs_dir(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "smoke.yaml").write_text("workload: smoke\n")
    return str(specs)


def refused(specs_dir, ray_config, **kwargs):
    with pytest.raises(JobSpecError) as err:
        jobspec_input.resolve_job("smoke", ray_config=ray_config, specs_dir=specs_dir, **kwargs)
    message = str(err.value)
    assert SECRET not in message and "\n" not in message
    return message


# A secret in a misspelled field's value, wherever the field is written.
MISSPELLED = [
    ({"extra_vars": {"evn": {"WANDB_API_KEY": SECRET}}}, "jobspec field 'evn': unknown field (did you mean 'env'?)"),
    ({"extra_vars": {"evn.WANDB_API_KEY": SECRET}}, "jobspec field 'evn': unknown field (did you mean 'env'?)"),
    ({"extra_vars": {"resources.nnode": SECRET}}, "jobspec field 'resources.nnode': unknown field (did you mean"),
    ({"overrides": {"metdata": {"token": SECRET}}},
     "jobspec field 'metdata': unknown field (did you mean 'metadata'?)"),
    ({"site_defaults": {"all": {"evn": {"HF_TOKEN": SECRET}}}},
     "jobspec field 'evn': unknown field (did you mean 'env'?)"),
]


@pytest.mark.parametrize(("kwargs", "start"), MISSPELLED)
def test_a_secret_in_a_misspelled_fields_value_is_never_printed(kwargs, start, specs_dir, ray_config):
    assert refused(specs_dir, ray_config, **kwargs).startswith(start)


def test_a_misspelled_field_in_a_spec_file_names_the_field_only(specs_dir, ray_config):
    with open(os.path.join(specs_dir, "smoke.yaml"), "a") as handle:
        handle.write(f"evn:\n  WANDB_API_KEY: {SECRET}\n")
    assert "did you mean 'env'?" in refused(specs_dir, ray_config)


# A value of the wrong type: the field and what it must be, and the kind it got, never the value.
WRONG_TYPE = [
    ({"overrides": {"env": {"DB_PASSWORD": 20240917}}}, "env.DB_PASSWORD", "must be a string (got an integer)",
     "20240917"),
    ({"overrides": {"env": {"API_PIN": 3.25}}}, "env.API_PIN", "(got a number)", "3.25"),
    ({"overrides": {"env": {"FLAG": ["x", SECRET]}}}, "env.FLAG", "(got a list)", SECRET),
    ({"extra_vars": {"env": f'{{"A": "{SECRET}"'}}, "env", "must be JSON text of a mapping", SECRET),
    ({"extra_vars": {"save_freq": SECRET}}, "save_freq",
     "must be a positive integer, or -1 for no checkpoints (got a string)", SECRET),
    ({"extra_vars": {"metadata.note": "a\x00" + SECRET}}, "metadata.note", "NUL", SECRET),
    ({"extra_vars": {"submission_id": SECRET + "/x"}}, "submission_id", "must be 1-128", SECRET),
]


@pytest.mark.parametrize(("kwargs", "field", "problem", "value"), WRONG_TYPE)
def test_a_wrong_typed_value_is_not_quoted(kwargs, field, problem, value, specs_dir, ray_config):
    message = refused(specs_dir, ray_config, **kwargs)
    assert message.startswith(f"jobspec field '{field}': ") and problem in message
    assert value not in message


def test_the_action_refuses_a_misspelled_secret_without_printing_it(specs_dir, ray_config, ray, monkeypatch):
    monkeypatch.setattr(action, "load_extra_vars", lambda loader: {"spec": "smoke", "evn": {"WANDB_API_KEY": SECRET}})
    inventory = {"ray_config": ray_config, "ray_auth_enabled": True, "ray_auth_token_path": "/etc/ray-verl/ray_token",
                 "ray_python": "/opt/ray/bin/python"}
    plugin = make_action({"extra_vars": True, "specs_dir": specs_dir}, inventory,
                         lambda **kw: pytest.fail("the module must not run"))
    result = plugin.run(task_vars={})
    assert result["failed"] and "did you mean 'env'?" in result["msg"]
    assert SECRET not in json.dumps(result, default=str)


# Suite files: a misspelled key names the key, never the entry; gates never repeat their values.
SUITES = [
    f"entries:\n  - {{name: a, spec: smoke, overides: {{env: {{HF_TOKEN: {SECRET}}}}}}}\n",
    f"entries:\n  - {{nme: a, spec: smoke, overrides: {{env: {{HF_TOKEN: {SECRET}}}}}}}\n",
    f"entries:\n  - [{SECRET}]\n",
    (f"entries:\n  - {{name: a, spec: smoke, overrides: {{env: {{HF_TOKEN: x}}}}, "
     f"gates: [{{metric: loss, max: {SECRET}}}]}}\n"),
    f"entries:\n  - {{name: a, spec: smoke, gates: [{{metric: loss, at: {SECRET}, max: 1}}]}}\n",
    f"entries:\n  - {{name: a, spec: smoke, gates: {SECRET}}}\n",
    f"entries:\n  - {{name: a, spec: smoke, gates: [{SECRET}]}}\n",
    f"entries:\n  - {{name: '{SECRET} x', spec: smoke}}\n",
]


@pytest.mark.parametrize("text", SUITES)
def test_a_bad_suite_entry_is_refused_without_its_values(text, tmp_path):
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(jobspec_input.SuiteError) as err:
        jobspec_input.load_suite("s", str(tmp_path))
    assert SECRET not in str(err.value) and "\n" not in str(err.value)


def test_a_misspelled_suite_key_keeps_its_hint(tmp_path):
    (tmp_path / "s.yaml").write_text(SUITES[0])
    with pytest.raises(jobspec_input.SuiteError, match=r"unknown key 'overides' \(did you mean 'overrides'\?\)"):
        jobspec_input.load_suite("s", str(tmp_path))


def test_gate_errors_name_the_key_not_the_value():
    for gates in ([{"metric": "loss", "min": 5, "max": 1}], [{"metric": "loss", "max": SECRET}]):
        with pytest.raises(regression_gates.GateError) as err:
            regression_gates.check_gates(gates)
        assert SECRET not in str(err.value) and "5" not in str(err.value)


def test_a_wrong_typed_env_value_never_reaches_the_report(tmp_path, specs_dir, ray_config, capsys):
    """The suite's `DB_PASSWORD: 20240917` (unquoted: an int): the submit's error goes into report.json, summary.md
    and junit.xml, the value nowhere."""
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "s.yaml").write_text("entries:\n  - {name: e, spec: smoke, "
                                                "overrides: {env: {DB_PASSWORD: 20240917}}}\n")
    entry = jobspec_input.suite_entry("s", "e", str(tmp_path / "suites"))
    with pytest.raises(JobSpecError) as err:
        jobspec_input.resolve_job("smoke", ray_config=ray_config, specs_dir=specs_dir, overrides=entry["overrides"])
    args = {"run_id": "run", "suite": "s", "started_at": 1, "shared_root": str(tmp_path),
            "entries": [{"name": "e", "spec": "smoke"}], "errors": {"e": str(err.value)}}
    with patch_module_args(args), pytest.raises(SystemExit):
        ray_regression_report.main()
    out = capsys.readouterr().out
    run_dir = tmp_path / "regression" / "run"
    written = {name: (run_dir / name).read_text() for name in ("report.json", "summary.md", "junit.xml")}
    assert "jobspec field 'env.DB_PASSWORD'" in written["summary.md"]
    assert "must be a string (got an integer)" in written["junit.xml"]
    for text in (out, *written.values()):
        assert "20240917" not in text


# One broader rule for secret names (redaction.is_secret_name), wherever the present one applied.
NEWLY_SECRET = ["HF_TOKEN_RW", "GITHUB_TOKEN_2", "OPENAI_APIKEY", "MY_SECRET_VALUE", "PRIVATE_KEY_PEM",
                "DB_CREDENTIAL", "SESSION_COOKIE", "API_KEY_2", "GITHUB_TOKEN2", "hfToken", "DB_PASS", "MYSQLPASSWORD",
                "AZURE_STORAGE_ACCESS_KEY_1", "X_PASSWDS", "SECRETS_FILE"]
STILL_PLAIN = ["TOKENIZERS_PARALLELISM", "KEYRING_BACKEND", "KEY_FILE", "PASSENGER_ROOT", "PWD", "MONKEY_PATCH",
               "SECRETARY", "WANDB_PROJECT", "HF_HUB_OFFLINE", "PATIENCE"]


@pytest.mark.parametrize("name", NEWLY_SECRET)
def test_each_secret_name_is_redacted(name):
    assert redaction.is_secret_name(name)
    value = f"value-of-{name}-1234"
    hidden = redaction.redact({"env": {name: value}, "cmd": f"run --key {value}"}, redaction.secret_names())
    assert hidden == {"env": {name: redaction.REDACTED}, "cmd": f"run --key {redaction.REDACTED}"}
    shown = jobspec_input.shown_entries([{"name": "a", "spec": "s", "overrides": {f"env.{name}": value}}],
                                        redaction.secret_names())
    assert value not in json.dumps(shown)


@pytest.mark.parametrize("name", STILL_PLAIN)
def test_ordinary_names_stay_plain(name):
    assert not redaction.is_secret_name(name)


def test_a_site_name_is_secret_in_any_case():
    assert redaction.is_secret_name("site_code", redaction.secret_names(None, ["SITE_CODE"]))
