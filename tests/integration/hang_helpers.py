"""What the hang drills share (test_watcher.py, test_three_workers.py): watch.yml passes, a job's ranks, a rank stopped
once a step is saved, lines appended to a job's metrics, and the regression report over records."""

import json
import os
import subprocess
import time

from ansible.module_utils.base import ray_cluster
from conftest import BIN, DASHBOARD, HEAD, RECORDS, ROOT, TOKEN, nodes, playbook, ssh, tracked_step, wait_for
from jobs_helpers import ray_jobs, status

import lab  # isort: skip

HOSTS = {host.name: host.ip for host in lab.plan_hosts(3)}


def watch_until(predicate, timeout, what, every_s=10):
    """What the timer does, more often: watch.yml passes until predicate() holds; the passes' output."""
    deadline, outs = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        run = playbook("watch.yml")
        assert run.rc == 0, run
        outs.append(run.out)
        if predicate():
            return "\n".join(outs)
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_actors(sid):
    """The job's live TrainingWorker actors: [(host, pid)]."""
    job = ray_jobs().get(sid)
    job_id = job.job_id if job is not None else None
    if job_id is None:  # not yet listed, or its driver not yet started
        return []
    ray_cluster.prepare_client_env(TOKEN)
    by_node = {n["node_id"]: n["node_ip"] for n in nodes()}
    hosts = {host.ip: host.name for host in lab.plan_hosts(3)}  # a grown lab's third worker too
    return [(hosts[by_node[a["node_id"]]], a["pid"]) for a in ray_cluster.list_actor_summaries(DASHBOARD)
            if a["job_id"] == job_id and a["state"] == "ALIVE" and "Worker" in (a["class_name"] or "")
            and a["node_id"] in by_node]


def append_metrics(sid, *lines):
    """Lines verl's file logger never writes, at the end of the job's own metrics.jsonl. The logger writes from its
    own offset (open "wb", not append), so this waits until the file has not grown for 3 s: the logger is blocked
    (a rank is stopped) or done, and nothing it writes later lands over these lines."""
    path = os.path.join(RECORDS, sid, "metrics.jsonl")
    sizes = []

    def settled():
        sizes.append(os.path.getsize(path) if os.path.exists(path) else -1)
        return sizes[-1] > 0 and len(sizes) >= 4 and len(set(sizes[-4:])) == 1

    wait_for(settled, 600, f"{sid}'s metrics.jsonl to stop growing")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


HUGE = "9" * 400
HUGE_VALUE = '{"step": 2, "data": {"train/loss": ' + HUGE + ', "train/lr": 1e-5}}'
HUGE_STEP = '{"step": ' + HUGE + ', "data": {"train/loss": 0.5}}'


def hang_a_rank(sid):
    """SIGSTOP one rank of sid once global_step_3 is saved: a real collective hang (the other rank waits in gloo)."""
    # The ranks are found first (listing actors takes seconds, and a step on the lab less than one), so the signal
    # follows the save of step 3 by about a second.
    actors = wait_for(lambda: (found := job_actors(sid)) and len(found) >= 2 and found, 600, f"{sid}'s two ranks")
    host, pid = actors[-1]
    wait_for(lambda: tracked_step(sid) >= 3, 600, f"{sid} to save global_step_3")
    ssh(host, f"kill -STOP {pid}")
    return time.monotonic(), HOSTS[host]


def final(sid):
    try:
        return status(sid)["final"]
    except (OSError, ValueError):
        return False


def report_over(run_id, *entries):
    """ray_regression_report (the module regression.yml runs) over the records <run_id>-<entry>: its report.json."""
    args = {"run_id": run_id, "suite": "it-watcher", "started_at": int(time.time() * 1000), "shared_root": "/private",
            "entries": [{"name": name, "spec": "sft"} for name in entries]}
    proc = subprocess.run([os.path.join(BIN, "ansible"), HEAD, "-m", "ray_regression_report", "-a", json.dumps(args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(os.path.join(RECORDS, "..", "regression", run_id, "report.json"), encoding="utf-8") as handle:
        return json.load(handle)
