"""A job's record and Ray's view of it on the lab, for the integration tests of submit.yml, job.yml and what
follows a job (test_jobs.py, test_head_outage.py, test_untrusted_input.py, test_watcher.py)."""

import hashlib
import json
import os

from ansible.module_utils.base import ray_cluster
from conftest import DASHBOARD, RECORDS, TOKEN, new_id, playbook, wait_for


def record(sid, *parts):
    return os.path.join(RECORDS, sid, *parts)


def read(sid, *parts):
    with open(record(sid, *parts), encoding="utf-8") as handle:
        return handle.read()


def status(sid):
    return json.loads(read(sid, "status.json"))


def hashes(sid):
    out = {}
    for folder, _, files in os.walk(record(sid)):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, record(sid))] = hashlib.sha256(handle.read()).hexdigest()
    return out


def ray_jobs():
    ray_cluster.prepare_client_env(TOKEN)
    client = ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN))
    return {j.submission_id: j for j in client.list_jobs()}


def start_long_job(prefix, entrypoint):
    """Submit a command job without waiting and return its id once Ray runs it."""
    sid = new_id(prefix)
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                   "-e", f'entrypoint="{entrypoint}"')
    assert run.rc == 0, run
    wait_for(lambda: ray_jobs()[sid].status.value == "RUNNING", 60, f"{sid} RUNNING")
    return sid
