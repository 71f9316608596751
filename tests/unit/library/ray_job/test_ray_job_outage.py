"""Issue 20: a head with a GCS store comes back and still knows its jobs. Whoever follows a job waits for it
(within the store's reconnect window) without finalising anything, and the record lists each outage it lived
through: seen by a follower, by up.yml's reconcile, or at the end."""

import pytest
from ansible.module_utils.base import ray_cluster as rc
from ray_job_harness import HEAD, SID, WORKER, action, files, make_action, make_spec, module_result, record, run

WINDOW_S = 600


def restarted_head(monkeypatch, started_ms):
    head = dict(HEAD, start_time_ms=started_ms)
    monkeypatch.setattr(rc, "list_nodes", lambda url: [head, WORKER])


def running(capsys, ray, ray_config):
    code, _ = run(capsys, spec=make_spec(ray_config), ray_config=ray_config)
    assert code == 0
    started = int(ray.clock.now * 1000)
    ray.set(SID, "RUNNING", driver_node_id="n-w1", start_time=started)
    return started


def status_of(capsys, ray_config):
    return module_result(capsys, action="status", submission_id=SID, ray_config=ray_config)["status"]


def test_a_job_the_head_came_back_to_lists_the_outage_when_it_ends(ray, ray_config, capsys, monkeypatch):
    started = running(capsys, ray, ray_config)
    restarted_head(monkeypatch, started + 90_000)
    ray.set(SID, "SUCCEEDED", driver_exit_code=0, end_time=started + 200_000)
    code, out = run(capsys, action="wait", submission_id=SID, ray_config=ray_config)
    assert code == 0 and out["state"] == "SUCCEEDED" and not out["status"]["attempts"]
    [outage] = out["status"]["outages"]
    assert outage["to"] == started + 90_000 and outage["seen_by"] == "finalize"
    assert started <= outage["from"] < outage["to"] and outage["seconds"] == (outage["to"] - outage["from"]) / 1000


def test_reconcile_notes_the_outage_of_every_open_job_and_finalises_none(ray, ray_config, capsys, monkeypatch):
    started = running(capsys, ray, ray_config)
    restarted_head(monkeypatch, started + 30_000)
    code, out = run(capsys, action="reconcile", ray_config=ray_config)
    assert code == 0 and out["changed"] and out["outages"] == [SID] and out["finalized"] == []
    assert "1 lived through the head's outage" in out["msg"]
    status = status_of(capsys, ray_config)
    assert status["state"] == "RUNNING" and not status["final"]
    assert [o["seen_by"] for o in status["outages"]] == ["reconcile"]
    code, again = run(capsys, action="reconcile", ray_config=ray_config)  # noted once
    assert code == 0 and not again["changed"] and "outages" not in again


def test_a_head_that_ran_since_before_the_job_started_is_no_outage(ray, ray_config, capsys, monkeypatch):
    started = running(capsys, ray, ray_config)
    restarted_head(monkeypatch, started - 5_000)
    before = files(record(ray_config))
    code, out = run(capsys, action="reconcile", ray_config=ray_config)
    assert code == 0 and not out["changed"] and files(record(ray_config)) == before


def test_a_follower_waits_through_the_outage_and_notes_when_it_last_saw_the_job(ray, ray_config, capsys,
                                                                                monkeypatch):
    started = running(capsys, ray, ray_config)
    clock = {"now": started / 1000}
    monkeypatch.setattr(action.time, "time", lambda: clock["now"])
    monkeypatch.setattr(action.time, "sleep", lambda s: clock.update(now=clock["now"] + s))
    polls = []

    def executor(module_name, module_args, task_vars):
        polls.append(dict(module_args))
        n = len(polls)
        if n in (2, 3, 4):  # the head is down: the module on it cannot reach Ray's job API
            return {"failed": True, "msg": "cannot talk to Ray's job API at x: refused"}
        if n == 5:
            restarted_head(monkeypatch, int(clock["now"] * 1000) - 1000)
        if n == 7:
            ray.set(SID, "SUCCEEDED", driver_exit_code=0, end_time=int(clock["now"] * 1000))
        args = {k: v for k, v in module_args.items() if k != "token_path"}
        return module_result(capsys, **args)

    shown = []
    monkeypatch.setattr(action.display, "display", shown.append)
    config = dict(ray_config, head_outage_s=WINDOW_S)
    plugin = make_action({"action": "wait", "submission_id": SID, "poll_s": 5},
                         {"ray_config": config, "ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python"},
                         executor)
    result = plugin.run(task_vars={"inventory_hostname": "head"})
    assert result["state"] == "SUCCEEDED" and not result.get("failed")
    waiting = [line for line in shown if "cannot be reached" in line]
    assert len(waiting) == 3 and "waiting up to 600s" in waiting[0]
    assert "last_seen_ms" not in polls[4] and polls[5]["last_seen_ms"] == started  # once, after the outage
    [outage] = result["status"]["outages"]
    assert outage["seen_by"] == "wait" and outage["from"] == started


@pytest.mark.parametrize("window_s, message", [(0, "cannot talk to Ray's job API at x: refused"),
                                               (WINDOW_S, "Ray does not know this job")])
def test_without_a_store_or_for_another_failure_a_failed_poll_still_fails(window_s, message, monkeypatch):
    outage = action.HeadOutage(window_s, clock=lambda: 0)
    assert outage.unreachable({"failed": True, "msg": message}) is None


def test_the_wait_ends_when_the_window_has_passed():
    now = {"t": 1000.0}
    outage = action.HeadOutage(WINDOW_S, clock=lambda: now["t"])
    down = {"failed": True, "msg": "cannot talk to Ray's job API at http://10.0.0.10:8265: ConnectionError: refused"}
    assert outage.unreachable(down)
    now["t"] += WINDOW_S
    assert "600s" in outage.unreachable(down)
    now["t"] += 1
    assert outage.unreachable(down) is None
    assert outage.unreachable({"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr"}) is None  # still past
    # The poll's own process killed with the head's counts as unreachable too.
    fresh = action.HeadOutage(WINDOW_S, clock=lambda: now["t"])
    assert fresh.unreachable({"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr"})
