"""Scheduled runs on the control host, validated and rendered for cron and for systemd (roles/regression_schedule).

Two kinds share the mechanism: `regression`, the nightly suite (scripts/regression.py at a time of day;
schedule.yml), and `watch`, the job watcher (scripts/watch.py every few minutes; watch_schedule.yml).

Every value may come from -e or a site file, so each is checked against a strict rule before it
reaches a cron line or a unit file (where a newline adds a command and a systemd specifier runs
as root). A refusal is one line naming the setting and its rule, never the value (it may be a secret
given by mistake). Paths and names that pass the rules need no quoting, and they are quoted anyway.
A name must start with ray-verl-<kind>: the units and the cron entry can never be a system unit's,
or the other kind's, so state=absent removes only what this kind installed.
"""

import re
import shlex

from ansible.module_utils.base import conventions

_TIME = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")
_PATH = re.compile(r"/[A-Za-z0-9._/+@-]*")
KINDS = ("regression", "watch")
STATES = ("present", "absent")
BACKENDS = ("auto", "systemd", "cron")
NAME_PREFIX = "ray-verl-"
# Minutes that divide the hour: cron's */N then runs every N minutes, as the systemd timer does.
EVERY_MIN = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
MANAGED = "# Ansible managed"  # the first line of each unit file, as the role's templates once wrote it


class ScheduleError(ValueError):
    """One line naming the bad setting and its rule."""

    def __init__(self, field, rule):
        super().__init__(f"{field}: {rule}")


def _path(field, value):
    value = str(value)
    if not _PATH.fullmatch(value) or "/../" in value + "/" or "//" in value:
        raise ScheduleError(field, "must be an absolute path of letters, digits and ._-/+@ (no '..')")
    return value


def _whole(field, value, low, high):
    if isinstance(value, bool) or not str(value).isdigit() or not low <= int(value) <= high:
        raise ScheduleError(field, f"must be a whole number from {low} to {high}")
    return int(value)


def _common(kind, state, backend, name, keep, project_dir, inventory):
    """The settings both kinds have, checked in the order a reader meets them; their field names carry the kind."""
    prefix = f"{kind}_schedule_"
    if state not in STATES:
        raise ScheduleError(prefix + "state", "must be present or absent")
    if backend not in BACKENDS:
        raise ScheduleError(prefix + "backend", "must be auto, systemd or cron")
    if not conventions.matches(conventions.NAME_RULE, name) or not name.startswith(NAME_PREFIX + kind):
        raise ScheduleError(prefix + "name", f"must start with {NAME_PREFIX}{kind} and be {conventions.NAME_RULE[1]}")
    keep = _whole(prefix + "keep", keep, 1, 10000)
    project_dir = _path(prefix + "project_dir", project_dir)
    return {"kind": kind, "state": state, "backend": backend, "name": name,
            "python": f"{project_dir}/.venv/bin/python", "project_dir": project_dir,
            "inventory": _path(prefix + "inventory", inventory), "keep": str(keep)}


def _regression(state, backend, time, suite, inventory, keep, name, project_dir, every_min=None):
    settings = _common("regression", state, backend, name, keep, project_dir, inventory)
    match = _TIME.fullmatch(str(time))
    if not match:
        raise ScheduleError("regression_schedule_time", "must be HH:MM (24-hour)")
    if not conventions.matches(conventions.NAME_RULE, suite):
        raise ScheduleError("regression_schedule_suite", f"must be {conventions.NAME_RULE[1]}")
    hour, minute = int(match.group(1)), int(match.group(2))
    return {**settings, "hour": hour, "minute": minute, "time": str(time), "suite": suite,
            "argv": [settings["python"], f"{settings['project_dir']}/scripts/regression.py", "--suite", suite,
                     "--inventory", settings["inventory"], "--keep", settings["keep"]],
            "cron": {"minute": str(minute), "hour": str(hour)}, "log_append": True,
            "description": f"ray-verl regression suite {suite}",
            "timer_description": f"Daily ray-verl regression ({suite})",
            "timer": [f"OnCalendar=*-*-* {time}:00", "Persistent=true"]}


def _watch(state, backend, every_min, inventory, keep, name, project_dir, time=None, suite=None):
    settings = _common("watch", state, backend, name, keep, project_dir, inventory)
    if isinstance(every_min, bool) or not str(every_min).isdigit() or int(every_min) not in EVERY_MIN:
        raise ScheduleError("watch_schedule_every_min", f"must be a number of minutes that divides the hour: "
                                                        f"{', '.join(map(str, EVERY_MIN))}")
    every = int(every_min)
    return {**settings, "every_min": every,
            # --heal: a pass that finds the head down runs up.yml (a head with a GCS store comes back to its jobs).
            "argv": [settings["python"], f"{settings['project_dir']}/scripts/watch.py",
                     "--inventory", settings["inventory"], "--keep", settings["keep"], "--heal"],
            # The log holds the last pass's output only: the passes' history is scripts/watch.py's own (bounded).
            "cron": {"minute": f"*/{every}", "hour": "*"}, "log_append": False,
            "description": "ray-verl job watcher (watch.yml)",
            "timer_description": f"ray-verl job watcher every {every} min",
            "timer": [f"OnBootSec={every}min", f"OnUnitActiveSec={every}min"]}


def settle(kind="regression", **values):
    """The validated settings of one kind, with the runner's argv; raises ScheduleError naming the first bad one.

    values are the role's regression_schedule_* without the prefix; each kind takes the ones it uses.
    """
    if kind not in KINDS:
        raise ScheduleError("regression_schedule_kind", "must be regression or watch")
    return (_regression if kind == "regression" else _watch)(**values)


def cron_job(settings):
    """The cron entry's command: argv quoted for /bin/sh, output to /var/log/<name>.log.

    cron turns an unescaped % into a newline: the rules above keep % out, and it is escaped anyway.
    """
    redirect = ">>" if settings.get("log_append", True) else ">"
    line = f"{shlex.join(settings['argv'])} {redirect} {shlex.quote('/var/log/' + settings['name'] + '.log')} 2>&1"
    return line.replace("%", "\\%")


def systemd_exec(settings):
    """ExecStart= for the unit: each argument double-quoted, with systemd's % and $ escaped."""
    def quote(arg):
        escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
        return f'"{escaped}"'

    return " ".join(quote(arg) for arg in settings["argv"])


def systemd_unit(settings, which):
    """The text of <name>.service or <name>.timer (which: service or timer)."""
    if which == "service":
        lines = ["[Unit]", f"Description={settings['description']}", "", "[Service]", "Type=oneshot",
                 f"ExecStart={systemd_exec(settings)}"]
    elif which == "timer":
        lines = ["[Unit]", f"Description={settings['timer_description']}", "", "[Timer]", *settings["timer"], "",
                 "[Install]", "WantedBy=timers.target"]
    else:
        raise ValueError(f"a unit is a service or a timer, not {which!r}")
    return "\n".join([MANAGED, *lines]) + "\n"
