"""Action for import.yml: a verl launch script read as text (never run) into jobspecs/<spec>.yaml, on the control host.

The work is plugin_utils/verl_import.py's (the spec from the script) over plugin_utils/verl_script.py (the script's
words); this file takes the task's options and says, in the result's `lines`, where each word of the script went.
A bad input is one line, `msg`, naming the file (and the line) and what is wrong. In check mode nothing is written.
"""

import os
import sys

from ansible.plugins.action import ActionBase

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import PROJECT_ROOT, verl_import

ARGUMENT_SPEC = {"script": {"type": "str"}, "spec": {"type": "str"}, "command": {"type": "raw"},
                 "force": {"type": "bool", "default": False}, "specs_dir": {"type": "str"}}


def _command(value):
    """-e command=N as a number, or None when not given (verl_import says which numbers there are)."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    return int(text) if text.isdigit() else text


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        for name, how in (("script", "-e script=PATH (a verl launch script)"),
                          ("spec", "-e spec=NAME (the spec to write: jobspecs/NAME.yaml)")):
            if not args[name]:
                return {**result, "failed": True, "msg": f"{name}: name it with {how}"}
        script = os.path.abspath(os.path.expanduser(args["script"]))
        specs_dir = args["specs_dir"] or os.path.join(PROJECT_ROOT, "jobspecs")
        try:
            imported, path = verl_import.import_script(
                script, args["spec"], specs_dir, command=_command(args["command"]), force=args["force"],
                write_file=not self._task.check_mode)
        except verl_import.ScriptError as exc:
            return {**result, "failed": True, "msg": str(exc)}
        target = path or os.path.join(specs_dir, args["spec"] + ".yaml")
        done = f"wrote {target}" if path else f"check mode: {target} not written"
        return {**result, "changed": bool(path), "path": target, "workload": imported.workload,
                "lines": [*imported.lines, done]}
