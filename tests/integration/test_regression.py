"""regression.yml, scripts/regression.py, schedule.yml and watch_schedule.yml on the lab (scheduled regressions;
issue 21: the job watcher's timer)."""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest
from conftest import RECORDS, ROOT, playbook

REPORTS = os.path.join(ROOT, ".lab", "private", "regression")
SUITE_SECRET = "suite-sekrit-3c9a1f7e"  # suites/lab-failing.yaml
RUNNER = [os.path.join(ROOT, ".venv", "bin", "python"), os.path.join(ROOT, "scripts", "regression.py")]


pytestmark = pytest.mark.usefixtures("cluster_up")


def runner(tmp_path, *args):
    proc = subprocess.run([*RUNNER, "--state-dir", str(tmp_path / "state"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800, check=False)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def report(run_id):
    with open(os.path.join(REPORTS, run_id, "report.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_failing_entry_fails_the_run_and_the_report_says_so(tmp_path):
    first = runner(tmp_path, "--suite", "lab-failing", "--run-id", "it-regr-1", "--keep", "5")
    assert first.returncode != 0
    rep = report("it-regr-1")
    assert rep["counts"] == {"total": 2, "passed": 1, "failed": 1, "regressed": 0}
    states = {e["name"]: e["state"] for e in rep["entries"]}
    assert states == {"smoke": "SUCCEEDED", "failing": "FAILED"}
    cases = ET.parse(os.path.join(REPORTS, "it-regr-1", "junit.xml")).getroot().iter("testcase")
    cases = {c.get("name"): c for c in cases}
    assert set(cases) == {"smoke", "failing"}
    assert cases["failing"].find("failure") is not None and cases["smoke"].find("failure") is None
    assert "this job fails on purpose" in cases["failing"].find("failure").text
    with open(os.path.join(REPORTS, "it-regr-1", "summary.md"), encoding="utf-8") as handle:
        summary = handle.read()
    assert "FAIL" in summary and "failing" in summary and "../../jobs/it-regr-1-smoke/" in summary
    assert os.path.isdir(os.path.join(REPORTS, "it-regr-1", "ansible-runner"))
    # The suite's secret reached the job (its runtime_env says it was set) but no output, report,
    # ansible-runner artifact (job_events) or record file.
    assert SUITE_SECRET not in first.stdout + first.stderr
    for top in (os.path.join(REPORTS, "it-regr-1"), os.path.join(RECORDS, "it-regr-1-smoke"), str(tmp_path)):
        for folder, _, files in os.walk(top):
            for name in files:
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                    assert SUITE_SECRET not in handle.read(), os.path.join(folder, name)
    with open(os.path.join(RECORDS, "it-regr-1-smoke", "config", "runtime_env.json"), encoding="utf-8") as handle:
        assert json.load(handle)["env_vars"]["WANDB_API_KEY"] == "<redacted>"

    second = runner(tmp_path, "--suite", "lab-failing", "--run-id", "it-regr-2", "--keep", "5")
    assert second.returncode != 0
    assert report("it-regr-2")["compared_with"] == "it-regr-1"
    with open(os.path.join(REPORTS, "it-regr-2", "summary.md"), encoding="utf-8") as handle:
        assert "Compared with previous runs" in handle.read()


def test_a_run_is_refused_while_another_holds_the_lock(tmp_path):
    os.makedirs(tmp_path / "state", exist_ok=True)
    lock = str(tmp_path / "state" / "regression.lock")
    code = ("import sys, time; sys.path.insert(0, '.'); from plugin_utils import regression_run; "
            f"regression_run.RunLock({lock!r}, 'held-run').acquire(); print('locked', flush=True); time.sleep(120)")
    holder = subprocess.Popen([RUNNER[0], "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = sorted(os.listdir(REPORTS)) if os.path.isdir(REPORTS) else []
        refused = runner(tmp_path, "--suite", "lab", "--run-id", "it-regr-refused")
        assert refused.returncode == 75 and "held-run" in refused.stderr
        assert (sorted(os.listdir(REPORTS)) if os.path.isdir(REPORTS) else []) == before
    finally:
        holder.kill()
        holder.wait()


def crontab():
    return subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=False).stdout


def test_schedule_installs_and_removes_idempotently():
    install = playbook("schedule.yml")
    assert install.rc == 0 and install.changed("localhost") >= 1, install
    assert "ray-verl-regression" in crontab() and "scripts/regression.py --suite lab" in crontab()
    again = playbook("schedule.yml")
    assert again.rc == 0 and again.changed("localhost") == 0, again
    remove = playbook("schedule.yml", "-e", "state=absent")
    assert remove.rc == 0 and remove.changed("localhost") == 1, remove
    assert "ray-verl-regression" not in crontab()
    again = playbook("schedule.yml", "-e", "state=absent")
    assert again.rc == 0 and again.changed("localhost") == 0, again


def test_watch_schedule_installs_and_removes_only_its_own_entry():
    """The job watcher's timer (cron here: no systemd), beside the nightly regression's, which it leaves alone."""
    assert playbook("schedule.yml").rc == 0
    try:
        install = playbook("watch_schedule.yml", "-e", "watch_schedule_every_min=10")
        assert install.rc == 0 and install.changed("localhost") == 1, install
        assert "#Ansible: ray-verl-watch\n*/10 * * * * " in crontab()
        assert "scripts/watch.py --inventory " in crontab() and "> /var/log/ray-verl-watch.log 2>&1" in crontab()
        again = playbook("watch_schedule.yml", "-e", "watch_schedule_every_min=10")
        assert again.rc == 0 and again.changed("localhost") == 0, again
        refused = playbook("watch_schedule.yml", "-e", "watch_schedule_name=ray-verl-regression", "-e", "state=absent")
        assert refused.rc != 0 and "watch_schedule_name: must start with ray-verl-watch" in refused.out, refused
        remove = playbook("watch_schedule.yml", "-e", "state=absent")
        assert remove.rc == 0 and remove.changed("localhost") == 1, remove
        assert "ray-verl-watch" not in crontab() and "#Ansible: ray-verl-regression" in crontab()
        again = playbook("watch_schedule.yml", "-e", "state=absent")
        assert again.rc == 0 and again.changed("localhost") == 0, again
    finally:
        playbook("watch_schedule.yml", "-e", "state=absent")
        playbook("schedule.yml", "-e", "state=absent")
