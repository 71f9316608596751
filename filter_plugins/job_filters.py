"""Filters exposing the ray_job options table (module_utils/jobs/options.py) to playbooks."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.jobs import options  # isort: skip


def ray_verl_checked_job_action(value, field="do"):
    """value when it is something a person asks of one job (job.yml); else one line naming field and the choices."""
    if value not in options.PER_JOB:
        raise AnsibleFilterError(f"{field}: must be one of {', '.join(options.PER_JOB)}")
    return value


class FilterModule:
    def filters(self):
        return {"ray_verl_checked_job_action": ray_verl_checked_job_action}
