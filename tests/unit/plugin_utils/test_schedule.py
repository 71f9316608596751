"""plugin_utils/schedule.py: the scheduled runs (nightly regression, job watcher) never write a caller's line."""

import shlex

import pytest

from plugin_utils import schedule

GOOD = {"state": "present", "backend": "auto", "time": "02:30", "suite": "lab", "inventory": "/srv/rv/inventory/lab",
        "keep": 14, "name": "ray-verl-regression", "project_dir": "/srv/rv"}


def test_good_settings_give_the_runner_argv():
    settings = schedule.settle(**GOOD)
    assert settings["hour"] == 2 and settings["minute"] == 30
    assert settings["argv"] == ["/srv/rv/.venv/bin/python", "/srv/rv/scripts/regression.py", "--suite", "lab",
                                "--inventory", "/srv/rv/inventory/lab", "--keep", "14"]
    assert schedule.settle(**{**GOOD, "keep": "5"})["argv"][-1] == "5"  # -e values arrive as strings


@pytest.mark.parametrize("field,value", [
    ("suite", "lab; rm -rf /"), ("suite", "lab\n* * * * * root /tmp/evil"), ("suite", "../etc/passwd"),
    ("suite", ""), ("name", "x\nExecStartPre=/tmp/evil"), ("name", "a/b"), ("name", "%n"),
    ("time", "02:30\n* * * * *"), ("time", "25:00"), ("time", 150), ("time", "2:30"),
    ("inventory", "/srv/my inventory"), ("inventory", "/srv/../etc"), ("inventory", "relative/path"),
    ("inventory", "/srv/%h"), ("inventory", "/srv/$HOME"), ("project_dir", "/srv/rv;id"),
    ("keep", "5; id"), ("keep", 0), ("keep", True), ("keep", -1), ("state", "latest"), ("backend", "at"),
])
def test_a_bad_value_is_refused_naming_the_setting(field, value):
    with pytest.raises(schedule.ScheduleError) as exc:
        schedule.settle(**{**GOOD, field: value})
    message = str(exc.value)
    assert message.startswith(f"regression_schedule_{field}: ") and "\n" not in message


def test_cron_job_is_quoted_for_the_shell_and_escapes_percent():
    settings = schedule.settle(**GOOD)
    job = schedule.cron_job(settings)
    assert job == ("/srv/rv/.venv/bin/python /srv/rv/scripts/regression.py --suite lab --inventory "
                   "/srv/rv/inventory/lab --keep 14 >> /var/log/ray-verl-regression.log 2>&1")
    # Quoting holds even for values the rules would refuse (the rules come first).
    odd = dict(settings, argv=["/p y/python", "50%"])
    assert shlex.split(schedule.cron_job(odd).split(" >> ")[0].replace("\\%", "%")) == ["/p y/python", "50%"]
    assert "\\%" in schedule.cron_job(odd)


def test_systemd_exec_quotes_and_escapes_specifiers():
    settings = schedule.settle(**GOOD)
    assert schedule.systemd_exec(settings).startswith('"/srv/rv/.venv/bin/python" "/srv/rv/scripts/regression.py"')
    odd = dict(settings, argv=['a"b', "%h", "$X", "c\\d"])
    assert schedule.systemd_exec(odd) == '"a\\"b" "%%h" "$$X" "c\\\\d"'


def test_regression_units_are_the_ones_it_always_wrote():
    settings = schedule.settle(**GOOD)
    assert settings["kind"] == "regression" and settings["cron"] == {"minute": "30", "hour": "2"}
    assert schedule.systemd_unit(settings, "service") == (
        "# Ansible managed\n[Unit]\nDescription=ray-verl regression suite lab\n\n[Service]\nType=oneshot\n"
        'ExecStart="/srv/rv/.venv/bin/python" "/srv/rv/scripts/regression.py" "--suite" "lab" '
        '"--inventory" "/srv/rv/inventory/lab" "--keep" "14"\n')
    assert schedule.systemd_unit(settings, "timer") == (
        "# Ansible managed\n[Unit]\nDescription=Daily ray-verl regression (lab)\n\n"
        "[Timer]\nOnCalendar=*-*-* 02:30:00\nPersistent=true\n\n[Install]\nWantedBy=timers.target\n")
    with pytest.raises(ValueError):
        schedule.systemd_unit(settings, "socket")


@pytest.mark.parametrize("name", ["ssh", "cron", "systemd-journald", "nightly", "ray-verl", "ray-verl-watch"])
def test_a_regression_name_outside_ray_verl_regression_is_refused(name):
    """state=absent removes <name>.service and .timer: a name can never be a system unit's, nor the watcher's."""
    with pytest.raises(schedule.ScheduleError, match="^regression_schedule_name: must start with ray-verl-regression"):
        schedule.settle(**{**GOOD, "name": name})
    assert schedule.settle(**{**GOOD, "name": "ray-verl-regression-gpu"})["name"] == "ray-verl-regression-gpu"


# The job watcher: scripts/watch.py every few minutes (watch_schedule.yml).

WATCH = {"kind": "watch", "state": "present", "backend": "auto", "every_min": 5, "inventory": "/srv/rv/inventory/lab",
         "keep": 48, "name": "ray-verl-watch", "project_dir": "/srv/rv",
         "time": "02:30", "suite": "lab"}  # the role passes every setting; the watcher ignores the regression's


def test_the_watcher_runs_every_n_minutes():
    settings = schedule.settle(**{**WATCH, "every_min": "10"})  # -e values arrive as strings
    assert settings["argv"] == ["/srv/rv/.venv/bin/python", "/srv/rv/scripts/watch.py",
                                "--inventory", "/srv/rv/inventory/lab", "--keep", "48", "--heal"]
    assert settings["cron"] == {"minute": "*/10", "hour": "*"} and settings["every_min"] == 10
    # Its log is the last pass's output only (cron truncates it): the history is scripts/watch.py's, bounded.
    assert schedule.cron_job(settings) == ("/srv/rv/.venv/bin/python /srv/rv/scripts/watch.py --inventory "
                                           "/srv/rv/inventory/lab --keep 48 --heal > /var/log/ray-verl-watch.log 2>&1")
    assert schedule.systemd_unit(settings, "service") == (
        "# Ansible managed\n[Unit]\nDescription=ray-verl job watcher (watch.yml)\n\n[Service]\nType=oneshot\n"
        'ExecStart="/srv/rv/.venv/bin/python" "/srv/rv/scripts/watch.py" "--inventory" "/srv/rv/inventory/lab" '
        '"--keep" "48" "--heal"\n')
    assert schedule.systemd_unit(settings, "timer") == (
        "# Ansible managed\n[Unit]\nDescription=ray-verl job watcher every 10 min\n\n"
        "[Timer]\nOnBootSec=10min\nOnUnitActiveSec=10min\n\n[Install]\nWantedBy=timers.target\n")


def test_the_watcher_ignores_the_regression_settings():
    settings = schedule.settle(**{**WATCH, "time": "not a time", "suite": "x; id"})
    assert "suite" not in settings and "time" not in settings
    assert schedule.settle(**{**WATCH, "every_min": 1})["cron"]["minute"] == "*/1"


SECRET = "sekrit-9f3a"


@pytest.mark.parametrize("field,value", [
    ("every_min", 7), ("every_min", 0), ("every_min", 60), ("every_min", "5; id"), ("every_min", "*/5"),
    ("every_min", True), ("every_min", "5\n* * * * * root id"), ("every_min", -5), ("every_min", None),
    ("name", "ssh"), ("name", "cron"), ("name", "ray-verl-regression"), ("name", "ray-verl-watch/../x"),
    ("name", "ray-verl-watch\nExecStartPre=/tmp/evil"), ("name", "ray-verl-watch%n"), ("name", None),
    ("inventory", "inventory/lab"), ("inventory", "/srv/../etc"), ("inventory", "/srv/$HOME"),
    ("inventory", f"/srv/{SECRET} x"), ("project_dir", "/srv/rv;id"), ("keep", 0), ("keep", "48; id"),
    ("keep", False), ("state", "latest"), ("backend", "at"),
])
def test_a_bad_watcher_value_is_refused_naming_the_setting_and_never_echoed(field, value):
    with pytest.raises(schedule.ScheduleError) as exc:
        schedule.settle(**{**WATCH, field: value})
    message = str(exc.value)
    assert message.startswith(f"watch_schedule_{field}: ") and "\n" not in message
    assert SECRET not in message and (not isinstance(value, str) or len(value) < 4 or value not in message)


def test_an_unknown_kind_is_refused():
    with pytest.raises(schedule.ScheduleError, match="^regression_schedule_kind: must be regression or watch$"):
        schedule.settle(**{**WATCH, "kind": "backup"})
