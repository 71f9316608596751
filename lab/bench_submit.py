#!/usr/bin/env python3
"""Measure submission on the lab: submit.yml against a plain `ray job submit --no-wait`.

Prints, for each path, the seconds from start to the job being RUNNING and to the end of the
command (for submit.yml with wait=true: the playbook's end, after the job ended and its record
was finalised). Needs a running lab cluster (make lab-up && ansible-playbook up.yml).
Usage: .venv/bin/python lab/bench_submit.py [--runs N] [--verl]

--verl instead times submit.yml without wait: the smoke job (its floor), an SFT whose preflight verdict is kept
(issue 32: the same spec submitted before), and an SFT whose verdict is new (another experiment_name each run, so
the probe runs). Each SFT is stopped once measured.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

import lab  # the lab's addresses and files

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT as ROOT

from ansible.module_utils.base import ray_cluster  # isort: skip

DASHBOARD = lab.DASHBOARD_URL
TOKEN = str(lab.TOKEN_FILE)
BIN = os.path.join(ROOT, ".venv", "bin")


def watch_running(client, sid, started, seen):
    """Record when the job is first RUNNING (or ended), polling every 50 ms."""
    while "running" not in seen:
        try:
            status = ray_cluster.job_summary(client.get_job_info(sid))["status"]
        except RuntimeError:
            status = None
        if status in ("RUNNING", "SUCCEEDED", "FAILED", "STOPPED"):
            seen["running"] = time.monotonic() - started
        time.sleep(0.05)


def timed(argv, client, sid, env=None):
    seen = {}
    started = time.monotonic()
    watcher = threading.Thread(target=watch_running, args=(client, sid, started, seen), daemon=True)
    watcher.start()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    ended = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{argv[0]} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    watcher.join(timeout=120)
    return seen.get("running"), ended


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--verl", action="store_true")
    args = parser.parse_args()
    ray_cluster.prepare_client_env(TOKEN)
    client = ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN))
    if args.verl:
        return verl_rows(client, args.runs)
    python = os.path.join(ROOT, ".venv-verl", "bin", "python")
    rows = {"submit.yml -e spec=smoke -e wait=true": [], "ray job submit --no-wait (same entrypoint)": []}
    for _ in range(args.runs):
        sid = f"bench-yml-{uuid.uuid4().hex[:6]}"
        rows["submit.yml -e spec=smoke -e wait=true"].append(timed(
            [os.path.join(BIN, "ansible-playbook"), "submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}",
             "-e", "wait=true"], client, sid))
        sid = f"bench-cli-{uuid.uuid4().hex[:6]}"
        entrypoint = f"{python} -m smoke_probe --checkpoint-dir /private/jobs/{sid}/checkpoints --submission-id {sid}"
        env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=TOKEN)
        rows["ray job submit --no-wait (same entrypoint)"].append(timed(
            [os.path.join(BIN, "ray"), "job", "submit", "--address", DASHBOARD, "--submission-id", sid,
             "--entrypoint-resources", '{"worker_node": 1}',
             "--runtime-env-json", '{"env_vars": {"PYTHONPATH": "/private/common/code/smoke:/private/user/code"}}',
             "--no-wait", "--", *entrypoint.split()], client, sid, env))
    print(f"{'path':48} {'to RUNNING (s)':>16} {'to end (s)':>12}   runs={args.runs}")
    for name, values in rows.items():
        running = [r for r, _ in values if r is not None]
        print(f"{name:48} {statistics.median(running):16.2f} {statistics.median(e for _, e in values):12.2f}")


def verl_rows(client, runs):
    """submit.yml without wait: smoke (the floor), SFT with its verdict kept, SFT with a new one."""
    def submit(name, *extra):
        sid = f"bench-{name}-{uuid.uuid4().hex[:6]}"
        started = time.monotonic()
        proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "submit.yml", "-e", f"submission_id={sid}",
                               *extra], cwd=ROOT, capture_output=True, text=True, check=False)
        took = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"submit.yml {' '.join(extra)} failed: {proc.stdout[-2000:]}")
        if name != "smoke":
            client.stop_job(sid)
        return took

    submit("warm", "-e", "spec=sft")  # keeps the verdict of the spec as the kept rows submit it
    rows = {"smoke": [], "sft, verdict kept": [], "sft, new verdict": []}
    for _ in range(runs):
        rows["smoke"].append(submit("smoke", "-e", "spec=smoke"))
        rows["sft, verdict kept"].append(submit("kept", "-e", "spec=sft"))
        rows["sft, new verdict"].append(submit("new", "-e", "spec=sft",
                                               "-e", f"experiment_name=x{uuid.uuid4().hex[:8]}"))
    floor = statistics.median(rows["smoke"])
    print(f"{'submit.yml without wait':24} {'median (s)':>11} {'x smoke':>8}   runs={runs}")
    for name, values in rows.items():
        print(f"{name:24} {statistics.median(values):11.2f} {statistics.median(values) / floor:8.2f}")


if __name__ == "__main__":
    main()
