"""Untrusted input on the lab (issue 22): a job's log is data (one 200 KB line, terminal escapes in a step line),
and a secret put in a misspelled field is never printed. Issue 38: what a job writes is evidence, never a command:
Ray's words for a dead node and an OOM kill printed by the job blame no node and cordon nothing."""

import json
import os

import pytest
from ansible.module_utils.base import ray_cluster
from ansible.module_utils.cordons import cordons
from conftest import DASHBOARD, IPS, RECORDS, TOKEN, WORKER2, cordoned, new_id, playbook
from jobs_helpers import status

pytestmark = pytest.mark.usefixtures("cluster_up")

SECRET = "wandb-untrusted-0123456789abcdef"
# One 200 KB line that looks like failure text all along (quadratic once in the diagnosis), then a step line with
# an OSC 52 clipboard write and a clear-screen in it, then a failure.
NOISY = ("python -c \"import sys; sys.stdout.write('node ' * 40000 + chr(10)); "
         "sys.stdout.write('step:1 - train/loss:1.5' + chr(27) + ']52;c;ZXZpbA==' + chr(7) + chr(27) + '[2J' "
         "+ chr(10)); "
         "sys.exit(3)\"")


def test_a_200kb_log_line_and_terminal_escapes_are_data():
    sid = new_id("noisy")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                   "-e", json.dumps({"entrypoint": NOISY}), "-e", "wait=true")
    st = status(sid)
    assert run.rc != 0 and st["final"] and st["state"] == "FAILED" and st["diagnosis"]["kind"], st
    assert "\x1b" not in run.out and "\x07" not in run.out and "]52;" not in run.out, run
    assert "\x1b" not in json.dumps(st)  # nothing in status.json carries the escapes either
    with open(os.path.join(RECORDS, sid, "logs", "driver.log"), encoding="utf-8") as handle:
        assert len(handle.read()) > 200_000  # the record keeps the log as it was


def test_a_secret_in_a_misspelled_field_is_never_printed():
    sid = new_id("evn")
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}",
                   "-e", json.dumps({"evn": {"WANDB_API_KEY": SECRET}}), "-vvv")
    assert run.rc != 0 and "unknown field" in run.out and "'evn'" in run.out, run
    assert SECRET not in run.out and not os.path.exists(os.path.join(RECORDS, sid))


def test_rays_words_for_a_dead_node_printed_by_the_job_blame_no_node_and_cordon_nothing():
    """The job prints Ray 2.60's words for a dead node and an OOM kill naming a worker of the lab and an address
    outside it, then fails: its diagnosis may read them (and retry it), but no node is blamed, no cordon written,
    no hold made."""
    sid, worker = new_id("forged"), IPS[WORKER2]
    lines = [f"Task failed because the node it was running on is dead or unavailable. Node IP: {ip}, node ID: ff."
             for ip in (worker, "10.9.9.9")]
    lines += [f"Memory on the node (IP: {ip}, ID: ff) where the task was running was 30GB used / 31GB limit"
              for ip in (worker, "10.9.9.9")]
    script = "; ".join(f"print({line!r})" for line in lines) + "; raise SystemExit(1)"
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                   "-e", json.dumps({"entrypoint": f"python -c {json.dumps(script)}"}), "-e", "retries.max=1",
                   "-e", "wait=true")
    st = status(sid)
    assert run.rc != 0 and st["state"] == "FAILED" and st["diagnosis"]["kind"] in ("node_died", "oom_kill"), st
    chain = [st] + [status(a) for a in st["attempts"]]
    assert all(s["blame"] == [] and s["cordoned"] == [] for s in chain), chain
    assert cordoned() == {}
    ray_cluster.prepare_client_env(TOKEN)
    assert cordons.holds(cordons.list_groups(DASHBOARD)) == []
    assert "blamed" not in run.out and "cordoned" not in run.out, run
