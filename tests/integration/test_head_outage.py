"""The head can die and the job goes on (issue 20): with the lab's GCS store (lab-store's Redis) a verl job lives
through every process of lab-head being killed, and up.yml brings the head back to its cluster. Without a store
(-e ray_store_host=) a dead head ends its jobs as before: HEAD_RESTARTED, nothing in the record lost."""

import os
import re
import subprocess
import time

import pytest
from conftest import BIN, HEAD, IPS, RECORDS, ROOT, new_id, nodes, playbook, ssh, tracked_step, wait_for
from jobs_helpers import hashes, ray_jobs, start_long_job, status

pytestmark = pytest.mark.usefixtures("cluster_up")

# Every process on the lab's head but its sshd and this shell: the head host "crashes".
KILL_THE_HEAD = ("for p in $(ps -eo pid=,comm= | awk '$2 != \"sshd\" && $2 != \"bash\" && $2 != \"sh\" "
                 "&& $2 != \"ps\" && $2 != \"awk\" {print $1}'); do kill -9 $p 2>/dev/null; done; true")
NO_STORE = ("-e", "ray_store_host=")
# Long enough to be mid-run after up.yml has brought the head back (about 0.2 s a step here).
STEPS, SAVE_FREQ = 800, 50
SFT = ["-e", "spec=sft", "-e", f"save_freq={SAVE_FREQ}", "-e", "total_epochs=30", "-e", f"total_training_steps={STEPS}"]


def head_started_ms():
    return next(n["start_time_ms"] for n in nodes() if n["is_head_node"] and n["state"] == "ALIVE")


def start_playbook(log_path, name, *args):
    """ansible-playbook in the background, its output in log_path (read while it runs)."""
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    with open(log_path, "w", encoding="utf-8") as out:
        return subprocess.Popen([os.path.join(BIN, "ansible-playbook"), name, *args], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def test_a_job_lives_through_its_head_dying_with_a_store(tmp_path):
    assert playbook("up.yml").rc == 0
    sid = new_id("outage")
    submitted = playbook("submit.yml", *SFT, "-e", f"submission_id={sid}")
    assert submitted.rc == 0, submitted
    wait_for(lambda: tracked_step(sid) >= SAVE_FREQ, 600, f"{sid} to save global_step_{SAVE_FREQ}")
    killed_at = time.time()
    ssh(HEAD, KILL_THE_HEAD)
    assert not {"gcs_server", "raylet"} & set(ssh(HEAD, "ps -eo comm=").split())
    step_at_kill = tracked_step(sid)

    # Someone follows the job while the head is away: they are told, and nothing is finalised.
    log = str(tmp_path / "follow.log")
    follower = start_playbook(log, "job.yml", "-e", f"id={sid}", "-e", "do=wait")
    try:
        wait_for(lambda: "the head cannot be reached" in read_text(log), 180, "the follower to see the head away")
        assert not status(sid)["final"]
        # The watcher's timer brings the head back: its pass finds the head down and runs up.yml (--heal).
        state = tmp_path / "watcher"
        healed = subprocess.run([os.path.join(BIN, "python"), os.path.join(ROOT, "scripts", "watch.py"), "--heal",
                                 "--state-dir", str(state)], check=False, cwd=ROOT, capture_output=True, text=True,
                                timeout=900,
                                env=dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", "")))
        passes = (state / "watch" / "passes.log").read_text().splitlines()
        assert healed.returncode == 0 and [p.split()[1] for p in passes] == ["watch.yml", "up.yml", "watch.yml"], (
            healed.stdout[-3000:])
        head_down_s = head_started_ms() / 1000 - killed_at
        assert follower.wait(timeout=900) == 0, read_text(log)[-4000:]
    finally:
        if follower.poll() is None:
            follower.kill()
    out = read_text(log)
    assert f"{sid}: SUCCEEDED" in out and "waiting up to 600s" in out, out[-4000:]

    st = status(sid)
    assert st["state"] == "SUCCEEDED" and st["steps"] == STEPS and st["ended_short"] is None, st
    assert st["attempts"] == [] and not os.path.exists(os.path.join(RECORDS, f"{sid}-r1"))
    [outage] = st["outages"]
    assert outage["seen_by"] in ("wait", "reconcile") and outage["to"] == head_started_ms(), outage
    assert sid in ray_jobs() and ray_jobs()[sid].status.value == "SUCCEEDED"  # the new head's job list has it
    with open(os.path.join(RECORDS, sid, "logs", "driver.log"), encoding="utf-8") as handle:
        trained = {int(m) for m in re.findall(r"step:(\d+) - ", handle.read())}  # tqdm may share the line
    assert trained >= set(range(1, STEPS + 1)), sorted(set(range(1, STEPS + 1)) - trained)[:10]
    running_s = (st["end_time"] - st["start_time"]) / 1000
    print(f"{sid}: head killed at step {step_at_kill}, down {head_down_s:.1f}s (kill to the new head's start); "
          f"the job ran {running_s:.1f}s for {STEPS} steps; outage recorded as {outage}")


def test_without_a_store_a_head_killed_mid_job_is_healed_and_its_record_finalised():
    assert playbook("up.yml", *NO_STORE).rc == 0
    sid = start_long_job("headkill", "sleep 600")
    driver_id = ray_jobs()[sid].driver_node_id
    driver_ip = next(n["node_ip"] for n in nodes() if n["node_id"] == driver_id)
    driver_host = next(h for h, i in IPS.items() if i == driver_ip)
    before = hashes(sid)
    ssh(HEAD, KILL_THE_HEAD)
    assert "raylet" not in ssh(HEAD, "ps -eo comm=")
    healed = playbook("up.yml", *NO_STORE)
    assert healed.rc == 0, healed
    assert re.search(rf"finalised as FAILED: [^;]*\b{sid}\b", healed.out), healed
    st = status(sid)
    assert st["state"] == "FAILED" and st["final"] and st["reason"] == "HEAD_RESTARTED", st
    assert st["diagnosis"]["kind"] == "head_restarted" and st["submitted_at"] and st["outages"] == [], st
    after = hashes(sid)
    assert {k: v for k, v in after.items() if k in before and k != "status.json"} == \
        {k: v for k, v in before.items() if k != "status.json"}  # nothing already in the record is lost
    assert "sleep 600" not in ssh(driver_host, "ps -eo args=")  # the orphaned driver was ended
    shown = playbook("job.yml", "-e", f"id={sid}")
    assert shown.rc == 0 and "FAILED (HEAD_RESTARTED)" in shown.out, shown
    again = playbook("up.yml", *NO_STORE)
    assert again.rc == 0 and "finalised as FAILED" not in again.out, again
    # Back to the lab's store: the head restarts into a new cluster (its stale tables cleared), workers rejoin.
    assert playbook("up.yml").rc == 0
