"""Filters of the regression_schedule role (the nightly regression and the job watcher): validated settings,
a cron job, the unit files' text."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import schedule


def regression_schedule(values):
    """The role's settings (a dict of regression_schedule_* without the prefix, with its kind), validated."""
    try:
        return schedule.settle(**values)
    except schedule.ScheduleError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"regression_schedule": regression_schedule,
                "regression_schedule_cron_job": schedule.cron_job,
                "regression_schedule_unit": schedule.systemd_unit}
