"""Checkpoint-aware retries on the lab (issue 13 §3): a verl SFT job whose node dies mid-run is resumed as a
linked attempt from its newest whole checkpoint, automatically (retries) and by hand (job.yml -e do=resume)."""

import json
import os
import threading
import time

import pytest
from ansible.module_utils.base import ray_cluster
from conftest import (
    DASHBOARD,
    IPS,
    RECORDS,
    TOKEN,
    cordoned,
    new_id,
    nodes,
    playbook,
    ssh,
    tracked_step,
    uncordon_all,
    wait_for,
)

pytestmark = pytest.mark.usefixtures("cluster_up")

# save_freq 1: a checkpoint per step; enough steps that the node dies mid-run even where a step takes well under
# a second (an idle AVX-512 machine ran 12 steps before the kill landed, and the retry resumed from the last one).
# 30 steps fit in one epoch of the lab's data (32), so no resume lands on an epoch's end (verl#7401).
STEPS = 30
SFT = ["-e", "spec=sft", "-e", "save_freq=1", "-e", f"total_training_steps={STEPS}"]


def status(sid):
    with open(os.path.join(RECORDS, sid, "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def driver_node(client, sid):
    """The node id of sid's driver, or None while Ray does not know the job yet (its record comes first)."""
    try:
        return client.get_job_info(sid).driver_node_id
    except RuntimeError as exc:
        if "status code 404" in str(exc):
            return None
        raise


def kill_the_driver_node_after_step(sid, step):
    """Once the job has saved `step`, the node its driver runs on dies: its raylet, the job's workers and the driver
    (a raylet killed alone leaves the driver training on as an orphan, which on a fast machine reached the last
    step and saved it before the retry resumed); returns that host."""
    ray_cluster.prepare_client_env(TOKEN)
    client = ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN))
    # Where the driver runs is known before the step is saved, so the kill follows the save within a second.
    driver = wait_for(lambda: driver_node(client, sid), 300, f"{sid}'s driver node")
    ip = next(n["node_ip"] for n in nodes() if n["node_id"] == driver)
    host = next(h for h, i in IPS.items() if i == ip)
    wait_for(lambda: tracked_step(sid) >= step, 600, f"{sid} to save global_step_{step}")
    # [.]: the pattern does not match this command's own shell.
    ssh(host, "kill -9 $(pgrep -x raylet) && for p in $(pgrep -f '^ray::|verl[.]trainer'); do kill -9 $p; done; true")
    return host


def submit_and_kill_after_step(sid, step, *extra):
    """submit.yml -e wait=true for an SFT job whose driver's node is killed once `step` is saved: its run, and the
    killed host's address."""
    runs, killed = [], []
    thread = threading.Thread(target=lambda: runs.append(playbook(
        "submit.yml", *SFT, "-e", f"submission_id={sid}", *extra, "-e", "wait=true")))
    thread.start()
    try:
        wait_for(lambda: os.path.isdir(os.path.join(RECORDS, sid)), 120, f"{sid}'s record")
        killed.append(kill_the_driver_node_after_step(sid, step))
    finally:
        thread.join(timeout=1500)
    [run] = runs
    return run, IPS[killed[0]]


def explain(run, sid):
    """What a failed run said, and what the first job's record says (pytest cuts a long run's repr short)."""
    try:
        first = {k: v for k, v in status(sid).items() if k in ("state", "reason", "error_type", "diagnosis")}
    except OSError as exc:
        first = str(exc)
    return f"rc={run.rc}\n{run.out[-4000:]}\nfirst job: {first}"


def test_a_job_whose_node_dies_is_retried_from_its_newest_whole_checkpoint():
    sid = new_id("retry")
    run, killed_ip = submit_and_kill_after_step(sid, 2, "-e", "retries.max=1")
    assert run.rc == 0, explain(run, sid)
    first, attempt = status(sid), status(f"{sid}-r1")
    assert first["state"] == "FAILED" and first["diagnosis"]["kind"] == "node_died", first
    # Issue 33: the node whose raylet was killed is blamed, with its evidence.
    assert first["blame"] and first["blame"][0]["node_ip"] == killed_ip and first["blame"][0]["evidence"], first
    assert first["attempts"] == [f"{sid}-r1"] and "attempt 1 of 1" in run.out
    assert attempt["state"] == "SUCCEEDED" and attempt["attempt_of"] == sid and attempt["steps"] == STEPS, attempt
    assert attempt["ended_short"] is None, attempt
    resumed = attempt["resumed_from"]
    assert resumed["step"] >= 2 and resumed["path"] == f"/private/jobs/{sid}/checkpoints/global_step_{resumed['step']}"
    with open(os.path.join(RECORDS, f"{sid}-r1", "logs", "driver.log"), encoding="utf-8") as handle:
        log = handle.read()
    assert f"step:{resumed['step'] + 1} " in log and "step:1 " not in log
    # The retry cordoned the blamed node first (it was dead: nothing to hold), and ran on the other worker.
    assert cordoned()[killed_ip]["by"] == "retry" and cordoned()[killed_ip]["job"] == sid, cordoned()
    assert attempt["driver_node_ip"] != killed_ip, attempt
    try:
        assert playbook("up.yml").rc == 0  # the killed worker rejoins, still cordoned
    finally:
        uncordon_all()


def test_do_resume_skips_a_half_written_checkpoint():
    """A job stopped by a person once step 3 is saved (no node dies: no blame, nothing cordoned) is resumed by hand,
    and the newest checkpoint, missing a shard as when a node dies while saving, is skipped."""
    sid = new_id("resume")
    assert playbook("submit.yml", *SFT, "-e", f"submission_id={sid}").rc == 0
    wait_for(lambda: tracked_step(sid) >= 3, 600, f"{sid} to save global_step_3")
    stopped = playbook("job.yml", "-e", f"id={sid}", "-e", "do=stop")
    assert stopped.rc == 0 and status(sid)["final"] and status(sid)["state"] != "SUCCEEDED", stopped
    newest = tracked_step(sid)
    # The newest checkpoint loses a shard, as when a node dies while saving: it must be skipped.
    shard = os.path.join(RECORDS, sid, "checkpoints", f"global_step_{newest}", "model_world_size_1_rank_0.pt")
    os.unlink(shard)
    started = time.monotonic()
    run = playbook("job.yml", "-e", f"id={sid}", "-e", "do=resume")
    assert run.rc == 0, run
    attempt = status(f"{sid}-r1")
    assert attempt["state"] == "SUCCEEDED" and attempt["resumed_from"]["step"] == newest - 1, attempt
    assert any(f"global_step_{newest}: lacks model" in s for s in attempt["resumed_from"]["skipped"])
    assert status(sid)["attempts"] == [f"{sid}-r1"] and status(sid)["blame"] == [] and cordoned() == {}
    print(f"resumed {sid} from step {newest - 1} in {time.monotonic() - started:.0f}s")
