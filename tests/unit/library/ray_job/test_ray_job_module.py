"""The ray_job module: submit, wait, stop, status and logs, and the record each leaves."""

import json
import os

import pytest
import ray_job
from ansible.module_utils.base import conventions
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.evidence import evidence
from ansible.module_utils.jobs.life import follow
from ansible.module_utils.jobspec import render
from ansible.module_utils.testing import patch_module_args
from ray.job_submission import JobStatus
from ray_job_harness import (
    HEAD,
    LOG,
    RECORD_FILES,
    SECRET,
    SID,
    WORKER,
    files,
    make_spec,
    make_verl_spec,
    record,
    run,
    status_json,
    submit,
)


def test_check_mode_renders_and_creates_nothing(ray, ray_config, capsys):
    code, out = submit(capsys, ray_config, _ansible_check_mode=True)
    assert code == 0 and out["changed"] is True and out["existed"] is False
    assert out["state"] == "NEW" and out["submission_id"] == SID
    assert out["entrypoint"].startswith("python -m smoke_probe --checkpoint-dir")
    assert out["submit_cmd"].startswith("ray job submit --address http://10.0.0.10:8265 --submission-id " + SID)
    assert out["runtime_env"]["env_vars"]["WANDB_API_KEY"] == "<redacted>"
    assert SECRET not in json.dumps(out)
    assert ray.submitted == []
    assert os.listdir(ray_config["shared_root"]) == [conventions.SHARED_ROOT_MARK]


def test_a_verl_job_with_retries_and_checkpoints_off_is_told_a_retry_starts_from_step_0(ray, ray_config, capsys):
    note = " (save_freq -1: no checkpoints, so a retry starts again from step 0)"
    spec = make_verl_spec(ray_config, save_freq=-1, retries={"max": 2})
    _, checked = submit(capsys, ray_config, spec, preflight=False, _ansible_check_mode=True)
    assert checked["progress"] == f"{spec['submission_id']} would be submitted{note}"
    assert "trainer.save_freq=-1" in checked["entrypoint"].split()
    _, out = submit(capsys, ray_config, spec, preflight=False)
    assert out["progress"] == f"{spec['submission_id']} submitted{note}" and len(ray.submitted) == 1
    quiet = make_verl_spec(ray_config, save_freq=-1, submission_id="q-1")  # retries.max 0: nothing to say
    assert submit(capsys, ray_config, quiet, preflight=False, _ansible_check_mode=True)[1]["progress"] == \
        "q-1 would be submitted"


def test_submit_writes_the_record_and_pins_the_driver_to_a_worker(ray, ray_config, capsys):
    spec = make_spec(ray_config)
    code, out = submit(capsys, ray_config, spec)
    assert code == 0 and out["changed"] is True and out["existed"] is False
    assert out["state"] == "PENDING" and out["done"] is False and out["record"] == record(ray_config)
    rec = record(ray_config)
    for name in RECORD_FILES:
        assert os.path.isfile(os.path.join(rec, name)), name

    [call] = ray.submitted
    assert call["submission_id"] == SID
    assert call["entrypoint_resources"] == {"worker_node": 1}
    assert call["entrypoint"] == render.render_entrypoint(spec, ray_config)
    assert call["runtime_env"]["env_vars"]["WANDB_API_KEY"] == SECRET  # Ray itself gets the real value
    assert call["metadata"] == {"purpose": "cluster smoke test"}
    assert ray.clients == [("http://10.0.0.10:8265", None)]

    status = status_json(ray_config)
    assert status["state"] == "PENDING" and status["final"] is False and status["reason"] is None
    assert status["submission_id"] == SID and status["timeouts"] == {"pending_s": 120, "max_run_s": 300,
                                                                      "stall_s": None, "on_stall": "report",
                                                                      "queue_s": None}
    assert status["submitted_at"] == int(ray.clock.now * 1000)
    with open(os.path.join(rec, "config", "env_var_names.json"), encoding="utf-8") as handle:
        assert json.load(handle) == ["PYTHONPATH", "RAY_DEBUG", "WANDB_API_KEY"]
    with open(os.path.join(rec, "debug", "ray_status_pre.txt"), encoding="utf-8") as handle:
        pre = handle.read()
    assert "Autoscaler status" in pre and "worker 10.0.0.11 ALIVE" in pre
    with open(os.path.join(rec, "logs", "ray_job_submit.out"), encoding="utf-8") as handle:
        assert handle.read().startswith(f"submitted {SID} to http://10.0.0.10:8265")


def test_second_submit_of_an_id_changes_nothing(ray, ray_config, capsys):
    submit(capsys, ray_config)
    before = files(record(ray_config))
    ray.set(SID, "RUNNING", start_time=int(ray.clock.now * 1000))

    code, out = submit(capsys, ray_config)
    assert code == 0 and out["changed"] is False and out["existed"] is True
    assert out["state"] == "RUNNING"  # what Ray says now
    assert len(ray.submitted) == 1
    assert files(record(ray_config)) == before


def test_an_id_only_ray_knows_is_not_submitted_again(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING")
    os.rename(record(ray_config), record(ray_config) + ".moved")  # e.g. another shared root
    code, out = submit(capsys, ray_config)
    assert code == 0 and out["existed"] is True and len(ray.submitted) == 1
    assert not os.path.exists(record(ray_config))


def test_secret_is_in_no_record_file(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.logs[SID] = LOG
    ray.set(SID, "FAILED", message=f"driver exited; env WANDB_API_KEY={SECRET}", driver_exit_code=1,
            driver_node_id="n-w1", start_time=int(ray.clock.now * 1000), end_time=int(ray.clock.now * 1000) + 5)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED"
    written = files(record(ray_config))
    assert {"logs/driver.log", "debug/failure.txt", "debug/ray_job_list_post.txt"} <= set(written)
    for name, content in written.items():
        assert SECRET.encode() not in content, name
    assert b"<redacted>" in written["logs/driver.log"] and b"step:3" in written["logs/driver.log"]
    assert SECRET not in json.dumps(out)


def test_submission_failure_is_recorded_as_failed(ray, ray_config, capsys):
    ray.submit_error = RuntimeError("Failed to submit job: connection refused\nTraceback (most recent call last):")
    code, out = submit(capsys, ray_config)
    assert code == 1 and out["failed"] is True
    assert out["msg"] == f"{SID}: submission failed: Failed to submit job: connection refused"
    status = status_json(ray_config)
    assert status["state"] == "FAILED" and status["reason"] == "SUBMISSION_FAILED" and status["final"] is True
    with open(os.path.join(record(ray_config), "logs", "ray_job_submit.out"), encoding="utf-8") as handle:
        assert "connection refused" in handle.read()
    # The id is taken now: a re-run reports the failure and submits nothing.
    code, out = submit(capsys, ray_config)
    assert code == 0 and out["existed"] is True and out["state"] == "FAILED" and len(ray.submitted) == 1


def test_wait_finalizes_a_succeeded_job(ray, ray_config, capsys):
    submit(capsys, ray_config)
    submitted_at = status_json(ray_config)["submitted_at"]
    ray.logs[SID] = LOG
    ray.set(SID, "SUCCEEDED", message="Job finished successfully.", driver_exit_code=0, driver_node_id="n-w1",
            start_time=submitted_at + 2_000, end_time=submitted_at + 12_000)

    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["changed"] is True and out["done"] is True and out["state"] == "SUCCEEDED"
    status = status_json(ray_config)
    assert status == out["status"]
    assert status["final"] is True and status["state"] == "SUCCEEDED" and status["ray_status"] == "SUCCEEDED"
    assert status["driver_on_worker"] is True and status["driver_node_ip"] == "10.0.0.11"
    assert (status["steps"], status["first_loss"], status["last_loss"]) == (3, 6.0625, 5.0)
    assert status["last_step"].startswith("step:3 - train/loss:5.0")
    assert status["phases"]["pending_s"] == 2.0 and status["phases"]["running_s"] == 10.0
    written = files(record(ray_config))
    assert "debug/ray_status_post.txt" in written and SID.encode() in written["debug/ray_job_list_post.txt"]
    assert "debug/failure.txt" not in written

    # The record is final: another wait only reports it.
    code, again = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and again["changed"] is False and again["state"] == "SUCCEEDED"
    assert files(record(ray_config)) == written


def test_driver_on_the_head_is_recorded(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "SUCCEEDED", driver_node_id="n-head", start_time=1, end_time=2)
    run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert status["driver_on_worker"] is False and status["steps"] is None and status["last_loss"] is None


def test_wait_returns_progress_while_the_job_runs(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    ray.logs[SID] = LOG
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=5)
    # The poll wrote the record (the driver log, the state): changed says so.
    assert code == 0 and out["changed"] is True and out["done"] is False and out["state"] == "RUNNING"
    assert out["progress"].startswith(f"{SID}: RUNNING for 5s; step:3")
    assert status_json(ray_config)["state"] == "RUNNING" and ray.stopped == []


def test_wait_stops_a_job_pending_too_long(ray, ray_config, capsys):
    submit(capsys, ray_config, make_spec(ray_config, timeouts={"pending_s": 3}))
    ray.stop_to = None  # Ray may not stop a job whose driver was never placed (ray#31008)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=60)
    assert code == 0 and out["changed"] is True and out["done"] is True
    assert ray.stopped == [SID]
    status = status_json(ray_config)
    assert status["state"] == "FAILED" and status["reason"] == "PENDING_TIMEOUT"
    assert status["ray_status"] == "PENDING" and status["final"] is True
    assert out["progress"] == f"{SID}: FAILED (PENDING_TIMEOUT)"
    with open(os.path.join(record(ray_config), "debug", "failure.txt"), encoding="utf-8") as handle:
        assert "reason: PENDING_TIMEOUT" in handle.read()


def test_wait_within_pending_s_does_not_stop(ray, ray_config, capsys):
    submit(capsys, ray_config)  # pending_s 120
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=60)
    assert code == 0 and out["changed"] is False and out["state"] == "PENDING" and ray.stopped == []


def test_stop_a_running_job(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    code, out = run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["changed"] is True and out["state"] == "STOPPED"
    assert ray.stopped == [SID]
    status = status_json(ray_config)
    assert status["reason"] == "STOPPED_BY_USER" and status["final"] is True and status["state"] == "STOPPED"

    code, out = run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert out["changed"] is False and ray.stopped == [SID]


def test_stop_in_check_mode_only_reports(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING")
    before = files(record(ray_config))
    code, out = run(capsys, action="stop", submission_id=SID, ray_config=ray_config, _ansible_check_mode=True)
    assert code == 0 and out["changed"] is True and ray.stopped == []
    assert files(record(ray_config)) == before


def test_wait_stops_a_job_past_max_run_s(ray, ray_config, capsys):
    submit(capsys, ray_config)  # max_run_s 300
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000) - 301_000)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["done"] is True and ray.stopped == [SID]
    status = status_json(ray_config)
    assert (status["state"], status["ray_status"], status["reason"]) == ("FAILED", "STOPPED", "DEADLINE_EXCEEDED")


def test_a_job_ray_forgets_while_it_is_stopped_keeps_a_valid_record(ray, ray_config, capsys, monkeypatch):
    """The head restarts while a deadline stop waits for Ray: the record keeps its state and reason (never a null
    state, which would make it untrusted), and the next wait finalises it as a job the restarted head forgot."""
    submit(capsys, ray_config)  # max_run_s 300
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000) - 301_000)
    ray.stop_job = lambda sid: ray.jobs.pop(sid) and True
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert code == 0 and not out["done"] and (status["state"], status["reason"]) == ("RUNNING", "DEADLINE_EXCEEDED")
    head = dict(HEAD, start_time_ms=int((ray.clock.now + 60) * 1000))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [head, WORKER])
    ray.clock.now += 120
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["done"] and status_json(ray_config)["reason"] == "HEAD_RESTARTED"


def test_logs_returns_the_redacted_tail(ray, ray_config, capsys, monkeypatch):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING")
    ray.logs[SID] = LOG
    monkeypatch.setattr(follow, "LOG_TAIL_LINES", 2)
    code, out = run(capsys, action="logs", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["changed"] is True  # the driver log was copied into the record
    assert out["log_tail"] == "step:3 - train/loss:5.0 - train/grad_norm:3.10 - train/lr:0.001\ndone"
    monkeypatch.setattr(follow, "LOG_TAIL_LINES", 5)
    code, out = run(capsys, action="logs", submission_id=SID, ray_config=ray_config)
    assert out["changed"] is False  # nothing new to write
    assert SECRET not in out["log_tail"] and "WANDB_API_KEY=<redacted>" in out["log_tail"]


def test_stop_that_ray_has_not_carried_out_is_not_final(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", start_time=int(ray.clock.now * 1000))
    ray.stop_to = None
    run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert not (status["final"] and status["state"] == "RUNNING")


def test_status_of_an_unknown_id_fails(ray, ray_config, capsys):
    code, out = run(capsys, action="status", submission_id="nope", ray_config=ray_config)
    assert code == 1 and out["failed"] is True
    assert "no job record" in out["msg"] and "nope" in out["msg"]


def test_bad_ray_config_fails_with_the_field(ray, ray_config, capsys):
    code, out = run(capsys, action="status", submission_id=SID, ray_config={**ray_config, "address": "nohost"})
    assert code == 1 and "ray_config.address" in out["msg"]


def test_secret_is_not_echoed_in_the_invocation(ray, ray_config, capsys):
    with patch_module_args(dict(spec=make_spec(ray_config), ray_config=ray_config)), pytest.raises(SystemExit):
        ray_job.main()
    assert SECRET not in capsys.readouterr().out


# A verl job's metrics (verl's own file logger, issue 23) are tested in test_ray_job_metrics.py.


def stop_meanwhile(ray, ray_config, monkeypatch, *, finalised):
    """While a wait sleeps between polls, another run stops the job (Slurm's batch script after scancel; the
    wait goes on polling on the head after its controller was interrupted): it writes its reason into
    status.json and, when finalised, the final record."""
    path = os.path.join(record(ray_config), "status.json")
    sleep = ray.clock.sleep

    def stop_during_sleep(seconds):
        if ray.jobs[SID].status == JobStatus.RUNNING:
            ray.stop_job(SID)
            written = dict(status_json(ray_config), reason="SLURM_ALLOCATION_ENDING")
            if finalised:
                written.update(final=True, state="STOPPED", ray_status="STOPPED", by="the stopping run")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(written, handle)
        sleep(seconds)

    monkeypatch.setattr(ray.clock, "sleep", stop_during_sleep)
    return path


def test_a_wait_never_writes_over_a_record_another_run_finalised(ray, ray_config, capsys, monkeypatch):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    path = stop_meanwhile(ray, ray_config, monkeypatch, finalised=True)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=60)
    with open(path, encoding="utf-8") as handle:
        kept = json.load(handle)
    assert kept["by"] == "the stopping run" and kept["reason"] == "SLURM_ALLOCATION_ENDING"
    assert code == 0 and out["done"] is True and out["state"] == "STOPPED"


def test_a_wait_keeps_the_reason_a_stop_gave_meanwhile(ray, ray_config, capsys, monkeypatch):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    stop_meanwhile(ray, ray_config, monkeypatch, finalised=False)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=60)
    assert code == 0 and out["progress"] == f"{SID}: STOPPED (SLURM_ALLOCATION_ENDING)"
    status = status_json(ray_config)
    assert (status["final"], status["state"], status["reason"]) == (True, "STOPPED", "SLURM_ALLOCATION_ENDING")
    assert status["diagnosis"]["kind"] == "slurm_allocation_ending"
    with open(os.path.join(record(ray_config), "debug", "failure.txt"), encoding="utf-8") as handle:
        assert "reason: SLURM_ALLOCATION_ENDING" in handle.read()


def write_during_finalize(ray_config, monkeypatch, **fields):
    """Another run writes status.json while this run's finalize gathers the record (its snapshot)."""
    snapshot = evidence.snapshot

    def snapshot_then_write(job, when):
        nodes = snapshot(job, when)
        if when == "post":
            written = dict(status_json(ray_config), **fields)
            with open(os.path.join(record(ray_config), "status.json"), "w", encoding="utf-8") as handle:
                json.dump(written, handle)
            if fields.get("final"):
                with open(os.path.join(record(ray_config), "debug", "failure.txt"), "w", encoding="utf-8") as h:
                    h.write("the other run's failure.txt\n")
        return nodes

    monkeypatch.setattr(evidence, "snapshot", snapshot_then_write)


def test_a_reason_given_while_finalising_decides_the_state_and_the_diagnosis(ray, ray_config, capsys, monkeypatch):
    submit(capsys, ray_config)
    ray.set(SID, "STOPPED", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000), end_time=1)
    write_during_finalize(ray_config, monkeypatch, reason="PENDING_TIMEOUT")
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert out["status"]["reason"] == "PENDING_TIMEOUT"
    assert code == 0 and (status["state"], status["reason"]) == ("FAILED", "PENDING_TIMEOUT")
    assert status["diagnosis"]["kind"] == "resources_pending"
    with open(os.path.join(record(ray_config), "debug", "failure.txt"), encoding="utf-8") as handle:
        assert "reason: PENDING_TIMEOUT" in handle.read()


def test_a_record_finalised_by_another_run_meanwhile_keeps_all_its_files(ray, ray_config, capsys, monkeypatch):
    submit(capsys, ray_config)
    ray.set(SID, "STOPPED", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000), end_time=1)
    write_during_finalize(ray_config, monkeypatch, reason="SLURM_ALLOCATION_ENDING", final=True, state="STOPPED",
                          by="the other run")
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["status"]["by"] == "the other run" and status_json(ray_config)["by"] == "the other run"
    with open(os.path.join(record(ray_config), "debug", "failure.txt"), encoding="utf-8") as handle:
        assert handle.read() == "the other run's failure.txt\n"


def test_a_stop_still_asks_ray_when_the_record_is_already_final(ray, ray_config, capsys):
    """A pending job given up on (PENDING_TIMEOUT) that Ray did not stop (ray#31008): a user's stop reaches Ray,
    and the final record stays as it was."""
    submit(capsys, ray_config, make_spec(ray_config, timeouts={"pending_s": 3}))
    ray.stop_to = None
    run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=60)
    final = status_json(ray_config)
    run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert ray.stopped == [SID, SID] and status_json(ray_config) == final


class Killed(BaseException):
    """The stopping run dies (SIGKILL, a lost ssh session) right after Ray took the stop."""


def test_a_job_stopped_before_its_reason_was_written_is_finalised_with_that_reason(ray, ray_config, capsys):
    """A wait polling meanwhile (an interrupted one on the head) may see STOPPED before the stop writes its
    reason to status.json; the reason the stop left before asking Ray decides the record."""
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    stop_job = ray.stop_job

    def stop_then_die(sid):
        stop_job(sid)
        raise Killed

    ray.stop_job = stop_then_die
    with patch_module_args({"action": "stop", "submission_id": SID, "ray_config": ray_config,
                            "stop_reason": "SLURM_ALLOCATION_ENDING"}), pytest.raises(Killed):
        ray_job.main()
    capsys.readouterr()
    assert status_json(ray_config).get("reason") is None  # the stop died before it wrote status.json
    code, _out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=60)
    status = status_json(ray_config)
    assert code == 0 and (status["final"], status["state"]) == (True, "STOPPED")
    assert status["reason"] == "SLURM_ALLOCATION_ENDING"
    assert status["diagnosis"]["kind"] == "slurm_allocation_ending"


def test_a_stop_ray_refused_leaves_no_reason_behind(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))

    def refuse(sid):
        raise RuntimeError("Request failed with status code 500")

    ray.stop_job = refuse
    code, out = run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert code == 1 and "stopping the job failed" in out["msg"]
    assert not os.path.exists(os.path.join(record(ray_config), ".stop_request"))
    ray.set(SID, "FAILED", end_time=int(ray.clock.now * 1000) + 1, driver_exit_code=1)  # it ended on its own
    run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert (status["state"], status["reason"]) == ("FAILED", None)


def test_a_stop_request_file_with_a_reason_the_module_never_gives_is_ignored(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "STOPPED", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000), end_time=1)
    with open(os.path.join(record(ray_config), ".stop_request"), "w", encoding="utf-8") as handle:
        handle.write("{{ lookup('pipe', 'id') }}\n")
    code, _out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert code == 0 and (status["final"], status["state"], status["reason"]) == (True, "STOPPED", None)


def test_a_left_over_stop_request_does_not_explain_a_job_that_failed_on_its_own(ray, ray_config, capsys):
    """A stop interrupted before Ray took it may leave its request behind; the job then fails by itself (an
    OOM): its record keeps its own diagnosis, which decides whether it is retried."""
    submit(capsys, ray_config)
    with open(os.path.join(record(ray_config), ".stop_request"), "w", encoding="utf-8") as handle:
        handle.write("SLURM_ALLOCATION_ENDING\n")
    ray.set(SID, "FAILED", driver_node_id="n-w1", start_time=1, end_time=2, driver_exit_code=1,
            message="torch.OutOfMemoryError: CUDA out of memory.")
    run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    status = status_json(ray_config)
    assert (status["state"], status["reason"]) == ("FAILED", None)
    assert status["diagnosis"]["kind"] == "cuda_oom"


def test_a_stop_ray_took_leaves_its_reason_in_status_json_only(ray, ray_config, capsys):
    submit(capsys, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    code, _out = run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert code == 0 and status_json(ray_config)["reason"] == "STOPPED_BY_USER"
    assert not os.path.exists(os.path.join(record(ray_config), ".stop_request"))


@pytest.mark.parametrize("wanted, short", [(3, False), (5, True), ("5", False), (None, False)])
def test_a_job_that_succeeded_short_of_its_steps_says_so(ray, ray_config, capsys, wanted, short):
    # verl exits 0 when it resumes from a checkpoint saved at an epoch's end and skips the next epoch (verl#7401).
    submit(capsys, ray_config)
    spec_file = os.path.join(record(ray_config), "config", "job_spec.json")
    with open(spec_file, encoding="utf-8") as handle:
        spec = json.load(handle)
    with open(spec_file, "w", encoding="utf-8") as handle:
        json.dump({**spec, "total_training_steps": wanted}, handle)  # a hand-edited file: any shape
    ray.logs[SID] = LOG
    ray.set(SID, "SUCCEEDED", driver_exit_code=0, driver_node_id="n-w1", start_time=1, end_time=2)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "SUCCEEDED"
    if short:
        assert status_json(ray_config)["ended_short"].startswith("ended at step 3 of the 5 its spec asked for")
        assert "verl#7401" in out["progress"]
    else:
        assert status_json(ray_config)["ended_short"] is None
