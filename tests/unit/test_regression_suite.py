"""Suite files (plugin_utils/jobspec_input.py load_suite) and the runner's retention helper."""

import importlib.util
import json
import os

import pytest

from plugin_utils.jobspec_input import SuiteError, load_suite

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(tmp_path, name, text):
    (tmp_path / f"{name}.yaml").write_text(text)


def test_shipped_suites_load():
    lab = load_suite("lab", os.path.join(ROOT, "suites"))
    assert [e["name"] for e in lab] == ["smoke", "sft", "grpo", "ppo"]
    assert lab[0]["gates"] == [] and {"metric": "step", "min": 2, "at": "last"} in lab[2]["gates"]
    gpu = load_suite("gpu", os.path.join(ROOT, "suites"))
    assert [e["spec"] for e in gpu] == ["smoke", "sft", "grpo", "ppo"]
    assert gpu[2]["overrides"] == {"total_training_steps": 20}


@pytest.mark.parametrize("text,needle", [
    ("entries: []\n", "no entries"),
    ("- spec: smoke\n", "exactly one key"),
    ("entries:\n  - name: a\n", "needs name and spec"),
    ("entries:\n  - {name: a, spec: smoke, extra: 1}\n", "needs name and spec"),
    ("entries:\n  - {name: a, spec: smoke}\n  - {name: a, spec: sft}\n", "must be unique"),
    ("entries:\n  - {name: a/b, spec: smoke}\n", "must be unique"),
    ("entries:\n  - {name: a, spec: smoke, overrides: [1]}\n", "overrides must be a mapping"),
    ("entries: [\n", "invalid YAML"),
    ("entries:\n  - {name: a, spec: smoke, gates: [{metric: loss}]}\n", "entry 1 gates[0]: needs min, max or golden"),
    ("entries:\n  - {name: a, spec: smoke, gates: {metric: loss}}\n", "gates: must be a list"),
])
def test_bad_suites_fail_with_one_line(tmp_path, text, needle):
    write(tmp_path, "s", text)
    with pytest.raises(SuiteError) as err:
        load_suite("s", str(tmp_path))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_missing_suite_lists_the_others(tmp_path):
    write(tmp_path, "nightly", "entries: [{name: a, spec: smoke}]\n")
    with pytest.raises(SuiteError, match="suites: nightly"):
        load_suite("weekly", str(tmp_path))
    with pytest.raises(SuiteError, match="letters"):
        load_suite("../x", str(tmp_path))


def _runner():
    spec = importlib.util.spec_from_file_location("regression_runner", os.path.join(ROOT, "scripts", "regression.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runner_retention_keeps_newest_finished_and_never_running(tmp_path):
    runner = _runner()
    for i, name in enumerate(["r1", "r2", "r3"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"started_at": 1000 + i}))
    (tmp_path / "r0-running").mkdir()
    assert runner.old_runs(str(tmp_path), keep=1) == ["r1", "r2"]
    assert runner.old_runs(str(tmp_path), keep=5) == []
    assert runner.old_runs(str(tmp_path / "missing"), keep=1) == []
    assert runner.parse_args(["--suite", "gpu", "--keep", "3"]).keep == 3


SECRET_SUITE = ("entries:\n"
                "  - name: a\n    spec: smoke\n"
                "    overrides: {env: {WANDB_API_KEY: suite-sekrit-1234, PLAIN: keep}, env.HF_TOKEN: hf-sekrit-5678,"
                " total_training_steps: 2}\n")


def test_the_lookup_shows_entries_with_their_secrets_redacted(tmp_path):
    from ansible.plugins.loader import lookup_loader

    write(tmp_path, "s", SECRET_SUITE)
    lookup = lookup_loader.get("regression_suite")
    [entry] = lookup.run(["s"], variables={}, suites_dir=str(tmp_path))
    assert entry["overrides"] == {"env": {"WANDB_API_KEY": "<redacted>", "PLAIN": "keep"},
                                  "env.HF_TOKEN": "<redacted>", "total_training_steps": 2}
    assert "sekrit" not in json.dumps(entry)


def test_ray_job_reads_the_real_values_of_a_suite_entry_itself(tmp_path):
    from plugin_utils.jobspec_input import suite_entry

    write(tmp_path, "s", SECRET_SUITE)
    entry = suite_entry("s", "a", str(tmp_path))
    assert entry["overrides"]["env"]["WANDB_API_KEY"] == "suite-sekrit-1234"
    assert entry["overrides"]["env.HF_TOKEN"] == "hf-sekrit-5678"
    with pytest.raises(SuiteError, match="suite 's': no entry named 'b'"):
        suite_entry("s", "b", str(tmp_path))


def test_an_env_given_as_json_text_is_shown_redacted_whole(tmp_path):
    from ansible.plugins.loader import lookup_loader

    write(tmp_path, "s", "entries:\n  - name: a\n    spec: smoke\n"
                         "    overrides: {env: '{\"WANDB_API_KEY\": \"suite-sekrit-1234\"}'}\n")
    [entry] = lookup_loader.get("regression_suite").run(["s"], variables={}, suites_dir=str(tmp_path))
    assert entry["overrides"] == {"env": "<redacted>"}
