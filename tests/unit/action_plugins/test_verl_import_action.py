"""action_plugins/verl_import.py: import.yml's task, on the control host (no connection, no module)."""

import importlib.util
import json
import os
import types

import pytest

from plugin_utils import PROJECT_ROOT

_spec = importlib.util.spec_from_file_location("action_verl_import",
                                               os.path.join(PROJECT_ROOT, "action_plugins", "verl_import.py"))
action = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action)
SCRIPT = os.path.join(PROJECT_ROOT, "tests", "unit", "data", "verl_scripts", "two_trainers.sh")


def run(args, check_mode=False):
    task = types.SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action="verl_import")
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/tmp"))
    plugin = action.ActionModule(task, connection, types.SimpleNamespace(check_mode=check_mode), None, None, None)
    return plugin.run(task_vars={})


@pytest.fixture
def specs(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    return folder


def test_writes_the_spec_and_says_where_each_word_went(specs):
    result = run({"script": SCRIPT, "spec": "rl", "command": "2", "specs_dir": str(specs)})
    assert result["changed"] is True and result["workload"] == "grpo" and not result.get("failed")
    assert result["path"] == str(specs / "rl.yaml") and (specs / "rl.yaml").read_text().count("workload: grpo") == 1
    assert result["lines"][0] == ("line 4: trainer command 2 of 2: verl.trainer.main_ppo with "
                                  "algorithm.adv_estimator=grpo -> workload grpo")
    assert result["lines"][-1] == f"wrote {specs}/rl.yaml"


def test_check_mode_writes_nothing(specs):
    result = run({"script": SCRIPT, "spec": "rl", "command": 1, "specs_dir": str(specs)}, check_mode=True)
    assert result["changed"] is False and result["workload"] == "sft" and list(specs.iterdir()) == []
    assert result["lines"][-1] == f"check mode: {specs}/rl.yaml not written"


@pytest.mark.parametrize(("args", "msg"), [
    ({"spec": "x"}, "script: name it with -e script=PATH (a verl launch script)"),
    ({"script": SCRIPT}, "spec: name it with -e spec=NAME (the spec to write: jobspecs/NAME.yaml)"),
    ({"script": SCRIPT, "spec": "x"}, (f"{SCRIPT}: 2 trainer commands (1: line 3, verl.trainer.sft_trainer_ray; "
                                      "2: line 4, verl.trainer.main_ppo): choose one with -e command=N")),
    ({"script": SCRIPT, "spec": "x", "command": "first"},
     (f"{SCRIPT}: command: must be a number from 1 to 2 (the trainer commands: 1: line 3, "
     "verl.trainer.sft_trainer_ray; 2: line 4, verl.trainer.main_ppo)")),
])
def test_a_bad_input_is_one_line_and_writes_nothing(specs, args, msg):
    result = run({**args, "specs_dir": str(specs)})
    assert result["failed"] is True and result["msg"] == msg and list(specs.iterdir()) == []


def test_an_existing_spec_stays_unless_force(specs):
    (specs / "rl.yaml").write_text("workload: smoke\n")
    result = run({"script": SCRIPT, "spec": "rl", "command": 2, "specs_dir": str(specs)})
    assert result["msg"] == f"{specs}/rl.yaml: exists: -e force=true overwrites it"
    assert (specs / "rl.yaml").read_text() == "workload: smoke\n"
    result = run({"script": SCRIPT, "spec": "rl", "command": 2, "force": True, "specs_dir": str(specs)})
    assert result["changed"] is True and "workload: grpo" in (specs / "rl.yaml").read_text()


def test_a_scripts_secrets_reach_neither_the_spec_nor_the_tasks_result(specs):
    """A script that exports a secret, hands it to the trainer and logs in with it (issue 39)."""
    script = os.path.join(PROJECT_ROOT, "tests", "unit", "data", "verl_scripts", "secrets.sh")
    result = run({"script": script, "spec": "s", "specs_dir": str(specs)})
    assert result["changed"] is True and result["workload"] == "grpo"
    shown = json.dumps(result) + (specs / "s.yaml").read_text()
    for secret in ("wandb-secret-0123456789", "hf_secret_0123456789", "wandb-literal-0123456789",
                   "bearer-secret-0123456789"):
        assert secret not in shown
    assert "line 5: wandb: left out: not the trainer command imported, never run" in result["lines"]
