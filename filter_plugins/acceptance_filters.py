"""Filters giving acceptance.yml its two jobs' ray_job overrides (plugin_utils/acceptance.py)."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
from plugin_utils import acceptance

from ansible.module_utils.jobspec.fields import JobSpecError  # isort: skip


def ray_verl_acceptance_measure(submission_id, shared_root, python, payload_bytes=None, warmup=None, timed=None,
                                matmul_n=None):
    """The measuring job's overrides (id, code_path, entrypoint); one line naming a bad value's field."""
    try:
        return acceptance.measure_overrides(str(shared_root), str(submission_id), str(python), payload_bytes,
                                            warmup, timed, matmul_n)
    except (JobSpecError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from None


def ray_verl_acceptance_sft(submission_id, shared_root, nnodes, site_defaults=None):
    """The SFT job's overrides (id, nnodes, the tiny assets, its batch); one line naming a bad value's field."""
    try:
        return acceptance.sft_overrides(site_defaults, nnodes, str(shared_root), str(submission_id))
    except (JobSpecError, ValueError) as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"ray_verl_acceptance_measure": ray_verl_acceptance_measure,
                "ray_verl_acceptance_sft": ray_verl_acceptance_sft}
