"""Issue 10 §6: records of jobs a restarted head forgot end FAILED (HEAD_RESTARTED) with nothing lost; when
that cannot be shown (the head ran since before the submit, or cannot be read) nothing changes."""

import json
import os

from ansible.module_utils.base import ray_cluster as rc
from ray_job_harness import HEAD, ROOMY, SID, WORKER, files, make_spec, record, run


def submit_then_restart(capsys, ray, ray_config, monkeypatch, sid=SID, head_after_s=60):
    code, out = run(capsys, spec=make_spec(ray_config, submission_id=sid), ray_config=ray_config)
    assert code == 0 and out["state"] == "PENDING"
    ray.set(sid, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))
    with open(os.path.join(record(ray_config, sid), "logs", "driver.log"), "w") as handle:
        handle.write("step:1 - train/loss:6.0\n")
    del ray.jobs[sid]  # the head restarted: its new GCS has no job history
    head = dict(HEAD, start_time_ms=int((ray.clock.now + head_after_s) * 1000))
    monkeypatch.setattr(rc, "list_nodes", lambda url: [head, WORKER])


def test_wait_finalises_a_job_the_restarted_head_forgot(ray, ray_config, capsys, monkeypatch):
    submit_then_restart(capsys, ray, ray_config, monkeypatch)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["done"] and out["state"] == "FAILED" and ray.stopped == []
    status = status_of(ray_config)
    assert status["reason"] == "HEAD_RESTARTED" and status["final"] and status["last_state"] == "PENDING"
    assert status["diagnosis"]["kind"] == "head_restarted" and status["submitted_at"]
    kept = files(record(ray_config))
    assert kept["logs/driver.log"] == b"step:1 - train/loss:6.0\n" and "config/job_spec.json" in kept
    assert b"HEAD_RESTARTED" in kept["debug/failure.txt"] and "debug/ray_status_post.txt" in kept
    code, again = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and again["state"] == "FAILED" and not again["changed"]


def test_status_finalises_it_too(ray, ray_config, capsys, monkeypatch):
    submit_then_restart(capsys, ray, ray_config, monkeypatch)
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "FAILED" and status_of(ray_config)["reason"] == "HEAD_RESTARTED"


def test_a_head_that_ran_since_before_the_submit_changes_nothing(ray, ray_config, capsys, monkeypatch):
    submit_then_restart(capsys, ray, ray_config, monkeypatch, head_after_s=-600)
    before = files(record(ray_config))
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 1 and "\n" not in out["msg"] and "record is unchanged" in out["msg"]
    assert files(record(ray_config)) == before


def test_a_head_that_cannot_be_read_changes_nothing(ray, ray_config, capsys, monkeypatch):
    submit_then_restart(capsys, ray, ray_config, monkeypatch)

    def unreadable(url):
        raise ConnectionError(f"Failed to connect to {url}")

    monkeypatch.setattr(rc, "list_nodes", unreadable)
    before = files(record(ray_config))
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 1 and out["msg"].startswith("cannot talk to Ray") and files(record(ray_config)) == before


def test_reconcile_finalises_only_the_forgotten_records(ray, ray_config, capsys, monkeypatch):
    alive, done, lost = (SID.replace("abc123", s) for s in ("a11ve1", "d0ne01", "l0st01"))
    ray.nodes = [HEAD, ROOMY]  # all three run at once
    for sid in (alive, done, lost):
        assert run(capsys, spec=make_spec(ray_config, submission_id=sid), ray_config=ray_config)[0] == 0
    ray.set(done, "SUCCEEDED", driver_exit_code=0, start_time=1, end_time=2)
    assert run(capsys, action="wait", submission_id=done, ray_config=ray_config)[1]["state"] == "SUCCEEDED"
    submit_then_restart(capsys, ray, ray_config, monkeypatch, sid=lost)
    before = {sid: files(record(ray_config, sid)) for sid in (alive, done, lost)}

    code, out = run(capsys, action="reconcile", ray_config=ray_config, _ansible_check_mode=True)
    assert code == 0 and out["changed"] and out["finalized"] == [lost] and out["open"] == [alive]
    assert {sid: files(record(ray_config, sid)) for sid in (alive, done, lost)} == before

    code, out = run(capsys, action="reconcile", ray_config=ray_config)
    assert code == 0 and out["changed"] and out["finalized"] == [lost] and out["open"] == [alive]
    assert status_of(ray_config, lost)["reason"] == "HEAD_RESTARTED"
    assert files(record(ray_config, alive)) == before[alive] and files(record(ray_config, done)) == before[done]
    code, out = run(capsys, action="reconcile", ray_config=ray_config)
    assert code == 0 and not out["changed"] and out["finalized"] == []


def test_reconcile_without_open_records_does_not_ask_ray(ray, ray_config, capsys):
    code, out = run(capsys, action="reconcile", ray_config=ray_config)
    assert code == 0 and not out["changed"] and ray.clients == [] and out["msg"] == "no open job records"


def status_of(ray_config, sid=SID):
    with open(os.path.join(record(ray_config, sid), "status.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_rebuilt_record_is_never_finalised_from_a_guess(ray, ray_config, capsys, monkeypatch):
    submit_then_restart(capsys, ray, ray_config, monkeypatch)
    os.unlink(os.path.join(record(ray_config), "status.json"))  # lost: nothing says it was ever submitted
    before = files(record(ray_config))
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 1 and "status.json is lost; the record is unchanged" in out["msg"]
    code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert code == 0 and files(record(ray_config)) == before and not out["done"]
