"""Filters exposing the project's conventions (module_utils/conventions.py) to roles and playbooks."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))
import conventions


def ray_verl_paths(shared_root):
    """Where jobs, code snapshots, the smoke probe and plugins live under a shared root, and the marker's name."""
    return conventions.paths(str(shared_root))


class FilterModule:
    def filters(self):
        return {"ray_verl_paths": ray_verl_paths}
