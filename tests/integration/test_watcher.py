"""Nobody has to watch (issue 21): watch.yml, one pass over every open record (a timer runs it), finds a hung verl
job, takes the stacks of its ranks, stops it and resumes it from its newest whole checkpoint; a job that is merely
slow is never called hung; a deadline passes on a job nobody follows and the watcher alone enforces it.

One engine (issue 31): submit.yml -e wait=true alone does what the watcher does for a hung job (the same step and
retry rule), job.yml -e do=wait on a job the watcher retried follows its newest attempt, and a metrics.jsonl line
holding a 400-digit number (a value, then a step) costs nothing but that line."""

import json
import os
import subprocess
import threading
import time

import pytest
from ansible.module_utils.base import ray_cluster
from conftest import (
    BIN,
    DASHBOARD,
    HEAD,
    IPS,
    RECORDS,
    ROOT,
    TOKEN,
    new_id,
    nodes,
    playbook,
    ssh,
    tracked_step,
    wait_for,
)
from jobs_helpers import ray_jobs, status

pytestmark = pytest.mark.usefixtures("cluster_up")

STALL_S = 40
# Two ranks, one on each worker, talking through gloo; a checkpoint per step, so the retry resumes close by. A rank is
# stopped once step 3 is saved (on the lab some 8 more pass before the signal lands): 30 steps leave the hang room.
SFT2 = ["-e", "spec=sft", "-e", "resources.nnodes=2", "-e", "save_freq=1", "-e", "total_training_steps=30",
        "-e", f"timeouts.stall_s={STALL_S}", "-e", "retries.max=1", "-e", "retries.on=hung"]


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
    hosts = {ip: host for host, ip in IPS.items()}
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
    return time.monotonic(), IPS[host]


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


def test_a_hung_rank_is_found_explained_and_the_job_resumed():
    run_id = new_id("wr")
    sid = f"{run_id}-hang"  # a regression entry's record name, so the report below reads it
    assert playbook("submit.yml", *SFT2, "-e", f"submission_id={sid}").rc == 0
    stopped_at, stopped_ip = hang_a_rank(sid)
    append_metrics(sid, HUGE_VALUE)  # the passes below read it: each must still exit 0 and judge the job
    out = watch_until(lambda: final(sid), STALL_S + 300, f"{sid} found hung and stopped")
    detected_s = time.monotonic() - stopped_at
    st = status(sid)
    assert st["state"] == "FAILED" and st["reason"] == "HUNG" and st["diagnosis"]["kind"] == "hung", st
    stall = st["stall"]
    assert stall["action"] == "stop" and stall["limit_s"] == STALL_S and stall["stacks"], stall
    stacks_dir = os.path.join(RECORDS, sid, stall["stacks"])
    dumped = sorted(os.listdir(stacks_dir))
    assert len(dumped) >= 2, dumped
    assert st["diagnosis"]["evidence"]["line"] == stall["summary"] and "no stacks" not in stall["summary"], stall
    # Issue 33: the stopped rank's node is blamed, from the stacks (the rank py-spy cannot read).
    assert [b["node_ip"] for b in st["blame"]] == [stopped_ip] and st["blame"][0]["evidence"]["file"], st["blame"]
    assert f"{sid}: FAILED (HUNG): hung" in out and f"{sid}-r1: submitted, resuming {sid}" in out, out[-3000:]

    # The watcher submitted the attempt; a wait on the first job follows that attempt to its end, through a
    # 400-digit step in the attempt's metrics.
    attempt = f"{sid}-r1"
    waited = playbook("job.yml", "-e", f"id={sid}", "-e", "do=wait")
    assert waited.rc == 0 and f"following its newest attempt, {attempt}" in waited.out, waited
    resumed = status(attempt)
    assert resumed["state"] == "SUCCEEDED" and resumed["resumed_from"]["step"] >= 3, resumed
    assert status(sid)["attempts"] == [attempt]
    # Issue 33: the chain's wall time, productive and lost by cause, adds up (the hang's detection cost time).
    good = status(sid)["goodput"]
    parts = ("productive_s", "detection_s", "restart_s", "recomputed_s", "outages_s", "pending_s")
    assert sum(good[p] for p in parts) == good["wall_s"] and good["detection_s"] >= STALL_S / 2, good
    assert "goodput" in waited.out, waited
    # The regression report (its entry reads the newest attempt) over a metrics.jsonl that gained a 400-digit value
    # and a 400-digit step is written, the lines noted and left out.
    append_metrics(attempt, HUGE_VALUE, HUGE_STEP)
    [entry] = report_over(run_id, "hang")["entries"]
    assert entry["record"].endswith(attempt) and entry["state"] == "SUCCEEDED", entry
    assert "out of range" in (entry["metrics_note"] or ""), entry
    excerpt = ""
    for name in dumped[:2]:
        with open(os.path.join(stacks_dir, name), encoding="utf-8") as handle:
            excerpt += f"--- {name}\n{handle.read()[:600]}\n"
    print(f"{sid}: hang found {detected_s:.0f}s after SIGSTOP (stall_s {STALL_S}); diagnosis "
          f"{json.dumps(st['diagnosis'])}\n{excerpt}")


def test_a_followed_job_found_hung_is_resumed_by_its_follower_alone():
    """submit.yml -e wait=true, no watcher: the same command finds the hang, takes the stacks, resumes from the
    newest whole checkpoint and exits 0 with the attempt SUCCEEDED."""
    sid, runs = new_id("fhang"), []
    thread = threading.Thread(target=lambda: runs.append(playbook(
        "submit.yml", *SFT2, "-e", f"submission_id={sid}", "-e", "wait=true")))
    thread.start()
    try:
        wait_for(lambda: os.path.isdir(os.path.join(RECORDS, sid)), 120, f"{sid}'s record")
        _, stopped_ip = hang_a_rank(sid)
        append_metrics(sid, HUGE_STEP, HUGE_VALUE)  # the follower's looks read them, and still find the hang
    finally:
        thread.join(timeout=1500)
    [run] = runs
    st, resumed = status(sid), status(f"{sid}-r1")
    assert run.rc == 0 and f"{sid}: failed (hung): attempt 1 of 1" in run.out, run
    assert (st["state"], st["reason"]) == ("FAILED", "HUNG") and st["stall"]["stacks"], st
    assert [b["node_ip"] for b in st["blame"]] == [stopped_ip], st["blame"]
    assert resumed["state"] == "SUCCEEDED" and resumed["resumed_from"]["step"] >= 3, resumed


def test_a_slow_but_moving_job_is_never_called_hung():
    # Each step slower than the last, each within stall_s (20 s): a pass every few seconds sees it move.
    steps = "; ".join(f"echo 'step:{i} - train/loss:1.0'; sleep {4 * i}" for i in range(1, 5))
    sid = new_id("slow")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                   "-e", f'entrypoint="bash -c \\"{steps}\\""', "-e", "timeouts.stall_s=20",
                   "-e", "timeouts.on_stall=stop")
    assert run.rc == 0, run
    watch_until(lambda: final(sid), 180, f"{sid} to end", every_s=3)
    st = status(sid)
    assert st["state"] == "SUCCEEDED" and st["stall"] is None and st["progress"]["step"] == 4, st


def test_a_deadline_passed_unfollowed_is_enforced_by_the_watcher_alone():
    sid = new_id("deadline")
    assert playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                    "-e", 'entrypoint="sleep 600"', "-e", "timeouts.max_run_s=15").rc == 0
    wait_for(lambda: ray_jobs()[sid].status.value == "RUNNING", 60, f"{sid} RUNNING")
    time.sleep(16)  # the deadline itself is what is tested: no condition to wait on but the clock
    run = playbook("watch.yml")
    assert run.rc == 0, run
    st = status(sid)
    assert st["state"] == "FAILED" and st["reason"] == "DEADLINE_EXCEEDED" and st["final"], st
    assert ray_jobs()[sid].status.value == "STOPPED"
