"""Issue 21: action=watch, one pass over every open record, does what a follower would for each job: finalise the
ended, stop the overdue and the hung (per its spec), reconcile the forgotten; never judges what it cannot read."""

import json
import os

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.evidence import stacks
from ray_job_harness import GRPO_SID, SID, files, make_spec, make_verl_spec, record, run

STEPS = "".join(f"step:{s} - train/loss:{5 - s / 10} - train/lr:0.001\n" for s in range(1, 4))


@pytest.fixture
def dumped(monkeypatch):
    calls = []

    def dump(job, when_ms):
        calls.append(job.sid)
        return {"dir": f"debug/stacks/{when_ms}", "files": [], "summary": "rank 0 waits in all_reduce (gloo)"}

    monkeypatch.setattr(stacks, "dump", dump)
    return calls


def start(capsys, ray, ray_config, sid=SID, **spec):
    code, _ = run(capsys, spec=make_spec(ray_config, submission_id=sid, **spec), ray_config=ray_config)
    assert code == 0
    ray.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))


def start_verl(capsys, ray, ray_config, sid=GRPO_SID, **spec):
    """A GRPO job (only verl's trainers resume, so only they are retried), submitted without the preflight."""
    code, _ = run(capsys, spec=make_verl_spec(ray_config, submission_id=sid, **spec), ray_config=ray_config,
                  preflight=False)
    assert code == 0
    ray.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))


def status_of(ray_config, sid=SID):
    with open(os.path.join(record(ray_config, sid), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def watch(capsys, ray_config):
    code, out = run(capsys, action="watch", ray_config=ray_config)
    assert code == 0, out
    return out


def test_no_open_record_costs_nothing(ray, ray_config, capsys):
    assert watch(capsys, ray_config)["msg"] == "no open job records"


def test_a_job_that_ended_unfollowed_is_finalised(ray, ray_config, capsys):
    start(capsys, ray, ray_config)
    ray.logs[SID] = STEPS
    ray.set(SID, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000) + 5000)
    out = watch(capsys, ray_config)
    assert out["finalized"] == [SID] and out["ended"][SID] == "SUCCEEDED" and out["retry"] == []
    assert status_of(ray_config)["final"] and status_of(ray_config)["steps"] == 3


def test_a_deadline_passed_unfollowed_is_enforced_by_the_watcher_alone(ray, ray_config, capsys):
    start(capsys, ray, ray_config, timeouts={"max_run_s": 60})
    ray.clock.now += 120
    out = watch(capsys, ray_config)
    assert ray.stopped == [SID] and out["finalized"] == [SID]
    st = status_of(ray_config)
    assert st["state"] == "FAILED" and st["reason"] == "DEADLINE_EXCEEDED" and st["final"]


def test_a_hung_job_gets_its_stacks_then_is_stopped_and_retried_as_its_spec_says(ray, ray_config, capsys, dumped):
    start_verl(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None},
               retries={"max": 1, "on": ["hung"]})
    ray.logs[GRPO_SID] = STEPS
    assert watch(capsys, ray_config)["hung"] == []  # the first look: steps seen now
    ray.clock.now += 200
    assert watch(capsys, ray_config)["hung"] == [] and ray.stopped == []  # 200 s without a step: not yet
    ray.clock.now += 200
    out = watch(capsys, ray_config)
    assert dumped == [GRPO_SID] and ray.stopped == [GRPO_SID] and out["finalized"] == [GRPO_SID]
    assert out["retry"] == [GRPO_SID]
    st = status_of(ray_config, GRPO_SID)
    assert st["state"] == "FAILED" and st["reason"] == "HUNG" and st["diagnosis"]["kind"] == "hung"
    assert st["diagnosis"]["evidence"] == {"file": st["stall"]["stacks"], "line": "rank 0 waits in all_reduce (gloo)"}
    assert st["stall"]["step"] == 3 and st["stall"]["limit_s"] == 300 and st["stall"]["action"] == "stop"


def test_a_hung_smoke_job_is_stopped_but_never_retried_it_cannot_resume(ray, ray_config, capsys, dumped):
    start(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None}, retries={"max": 1, "on": ["hung"]})
    ray.logs[SID] = STEPS
    watch(capsys, ray_config)
    ray.clock.now += 400
    out = watch(capsys, ray_config)
    assert ray.stopped == [SID] and out["finalized"] == [SID] and out["retry"] == []
    assert status_of(ray_config)["reason"] == "HUNG"


def test_a_hung_job_whose_spec_says_report_is_reported_once_and_left_running(ray, ray_config, capsys, dumped):
    start(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None})
    ray.logs[SID] = STEPS
    watch(capsys, ray_config)
    ray.clock.now += 400
    out = watch(capsys, ray_config)
    assert out["hung"] == [{"submission_id": SID, "summary": "rank 0 waits in all_reduce (gloo)",
                            "since": status_of(ray_config)["stall"]["since"]}]
    ray.clock.now += 400
    watch(capsys, ray_config)
    assert dumped == [SID] and ray.stopped == [] and not status_of(ray_config)["final"]  # stacks taken once


def test_a_record_it_cannot_trust_is_reported_and_rebuilt_as_a_follower_would(ray, ray_config, capsys):
    """Issue 40: the watcher steps such a record as a wait does (step.py): Ray knows the job, so the record is rebuilt
    with its help, the untrusted file kept beside it; nothing is stopped or judged from the bad file."""
    start(capsys, ray, ray_config)
    bad = '{"submission_id": "' + SID + '", "state": "RUNNING", "steps": "three"}'
    with open(os.path.join(record(ray_config), "status.json"), "w", encoding="utf-8") as handle:
        handle.write(bad)
    before = files(record(ray_config))
    out = watch(capsys, ray_config)
    assert len(out["unreadable"]) == 1 and out["unreadable"][0].startswith(SID) and ray.stopped == []
    assert "rebuilt with what Ray knows" in out["unreadable"][0] and out["open"] == [SID]
    after = files(record(ray_config))
    [kept] = [v for k, v in after.items() if "untrusted" in k]
    assert kept == bad.encode() and status_of(ray_config)["rebuilt"].startswith("status.json is untrusted")
    assert status_of(ray_config)["state"] == "RUNNING" and not status_of(ray_config)["final"]
    assert {k: v for k, v in after.items() if k not in ("status.json", "logs/driver.log") and not k.startswith(".")
            and "untrusted" not in k} == {k: v for k, v in before.items() if k != "status.json" and not
                                          k.startswith(".") and k != "logs/driver.log"}


def test_a_cluster_it_cannot_read_fails_the_pass_and_changes_nothing(ray, ray_config, capsys, monkeypatch):
    start(capsys, ray, ray_config)
    before = files(record(ray_config))

    def down(url):
        raise ConnectionError(f"Failed to connect to {url}")

    monkeypatch.setattr(rc, "list_nodes", down)
    code, out = run(capsys, action="watch", ray_config=ray_config)
    assert code == 1 and out["msg"].startswith("cannot talk to Ray's job API") and files(record(ray_config)) == before


# Issue 31's review of the one step (module_utils/jobs/life/step.py): what a step may never do.
def test_a_hang_stop_that_failed_once_is_asked_again(ray, ray_config, capsys, dumped):
    start(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None}, retries={"max": 1, "on": ["hung"]})
    ray.logs[SID] = STEPS
    watch(capsys, ray_config)
    ray.clock.now += 400
    real, ray.stop_job = ray.stop_job, lambda sid: (_ for _ in ()).throw(RuntimeError("dashboard 503"))
    out = watch(capsys, ray_config)
    assert out["errors"] and ray.stopped == []  # the stacks are taken, the stop failed: one line, record kept
    ray.stop_job = real
    ray.clock.now += 10
    out = watch(capsys, ray_config)
    assert ray.stopped == [SID] and out["finalized"] == [SID] and status_of(ray_config)["reason"] == "HUNG"
    assert dumped == [SID]  # the stacks were taken once


def test_status_and_logs_only_look_they_never_stop_an_overdue_job(ray, ray_config, capsys):
    start(capsys, ray, ray_config, timeouts={"max_run_s": 60})
    ray.clock.now += 120
    for action in ("status", "logs"):
        code, _ = run(capsys, action=action, submission_id=SID, ray_config=ray_config)
        assert code == 0 and ray.stopped == []
    assert watch(capsys, ray_config)["finalized"] == [SID] and ray.stopped == [SID]  # the watcher acts


def test_check_mode_changes_no_record_and_stops_nothing(ray, ray_config, capsys):
    start(capsys, ray, ray_config, timeouts={"max_run_s": 60, "stall_s": 300})
    ray.logs[SID] = STEPS
    ray.clock.now += 120
    before = files(record(ray_config))
    for action in ("status", "logs", "wait", "next", "resume"):
        run(capsys, action=action, submission_id=SID, ray_config=ray_config, _ansible_check_mode=True)
    run(capsys, action="watch", ray_config=ray_config, _ansible_check_mode=True)
    assert files(record(ray_config)) == before and ray.stopped == []


def test_a_status_json_unreadable_for_a_moment_is_never_rebuilt_over(ray, ray_config, capsys, monkeypatch):
    from ansible.module_utils.jobs.record import record as jr

    start(capsys, ray, ray_config, retries={"max": 2, "on": ["node_died"]})
    before = status_of(ray_config)
    real = jr.Record.read_status
    ray.set(SID, "FAILED", driver_exit_code=1, end_time=int(ray.clock.now * 1000) + 1000,
            message="NodeDiedError: node has been marked dead")
    monkeypatch.setattr(jr.Record, "read_status", lambda self: (_ for _ in ()).throw(
        jr.UnreadableStatus(f"{self.path['status']}: cannot be read (Stale file handle)")))
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=2)
    assert code == 1 and "cannot be read now" in out["msg"], out
    assert watch(capsys, ray_config)["finalized"] == []  # the watcher judges nothing from it either
    monkeypatch.setattr(jr.Record, "read_status", real)
    after = status_of(ray_config)
    assert after["retries"] == before["retries"] and after["submitted_at"] == before["submitted_at"]
    assert not after["final"]  # the next look, with the file readable, finalises it from the record


def test_a_persons_stop_ray_is_slow_to_honour_never_becomes_a_retried_hang(ray, ray_config, capsys, dumped):
    start(capsys, ray, ray_config, timeouts={"stall_s": 300, "max_run_s": None}, retries={"max": 1, "on": ["hung"]})
    ray.logs[SID] = STEPS
    watch(capsys, ray_config)
    ray.clock.now += 250
    ray.stop_to = None  # Ray takes its time (a driver stuck in a collective ignores SIGTERM)
    run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert status_of(ray_config)["reason"] == "STOPPED_BY_USER"
    ray.clock.now += 400  # long past stall_s
    out = watch(capsys, ray_config)
    assert dumped == [] and status_of(ray_config)["reason"] == "STOPPED_BY_USER" and out["retry"] == [], out
