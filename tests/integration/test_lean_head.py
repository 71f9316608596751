"""A lean head (issue 30): a head whose Python has Ray but neither torch nor verl still submits trainer jobs; the
preflight runs where the job's Python is, on a worker, and leaves nothing in Ray's job list.

The lab's head gets the project's own venv (.venv: Ray, no torch, no verl) as its ray_python, and the job's venv
(.venv-verl) is hidden from it (an empty tmpfs over it, in the head's own mount namespace): as on a site whose head is
a small CPU machine. The workers keep .venv-verl, which is the jobs' Python (ray_job_python: the first worker's).
"""

import os
import re
import shutil

import pytest
from conftest import BIN, DASHBOARD, HEAD, ROOT, TOKEN, new_id, playbook, ssh
from jobs_helpers import status

from ansible.module_utils.base import ray_cluster  # isort: skip

pytestmark = pytest.mark.usefixtures("lab")

LAB_INVENTORY = os.path.join(ROOT, "inventory", "lab")
LEAN = os.path.join(ROOT, ".lab", "lean-head")
JOB_VENV = os.path.join(ROOT, ".venv-verl")


@pytest.fixture(scope="module")
def lean_head():
    shutil.rmtree(LEAN, ignore_errors=True)
    os.makedirs(os.path.join(LEAN, "host_vars"))
    for name in ("hosts.yml", "cluster.yml", "group_vars", ".secrets"):
        os.symlink(os.path.join(LAB_INVENTORY, name), os.path.join(LEAN, name))
    with open(os.path.join(LEAN, "host_vars", f"{HEAD}.yml"), "w", encoding="utf-8") as handle:
        # TensorBoard comes with the jobs' venv: a lean head runs none.
        handle.write(f"---\nray_python: {BIN}/python\nray_tensorboard_enabled: false\n")
    assert playbook("down.yml").rc == 0  # the head's Ray runs from .venv-verl until now
    ssh(HEAD, f"mount -t tmpfs -o size=1m lean-head {JOB_VENV}")
    try:
        assert ssh(HEAD, f"ls -A {JOB_VENV} | wc -l").strip() == "0"
        run = playbook("up.yml", "-i", LEAN)
        assert run.rc == 0, run
        yield LEAN
    finally:
        playbook("down.yml", "-i", LEAN)
        ssh(HEAD, f"umount {JOB_VENV}", check=False)


def test_a_misspelled_override_is_refused_by_verl_on_a_worker(lean_head):
    run = playbook("submit.yml", "-i", lean_head, "-e", "spec=sft", "-e", 'overrides=["trainer.no_such_key=1"]',
                   "--check")
    assert run.rc != 0, run
    out = " ".join(run.out.split())
    assert re.search(r"the preflight on worker 198\.18\.0\.1\d: override trainer\.no_such_key: not in verl 0\.9\.1's "
                     r"config", out), run


def test_an_sft_job_is_submitted_from_the_lean_head_and_succeeds_with_nothing_else_in_rays_job_list(lean_head):
    sid = new_id("lean")
    run = playbook("submit.yml", "-i", lean_head, "-e", "spec=sft", "-e", f"submission_id={sid}", "-e", "wait=true")
    assert run.rc == 0, run
    assert status(sid)["state"] == "SUCCEEDED"
    ray_cluster.prepare_client_env(TOKEN)
    client = ray_cluster.job_client(DASHBOARD, ray_cluster.read_token(TOKEN))
    assert [j.submission_id for j in client.list_jobs()] == [sid]  # the worker's preflight left no job behind
