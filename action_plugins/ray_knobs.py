"""Action for ray_knobs: the -e knobs a play takes, read from this run's command line as data (never templated) and
checked, each against its one rule (plugin_utils/knobs.py). Plays use the result, never the knob's own variable.

  - name: Cordon | Read the -e knobs (data: never templated)
    ray_knobs:
      knobs: [host, state, why, force]    # or {key: knob}: the result's key for each knob
      required: [host]
    register: cordon_args                  # cordon_args.host, cordon_args.state, ...

A knob not given takes the site's variable it stands for (the inventory's, a role's default) or its default. A bad
value fails the task with one line naming each bad knob and its rule, never the value. The result's keys are the
knobs'; a -e that sets the registered variable itself is refused (it would replace the checked values).
"""

import os
import sys

from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import knobs, ray_action

ARGUMENT_SPEC = {"knobs": {"type": "raw", "required": True}, "required": {"type": "list", "elements": "str",
                                                                          "default": []}}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        wanted = args["knobs"] if isinstance(args["knobs"], dict) else {name: name for name in args["knobs"]}
        unknown = sorted(set(wanted.values()) - set(knobs.KNOBS))
        if unknown:  # the playbook's own mistake
            return {**result, "failed": True, "msg": f"ray_knobs: no such knob: {', '.join(unknown)}"}
        try:
            # The site's variable is templated only when the knob was not given: then it is the site's configuration.
            read = knobs.read(load_extra_vars(self._loader), wanted,
                              lambda var: ray_action.inventory_value(self._templar, var),
                              required=args["required"], reserved=[self._task.register] if self._task.register else [])
        except knobs.KnobError as exc:
            return {**result, "failed": True, "msg": str(exc)}
        return {**result, "changed": False, **read}
