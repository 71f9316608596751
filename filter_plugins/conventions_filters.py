"""Filters exposing the project's conventions (module_utils/base/conventions.py) to roles and playbooks."""

import os
import sys

from ansible.errors import AnsibleFilterError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the bootstrap: see plugin_utils
import plugin_utils  # noqa: F401 - ansible.module_utils.<helper> from here on

from ansible.module_utils.base import conventions  # isort: skip


def ray_verl_paths(shared_root):
    """Where jobs, code snapshots, the smoke probe and plugins live under a shared root, and the marker's name."""
    return conventions.paths(str(shared_root))


def ray_verl_checked_id(value, field):
    """value when it follows the id rule (a plain path component); else one line naming field (conventions.check_id)."""
    try:
        return conventions.check_id(field, value)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"ray_verl_paths": ray_verl_paths, "ray_verl_checked_id": ray_verl_checked_id}
