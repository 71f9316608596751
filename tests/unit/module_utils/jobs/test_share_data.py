"""The ray_job module (root, on the head) and what anyone who can write the shared root left in a record (issue 22,
class 3): symlinks are never followed, a file of any shape is data, a record that does not fit is rebuilt or named
in one line, never "cannot talk to Ray" for what is not Ray."""

import glob
import json
import os

import pytest
from ansible.module_utils.jobs import runner
from ansible.module_utils.jobs.record import client as jc
from ansible.module_utils.jobs.record import record as jr
from ray_job_harness import LOG, SECRET, SID, make_spec, record, run, status_json, submit


def running(capsys, ray, ray_config):
    code, _ = submit(capsys, ray_config)
    assert code == 0
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=int(ray.clock.now * 1000))


@pytest.fixture
def head(tmp_path_factory):
    """A directory only the head has (off the shared root)."""
    return tmp_path_factory.mktemp("head")


@pytest.mark.parametrize("lock", [jr.STATUS_LOCK_FILE, jr.LOCK_FILE])
def test_a_symlinked_lock_file_never_creates_its_target(ray, ray_config, capsys, head, lock):
    running(capsys, ray, ray_config)
    path = os.path.join(record(ray_config), lock)
    if os.path.lexists(path):
        os.remove(path)
    target = head / "created-by-root"
    os.symlink(target, path)
    if lock == jr.LOCK_FILE:  # the submit of an id whose record has no status.json yet takes the submit lock
        os.remove(os.path.join(record(ray_config), "status.json"))
        code, out = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    else:
        code, out = run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    assert not os.path.lexists(target)
    assert code == 1 and "\n" not in out["msg"] and not out["msg"].startswith(jc.UNREACHABLE)
    assert f"{lock}: is a symlink" in out["msg"]


def test_do_logs_never_prints_the_file_a_symlinked_driver_log_points_to(ray, ray_config, capsys, head):
    running(capsys, ray, ray_config)
    ray.logs[SID] = ""  # Ray has no log (the driver's node died): the record's copy is what there is
    (head / "shadow").write_text("root:HEAD-ONLY-CONTENT\n")
    driver_log = os.path.join(record(ray_config), "logs", "driver.log")
    os.symlink(head / "shadow", driver_log)
    code, out = run(capsys, action="logs", submission_id=SID, ray_config=ray_config)
    assert code == 0 and "HEAD-ONLY-CONTENT" not in json.dumps(out)
    assert out["log_tail"] == "" and "logs/driver.log: is a symlink" in out["progress"]


def test_do_logs_replaces_a_symlinked_driver_log_with_rays_and_leaves_its_target(ray, ray_config, capsys, head):
    running(capsys, ray, ray_config)
    ray.logs[SID] = LOG
    (head / "shadow").write_text("root:HEAD-ONLY-CONTENT\n")
    driver_log = os.path.join(record(ray_config), "logs", "driver.log")
    os.symlink(head / "shadow", driver_log)
    code, out = run(capsys, action="logs", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["log_tail"].endswith("done") and SECRET not in out["log_tail"]
    assert not os.path.islink(driver_log) and (head / "shadow").read_text() == "root:HEAD-ONLY-CONTENT\n"


@pytest.mark.parametrize(("field", "value"), [
    ("progress", {"step": 1, "step_at": 1, "log_bytes": 1, "log_at": 1, "step_s": [1e308]}),
    ("progress", {"step": 1, "step_at": 1, "log_bytes": 1, "log_at": 1, "step_s": [float("nan")]}),
    ("progress", {"step": 1, "step_at": "soon", "log_bytes": 1, "log_at": 1, "step_s": []}),
    ("stall", {"since": [1], "action": "report"}),
    ("submitted_at", 10 ** 400),
    ("timeouts", {"pending_s": 120, "max_run_s": None, "stall_s": 10 ** 400, "on_stall": "report"}),
], ids=["step_s-huge", "step_s-nan", "step_at-text", "stall-since-list", "submitted_at-400-digits",
        "stall_s-400-digits"])
def test_a_status_field_of_the_wrong_type_or_range_rebuilds_the_record_never_blames_ray(ray, ray_config, capsys,
                                                                                        field, value):
    running(capsys, ray, ray_config)
    ray.logs[SID] = LOG
    run(capsys, action="status", submission_id=SID, ray_config=ray_config)
    status = dict(status_json(ray_config), **{field: value})
    with open(os.path.join(record(ray_config), "status.json"), "w", encoding="utf-8") as handle:
        json.dump(status, handle)
    ray.clock.now += 100
    for action in ("wait", "status", "watch"):
        args = {"submission_id": SID} if action != "watch" else {}
        _, out = run(capsys, action=action, ray_config=ray_config, **args)
        msg = out.get("msg") or ""
        assert "\n" not in msg and jc.UNREACHABLE not in msg and "failed on the head" not in msg, (action, msg)
    assert glob.glob(os.path.join(record(ray_config), "status.json.untrusted-*"))  # kept aside, then rebuilt


def test_an_error_of_the_module_itself_is_never_called_a_ray_connection_problem():
    try:
        _ = 1 - "soon"  # a TypeError raised in the module's own code
    except TypeError as exc:
        msg = runner.connection_problem(exc, {"ray_config": {"dashboard_url": "http://h:8265"}, "token_path": None})
    assert not msg.startswith(jc.UNREACHABLE) and "\n" not in msg
    assert msg.startswith("ray_job failed on the head, not in Ray: TypeError at test_share_data.py:")
    refused = ConnectionError("Failed to connect")
    assert runner.connection_problem(refused, {"ray_config": {"dashboard_url": "http://h:8265"},
                                               "token_path": None}).startswith(jc.UNREACHABLE)


def test_a_job_written_preflight_json_goes_into_status_json_known_fields_only_bounded_and_redacted(
        ray, ray_config, capsys):
    running(capsys, ray, ray_config)
    preflight = {"ok": True, "code_id": f"verl-0.9.1 {SECRET}", "verl_version": "v" * 5000,
                 "environ": {"MY_DB": "hunter2-hunter2"}, "verl_file": ["not", "a", "string"]}
    with open(os.path.join(record(ray_config), "preflight.json"), "w", encoding="utf-8") as handle:
        json.dump(preflight, handle)
    ray.set(SID, "SUCCEEDED", end_time=int(ray.clock.now * 1000) + 5, driver_exit_code=0)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    kept = status_json(ray_config)["preflight"]
    assert code == 0 and out["done"]
    assert kept == {"ok": True, "code_id": "verl-0.9.1 <redacted>", "verl_version": "v" * jr.PREFLIGHT_TEXT_CAP}
    assert "hunter2" not in json.dumps(status_json(ray_config))


def test_a_preflight_json_over_its_cap_is_not_copied(ray, ray_config, capsys):
    running(capsys, ray, ray_config)
    with open(os.path.join(record(ray_config), "preflight.json"), "w", encoding="utf-8") as handle:
        json.dump({"ok": True, "pad": "x" * jr.PREFLIGHT_CAP}, handle)
    ray.set(SID, "SUCCEEDED", end_time=int(ray.clock.now * 1000) + 5, driver_exit_code=0)
    code, _ = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and status_json(ray_config)["preflight"] is None


def test_a_symlinked_preflight_json_is_never_copied(ray, ray_config, capsys, head):
    running(capsys, ray, ray_config)
    (head / "head.json").write_text(json.dumps({"ok": True, "code_id": "HEAD-ONLY"}))
    os.symlink(head / "head.json", os.path.join(record(ray_config), "preflight.json"))
    ray.set(SID, "SUCCEEDED", end_time=int(ray.clock.now * 1000) + 5, driver_exit_code=0)
    code, _ = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and status_json(ray_config)["preflight"] is None


def test_a_symlinked_checkpoints_dir_is_never_chmodded(tmp_path, head):
    output = tmp_path / "jobs" / "x-1"
    output.mkdir(parents=True)
    os.chmod(head, 0o700)
    os.symlink(head, output / "checkpoints")
    with pytest.raises(jr.RecordError, match="checkpoints: is a symlink, not a directory of the record"):
        jr.ensure_layout(str(output))
    assert os.stat(head).st_mode & 0o777 == 0o700
