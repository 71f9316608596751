"""The ray_job action on the lab: a line per poll for as long as the job runs, --check equals what is submitted."""

import itertools
import os
import re

import pytest
from conftest import RECORDS, new_id, playbook

pytestmark = pytest.mark.usefixtures("cluster_up")


def test_a_job_longer_than_several_polls_shows_a_line_for_each_poll():
    sid = new_id("follow")
    # No max_run_s: the action follows the job until it ends, whatever the number of polls.
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "-e", "workload=command",
                   "-e", 'entrypoint="for i in $(seq 10); do echo step:$i - tick; sleep 3; done"',
                   "-e", "timeouts.max_run_s=null", "-e", "wait=true", "-e", "poll_s=2")
    assert run.rc == 0, run
    lines = re.findall(rf"^lab-head \| {sid}: (PENDING|RUNNING)( for (\d+)s)?(; (.*))?$", run.out, re.MULTILINE)
    running = [int(seconds) for state, _, seconds, _, _ in lines if state == "RUNNING"]
    # About 30 s of running, in polls of 2 s plus a module call's own 2-3 s: a line for each poll, in order
    # (a poll without its line would leave a gap of two polls), with the job's newest step line.
    gaps = [b - a for a, b in itertools.pairwise(running)]
    assert len(running) >= 5 and min(gaps) > 0 and max(gaps) <= 8, (running, run)
    assert any(step.startswith("step:") for *_, step in lines), run
    assert re.search(rf"^lab-head \| {sid}: SUCCEEDED$", run.out, re.MULTILINE), run


def test_check_mode_shows_exactly_what_is_then_submitted():
    sid = new_id("checked")
    checked = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}", "--check")
    assert checked.rc == 0 and not os.path.exists(os.path.join(RECORDS, sid)), checked
    shown = dict(re.findall(r"^lab-head \| (entrypoint|submit_cmd|runtime_env): (.*)$", checked.out, re.MULTILINE))
    assert set(shown) == {"entrypoint", "submit_cmd", "runtime_env"}, checked
    run = playbook("submit.yml", "-e", "spec=smoke", "-e", f"submission_id={sid}")
    assert run.rc == 0, run
    with open(os.path.join(RECORDS, sid, "config", "submit_cmd.txt"), encoding="utf-8") as handle:
        assert handle.read().strip() == shown["submit_cmd"]
    with open(os.path.join(RECORDS, sid, "logs", "ray_job_submit.out"), encoding="utf-8") as handle:
        assert f"entrypoint: {shown['entrypoint']}\n" in handle.read()
