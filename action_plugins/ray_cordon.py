"""Action for ray_cordon: the cluster's ray_config, token, Ray Python and workers come from the inventory, and
a wait for Ray to hold the worker is announced before it starts (a module cannot print until it returns)."""

import os
import sys

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import ray_action

display = Display()


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        super().run(tmp, task_vars)
        args = dict(self._task.args)
        connection, python = ray_action.connection(self._templar, args, address="ray_config")
        args.pop("python", None)
        args.update(connection)
        # The inventory's workers by name (roles/project_defaults), for -e host=NAME and the cordons' lines.
        args.setdefault("workers", ray_action.inventory_value(self._templar, "ray_worker_addresses", {}) or {})
        wait_s = args.get("wait_s") or 0
        if wait_s and not self._task.check_mode and args.get("state", "present") != "absent":
            display.display(f"{task_vars.get('inventory_hostname', '')} | cordon: waiting up to {wait_s} s for Ray "
                            "to hold the cordoned workers (a job still running there keeps its GPUs until it ends)")
        return self._execute_module(module_name="ray_cordon", module_args=args,
                                    task_vars=dict(task_vars, ansible_python_interpreter=python))
