"""roles/regression_schedule: schedule.yml and watch_schedule.yml as users type them, on a stand-in crontab.

The cron backend is forced (a machine with systemd would pick a timer) and `crontab` on PATH is a script
that keeps the table in a temporary file, so the machine's own crontab is never read or written. The
cron package is taken as installed (--skip-tags regression_schedule_packages).
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from plugin_utils import PROJECT_ROOT

ROOT = PROJECT_ROOT
BIN = os.path.dirname(sys.executable)
FAKE_CRONTAB = """#!/bin/sh
# crontab -l prints the table, crontab FILE replaces it: all the cron module uses.
if [ "$1" = "-l" ]; then
  [ -f "$FAKE_CRONTAB_FILE" ] || { echo "no crontab for $(id -un)" >&2; exit 1; }
  exec cat "$FAKE_CRONTAB_FILE"
fi
exec cp "$1" "$FAKE_CRONTAB_FILE"
"""
FOREIGN = "17 4 * * * /usr/local/bin/backup-home\n"  # someone else's entry: never touched


@pytest.fixture
def play(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "crontab").write_text(FAKE_CRONTAB)
    (bin_dir / "crontab").chmod(0o755)
    table = tmp_path / "crontab"
    table.write_text(FOREIGN)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_STDOUT_CALLBACK="default", FAKE_CRONTAB_FILE=str(table),
               PATH=os.pathsep.join([str(bin_dir), BIN, os.environ.get("PATH", "/usr/bin:/bin")]))

    def run(playbook, *extra):
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), playbook,
                               "--skip-tags", "regression_schedule_packages", *extra],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
        recap = re.search(r"^localhost\s+:.*changed=(\d+)", proc.stdout, re.MULTILINE)
        return proc.returncode, int(recap.group(1)) if recap else None, proc.stdout + proc.stderr

    run.table = lambda: table.read_text()
    return run


def real_crontab():
    """The machine's own table (read only), which the tests must leave as it was."""
    if not shutil.which("crontab"):
        return None
    proc = subprocess.run(["crontab", "-l"], capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout


def test_the_watcher_installs_changes_and_removes_only_its_own_entry(play):
    before = real_crontab()
    regression = play("schedule.yml", "-e", "regression_schedule_backend=cron")
    assert regression[0] == 0, regression[2]
    nightly = play.table()
    assert "#Ansible: ray-verl-regression\n30 2 * * * " in nightly

    rc, changed, out = play("watch_schedule.yml", "-e", "watch_schedule_backend=cron",
                            "-e", "watch_schedule_every_min=10")
    assert (rc, changed) == (0, 1), out
    watch_line = (f"#Ansible: ray-verl-watch\n*/10 * * * * {ROOT}/.venv/bin/python {ROOT}/scripts/watch.py "
                  f"--inventory {ROOT}/inventory/lab --keep 48 --heal > /var/log/ray-verl-watch.log 2>&1\n")
    assert play.table() == nightly + watch_line
    assert play("watch_schedule.yml", "-e", "watch_schedule_backend=cron", "-e", "watch_schedule_every_min=10")[:2] \
        == (0, 0)
    # A new interval rewrites the one entry.
    rc, changed, out = play("watch_schedule.yml", "-e", "watch_schedule_backend=cron")
    assert (rc, changed) == (0, 1), out
    assert play.table() == nightly + watch_line.replace("*/10 ", "*/5 ")

    rc, changed, out = play("watch_schedule.yml", "-e", "watch_schedule_backend=cron", "-e", "state=absent")
    assert (rc, changed) == (0, 1), out
    assert play.table() == nightly  # the regression's entry and the foreign one stay
    assert play("watch_schedule.yml", "-e", "watch_schedule_backend=cron", "-e", "state=absent")[:2] == (0, 0)
    assert play("schedule.yml", "-e", "regression_schedule_backend=cron", "-e", "state=absent")[:2] == (0, 1)
    assert play.table() == FOREIGN
    assert real_crontab() == before


@pytest.mark.parametrize("extra,field", [
    (["-e", "watch_schedule_every_min=7"], "watch_schedule_every_min"),
    (["-e", '{"watch_schedule_every_min": "5\\n* * * * * root id"}'], "watch_schedule_every_min"),
    (["-e", "watch_schedule_name=cron", "-e", "state=absent"], "watch_schedule_name"),
    (["-e", "watch_schedule_name=ray-verl-regression", "-e", "state=absent"], "watch_schedule_name"),
    (["-e", "watch_schedule_inventory=inventory/mysite"], "watch_schedule_inventory"),
])
def test_a_bad_setting_stops_before_anything_changes(play, extra, field):
    rc, changed, out = play("watch_schedule.yml", "-e", "watch_schedule_backend=cron", *extra)
    assert rc != 0 and changed == 0, out
    assert f"{field}: must" in out and "root id" not in out
    assert play.table() == FOREIGN
