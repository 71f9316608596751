"""scripts/watch.py: one pass of watch.yml through ansible-runner, under a lock, with a bounded log of passes."""

import itertools
import os
import sys
from types import SimpleNamespace

import ansible_runner
import pytest
import watch
import yaml
from ansible_runner.config.runner import RunnerConfig

from plugin_utils import PROJECT_ROOT, regression_run

ROOT = PROJECT_ROOT


@pytest.fixture
def pass_ids(monkeypatch):
    """Passes of one test get distinct ids (real passes are minutes and processes apart)."""
    ids = (f"watch-{n}" for n in itertools.count(1))
    monkeypatch.setattr(watch, "new_pass_id", lambda: next(ids))


@pytest.fixture
def fake_runner(monkeypatch, pass_ids):
    """ansible_runner.run replaced: records its arguments, writes the pass's output, returns rc."""
    calls = []

    def run(**kwargs):
        calls.append(kwargs)
        out = os.path.join(kwargs["private_data_dir"], "artifacts", kwargs["ident"])
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "stdout"), "w", encoding="utf-8") as handle:
            handle.write(fake.text)
        return SimpleNamespace(rc=fake.rc, status="successful" if fake.rc == 0 else "failed")

    fake = SimpleNamespace(calls=calls, rc=0, text="PLAY [Watch every open job]\nfatal: lab-head: the head is away\n")
    monkeypatch.setattr(ansible_runner, "run", run)
    return fake


def test_a_pass_runs_watch_yml_from_the_project_with_its_inventory(tmp_path, fake_runner, capsys):
    state = tmp_path / "state"
    assert watch.main(["--state-dir", str(state), "--inventory", "inventory/example", "--keep", "5"]) == 0
    [kwargs] = fake_runner.calls
    assert kwargs == {"private_data_dir": str(state / "watch"), "project_dir": ROOT, "playbook": "watch.yml",
                      "inventory": os.path.abspath("inventory/example"),
                      "ident": "watch-1", "rotate_artifacts": 5, "quiet": True}
    out = capsys.readouterr().out
    assert "watch.yml watch-1: successful (rc=0)" in out and "the head is away" not in out  # a good pass: one line
    # The lock is free again for the next pass.
    regression_run.RunLock(str(state / "watch.lock"), "next", kind="watch").acquire().release()


def test_the_command_ansible_runner_builds(tmp_path):
    """What ansible-runner makes of those arguments: ansible-playbook -i <inventory> watch.yml in the project."""
    args = watch.parse_args(["--state-dir", str(tmp_path), "--inventory", "/srv/site/inventory/mysite"])
    config = RunnerConfig(**watch.runner_kwargs(args, "watch-x"))
    config.prepare()
    assert config.command == ["ansible-playbook", "-i", "/srv/site/inventory/mysite", "watch.yml"]
    assert config.cwd == ROOT and os.path.isfile(os.path.join(ROOT, "watch_schedule.yml"))


def test_a_failed_pass_exits_with_the_playbooks_status_and_shows_its_output(tmp_path, fake_runner, capsys):
    fake_runner.rc = 2
    assert watch.main(["--state-dir", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "watch.yml watch-1: failed (rc=2)" in out and "fatal: lab-head: the head is away" in out
    assert [c["playbook"] for c in fake_runner.calls] == ["watch.yml"]  # no --heal: nothing more


def test_a_pass_that_finds_the_lock_held_exits_0_without_running(tmp_path, fake_runner, capsys):
    tmp_path.joinpath("watch.lock").touch()
    with regression_run.RunLock(str(tmp_path / "watch.lock"), "watch-running", kind="watch"):
        assert watch.main(["--state-dir", str(tmp_path)]) == 0
    assert fake_runner.calls == []
    out = capsys.readouterr().out
    assert "not started, another pass is running: watch lock" in out and "watch-running" in out
    assert not (tmp_path / "watch" / "passes.log").exists()


def test_the_log_of_passes_keeps_the_newest(tmp_path, fake_runner):
    for _ in range(5):
        watch.main(["--state-dir", str(tmp_path), "--keep", "3"])
    lines = (tmp_path / "watch" / "passes.log").read_text().splitlines()
    assert [line.split(" ")[2] for line in lines] == ["watch-3:", "watch-4:", "watch-5:"]
    assert lines[-1].endswith(f"output {tmp_path}/watch/artifacts/watch-5/stdout")
    with pytest.raises(SystemExit):
        watch.parse_args(["--keep", "0"])


def test_real_passes_keep_the_newest_outputs(tmp_path, monkeypatch, pass_ids):
    """ansible-runner itself, on a one-task playbook: each pass's output on disk, only the newest --keep of them."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "watch.yml").write_text(yaml.safe_dump([{
        "name": "A pass", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Say", "ansible.builtin.debug": {"msg": "a watcher pass"}}]}]))
    (project / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    monkeypatch.setattr(watch, "ROOT", str(project))
    argv = ["--state-dir", str(tmp_path / "state"), "--inventory", str(project / "hosts.yml"), "--keep", "2"]
    assert [watch.main(argv) for _ in range(3)] == [0, 0, 0]
    artifacts = tmp_path / "state" / "watch" / "artifacts"
    assert sorted(os.listdir(artifacts)) == ["watch-2", "watch-3"]
    assert "a watcher pass" in (artifacts / "watch-3" / "stdout").read_text()
    assert len((tmp_path / "state" / "watch" / "passes.log").read_text().splitlines()) == 2


@pytest.mark.parametrize("text, healed", [
    ("fatal: [lab-head]: FAILED! => msg: cannot talk to Ray's job API at http://10.0.0.10:8265: ConnectionError\n",
     True),
    ("fatal: [lab-head]: FAILED! => msg: Ray at http://10.0.0.10:8265 refused the token\n", False),
])
def test_heal_runs_up_yml_once_only_when_the_head_did_not_answer(tmp_path, fake_runner, capsys, text, healed):
    fake_runner.rc, fake_runner.text = 2, text
    assert watch.main(["--state-dir", str(tmp_path), "--heal"]) == 2
    assert [c["playbook"] for c in fake_runner.calls] == (["watch.yml", "up.yml"] if healed else ["watch.yml"])
    if healed:  # up.yml failed too (the fake fails every run): no second pass
        assert fake_runner.calls[1]["ident"] == "watch-1-heal"
        assert "up.yml watch-1-heal: failed (rc=2)" in capsys.readouterr().out


def test_a_healed_head_gets_the_pass_again(tmp_path, fake_runner, monkeypatch):
    fake_runner.rc, fake_runner.text = 2, "msg: cannot talk to Ray's job API at http://10.0.0.10:8265\n"
    real_run = ansible_runner.run
    results = iter([2, 0, 0])

    def run(**kwargs):
        fake_runner.rc = next(results)
        return real_run(**kwargs)

    monkeypatch.setattr(ansible_runner, "run", run)
    assert watch.main(["--state-dir", str(tmp_path), "--heal"]) == 0
    assert [(c["playbook"], c["ident"]) for c in fake_runner.calls] == [
        ("watch.yml", "watch-1"), ("up.yml", "watch-1-heal"), ("watch.yml", "watch-1-after-heal")]
