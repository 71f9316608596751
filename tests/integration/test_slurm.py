"""Slurm on the lab (lab/lab_slurm.py): slurmctld on lab-head, the login node; slurmd on both workers.

An allocation of the two workers is the cluster: lab-worker1 its Ray head, lab-worker2 its worker. The lab's
own cluster (head on lab-head) makes way first; the next test module's up.yml brings it back.
"""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import IPS, RECORDS, ROOT, WORKER1, WORKER2, new_id, playbook, ssh, wait_for

SLURM_DIR = os.path.join(ROOT, ".lab", "slurm")
OUT = os.path.join(SLURM_DIR, "out")


@pytest.fixture(scope="module", autouse=True)
def slurm_lab(lab):
    assert playbook("down.yml").rc == 0  # the allocation's nodes must not run the lab's own Ray
    subprocess.run([sys.executable, os.path.join(ROOT, "lab", "lab_slurm.py"), "up"], check=True, timeout=120)
    os.makedirs(OUT, exist_ok=True)
    yield
    playbook("down.yml")  # whatever a failed test left on the workers


def login(command, check=True):
    """A command on the login node (lab-head), from the repository root, with the lab's Slurm."""
    return ssh("lab-head", f"cd {shlex.quote(ROOT)} && export SLURM_CONF={SLURM_DIR}/slurm.conf && {command}",
               check=check)


def sbatch(*args):
    """Submit the batch entry point; return the Slurm job id."""
    words = " ".join(shlex.quote(a) for a in args)
    out = login(f"sbatch --parsable -N2 --gres=gpu:4 -o {OUT}/%j.out scripts/slurm_batch.py "
                f"-i inventory/slurm-lab {words}")
    return out.strip().split(";")[0]


def slurm_job_over(job):
    return login(f"squeue -h -j {job}", check=False).strip() == ""


def batch_output(job):
    with open(os.path.join(OUT, f"{job}.out"), encoding="utf-8") as handle:
        return handle.read()


def status(sid):
    try:
        with open(os.path.join(RECORDS, sid, "status.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def ray_left(host):
    """Ray's daemons still running on host (ps lines); down.yml waits for them to exit."""
    return ssh(host, "ps -eo pid,args | grep -E '[r]aylet|[g]cs_server|[s]leep 600'; true").strip()


def modules_left(host):
    """Ansible modules still running on host: pipelining runs each as `sh -c '<python> && sleep 0'`."""
    return ssh(host, "ps -eo pid,args | grep -E '[&]& sleep 0'; true").strip()


def test_an_allocation_of_the_workers_becomes_the_inventory():
    out = login("salloc -N2 --gres=gpu:2 .venv/bin/ansible-inventory -i inventory/slurm-lab --list")
    doc = json.loads(out)
    assert doc["ray_head"]["hosts"] == [WORKER1] and doc["ray_workers"]["hosts"] == [WORKER2]
    worker = doc["_meta"]["hostvars"][WORKER2]
    assert worker["ray_worker_num_gpus"] == 2  # what this job holds, not the lab's 4
    assert worker["ansible_host"] == {"__ansible_unsafe": IPS[WORKER2]} and worker["slurm_job_id"]


def test_sbatch_runs_smoke_to_a_complete_record_and_takes_ray_down():
    sid = new_id("slurm")
    job = sbatch("--spec", "smoke", "--id", sid)
    wait_for(lambda: slurm_job_over(job), 400, f"Slurm job {job} to end")
    out = batch_output(job)
    print(out[-3000:])
    st = status(sid)
    assert st.get("state") == "SUCCEEDED" and st["final"], out[-3000:]
    assert st["driver_node_ip"] == IPS[WORKER2] and st["driver_on_worker"]
    record = os.path.join(RECORDS, sid)
    for name in ("config/job_spec.json", "config/runtime_env.json", "config/submit_cmd.txt", "logs/driver.log",
                 "debug/ray_status_pre.txt", "debug/ray_job_list_post.txt", "checkpoints/smoke.json"):
        assert os.path.getsize(os.path.join(record, name)) > 0, name
    with open(os.path.join(record, "config", "job_spec.json"), encoding="utf-8") as handle:
        assert json.load(handle)["metadata"]["slurm_job_id"] == job
    steps = re.findall(r"^slurm_batch: \S+ (\S+)", out, re.MULTILINE)
    assert steps == ["Slurm", "up.yml:", "submit.yml:", "down.yml:", f"{sid}:"], out[-3000:]
    assert ray_left(WORKER1) == "" and ray_left(WORKER2) == ""


def test_scancel_mid_job_leaves_a_final_record_and_no_ray():
    sid = new_id("slurmcancel")
    job = sbatch("--spec", "smoke", "--id", sid, "-e", "workload=command",
                 "-e", 'entrypoint="echo started; sleep 600"', "-e", "timeouts.max_run_s=null")
    wait_for(lambda: status(sid).get("state") == "RUNNING", 300, f"{sid} RUNNING")
    login(f"scancel {job}")
    wait_for(lambda: slurm_job_over(job), 120, f"Slurm job {job} to end")
    # submit.yml's wait goes on polling on the head for up to poll_s after its controller is interrupted: the
    # record is read once it has ended, so a late write over the stop's record would show (it once did).
    wait_for(lambda: modules_left(WORKER1) == "", 120, "the interrupted wait on the head to end")
    out = batch_output(job)
    print(out[-3000:])
    st = status(sid)
    assert st["final"] and st["state"] == "STOPPED" and st["reason"] == "SLURM_ALLOCATION_ENDING", out[-3000:]
    assert st["diagnosis"]["kind"] == "slurm_allocation_ending", st
    assert "ended by Slurm (SIGTERM)" in out and "down.yml: Ray stopped" in out
    for name in ("logs/driver.log", "debug/failure.txt", "debug/ray_status_post.txt", "debug/nodes.json"):
        assert os.path.exists(os.path.join(RECORDS, sid, name)), name
    assert ray_left(WORKER1) == "" and ray_left(WORKER2) == ""
