"""jobs/evidence/hang.py: progress tracked from the driver log, and when a job is hung (never a slow one)."""

import pytest
from ansible.module_utils.base import conventions
from ansible.module_utils.jobs.evidence import driver_log, hang, progress
from ansible.module_utils.jobs.record.status import StatusFile
from ansible.module_utils.verl import metrics

MIN = 60_000


def log(*steps):
    return "".join(f"step:{s} - train/loss:{5 - s / 100} - train/lr:0.001\n" for s in steps)


def running(**timeouts):
    return StatusFile("j-1", state="RUNNING", timeouts={"pending_s": 600, "max_run_s": None, **timeouts},
                     retries={"max": 0, "on": []})


def test_steps_and_their_times_are_tracked():
    status = running()
    hang.track(status, log(1), 0)
    hang.track(status, log(1, 2, 3), 20_000)  # two steps in 20 s
    hang.track(status, log(1, 2, 3), 40_000)  # no new step: its time is kept
    progress = status.progress
    assert progress.step == 3 and progress.step_at == 20_000 and progress.step_s == [10.0]
    assert progress.log_at == 20_000 and progress.log_bytes == len(log(1, 2, 3))


def test_the_limit_is_the_specs_or_ten_median_steps_with_a_floor():
    status = running(stall_s=120)
    assert hang.limit_s(status) == 120
    status = running()
    assert hang.limit_s(status) == conventions.STALL_FLOOR_S  # no steps yet
    status.progress = {"step": 9, "step_s": [200.0, 100.0, 300.0]}
    assert hang.limit_s(status) == 2000  # ten times the median


def test_a_slow_but_moving_job_is_never_hung():
    status = running(stall_s=30)
    for n, at in enumerate((0, 5_000, 15_000, 40_000, 65_000, 90_000), start=1):
        hang.track(status, log(*range(1, n + 1)), at)  # each step slower, each within 30 s
        assert hang.hung(status, at + 25_000) is None


def test_a_job_whose_step_stopped_moving_is_hung_once_per_stall():
    status = running(stall_s=60)
    hang.track(status, log(1, 2), 0)
    hang.track(status, log(1, 2), 50_000)
    assert hang.hung(status, 50_000) is None
    stall = hang.hung(status, 61_000)
    assert stall.since == 0 and stall.step == 2 and stall.what == "step" and stall.action == "report"
    status.stall = stall
    assert hang.hung(status, 120_000) is None  # the same stall: its stacks are taken once
    hang.track(status, log(1, 2, 3), 130_000)  # it moved: a later stall is a new one
    assert hang.hung(status, 200_000).since == 130_000


def with_metrics(text, last_step):
    """The log as driver_log.refresh_log gives it: its console parse, and the state of verl's metrics.jsonl."""
    parsed = metrics.new_state()
    metrics.fold(parsed, text)
    return driver_log.log_text(text, parsed, metrics={**progress.new_state(), "last_step": last_step})


def test_a_verl_jobs_step_is_its_metrics_step_before_its_consoles():
    assert hang.last_step(with_metrics(log(1, 2), 5)) == 5  # the file logger is ahead of the driver's console
    assert hang.last_step(with_metrics(log(1, 2), None)) == 2  # no step in metrics.jsonl yet: the console's
    assert hang.last_step(with_metrics("loading\n", None)) is None
    status = running(stall_s=60)
    hang.track(status, with_metrics(log(1), 1), 0)
    hang.track(status, with_metrics(log(1), 2), 50_000)  # verl logged step 2; the console is buffered
    assert status.progress.step == 2 and hang.hung(status, 100_000) is None


def test_a_job_without_steps_is_judged_by_its_log_growing():
    status = running(stall_s=60)
    hang.track(status, "loading the model\n", 0)
    hang.track(status, "loading the model\nstill loading\n", 50_000)
    assert hang.hung(status, 100_000) is None
    assert hang.hung(status, 111_000).what == "log line"


@pytest.mark.parametrize("on_stall, retries, expected", [
    ("report", {"max": 0, "on": []}, "report"),
    ("stop", {"max": 0, "on": []}, "stop"),
    ("report", {"max": 2, "on": ["hung"]}, "stop"),  # a retry needs the job stopped
    ("report", {"max": 0, "on": ["hung"]}, "report"),
])
def test_the_spec_decides_what_a_hang_does(on_stall, retries, expected):
    status = running(on_stall=on_stall)
    status.retries = retries
    assert hang.action(status) == expected


def test_the_progress_line_says_how_long_before_the_verdict():
    status = running(stall_s=1200)
    hang.track(status, log(1), 0)
    assert hang.idle_note(status, 30_000) == ""
    assert hang.idle_note(status, 12 * MIN) == "; no new step for 12 min (hung after 20 min)"
