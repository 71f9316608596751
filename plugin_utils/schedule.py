"""The nightly regression's schedule, validated and rendered for cron and for systemd.

Every value may come from -e or a site file, so each is checked against a strict rule before it
reaches a cron line or a unit file (where a newline adds a command and a systemd specifier runs
as root). Paths and names that pass the rules need no quoting, and they are quoted anyway.
"""

import re
import shlex

from ansible.module_utils import conventions

_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
_PATH = re.compile(r"/[A-Za-z0-9._/+@-]*")
STATES = ("present", "absent")
BACKENDS = ("auto", "systemd", "cron")


class ScheduleError(ValueError):
    """One line naming the bad setting and its value."""

    def __init__(self, field, rule, value):
        super().__init__(f"{field}: {rule}, got {conventions.one_line(repr(value), 120)}")


def _path(field, value):
    value = str(value)
    if not _PATH.fullmatch(value) or "/../" in value + "/" or "//" in value:
        raise ScheduleError(field, "must be an absolute path of letters, digits and ._-/+@ (no '..')", value)
    return value


def settle(state, backend, time, suite, inventory, keep, name, project_dir):
    """The validated settings and the runner's argv; raises ScheduleError naming the first bad one."""
    if state not in STATES:
        raise ScheduleError("regression_schedule_state", "must be present or absent", state)
    if backend not in BACKENDS:
        raise ScheduleError("regression_schedule_backend", "must be auto, systemd or cron", backend)
    match = _TIME.fullmatch(str(time))
    if not match:
        raise ScheduleError("regression_schedule_time", "must be HH:MM (24-hour)", time)
    for field, value in (("regression_schedule_suite", suite), ("regression_schedule_name", name)):
        if not conventions.matches(conventions.NAME_RULE, value):
            raise ScheduleError(field, f"must be {conventions.NAME_RULE[1]}", value)
    if isinstance(keep, bool) or not str(keep).isdigit() or not 1 <= int(keep) <= 10000:
        raise ScheduleError("regression_schedule_keep", "must be a whole number from 1 to 10000", keep)
    project_dir = _path("regression_schedule_project_dir", project_dir)
    argv = [f"{project_dir}/.venv/bin/python", f"{project_dir}/scripts/regression.py", "--suite", suite,
            "--inventory", _path("regression_schedule_inventory", inventory), "--keep", str(int(keep))]
    return {"state": state, "backend": backend, "hour": int(match.group(1)), "minute": int(match.group(2)),
            "time": str(time), "suite": suite, "name": name, "argv": argv}


def cron_job(settings):
    """The cron entry's command: argv quoted for /bin/sh, output to /var/log/<name>.log.

    cron turns an unescaped % into a newline: the rules above keep % out, and it is escaped anyway.
    """
    line = f"{shlex.join(settings['argv'])} >> {shlex.quote('/var/log/' + settings['name'] + '.log')} 2>&1"
    return line.replace("%", "\\%")


def systemd_exec(settings):
    """ExecStart= for the unit: each argument double-quoted, with systemd's % and $ escaped."""
    def quote(arg):
        escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
        return f'"{escaped}"'

    return " ".join(quote(arg) for arg in settings["argv"])
