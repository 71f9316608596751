"""What anyone who can write the shared root leaves in a record, on the lab (issue 22, class 3: files on the share
are data): the ray_job module, root on the head, never follows a symlinked lock file, and a FIFO as a job's
checkpoint tracker makes a resume fail in one line instead of hanging it."""

import json
import os
import time

import pytest
from ansible.module_utils.base import ray_cluster
from conftest import DASHBOARD, HEAD, RECORDS, TOKEN, new_id, playbook, ssh, wait_for

pytestmark = pytest.mark.usefixtures("cluster_up")

TRACKER = "latest_checkpointed_iteration.txt"


def record(sid, *parts):
    return os.path.join(RECORDS, sid, *parts)


def status(sid):
    with open(record(sid, "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def ray_jobs_ids():
    ray_cluster.prepare_client_env(TOKEN)
    client = ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN))
    return {j.submission_id for j in client.list_jobs()}


def failure_line(run):
    """What a failed task printed, as one line (the YAML callback folds a long msg over several lines)."""
    return " ".join(run.out.split())


def test_a_symlinked_lock_file_is_never_followed_by_root_on_the_head():
    sid = new_id("lock")
    # Someone who can write the share made the record first, its submit lock a link to a head-only path.
    target = f"/var/tmp/{sid}-created-by-root"
    os.makedirs(record(sid))
    os.symlink(target, record(sid, ".submit.lock"))
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}")
    assert run.rc != 0, run
    line = failure_line(run)
    assert f"{sid}/.submit.lock: is a symlink" in line and "cannot talk to Ray" not in line, run
    assert ssh(HEAD, f"test -e {target} && echo created || echo absent").strip() == "absent"
    assert not os.path.lexists(target)
    assert sid not in ray_jobs_ids()  # nothing was submitted
    assert os.path.islink(record(sid, ".submit.lock"))  # left as it was, for the operator to see


def test_a_fifo_as_the_checkpoint_tracker_makes_resume_fail_in_one_line_never_hang():
    # A verl job (only those resume) stopped before its first checkpoint.
    sid = new_id("fifo")
    run = playbook("submit.yml", "-e", "spec=sft", "-e", f"submission_id={sid}", "-e", "total_training_steps=400",
                   "-e", "total_epochs=20", "-e", "save_freq=400")
    assert run.rc == 0, run
    wait_for(lambda: sid in ray_jobs_ids() and status(sid)["state"] in ("RUNNING", "PENDING"), 120, f"{sid} submitted")
    stopped = playbook("job.yml", "-e", f"id={sid}", "-e", "do=stop")
    assert stopped.rc == 0 and status(sid)["final"] and status(sid)["state"] == "STOPPED", stopped
    # A whole-looking checkpoint, and a FIFO where verl's tracker goes: reading it would block for ever.
    step = record(sid, "checkpoints", "global_step_1")
    os.makedirs(step)
    for kind in ("model", "optim", "extra_state"):
        with open(os.path.join(step, f"{kind}_world_size_1_rank_0.pt"), "wb") as handle:
            handle.write(b"x")
    os.mkfifo(record(sid, "checkpoints", TRACKER))
    started = time.monotonic()
    run = playbook("job.yml", "-e", f"id={sid}", "-e", "do=resume")
    took = time.monotonic() - started
    assert run.rc != 0, run  # and it ended: a read that blocked would hit the playbook's timeout
    line = failure_line(run)
    assert "no whole checkpoint to resume from (global_step_1" in line, run
    assert f"{TRACKER} is a FIFO, not a regular file" in line, run
    assert not os.path.exists(record(f"{sid}-r1"))  # no attempt was made
    print(f"resume refused in {took:.0f}s: {line[line.find('no whole'):][:300]}")
