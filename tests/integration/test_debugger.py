"""Ray's debugger for a job (issue 14 §2): post-mortem holds the failing task for a debugger, on the node's
cluster address, and job.yml -e do=stop ends it cleanly."""

import json
import os

import pytest
from ansible.module_utils.base import ray_cluster
from conftest import DASHBOARD, RECORDS, ROOT, TOKEN, new_id, playbook, wait_for

import lab

pytestmark = pytest.mark.usefixtures("cluster_up")

PROBE = """\
import ray

ray.init()


@ray.remote(num_cpus=1)
def divide():
    return 1 / 0


print("probe: calling a task that raises", flush=True)
ray.get(divide.remote())
"""


def logs(sid):
    ray_cluster.prepare_client_env(TOKEN)
    return ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN)).get_job_logs(sid)


def test_post_mortem_waits_for_a_debugger_and_stop_ends_the_job():
    with open(os.path.join(ROOT, ".lab", "private", "user", "postmortem_probe.py"), "w", encoding="utf-8") as handle:
        handle.write(PROBE)
    sid = new_id("debug")
    python = os.path.join(ROOT, ".venv-verl", "bin", "python")  # the nodes' Ray Python (the lab's ray_python)
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", "workload=command", "-e", f"submission_id={sid}",
                   "-e", f'entrypoint="{python} /private/user/postmortem_probe.py"', "-e", "debug.post_mortem=true")
    assert run.rc == 0, run
    waiting = wait_for(lambda: "Waiting for debugger to attach" in logs(sid) and logs(sid), 120,
                       f"{sid}'s task to wait for a debugger")
    listening = [line for line in waiting.splitlines() if "Ray debugger is listening on" in line]
    assert listening and all(lab.SUBNET in line and "0.0.0.0" not in line for line in listening), waiting[-2000:]
    shown = playbook("job.yml", "-e", f"id={sid}")
    assert shown.rc == 0 and f"{sid}: RUNNING" in shown.out, shown  # held, not failed
    with open(os.path.join(RECORDS, sid, "config", "runtime_env.json"), encoding="utf-8") as handle:
        env = json.load(handle)["env_vars"]
    assert env["RAY_DEBUG"] == "1" and env["RAY_DEBUG_POST_MORTEM"] == "1"
    stopped = playbook("job.yml", "-e", f"id={sid}", "-e", "do=stop")
    assert stopped.rc == 0, stopped
    with open(os.path.join(RECORDS, sid, "status.json"), encoding="utf-8") as handle:
        assert json.load(handle)["state"] == "STOPPED"
