"""Action for ray_cluster_info: the readiness wait runs here, on the control host, so it can say
which workers it still waits for while it waits (a module cannot print until it returns)."""

import os
import sys
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import ray_action

display = Display()

# Each module call looks for up to this long before it returns to print a progress line.
POLL_S = 10


def waiting_line(host, elapsed, timeout, result):
    """One progress line: what the gate still waits for."""
    reasons = result.get("missing") or [result.get("msg") or "no answer"]
    if result.get("missing") == ["cluster unreachable"] and result.get("msg"):
        reasons = [result["msg"]]
    return "{}: readiness {:.0f}/{:.0f} s, waiting for {}".format(host, elapsed, timeout, "; ".join(reasons))


def not_ready_message(timeout, result):
    missing = result.get("missing") or ["cluster unreachable"]
    if missing == ["cluster unreachable"] and result.get("msg"):
        missing = [result["msg"]]
    seen = "; ".join(result.get("node_lines") or []) or "nothing"
    return "{} worker(s) not ready after {:g} s: {}. The cluster sees: {}".format(
        len(missing), timeout, "; ".join(missing), seen)


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        # The dashboard URL, token and Ray Python come from the inventory unless the task sets them.
        connection, python = ray_action.connection(self._templar, args, address="dashboard_url")
        args.pop("python", None)
        args.update(connection)
        task_vars = dict(task_vars, ansible_python_interpreter=python)
        timeout = args.pop("timeout_s", None)
        if not timeout:
            return self._execute_module(module_name="ray_cluster_info", module_args=args, task_vars=task_vars)
        timeout = float(timeout)
        host = task_vars.get("inventory_hostname", "")
        started = time.monotonic()
        while True:
            left = timeout - (time.monotonic() - started)
            args["wait_s"] = max(0.0, min(POLL_S, left))
            result = self._execute_module(module_name="ray_cluster_info", module_args=args, task_vars=task_vars)
            if result.get("ready"):
                return result
            # Only "cannot read the cluster" is worth waiting out; any other failure is final.
            if result.get("failed") and result.get("missing") != ["cluster unreachable"]:
                return result
            elapsed = time.monotonic() - started
            if elapsed >= timeout:
                result["failed"] = True
                result["msg"] = not_ready_message(timeout, result)
                return result
            display.display(waiting_line(host, elapsed, timeout, result))
