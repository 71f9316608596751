"""job_preflight (roles/code_snapshot/files), the first step of a job on its worker, and the record's submit_cmd.txt
replayed under a new id: the id replaced everywhere gives the command a submission of that id renders, and its
record folder is made; only --submission-id changed is refused before anything is written."""

import json
import os
import subprocess
import sys

from ansible.module_utils.jobspec import model as jobspec
from ansible.module_utils.jobspec import render
from ray_job_harness import NOW

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "roles", "code_snapshot", "files", "job_preflight.py")


def code_snapshot(tmp_path):
    code = tmp_path / "code"
    (code / "verl" / "version").mkdir(parents=True, exist_ok=True)
    # verl's __init__ imports torch: the preflight finds it without running it (this one would fail if run).
    (code / "verl" / "__init__.py").write_text("raise SystemExit('verl was imported')\n")
    (code / "verl" / "version" / "version").write_text("0.9.1\n")
    (code / "verl_code_marker.py").write_text("CODE_ID = 'c1'\nDIGEST = 'd'\n")
    return code


def run(tmp_path, out, own_id, path=None):
    code = code_snapshot(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(path or code)}
    if own_id:  # what Ray 2.60's job supervisor gives the driver
        env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"runtime_env": {}, "metadata": {"job_submission_id": own_id,
                                                                                         "job_name": own_id}})
    return subprocess.run([sys.executable, SCRIPT, "--code-path", str(code), "--out", str(out)], env=env,
                          capture_output=True, text=True, check=False, timeout=60)


def test_a_replay_with_the_id_replaced_everywhere_makes_its_record_folder(tmp_path):
    out = tmp_path / "jobs" / "new-1" / "preflight.json"
    done = run(tmp_path, out, "new-1")
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["ok"] is True and report["verl_version"] == "0.9.1" and report["code_id"] == "c1", report
    assert report["verl_file"] == str((tmp_path / "code" / "verl" / "__init__.py").resolve())


def test_a_verl_from_elsewhere_on_the_path_fails_naming_both(tmp_path):
    other = tmp_path / "other"
    (other / "verl").mkdir(parents=True)
    (other / "verl" / "__init__.py").write_text("")
    out = tmp_path / "jobs" / "j-2" / "preflight.json"
    done = run(tmp_path, out, "j-2", path=other)
    assert done.returncode == 3
    assert f"verl was imported from {(other / 'verl' / '__init__.py').resolve()}, not from the chosen" in done.stderr
    assert json.loads(out.read_text())["verl_version"] is None


def test_no_verl_at_all_fails_in_one_line(tmp_path):
    done = run(tmp_path, tmp_path / "jobs" / "j-3" / "preflight.json", "j-3", path=tmp_path / "nothing")
    assert done.returncode == 3 and "verl is not importable" in done.stderr


def test_a_replay_with_only_the_submission_id_changed_leaves_the_other_record_alone(tmp_path):
    old = tmp_path / "jobs" / "old-1"
    old.mkdir(parents=True)
    (old / "preflight.json").write_text("{}")
    done = run(tmp_path, old / "preflight.json", "new-1")
    assert done.returncode == 4
    assert "this job runs as new-1 but its command's paths are the record of old-1" in done.stderr
    assert f"sed 's/old-1/new-1/g' {old}/config/submit_cmd.txt | bash" in done.stderr
    assert (old / "preflight.json").read_text() == "{}"


def test_the_submitted_job_and_a_run_outside_ray_write_as_before(tmp_path):
    record = tmp_path / "jobs" / "j-1"
    record.mkdir(parents=True)
    for own in ("j-1", None):
        done = run(tmp_path, record / "preflight.json", own)
        assert done.returncode == 0, done.stderr
        assert json.loads((record / "preflight.json").read_text())["ok"] is True


def test_the_id_replaced_everywhere_is_the_command_a_submission_of_that_id_renders(tmp_path):
    config = jobspec.as_ray_config({"address": "10.0.0.10:6379", "dashboard_url": "http://10.0.0.10:8265",
                                    "shared_root": str(tmp_path)})
    spec = {"workload": "grpo", "model_path": "/private/m", "train_files": "/private/t.parquet", "code_id": "c1"}

    def command(sid):
        resolved = jobspec.resolve(spec, name="grpo", ray_config=config, cli={"submission_id": sid}, now=NOW,
                                   token="abc123")
        return render.submit_command(resolved, config, render.render_runtime_env(resolved, config))

    old, new = command("grpo-old-1"), command("grpo-new-2")
    assert "grpo-old-1" in old and "job_preflight" in old
    assert old.replace("grpo-old-1", "grpo-new-2") == new
