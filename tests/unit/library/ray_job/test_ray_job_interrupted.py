"""Issue 10 §5 (part): a lost status.json never stops a healthy job, a failed stop is not recorded as a stop,
and an unreachable head or a refused token is one line naming the address or the token file."""

import errno
import json
import os
import threading
import time

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ansible.module_utils.jobs.record import record as jr
from ray_job_harness import HEAD, SID, WORKER, make_spec, record, run, status_json


def submitted(capsys, ray, ray_config):
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0 and out["state"] == "PENDING"


def test_a_lost_status_json_never_stops_a_pending_job(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    os.unlink(os.path.join(record(ray_config), "status.json"))
    ray.clock.now += 10_000  # far past pending_s (120): with submitted_at read as 0 it used to be stopped
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=5)
    assert code == 0 and ray.stopped == [] and out["state"] == "PENDING" and not out["done"]
    status = status_json(ray_config)
    assert status["rebuilt"] and status["timeouts"]["pending_s"] == 120 and status["reason"] is None


def test_an_unreadable_status_json_never_stops_a_running_job(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    with open(os.path.join(record(ray_config), "status.json"), "w") as handle:
        handle.write('["not", "a status"')
    ray.clock.now += 10_000  # past pending_s; the run itself is young (max_run_s 300 still holds)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=5)
    assert code == 0 and ray.stopped == [] and out["state"] == "RUNNING"


def test_a_failed_stop_is_not_recorded_as_stopped(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    before = status_json(ray_config)

    def refuse(sid):
        raise RuntimeError("Request failed with status code 500: internal error\nTraceback ...")

    ray.stop_job = refuse
    code, out = run(capsys, action="stop", submission_id=SID, ray_config=ray_config)
    assert code == 1 and out["failed"] and "\n" not in out["msg"]
    assert out["msg"].startswith(f"{SID}: stopping the job failed, its record is unchanged")
    assert status_json(ray_config) == before and before["reason"] is None


def test_an_unreachable_head_is_one_line_naming_the_address(ray, ray_config, capsys, monkeypatch):
    def unreachable(url, token):
        raise ConnectionError(f"Failed to connect to Ray at address: {url}.\nTraceback (most recent call last):")

    submitted(capsys, ray, ray_config)
    monkeypatch.setattr(rc, "job_client", unreachable)
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 1 and "\n" not in out["msg"]
    assert out["msg"].startswith("cannot talk to Ray's job API at http://10.0.0.10:8265: ConnectionError")


def test_a_refused_token_is_one_line_naming_the_token_file(ray, ray_config, capsys, tmp_path):
    submitted(capsys, ray, ray_config)
    token = tmp_path / "ray_token"
    token.write_text("0" * 64)

    def forbidden(sid):
        raise RuntimeError("Request failed with status code 403: Forbidden")

    ray.get_job_info = forbidden
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config, token_path=str(token))
    assert code == 1 and out["msg"].startswith(f"Ray at http://10.0.0.10:8265 refused the token from {token}")
    assert "0" * 64 not in json.dumps(out)


def test_a_missing_token_file_is_named(ray, ray_config, capsys, tmp_path):
    missing = str(tmp_path / "no_token")
    submitted(capsys, ray, ray_config)
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config, token_path=missing)
    assert code == 1 and out["msg"] == f"cannot read the Ray token file {missing}: No such file or directory"


def test_a_submit_interrupted_before_ray_had_it_is_submitted_by_the_same_command(ray, ray_config, capsys):
    os.makedirs(os.path.join(record(ray_config), "config"))  # the record's directory, then the submit was killed
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0 and out["changed"] and len(ray.submitted) == 1 and out["state"] == "PENDING"
    assert status_json(ray_config)["submitted_at"] and os.path.isdir(os.path.join(record(ray_config), "logs"))
    code, again = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0 and again["existed"] and len(ray.submitted) == 1


def test_a_submit_interrupted_after_ray_accepted_it_finishes_the_record(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    os.unlink(os.path.join(record(ray_config), "status.json"))  # killed before status.json was written
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0 and out["changed"] and out["existed"] and len(ray.submitted) == 1
    status = status_json(ray_config)
    assert status["state"] == "RUNNING" and status["resumed"] and status["timeouts"]["pending_s"] == 120
    ray.clock.now += 10_000
    ray.set(SID, "SUCCEEDED", driver_exit_code=0, end_time=int(ray.clock.now * 1000))
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "SUCCEEDED" and ray.stopped == []


def test_an_interrupted_submit_in_check_mode_changes_nothing(ray, ray_config, capsys):
    os.makedirs(record(ray_config))
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config, _ansible_check_mode=True)
    assert code == 0 and out["changed"] and ray.submitted == [] and os.listdir(record(ray_config)) == []


def test_a_rerun_racing_an_unfinished_submit_waits_for_it_and_submits_nothing(ray, ray_config, capsys,
                                                                              monkeypatch):
    # The other run of this id made the record and holds its lock; it submits and writes status.json only later.
    monkeypatch.setattr(jr, "time", time)  # the lock's wait runs on the real clock, as the other thread does
    os.makedirs(record(ray_config))
    holding, sid = threading.Event(), SID

    def other_run():
        with jr.record_lock(record(ray_config)):
            holding.set()
            time.sleep(0.3)  # the re-run reaches the lock meanwhile
            ray.submit_job(submission_id=sid, entrypoint="python -m smoke_probe", runtime_env={}, metadata={})
            with open(os.path.join(record(ray_config), "status.json"), "w") as handle:
                json.dump({"submission_id": sid, "state": "PENDING", "final": False, "reason": None}, handle)

    thread = threading.Thread(target=other_run)
    thread.start()
    holding.wait()
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    thread.join()
    assert code == 0 and out["existed"] and not out["changed"] and len(ray.submitted) == 1
    assert status_json(ray_config)["state"] == "PENDING" and "reason" in status_json(ray_config)


def test_a_head_without_the_shared_storage_submits_nothing(ray, ray_config, capsys):
    os.unlink(os.path.join(ray_config["shared_root"], ".shared-root-id"))  # the storage is not mounted here
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 1 and "\n" not in out["msg"] and out["msg"].startswith("shared_root: ")
    assert "is it mounted?" in out["msg"] and ray.submitted == [] and os.listdir(ray_config["shared_root"]) == []


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES, errno.EIO])
def test_an_os_error_while_writing_the_record_is_one_line_and_the_retry_completes_it(ray, ray_config, capsys,
                                                                                     monkeypatch, err):
    real = jr.write_text

    def failing(path, text, **kwargs):
        if path.endswith("ray_status_pre.txt"):  # part of the record is written by then
            raise OSError(err, os.strerror(err), path)
        real(path, text, **kwargs)

    monkeypatch.setattr(jr, "write_text", failing)
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 1 and "\n" not in out["msg"] and ray.submitted == []
    assert out["msg"] == (f"cannot write the job record at {record(ray_config)}/debug/ray_status_pre.txt: "
                          f"{os.strerror(err)}; fix that and run the same command again")
    monkeypatch.setattr(jr, "write_text", real)
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0 and out["changed"] and len(ray.submitted) == 1 and status_json(ray_config)["state"] == "PENDING"
    assert not [n for n in os.listdir(os.path.join(record(ray_config), "debug")) if n.startswith(".tmp-")]


def test_status_rebuilds_a_lost_status_json_and_never_stops_the_job(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    os.unlink(os.path.join(record(ray_config), "status.json"))
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "RUNNING" and ray.stopped == []
    status = status_json(ray_config)
    assert status["submission_id"] == SID and status["rebuilt"] and status["timeouts"]["pending_s"] == 120


def test_a_completed_record_keeps_the_pending_timeout_from_rays_submit_time(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    accepted_ms = status_json(ray_config)["submitted_at"]
    ray.set(SID, "PENDING", start_time=accepted_ms)  # Ray stamps start_time when it accepts a submission
    os.unlink(os.path.join(record(ray_config), "status.json"))
    code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0 and out["existed"] and status_json(ray_config)["submitted_at"] == accepted_ms
    ray.clock.now += 200  # past pending_s (120) since Ray accepted it
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config, poll_s=5)
    assert code == 0 and out["done"] and ray.stopped == [SID] and status_json(ray_config)["reason"] == "PENDING_TIMEOUT"


def test_a_kept_driver_log_is_never_replaced_by_nothing_and_still_diagnoses(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    ray.logs[SID] = "step:3 - train/loss:5.0\n(raylet) Raylet is terminated. Termination is unexpected.\n"
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    kept = os.path.join(record(ray_config), "logs", "driver.log")
    with open(kept, encoding="utf-8") as handle:
        before = handle.read()
    ray.logs[SID] = ""  # the driver's node died: Ray has no log for the job any more
    ray.set(SID, "FAILED", driver_exit_code=1, end_time=int(ray.clock.now * 1000) + 5,
            message="Job entrypoint command failed with exit code 1")
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED"
    with open(kept, encoding="utf-8") as handle:
        assert handle.read() == before and "Raylet is terminated" in before
    assert status_json(ray_config)["diagnosis"]["kind"] == "node_died"


def test_a_submit_stuck_holding_the_lock_makes_a_rerun_fail_in_one_line(ray, ray_config, capsys):
    os.makedirs(record(ray_config))
    with jr.record_lock(record(ray_config)):  # a run that hangs (the fake clock lets the wait run out at once)
        code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 1 and "\n" not in out["msg"] and ray.submitted == []
    assert out["msg"] == (f"{SID}: another run of {SID} has held its record's lock for 120s; is it stuck? "
                          "(the lock is .submit.lock in the record)")


def test_a_failure_without_words_whose_driver_node_died_is_a_dead_node(ray, ray_config, capsys, monkeypatch):
    submitted(capsys, ray, ray_config)
    answers = [[HEAD, WORKER], [HEAD, WORKER], [HEAD, dict(WORKER, state="DEAD")]]  # DEAD after health checks
    monkeypatch.setattr(rc, "list_nodes", lambda url: answers.pop(0) if len(answers) > 1 else answers[0])
    ray.set(SID, "FAILED", driver_node_id="n-w1", driver_exit_code=1, start_time=1, end_time=2,
            message="Job entrypoint command failed with exit code 1", error_type="JOB_ENTRYPOINT_COMMAND_ERROR")
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED"
    found = status_json(ray_config)["diagnosis"]
    assert found["kind"] == "node_died" and found["evidence"] == {
        "file": "debug/nodes.json", "line": "the driver's node n-w1 (10.0.0.11) is DEAD"}


def test_a_failure_without_words_on_a_live_node_stays_unknown(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    ray.set(SID, "FAILED", driver_node_id="n-w1", driver_exit_code=1, start_time=1, end_time=2,
            message="Job entrypoint command failed with exit code 1")
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["done"] and status_json(ray_config)["diagnosis"]["kind"] == "unknown"


@pytest.mark.parametrize(("reason", "kind"), [("SLURM_ALLOCATION_ENDING", "slurm_allocation_ending"),
                                               ("STOPPED_BY_USER", "unknown")])
def test_a_stop_is_final_at_once_with_its_reason(ray, ray_config, capsys, monkeypatch, reason, kind):
    submitted(capsys, ray, ray_config)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    polls = []
    monkeypatch.setattr(rc, "list_nodes", lambda url: polls.append(url) or [HEAD, WORKER])
    code, out = run(capsys, action="stop", submission_id=SID, stop_reason=reason, ray_config=ray_config)
    assert code == 0 and out["changed"] and ray.stopped == [SID]
    status = status_json(ray_config)
    assert status["final"] and status["state"] == "STOPPED" and status["reason"] == reason
    assert status["diagnosis"]["kind"] == kind
    # The driver's node is alive: nobody waits for it to die (once for the record's snapshot only).
    assert len(polls) == 1


def test_a_stop_reason_outside_the_choices_is_refused(ray, ray_config, capsys):
    submitted(capsys, ray, ray_config)
    code, out = run(capsys, action="stop", submission_id=SID, stop_reason="$(reboot)", ray_config=ray_config)
    assert code == 1 and "stop_reason" in out["msg"] and ray.stopped == []
