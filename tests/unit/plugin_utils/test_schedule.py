"""plugin_utils/schedule.py: the nightly regression's settings never write a line of the caller's choosing."""

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
