#!/usr/bin/env python3
"""One pass of the job watcher from the control host: watch.yml through ansible-runner, under a lock.

  .venv/bin/python scripts/watch.py                                   # the lab
  .venv/bin/python scripts/watch.py --inventory inventory/mysite
  .venv/bin/python scripts/watch.py --heal                            # and bring a dead head back (up.yml)

watch.yml makes one pass over every open job record. watch_schedule.yml runs this every few minutes
(a systemd timer, or cron). A lock keeps two passes from overlapping: a pass that finds it held says
who holds it and exits 0 (the running pass does the work). Each pass keeps ansible-runner's artifacts
(its output in artifacts/<pass>/stdout) and a line in passes.log, both under <state-dir>/watch/ and
both bounded to the newest --keep passes. Prints one line per pass (and the tail of the output when
the pass failed). Exits with the playbook's status.

With --heal, a pass that could not reach the cluster's job API (the head is down) runs up.yml once, then the pass
again: with a GCS
store the head comes back to its tables and its jobs go on (docs/fault-tolerance.md); without one, up.yml's
reconcile records what the head forgot. up.yml never restarts a healthy node while a job runs on it.
"""

import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT as ROOT
from plugin_utils import regression_run

from ansible.module_utils.jobs.record import client as jc  # isort: skip

PLAYBOOK = "watch.yml"
HEAL_PLAYBOOK = "up.yml"
TAIL_LINES = 20  # of a failed pass's output, printed for cron's log or the journal


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inventory", default=os.path.join(ROOT, "inventory", "lab"),
                        help="inventory to run against (default: the lab)")
    parser.add_argument("--keep", type=int, default=48, help="passes whose output is kept (default: 48)")
    parser.add_argument("--state-dir", default=os.path.expanduser("~/.local/state/ray-verl"),
                        help="lock file and the passes' log (default: ~/.local/state/ray-verl)")
    parser.add_argument("--heal", action="store_true",
                        help="when the pass cannot reach the head's job API, run up.yml once to bring it back")
    args = parser.parse_args(argv)
    if args.keep < 1:
        parser.error("--keep: must be at least 1")
    return args


def new_pass_id():
    return f"watch-{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}-{os.getpid()}"


def runner_kwargs(args, pass_id, playbook=PLAYBOOK):
    """ansible_runner.run's arguments for one pass: watch.yml (or up.yml, healing) from the project, its
    artifacts rotated."""
    return {"private_data_dir": os.path.join(args.state_dir, "watch"), "project_dir": ROOT, "playbook": playbook,
            "inventory": os.path.abspath(args.inventory), "ident": pass_id, "rotate_artifacts": args.keep,
            "quiet": True}


def log_pass(path, line, keep):
    """Append line to the passes' log, keeping its newest `keep` lines (written whole, then renamed)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    lines = [*lines, line][-keep:]
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


def tail(path, count):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()[-count:]
    except OSError:
        return []


def head_down(output):
    """Whether a failed pass's output says the head cannot be reached (jc.head_down, the follower's reading too)."""
    try:
        with open(output, encoding="utf-8", errors="replace") as handle:
            return jc.head_down(handle.read())
    except OSError:
        return False


def run_logged(ansible_runner, args, ident, playbook):
    """Run one playbook through ansible-runner, log a line for it in passes.log; (rc, path of its output)."""
    kwargs = runner_kwargs(args, ident, playbook)
    os.makedirs(kwargs["private_data_dir"], mode=0o700, exist_ok=True)
    started = time.monotonic()
    result = ansible_runner.run(**kwargs)
    output = os.path.join(kwargs["private_data_dir"], "artifacts", ident, "stdout")
    line = (f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%M:%SZ} {playbook} {ident}: {result.status} "
            f"(rc={result.rc}) in {time.monotonic() - started:.1f}s; output {output}")
    log_pass(os.path.join(kwargs["private_data_dir"], "passes.log"), line, args.keep)
    print(line)
    if result.rc != 0:
        print("\n".join(tail(output, TAIL_LINES)))
    return (1 if result.rc is None else result.rc), output


def main(argv=None):
    args = parse_args(argv)
    pass_id = new_pass_id()
    os.makedirs(args.state_dir, exist_ok=True)
    try:
        lock = regression_run.RunLock(os.path.join(args.state_dir, "watch.lock"), pass_id, kind="watch").acquire()
    except regression_run.LockHeld as exc:
        print(f"watch {pass_id} not started, another pass is running: {exc}")
        return 0
    try:
        import ansible_runner

        # cron and systemd start us with a bare PATH: ansible-playbook lives beside this Python.
        os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
        rc, output = run_logged(ansible_runner, args, pass_id, PLAYBOOK)
        if rc != 0 and args.heal and head_down(output):
            heal_rc, _ = run_logged(ansible_runner, args, f"{pass_id}-heal", HEAL_PLAYBOOK)
            if heal_rc != 0:
                return heal_rc
            rc, _ = run_logged(ansible_runner, args, f"{pass_id}-after-heal", PLAYBOOK)  # the pass, now it can see
        return rc
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
