"""Suite files (plugin_utils/jobspec_input.py load_suite) and the runner's (scripts/regression.py) helpers. The
regression_suite lookup, which shows a suite's entries, is tested in tests/unit/lookup_plugins/."""

import json
import os
import sys

import ansible_runner
import pytest
import regression as runner
import yaml
from suite_files import SECRET_SUITE, write

from plugin_utils import PROJECT_ROOT
from plugin_utils.jobspec_input import SuiteError, load_suite

ROOT = PROJECT_ROOT


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
    ("entries:\n  - {name: a, spec: smoke, extra: 1}\n", "unknown key 'extra'"),
    ("entries:\n  - {name: a, spec: smoke, overides: {env: {X: sekrit-value}}}\n", "did you mean 'overrides'?"),
    ("entries:\n  - {name: a, spec: smoke, overrides: {evn: {X: sekrit-value}}}\n", "did you mean 'env'?"),
    ("entries:\n  - {name: a, spec: smoke}\n  - {name: a, spec: sft}\n", "must be unique"),
    ("entries:\n  - {name: a/b, spec: smoke}\n", "name must be 1-100 letters"),
    ("entries:\n  - {name: sekrit-value, spec: smoke}\n  - {name: sekrit-value, spec: sft}\n", "entry 1 has it too"),
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
    assert "sekrit" not in str(err.value)  # a message names keys, never a value (issue 22 §1)


def test_missing_suite_lists_the_others(tmp_path):
    write(tmp_path, "nightly", "entries: [{name: a, spec: smoke}]\n")
    with pytest.raises(SuiteError, match="suites: nightly"):
        load_suite("weekly", str(tmp_path))
    with pytest.raises(SuiteError, match="letters"):
        load_suite("../x", str(tmp_path))


def test_runner_retention_keeps_newest_finished_and_never_running(tmp_path):
    for i, name in enumerate(["r1", "r2", "r3"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({"started_at": 1000 + i}))
    (tmp_path / "r0-running").mkdir()
    assert runner.old_runs(str(tmp_path), keep=1) == ["r1", "r2"]
    assert runner.old_runs(str(tmp_path), keep=5) == []
    assert runner.old_runs(str(tmp_path / "missing"), keep=1) == []
    assert runner.parse_args(["--suite", "gpu", "--keep", "3"]).keep == 3
    # No cluster address by default: the run says which cluster it used (below).
    assert runner.parse_args([]).dashboard_url is None and runner.parse_args([]).token_file is None


def test_ray_job_reads_the_real_values_of_a_suite_entry_itself(tmp_path):
    from plugin_utils.jobspec_input import suite_entry

    write(tmp_path, "s", SECRET_SUITE)
    entry = suite_entry("s", "a", str(tmp_path))
    assert entry["overrides"]["env"]["WANDB_API_KEY"] == "suite-sekrit-1234"
    assert entry["overrides"]["env.HF_TOKEN"] == "hf-sekrit-5678"
    with pytest.raises(SuiteError, match=r"suite 's': no entry of that name \(entries: a\)"):
        suite_entry("s", "b", str(tmp_path))


def test_runner_learns_the_cluster_from_the_run_even_when_it_fails(tmp_path, monkeypatch):
    """regression.yml names its cluster with set_stats; ansible-runner hands it to the runner (no lab address)."""
    with open(os.path.join(ROOT, "playbooks", "regression.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)[0]["tasks"]
    named = tasks[0]["ansible.builtin.set_stats"]["data"]["regression_cluster"]
    assert named == {"dashboard_url": "{{ ray_dashboard_url }}", "token_file": "{{ ray_auth_control_token_path }}"}
    project, private = tmp_path / "project", tmp_path / "private"
    project.mkdir()
    private.mkdir()
    (project / "p.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [tasks[0], {"ansible.builtin.fail": {"msg": "an entry failed"}}]}]))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    result = ansible_runner.run(private_data_dir=str(private), project_dir=str(project), playbook="p.yml",
                                quiet=True, extravars={"ray_dashboard_url": "http://192.0.2.10:8265",
                                                       "ray_auth_control_token_path": "/srv/site/.secrets/t"})
    assert result.rc != 0
    assert runner.run_cluster(result.events) == {"dashboard_url": "http://192.0.2.10:8265",
                                                 "token_file": "/srv/site/.secrets/t"}
    assert runner.run_cluster([]) == {}
    assert runner.delete_ray_jobs(["old"], None, "/srv/site/.secrets/t") == 0  # no cluster named: nothing asked
