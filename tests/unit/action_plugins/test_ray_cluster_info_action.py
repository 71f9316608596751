"""action_plugins/ray_cluster_info.py: the readiness wait on the control host (module calls faked)."""

import importlib.util
import os

import pytest

from plugin_utils import PROJECT_ROOT

ROOT = PROJECT_ROOT
_spec = importlib.util.spec_from_file_location(
    "action_ray_cluster_info", os.path.join(ROOT, "action_plugins", "ray_cluster_info.py"))
action = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action)

NOT_YET = {"ready": False, "missing": [("w1 (10.0.0.11): 2 ALIVE nodes on this IP, waiting for the replaced one "
                                        "to be declared dead")], "node_lines": ["head 10.0.0.10 ALIVE []"]}
UNREACHABLE = {"failed": True, "ready": False, "missing": ["cluster unreachable"],
               "msg": "cannot read the Ray cluster at http://h:8265: refused", "node_lines": []}


class Task:
    def __init__(self, args):
        self.args = args


class Inventory:
    """The variables the action reads for its connection defaults (auth off, so no token_path)."""

    def resolve_variable_expression(self, name):
        return {"ray_auth_enabled": False, "ray_python": "/opt/ray/bin/python", "ray_dashboard_url": "u"}[name]


def make(args, answers, monkeypatch, clock_step=5.0):
    """An ActionModule whose module calls return `answers` in turn; time moves clock_step per call."""
    now = [0.0]
    calls = []
    shown = []
    monkeypatch.setattr(action.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(action.display, "display", shown.append)
    monkeypatch.setattr(action.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    plugin = action.ActionModule.__new__(action.ActionModule)
    plugin._task = Task(args)
    plugin._templar = Inventory()

    def execute(module_name, module_args, task_vars):
        calls.append(dict(module_args))
        now[0] += clock_step
        return dict(answers.pop(0))

    plugin._execute_module = execute
    return plugin, calls, shown


def test_without_timeout_the_module_runs_once(monkeypatch):
    plugin, calls, shown = make({"dashboard_url": "u"}, [{"ready": False, "nodes": []}], monkeypatch)
    assert plugin.run(task_vars={}) == {"ready": False, "nodes": []}
    assert calls == [{"dashboard_url": "u"}] and shown == []


def test_waits_naming_the_worker_then_returns_when_ready(monkeypatch):
    answers = [UNREACHABLE, NOT_YET, {"ready": True, "nodes": [1]}]
    plugin, calls, shown = make({"dashboard_url": "u", "timeout_s": "120"}, answers, monkeypatch)
    result = plugin.run(task_vars={"inventory_hostname": "lab-head"})
    assert result == {"ready": True, "nodes": [1]}
    assert [c["wait_s"] for c in calls] == [10, 10, 10] and all("timeout_s" not in c for c in calls)
    assert shown == ["lab-head: readiness 5/120 s, waiting for cannot read the Ray cluster at http://h:8265: refused",
                     ("lab-head: readiness 10/120 s, waiting for w1 (10.0.0.11): 2 ALIVE nodes on this IP, waiting "
                      "for the replaced one to be declared dead")]


def test_fails_after_the_timeout_naming_what_is_missing(monkeypatch):
    plugin, calls, _ = make({"dashboard_url": "u", "timeout_s": 12}, [NOT_YET, NOT_YET, NOT_YET], monkeypatch)
    result = plugin.run(task_vars={})
    assert result["failed"] and result["msg"].startswith("1 worker(s) not ready after 12 s: w1 (10.0.0.11): 2 ALIVE")
    assert "The cluster sees: head 10.0.0.10 ALIVE []" in result["msg"]
    # The last call only looks for what is left of the timeout.
    assert [c["wait_s"] for c in calls] == [10, 7, 2]


@pytest.mark.parametrize("failure", [{"failed": True, "msg": "no module named ray"}])
def test_a_failure_other_than_unreachable_is_final(monkeypatch, failure):
    plugin, calls, _ = make({"dashboard_url": "u", "timeout_s": 60}, [failure], monkeypatch)
    assert plugin.run(task_vars={}) == failure and len(calls) == 1
