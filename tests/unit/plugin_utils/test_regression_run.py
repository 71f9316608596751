"""plugin_utils/regression_run.py: the regression runner's retention and its lock."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plugin_utils import PROJECT_ROOT
from plugin_utils import regression_run as run

ROOT = PROJECT_ROOT


# retention

def test_retention_keeps_newest_finished_and_never_deletes_unfinished():
    runs = [("r1", 100, True), ("r2", 400, True), ("r3", 200, True), ("live", 50, False),
            ("r4", 300, True), ("crashed", None, False)]
    assert run.retention(runs, keep=2) == ["r1", "r3"]
    assert run.retention(runs, keep=0) == ["r1", "r3", "r4", "r2"]
    assert run.retention(runs, keep=10) == []
    with pytest.raises(ValueError):
        run.retention(runs, keep=-1)


# RunLock

def test_second_acquire_in_same_process_names_first_holder(tmp_path):
    path = str(tmp_path / "regression.lock")
    with run.RunLock(path, "run-A"):
        holder = json.loads(Path(path).read_text())
        assert holder["run_id"] == "run-A" and holder["pid"] == os.getpid()
        with pytest.raises(run.LockHeld) as info:
            run.RunLock(path, "run-B").acquire()
        assert "run-A" in str(info.value) and str(os.getpid()) in str(info.value)
        assert info.value.holder["run_id"] == "run-A"
    # Released: the next runner gets it.
    with run.RunLock(path, "run-B"):
        assert json.loads(Path(path).read_text())["run_id"] == "run-B"


CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])  # the project root, as the bootstrap puts it
from plugin_utils import regression_run as run
run.RunLock(sys.argv[2], "child-run").acquire()
print("locked", flush=True)
time.sleep(60)
"""


def test_lock_held_by_child_is_reported_and_freed_when_it_dies(tmp_path):
    path = str(tmp_path / "regression.lock")
    child = subprocess.Popen([sys.executable, "-c", CHILD, ROOT, path], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(run.LockHeld) as info:
            run.RunLock(path, "parent-run").acquire()
        assert f"pid {child.pid}" in str(info.value) and "child-run" in str(info.value)
    finally:
        child.kill()
        child.wait(timeout=10)
        child.stdout.close()
    # The kernel dropped the dead child's lock; its holder info is still there but stale.
    with run.RunLock(path, "parent-run"):
        assert json.loads(Path(path).read_text())["run_id"] == "parent-run"


def test_the_lock_says_which_runner_holds_it(tmp_path):
    """The job watcher's passes take the same lock under their own name (scripts/watch.py)."""
    path = str(tmp_path / "watch.lock")
    with run.RunLock(path, "watch-1", kind="watch"):
        with pytest.raises(run.LockHeld) as info:
            run.RunLock(path, "watch-2", kind="watch").acquire()
        assert str(info.value).startswith(f"watch lock {path} is held by pid {os.getpid()}")
        assert "run watch-1" in str(info.value)
